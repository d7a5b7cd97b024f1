"""How many CPU threads a command computes with: as many as there are idle cores, not as many as there are cores.

torch's default is one intra-op thread per core. On a machine another process keeps busy, that oversubscribes:
OpenMP threads that wait at a barrier for a thread whose core is taken spin instead of sleeping, and a step can take
many times as long (docs/benchmarks.md, "Threads on a busy machine", has the table). So the default here counts the
cores this process may run on, subtracts the ones other work keeps busy right now (measured over a fifth of a
second from /proc/stat, or the load average where there is no /proc), and shares what is left between the processes
of one launch (``accelerate launch``, ``torchrun``) on this machine. ``--threads N`` (or ``ENCDEC_THREADS``, or
``OMP_NUM_THREADS``) chooses instead. The choice is said in one line when it is below the core count, the case a
user needs to know of, and training records it.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import torch

THREADS_ENV = "ENCDEC_THREADS"


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, which containers and ``taskset`` narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def _cpu_times() -> tuple[float, float] | None:
    """(busy, total) jiffies of all cores since boot, from /proc/stat; None where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = [float(value) for value in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_cores(window: float = 0.2) -> float:
    """How many cores other work keeps busy now: the busy share of all cores over ``window`` seconds (this process
    sleeps meanwhile), times the core count; the 1-minute load average where /proc/stat is missing."""
    before = _cpu_times()
    if before is None:
        return os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    time.sleep(window)
    after = _cpu_times()
    busy, total = after[0] - before[0], after[1] - before[1]
    return (busy / total) * (os.cpu_count() or 1) if total > 0 else 0.0


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    cores: int
    busy: float | None  # cores busy with other work when measured (None: the count was given)
    processes: int  # processes of this launch on this machine, sharing the idle cores
    source: str = "idle cores"  # where the count came from: --threads, ENCDEC_THREADS, OMP_NUM_THREADS or idle cores

    @property
    def reduced(self) -> bool:
        """Fewer threads than cores per process because other work keeps cores busy: the case worth saying."""
        return self.busy is not None and self.threads < self.cores // self.processes

    def describe(self) -> str:
        plural = "s" * (self.threads > 1)
        if self.busy is None:
            return f"{self.threads} thread{plural} per process ({self.source})"
        shared = f", shared by {self.processes} processes" if self.processes > 1 else ""
        return (f"{self.threads} thread{plural} per process: {self.cores} cores, {self.busy:.1f} busy with other "
                f"work{shared} (--threads N or {THREADS_ENV}=N to choose)")


def requested_threads(requested: int | None) -> tuple[int | None, str]:
    """The count asked for, and where: ``--threads``, else ``ENCDEC_THREADS``, else ``OMP_NUM_THREADS`` (which
    users set to pin torch's count, and which is respected)."""
    if requested is not None:
        return requested, "--threads"
    for name in (THREADS_ENV, "OMP_NUM_THREADS"):
        value = os.environ.get(name, "").strip()
        if value:
            try:
                return int(value), name
            except ValueError:
                raise ValueError(f"{name}={value!r} must be a whole number of threads.") from None
    return None, "idle cores"


def choose_threads(requested: int | None = None) -> ThreadChoice:
    """The thread count for this process: the one asked for (``requested_threads``), else the idle cores divided
    among the processes of this launch on this machine (``LOCAL_WORLD_SIZE``), at least 1."""
    cores = usable_cores()
    processes = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    count, source = requested_threads(requested)
    if count is not None:
        if count < 1:
            raise ValueError(f"{source} must be at least 1 thread, got {count}.")
        return ThreadChoice(count, cores, None, processes, source)
    busy = min(busy_cores(), float(cores))
    idle = max(1, math.floor(cores - busy + 0.5))  # a core counts as idle when less than half busy
    return ThreadChoice(max(1, idle // processes), cores, busy, processes)


def apply_threads(choice: ThreadChoice) -> None:
    """Compute with ``choice.threads`` intra-op threads (torch, and CTranslate2, which takes torch's count)."""
    torch.set_num_threads(choice.threads)


__all__ = ["THREADS_ENV", "ThreadChoice", "apply_threads", "busy_cores", "choose_threads", "requested_threads",
           "usable_cores"]
