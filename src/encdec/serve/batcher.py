"""Dynamic batching of a server's jobs.

Dynamic batching (as in NVIDIA Triton's dynamic batcher or TorchServe's batch aggregation): each text of each request
becomes a ``Job``; one worker thread decodes jobs that share their decoding options together, as soon as as many
of them wait as the largest of the last few batches had (up to ``max_batch_size``), or the oldest has waited
``max_wait_ms``. So a lone client's request runs at once, and a crowd's requests wait for each other. The worker
runs one batch at a time, so the model runs in a single thread of Python (its operators still use torch's
threads), and requests that arrive while it works are batched for the next round.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

from .limits import QueueFull


class Queued(Protocol):
    """What the batcher needs of a job (``encdec.serve.service.Job`` is one): jobs of equal ``key`` share a batch,
    ``arrival`` (``time.monotonic()``) times its wait, and its answer goes to ``future``."""

    @property
    def key(self) -> tuple: ...

    arrival: float
    future: Future


_STOP = object()
RECENT_BATCHES = 4  # the batches whose sizes say how many jobs to expect
RECORD_LENGTH = 10_000  # batches kept in ``DynamicBatcher.record``: a server that runs for months stays flat


class DynamicBatcher:
    """A worker thread that decodes queued jobs in batches of equal keys (see the module docstring).

    ``stop()`` finishes every job already submitted before the thread ends. ``record`` holds the sizes of the last
    ``RECORD_LENGTH`` batches (what ``expected`` reads).

    ``max_queue`` bounds the texts submitted and not yet answered (``depth``): a submit that would pass it raises
    ``QueueFull`` instead of queueing without bound (one into an empty batcher always passes, whatever its size).
    """

    def __init__(self, run_batch: Callable[[list[Queued]], list[Any]], max_batch_size: int, max_wait_ms: float,
                 name: str = "model", max_queue: int | None = None) -> None:
        self.run_batch, self.name, self.max_queue = run_batch, name, max_queue
        self.depth = 0  # jobs submitted and not yet answered
        self.max_batch_size, self.max_wait = max_batch_size, max_wait_ms / 1000
        self.queue: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self.loop, name=f"encdec-batcher-{name}", daemon=True)
        self.record: deque[int] = deque(maxlen=RECORD_LENGTH)
        self.lock = threading.Lock()
        self.closed = False
        self.free_since = 0.0  # when the last batch ended

    @property
    def batches(self) -> list[int]:
        """The sizes of the batches run, oldest first (of the last ``RECORD_LENGTH``)."""
        return list(tuple(self.record))  # a copy at once: the worker may append meanwhile

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Take no more jobs, finish the submitted ones, end the thread."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.queue.put(_STOP)  # after every job submitted so far: the queue is first in, first out
        self.thread.join()

    def submit(self, jobs: list[Queued]) -> list[Future]:
        with self.lock:
            if self.closed or not self.thread.is_alive():
                raise RuntimeError("the batcher is not running (the server is shutting down)")
            if self.max_queue is not None and self.depth and self.depth + len(jobs) > self.max_queue:
                raise QueueFull(self.name, self.depth, self.max_queue)
            self.depth += len(jobs)
            for job in jobs:
                self.queue.put(job)
        return [job.future for job in jobs]

    @property
    def expected(self) -> int:
        """How many jobs a batch waits for: one while requests come one at a time (the last few batches had one
        job each), so a lone client never waits; a full batch once they come together."""
        recent = itertools.islice(reversed(self.record), RECENT_BATCHES)
        return self.max_batch_size if max(recent, default=1) > 1 else 1

    def loop(self) -> None:
        pending: dict[tuple, list[Queued]] = {}
        stopping = False
        while pending or not stopping:
            stopping = self.collect(pending, stopping, timeout=0.0)  # whatever is queued
            chosen = self.ready(pending, stopping)
            if chosen is None:  # wait for another job, or until the oldest job's wait is over
                oldest = min((self.deadline(jobs) for jobs in pending.values()), default=None)
                timeout = None if oldest is None else max(0.0, oldest - time.monotonic())
                stopping = self.collect(pending, stopping, timeout)
                continue
            key, why = chosen
            batch, pending[key] = pending[key][:self.max_batch_size], pending[key][self.max_batch_size:]
            if not pending[key]:
                del pending[key]
            self.run(batch, why)

    def ready(self, pending: dict[tuple, list[Queued]], stopping: bool) -> tuple[tuple, str] | None:
        """The key of the batch to run now, the oldest first, and why: ``expected`` (it has the expected number of
        jobs), ``waited`` (its first job has waited ``max_wait_ms``) or ``stopping`` (any, while stopping); None to
        wait."""
        now, expected = time.monotonic(), self.expected

        def why(jobs: list[Queued]) -> str | None:
            if len(jobs) >= expected:
                return "expected"
            if now >= self.deadline(jobs):
                return "waited"
            return "stopping" if stopping else None

        ready = {key: reason for key, jobs in pending.items() if (reason := why(jobs))}
        if not ready:
            return None
        key = min(ready, key=lambda k: pending[k][0].arrival)
        return key, ready[key]

    def deadline(self, jobs: list[Queued]) -> float:
        """When a group stops waiting: ``max_wait_ms`` after its first job came, or after the worker became free
        (jobs that queued while a batch ran wait for the clients that batch answers: they send again at once)."""
        return max(jobs[0].arrival, self.free_since) + self.max_wait

    def collect(self, pending: dict[tuple, list[Queued]], stopping: bool, timeout: float | None) -> bool:
        """Move queued jobs into ``pending``: wait up to ``timeout`` (None: for ever) for the first unless stopping,
        then take whatever else is queued. Returns whether ``stop()`` was asked."""
        block = not stopping and timeout != 0.0
        while True:
            try:
                item = self.queue.get(block=block, timeout=timeout if block else None)
            except queue.Empty:
                return stopping
            block = False
            if item is _STOP:
                stopping = True
            else:
                pending.setdefault(item.key, []).append(item)

    def run(self, batch: list[Queued], why: str) -> None:
        """Decode ``batch`` (``why``: the reason ``ready`` gave) and answer its jobs."""
        self.record.append(len(batch))
        try:
            answers = self.run_batch(batch)
        except Exception as error:  # every waiting request gets an answer, an error one if need be
            self.answered(batch)
            for job in batch:
                job.future.set_exception(error)
            return
        finally:
            self.free_since = time.monotonic()
        self.answered(batch)
        for job, answer in zip(batch, answers, strict=True):
            job.future.set_result(answer)

    def answered(self, batch: list[Queued]) -> None:
        """Take a batch off ``depth`` before its answers go out: a client may send again at once."""
        with self.lock:
            self.depth -= len(batch)


__all__ = ["RECORD_LENGTH", "DynamicBatcher", "Queued"]
