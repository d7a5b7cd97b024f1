"""Reading a job's input a chunk of lines at a time (``encdec.chunked``): a UTF-8 file, two line-aligned files, or a
stream, whose chunk boundaries depend on ``chunk_size`` alone (a stream's also on pauses in its input)."""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ..errors import EncdecError
from ..io_utils import batched, count_lines, text_lines

PIPE_IDLE_SECONDS = 0.5  # a chunk read from a pipe ends when no line has come for this long


@dataclass(frozen=True)
class Chunk:
    index: int  # 0-based chunk number
    start: int  # 0-based number of its first line in the input
    lines: list[str]


def file_chunks(path: Path, chunk_size: int, skip: int = 0) -> Iterator[Chunk]:
    """The chunks of a UTF-8 text file from line ``skip`` on (a multiple of ``chunk_size``); a line that is not UTF-8
    is an ``InputFileError`` naming it."""
    with open(path, "rb") as raw:
        lines = text_lines(raw, str(path))
        for _ in range(skip):
            next(lines)
        for index, lines_ in enumerate(batched(lines, chunk_size), start=skip // chunk_size):
            yield Chunk(index, index * chunk_size, lines_)


def paired_chunks(source_path: str | os.PathLike, target_path: str | os.PathLike, chunk_size: int, skip: int = 0
                  ) -> Iterator[Chunk]:
    """The chunks of two line-aligned files together: each line a (source, target) pair."""
    sources = file_chunks(Path(source_path), chunk_size, skip)
    targets = file_chunks(Path(target_path), chunk_size, skip)
    for source, target in zip(sources, targets, strict=True):
        yield Chunk(source.index, source.start, list(zip(source.lines, target.lines, strict=True)))


def stream_chunks(raw: Iterable[bytes], name: str, chunk_size: int, idle: float = PIPE_IDLE_SECONDS
                  ) -> Iterator[Chunk]:
    """The chunks of a stream (stdin): ``chunk_size`` lines, or fewer when no line has come for ``idle`` seconds, so
    that output follows input in a pipeline. A thread reads; its errors surface here."""
    lines: queue.Queue = queue.Queue(maxsize=4 * chunk_size)
    end = object()

    def read() -> None:
        try:
            for line in text_lines(raw, name):
                lines.put(line)
        except BaseException as error:  # noqa: BLE001 (handed to the reading side, which raises it)
            lines.put(error)
        lines.put(end)

    threading.Thread(target=read, daemon=True).start()
    chunk: list[str] = []
    index = start = 0
    while True:
        try:
            item = lines.get(timeout=idle) if chunk else lines.get()
        except queue.Empty:  # the writer paused: send on what there is
            item = None
        if isinstance(item, BaseException):
            raise item
        if item is not None and item is not end:
            chunk.append(item)
        if chunk and (item is None or item is end or len(chunk) == chunk_size):
            yield Chunk(index, start, chunk)
            index, start, chunk = index + 1, start + len(chunk), []
        if item is end:
            return


def open_chunks(input_path: str | os.PathLike | None, chunk_size: int, skip: int = 0,
                stdin: BinaryIO | Iterable[bytes] | None = None) -> tuple[Iterator[Chunk], int | None]:
    """The chunks of ``input_path`` (from line ``skip``), or of ``stdin`` when it is None, and the total number of
    lines (None for a stream)."""
    if chunk_size < 1:
        raise EncdecError(f"--chunk-size must be at least 1, got {chunk_size}.")
    if input_path is None:
        if skip:
            raise EncdecError("--resume needs the input as a file (--input FILE): a stream cannot be read again.")
        return stream_chunks(stdin, "standard input", chunk_size), None
    path = Path(input_path)
    return file_chunks(path, chunk_size, skip), count_lines(path)


__all__ = ["PIPE_IDLE_SECONDS", "Chunk", "file_chunks", "open_chunks", "paired_chunks", "stream_chunks"]
