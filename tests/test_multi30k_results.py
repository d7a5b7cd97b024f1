"""scripts/multi30k_results.py: rebuilding the results tables from run folders rewrites the recipes that have a
finished run and keeps every other recipe's rows as they are (run folders are never committed, so a rerun of one
recipe must not wipe the others' measured rows)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys

import pytest
import torch
from safetensors.torch import save_file

from tiny_model_folders import REPO_ROOT

SPEC = importlib.util.spec_from_file_location("multi30k_results", REPO_ROOT / "scripts" / "multi30k_results.py")
results = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(results)


def table(*rows: str, tail: str | None = None) -> str:
    body = "\n".join(["| name | score |", "|---|---:|", *rows])
    return body + (f"\n\n{tail}" if tail else "")


def test_merge_rows_replaces_matching_rows_in_place_and_keeps_the_others():
    old = table("| a | 1 |", "| b | 2 |", "| c | 3 |", tail="old signatures")
    new = table("| b | 20 |", "| d | 40 |", tail="new signatures")
    assert results.merge_rows(old, new) == table("| a | 1 |", "| b | 20 |", "| c | 3 |", "| d | 40 |",
                                                 tail="new signatures")
    # no tail in the new table: the old one stays
    assert results.merge_rows(old, table("| a | 10 |")) == table("| a | 10 |", "| b | 2 |", "| c | 3 |",
                                                                 tail="old signatures")


def test_replace_section_needs_its_markers():
    with pytest.raises(SystemExit, match="results"):
        results.replace_section("no markers here\n", "results", table("| a | 1 |"))


def fake_run(folder, bleu: float) -> None:
    """A finished run folder as scripts/multi30k.sh leaves it, with made-up scores and a 10x10 weight."""
    (folder / "checkpoints" / "checkpoint-10").mkdir(parents=True)
    scores = {"bleu": bleu, "bleu_lowercase": bleu + 0.2, "chrf": 60.0, "sentences_per_second": 50.0,
              "bleu_signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
              "bleu_lowercase_signature": "nrefs:1|case:lc|eff:no|tok:13a|smooth:exp|version:2.6.0",
              "chrf_signature": "nrefs:1|case:mixed|eff:yes|nc:6|nw:0|space:no|version:2.6.0"}
    (folder / "test2016-beam5.json").write_text(json.dumps(scores))
    (folder / "test2016-beam1.json").write_text(json.dumps({**scores, "bleu": bleu - 1.0}))
    (folder / "eval_results.json").write_text(json.dumps(
        {"train": {"global_step": 10, "epoch": 0.5, "train_runtime": 600.0}}))
    save_file({"w": torch.zeros(10, 10)}, str(folder / "model.safetensors"))
    history = [{"step": 10, "loss": 3.0, "grad_norm": 1.5}, {"step": 10, "eval_bleu": 12.34}]
    (folder / "checkpoints" / "checkpoint-10" / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    (folder / "README.md").write_text("---\nmodel-index: []\n---\n# a card\n")


def test_a_single_rerun_rewrites_its_rows_only(tmp_path, monkeypatch):
    docs, readme, cards = tmp_path / "results.md", tmp_path / "README.md", tmp_path / "cards"
    shutil.copy(REPO_ROOT / "docs" / "results.md", docs)
    shutil.copy(REPO_ROOT / "README.md", readme)
    fake_run(tmp_path / "runs" / "multi30k-lstm-luong-general", bleu=50.25)
    before = docs.read_text()
    monkeypatch.setattr(sys, "argv", ["multi30k_results.py", "--runs", str(tmp_path / "runs"), "--output", str(docs),
                                      "--cards", str(cards), "--readme", str(readme)])
    results.main()
    after = docs.read_text()
    changed = {line for line in after.splitlines()} - {line for line in before.splitlines()}
    assert changed and all("lstm-luong-general" in line or "Luong" in line for line in changed), changed
    assert "**50.25** | 49.25 |" in after  # beam 5 and greedy BLEU of the new run
    assert "| 10 (0.5) | 10.0 min (1) | 50.0 |" in after  # steps (epochs), wall time (cores), sentences/s
    assert "10: 12.3" in after  # its validation curve
    for recipe in ("transformer-small", "lstm-bahdanau", "lstm-noattn"):  # kept, not dropped
        old_rows = [line for line in before.splitlines() if f"`{recipe}`" in line]
        assert old_rows and all(line in after.splitlines() for line in old_rows), recipe
    assert "**50.25** (49.25)" in readme.read_text()
    assert (cards / "lstm-luong-general.md").read_text() == "---\nmodel-index: []\n---\n# a card\n"
    assert sorted(path.name for path in cards.iterdir()) == ["lstm-luong-general.md"]


def test_ensembles_are_tabulated_with_their_members_own_scores(tmp_path):
    member_a, member_b = tmp_path / "multi30k-a", tmp_path / "multi30k-b"
    member_a.mkdir()
    member_b.mkdir()
    fake_run(member_a, 39.5)  # member_b was never scored alone
    ensemble = tmp_path / "multi30k-ensembles" / "a+b"
    ensemble.mkdir(parents=True)
    scores = {"bleu": 41.25, "chrf": 61.0, "sentences_per_second": 20.0, "model_dir": [str(member_a), str(member_b)]}
    (ensemble / "test2016-beam5.json").write_text(json.dumps(scores))
    (ensemble / "test2016-beam1.json").write_text(json.dumps({**scores, "bleu": 40.0}))
    (tmp_path / "multi30k-ensembles" / "unfinished").mkdir()  # no scores yet: left out
    found = results.read_ensembles(tmp_path / "multi30k-ensembles")
    assert list(found) == ["a+b"]
    rows = results.ensembles_table(found).splitlines()
    assert rows[2] == "| a+b | `multi30k-a` (39.50), `multi30k-b` (-) | **41.25** | 40.00 | 61.00 | 20.0 |"


def fake_distillation(runs, student_bleu: dict[str, float], speedup: float) -> None:
    """The teacher's members and ensemble, the given students, the corpus manifest and the speed benchmark's file."""
    for recipe, bleu in (("transformer-small", 40.0), ("lstm-bahdanau", 37.0)):
        (runs / f"multi30k-{recipe}").mkdir(parents=True)
        fake_run(runs / f"multi30k-{recipe}", bleu)
    ensemble = runs / "multi30k-ensembles" / "transformer+bahdanau"
    ensemble.mkdir(parents=True)
    scores = {"bleu": 41.5, "chrf": 61.0, "sentences_per_second": 20.0}
    (ensemble / "test2016-beam5.json").write_text(json.dumps(scores))
    (ensemble / "test2016-beam1.json").write_text(json.dumps({**scores, "bleu": 40.0}))
    for name, bleu in student_bleu.items():
        (runs / f"distill-multi30k-{name}" / "student").mkdir(parents=True)
        fake_run(runs / f"distill-multi30k-{name}" / "student", bleu)
    (runs / "distill-multi30k-corpus").mkdir()
    (runs / "distill-multi30k-corpus" / "manifest.json").write_text(json.dumps({"stages": {
        "sources": {"train": 29000}, "translation": {"seconds": 1800.0, "resumed": True, "processes": 2},
        "corpus": {"distilled": 28990, "original": 0}}}))
    speed = {"beam5": {"sentences_per_second": 30.0, "x_baseline": 1.0}}
    rows = [{"model": "transformer-small", "engine": "CTranslate2 int8", **speed},
            {"model": "student: transformer-fast", "engine": "CTranslate2 int8",
             "beam5": {"sentences_per_second": 30.0 * speedup, "x_baseline": speedup}}]
    (runs / "multi30k-distillation-speeds.json").write_text(json.dumps({"threads": 1, "rows": rows}))


def distillation_rows(runs) -> dict[str, str]:
    table = results.distillation_table(runs, results.read_speeds(runs / "multi30k-distillation-speeds.json"))
    return {line.split("|")[1].strip(): line for line in table.splitlines()[2:] if line.startswith("|")}


def test_distillation_rows_say_which_targets_are_met(tmp_path):
    runs = tmp_path / "runs"
    fake_distillation(runs, {"transformer-small": 40.5, "transformer-fast": 39.7, "lstm-bahdanau": 37.76}, 2.1)
    rows = distillation_rows(runs)
    assert list(rows) == ["teacher: transformer+bahdanau ensemble", "teacher member: `transformer-small`",
                          "teacher member: `lstm-bahdanau`", "student, Transformer 3+3, d=256 (`transformer-small`)",
                          "student, Transformer 6+1, d=192, pre-LN, 6k vocabulary (`transformer-fast`)",
                          "student, BiLSTM + Bahdanau attention (`lstm-bahdanau`)"]
    assert "| ≥ 40.50 (met) |" in rows["student, Transformer 3+3, d=256 (`transformer-small`)"]
    fast = rows["student, Transformer 6+1, d=192, pre-LN, 6k vocabulary (`transformer-fast`)"]
    assert "| 63.0 (2.10x) |" in fast and "| ≥ 39.64, ≥ 2x speed (met) |" in fast
    # the LSTM student must pass the Bahdanau row (37.76), not equal it
    assert "| > 37.76 (missed) |" in rows["student, BiLSTM + Bahdanau attention (`lstm-bahdanau`)"]
    assert "| 10.0 min + 10.0 min (1 each) |" in rows["teacher: transformer+bahdanau ensemble"]
    table = results.distillation_table(runs, {})
    assert "the earlier attempts had left) took 30.0 min on 2 processes of one core each" in table
    manifest = runs / "distill-multi30k-corpus" / "manifest.json"
    record = json.loads(manifest.read_text())
    record["stages"]["translation"]["seconds_all_attempts"] = 2700.0  # a corpus made since encdec counts attempts
    manifest.write_text(json.dumps(record))
    assert "45.0 min over its attempts (a resumed run), the last on 2 processes of one core each" in \
        results.distillation_table(runs, {})
    assert "28,990 training pairs" in table


def test_a_fast_student_must_also_be_twice_as_fast(tmp_path):
    runs = tmp_path / "runs"
    fake_distillation(runs, {"transformer-fast": 40.0}, 1.9)
    assert "| ≥ 39.64, ≥ 2x speed (missed) |" in distillation_rows(runs)[
        "student, Transformer 6+1, d=192, pre-LN, 6k vocabulary (`transformer-fast`)"]


def test_only_distillation_rewrites_that_table_alone(tmp_path, monkeypatch):
    docs = tmp_path / "results.md"
    shutil.copy(REPO_ROOT / "docs" / "results.md", docs)
    fake_distillation(tmp_path / "runs", {"transformer-small": 41.0}, 2.0)
    before = docs.read_text()
    monkeypatch.setattr(sys, "argv", ["multi30k_results.py", "--runs", str(tmp_path / "runs"), "--output", str(docs),
                                      "--only-distillation"])
    results.main()
    after = docs.read_text()
    start, end = after.index("<!-- begin: distillation -->"), after.index("<!-- end: distillation -->")
    assert "**41.00**" in after[start:end]
    old_start, old_end = before.index("<!-- begin: distillation -->"), before.index("<!-- end: distillation -->")
    assert after[:start] == before[:old_start] and after[end:] == before[old_end:]


def test_a_resumed_run_reports_every_attempt_or_says_it_cannot():
    assert results.training_minutes({"train_runtime": 600.0}) == "10.0 min"
    assert results.training_minutes({"train_runtime": 600.0, "train_runtime_total": 900.0,
                                     "resumed_at_step": 2000}) == "15.0 min"  # both attempts
    assert results.training_minutes({"train_runtime": 600.0, "train_runtime_total": None,
                                     "resumed_at_step": 2000}) == "10.0 min after resuming at step 2,000"
