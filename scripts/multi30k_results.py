"""Collect the Multi30k De->En runs of scripts/multi30k.sh into the tables of docs/results.md.

    python scripts/multi30k_results.py   # reads runs/multi30k-*/, rewrites the marked tables of docs/results.md
                                         # and the summary in README.md in place

Each recipe's row comes from its model folder: ``test2016-beam5.json`` and ``test2016-beam1.json`` (written by
``encdec evaluate``), ``eval_results.json`` (steps, epochs and training wall time from ``encdec train``), the
weights' shapes (parameter count), the last checkpoint's ``trainer_state.json`` (the validation curve) and the model
card (copied to model_cards/multi30k/RECIPE.md). Only the text between ``<!-- begin: NAME -->`` and
``<!-- end: NAME -->`` markers is replaced; the prose around it is kept.
A recipe without a finished run is left out of the tables and named on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from encdec.hub import read_safetensors_shapes
from encdec.io_utils import atomic_write_text

REPO_ROOT = Path(__file__).resolve().parents[1]
RECIPES = {  # recipe -> (row label, target cased BLEU with beam 5)
    "transformer-small": ("Transformer 3+3, d=256, post-LN", 40.0),
    "lstm-bahdanau": ("BiLSTM + Bahdanau attention", 35.0),
    "lstm-luong-general": ("BiLSTM + Luong general attention, input feeding", 35.0),
    "lstm-noattn": ("BiLSTM -> LSTM, no attention, source summary fed to every step", 20.0),
}
PUBLISHED = [  # (model, BLEU, how it was measured, source, our recipe, our closest measure), as quoted in the issue
    ("3+3 layer Transformer, d=256", "36.5", "lowercased, spaCy-tokenised, greedy",
     "bentrevett/pytorch-seq2seq legacy notebook 6", "transformer-small", "bleu_lowercase"),
    ("6+6 layer pre-LN Transformer, 56M parameters", "39.0", "cased, detokenised, sacreBLEU 13a",
     "dev-jonghoonpark/annotated-transformer-modern", "transformer-small", "bleu"),
    ("post-LN, same recipe", "13.4", "-", "dev-jonghoonpark/annotated-transformer-modern", "transformer-small",
     "bleu"),
    ("BiGRU + Bahdanau, 20M parameters", "28.3", "lowercased tokens", "bentrevett notebook 3", "lstm-bahdanau",
     "bleu_lowercase"),
    ("2-layer LSTM, no attention", "13.8", "lowercased tokens", "bentrevett notebook 1", "lstm-noattn",
     "bleu_lowercase"),
]
MEASURES = {"bleu": "cased BLEU", "bleu_lowercase": "lowercased BLEU"}


def read_run(folder: Path) -> dict | None:
    """Everything a row needs from one finished run folder, or None when the run is not complete."""
    files = [folder / name for name in ("test2016-beam5.json", "test2016-beam1.json", "eval_results.json",
                                        "model.safetensors")]
    if not all(file.is_file() for file in files):
        return None
    beam, greedy, trained = (json.loads(file.read_text()) for file in files[:3])
    shapes = read_safetensors_shapes(files[3])
    states = sorted(folder.glob("checkpoints/checkpoint-*/trainer_state.json"),
                    key=lambda path: int(path.parent.name.split("-")[1]))
    history = json.loads(states[-1].read_text())["log_history"] if states else []
    return {"beam": beam, "greedy": greedy, "train": trained["train"], "history": history,
            "parameters": sum(math.prod(shape) for shape in shapes.values())}


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def results_table(runs: dict[str, dict]) -> str:
    lines = ["| recipe | parameters | BLEU beam 5 | BLEU greedy | lc BLEU beam 5 | lc BLEU greedy | chrF beam 5 | "
             "chrF greedy | target (BLEU beam 5) | steps (epochs) | training wall time | beam 5 sent/s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for recipe, run in runs.items():
        label, target = RECIPES[recipe]
        beam, greedy, train = run["beam"], run["greedy"], run["train"]
        met = "met" if beam["bleu"] >= target else "missed"
        scores = " | ".join(f"{run[decoding][key]:.2f}" for key in ("bleu_lowercase", "chrf")
                            for decoding in ("beam", "greedy"))
        lines.append(
            f"| {label} (`{recipe}`) | {run['parameters'] / 1e6:.1f}M | **{beam['bleu']:.2f}** | "
            f"{greedy['bleu']:.2f} | {scores} | {target:.1f} ({met}) | "
            f"{train['global_step']:,} ({train['epoch']:.1f}) | {minutes(train['train_runtime'])} | "
            f"{beam['sentences_per_second']:.1f} |")
    signatures = {run["beam"]["bleu_signature"] for run in runs.values()}
    chrf = {run["beam"]["chrf_signature"] for run in runs.values()}
    lowercase = {run["beam"]["bleu_lowercase_signature"] for run in runs.values()}
    lines += ["", "sacreBLEU signatures: BLEU " + ", ".join(f"`{s}`" for s in sorted(signatures)) +
              "; lowercased BLEU " + ", ".join(f"`{s}`" for s in sorted(lowercase)) +
              "; chrF " + ", ".join(f"`{s}`" for s in sorted(chrf)) + "."]
    return "\n".join(lines)


def published_table(runs: dict[str, dict]) -> str:
    lines = ["| published model | BLEU | how it was measured | source | ours, closest measure (sacreBLEU 13a): "
             "beam 5 / greedy |", "|---|---:|---|---|---|"]
    for model, bleu, how, source, recipe, measure in PUBLISHED:
        run = runs.get(recipe)
        ours = (f"`{recipe}`: {MEASURES[measure]} {run['beam'][measure]:.2f} / {run['greedy'][measure]:.2f}"
                if run else f"`{recipe}`: not run")
        lines.append(f"| {model} | {bleu} | {how} | {source} | {ours} |")
    return "\n".join(lines)


def commands_table(runs: dict[str, dict]) -> str:
    lines = ["| recipe | command (from the repository root, after `make venv`) |", "|---|---|"]
    lines += [f"| `{recipe}` | `OMP_NUM_THREADS=1 PATH=.venv/bin:$PATH scripts/multi30k.sh {recipe}` |"
              for recipe in runs]
    return "\n".join(lines)


def curves_table(runs: dict[str, dict]) -> str:
    lines = ["| recipe | validation BLEU (greedy) by step | training loss (label-smoothed) by step | "
             "largest gradient norm logged |", "|---|---|---|---:|"]
    for recipe, run in runs.items():
        evals = [f"{e['step']}: {e['eval_bleu']:.1f}" for e in run["history"] if "eval_bleu" in e]
        losses = [e for e in run["history"] if "loss" in e]
        every = max(1, len(losses) // 6)
        shown = [f"{e['step']}: {e['loss']:.2f}" for e in losses[every - 1::every]]
        norms = [e["grad_norm"] for e in losses if "grad_norm" in e]
        largest = f"{max(norms):.2f}" if norms else "-"
        lines.append(f"| `{recipe}` | {', '.join(evals)} | {', '.join(shown)} | {largest} |")
    return "\n".join(lines)


def summary_table(runs: dict[str, dict]) -> str:
    """The README's short version: cased BLEU with beam 5 against the target, size and training time."""
    lines = ["| recipe | parameters | test2016 BLEU, beam 5 (greedy) | target | chrF | training (1 core) |",
             "|---|---:|---:|---:|---:|---:|"]
    for recipe, run in runs.items():
        label, target = RECIPES[recipe]
        beam, greedy, train = run["beam"], run["greedy"], run["train"]
        lines.append(f"| {label} | {run['parameters'] / 1e6:.1f}M | **{beam['bleu']:.2f}** ({greedy['bleu']:.2f}) | "
                     f"{target:.0f} | {beam['chrf']:.1f} | {minutes(train['train_runtime'])}, "
                     f"{train['global_step']:,} steps |")
    return "\n".join(lines)


def replace_section(text: str, name: str, body: str) -> str:
    pattern = re.compile(rf"(<!-- begin: {name} -->\n)(?:.*?\n)?(<!-- end: {name} -->)", re.S)
    if not pattern.search(text):
        raise SystemExit(f"docs/results.md has no <!-- begin: {name} --> ... <!-- end: {name} --> markers")
    return pattern.sub(lambda m: m.group(1) + body + "\n" + m.group(2), text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=REPO_ROOT / "runs", help="folder holding multi30k-RECIPE/")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "docs" / "results.md")
    parser.add_argument("--cards", type=Path, default=REPO_ROOT / "model_cards" / "multi30k",
                        help="folder for copies of the trained models' cards")
    parser.add_argument("--readme", type=Path, default=REPO_ROOT / "README.md", help="gets the short summary table")
    args = parser.parse_args()
    runs = {}
    for recipe in RECIPES:
        run = read_run(args.runs / f"multi30k-{recipe}")
        if run is None:
            print(f"no finished run for {recipe} in {args.runs / f'multi30k-{recipe}'}; left out", file=sys.stderr)
        else:
            runs[recipe] = run
    text = args.output.read_text(encoding="utf-8")
    for name, body in (("results", results_table(runs)), ("published", published_table(runs)),
                       ("commands", commands_table(runs)), ("curves", curves_table(runs))):
        text = replace_section(text, name, body)
    atomic_write_text(args.output, text)
    args.cards.mkdir(parents=True, exist_ok=True)
    for recipe in runs:  # the trained models' cards (model-index with the test2016 scores), kept in the repository
        card = args.runs / f"multi30k-{recipe}" / "README.md"
        atomic_write_text(args.cards / f"{recipe}.md", card.read_text(encoding="utf-8"))
    readme = args.readme.read_text(encoding="utf-8")
    atomic_write_text(args.readme, replace_section(readme, "multi30k-summary", summary_table(runs)))
    print(f"wrote {args.output} and the summary in {args.readme} ({len(runs)} of {len(RECIPES)} recipes)")


if __name__ == "__main__":
    main()
