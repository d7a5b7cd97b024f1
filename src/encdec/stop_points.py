"""Named stopping points for the tests of resumable jobs: a test stops a run at a known place, then kills it there.

This module is the package's one fault-injection point outside the server (docs/testing.md): the product path reaches
a point through ``stop_point(NAME)`` alone, every point is named in ``POINTS`` below, and without ``ENCDEC_STOP_AT``
a point only counts its arrivals.

A ``kill -9`` test must kill a job between two of its writes, and which two must not depend on how fast the machine
is: a test that polls for "the first chunk is written, the last is not" races the job and fails (or tests nothing)
on a fast or a slow machine. With ``ENCDEC_STOP_AT=NAME:N`` in its environment, a process that reaches stopping point
``NAME`` for the ``N``-th time stops itself with ``SIGSTOP`` (the state a ``kill -9`` test wants: everything up to
that point is written, nothing after it is), and the test waits for the stop (``os.waitpid(pid, os.WUNTRACED)`` for
a child, ``/proc/PID/stat`` for a grandchild) before it kills the process. Without the variable (every real run) a
stopping point does nothing.

The points, each reached once the work it names is durable on disk:

- ``chunk``: ``ChunkFile.write`` wrote and fsynced a chunk of a corpus job (``encdec translate/align/evaluate``,
  ``encdec distill``'s teacher translation); ``N`` counts chunks written by this process, resumed ones excluded.
- ``checkpoint``: training saved a checkpoint (``encdec train``, ``encdec distill``'s student); ``N`` counts the
  checkpoints this process saved.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

STOP_ENV = "ENCDEC_STOP_AT"
POINTS = ("chunk", "checkpoint")

_reached: Counter[str] = Counter()


def stop_point(name: str) -> None:
    """Count one arrival at stopping point ``name``; stop this process (SIGSTOP) on the arrival that
    ``ENCDEC_STOP_AT=name:N`` names."""
    if name not in POINTS:
        raise ValueError(f"unknown stopping point {name!r}: one of {', '.join(POINTS)}")
    _reached[name] += 1
    spec = os.environ.get(STOP_ENV, "")
    if not spec:
        return
    wanted, _, count = spec.partition(":")
    if wanted == name and count.strip().isdigit() and _reached[name] == int(count):
        os.kill(os.getpid(), signal.SIGSTOP)


__all__ = ["POINTS", "STOP_ENV", "stop_point"]
