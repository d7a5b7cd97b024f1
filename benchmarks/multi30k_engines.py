"""The Multi30k engines section: trained models on test2016, end to end, per engine and precision.

For a Transformer (default ``runs/multi30k-transformer-fast``: ``scripts/multi30k.sh transformer-fast``) and the
BiLSTM with Bahdanau attention (``scripts/multi30k.sh lstm-bahdanau``): sentences/s and cased sacreBLEU at beam 5 and
greedy, in torch float32 and int8, in ONNX Runtime with float32 and int8 weights (``encdec export --format onnx``),
and for the Transformer in CTranslate2 with float32 and int8 weights. Every torch and ONNX Runtime measurement is a
fresh ``python -m encdec evaluate`` process (reading, tokenising, batching, decoding, detokenising, scoring); each
CTranslate2 one a fresh ``benchmarks/ct2_corpus.py`` process, which never imports torch (their OpenMP runtimes slow
each other in one process), scored here with the same sacreBLEU call. Skipped (the report keeps its earlier table)
when the data or a model is absent.

    MULTI30K_TRANSFORMER=runs/multi30k-transformer-fast \
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
from dataclasses import dataclass
from pathlib import Path

from .common import BenchmarkSettings, Section

logger = logging.getLogger(__name__)

BATCH_SIZE = 32
REPEATS = 2  # end-to-end runs per engine and beam size (more alternate between engines; the median is reported)
CT2_DRIVER = Path(__file__).with_name("ct2_corpus.py")


@dataclass(frozen=True)
class Row:
    """One engine of one model: ``encdec evaluate`` arguments, or a CTranslate2 export run by ``ct2_corpus.py``."""

    model: str
    engine: str
    evaluate_args: tuple[str, ...] = ()
    ct2_export: Path | None = None


def paths() -> tuple[Path, Path, Path]:
    return (Path(os.environ.get("MULTI30K_DIR", "data/multi30k")),
            Path(os.environ.get("MULTI30K_TRANSFORMER", "runs/multi30k-transformer-fast")),
            Path(os.environ.get("MULTI30K_RNN", "runs/multi30k-lstm-bahdanau")))


def environment(threads: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "ENCDEC_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}


def encdec(*args: str, threads: int) -> None:
    subprocess.run([sys.executable, "-m", "encdec", *args], check=True, env=environment(threads),
                   stdout=subprocess.DEVNULL)


def evaluate(data: Path, row: Row, beams: int, out: Path, threads: int) -> dict:
    """sentences/s (translation alone, as ``encdec evaluate`` records it) and BLEU of one row at ``beams``."""
    if row.ct2_export is None:
        encdec("evaluate", *row.evaluate_args, "--source-file", str(data / "test2016.de"), "--reference-file",
               str(data / "test2016.en"), "--num-beams", str(beams), "--batch-size", str(BATCH_SIZE), "--output",
               str(out), "--overwrite", threads=threads)
        return json.loads(out.read_text())
    from encdec.inference.evaluation import score_translations

    hypotheses = out.with_suffix(".txt")
    done = subprocess.run([sys.executable, str(CT2_DRIVER), str(row.ct2_export), str(data / "test2016.de"),
                           str(hypotheses), "--beam", str(beams), "--threads", str(threads)], check=True,
                          env=environment(threads), capture_output=True, text=True)
    timing = json.loads(done.stdout.strip().splitlines()[-1])
    references = (data / "test2016.en").read_text(encoding="utf-8").splitlines()
    scores = score_translations(hypotheses.read_text(encoding="utf-8").splitlines(), references)
    return {**scores, "sentences_per_second": timing["sentences"] / timing["translation_seconds"]}


def configurations(transformer: Path, rnn: Path, root: Path, threads: int) -> list[Row]:
    """Every row; exports the models to CTranslate2 (the Transformer) and ONNX (both) under ``root``."""
    rows = []
    for name, folder in (("Transformer", transformer), ("BiLSTM + Bahdanau", rnn)):
        rows += [Row(name, "torch float32", ("--model", str(folder))),
                 Row(name, "torch int8", ("--model", str(folder), "--quantize", "int8"))]
        if name == "Transformer":
            for weights in ("float32", "int8"):
                export = root / f"ct2-{weights}"
                encdec("export", "--model", str(folder), "--format", "ctranslate2", "--output", str(export),
                       "--quantization", weights, threads=threads)
                rows.append(Row(name, f"CTranslate2, {weights} weights", ct2_export=export))
        for weights in ("float32", "int8"):
            export = root / f"onnx-{name[:3]}-{weights}"
            encdec("export", "--model", str(folder), "--format", "onnx", "--output", str(export), "--quantize",
                   weights, threads=threads)
            rows.append(Row(name, f"ONNX Runtime, {weights} weights",
                            ("--engine", "onnxruntime", "--model", str(export))))
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
                for i, row in order:
                    logger.info("multi30k test2016, %s, %s, beam %d (run %d)", row.model, row.engine, beams,
                                repeat + 1)
                    results.setdefault((i, beams), []).append(
                        evaluate(data, row, beams, Path(tmp) / "result.json", settings.threads))
    return Section("Multi30k test2016 per engine", method_text(settings),
                   table(rows, results, settings.num_beams))


def table(rows: list[Row], results: dict[tuple[int, int], list[dict]], beam: int) -> str:
    """sentences/s, as multiples of the same model's torch float32 and torch int8 speeds, and BLEU, per beam."""
    columns = " | ".join(f"{label}: sentences/s | x torch float32 | x torch int8 | BLEU"
                         for label in (f"Beam {beam}", "Greedy"))
    lines = [f"| Model | Engine | {columns} |", "|---|---|" + "---:|" * 8]
    speeds = {(i, beams): statistics.median(run["sentences_per_second"] for run in results[(i, beams)])
              for i in range(len(rows)) for beams in (beam, 1)}
    for i, row in enumerate(rows):
        cells = []
        for beams in (beam, 1):
            base = {row_b.engine: speeds[(j, beams)] for j, row_b in enumerate(rows) if row_b.model == row.model}
            speed = speeds[(i, beams)]
            cells.append(f"{speed:.1f} | {speed / base['torch float32']:.2f} | {speed / base['torch int8']:.2f} | "
                         f"{results[(i, beams)][0]['bleu']:.2f}")
        lines.append(f"| {row.model} | {row.engine} | {' | '.join(cells)} |")
    return "\n".join(lines)


def method_text(settings: BenchmarkSettings) -> str:
    data, transformer, rnn = paths()
    return (
        f"Trained Multi30k models (`{transformer.name}`, `{rnn.name}`) on test2016 (1,000 sentences), with "
        f"OMP_NUM_THREADS={settings.threads} and the same thread count for every engine. Each torch and ONNX Runtime "
        "row is a fresh "
        f"`python -m encdec evaluate --batch-size {BATCH_SIZE}` process (ONNX Runtime: `--engine onnxruntime` on an "
        "`encdec export --format onnx` folder, `--quantize float32` or `int8`); each CTranslate2 row a fresh "
        "`benchmarks/ct2_corpus.py` process on an `encdec export --format ctranslate2` folder, which never imports "
        "torch (batches of 32, sorted by length, as `encdec translate`). Sentences/s counts the translation alone "
        f"(tokenising, batching, decoding, detokenising), the median of {REPEATS} runs alternated between engines; "
        "*x torch float32* and *x torch int8* divide it by the same model's torch speeds at the same beam; BLEU is "
        "cased sacreBLEU against test2016.en."
    )
