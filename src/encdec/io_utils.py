"""Small file helpers: every output is written atomically, and nothing is overwritten without consent."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from .errors import InputFileError, OverwriteError


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``: a reader sees
    the old file or the new one, never half of one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | os.PathLike, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def ensure_output_dir(path: str | os.PathLike, overwrite: bool, what: str = "output directory") -> Path:
    """Create ``path``; refuse an existing non-empty folder unless ``overwrite`` (then it is emptied)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise OverwriteError(f"The {what} {path} exists and is a file; choose another path.")
    if path.is_dir() and any(path.iterdir()):
        if not overwrite:
            raise OverwriteError(f"The {what} {path} already exists and is not empty; pass --overwrite to replace it "
                                 "or choose another path.")
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def require_file(path: str | os.PathLike, what: str = "file") -> Path:
    """Return ``path`` if it is a readable file, else raise an ``InputFileError`` naming it."""
    path = Path(path)
    if not path.exists():
        raise InputFileError(f"The {what} {path} does not exist; check the path.")
    if not path.is_file():
        raise InputFileError(f"The {what} {path} is not a file.")
    if not os.access(path, os.R_OK):
        raise InputFileError(f"The {what} {path} is not readable; check its permissions.")
    return path
