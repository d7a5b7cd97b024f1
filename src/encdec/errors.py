"""User-facing errors. The ``encdec`` command line prints them as one line (no traceback) and exits with 2."""

from __future__ import annotations


class EncdecError(ValueError):
    """A problem with the user's input (a file, a config value, a folder) whose message names the thing and the
    fix. Subclasses ``ValueError`` so library callers can catch it as one."""


class InputFileError(EncdecError):
    """A missing, unreadable, empty or malformed input file."""


class OverwriteError(EncdecError):
    """An output would replace something the user wrote, and ``--overwrite`` was not given."""
