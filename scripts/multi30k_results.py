"""Collect the Multi30k De->En runs of scripts/multi30k.sh into the tables of docs/results.md.

    python scripts/multi30k_results.py   # reads runs/multi30k-*/, rewrites the marked tables of docs/results.md
                                         # and the summary in README.md in place

Each recipe's row comes from its model folder: ``test2016-beam5.json`` and ``test2016-beam1.json`` (written by
``encdec evaluate``), ``eval_results.json`` (steps, epochs and training wall time from ``encdec train``), the
weights' shapes (parameter count), the last checkpoint's ``trainer_state.json`` (the validation curve) and the model
card (copied to model_cards/multi30k/RECIPE.md). Only the text between ``<!-- begin: NAME -->`` and
``<!-- end: NAME -->`` markers is replaced; the prose around it is kept.
Run folders are not committed (weights stay out of the repository), so a recipe without a finished run in ``--runs``
keeps its existing rows: rows are matched by their first cell, and only the recipes found in ``--runs`` are
rewritten. Each kept recipe is named on stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path

from encdec.folders import read_safetensors_shapes
from encdec.io_utils import atomic_write_text

REPO_ROOT = Path(__file__).resolve().parents[1]
RECIPES = {  # recipe -> (row label, target cased BLEU with beam 5)
    "transformer-small": ("Transformer 3+3, d=256, post-LN", 40.0),
    "lstm-bahdanau": ("BiLSTM + Bahdanau attention", 35.0),
    "lstm-luong-general": ("BiLSTM + Luong general attention, input feeding", 35.0),
    "lstm-noattn": ("BiLSTM -> LSTM, no attention, source summary fed to every step", 20.0),
}
# (model, BLEU, how it was measured, source, our recipe, our closest measure), as the papers and tutorials give them
PUBLISHED = [
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
# OMP_NUM_THREADS of each row's run (the run folders do not record it): every row's run shared the 2-core machine
# with another recipe, one core each
THREADS = {"transformer-small": 1, "lstm-bahdanau": 1, "lstm-luong-general": 1, "lstm-noattn": 1}


def cores(recipe: str) -> str:
    return f"{THREADS[recipe]} core{'s' if THREADS[recipe] > 1 else ''}"


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


def training_minutes(train: dict) -> str:
    """A run's training wall time: every attempt of a stopped and resumed run (``train_runtime_total``, counted
    by encdec.training.TrainingClock); only the last one's, said so, when an older checkpoint kept no count."""
    total = train.get("train_runtime_total")
    if total is not None or not train.get("resumed_at_step"):
        return minutes(total if total is not None else train["train_runtime"])
    return f"{minutes(train['train_runtime'])} after resuming at step {train['resumed_at_step']:,}"


def results_table(runs: dict[str, dict]) -> str:
    lines = ["| recipe | parameters | BLEU beam 5 | BLEU greedy | lc BLEU beam 5 | lc BLEU greedy | chrF beam 5 | "
             "chrF greedy | target (BLEU beam 5) | steps (epochs) | training wall time (cores) | beam 5 sent/s |",
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
            f"{train['global_step']:,} ({train['epoch']:.1f}) | {training_minutes(train)} "
            f"({THREADS[recipe]}) | {beam['sentences_per_second']:.1f} |")
    signatures = {run["beam"]["bleu_signature"] for run in runs.values()}
    chrf = {run["beam"]["chrf_signature"] for run in runs.values()}
    lowercase = {run["beam"]["bleu_lowercase_signature"] for run in runs.values()}
    if not runs:
        return "\n".join(lines)
    lines += ["", "sacreBLEU signatures: BLEU " + ", ".join(f"`{s}`" for s in sorted(signatures)) +
              "; lowercased BLEU " + ", ".join(f"`{s}`" for s in sorted(lowercase)) +
              "; chrF " + ", ".join(f"`{s}`" for s in sorted(chrf)) + "."]
    return "\n".join(lines)


def published_table(runs: dict[str, dict]) -> str:
    lines = ["| published model | BLEU | how it was measured | source | ours, closest measure (sacreBLEU 13a): "
             "beam 5 / greedy |", "|---|---:|---|---|---|"]
    for model, bleu, how, source, recipe, measure in PUBLISHED:
        if recipe in runs:  # the others keep their rows (merge_rows)
            run = runs[recipe]
            ours = f"`{recipe}`: {MEASURES[measure]} {run['beam'][measure]:.2f} / {run['greedy'][measure]:.2f}"
            lines.append(f"| {model} | {bleu} | {how} | {source} | {ours} |")
    return "\n".join(lines)


def commands_table(runs: dict[str, dict]) -> str:
    lines = ["| recipe | command (from the repository root, after `make venv`) |", "|---|---|"]
    lines += [f"| `{recipe}` | `OMP_NUM_THREADS={THREADS[recipe]} PATH=.venv/bin:$PATH scripts/multi30k.sh {recipe}` |"
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
    lines = ["| recipe | parameters | test2016 BLEU, beam 5 (greedy) | target | chrF | training |",
             "|---|---:|---:|---:|---:|---:|"]
    for recipe, run in runs.items():
        label, target = RECIPES[recipe]
        beam, greedy, train = run["beam"], run["greedy"], run["train"]
        lines.append(f"| {label} | {run['parameters'] / 1e6:.1f}M | **{beam['bleu']:.2f}** ({greedy['bleu']:.2f}) | "
                     f"{target:.0f} | {beam['chrf']:.1f} | {training_minutes(train)} on {cores(recipe)}, "
                     f"{train['global_step']:,} steps |")
    return "\n".join(lines)


def read_ensembles(folder: Path) -> dict[str, dict]:
    """name -> {"beam", "greedy"} for each ensemble scored by scripts/multi30k_ensemble.sh under ``folder``."""
    found = {}
    for run in sorted(folder.glob("*/")):
        files = [run / "test2016-beam5.json", run / "test2016-beam1.json"]
        if all(file.is_file() for file in files):
            found[run.name] = {name: json.loads(file.read_text()) for name, file in zip(("beam", "greedy"), files,
                                                                                        strict=True)}
    return found


def member_bleu(model_dir: str) -> str:
    """A member's own test2016 BLEU with beam 5, from its folder (``-`` when it was not scored)."""
    scored = Path(model_dir) / "test2016-beam5.json"
    return f"{json.loads(scored.read_text())['bleu']:.2f}" if scored.is_file() else "-"


def ensembles_table(ensembles: dict[str, dict]) -> str:
    lines = ["| ensemble | members (their own BLEU beam 5) | BLEU beam 5 | BLEU greedy | chrF beam 5 | beam 5 sent/s |",
             "|---|---|---:|---:|---:|---:|"]
    for name, scores in ensembles.items():
        beam, greedy = scores["beam"], scores["greedy"]
        members = ", ".join(f"`{Path(m).name}` ({member_bleu(m)})" for m in beam["model_dir"])
        lines.append(f"| {name} | {members} | **{beam['bleu']:.2f}** | {greedy['bleu']:.2f} | {beam['chrf']:.2f} | "
                     f"{beam['sentences_per_second']:.1f} |")
    return "\n".join(lines)


# distilled students (scripts/multi30k_distill.sh NAME) -> (row label, target cased BLEU with beam 5, speed target:
# the least beam-5 sentences/s over transformer-small's on the same engine, or None)
STUDENTS = {
    "transformer-small": ("student, Transformer 3+3, d=256", 40.5, None),
    "transformer-fast": ("student, Transformer 6+1, d=192, pre-LN, 6k vocabulary", 39.64, 2.0),
    "lstm-bahdanau": ("student, BiLSTM + Bahdanau attention", 37.76, None),
}
TEACHER = "transformer+bahdanau"  # the ensemble in runs/multi30k-ensembles the distillation recipes translate with


def read_speeds(path: Path) -> dict[tuple[str, str], dict]:
    """(model, engine) -> the distillation benchmark's figures (benchmarks/distillation.py), or {} when absent."""
    if not path.is_file():
        return {}
    return {(row["model"], row["engine"]): row for row in json.loads(path.read_text())["rows"]}


def speed_cell(speeds: dict[tuple[str, str], dict], model: str, engine: str) -> str:
    row = speeds.get((model, engine))
    if row is None:
        return "-"
    return f"{row['beam5']['sentences_per_second']:.1f} ({row['beam5']['x_baseline']:.2f}x)"


def distillation_rows(runs: Path, speeds: dict[tuple[str, str], dict]) -> list[str]:
    """The teacher's rows (the ensemble and its members), then one row per finished student."""
    rows = []
    members = {recipe: read_run(runs / f"multi30k-{recipe}") for recipe in ("transformer-small", "lstm-bahdanau")}
    ensemble = read_ensembles(runs / "multi30k-ensembles").get(TEACHER)
    if ensemble and all(members.values()):
        beam, greedy = ensemble["beam"], ensemble["greedy"]
        sizes = " + ".join(f"{run['parameters'] / 1e6:.1f}M" for run in members.values())
        times = " + ".join(training_minutes(run["train"]) for run in members.values())
        rows.append(f"| teacher: {TEACHER} ensemble | {sizes} | **{beam['bleu']:.2f}** | {greedy['bleu']:.2f} | "
                    f"{beam['chrf']:.2f} | {speed_cell(speeds, f'teacher: {TEACHER}', 'torch float32')} | - | - | "
                    f"{times} (1 each) | `scripts/multi30k_ensemble.sh {TEACHER} "
                    "runs/multi30k-transformer-small runs/multi30k-lstm-bahdanau` |")
    for recipe, run in members.items():
        if run:
            rows.append(distillation_row(f"teacher member: `{recipe}`", run, speeds, recipe, "-",
                                         f"`scripts/multi30k.sh {recipe}`"))
    for name, (label, _, _) in STUDENTS.items():
        run = read_run(runs / f"distill-multi30k-{name}" / "student")
        if run:
            rows.append(distillation_row(f"{label} (`{name}`)", run, speeds, f"student: {name}",
                                         student_goal(name, run, speeds), f"`scripts/multi30k_distill.sh {name}`"))
    return rows


def student_goal(name: str, run: dict, speeds: dict[tuple[str, str], dict]) -> str:
    """The target cell: the BLEU bar (the LSTM student must pass its row, the others reach theirs) and, for the
    faster student, the speed bar on CTranslate2 int8, with met or missed."""
    _, target, faster = STUDENTS[name]
    above = name == "lstm-bahdanau"
    met = run["beam"]["bleu"] > target if above else run["beam"]["bleu"] >= target
    goal = f"{'>' if above else '≥'} {target:.2f}"
    if faster:
        speed = speeds.get((f"student: {name}", "CTranslate2 int8"))
        met = met and speed is not None and speed["beam5"]["x_baseline"] >= faster
        goal += f", ≥ {faster:.0f}x speed"
    return f"{goal} ({'met' if met else 'missed'})"


def distillation_row(label: str, run: dict, speeds: dict[tuple[str, str], dict], model: str, goal: str,
                     command: str) -> str:
    beam, greedy, train = run["beam"], run["greedy"], run["train"]
    return (f"| {label} | {run['parameters'] / 1e6:.1f}M | **{beam['bleu']:.2f}** | {greedy['bleu']:.2f} | "
            f"{beam['chrf']:.2f} | {speed_cell(speeds, model, 'torch float32')} | "
            f"{speed_cell(speeds, model, 'CTranslate2 int8')} | {goal} | {training_minutes(train)} (1) | "
            f"{command} |")


def distillation_table(runs: Path, speeds: dict[tuple[str, str], dict]) -> str:
    lines = ["| model | parameters | BLEU beam 5 | BLEU greedy | chrF beam 5 | "
             "beam 5 sent/s, torch (x transformer-small) | beam 5 sent/s, CTranslate2 int8 (x transformer-small) | "
             "target | training wall time (cores) | command (`OMP_NUM_THREADS=1`) |",
             "|---|---:|---:|---:|---:|---:|---:|---|---:|---|"]
    lines += distillation_rows(runs, speeds)
    manifest = runs / "distill-multi30k-corpus" / "manifest.json"
    stages = json.loads(manifest.read_text())["stages"] if manifest.is_file() else {}
    if "translation" in stages and "corpus" in stages:
        done = stages["translation"]
        processes = f"{done['processes']} process{'es' if done['processes'] > 1 else ''} of one core each"
        total = done.get("seconds_all_attempts")  # counted since encdec recorded it in the partial translation
        took = (f"in {minutes(done['seconds'])} on {processes}" if not done["resumed"] else
                f"{minutes(total)} over its attempts (a resumed run), the last on {processes}" if total is not None
                else f"its last attempt (a resumed run: the lines the earlier attempts had left) took "
                     f"{minutes(done['seconds'])} on {processes}")
        lines += ["", f"The teacher translated the {stages['sources']['train']:,} training sources with beam 5; "
                  f"{took}. The distilled corpus holds "
                  f"{stages['corpus']['distilled'] + stages['corpus']['original']:,} training pairs."]
    return "\n".join(lines)


def _first_cell(line: str) -> str:
    return line.split("|")[1].strip()


def merge_rows(old: str, new: str) -> str:
    """The table ``new`` (header, separator, rows, then optional lines after a blank line) with the rows of ``old``
    whose first cell ``new`` has no row for kept in their places; ``new``'s other rows follow in their order."""
    def split(body: str) -> tuple[list[str], list[str], list[str]]:
        table, _, tail = body.partition("\n\n")
        lines = table.splitlines()
        return lines[:2], lines[2:], ([""] + tail.splitlines()) if tail else []
    header, new_rows, tail = split(new)
    _, old_rows, old_tail = split(old)
    fresh = {_first_cell(row): row for row in new_rows}
    rows = [fresh.pop(_first_cell(row), row) for row in old_rows] + list(fresh.values())
    return "\n".join(header + rows + (tail or old_tail))


def replace_section(text: str, name: str, body: str) -> str:
    """Replace the table between the ``name`` markers by ``body``, keeping the old rows ``body`` does not have."""
    pattern = re.compile(rf"(<!-- begin: {name} -->\n)(.*?\n)?(<!-- end: {name} -->)", re.S)
    match = pattern.search(text)
    if not match:
        raise SystemExit(f"docs/results.md has no <!-- begin: {name} --> ... <!-- end: {name} --> markers")
    merged = merge_rows(match.group(2), body) if match.group(2) else body
    return text[:match.start()] + match.group(1) + merged + "\n" + match.group(3) + text[match.end():]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, default=REPO_ROOT / "runs", help="folder holding multi30k-RECIPE/")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "docs" / "results.md")
    parser.add_argument("--cards", type=Path, default=REPO_ROOT / "model_cards" / "multi30k",
                        help="folder for copies of the trained models' cards")
    parser.add_argument("--readme", type=Path, default=REPO_ROOT / "README.md", help="gets the short summary table")
    parser.add_argument("--only-distillation", action="store_true",
                        help="rewrite the distillation table alone (the recipes' rows, cards and summary are kept)")
    args = parser.parse_args()
    if args.only_distillation:
        text = args.output.read_text(encoding="utf-8")
        speeds = read_speeds(args.runs / "multi30k-distillation-speeds.json")
        atomic_write_text(args.output, replace_section(text, "distillation", distillation_table(args.runs, speeds)))
        print(f"wrote the distillation table of {args.output}")
        return
    runs = {}
    for recipe in RECIPES:
        run = read_run(args.runs / f"multi30k-{recipe}")
        if run is None:
            print(f"no finished run for {recipe} in {args.runs / f'multi30k-{recipe}'}; its rows are kept as they are",
                  file=sys.stderr)
        else:
            runs[recipe] = run
    text = args.output.read_text(encoding="utf-8")
    for name, body in (("results", results_table(runs)), ("published", published_table(runs)),
                       ("commands", commands_table(runs)), ("curves", curves_table(runs))):
        text = replace_section(text, name, body)
    ensembles = read_ensembles(args.runs / "multi30k-ensembles")
    if ensembles:
        text = replace_section(text, "ensembles", ensembles_table(ensembles))
    distilled = distillation_table(args.runs, read_speeds(args.runs / "multi30k-distillation-speeds.json"))
    if len(distilled.splitlines()) > 2:  # a table with rows; else the old one stays
        text = replace_section(text, "distillation", distilled)
    atomic_write_text(args.output, text)
    args.cards.mkdir(parents=True, exist_ok=True)
    for recipe in runs:  # the trained models' cards (model-index with the test2016 scores), kept in the repository
        card = args.runs / f"multi30k-{recipe}" / "README.md"
        atomic_write_text(args.cards / f"{recipe}.md", card.read_text(encoding="utf-8"))
    readme = args.readme.read_text(encoding="utf-8")
    atomic_write_text(args.readme, replace_section(readme, "multi30k-summary", summary_table(runs)))
    print(f"wrote {args.output} and the summary in {args.readme} ({len(runs)} of {len(RECIPES)} recipes rewritten)")


if __name__ == "__main__":
    main()
