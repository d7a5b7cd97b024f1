"""The APIs ``encdec serve`` speaks, a line each: the module that holds its adapter (``ADAPTER``, an
``encdec.serve.adapter.Adapter``), what ``encdec serve --help`` says of it, and the module of its own flags, if it
has any. The app makes every adapter listed here, in this order (``encdec.serve.app``). Adding an API is its module
or folder, and its line here.

An API's flags module (standard library only, like this file: ``encdec --help`` and ``encdec serve --help`` read
both without importing encdec, which loads torch) has ``add_flags(group)``, which adds its flags to ``encdec
serve``'s parser (to an argument group titled with its summary), and ``settings(args)``, which turns the parsed
arguments into the keyword arguments of its adapter's ``Settings``; it may also say, as ``CHAR_LIMIT``, what
``--char-limit`` counts in it."""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple


class API(NamedTuple):
    module: str  # its dotted name, importable
    summary: str  # a few words for --help
    flags: str | None = None  # the dotted name of its flags module (standard library only), if it has flags


ADAPTERS = [
    API("encdec.serve.native", "the native API (POST /translate, a page that shows the alignment)"),
    API("encdec.serve.libretranslate", "LibreTranslate's API (under /libretranslate/)",
        "encdec.serve.libretranslate.flags"),
    API("encdec.serve.deepl", "DeepL's API (under /deepl: translate, glossaries, documents, usage)"),
]


def settings_from(args: Any) -> dict[str, dict[str, Any]]:
    """Each API's settings from ``encdec serve``'s parsed arguments, by its module: what its flags module's
    ``settings(args)`` makes of them."""
    return {api.module: importlib.import_module(api.flags).settings(args) for api in ADAPTERS if api.flags}


__all__ = ["ADAPTERS", "API", "settings_from"]
