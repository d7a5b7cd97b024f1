"""The APIs ``encdec serve`` speaks, a line each: the module that holds its adapter (``ADAPTER``, an
``encdec.serve.adapter.Adapter``), and what ``encdec serve --help`` says of it. The app makes every adapter listed
here, in this order (``encdec.serve.app``). Adding an API is its module or folder, and its line here.

Standard library only: ``encdec --help`` reads this file without importing encdec (which loads torch)."""

from __future__ import annotations

from typing import NamedTuple


class API(NamedTuple):
    module: str  # its dotted name, importable
    summary: str  # a few words for --help


ADAPTERS = [
    API("encdec.serve.native", "the native API (POST /translate, a page that shows the alignment)"),
    API("encdec.serve.libretranslate", "LibreTranslate's API (under /libretranslate/)"),
]

__all__ = ["ADAPTERS", "API"]
