"""Fetching Multi30k, up to the network boundary: the downloads come from a stand-in for ``urlopen``."""

from __future__ import annotations

import gzip
import io
import urllib.error
from pathlib import Path

import pytest

from encdec.data.fetch import MULTI30K_SPLITS, MULTI30K_URL, fetch_multi30k
from encdec.errors import InputFileError


def corpus(short: str | None = None) -> dict[str, bytes]:
    """The gzipped files a download would get, by URL; ``short``: the one URL whose file misses a line."""
    files = {}
    for name, lines in MULTI30K_SPLITS.values():
        for lang in ("de", "en"):
            url = MULTI30K_URL.format(name=name, lang=lang)
            count = lines - (url == short)
            files[url] = gzip.compress("".join(f"{name} {lang} {i}\n" for i in range(count)).encode())
    return files


def opener_of(files: dict[str, bytes], asked: list[str]):
    def opener(url: str):
        asked.append(url)
        if url not in files:
            raise urllib.error.URLError("unreachable")
        return io.BytesIO(files[url])
    return opener


def test_downloads_each_file_once_under_the_recipes_names(tmp_path: Path) -> None:
    asked: list[str] = []
    out = fetch_multi30k(tmp_path / "m30k", opener=opener_of(corpus(), asked))
    expected = sorted(f"{prefix}.{lang}" for prefix in MULTI30K_SPLITS for lang in ("de", "en"))
    assert sorted(path.name for path in out.iterdir()) == expected
    assert (out / "test2016.en").read_text().splitlines()[0] == "test_2016_flickr en 0"
    assert len((out / "train.de").read_text().splitlines()) == 29000 and len(asked) == 6
    fetch_multi30k(tmp_path / "m30k", opener=opener_of(corpus(), asked))  # complete files are kept
    assert len(asked) == 6


def test_a_short_file_and_an_unreachable_host_are_named(tmp_path: Path) -> None:
    url = MULTI30K_URL.format(name="val", lang="en")
    with pytest.raises(InputFileError, match=r"val\.en has 1013 lines, but Multi30k's val\.en has 1014"):
        fetch_multi30k(tmp_path / "a", opener=opener_of(corpus(short=url), []))
    files = corpus()
    del files[url]
    with pytest.raises(InputFileError, match=r"Could not download .*val\.en\.gz.*--from"):
        fetch_multi30k(tmp_path / "b", opener=opener_of(files, []))


def test_from_links_an_existing_copy(tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    copy.mkdir()
    for prefix, (_, lines) in MULTI30K_SPLITS.items():
        for lang in ("de", "en"):
            (copy / f"{prefix}.{lang}").write_text("x\n" * lines)
    out = fetch_multi30k(tmp_path / "m30k", copy_from=copy, opener=opener_of({}, []))
    assert (out / "val.de").is_symlink() and (out / "val.de").resolve() == (copy / "val.de").resolve()
    (copy / "test2016.de").unlink()
    with pytest.raises(InputFileError, match=r"test2016\.de is missing; --from needs"):
        fetch_multi30k(tmp_path / "other", copy_from=copy)
