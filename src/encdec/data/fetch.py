"""Fetching the Multi30k corpus (Elliott et al. 2016, "Multi30K: Multilingual English-German Image Descriptions"),
the De-En benchmark of the recipes in ``configs/multi30k-*.yaml``.

The data is for research use only and is never part of the repository: ``fetch_multi30k`` downloads the raw Task 1
files from the dataset's own repository (github.com/multi30k/dataset, ``data/task1/raw``), or links them from a
copy already on the machine, into ``data/multi30k`` as the recipes read them: ``{train,val,test2016}.{de,en}``,
one sentence per line. Each file is checked against the published line counts.

    python scripts/fetch_multi30k.py                       # download into data/multi30k
    python scripts/fetch_multi30k.py --from /data/multi30k  # link an existing copy instead
"""

from __future__ import annotations

import gzip
import os
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from ..errors import InputFileError
from ..io_utils import atomic_output, count_lines

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/{name}.{lang}.gz"
# the recipes' file prefix -> the dataset repository's, and the published number of sentences
MULTI30K_SPLITS = {"train": ("train", 29000), "val": ("val", 1014), "test2016": ("test_2016_flickr", 1000)}
MULTI30K_LANGUAGES = ("de", "en")


def check_lines(path: Path, expected: int, origin: str) -> None:
    """The file holds ``expected`` lines, else an ``InputFileError`` naming it, both counts and where it came from."""
    found = count_lines(path)
    if found != expected:
        raise InputFileError(f"{path} has {found} lines, but Multi30k's {path.name} has {expected} (from {origin}); "
                             "the copy is incomplete or another version: fetch it again.")


def download(url: str, path: Path, opener: Callable[[str], BinaryIO]) -> None:
    """Download the gzipped ``url`` into ``path`` (decompressed, written atomically)."""
    try:
        with opener(url) as response, atomic_output(path) as tmp:
            tmp.write_bytes(gzip.decompress(response.read()))
    except OSError as error:  # URLError, HTTPError and bad gzip data are OSErrors
        raise InputFileError(f"Could not download {url} ({error}); check the network, or pass --from with a folder "
                             "that holds the files.") from error


def fetch_multi30k(destination: str | os.PathLike = "data/multi30k", copy_from: str | os.PathLike | None = None,
                   opener: Callable[[str], BinaryIO] = urllib.request.urlopen) -> Path:
    """Put Multi30k De-En into ``destination``: downloaded, or symbolic links to the files in ``copy_from`` (a
    folder with ``train.de``, ``val.en``, ``test2016.de``, ...). Files already there with the right line count are
    kept. Returns ``destination``."""
    destination = Path(destination)
    destination.mkdir(parents=True, exist_ok=True)
    for prefix, (name, lines) in MULTI30K_SPLITS.items():
        for lang in MULTI30K_LANGUAGES:
            path = destination / f"{prefix}.{lang}"
            if path.is_file() and count_lines(path) == lines:
                continue
            if copy_from is not None:
                source = Path(copy_from).resolve() / path.name
                if not source.is_file():
                    raise InputFileError(f"{source} is missing; --from needs a folder with {path.name} and the other "
                                         "Multi30k files (train, val, test2016, in de and en).")
                path.unlink(missing_ok=True)
                path.symlink_to(source)
                origin = str(source)
            else:
                origin = MULTI30K_URL.format(name=name, lang=lang)
                download(origin, path, opener)
            check_lines(path, lines, origin)
    return destination


__all__ = ["MULTI30K_SPLITS", "MULTI30K_URL", "fetch_multi30k"]
