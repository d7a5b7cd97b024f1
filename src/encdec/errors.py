"""User-facing errors. The ``encdec`` command line prints them as one line (no traceback) and exits with 2."""

from __future__ import annotations


class EncdecError(ValueError):
    """A problem with the user's input (a file, a config value, a folder) whose message names the thing and the
    fix. Subclasses ``ValueError`` so library callers can catch it as one."""


class InputFileError(EncdecError):
    """A missing, unreadable, empty or malformed input file."""


class OverwriteError(EncdecError):
    """An output would replace something the user wrote, and ``--overwrite`` was not given."""


class LanguageError(EncdecError):
    """A language the model lacks, a bilingual model asked for a language, or a multilingual one asked for no target
    language; the message names the model's languages."""


class OptionError(EncdecError):
    """A decoding option out of its range (``encdec.decoding_options.resolve``). ``field`` is the option at fault, by
    its Python name (``decoding_options.DecodeRequest``); ``problem`` says what is wrong, naming other options as
    ``{name}``. Each front end names the options in its own words: ``str(error)`` as the Python API does (`` `x_y`
    must be ...; raise `z`. ``), ``explain()`` for a JSON field (``must be ...; raise z.``, or its JSON names), and
    ``as_flags()`` for the command line (``--x-y must be ...; raise --z.``)."""

    def __init__(self, field: str, problem: str) -> None:
        self.field, self.problem = field, problem
        super().__init__(f"`{field}` {self.explain(lambda name: f'`{name}`')}")

    def explain(self, name=str) -> str:
        """The problem, each option it names written by ``name``."""
        return self.problem.format_map(_Names(name))

    def as_flags(self) -> str:
        flag = _flag
        return f"{flag(self.field)} {self.explain(flag)}"


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


class _Names(dict):
    def __init__(self, name) -> None:
        super().__init__()
        self.name = name

    def __missing__(self, key: str) -> str:
        return self.name(key)
