"""Atomic outputs: a reader sees the old file or the new one, failures leave nothing behind, permissions follow
the umask, and a non-empty output folder is never replaced without consent."""

from __future__ import annotations

import os
import stat

import pytest

from encdec.errors import InputFileError, OverwriteError
from encdec.io_utils import atomic_output, atomic_write_json, ensure_output_dir, read_aligned_lines


def test_atomic_write_follows_the_umask_and_leaves_no_temporary_file(tmp_path) -> None:
    old = os.umask(0o022)
    try:
        atomic_write_json(tmp_path / "out.json", {"bleu": 1.0})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "out.json").stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path) -> None:
    target = tmp_path / "results.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_output(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("crash while writing")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_ensure_output_dir_refuses_a_non_empty_folder_without_overwrite(tmp_path) -> None:
    (tmp_path / "mine.txt").write_text("user data")
    with pytest.raises(OverwriteError, match="--overwrite"):
        ensure_output_dir(tmp_path, overwrite=False)
    assert (tmp_path / "mine.txt").exists()
    ensure_output_dir(tmp_path, overwrite=True)
    assert list(tmp_path.iterdir()) == []


def test_read_aligned_lines_names_both_files_and_counts(tmp_path) -> None:
    (tmp_path / "a.de").write_text("eins\nzwei\n")
    (tmp_path / "a.en").write_text("one\n")
    with pytest.raises(InputFileError, match=r"a\.de has 2 lines.*a\.en has 1"):
        read_aligned_lines(tmp_path / "a.de", tmp_path / "a.en")
