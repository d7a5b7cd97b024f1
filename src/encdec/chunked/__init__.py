"""Long jobs over many lines, run in chunks: streamed, with progress, resumable after a crash, shared out over
processes. ``encdec translate``, ``encdec align`` and ``encdec evaluate`` (``encdec.inference.corpus`` and
``encdec.inference.evaluation``) and ``encdec distill``'s teacher translation run on it; ``run_chunks`` does it for any
per-chunk job (a function from a chunk of lines to its output text):

- **Streaming** (``readers``). The input is read a chunk of lines at a time (``chunk_size``, 1,000 by default), and
  each chunk's output is written, in input order, as soon as it is done: memory does not grow with the input. From a
  pipe a chunk also ends when no line has come for half a second, so ``encdec translate`` works as a filter in a
  shell pipeline, as ``marian-decoder`` and ``ct2-translator`` do.
- **Progress** (``progress``) on stderr: a bar with lines done, lines/s and the time left (the total is known for a
  file); when stderr is not a terminal, one line every few seconds instead; nothing with ``quiet``.
- **Resume** (``output``). ``ChunkFile`` writes ``OUTPUT`` through a side file of finished chunks,
  ``OUTPUT.partial``, flushed and fsynced chunk by chunk, with a record of the run beside it
  (``OUTPUT.partial.json``: the input, the models and the options, and how much is done). After a crash or
  ``kill -9`` the same command with ``--resume`` skips the finished chunks; the final file is byte-identical to an
  uninterrupted run's. A resume that differs in model or options, or in a finished line of the input, is refused in
  one line that names the difference. The lines not done yet may have changed: a run stopped by a line that is not
  UTF-8 goes on, once that line is fixed, from the chunks it finished (the output of a chunk depends on its own lines
  alone).
- **Processes and machines** (``encdec.processes.Shard``: which process does what). Under ``accelerate launch
  --num_processes N -m encdec translate ...`` (or ``torchrun``), process p does chunks p, p + N, p + 2N, ...
  (round-robin), on its own device; after each round of N chunks ``torch.distributed`` gathers the outputs and the
  main process writes them in order. The output is byte-identical to one process's (on the same kind of device), and
  ``--resume`` works across process counts.

Chunks are the unit of all three: the chunk boundaries of a file depend on ``chunk_size`` alone, so every process,
and every resumed run, sees the same chunks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from ..errors import EncdecError
from ..io_utils import batched
from ..processes import Shard
from .output import ChunkFile, StreamOutput, difference, file_identity
from .progress import Progress
from .readers import Chunk, file_chunks, open_chunks, paired_chunks, stream_chunks


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
        mine = shard.mine(round_)
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


__all__ = ["Chunk", "ChunkFile", "Progress", "StreamOutput", "difference", "file_chunks", "file_identity",
           "open_chunks", "paired_chunks", "run_chunks", "stream_chunks"]
