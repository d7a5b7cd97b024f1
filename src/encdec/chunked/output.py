"""Where a chunked job's output goes (``encdec.chunked``): a file written through a side file of finished chunks,
resumable after a crash or ``kill -9`` (``ChunkFile``), or a stream (``StreamOutput``)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from ..errors import EncdecError, InputFileError, OverwriteError
from ..io_utils import WriterLock, atomic_write_json, file_sha256, refuse_existing
from ..stop_points import stop_point


def file_identity(path: str | os.PathLike) -> dict[str, Any]:
    """What identifies an input file's content for a resume: its size and SHA-256 (a model folder's is
    ``encdec.folders.model_identity``)."""
    return {"path": str(Path(path).resolve()), "size": os.path.getsize(path), "sha256": file_sha256(path)}


def difference(old: Any, new: Any, where: str = "") -> str | None:
    """The first place two run records differ, in words (``the option batch_size: 32 before, 8 now``), or None."""
    if isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            found = difference(old.get(key), new.get(key), f"{where} {key}".strip())
            if found:
                return found
        return None
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            found = difference(a, b, f"{where} {i + 1}")
            if found:
                return found
        return None
    return None if old == new else f"{where}: {json.dumps(old)} before, {json.dumps(new)} now"


class ChunkFile:
    """``path`` written through ``path.partial``, chunk by chunk, each appended, flushed and fsynced, then recorded in
    ``path.partial.json`` (the run's record, the bytes and lines done, and the seconds spent on them over every
    attempt); ``finish`` renames it into place. With ``resume`` an interrupted run goes on where it stopped, if its
    record equals ``record``.

    With ``input_path`` (the file whose lines the chunks translate, whose identity is ``record["input"]``) the state
    also keeps the SHA-256 of the input's finished lines, so that a resume may differ from the record in the rest of
    the input: a run stopped by a line that is not UTF-8 is not lost when that line is fixed (see
    ``only_unfinished_input_differs``)."""

    def __init__(self, path: str | os.PathLike, record: dict[str, Any], resume: bool = False,
                 overwrite: bool = False, input_path: str | os.PathLike | None = None) -> None:
        self.path = Path(path)
        self.partial, self.state_path = self.side_files(self.path)
        self.record, self.done_lines, self.done_bytes = record, 0, 0
        self.began, self.seconds_before = time.perf_counter(), 0.0  # None: an older record kept no seconds
        self.input_path = None if input_path is None else Path(input_path)
        self.input_done, self.input_offset = hashlib.sha256(), 0  # the finished lines' bytes; where the rest begins
        # one writer at a time (a second command, or a --resume while the first still runs, is refused)
        self.lock = WriterLock(self.path.with_name(self.path.name + ".lock"), str(self.path)).acquire()
        try:
            self.start(resume, overwrite)
        except BaseException:
            self.lock.release()
            raise

    @staticmethod
    def side_files(path: str | os.PathLike) -> tuple[Path, Path]:
        """The files beside ``path`` that a run writes it through: ``path.partial`` (the finished chunks) and
        ``path.partial.json`` (the run's record), both gone once the run finishes."""
        path = Path(path)
        return path.with_name(path.name + ".partial"), path.with_name(path.name + ".partial.json")

    @classmethod
    def interrupted(cls, path: str | os.PathLike) -> bool:
        """Whether an interrupted run into ``path`` left its record behind, to go on with (``resume``)."""
        return cls.side_files(path)[1].is_file()

    def start(self, resume: bool, overwrite: bool) -> None:
        if resume and self.state_path.is_file():
            self.load_state()
        elif resume and self.path.exists() and not self.partial.exists():
            raise OverwriteError(f"{self.path} is complete (no {self.partial.name} to resume); pass --overwrite to "
                                 "translate again, or choose another output.")
        else:
            refuse_existing(self.path, overwrite, "output file", example="output.txt")
            if self.state_path.exists() and not overwrite:
                raise OverwriteError(f"{self.partial} holds an interrupted run; pass --resume to go on with it, or "
                                     "--overwrite to start again.")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with open(self.partial, "r+b" if self.done_bytes else "wb") as f:
                f.truncate(self.done_bytes)  # drop a chunk that was being written when the run stopped
        except OSError as error:
            raise EncdecError(f"Cannot write {self.partial}: {error.strerror}; choose another output.") from error
        if not self.done_bytes:
            self.save_state()

    def load_state(self) -> None:
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as error:
            raise InputFileError(f"{self.state_path} is unreadable ({error}); pass --overwrite to start again.") \
                from error
        found = difference(state.get("record"), self.record)
        finished_input = self.finished_input(state["lines"])
        if found and not (finished_input is not None and self.only_unfinished_input_differs(state, finished_input)):
            raise EncdecError(f"--resume: this run differs from the interrupted one in {found}; rerun it as it "
                              "was, or pass --overwrite to start again.")
        if not self.partial.is_file() or self.partial.stat().st_size < state["bytes"]:
            raise InputFileError(f"{self.partial} is missing or shorter than {self.state_path.name} records; pass "
                                 "--overwrite to start again.")
        self.done_lines, self.done_bytes = state["lines"], state["bytes"]
        self.seconds_before = state.get("seconds")
        if finished_input is not None:
            self.input_done, self.input_offset = finished_input

    def only_unfinished_input_differs(self, state: dict[str, Any], finished_input: tuple[Any, int]) -> bool:
        """Whether the interrupted run's record differs from this one in the input's size and SHA-256 alone, while
        the input's finished lines are the same bytes as then (``input_sha256_done`` in its state): what a fix of a
        line after them (a line that was not UTF-8) changes. The resumed output is then the uninterrupted output of
        the input as it is now, as each chunk's output depends on its own lines alone."""
        old, new = state.get("record"), self.record
        if "input_sha256_done" not in state or not (isinstance(old, dict) and isinstance(old.get("input"), dict)
                                                     and isinstance(new.get("input"), dict)):
            return False
        content = ("size", "sha256")
        old = {**old, "input": {key: value for key, value in old["input"].items() if key not in content}}
        new = {**new, "input": {key: value for key, value in new["input"].items() if key not in content}}
        return difference(old, new) is None and finished_input[0].hexdigest() == state["input_sha256_done"]

    def finished_input(self, lines: int) -> tuple[Any, int] | None:
        """The SHA-256 (a ``hashlib`` object, to go on with) of the first ``lines`` lines of the input, and the
        offset after them; None without an input, or when it has fewer lines."""
        if self.input_path is None:
            return None
        digest = hashlib.sha256()
        try:
            with open(self.input_path, "rb") as f:
                for _ in range(lines):
                    line = f.readline()
                    if not line:
                        return None
                    digest.update(line)
                return digest, f.tell()
        except OSError:
            return None

    def advanced_input(self, lines: int) -> tuple[Any, int]:
        """The SHA-256 of the input's finished lines and the offset after them once the next ``lines`` lines (a
        chunk's) are finished too, read from where the last chunk's ended."""
        digest, offset = self.input_done.copy(), self.input_offset
        if self.input_path is None:
            return digest, offset
        try:
            with open(self.input_path, "rb") as f:
                f.seek(offset)
                for _ in range(lines):
                    digest.update(f.readline())
                return digest, f.tell()
        except OSError as error:
            raise InputFileError(f"Cannot read {self.input_path} again: {error.strerror}. The first "
                                 f"{self.done_lines:,} lines are done: rerun the command with --resume.") from error

    @classmethod
    def recorded_seconds(cls, path: str | os.PathLike) -> float | None:
        """The seconds that earlier attempts at ``path`` spent on the chunks they finished: 0.0 when there was no
        attempt, None when its record predates the count or is unreadable (the resume then refuses it, naming it)."""
        state_path = cls.side_files(path)[1]
        if not state_path.is_file():
            return 0.0
        try:
            return json.loads(state_path.read_text(encoding="utf-8")).get("seconds")
        except (OSError, ValueError):
            return None

    def seconds(self) -> float | None:
        """Seconds spent on the finished chunks and this attempt so far, over every attempt (None: unknown)."""
        if self.seconds_before is None:
            return None
        return round(self.seconds_before + time.perf_counter() - self.began, 1)

    def save_state(self) -> None:
        state = {"record": self.record, "lines": self.done_lines, "bytes": self.done_bytes, "seconds": self.seconds()}
        if self.input_path is not None:
            state["input_sha256_done"] = self.input_done.hexdigest()
        atomic_write_json(self.state_path, state)

    def write(self, lines: int, text: str) -> None:
        """One finished chunk of ``lines`` input lines, whose output is ``text``."""
        data = text.encode("utf-8")
        input_done = self.advanced_input(lines)
        try:
            with open(self.partial, "ab") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            self.done_lines, self.done_bytes = self.done_lines + lines, self.done_bytes + len(data)
            self.input_done, self.input_offset = input_done
            self.save_state()
        except OSError as error:  # disk full, or the folder went away: what is finished stays resumable
            raise EncdecError(f"Cannot write {self.partial}: {error.strerror}. The first {self.done_lines:,} lines "
                              "are done: make room, then rerun the command with --resume.") from error
        stop_point("chunk")

    def finish(self) -> None:
        os.replace(self.partial, self.path)
        self.state_path.unlink(missing_ok=True)
        self.close()

    def close(self) -> None:
        """Let another writer have the output (``finish`` does; a run that stopped on an error too). A run that
        stopped before finishing a chunk leaves nothing behind: a fixed rerun needs neither --resume nor
        --overwrite."""
        if self.lock.fd is not None and self.done_lines == 0:
            self.partial.unlink(missing_ok=True)
            self.state_path.unlink(missing_ok=True)
        self.lock.release()


class StreamOutput:
    """Output to a stream (stdout), flushed after each chunk."""

    done_lines = 0

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, lines: int, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def finish(self) -> None:
        pass

    def close(self) -> None:
        pass


__all__ = ["ChunkFile", "StreamOutput", "difference", "file_identity"]
