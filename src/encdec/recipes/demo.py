"""``make demo``: the whole workflow on the built-in date task, in a few minutes of CPU.

For a Transformer and a BiLSTM with Bahdanau attention it trains a tokenizer and the model with
``Seq2SeqTrainer`` (``encdec train configs/demo-*.yaml``), reloads the saved folder through ``pipeline()``,
reports exact match and BLEU on held-out dates with a few translations, and writes an attention heatmap.
Everything lands in ``runs/`` (of the current folder); each run keeps two checkpoints, the inputs of
``encdec average runs/demo-transformer/checkpoints/checkpoint-* --output runs/avg``. The run configs are package
data (``encdec/configs`` is a link to the repository's ``configs/``), so an installed encdec runs the demo from any
folder.

Run: ``encdec demo [--max-steps N] [--runs-dir runs]``.
"""

from __future__ import annotations

import shlex
import sys
import time
from importlib import resources
from pathlib import Path

from transformers import pipeline

from ..data import load_builtin_dates
from ..decoding_options import GREEDY, DecodeRequest
from ..inference.plotting import save_attention_plot
from ..progress import quiet_transformers_bars
from ..training import RunConfig, load_run_config, train

CONFIGS = Path(str(resources.files("encdec") / "configs"))
DEMOS = {"transformer": "demo-transformer.yaml", "lstm-bahdanau": "demo-lstm-bahdanau.yaml"}
EXAMPLE = "Wednesday, 3 Mar 2021"


def demo_config(name: str, runs_dir: Path, max_steps: int | None) -> RunConfig:
    """The demo's run config ``name`` (its model JSON, relative to it, comes from the package too), writing to
    ``runs_dir``.

    Each demo run keeps two checkpoints (``save_total_limit: 2``), enough for ``encdec average``. A ``max_steps``
    shorter than two of the config's evaluation intervals also shortens the interval to ``max_steps // 2`` (at
    least 1), so that the run still saves two checkpoints, and the loss logging interval to ``max_steps // 10``."""
    overrides = ["--training.output_dir", str(runs_dir / f"demo-{name}"), "--training.overwrite", "true"]
    if max_steps:
        overrides += ["--training.max_steps", str(max_steps)]
    config = load_run_config(CONFIGS / DEMOS[name], overrides)
    if max_steps:
        training = config.training
        training.eval_steps = min(training.eval_steps or max_steps, max(1, max_steps // 2))
        training.logging_steps = min(training.logging_steps, max(1, max_steps // 10))
    return config


def run_one(name: str, runs_dir: Path, max_steps: int | None) -> dict:
    config = demo_config(name, runs_dir, max_steps)
    start = time.perf_counter()
    results = train(config)
    minutes = (time.perf_counter() - start) / 60
    model_dir = config.training.output_dir

    # the saved folder, loaded as a user without encdec would: its config.json names the pipeline and the code
    with quiet_transformers_bars():
        translator = pipeline("seq2seq-generation", model=model_dir, trust_remote_code=True)
    test = load_builtin_dates(train=config.data.builtin_train, validation=config.data.builtin_validation,
                              test=config.data.builtin_test, seed=config.data.seed)["test"]
    outputs = [out["generated_text"] for out in translator(list(test["source"]), batch_size=100, **GREEDY.settings())]
    hits = sum(o.strip() == t for o, t in zip(outputs, test["target"], strict=True))
    png = plot_example(model_dir, runs_dir / f"attention-{name}.png")
    return {"name": name, "dir": model_dir, "minutes": minutes, "exact_match": hits / len(test),
            "bleu": results["test"]["bleu"], "chrf": results["test"]["chrf"], "png": png,
            "examples": list(zip(test["source"][:5], outputs[:5], test["target"][:5], strict=True)),
            "example": translator(EXAMPLE)[0]["generated_text"]}


def plot_example(model_dir: str | Path, out_path: Path) -> Path:
    """The heatmap of ``EXAMPLE``: the alignment that the server's page draws for it (``encdec serve``, its default
    beam size and budget, the alignment layer's heads averaged), so the picture and the page agree."""
    return save_attention_plot(model_dir, EXAMPLE, out_path, decoding=DecodeRequest(), overwrite=True)


def run_demo(runs_dir: Path, max_steps: int | None = None) -> None:
    """Train, translate and plot each demo model under ``runs_dir``, then print the report."""
    reports = [run_one(name, runs_dir, max_steps) for name in DEMOS]

    print("\n=== encdec demo: human-readable dates -> ISO 8601, held-out test set ===")
    for r in reports:
        print(f"\n{r['name']}: exact match {r['exact_match']:.1%}, BLEU {r['bleu']:.1f}, chrF {r['chrf']:.1f} "
              f"(trained in {r['minutes']:.1f} min) -> {r['dir']}")
        for source, output, target in r["examples"]:
            mark = "ok" if output.strip() == target else f"expected {target}"
            print(f"  {source:<32} -> {output:<12} {mark}")
        print(f"  {EXAMPLE:<32} -> {r['example']}   (attention heatmap: {r['png']})")
    print(f"\nServe the demo Transformer (a web page with its attention at http://127.0.0.1:8000/):\n"
          f"  {serve_command(reports[0]['dir'])}")


def serve_command(model_dir: Path) -> str:
    """The one command that serves ``model_dir``: this Python's ``-m encdec serve`` (which works in a venv that is
    not activated, as ``make demo`` uses it)."""
    return shlex.join([sys.executable, "-m", "encdec", "serve", "--model", str(model_dir)])

