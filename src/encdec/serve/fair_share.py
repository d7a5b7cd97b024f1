"""A large request's jobs fed to a model's batcher a few at a time, so that other clients' requests run between
them (a translated file's sentences).

``FairShare`` stands in for a ``DynamicBatcher`` where ``core.translate_parts`` submits: it answers with
the jobs' futures at once and feeds the jobs to the batcher in chunks of ``chunk`` jobs, at most ``WINDOW`` chunks
waiting or decoding at a time; a chunk that finds the queue full (``--max-queue``, filled by other clients) waits
for room and tries again instead of being refused. So a file holds at most half the queue (and two batches), other
clients' requests queue between its chunks, and the batcher's queue bound holds for everyone.
"""

from __future__ import annotations

import asyncio
from collections import deque
from concurrent.futures import Future
from typing import Any

from .limits import QueueFull

WINDOW = 2  # chunks of one request queued or decoding at once: the next is queued while one decodes
RETRY_SECONDS = 0.05  # how soon a chunk that found the queue full tries again


def chunk_size(batcher: Any) -> int:
    """Jobs a chunk holds: a batch, and together at most half the queue (``--max-queue``)."""
    if batcher.max_queue is None:
        return batcher.max_batch_size
    return max(1, min(batcher.max_batch_size, batcher.max_queue // (2 * WINDOW)))


class FairShare:
    """One request's way into ``batcher`` (module docstring): ``submit`` once, then ``close`` when done (or failed),
    which drops the jobs not fed yet."""

    def __init__(self, batcher: Any) -> None:
        self.batcher, self.chunk = batcher, chunk_size(batcher)
        self.left: deque[Any] = deque()
        self.task: asyncio.Task | None = None

    @property
    def max_batch_size(self) -> int:
        return self.batcher.max_batch_size

    def submit(self, jobs: list[Any]) -> list[Future]:
        """The jobs' futures; the jobs go to the batcher from a task of the running event loop."""
        self.left.extend(jobs)
        self.task = asyncio.get_running_loop().create_task(self.feed())
        return [job.future for job in jobs]

    async def feed(self) -> None:
        queued: deque[list[Future]] = deque()
        chunk: list[Any] = []
        try:
            while self.left:
                if len(queued) == WINDOW:  # the oldest chunk answered (or failed) before the next goes in
                    await asyncio.wait([asyncio.wrap_future(future) for future in queued.popleft()])
                chunk = [self.left.popleft() for _ in range(min(self.chunk, len(self.left)))]
                await self.put(chunk)
                queued.append([job.future for job in chunk])
        except Exception as error:  # the batcher stopped: every job left gets the error as its answer
            for job in (*chunk, *self.left):
                if not job.future.done():
                    job.future.set_exception(error)
            self.left.clear()

    async def put(self, chunk: list[Any]) -> None:
        """``chunk`` into the batcher, once its queue has room for it."""
        while True:
            try:
                self.batcher.submit(chunk)
                return
            except QueueFull:
                await asyncio.sleep(RETRY_SECONDS)

    def close(self) -> None:
        """Stop feeding: the jobs not fed yet are cancelled (their request failed or went away)."""
        if self.task is not None:
            self.task.cancel()
        while self.left:
            self.left.popleft().future.cancel()


__all__ = ["FairShare", "chunk_size"]
