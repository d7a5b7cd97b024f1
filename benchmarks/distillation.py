"""The distillation section: the distilled Multi30k students against their teacher, decoding test2016, per engine.

Each student of ``scripts/multi30k_distill.sh`` (and, for comparison, the teacher ensemble and its members) decodes
test2016 with beam 5 and greedily on torch float32 (a fresh ``python -m encdec evaluate`` process) and, for the
Transformers, on CTranslate2 with int8 weights (``encdec export``, then ``benchmarks/ct2_corpus.py`` in a process that
never imports torch: the two OpenMP runtimes slow each other). Sentences/s counts the decoding alone, loading
excluded, on both engines. The speeds are divided by ``transformer-small``'s on the same engine, timed in the same
run, alternating: that ratio is the figure the faster student's target is about. The figures are also written to
``runs/multi30k-distillation-speeds.json``, which ``scripts/multi30k_results.py`` puts into docs/results.md.
Models that are absent are left out; without the data or ``transformer-small`` the section is skipped.

    python scripts/benchmark.py --sections distillation
"""

from __future__ import annotations

import functools
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from encdec.inference.evaluation import score_translations
from encdec.io_utils import atomic_write_json

from .common import BenchmarkSettings, Section
from .multi30k_engines import encdec as run_encdec

logger = logging.getLogger(__name__)

BATCH_SIZE = 32
REPEATS = 2  # runs per model, engine and beam size, the order reversed every run; the median is reported
BASELINE = "transformer-small"
SPEEDS_FILE = Path("runs/multi30k-distillation-speeds.json")


def models() -> dict[str, list[Path]]:
    """name -> model folders (two for the ensemble) of the models found under ``runs/``."""
    runs = Path(os.environ.get("MULTI30K_RUNS", "runs"))
    found = {
        BASELINE: [runs / "multi30k-transformer-small"],
        "lstm-bahdanau": [runs / "multi30k-lstm-bahdanau"],
        "teacher: transformer+bahdanau": [runs / "multi30k-transformer-small", runs / "multi30k-lstm-bahdanau"],
        **{f"student: {name}": [runs / f"distill-multi30k-{name}" / "student"]
           for name in ("transformer-small", "transformer-fast", "lstm-bahdanau")},
    }
    return {name: folders for name, folders in found.items()
            if all((folder / "model.safetensors").is_file() for folder in folders)}


def is_transformer(folders: list[Path]) -> bool:
    config = json.loads((folders[0] / "config.json").read_text(encoding="utf-8"))
    return len(folders) == 1 and config["model_type"] == "transformer_seq2seq"


def torch_run(folders: list[Path], data: Path, beams: int, out: Path, threads: int) -> tuple[float, float]:
    """(sentences/s, BLEU) of ``encdec evaluate`` on test2016."""
    run_encdec("evaluate", *[arg for folder in folders for arg in ("--model", str(folder))],
               "--source-file", str(data / "test2016.de"), "--reference-file", str(data / "test2016.en"),
               "--num-beams", str(beams), "--batch-size", str(BATCH_SIZE), "--output", str(out), "--overwrite",
               "--quiet", "--threads", str(threads), threads=threads)
    result = json.loads(out.read_text(encoding="utf-8"))
    return result["sentences_per_second"], result["bleu"]


def ct2_run(export: Path, data: Path, beams: int, out: Path, threads: int) -> tuple[float, float]:
    """(sentences/s, BLEU) of CTranslate2 alone (``ct2_corpus.py``) on test2016."""
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("ct2_corpus.py")), str(export),
                           str(data / "test2016.de"), str(out), "--beam", str(beams), "--threads", str(threads)],
                          check=True, env=environment, capture_output=True, text=True)
    timing = json.loads(done.stdout.strip().splitlines()[-1])
    hypotheses = out.read_text(encoding="utf-8").splitlines()
    references = (data / "test2016.en").read_text(encoding="utf-8").splitlines()
    return timing["sentences"] / timing["translation_seconds"], score_translations(hypotheses, references)["bleu"]


def configurations(found: dict[str, list[Path]], root: Path, threads: int) -> list[tuple[str, str, Callable]]:
    """(model, engine, run(data, beams, out, threads) -> (sentences/s, BLEU)) of every row; exports the single
    Transformers to CTranslate2 int8 under ``root``."""
    rows: list[tuple[str, str, Callable]] = []
    for name, folders in found.items():
        rows.append((name, "torch float32", functools.partial(torch_run, folders)))
        if is_transformer(folders):
            export = root / f"ct2-{len(rows)}"
            run_encdec("export", "--model", str(folders[0]), "--format", "ctranslate2", "--output", str(export),
                       "--quantization", "int8", threads=threads)
            rows.append((name, "CTranslate2 int8", functools.partial(ct2_run, export)))
    return rows


def distillation(settings: BenchmarkSettings) -> Section | None:
    data = Path(os.environ.get("MULTI30K_DIR", "data/multi30k"))
    found = models()
    if not (data / "test2016.de").is_file() or BASELINE not in found:
        logger.info("distillation skipped: %s or the %s run is missing", data / "test2016.de", BASELINE)
        return None
    results: dict[tuple[int, int], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        rows = configurations(found, Path(tmp), settings.threads)
        for repeat in range(REPEATS):
            order = list(enumerate(rows)) if repeat % 2 == 0 else list(reversed(list(enumerate(rows))))
            for beams in (settings.num_beams, 1):
                for i, (model, engine, run) in order:
                    logger.info("distillation: %s, %s, beam %d (run %d)", model, engine, beams, repeat + 1)
                    results.setdefault((i, beams), []).append(run(data, beams, Path(tmp) / "out", settings.threads))
    figures = summarise(rows, results, settings.num_beams)
    atomic_write_json(SPEEDS_FILE, {"threads": settings.threads, "rows": figures})
    return Section("Distilled students", method_text(settings, found), table(figures, settings.num_beams))


def summarise(rows: list[tuple[str, str, Callable]], results: dict[tuple[int, int], list[tuple[float, float]]],
              beam: int) -> list[dict]:
    """One record per row: median sentences/s and BLEU per beam size, and the speed over the baseline's."""
    figures = []
    for i, (model, engine, _) in enumerate(rows):
        record = {"model": model, "engine": engine}
        for beams in (beam, 1):
            runs = results[(i, beams)]
            record[f"beam{beams}"] = {"sentences_per_second": round(statistics.median(r[0] for r in runs), 2),
                                      "bleu": round(runs[0][1], 2)}
        figures.append(record)
    for record in figures:
        base = next(r for r in figures if r["model"] == BASELINE and r["engine"] == record["engine"])
        for beams in (beam, 1):
            key = f"beam{beams}"
            record[key]["x_baseline"] = round(record[key]["sentences_per_second"] /
                                              base[key]["sentences_per_second"], 2)
    return figures


def table(figures: list[dict], beam: int) -> str:
    lines = [f"| model | engine | beam {beam}: sentences/s | x {BASELINE} | BLEU | greedy: sentences/s | "
             f"x {BASELINE} | BLEU |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for record in figures:
        cells = [f"{record[key]['sentences_per_second']:.1f} | {record[key]['x_baseline']:.2f} | "
                 f"{record[key]['bleu']:.2f}" for key in (f"beam{beam}", "beam1")]
        lines.append(f"| {record['model']} | {record['engine']} | {' | '.join(cells)} |")
    return "\n".join(lines)


def method_text(settings: BenchmarkSettings, found: dict[str, list[Path]]) -> str:
    folders = ", ".join(f"`{folder}`" for name, group in found.items() if "+" not in name for folder in group)
    return (
        f"The distilled Multi30k students of docs/results.md (section Distillation) beside their teacher and its "
        f"members ({folders}) on test2016 (1,000 sentences), at batch {BATCH_SIZE} with OMP_NUM_THREADS="
        f"{settings.threads}. torch rows are fresh `python -m encdec evaluate` processes; CTranslate2 rows are "
        "`encdec export --format ctranslate2 --quantization int8` folders decoded by `benchmarks/ct2_corpus.py`, "
        "a process that never imports torch. Sentences/s counts decoding only (loading excluded) and is the median "
        f"of {REPEATS} runs, alternated between models; *x {BASELINE}* divides it by `{BASELINE}`'s speed on the "
        "same engine in this run. BLEU is cased sacreBLEU (13a)."
    )
