"""The package's version, in a module of its own (pyproject.toml reads it here too): the modules that write it (model
cards, the server's ``/info``, Hub uploads) read it here, importing no stage, where ``encdec/__init__.py`` imports
several."""

__version__ = "0.1.0"
