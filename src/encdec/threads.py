"""How many CPU threads a command computes with: as many as there are idle cores, not as many as there are cores.

torch's default is one intra-op thread per core. On a machine another process keeps busy, that oversubscribes:
OpenMP threads that wait at a barrier for a thread whose core is taken spin instead of sleeping, and a step can take
many times as long (docs/benchmarks.md, "Threads on a busy machine", has the table). So the default here counts the
cores this process may run on (its CPU affinity, capped by its cgroup's CPU quota), subtracts the ones other work
keeps busy right now (the busy share of each of those CPUs over a fifth of a second, from /proc/stat, or the load
average where there is no /proc), and shares what is left between the processes of one launch (``accelerate
launch``, ``torchrun``) on this machine. Only the process's own CPUs count: in a container, or under ``taskset``,
the rest of the host's load is not its business. ``--threads N`` (or ``ENCDEC_THREADS``, or ``OMP_NUM_THREADS``)
chooses instead. The choice is said in one line when it is below the core count, the case a user needs to know of,
and training records it.
"""

from __future__ import annotations

import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import torch

THREADS_ENV = "ENCDEC_THREADS"


PROC_STAT = Path("/proc/stat")
PROC_SELF = Path("/proc/self")


def allowed_cpus() -> list[int]:
    """The CPUs this process may run on: its affinity, which ``taskset``, ``docker --cpuset-cpus`` and Slurm narrow;
    every CPU where there is no affinity (macOS)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity (macOS)
        return list(range(os.cpu_count() or 1))


def _unescape(path: str) -> str:
    """A path as mountinfo writes it, with its octal escapes (``\\040`` for a space) undone."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), path)


def _mount_points(mountinfo: list[str]) -> list[tuple[str, str, str, set[str]]]:
    """(file system type, root within its hierarchy, mount point, super options) of each cgroup mount, from the
    lines of ``/proc/self/mountinfo`` (``ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - TYPE SOURCE
    SUPER_OPTIONS``; spaces in paths are written as ``\\040``)."""
    mounts = []
    for line in mountinfo:
        left, separator, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not separator or len(fields) < 5 or len(tail) < 3 or not tail[0].startswith("cgroup"):
            continue
        mounts.append((tail[0], _unescape(fields[3]), _unescape(fields[4]), set(tail[2].split(","))))
    return mounts


def _cgroup_directories(proc_self: Path) -> list[tuple[str, Path, Path]]:
    """("v1" or "v2", the process's cgroup folder, the mount point above it) for each hierarchy that has the cpu
    controller, read from ``/proc/self/cgroup`` (``ID:CONTROLLERS:PATH``; cgroup v2 is ``0::PATH``) and
    ``/proc/self/mountinfo``. A cgroup path outside the mount's root (a container that sees only its own cgroup,
    mounted at its root) is the mount point itself."""
    try:
        memberships = (proc_self / "cgroup").read_text(encoding="utf-8").splitlines()
        mounts = _mount_points((proc_self / "mountinfo").read_text(encoding="utf-8").splitlines())
    except (OSError, UnicodeDecodeError):
        return []
    found = []
    for line in memberships:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        version = "v2" if hierarchy == "0" and not controllers else "v1"
        if version == "v1" and "cpu" not in controllers.split(","):
            continue
        for fs_type, root, mount_point, options in mounts:
            if (fs_type, version) not in (("cgroup2", "v2"), ("cgroup", "v1")):
                continue
            if version == "v1" and "cpu" not in options:
                continue
            under_root = path == root or path.startswith(root.rstrip("/") + "/")
            folder = Path(mount_point) / (path[len(root):].lstrip("/") if under_root else "")
            found.append((version, folder if folder.is_dir() else Path(mount_point), Path(mount_point)))
    return found


def _read_quota(version: str, folder: Path) -> float | None:
    """CPUs' worth of time one cgroup folder's quota allows, or None for no quota (or no readable files): cgroup v2
    ``cpu.max`` is ``QUOTA PERIOD`` or ``max PERIOD``; v1 has ``cpu.cfs_quota_us`` (-1: none) and
    ``cpu.cfs_period_us``, in microseconds."""
    try:
        if version == "v2":
            quota, period = (folder / "cpu.max").read_text(encoding="ascii").split()[:2]
        else:
            quota = (folder / "cpu.cfs_quota_us").read_text(encoding="ascii").strip()
            period = (folder / "cpu.cfs_period_us").read_text(encoding="ascii").strip()
        if quota == "max" or float(quota) <= 0 or float(period) <= 0:
            return None
        return float(quota) / float(period)
    except (OSError, ValueError):
        return None


def cgroup_cpu_limit(proc_self: Path = PROC_SELF) -> float | None:
    """How many CPUs' worth of time the process's cgroup may use (``docker --cpus 1.5``, a Kubernetes CPU limit, a
    systemd ``CPUQuota``): the tightest quota of its cgroup and the cgroups above it, in cgroup v2 or v1. None
    without a quota, or where there are no cgroup files (macOS, a system without /proc)."""
    limits = []
    for version, folder, mount_point in _cgroup_directories(proc_self):
        while True:
            limit = _read_quota(version, folder)
            if limit is not None:
                limits.append(limit)
            if folder == mount_point or folder == folder.parent:
                break
            folder = folder.parent
    return min(limits) if limits else None


def usable_cores() -> int:
    """The cores this process may compute on: its CPU affinity (``allowed_cpus``), capped by its cgroup's CPU quota
    rounded up (a 1.5-CPU quota runs 2 threads, each part of the time), at least 1."""
    cores = len(allowed_cpus())
    limit = cgroup_cpu_limit()
    return max(1, min(cores, math.ceil(limit))) if limit is not None else max(1, cores)


def _cpu_times(cpus: list[int]) -> dict[int, tuple[float, float]] | None:
    """(busy, total) jiffies since boot of each of ``cpus``, from the per-CPU lines (``cpuN``) of /proc/stat; None
    where there is no /proc/stat. Busy is all but idle and iowait; total counts user to steal (guest time is
    already inside user and nice)."""
    wanted, times = set(cpus), {}
    try:
        with open(PROC_STAT, encoding="ascii") as f:
            for line in f:
                name, *values = line.split()
                if not (name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in wanted):
                    continue
                fields = [float(value) for value in values[:8]]
                idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
                times[int(name[3:])] = (sum(fields) - idle, sum(fields))
    except (OSError, ValueError, IndexError):
        return None
    return times or None


def busy_cores(window: float = 0.2, cpus: list[int] | None = None) -> float:
    """How many of ``cpus`` (default: the ones this process may run on) other work keeps busy now: the sum of each
    one's busy share over ``window`` seconds (this process sleeps meanwhile). Where there is no /proc/stat, the
    1-minute load average, scaled to the share of the machine's CPUs that ``cpus`` are."""
    cpus = allowed_cpus() if cpus is None else cpus
    before = _cpu_times(cpus)
    if before is None:
        if not hasattr(os, "getloadavg"):
            return 0.0
        return os.getloadavg()[0] * len(cpus) / max(len(cpus), os.cpu_count() or 1)
    time.sleep(window)
    after = _cpu_times(cpus) or {}
    busy = 0.0
    for cpu, (busy_before, total_before) in before.items():
        if cpu in after and after[cpu][1] > total_before:
            share = (after[cpu][0] - busy_before) / (after[cpu][1] - total_before)
            busy += min(1.0, max(0.0, share))
    return busy


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
    among the processes of this launch on this machine (``LOCAL_WORLD_SIZE``), at least 1.

    The idle cores are the usable ones (``usable_cores``) that the CPUs this process may run on have free: a
    container with a 2-CPU quota on 16 CPUs of which 10 are busy still has its 2 (``busy`` then counts the part of
    the usable cores that other work takes, 0 here)."""
    cores = usable_cores()
    processes = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    count, source = requested_threads(requested)
    if count is not None:
        if count < 1:
            raise ValueError(f"{source} must be at least 1 thread, got {count}.")
        return ThreadChoice(count, cores, None, processes, source)
    free = len(allowed_cpus()) - busy_cores()
    busy = cores - min(float(cores), max(0.0, free))
    idle = max(1, math.floor(cores - busy + 0.5))  # a core counts as idle when less than half busy
    return ThreadChoice(max(1, idle // processes), cores, busy, processes)


def apply_threads(choice: ThreadChoice) -> None:
    """Compute with ``choice.threads`` intra-op threads (torch, and the engines that take torch's count)."""
    torch.set_num_threads(choice.threads)


__all__ = ["THREADS_ENV", "ThreadChoice", "allowed_cpus", "apply_threads", "busy_cores", "cgroup_cpu_limit",
           "choose_threads", "requested_threads", "usable_cores"]
