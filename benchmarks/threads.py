"""The threads section: the thread count a command computes with, on an idle machine and on a busy one.

Each workload runs as a fresh `python -m encdec` process, as a user runs it: 30 training steps of each demo recipe
(the Transformer and the BiLSTM with Bahdanau attention, built-in data, no evaluation) and `encdec translate` of 300
held-out dates with the demo Transformer, greedy and beam 5. Two thread settings are compared: every core (torch's
own default, what encdec used before it chose) and encdec's choice (`encdec.threads`: the idle cores). The busy rows
run while another process keeps one core busy (a Python busy loop, started before and stopped after each run).
Each figure is the median of 3 runs, the two settings alternating.

    python scripts/benchmark.py --sections threads
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from encdec.data import make_date_pairs
from encdec.threads import usable_cores

from .common import BenchmarkSettings, Section
from .serve import demo_model

logger = logging.getLogger(__name__)

ROUNDS = 3
STEPS = 30
SENTENCES = 2000
WORKLOADS = ("train transformer", "train lstm-bahdanau", "translate greedy", "translate beam 5")
CONFIGS = {"train transformer": "demo-transformer.yaml", "train lstm-bahdanau": "demo-lstm-bahdanau.yaml"}


def clean_env() -> dict[str, str]:
    """The environment without a thread count, so that encdec chooses."""
    return {key: value for key, value in os.environ.items()
            if key not in ("OMP_NUM_THREADS", "ENCDEC_THREADS", "MKL_NUM_THREADS")}


def run_workload(workload: str, threads: int | None, folder: Path, model: Path, sources: Path) -> float:
    """Steps/s (training) or sentences/s (translation) of one run; ``threads`` None: encdec's choice."""
    option = [] if threads is None else ["--threads", str(threads)]
    if workload in CONFIGS:
        out = folder / "run"
        command = ["train", *option, str(Path("configs") / CONFIGS[workload]), "--training.max_steps", str(STEPS),
                   "--training.eval_strategy", "no", "--training.output_dir", str(out), "--training.overwrite",
                   "true", "--training.report_to", "none", "--training.warmup_steps", "10"]
        subprocess.run([sys.executable, "-m", "encdec", *command], env=clean_env(), check=True,
                       capture_output=True, text=True)
        return json.loads((out / "eval_results.json").read_text())["train"]["train_steps_per_second"]
    beams = "1" if workload.endswith("greedy") else "5"
    command = ["translate", *option, "--model", str(model), "--input", str(sources), "--num-beams", beams,
               "--output", str(folder / "out.txt"), "--overwrite"]
    began = time.perf_counter()
    subprocess.run([sys.executable, "-m", "encdec", *command], env=clean_env(), check=True, capture_output=True)
    return SENTENCES / (time.perf_counter() - began)


def measure(busy: bool, folder: Path, model: Path, sources: Path) -> dict[tuple[str, str], float]:
    """The median of ``ROUNDS`` runs per workload and setting, with a busy loop on one core when ``busy``."""
    settings = {"every core": usable_cores(), "encdec's choice": None}
    runs: dict[tuple[str, str], list[float]] = {}
    for round_ in range(ROUNDS):
        for workload in WORKLOADS:
            names = list(settings) if round_ % 2 == 0 else list(reversed(settings))
            for name in names:
                hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
                try:
                    time.sleep(0.5 if busy else 0)  # the busy loop is running before encdec measures the cores
                    logger.info("threads: %s, %s, %s, round %d", "busy" if busy else "idle", workload, name, round_ + 1)
                    runs.setdefault((workload, name), []).append(
                        run_workload(workload, settings[name], folder, model, sources))
                finally:
                    if hog is not None:
                        hog.kill()
                        hog.wait()
    return {key: statistics.median(values) for key, values in runs.items()}


def threads(settings: BenchmarkSettings) -> Section:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model = demo_model(folder)
        sources = folder / "dates.txt"
        sources.write_text("".join(s + "\n" for s, _ in make_date_pairs(SENTENCES, seed=7)))
        results = {busy: measure(busy, folder, model, sources) for busy in (False, True)}
        chosen = chosen_threads(model, sources)
    return Section("Threads on a busy machine", method_text(model, chosen), table(results))


def chosen_threads(model: Path, sources: Path) -> dict[bool, str]:
    """What encdec chose, as it says it (a busy loop on one core for the busy case)."""
    said = {}
    for busy in (False, True):
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
        try:
            time.sleep(0.5 if busy else 0)
            code = "from encdec.threads import choose_threads; print(choose_threads().describe())"
            said[busy] = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True,
                                        text=True, check=True).stdout.strip()
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
    return said


def method_text(model: Path, chosen: dict[bool, str]) -> str:
    return (f"Each workload is a fresh `python -m encdec` process: {STEPS} training steps of each demo recipe "
            f"(built-in data, no evaluation; steps/s from the run's own `train_steps_per_second`) and "
            f"`encdec translate` of {SENTENCES} held-out dates with the demo Transformer (`{model.name}`), greedy "
            "and beam 5 (sentences/s over the whole command, loading included). *every core* passes "
            f"`--threads {usable_cores()}` (torch's own default, which encdec used before it chose); *encdec's "
            "choice* passes nothing. The busy rows run while a Python busy loop keeps one core busy. Each figure is "
            f"the median of {ROUNDS} runs, the two settings alternating. What encdec chose: idle, \"{chosen[False]}"
            f"\"; busy, \"{chosen[True]}\".")


def table(results: dict[bool, dict[tuple[str, str], float]]) -> str:
    rows = ["| Machine | Workload | every core | encdec's choice | x every core |", "|---|---|---:|---:|---:|"]
    for busy, measured in results.items():
        for workload in WORKLOADS:
            old, new = measured[(workload, "every core")], measured[(workload, "encdec's choice")]
            unit = "steps/s" if workload in CONFIGS else "sent/s"
            ratio = f"**{new / old:.2f}**" if busy else f"{new / old:.2f}"
            rows.append(f"| {'busy (1 core taken)' if busy else 'idle'} | {workload} ({unit}) | {old:.2f} | "
                        f"{new:.2f} | {ratio} |")
    return "\n".join(rows)


__all__ = ["threads"]
