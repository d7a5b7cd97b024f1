"""The thread count a command computes with: the idle cores by default, what the user asks otherwise, and one line
when it is fewer than the cores."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from encdec import threads
from encdec.threads import choose_threads
from encdec_cli import main


@pytest.fixture
def machine(monkeypatch):
    """Four usable cores (four CPUs, no quota), ``busy`` of them taken by other work, no thread count in the
    environment."""
    state = {"busy": 0.0}
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
    monkeypatch.setattr(threads, "allowed_cpus", lambda: [0, 1, 2, 3])
    monkeypatch.setattr(threads, "busy_cores", lambda window=0.2: state["busy"])
    for name in ("ENCDEC_THREADS", "OMP_NUM_THREADS", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    return state


def test_the_default_is_the_idle_cores(machine, monkeypatch) -> None:
    assert choose_threads().threads == 4 and not choose_threads().reduced
    machine["busy"] = 1.0
    choice = choose_threads()
    assert choice.threads == 3 and choice.reduced and "4 cores, 1.0 busy with other work" in choice.describe()
    machine["busy"] = 3.6  # under half a core left: still one thread
    assert choose_threads().threads == 1
    machine["busy"] = 0.4
    assert choose_threads().threads == 4
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")  # two processes of one launch share the idle cores
    machine["busy"] = 0.0
    assert choose_threads().threads == 2 and not choose_threads().reduced


def test_asked_counts_win_in_order(machine, monkeypatch) -> None:
    machine["busy"] = 3.0
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert (choose_threads().threads, choose_threads().source) == (2, "OMP_NUM_THREADS")
    monkeypatch.setenv("ENCDEC_THREADS", "3")
    assert (choose_threads().threads, choose_threads().source) == (3, "ENCDEC_THREADS")
    assert (choose_threads(4).threads, choose_threads(4).source) == (4, "--threads")
    assert not choose_threads(1).reduced  # asked for: nothing to say
    monkeypatch.setenv("ENCDEC_THREADS", "many")
    with pytest.raises(ValueError, match="ENCDEC_THREADS='many' must be a whole number"):
        choose_threads()


def test_busy_cores_sees_another_process() -> None:
    """A busy loop takes a core (whatever else the machine is doing), and the measure counts it."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        busy = threads.busy_cores(0.3)
    finally:
        hog.kill()
        hog.wait(timeout=60)
    assert 0.8 <= busy <= threads.usable_cores() + 0.01, busy


def test_a_cpu_quota_below_the_affinity_keeps_its_cores_while_other_cpus_are_busy(machine, monkeypatch) -> None:
    """A container with a 2-CPU quota on 16 CPUs, 10 of them busy: 6 are free, so the container's 2 are idle."""
    monkeypatch.setattr(threads, "usable_cores", lambda: 2)
    monkeypatch.setattr(threads, "allowed_cpus", lambda: list(range(16)))
    machine["busy"] = 10.0
    choice = choose_threads()
    assert (choice.threads, choice.cores, choice.busy) == (2, 2, 0.0) and not choice.reduced
    machine["busy"] = 15.0  # one CPU free: one of the two cores is taken
    assert (choose_threads().threads, choose_threads().busy) == (1, 1.0)


def write_stat(path: Path, rows: dict[int, tuple[int, int, int, int]]) -> None:
    """A /proc/stat whose per-CPU lines have (user, idle, iowait, guest) jiffies as given, and whose first line (all
    CPUs together) says every CPU is busy, which busy_cores must not read."""
    lines = ["cpu  99999 0 0 0 0 0 0 0 0 0"]
    lines += [f"cpu{cpu} {user} 0 0 {idle} {iowait} 0 0 0 {guest} 0" for cpu, (user, idle, iowait, guest) in
              rows.items()]
    path.write_text("\n".join([*lines, "intr 1 2 3", "ctxt 42"]) + "\n")


def test_busy_cores_sums_the_busy_share_of_each_cpu_it_may_use(tmp_path, monkeypatch) -> None:
    """Each allowed CPU counts its own busy share over the window (idle and iowait are not busy; guest time is
    already inside user time); the CPUs the process may not use, and the all-CPU line, do not count."""
    stat = tmp_path / "stat"
    before = {0: (0, 0, 0, 0), 1: (0, 0, 0, 0), 2: (0, 0, 0, 0), 3: (0, 0, 0, 0)}
    after = {0: (100, 0, 0, 0), 1: (50, 40, 10, 0), 2: (100, 0, 0, 100), 3: (0, 100, 0, 0)}
    monkeypatch.setattr(threads, "PROC_STAT", stat)
    monkeypatch.setattr(threads, "time", SimpleNamespace(sleep=lambda seconds: write_stat(stat, after)))
    for cpus, expected in (([1, 3], 0.5), ([0, 1], 1.5), ([2], 1.0), ([3], 0.0), ([0, 1, 2, 3], 2.5)):
        write_stat(stat, before)
        assert threads.busy_cores(cpus=cpus) == pytest.approx(expected), cpus
    monkeypatch.setattr(threads, "allowed_cpus", lambda: [1, 2])  # the default: the CPUs this process may use
    write_stat(stat, before)
    assert threads.busy_cores() == pytest.approx(1.5)


def test_without_proc_stat_the_load_average_is_scaled_to_the_allowed_cpus(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(threads, "PROC_STAT", tmp_path / "missing")
    monkeypatch.setattr(os, "getloadavg", lambda: (3.0, 0.0, 0.0))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    assert threads.busy_cores(cpus=[0, 1]) == pytest.approx(1.5)  # 3 of 4 CPUs busy: 1.5 of these 2


def fake_cgroups(tmp_path: Path, memberships: str, mounts: list[tuple[str, str, str, str]],
                 files: dict[str, str]) -> Path:
    """A fake /proc/self (``cgroup`` and ``mountinfo``) and cgroup folders under ``tmp_path``: ``mounts`` are
    (type, root, mount point under tmp_path, super options); ``files`` map paths under tmp_path to their text."""
    proc_self = tmp_path / "proc" / "self"
    proc_self.mkdir(parents=True)
    (proc_self / "cgroup").write_text(memberships)
    (proc_self / "mountinfo").write_text("".join(
        f"{30 + i} 23 0:{28 + i} {root} {tmp_path / point} rw,nosuid,relatime shared:9 - {kind} cgroup {options}\n"
        for i, (kind, root, point, options) in enumerate(mounts)))
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return proc_self


V2_MOUNT = [("cgroup2", "/", "cg", "rw,nsdelegate")]


def test_cgroup_v2_quota_is_the_tightest_of_the_cgroup_and_its_ancestors(tmp_path) -> None:
    proc_self = fake_cgroups(tmp_path, "0::/kubepods/pod1/ctr\n", V2_MOUNT, {
        "cg/kubepods/pod1/ctr/cpu.max": "max 100000\n", "cg/kubepods/pod1/cpu.max": "150000 100000\n",
        "cg/kubepods/cpu.max": "400000 100000\n", "cg/cpu.max": "max 100000\n"})
    assert threads.cgroup_cpu_limit(proc_self) == 1.5


def test_cgroup_v2_in_a_container_that_sees_its_own_cgroup_at_the_root(tmp_path) -> None:
    # a cgroup namespace: the process is at "/" of a mount that is its container's cgroup
    proc_self = fake_cgroups(tmp_path / "a", "0::/\n", V2_MOUNT, {"cg/cpu.max": "200000 100000\n"})
    assert threads.cgroup_cpu_limit(proc_self) == 2.0
    # no namespace, the container's cgroup bind-mounted: the path is the mount's root
    proc_self = fake_cgroups(tmp_path / "b", "0::/docker/abc\n", [("cgroup2", "/docker/abc", "cg", "rw")],
                             {"cg/cpu.max": "50000 100000\n"})
    assert threads.cgroup_cpu_limit(proc_self) == 0.5
    # a path the mount does not hold: the mount's own quota
    proc_self = fake_cgroups(tmp_path / "c", "0::/elsewhere/x\n", [("cgroup2", "/docker/abc", "cg", "rw")],
                             {"cg/cpu.max": "300000 100000\n"})
    assert threads.cgroup_cpu_limit(proc_self) == 3.0


def test_cgroup_v1_quota_and_no_quota(tmp_path) -> None:
    """cgroup v1 (the hierarchy with the cpu controller; -1 is no quota); no quota anywhere, or no cgroup files
    (macOS, a system without /proc), is None."""
    memberships = "4:memory:/x\n3:cpu,cpuacct:/user.slice/job\n0::/\n"
    mounts = [("cgroup", "/", "v1/memory", "rw,memory"), ("cgroup", "/", "v1/cpu,cpuacct", "rw,cpu,cpuacct"),
              ("cgroup2", "/", "unified", "rw")]
    proc_self = fake_cgroups(tmp_path / "v1", memberships, mounts, {
        "v1/cpu,cpuacct/user.slice/job/cpu.cfs_quota_us": "-1\n",
        "v1/cpu,cpuacct/user.slice/job/cpu.cfs_period_us": "100000\n",
        "v1/cpu,cpuacct/user.slice/cpu.cfs_quota_us": "250000\n",
        "v1/cpu,cpuacct/user.slice/cpu.cfs_period_us": "100000\n",
        "v1/memory/x/cpu.cfs_quota_us": "10000\n", "v1/memory/x/cpu.cfs_period_us": "100000\n"})  # not cpu's
    assert threads.cgroup_cpu_limit(proc_self) == 2.5
    proc_self = fake_cgroups(tmp_path / "none", "0::/a\n", V2_MOUNT, {"cg/a/cpu.max": "max 100000\n"})
    assert threads.cgroup_cpu_limit(proc_self) is None
    assert threads.cgroup_cpu_limit(tmp_path / "no-proc") is None


def test_usable_cores_is_the_affinity_capped_by_the_quota_rounded_up(monkeypatch) -> None:
    monkeypatch.setattr(threads, "allowed_cpus", lambda: list(range(8)))
    for limit, expected in ((None, 8), (1.5, 2), (0.2, 1), (32.0, 8)):
        monkeypatch.setattr(threads, "cgroup_cpu_limit", lambda limit=limit: limit)
        assert threads.usable_cores() == expected, limit


HOG = "import os; os.sched_setaffinity(0, {{{cpu}}}); print('pinned', flush=True)\nwhile True: pass"


def first_line(process: subprocess.Popen, timeout: float) -> bytes:
    """The first line ``process`` writes on its stdout pipe, or what came of it within ``timeout`` seconds: read as
    it comes (``select``, then what is there), so that a silent process cannot block the test."""
    deadline, data = time.monotonic() + timeout, b""
    while b"\n" not in data and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([process.stdout], [], [], left)
        chunk = os.read(process.stdout.fileno(), 64) if ready else b""
        if not chunk:
            break
        data += chunk
    return data.partition(b"\n")[0] + b"\n" if b"\n" in data else data


def start_hog(cpu: int) -> subprocess.Popen | None:
    """A busy loop pinned to ``cpu``, once it says it is pinned (None where it cannot be pinned there)."""
    hog = subprocess.Popen([sys.executable, "-c", HOG.format(cpu=cpu)], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL)
    if first_line(hog, timeout=60) == b"pinned\n":
        return hog
    stop(hog)
    return None


def stop(process: subprocess.Popen) -> None:
    process.kill()
    process.wait(timeout=60)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity (Linux)")
def test_busy_cores_counts_only_the_cpus_of_its_affinity() -> None:
    """This process pinned to one CPU (as ``taskset -c 0`` would), with a busy loop on that CPU and another on a
    second CPU: it may use one core, and that one is busy; the loop on the CPU it may not use does not count (a
    host-wide measure scaled by the CPU count says 2). The pinning is undone after."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("needs two CPUs")
    mine, other = 0, 1
    hogs = [start_hog(mine), start_hog(other)]
    original = os.sched_getaffinity(0)
    try:
        if None in hogs:
            pytest.skip("cannot pin a process to CPUs 0 and 1 here")
        os.sched_setaffinity(0, {mine})  # this thread, which is the one that measures
        cores, busy = threads.usable_cores(), threads.busy_cores(0.5)
    finally:
        os.sched_setaffinity(0, original)
        for hog in hogs:
            if hog is not None:
                stop(hog)
    assert cores == 1
    assert 0.8 <= busy <= 1.0, busy


def test_the_cli_applies_the_choice_and_says_when_it_is_reduced(machine, tmp_path, capsys, monkeypatch) -> None:
    machine["busy"] = 2.0
    before = torch.get_num_threads()
    try:
        assert main(["translate", "--model", str(tmp_path / "missing"), "--input", str(tmp_path / "x")]) == 2
        assert torch.get_num_threads() == 2
        err = capsys.readouterr().err.splitlines()
        assert err[0] == f"encdec translate: {choose_threads().describe()}"
        assert main(["train", str(tmp_path / "missing.yaml"), "--threads", "1"]) == 2  # after the config too
        assert torch.get_num_threads() == 1 and "busy with other work" not in capsys.readouterr().err
        assert main(["train", str(tmp_path / "missing.yaml"), "--threads", "x"]) == 2
        assert "--threads: 'x' is not a whole number" in capsys.readouterr().err
    finally:
        torch.set_num_threads(before)
