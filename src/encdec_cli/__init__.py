"""The ``encdec`` command line. Each subcommand parses its arguments and calls one function in the package.

It is a package of its own, outside the ``encdec`` package: importing ``encdec`` registers the models with
transformers, which imports torch and transformers (seconds), and ``encdec --help`` or a mistyped argument should
answer at once. So its modules import only the standard library at the top, and each command imports what it needs
from ``encdec`` once its arguments have been parsed. (``python -m encdec`` imports the package first, so only the
``encdec`` command is instant.)

- ``parser``: the subcommands, their flags and help (``build_parser``); the engine and export choices from encdec's
  backend registry (``encdec/backends.py``, standard library only), read by its file location;
- ``commands``: what each subcommand does (``cmd_*``), importing from ``encdec`` inside the function;
- ``runner``: ``main`` and ``run``: the launcher and thread set-up, and user errors as one line.

A user error (a missing file, a bad config value, an existing output) prints one line naming the problem and
the fix, and exits with status 2; set ``ENCDEC_DEBUG=1`` for the full traceback.
"""

from .parser import build_parser
from .runner import describe_processes, die_with_launcher, main, run

__all__ = ["build_parser", "describe_processes", "die_with_launcher", "main", "run"]
