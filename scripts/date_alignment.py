"""Alignment error rate of the demo models on the date task, whose word alignment is known by construction.

    python scripts/date_alignment.py [--work runs/date-alignment] [--max-steps 800]

Writes the date task with the ISO date's fields as three words ("2019 02 15") to plain-text files
(``encdec.inference.alignment.date_alignment_pairs``: 20,000 training pairs, 500 validation and 1,000 test triples with
gold links), trains the two demo recipes on them with ``encdec train`` (``configs/demo-transformer.yaml`` and
``configs/demo-lstm-bahdanau.yaml``, data overridden), chooses the Transformer's alignment layer on the validation
triples (``encdec align --gold-file ... --record``), and scores the chosen layer, every other layer and the monotone
diagonal on the test triples. The table goes between the ``alignment`` markers of docs/results.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from encdec.inference import load_model_and_tokenizer
from encdec.inference.alignment import alignment_error_rate, choose_layer, date_alignment_pairs, to_pharaoh
from encdec.inference.evaluation import choose_layer_on_files
from encdec.io_utils import atomic_write_text
from encdec.training import load_run_config, train

sys.path.insert(0, str(Path(__file__).resolve().parent))
from multi30k_results import replace_section  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
RECIPES = {"transformer": ("Transformer 2+2, d=128 (`demo-transformer`)", "configs/demo-transformer.yaml"),
           "lstm-bahdanau": ("BiLSTM + Bahdanau (`demo-lstm-bahdanau`)", "configs/demo-lstm-bahdanau.yaml")}


def write_task(folder: Path) -> dict[str, list]:
    """train/val/test .src/.tgt files (and .gold for val and test); returns the val and test triples."""
    folder.mkdir(parents=True, exist_ok=True)
    train = date_alignment_pairs(20000, seed=11)
    seen = {source for source, _, _ in train}
    held_out = [t for t in date_alignment_pairs(3000, seed=12) if t[0] not in seen]  # sources never trained on
    unique = list({t[0]: t for t in held_out}.values())
    splits = {"train": train, "val": unique[:500], "test": unique[500:1500]}
    for name, triples in splits.items():
        for suffix, column in (("src", 0), ("tgt", 1)):
            atomic_write_text(folder / f"{name}.{suffix}", "".join(t[column] + "\n" for t in triples))
        atomic_write_text(folder / f"{name}.gold", "".join(to_pharaoh(t[2]) + "\n" for t in triples))
    return splits


def diagonal(triples) -> float:
    predicted = [{(round(j * (len(s.split()) - 1) / 2), j) for j in range(3)} for s, _, _ in triples]
    return alignment_error_rate(predicted, [gold for _, _, gold in triples])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", default="runs/date-alignment")
    parser.add_argument("--max-steps", type=int, default=None, help="override the demo recipes' steps")
    args = parser.parse_args()
    work = Path(args.work)
    data = work / "data"
    splits = write_task(data)
    rows = []
    for name, (label, recipe) in RECIPES.items():
        out = work / name
        spec = {"format": "text", "data_dir": str(data), "source_lang": "src", "target_lang": "tgt",
                "splits": {"train": "train", "validation": "val", "test": "test"}}
        overrides = ["--data", json.dumps(spec), "--training.output_dir", str(out), "--training.overwrite", "true",
                     "--training.report_to", "none"]
        if args.max_steps:
            overrides += ["--training.max_steps", str(args.max_steps)]
        results = train(load_run_config(REPO_ROOT / recipe, overrides))
        chosen = choose_layer_on_files(out, data / "val.src", data / "val.tgt", data / "val.gold", record=True)
        model, tokenizer = load_model_and_tokenizer(out)
        test = splits["test"]
        _, rates = choose_layer(model, tokenizer, [t[0] for t in test], [t[1] for t in test], [t[2] for t in test])
        others = ", ".join(f"{layer}: {rate:.3f}" for layer, rate in rates.items())
        rows.append(f"| {label} | {results['test']['chrf']:.2f} | {chosen['layer']} | "
                    f"**{rates[str(chosen['layer'])]:.3f}** | {others} | {diagonal(test):.3f} |")
        print(rows[-1], flush=True)
    table = ("| model | test chrF | layer chosen on val (500 pairs) | test AER, chosen layer | test AER by decoder "
             "layer (0-based; mean = all layers) | test AER, monotone diagonal |\n|---|---:|---:|---:|---|---:|\n"
             + "\n".join(rows))
    results_md = REPO_ROOT / "docs" / "results.md"
    atomic_write_text(results_md, replace_section(results_md.read_text(encoding="utf-8"), "alignment", table))
    print(table)


if __name__ == "__main__":
    main()
