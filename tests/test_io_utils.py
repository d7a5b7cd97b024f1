"""Atomic outputs: a reader sees the old file or the new one, failures leave nothing behind, permissions follow
the umask, and a non-empty output folder is never replaced without consent."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

import encdec
from encdec.errors import EncdecError, InputFileError, OverwriteError
from encdec.io_utils import (
    WriterLock,
    atomic_output,
    atomic_write_json,
    count_text_lines,
    ensure_output_dir,
    read_aligned_lines,
    refuse_existing,
    text_lines,
)
from test_threads import first_line


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


def test_refuse_existing_is_the_one_answer_to_may_i_write_here(tmp_path) -> None:
    """A file or a non-empty folder is replaced only with consent, in one message that names the output, the flag
    that consents and the one that moves it; a file where a folder goes, or a folder where a file goes, never."""
    taken, empty, new = tmp_path / "taken", tmp_path / "empty", tmp_path / "new"
    taken.mkdir()
    (taken / "mine.txt").write_text("user data")
    empty.mkdir()
    assert refuse_existing(new, False, "output folder", folder=True) == new
    assert refuse_existing(empty, False, "output folder", folder=True) == empty
    assert refuse_existing(taken, True, "output folder", folder=True) == taken
    with pytest.raises(OverwriteError) as refused:
        refuse_existing(taken, False, "export folder", folder=True)
    assert str(refused.value) == (f"The export folder {taken} already exists and is not empty; pass --overwrite to "
                                  "replace it or choose another --output path.")
    with pytest.raises(OverwriteError) as refused:
        refuse_existing(taken / "mine.txt", False, "plot file", "--out")
    assert str(refused.value) == (f"The plot file {taken / 'mine.txt'} already exists; pass --overwrite to replace it "
                                  "or choose another --out path.")
    assert refuse_existing(taken / "mine.txt", True, "plot file") == taken / "mine.txt"
    with pytest.raises(OverwriteError) as refused:
        refuse_existing(taken, False, "output directory", "training.output_dir", folder=True,
                        consent="--training.overwrite true", resume="--training.resume_from_checkpoint true")
    assert str(refused.value) == (f"The output directory {taken} already exists and is not empty; pass "
                                  "--training.overwrite true to replace it, --training.resume_from_checkpoint true to "
                                  "continue it, or choose another training.output_dir path.")
    with pytest.raises(OverwriteError, match=r"exists and is a file; choose another --output path\.$"):
        refuse_existing(taken / "mine.txt", True, "output folder", folder=True)
    with pytest.raises(OverwriteError, match=r"is a folder; give a file path such as .*results\.json\.$"):
        refuse_existing(taken, True, "output file")
    card = taken / "README.md"
    card.write_text("a card")
    with pytest.raises(OverwriteError, match=r"README\.md already exists; pass overwrite=True to replace it\.$"):
        refuse_existing(card, False, "model card", option=None, consent="overwrite=True")
    assert (taken / "mine.txt").read_text() == "user data"


def test_read_aligned_lines_names_both_files_and_counts(tmp_path) -> None:
    (tmp_path / "a.de").write_text("eins\nzwei\n")
    (tmp_path / "a.en").write_text("one\n")
    with pytest.raises(InputFileError, match=r"a\.de has 2 lines.*a\.en has 1"):
        read_aligned_lines(tmp_path / "a.de", tmp_path / "a.en")


def test_a_line_that_is_not_utf8_is_named_by_its_number(tmp_path) -> None:
    """The streaming readers name the first line that is not UTF-8 (1-based, as editors count), and where in it:
    ``text_lines`` (``encdec translate``'s chunks) its byte in the line, ``count_text_lines`` (the training data's
    check) its line across blocks of 1 MiB."""
    lines = [b"eins", b"zwei", b"M\xe4rz", b"vier"]
    with pytest.raises(InputFileError) as error:
        list(text_lines(iter(line + b"\n" for line in lines), "in.txt"))
    assert str(error.value) == ("in.txt, line 3, is not UTF-8 (byte 2 of the line: invalid continuation byte); "
                                "convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8`.")
    assert list(text_lines(iter([b"\xef\xbb\xbfeins\r\n", b"zwei"]), "in.txt")) == ["eins", "zwei"]
    path = tmp_path / "big.txt"
    path.write_bytes(b"x" * 99 + b"\n" + b"ok\n" * 600_000 + b"M\xe4rz\n")  # the bad line lies in the second block
    with pytest.raises(InputFileError) as error:
        count_text_lines(path, "source file")
    assert str(error.value) == (f"The source file {path}, line 600002, is not UTF-8 (invalid continuation byte); "
                                "convert the file to UTF-8, e.g. `iconv -f latin1 -t utf-8`.")


# The holder imports encdec.io_utils without encdec/__init__.py (an empty package of the same folder stands in), so
# it starts in a fraction of a second instead of importing torch and transformers for a lock.
HOLDER = ("import sys, types\npackage = types.ModuleType('encdec')\npackage.__path__ = [sys.argv[2]]\n"
          "sys.modules['encdec'] = package\nfrom encdec.io_utils import WriterLock\n"
          "WriterLock(sys.argv[1], 'the output').acquire()\nprint('held', flush=True)\nsys.stdin.readline()\n")


def hold_lock(path) -> subprocess.Popen:
    """Another process that holds ``WriterLock(path)`` (this checkout's io_utils) until its stdin gives a line (or it
    is killed)."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), encdec.__path__[0]], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert first_line(holder, timeout=120) == b"held\n", "the holder did not take the lock"
    return holder


def test_a_writer_lock_refuses_another_process_and_dies_with_its_holder(tmp_path) -> None:
    lock_path = tmp_path / "out.txt.lock"
    holder = hold_lock(lock_path)
    try:
        with pytest.raises(EncdecError) as refused:
            WriterLock(lock_path, "out.txt").acquire()
        assert str(refused.value) == (f"out.txt is being written by another process (PID {holder.pid}, which holds "
                                      f"{lock_path}); wait for it to finish, or stop it, then rerun.")
    finally:
        holder.kill()  # kill -9: the kernel drops its lock, and no stale lock stays behind
        holder.wait(timeout=60)
    with WriterLock(lock_path, "out.txt"):
        assert lock_path.read_text() == f"{os.getpid()}\n"
        with WriterLock(lock_path, "out.txt"):  # this process again (locks belong to processes): granted
            pass
    assert not lock_path.exists()
