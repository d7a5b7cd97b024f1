"""The thread count a command computes with: the idle cores by default, what the user asks otherwise, and one line
when it is fewer than the cores."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch

from encdec import threads
from encdec.cli import main
from encdec.threads import choose_threads


@pytest.fixture
def machine(monkeypatch):
    """Four usable cores, ``busy`` of them taken by other work, no thread count in the environment."""
    state = {"busy": 0.0}
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
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
        hog.wait()
    assert 0.8 <= busy <= threads.usable_cores() + 0.01, busy


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
