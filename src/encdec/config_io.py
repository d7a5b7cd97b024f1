"""Run settings as YAML parsed into dataclasses: unknown keys and wrong types are errors that name the key.

No Python is ever executed from a config file (``yaml.safe_load`` only).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from .errors import EncdecError
from .io_utils import require_file

T = TypeVar("T")
# the words YAML 1.1 reads as booleans, which a boolean setting takes from the command line
YAML_BOOLEANS = {"yes": True, "y": True, "on": True, "no": False, "n": False, "off": False}


def _check_type(where: str, value: Any, annotation: Any) -> Any:
    """Return ``value`` converted to ``annotation`` where that is lossless (int -> float), else raise."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(annotation)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _check_type(where, value, option)
            except EncdecError as error:
                errors.append(str(error))
        raise EncdecError(errors[0] if len(errors) == 1 else f"`{where}` has the wrong type: got {value!r} "
                          f"({type(value).__name__}), expected {annotation}.")
    if origin is dict:
        if not isinstance(value, dict):
            raise EncdecError(f"`{where}` must be a mapping, got {value!r}.")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise EncdecError(f"`{where}` must be a list, got {value!r}.")
        (item_type,) = typing.get_args(annotation) or (Any,)
        return [_check_type(f"{where}[{i}]", v, item_type) for i, v in enumerate(value)]
    if annotation is Any:
        return value
    if dataclasses.is_dataclass(annotation):
        return from_dict(annotation, value, where)
    if annotation is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if annotation is float and isinstance(value, str):  # YAML 1.1 reads `1e-3` as a string
        try:
            return float(value)
        except ValueError:
            pass
    if annotation is str and isinstance(value, bool):
        raise EncdecError(f"`{where}` must be a string, got {value!r}: YAML reads unquoted no/yes/off/on as "
                          f"booleans, so quote the value (e.g. \"no\").")
    if annotation is bool and isinstance(value, str) and value.lower() in YAML_BOOLEANS:
        return YAML_BOOLEANS[value.lower()]
    if annotation is bool and not isinstance(value, bool) or annotation is not bool and isinstance(value, bool):
        raise EncdecError(f"`{where}` must be {annotation.__name__}, got {value!r}.")
    if not isinstance(value, annotation):
        raise EncdecError(f"`{where}` must be {annotation.__name__}, got {value!r} ({type(value).__name__}).")
    return value


def from_dict(cls: type[T], data: Any, where: str = "config") -> T:
    """Build the dataclass ``cls`` from a mapping, refusing unknown keys (listing the valid ones) and wrong types."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise EncdecError(f"`{where}` must be a mapping of keys to values, got {data!r}.")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise EncdecError(f"Unknown key `{where}.{unknown[0]}`; valid keys of `{where}` are: {', '.join(fields)}.")
    hints = typing.get_type_hints(cls)
    values = {name: _check_type(f"{where}.{name}", value, hints[name]) for name, value in data.items()}
    try:
        return cls(**values)
    except TypeError as error:  # a required field is missing
        raise EncdecError(f"`{where}`: {error}") from None


def parse_override(text: str) -> Any:
    """A command-line value is read as YAML, so ``true``, ``[1, 2]`` and ``null`` mean what they say; YAML 1.1
    reads ``1e-3`` as a string, so a string that parses as a number becomes one. YAML 1.1 also reads ``no``, ``yes``,
    ``on`` and ``off`` as booleans: on a command line they stay words (``--training.eval_strategy no``), which a
    boolean setting still takes (``_check_type``)."""
    value = yaml.safe_load(text)
    if isinstance(value, bool) and text.strip().lower() not in ("true", "false"):
        return text.strip()
    if isinstance(value, str):
        try:
            return float(value) if value.strip().lower() not in {"nan", "inf", "-inf", "infinity"} else value
        except ValueError:
            return value
    return value


def apply_overrides(data: dict, overrides: list[str]) -> dict:
    """Apply ``--section.key value`` pairs (``section.key=value`` also works) to the raw YAML mapping."""
    pairs: list[tuple[str, str]] = []
    items = list(overrides)
    while items:
        item = items.pop(0)
        if not item.startswith("--"):
            raise EncdecError(f"Override {item!r} must look like `--section.key value`.")
        key = item[2:]
        if "=" in key:
            key, value = key.split("=", 1)
        elif items:
            value = items.pop(0)
        else:
            raise EncdecError(f"Override `--{key}` has no value; write `--{key} VALUE`.")
        pairs.append((key, value))
    for key, value in pairs:
        node = data
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise EncdecError(f"Override `--{key}`: `{part}` is not a section.")
        node[leaf.replace("-", "_")] = parse_override(value)
    return data


def load_yaml(path: str | Path) -> dict:
    path = require_file(path, "config file")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as error:
        raise EncdecError(f"{path} is not valid YAML: {error}") from None
    if not isinstance(data, dict):
        raise EncdecError(f"{path} must hold a mapping of sections (model, data, tokenizer, training, ...).")
    return data
