"""A test hook, and the only one of the server: batchers held until a test lets them run, so that a test can have
requests in flight at a known point (a batch of several clients' requests, the graceful stop on SIGTERM, a full
queue) without racing the server, and can read why each batch ran when it did instead of timing it.

Inert unless ``ENCDEC_TEST_HOLD_BATCHES`` is set (to anything but ``0``): then the app makes every model's batcher a
``HeldBatcher`` (``batcher_class``), which queues jobs without running any until ``release()``, says on stderr
``encdec serve: test hold: N job(s) held by the batcher of NAME`` each time a request queues, and records each batch
as a ``BatchRecord`` (its size, why it ran, how many jobs the batcher expected). ``encdec serve`` releases the
batchers when a line (or the end of input) arrives on its stdin (``release_on_stdin``); a test in the same process
waits for them (``wait_held``) and calls ``release()``. docs/testing.md describes its use.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any

from .batcher import RECORD_LENGTH, DynamicBatcher, Queued

HOLD_ENV = "ENCDEC_TEST_HOLD_BATCHES"


@dataclass(frozen=True)
class BatchRecord:
    """Why a held batcher ran a batch when it did: ``why`` is ``expected`` (as many jobs as it expected were queued:
    ``expected`` is that number, 1 for a lone client), ``waited`` (the oldest job had waited ``max_wait_ms``) or
    ``stopping`` (``stop()`` drains the queue)."""

    size: int
    why: str
    expected: int


class HeldBatcher(DynamicBatcher):
    """A ``DynamicBatcher`` that takes no job until ``release()`` (``held``: how many it holds), and records why each
    batch ran (``decisions``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = threading.Event()  # the worker takes no job while it is clear
        self.submitted = threading.Condition(self.lock)  # notified on every submit, for ``wait_held``
        self.decisions: deque[BatchRecord] = deque(maxlen=RECORD_LENGTH)

    def submit(self, jobs: list[Queued]) -> list[Any]:
        futures = super().submit(jobs)
        with self.submitted:
            self.submitted.notify_all()
            held = self.held
        if held:  # the signal to a test that reads the server's output
            print(f"encdec serve: test hold: {held} job(s) held by the batcher of {self.name}", file=sys.stderr,
                  flush=True)
        return futures

    @property
    def held(self) -> int:
        """How many jobs the batcher holds (0 once released)."""
        return 0 if self.gate.is_set() else self.queue.qsize()

    def wait_held(self, count: int, timeout: float) -> bool:
        """Wait until the batcher holds ``count`` jobs (or ``timeout`` seconds pass); whether it does."""
        with self.submitted:
            return self.submitted.wait_for(lambda: self.held >= count, timeout)

    def release(self) -> None:
        """Let the batcher run: it takes every queued job at once, then batches as usual."""
        self.gate.set()

    def stop(self) -> None:
        self.release()
        super().stop()

    def loop(self) -> None:
        self.gate.wait()
        super().loop()

    def run(self, batch: list[Queued], why: str) -> None:
        self.decisions.append(BatchRecord(len(batch), why, self.expected))
        super().run(batch, why)


def batcher_class() -> type[DynamicBatcher]:
    """``HeldBatcher`` under ``ENCDEC_TEST_HOLD_BATCHES``, else ``DynamicBatcher`` (every real run)."""
    return HeldBatcher if os.environ.get(HOLD_ENV, "") not in ("", "0") else DynamicBatcher


def release_on_stdin(batchers: dict[str, DynamicBatcher]) -> None:
    """Under ``ENCDEC_TEST_HOLD_BATCHES``, a thread that releases the held batchers once stdin gives a line or ends
    (``encdec serve``'s release)."""
    if batcher_class() is not HeldBatcher:
        return

    def wait_for_line() -> None:
        sys.stdin.readline()
        for batcher in batchers.values():
            batcher.release()

    threading.Thread(target=wait_for_line, name="encdec-test-release", daemon=True).start()


__all__ = ["HOLD_ENV", "BatchRecord", "HeldBatcher", "batcher_class", "release_on_stdin"]
