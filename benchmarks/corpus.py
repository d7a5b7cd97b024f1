"""The corpus section: `encdec translate` of whole files, streamed in chunks (encdec.inference.corpus): lines/s and peak
memory at 10k, 100k and 1M lines, in one process and in two (`accelerate launch --cpu --num_processes 2`), and the time
the Multi30k Transformer takes to translate the 29,000 training sources with beam 5 (what distillation needs), on torch
and on CTranslate2.

The inputs are generated dates (`encdec.data.make_date_pairs`, one per line). Two models translate them, greedily:
the demo Transformer (`runs/demo-transformer`, or trained here) at 10k and 100k lines, and a smaller Transformer
(d_model 64, 1 + 1 layers, trained here for a moment) at every size up to 1M. Each run is a fresh process; its peak
resident memory is the largest any of its processes reached (`ru_maxrss` of the waited children). The Multi30k rows
need the trained model (`runs/multi30k-transformer-small`, from `scripts/multi30k.sh transformer-small`) and the
data (`data/multi30k`); without them they are left out.

    python scripts/benchmark.py --sections corpus
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from encdec.data import make_date_pairs

from .common import BenchmarkSettings, Section
from .serve import demo_model

logger = logging.getLogger(__name__)

SIZES = {"demo Transformer": (10_000, 100_000), "small Transformer": (10_000, 100_000, 1_000_000)}
PROCESSES = (1, 2)
SMALL = ("from pathlib import Path; import sys; sys.path.insert(0, 'tests'); "
         "from tiny_model_folders import DATE_TRANSFORMER, date_data, save_folder, train_on_dates; "
         "dates = date_data(); "
         "model = train_on_dates({**DATE_TRANSFORMER, 'encoder_layers': 1, 'decoder_layers': 1}, dates, 400, 3e-3); "
         "save_folder(model, dates[0], Path(sys.argv[1]))")
MULTI30K_MODEL = Path(os.environ.get("MULTI30K_TRANSFORMER", "runs/multi30k-transformer-small"))
MULTI30K_DATA = Path(os.environ.get("MULTI30K_DIR", "data/multi30k"))


def write_dates(path: Path, lines: int) -> Path:
    """``lines`` generated dates, written in blocks (the benchmark itself stays small)."""
    with open(path, "w", encoding="utf-8") as f:
        for start in range(0, lines, 100_000):
            count = min(100_000, lines - start)
            f.writelines(source + "\n" for source, _ in make_date_pairs(count, seed=start))
    return path


def timed(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(seconds, peak RSS in MiB) of a command run in a fresh process of its own (so that ``ru_maxrss`` of the
    waited children is this command's alone)."""
    probe = ("import resource, subprocess, sys, time; began = time.perf_counter(); "
             "subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
             "print(time.perf_counter() - began, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    done = subprocess.run([sys.executable, "-c", probe, *command], env=env, capture_output=True, text=True,
                          check=True)
    seconds, kib = done.stdout.split()
    return float(seconds), int(kib) / 1024


def translate_command(model: Path, source: Path, output: Path, processes: int, extra: list[str]) -> list[str]:
    # CPU processes come from the repository's cpu-2proc.yaml (its torchrun launcher): `accelerate launch --cpu
    # --num_processes N` starts a single process; --main_process_port 0: accelerate picks a free port
    launch = ([sys.executable, "-m", "encdec"] if processes == 1 else
              [sys.executable, "-m", "accelerate.commands.launch", "--config_file", "configs/accelerate/cpu-2proc.yaml",
               "--num_processes", str(processes), "--main_process_port", "0", "-m", "encdec"])
    return [*launch, "translate", "--model", str(model), "--input", str(source), "--output", str(output),
            "--overwrite", "--quiet", *extra]


def measure_sizes(models: dict[str, Path], folder: Path) -> list[tuple]:
    """A row per model, size and process count: (model, lines, processes, lines/s, peak RSS MiB)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    rows = []
    for name, sizes in SIZES.items():
        for lines in sizes:
            source = write_dates(folder / f"dates-{lines}.txt", lines)
            for processes in PROCESSES:
                threads = str(max(1, (os.cpu_count() or 1) // processes))
                logger.info("corpus: %s, %d lines, %d process(es)", name, lines, processes)
                seconds, rss = timed(translate_command(models[name], source, folder / "out.txt", processes,
                                                       ["--num-beams", "1", "--threads", threads]), env)
                rows.append((name, lines, processes, lines / seconds, rss))
            source.unlink()
    return rows


def measure_multi30k(folder: Path) -> list[tuple]:
    """(how, seconds, sentences/s) for the 29,000 training sources at beam 5: `encdec translate` on torch and on
    CTranslate2 (whose process imports torch), and CTranslate2 alone in a process without torch (ct2_corpus.py)."""
    source = MULTI30K_DATA / "train.de"
    if not (MULTI30K_MODEL / "model.safetensors").is_file() or not source.is_file():
        logger.info("corpus: %s or %s absent: no Multi30k rows", MULTI30K_MODEL, source)
        return []
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    exported = folder / "multi30k-ct2"
    subprocess.run([sys.executable, "-m", "encdec", "export", "--model", str(MULTI30K_MODEL), "--format",
                    "ctranslate2", "--output", str(exported)], env=env, check=True, capture_output=True)
    threads = str(os.cpu_count() or 1)
    rows = []
    for engine, model in (("torch", MULTI30K_MODEL), ("ctranslate2", exported)):
        logger.info("corpus: Multi30k train sources, %s", engine)
        seconds, _ = timed(translate_command(model, source, folder / "distilled.txt", 1,
                                             ["--num-beams", "5", "--engine", engine, "--threads", threads]), env)
        rows.append((f"`encdec translate --engine {engine}`", seconds, 29_000 / seconds))
    logger.info("corpus: Multi30k train sources, CTranslate2 without torch")
    seconds, _ = timed([sys.executable, str(Path(__file__).with_name("ct2_corpus.py")), str(exported), str(source),
                        str(folder / "distilled-ct2.txt"), "--beam", "5", "--threads", threads], env)
    rows.append(("CTranslate2 alone, no torch in the process (`benchmarks/ct2_corpus.py`)", seconds,
                 29_000 / seconds))
    return rows


def corpus(settings: BenchmarkSettings) -> Section:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        small = folder / "small"
        subprocess.run([sys.executable, "-c", SMALL, str(small)], check=True, capture_output=True)
        models = {"demo Transformer": demo_model(folder), "small Transformer": small}
        began = time.perf_counter()
        rows = measure_sizes(models, folder)
        multi30k = measure_multi30k(folder)
        logger.info("corpus: %.0f s", time.perf_counter() - began)
    return Section("Translating a corpus", method_text(), table(rows, multi30k))


def method_text() -> str:
    return (f"`encdec translate --input FILE --output FILE` on generated dates (one per line), greedy, chunks of "
            "1,000 lines, the whole command timed (loading included); two processes are `accelerate launch "
            "--config_file configs/accelerate/cpu-2proc.yaml`, each with half the cores. Peak RSS is the largest any "
            "process of the run reached. "
            f"The demo Transformer translates 10k and 100k lines; a smaller one (d_model 64, 1 + 1 layers) every size "
            "up to 1M. Memory is what matters at size: it must not grow with the input. The Multi30k rows translate "
            f"the 29,000 training sources of `{MULTI30K_DATA}` with a `transformer-small` recipe model "
            f"(`{MULTI30K_MODEL}`, `MULTI30K_TRANSFORMER`) at beam 5, "
            "as distillation does, on one process with the machine's threads; CTranslate2 both through "
            "`encdec translate` (whose process imports torch: two OpenMP runtimes) and alone in a process that never "
            "imports torch.")


def table(rows: list[tuple], multi30k: list[tuple]) -> str:
    lines = ["| Model | Lines | Processes | Lines/s | Peak RSS (MiB) |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {name} | {count:,} | {processes} | {rate:,.0f} | {rss:,.0f} |"
              for name, count, processes, rate, rss in rows]
    for processes in PROCESSES:
        small = {count: rss for name, count, procs, _, rss in rows
                 if name == "small Transformer" and procs == processes}
        if 100_000 in small and 1_000_000 in small:
            lines.append(f"\nSmall Transformer, {processes} process(es): peak RSS at 1M lines is "
                         f"{small[1_000_000] / small[100_000]:.3f} x that at 100k.")
    if multi30k:
        lines += ["", "| Multi30k train sources (29,000), beam 5 | Seconds | Sentences/s |", "|---|---:|---:|"]
        lines += [f"| {how} | {seconds:,.0f} | {rate:,.1f} |" for how, seconds, rate in multi30k]
    return "\n".join(lines)


__all__ = ["corpus"]
