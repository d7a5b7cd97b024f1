"""The ``encdec`` command line is the top-level package ``encdec_cli``, outside this package, so that ``encdec
--help`` answers without importing torch and transformers; this module keeps the import path ``encdec.cli``."""

from encdec_cli import build_parser, main, run

__all__ = ["build_parser", "main", "run"]
