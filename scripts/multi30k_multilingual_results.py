"""Collect the Multi30k multilingual run and its bilingual baselines (scripts/multi30k_multilingual.sh) into the
"Several languages" tables of docs/results.md.

    python scripts/multi30k_multilingual_results.py --runs RUNS   # reads RUNS/multilingual and RUNS/bilingual-S-T

Each model folder holds ``test2016-SRC-TGT-beam5.json`` and ``-beam1.json`` per direction (written by ``encdec
evaluate``), ``eval_results.json`` (steps and training wall time from ``encdec train``) and its weights (the parameter
count). Only the text between the ``<!-- begin: multilingual -->`` and ``<!-- end: multilingual -->`` markers (and the
``multilingual-cost`` ones) is replaced, row by row: a direction no model has scored keeps its old row, and a direction
without a bilingual model shows a dash in its columns.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from encdec.folders import read_safetensors_shapes
from encdec.io_utils import atomic_write_text
from multi30k_results import replace_section, training_minutes

REPO_ROOT = Path(__file__).resolve().parents[1]
BASELINES = ["de-en", "en-de", "fr-en", "en-fr", "cs-en", "en-cs"]  # the directions with a bilingual model
DIRECTIONS = [*BASELINES, "de-fr", "fr-de", "de-cs", "cs-de", "fr-cs", "cs-fr"]
MULTILINGUAL = "multilingual"
# the goal: as good on average as the bilingual models, and no direction worse than this many BLEU points
LARGEST_LOSS = 1.0


def read_model(folder: Path, directions: list[str]) -> dict | None:
    """A finished model folder's scores per direction (beam 5 and greedy), training record and size; None if the
    training is not finished. A direction not scored yet is left out."""
    trained, weights = folder / "eval_results.json", folder / "model.safetensors"
    if not (trained.is_file() and weights.is_file()):
        return None
    scores = {}
    for direction in directions:
        files = [folder / f"test2016-{direction}-beam{beams}.json" for beams in (5, 1)]
        if all(file.is_file() for file in files):
            scores[direction] = [json.loads(file.read_text(encoding="utf-8")) for file in files]
    shapes = read_safetensors_shapes(weights)
    return {"scores": scores, "train": json.loads(trained.read_text(encoding="utf-8"))["train"],
            "parameters": sum(math.prod(shape) for shape in shapes.values())}


def read_models(runs: Path) -> dict[str, dict]:
    """``{"multilingual": ..., "de-en": ...}``: the multilingual model and each bilingual one that has finished."""
    found = {MULTILINGUAL: read_model(runs / MULTILINGUAL, DIRECTIONS)}
    found.update({direction: read_model(runs / f"bilingual-{direction}", [direction]) for direction in BASELINES})
    missing = [name for name, model in found.items() if model is None]
    if missing:
        print(f"no finished run for {', '.join(missing)} in {runs}", file=sys.stderr)
    return {name: model for name, model in found.items() if model is not None}


def cell(model: dict | None, direction: str, beams: int, key: str) -> str:
    scores = (model or {}).get("scores", {}).get(direction)
    return f"{scores[0 if beams == 5 else 1][key]:.2f}" if scores else "-"


def speed(model: dict | None, direction: str) -> float | None:
    scores = (model or {}).get("scores", {}).get(direction)
    return scores[0]["sentences_per_second"] if scores else None


def direction_row(direction: str, models: dict[str, dict]) -> str:
    multi, bi = models.get(MULTILINGUAL), models.get(direction)
    gap = "-"
    if bi and multi and direction in multi["scores"] and direction in bi["scores"]:
        gap = f"{multi['scores'][direction][0]['bleu'] - bi['scores'][direction][0]['bleu']:+.2f}"
    fast, slow = speed(multi, direction), speed(bi, direction)
    ratio = f"{fast / slow:.2f}" if fast and slow else "-"
    return (f"| {direction} | {cell(multi, direction, 5, 'bleu')} | {cell(bi, direction, 5, 'bleu')} | {gap} | "
            f"{cell(multi, direction, 1, 'bleu')} | {cell(bi, direction, 1, 'bleu')} | "
            f"{cell(multi, direction, 5, 'chrf')} | {cell(bi, direction, 5, 'chrf')} | "
            f"{f'{fast:.1f}' if fast else '-'} | {f'{slow:.1f}' if slow else '-'} | {ratio} |")


def goal_line(models: dict[str, dict]) -> str:
    """Whether the multilingual model meets the goal over the directions that have both models."""
    multi = models.get(MULTILINGUAL)
    both = [d for d in BASELINES if multi and d in multi["scores"] and d in models.get(d, {}).get("scores", {})]
    if not both:
        return "No direction has both models scored yet."
    gaps = {d: multi["scores"][d][0]["bleu"] - models[d]["scores"][d][0]["bleu"] for d in both}
    mean = sum(gaps.values()) / len(gaps)
    worst = min(gaps, key=gaps.get)
    met = mean >= 0 and gaps[worst] >= -LARGEST_LOSS
    return (f"Over the {len(both)} directions with a bilingual model the multilingual model is "
            f"{mean:+.2f} BLEU (beam 5) on average, and {gaps[worst]:+.2f} on its worst direction ({worst}): the "
            f"goal (at least as good on average, no direction more than {LARGEST_LOSS:g} BLEU worse) is "
            f"{'met' if met else 'missed'}.")


def scores_table(models: dict[str, dict]) -> str:
    lines = ["| direction | BLEU beam 5, multilingual | BLEU beam 5, bilingual | difference | BLEU greedy, "
             "multilingual | BLEU greedy, bilingual | chrF beam 5, multilingual | chrF beam 5, bilingual | "
             "beam 5 sent/s, multilingual | beam 5 sent/s, bilingual | speed ratio (multi / bi) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [direction_row(direction, models) for direction in DIRECTIONS  # rows without scores keep the old ones
              if any(direction in model["scores"] for model in models.values())]
    signatures = {scores[0]["bleu_signature"] for model in models.values() for scores in model["scores"].values()}
    chrf = {scores[0]["chrf_signature"] for model in models.values() for scores in model["scores"].values()}
    if signatures:
        lines += ["", "sacreBLEU signatures: BLEU " + ", ".join(f"`{s}`" for s in sorted(signatures)) + "; chrF "
                  + ", ".join(f"`{s}`" for s in sorted(chrf)) + "."]
    return "\n".join([*lines, "", goal_line(models)])


def cost_table(models: dict[str, dict]) -> str:
    lines = ["| model | directions | parameters | steps | training wall time (1 core) |", "|---|---:|---:|---:|---:|"]
    for name, model in models.items():
        label = "multilingual (`multi30k-multilingual-cpu`)" if name == MULTILINGUAL else \
            f"bilingual {name} (`multi30k-bilingual-cpu`)"
        count = len(DIRECTIONS) if name == MULTILINGUAL else 1
        lines.append(f"| {label} | {count} | {model['parameters'] / 1e6:.2f}M | {model['train']['global_step']:,} | "
                     f"{training_minutes(model['train'])} |")
    bilingual = [model for name, model in models.items() if name != MULTILINGUAL]
    if bilingual:
        total = sum(model["train"].get("train_runtime_total", model["train"]["train_runtime"]) for model in bilingual)
        steps = sum(model["train"]["global_step"] for model in bilingual)
        lines.append(f"| the {len(bilingual)} bilingual models together | {len(bilingual)} | - | {steps:,} | "
                     f"{total / 60:.1f} min |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=REPO_ROOT / "runs" / "multi30k-multilingual",
                        help="folder holding multilingual/ and bilingual-SRC-TGT/")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "docs" / "results.md")
    args = parser.parse_args()
    models = read_models(args.runs)
    text = args.output.read_text(encoding="utf-8")
    text = replace_section(text, "multilingual", scores_table(models))
    text = replace_section(text, "multilingual-cost", cost_table(models))
    atomic_write_text(args.output, text)
    print(f"wrote the multilingual tables of {args.output}")


if __name__ == "__main__":
    main()
