"""Corpus-scale translation: streamed in chunks, with progress, resumable after a crash, shared out over processes.

The most common offline job in NMT is translating a whole corpus: back-translation of monolingual text (Sennrich et
al. 2016), sequence-level distillation of a teacher into a student (Kim and Rush 2016), a dataset. ``run_chunks``
does it for any per-chunk job (``encdec translate``, ``encdec align``, ``encdec evaluate``):

- **Streaming.** The input is read a chunk of lines at a time (``chunk_size``, 1,000 by default), and each chunk's
  output is written, in input order, as soon as it is done: memory does not grow with the input. From a pipe a
  chunk also ends when no line has come for half a second, so ``encdec translate`` works as a filter in a shell
  pipeline, as ``marian-decoder`` and ``ct2-translator`` do.
- **Progress** on stderr: a bar with lines done, lines/s and the time left (the total is known for a file); when
  stderr is not a terminal, one line every few seconds instead; nothing with ``quiet``.
- **Resume.** ``ChunkFile`` writes ``OUTPUT`` through a side file of finished chunks, ``OUTPUT.partial``, flushed and
  fsynced chunk by chunk, with a record of the run beside it (``OUTPUT.partial.json``: the input, the models and
  the options, and how much is done). After a crash or ``kill -9`` the same command with ``--resume`` skips the
  finished chunks; the final file is byte-identical to an uninterrupted run's. A resume that differs in model or
  options, or in a finished line of the input, is refused in one line that names the difference. The lines not
  done yet may have changed: a run stopped by a line that is not UTF-8 goes on, once that line is fixed, from the
  chunks it finished (the output of a chunk depends on its own lines alone).
- **Processes and machines.** Under ``accelerate launch --num_processes N -m encdec translate ...`` (or ``torchrun``),
  process p translates chunks p, p + N, p + 2N, ... (round-robin), on its own device; after each round of N chunks
  ``torch.distributed`` gathers the outputs and the main process writes them in order. The output is byte-identical
  to one process's (on the same kind of device), and ``--resume`` works across process counts.

Chunks are the unit of all three: the chunk boundaries of a file depend on ``chunk_size`` alone, so every process,
and every resumed run, sees the same chunks.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from tqdm.auto import tqdm

from ..errors import EncdecError, InputFileError, OverwriteError
from ..folders import model_identity
from ..io_utils import (
    WriterLock,
    atomic_write_json,
    batched,
    count_lines,
    file_sha256,
    refuse_existing,
    refuse_overlap,
    require_file,
    text_lines,
)
from ..processes import process_state, rank_and_world
from ..stop_points import stop_point
from . import CHUNK_SIZE, load_engine
from .decoding import DecodeOptions, Engine, Hypothesis, decode_lines, resolve_options
from .sentences import decode_split

PIPE_IDLE_SECONDS = 0.5  # a chunk read from a pipe ends when no line has come for this long
PROGRESS_EVERY_SECONDS = 5.0  # stderr that is not a terminal: one progress line this often


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


class Progress:
    """Lines done on stderr: a tqdm bar on a terminal, else a line every ``PROGRESS_EVERY_SECONDS``; silent when
    ``quiet``."""

    def __init__(self, what: str, total: int | None, initial: int = 0, quiet: bool = False) -> None:
        self.what, self.total, self.done, self.quiet = what, total, initial, quiet
        self.began, self.started_at, self.last_line = time.monotonic(), initial, 0.0
        self.bar = None
        if not quiet and sys.stderr.isatty():
            self.bar = tqdm(total=total, initial=initial, desc=what, unit=" lines", unit_scale=True,
                            dynamic_ncols=True, file=sys.stderr)

    def update(self, lines: int) -> None:
        self.done += lines
        if self.bar is not None:
            self.bar.update(lines)
        elif not self.quiet and time.monotonic() - self.last_line >= PROGRESS_EVERY_SECONDS:
            self.last_line = time.monotonic()
            print(f"{self.what}: {self.describe()}", file=sys.stderr, flush=True)

    def describe(self) -> str:
        seconds = max(time.monotonic() - self.began, 1e-9)
        rate = (self.done - self.started_at) / seconds
        done = f"{self.done:,}/{self.total:,} lines" if self.total is not None else f"{self.done:,} lines"
        left = ""
        if self.total is not None and rate > 0:
            left = f", {(self.total - self.done) / rate:.0f} s left"
        return f"{done}, {rate:,.1f} lines/s{left}"

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif not self.quiet and self.done:
            print(f"{self.what}: done, {self.describe()}", file=sys.stderr, flush=True)


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


class Shard:
    """This process's place among the processes of a launch (``accelerate launch``, ``torchrun``): its rank, how many
    there are (``encdec.processes.rank_and_world``), its device; ``gather`` hands every process every process's
    result for one round of chunks."""

    def __init__(self) -> None:
        self.rank, self.world = rank_and_world()  # encdec.processes: rank 0 is the main process
        self.device = str(process_state().device) if self.world > 1 else "cpu"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def gather(self, result: Any) -> list[Any]:
        if self.world == 1:
            return [result]
        import torch.distributed as dist

        results: list[Any] = [None] * self.world
        dist.all_gather_object(results, result)
        return results

    def broadcast(self, value: Any) -> Any:
        """The main process's ``value``, on every process."""
        if self.world == 1:
            return value
        import torch.distributed as dist

        holder = [value]
        dist.broadcast_object_list(holder, src=0)
        return holder[0]


def run_chunks(chunks: Iterator[Chunk], work: Callable[[Chunk], str], output: ChunkFile | StreamOutput | None,
               progress: Progress, shard: Shard, collect: list[str] | None = None) -> None:
    """Do ``work`` on every chunk, process p of N taking chunks p, p + N, ...; the main process writes the outputs in
    input order (to ``output``, or appended to ``collect``) and counts them in ``progress``. An error in one
    process stops every process, and is raised in each."""
    try:
        run_rounds(chunks, work, output, shard, progress, collect)
        progress.close()
        if shard.is_main and output is not None:
            output.finish()
    finally:  # an error: the output stays resumable, and another writer may have it
        if output is not None:
            output.close()


def run_rounds(chunks: Iterator[Chunk], work: Callable[[Chunk], str], output: ChunkFile | StreamOutput | None,
               shard: Shard, progress: Progress, collect: list[str] | None) -> None:
    """``run_chunks``' loop: one round of ``shard.world`` chunks at a time."""
    for round_ in batched(chunks, shard.world):
        mine = round_[shard.rank] if shard.rank < len(round_) else None
        try:
            result = (True, work(mine) if mine is not None else None)
        except (EncdecError, ValueError, OSError) as error:
            result = (False, " ".join(str(error).split()))
        results = shard.gather(result)
        failed = [message for ok, message in results if not ok]
        if failed:
            raise EncdecError(failed[0])
        if shard.is_main:
            for chunk, (_, text) in zip(round_, results, strict=False):
                if output is not None:
                    output.write(len(chunk.lines), text)
                if collect is not None:
                    collect.append(text)
                progress.update(len(chunk.lines))


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


def on_main(shard: Shard, make: Callable[[], Any]) -> Any:
    """``make()`` on the main process only (opening the output), its refusal raised on every process alike."""
    made, message = None, None
    if shard.is_main:
        try:
            made = make()
        except EncdecError as error:
            message = str(error)
            if shard.world == 1:
                raise
    message = shard.broadcast(message)
    if message is not None:
        raise EncdecError(message)
    return made


@dataclass
class TranslationOutput:
    """What each input line becomes in ``encdec translate``'s output: its translation, or with ``n_best``, ``scores``
    or ``alignments`` the fields ``[ID |||] HYPOTHESIS [||| SCORE] [||| ALIGNMENT]`` (ID: the 0-based input line;
    up to ``n_best`` lines of them per input line, Moses's n-best format, the best log P(hypothesis | input) first;
    ``keep_duplicates``: a text may be listed more than once, see ``translate_detailed``); with ``split_sentences``,
    each line's translation put together from its sentences' (``sentences.decode_split``)."""

    n_best: int | None = None
    scores: bool = False
    alignments: bool = False
    alignment_layer: int | str | None = None
    alignment_head: int | None = None
    keep_duplicates: bool = False
    split_sentences: str | None = None  # a language ("": not known): each line translated sentence by sentence

    @property
    def detailed(self) -> bool:
        return self.n_best is not None or self.scores or self.alignments

    def options(self, generation_config: Any, **decoding: Any) -> DecodeOptions:
        """The decoding options of ``encdec translate``: ``decoding`` (``translate``'s, ``inference.options``) and
        this output's n-best list (ranked by log P), scores and alignments, resolved against the model's generation
        config (``decoding.resolve_options``)."""
        return resolve_options(generation_config, n_best=self.n_best, ranked=True, keep_duplicates=self.keep_duplicates,
                               scores=self.scores, alignments=self.alignments, alignment_layer=self.alignment_layer,
                               alignment_head=self.alignment_head, **decoding)

    def chunk(self, engine: Engine, tokenizer: Any, chunk: Chunk, options: DecodeOptions, batch_size: int = 32,
              truncate: bool = False) -> str:
        """The output text of one chunk (every line ended)."""
        if self.split_sentences is not None:  # one translation per line (inference.sentences)
            lines = decode_split(engine, tokenizer, chunk.lines, options, self.split_sentences or None, batch_size)
            return "".join(line + "\n" for line in lines)
        results = decode_lines(engine, tokenizer, chunk.lines, options, batch_size, truncate)
        if not self.detailed:
            return "".join(hypotheses[0].text + "\n" for hypotheses in results)
        return "".join(self.line(chunk.start + i, hypothesis) + "\n"
                       for i, hypotheses in enumerate(results) for hypothesis in hypotheses)

    def line(self, index: int, hypothesis: Hypothesis) -> str:
        fields = [str(index)] if self.n_best is not None else []
        fields.append(hypothesis.text)
        if self.scores:
            fields.append("" if hypothesis.score is None else f"{hypothesis.score:.4f}")
        if self.alignments:
            fields.append(hypothesis.alignment or "")
        return " ||| ".join(fields)


def translate_file(models: list[str], input_path: str | None, output_path: str | None, *,
                   form: TranslationOutput | None = None, chunk_size: int = CHUNK_SIZE, resume: bool = False,
                   overwrite: bool = False, quiet: bool = False, engine: str = "torch", quantize: str | None = None,
                   dtype: str | None = None, stdin: Any = None, stdout: Any = None, **options: Any) -> int:
    """``encdec translate``: the lines of ``input_path`` (or ``stdin``) translated into ``output_path`` (or
    ``stdout``), streamed, resumable and shared out over the processes of a launch (see the module docstring).
    ``models``: one model folder, or several (an ensemble); ``options``: ``translate``'s (the decoding options,
    ``batch_size``, ...). Returns the number of input lines (0: the input was empty, and so is the output)."""
    shard, form = Shard(), form or TranslationOutput()
    if input_path is None and (shard.world > 1 or resume):
        raise EncdecError("--resume and several processes need the input as a file: pass --input FILE.")
    if resume and output_path is None:
        raise EncdecError("--resume needs the output as a file: pass --output FILE.")
    if input_path is not None:
        require_file(input_path, "input file")
    if output_path is not None:
        refuse_overlap(output_path, [path for path in (input_path, *models) if path])
    record = {"options": {**options, **dataclasses.asdict(form), "engine": engine, "quantize": quantize,
                          "dtype": dtype, "chunk_size": chunk_size}}
    output = on_main(shard, lambda: open_output(output_path, input_path, models, record, resume, overwrite, stdout))
    done = shard.broadcast(output.done_lines if output is not None else 0)
    batch_size, truncate = options.pop("batch_size", 32), options.pop("truncate", False)
    try:  # a run refused before its first chunk leaves nothing behind (ChunkFile.close)
        engine_, tokenizer = load_engine(models if len(models) > 1 else models[0], engine, quantize=quantize,
                                         dtype=dtype, device=shard.device)
        decoding = form.options(engine_.generation_config, model_config=engine_.config, **options)
    except BaseException:
        if output is not None:
            output.close()
        raise
    chunks, total = open_chunks(input_path, chunk_size, skip=done, stdin=stdin)
    progress = Progress("encdec translate", total, initial=done, quiet=quiet or not shard.is_main)
    run_chunks(chunks, lambda chunk: form.chunk(engine_, tokenizer, chunk, decoding, batch_size, truncate), output,
               progress, shard)
    return progress.done


def open_output(output_path: str | None, input_path: str | None, models: list[str], record: dict[str, Any],
                resume: bool, overwrite: bool, stdout: Any) -> ChunkFile | StreamOutput:
    """The main process's output: a resumable file whose record names the input, models and options, or stdout."""
    if output_path is None:
        return StreamOutput(stdout if stdout is not None else sys.stdout)
    record = {"input": file_identity(input_path) if input_path else None,
              "models": [model_identity(model) for model in models], **record}
    return ChunkFile(output_path, record, resume=resume, overwrite=overwrite, input_path=input_path)


__all__ = ["Chunk", "ChunkFile", "Progress", "Shard", "StreamOutput", "TranslationOutput", "difference",
           "file_identity", "on_main", "open_chunks", "open_output", "paired_chunks", "run_chunks",
           "translate_file"]
