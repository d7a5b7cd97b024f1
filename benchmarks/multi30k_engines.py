"""The Multi30k engines section: trained models on test2016, end to end through ``encdec evaluate``, per engine.

For the Transformer (``scripts/multi30k.sh transformer-small``) and the BiLSTM with Bahdanau attention
(``scripts/multi30k.sh lstm-bahdanau``): sentences/s and cased sacreBLEU at beam 5 and greedy, in torch float32,
int8 and bfloat16, and for the Transformer in CTranslate2 with float32 and int8 weights. Every measurement is a fresh
``python -m encdec evaluate`` process (reading, tokenising, batching, decoding, detokenising, scoring), so each
engine has its process to itself. Skipped (the report keeps its earlier table) when the data or a model is absent.

    MULTI30K_TRANSFORMER=runs/multi30k-transformer-small \
    MULTI30K_RNN=runs/multi30k-lstm-bahdanau python scripts/benchmark.py --sections multi30k_engines
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from .common import BenchmarkSettings, Section

logger = logging.getLogger(__name__)

BATCH_SIZE = 32
REPEATS = 1  # end-to-end runs per engine and beam size (more alternate between engines; the median is reported)
MODEL_PRECISIONS = (("torch float32", []), ("torch int8", ["--quantize", "int8"]),
                    ("torch bfloat16", ["--dtype", "bfloat16"]))


def paths() -> tuple[Path, Path, Path]:
    return (Path(os.environ.get("MULTI30K_DIR", "data/multi30k")),
            Path(os.environ.get("MULTI30K_TRANSFORMER", "runs/multi30k-transformer-small")),
            Path(os.environ.get("MULTI30K_RNN", "runs/multi30k-lstm-bahdanau")))


def encdec(*args: str, threads: int) -> None:
    environment = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    subprocess.run([sys.executable, "-m", "encdec", *args], check=True, env=environment, stdout=subprocess.DEVNULL)


def evaluate(data: Path, model_args: list[str], beams: int, out: Path, threads: int) -> dict:
    encdec("evaluate", *model_args, "--source-file", str(data / "test2016.de"), "--reference-file",
           str(data / "test2016.en"), "--num-beams", str(beams), "--batch-size", str(BATCH_SIZE), "--output",
           str(out), "--overwrite", threads=threads)
    return json.loads(out.read_text())


def configurations(transformer: Path, rnn: Path, root: Path, threads: int) -> list[tuple[str, str, list[str]]]:
    """(model, engine, evaluate arguments) of every row; exports the Transformer to CTranslate2 under ``root``."""
    rows = [("Transformer", name, ["--model", str(transformer), *args]) for name, args in MODEL_PRECISIONS]
    for quantization in ("float32", "int8"):
        folder = root / f"ct2-{quantization}"
        encdec("export", "--model", str(transformer), "--format", "ctranslate2", "--output", str(folder),
               "--quantization", quantization, threads=threads)
        rows.append(("Transformer", f"CTranslate2, {quantization} weights",
                     ["--engine", "ctranslate2", "--model", str(folder)]))
    rows += [("BiLSTM + Bahdanau", name, ["--model", str(rnn), *args]) for name, args in MODEL_PRECISIONS]
    return rows


def multi30k_engines(settings: BenchmarkSettings) -> Section | None:
    data, transformer, rnn = paths()
    missing = [str(p) for p in (data / "test2016.de", transformer / "model.safetensors", rnn / "model.safetensors")
               if not p.is_file()]
    if missing:
        logger.info("multi30k_engines skipped: %s missing", ", ".join(missing))
        return None
    results: dict[tuple[int, int], list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        rows = configurations(transformer, rnn, Path(tmp), settings.threads)
        for repeat in range(REPEATS):
            order = list(enumerate(rows)) if repeat % 2 == 0 else list(reversed(list(enumerate(rows))))
            for beams in (settings.num_beams, 1):
                for i, (model, engine, args) in order:
                    logger.info("multi30k test2016, %s, %s, beam %d (run %d)", model, engine, beams, repeat + 1)
                    results.setdefault((i, beams), []).append(
                        evaluate(data, args, beams, Path(tmp) / "result.json", settings.threads))
    return Section("Multi30k test2016 per engine", method_text(settings),
                   table(rows, results, settings.num_beams))


def table(rows: list[tuple[str, str, list[str]]], results: dict[tuple[int, int], list[dict]], beam: int) -> str:
    lines = [f"| Model | Engine | Beam {beam}: sentences/s | x torch float32 | BLEU | Greedy: sentences/s "
             "| x torch float32 | BLEU |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    base = {}
    for i, (model, engine, _) in enumerate(rows):
        cells = []
        for beams in (beam, 1):
            runs = results[(i, beams)]
            speed = statistics.median(run["sentences_per_second"] for run in runs)
            base.setdefault((model, beams), speed)
            cells.append(f"{speed:.1f} | {speed / base[(model, beams)]:.2f} | {runs[0]['bleu']:.2f}")
        lines.append(f"| {model} | {engine} | {' | '.join(cells)} |")
    return "\n".join(lines)


def method_text(settings: BenchmarkSettings) -> str:
    data, transformer, rnn = paths()
    return (
        f"The Multi30k models of docs/results.md (`{transformer}`, `{rnn}`) on test2016 (1,000 sentences), each row "
        f"a fresh `python -m encdec evaluate --batch-size {BATCH_SIZE}` process with OMP_NUM_THREADS="
        f"{settings.threads} (CTranslate2 takes the same thread count): end to end, from reading the file to the "
        f"cased sacreBLEU score. Sentences/s is the median of {REPEATS} runs, alternated between engines; *x torch "
        "float32* divides it by the same model's torch float32 speed. CTranslate2 rows are `encdec export "
        "--format ctranslate2` folders with float32 and int8 weights."
    )
