"""The ``encdec`` command line, in process through ``encdec_cli.main``: every subcommand once on tiny models, and every
user error as one line ``encdec <cmd>: error: ...`` (naming the thing and the fix) with exit status 2 and no
traceback. Nothing a user wrote is replaced without ``--overwrite``."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest
import sacrebleu
from huggingface_hub import HfApi, ModelCard
from transformers import AutoTokenizer
from transformers.utils import logging as hf_logging

from encdec.data import load_data, make_date_pairs
from encdec.folders import check_model_folder, save_for_pipeline
from encdec.training import load_run_config
from encdec_cli import main
from test_hub import UPLOAD
from tiny_model_folders import FAMILIES, REPO_ROOT, date_tokenizer, write_tiny_run_config
from toy import TINY_MODELS, folder_model

SOURCES = ["3rd of March 2021", "Mar 3, 21", "1/2/2000", "Wednesday, 3 Mar 2021"]
REFERENCES = ["2021-03-03", "2021-03-03", "2000-01-02", "2021-03-03"]


def write_run_config(root: Path, family: str, output_dir: Path, name: str = "run", **sections: dict) -> Path:
    """A tiny run YAML ``root/<family>-<name>.yaml``: the family's demo config with a tiny model, 200/20/20 built-in
    pairs and 10 steps (evaluated and saved every 5); ``sections`` update its sections."""
    base = {
        "data": {"builtin_train": 200, "builtin_validation": 20, "builtin_test": 20},
        "tokenizer": {"vocab_size": 120},
        "training": {"output_dir": str(output_dir), "max_steps": 10, "eval_steps": 5, "eval_strategy": "steps",
                     "per_device_train_batch_size": 16, "per_device_eval_batch_size": 32, "warmup_steps": 2,
                     "logging_steps": 5, "save_total_limit": 1, "report_to": "none"},
    }
    for section, values in sections.items():
        base[section] = {**base.get(section, {}), **values}
    return write_tiny_run_config(root / f"{family}-{name}.yaml", family, TINY_MODELS[family], base)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, SimpleNamespace]:
    """``encdec train`` once per family (builtin data); ``.folder`` is the model folder, ``.stdout`` what it printed.
    Shared: tests that change a folder work on a copy."""
    root = tmp_path_factory.mktemp("cli-train")
    runs = {}
    for family in FAMILIES:
        config = write_run_config(root / "configs", family, root / family)
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            status = main(["train", str(config)])
        assert status == 0
        runs[family] = SimpleNamespace(folder=root / family, stdout=stdout.getvalue(), config=config)
    return runs


@pytest.fixture
def copy_of(trained, tmp_path):
    """``copy_of(family)``: a private copy of a trained folder, for tests that change it."""
    return lambda family: Path(shutil.copytree(trained[family].folder, tmp_path / f"copy-{family}"))


@pytest.fixture
def test_files(tmp_path) -> SimpleNamespace:
    return SimpleNamespace(source=write_lines(tmp_path / "test.src", SOURCES),
                           reference=write_lines(tmp_path / "test.ref", REFERENCES))


@pytest.fixture(autouse=True)
def no_progress_bars():
    """No `datasets` or `transformers` progress bars on stderr, so that an error's stderr is exactly its line."""
    enabled = datasets.is_progress_bar_enabled(), hf_logging.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    yield
    if enabled[0]:
        datasets.enable_progress_bars()
    if enabled[1]:
        hf_logging.enable_progress_bar()


@pytest.fixture
def fake_hub(monkeypatch):
    """Replace the two network calls of ``push_model`` with a capture (as in test_hub.py)."""
    hub = SimpleNamespace(repos=[], commits=[])

    def create_repo(self, repo_id, *, private=None, exist_ok=False, **kwargs):
        hub.repos.append({"repo_id": repo_id, "private": private})
        return SimpleNamespace(repo_id=repo_id)

    def create_commit(self, repo_id, operations, *, commit_message, **kwargs):
        hub.commits.append({"repo_id": repo_id, "files": sorted(op.path_in_repo for op in operations)})
        return SimpleNamespace(commit_url=f"https://huggingface.co/{repo_id}/commit/0123")

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "create_commit", create_commit)
    return hub


def sacrebleu_scores(folder: Path, test_files: SimpleNamespace, capsys, *options: str) -> dict[str, float]:
    """BLEU and chrF, by sacreBLEU itself, of what ``encdec translate`` prints for the test sources with
    ``options``: the scores ``encdec evaluate`` must report with the same options."""
    capsys.readouterr()
    assert main(["translate", "--model", str(folder), "--input", str(test_files.source), *options]) == 0
    hypotheses = capsys.readouterr().out.splitlines()
    assert len(hypotheses) == len(REFERENCES)
    return {"bleu": round(sacrebleu.corpus_bleu(hypotheses, [REFERENCES]).score, 2),
            "chrf": round(sacrebleu.corpus_chrf(hypotheses, [REFERENCES]).score, 2)}


def user_error(capsys, argv: list[str], *needles: str) -> str:
    """Run ``argv``; it must exit with 2 and print exactly one stderr line ``encdec <cmd>: error: ...`` containing
    every needle, and no traceback. Returns the line."""
    capsys.readouterr()
    status = main(argv)
    captured = capsys.readouterr()
    assert status == 2, captured
    assert "Traceback" not in captured.err
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"encdec {argv[0]}: error: "), lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# --- each command, successfully ------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_train_prints_the_scores_and_writes_the_folder(trained, family: str) -> None:
    run = trained[family]
    # after the training log lines: a line of scores per split, then the folder; no raw dicts
    *_, validation, test, folder_line = run.stdout.strip().splitlines()
    assert folder_line == f"model folder: {run.folder} (every score: eval_results.json there)"
    results = json.loads((run.folder / "eval_results.json").read_text())
    assert results["train"]["global_step"] == 10
    for split, line in (("validation", validation), ("test", test)):
        assert line.startswith(f"{split}: BLEU {results[split]['bleu']:.4g}, chrF {results[split]['chrf']:.4g}, loss ")
    assert "{'" not in run.stdout  # Trainer's raw log dicts (they were printed there)
    assert json.loads((run.folder / "config.json").read_text())["model_type"] == TINY_MODELS[family]["model_type"]
    assert check_model_folder(run.folder)  # complete and shippable
    assert not (run.folder / ".final-tmp").exists()


def test_tokenizer_train(tmp_path, capsys) -> None:
    pairs = make_date_pairs(200, seed=1)
    source = write_lines(tmp_path / "train.src", [s for s, _ in pairs])
    target = write_lines(tmp_path / "train.tgt", [t for _, t in pairs])
    out = tmp_path / "tokenizer"
    argv = ["tokenizer", "train", "--files", str(source), str(target), "--output", str(out), "--vocab-size", "80",
            "--min-frequency", "1"]
    assert main(argv) == 0
    assert f"saved to {out}" in capsys.readouterr().out
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert len(tokenizer) <= 80
    assert tokenizer("2021-03-03")["input_ids"][-1] == tokenizer.eos_token_id
    assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<s>", "</s>", "<unk>"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary folder left behind

    before = (out / "tokenizer.json").read_bytes()
    user_error(capsys, argv, str(out), "--overwrite")
    assert (out / "tokenizer.json").read_bytes() == before
    assert main([*argv[:-4], "--vocab-size", "60", "--min-frequency", "1", "--overwrite"]) == 0
    assert len(AutoTokenizer.from_pretrained(out)) <= 60


def test_train_with_a_trained_tokenizer_and_overwrite(tmp_path, capsys) -> None:
    """`encdec tokenizer train`, then `encdec train` with `tokenizer.path`; training again into the same folder
    needs `--training.overwrite true`."""
    pairs = make_date_pairs(300, seed=0)
    text = write_lines(tmp_path / "all.txt", [text for pair in pairs for text in pair])
    assert main(["tokenizer", "train", "--files", str(text), "--output", str(tmp_path / "tok"), "--vocab-size",
                 "100"]) == 0
    out = tmp_path / "model"
    config = write_run_config(tmp_path, "rnn", out, tokenizer={"path": str(tmp_path / "tok")},
                              training={"max_steps": 2, "eval_strategy": "no"}, data={"builtin_test": 0})
    assert main(["train", str(config)]) == 0
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert json.loads((out / "config.json").read_text())["vocab_size"] == len(tokenizer)
    assert (out / "tokenizer.json").read_bytes() != b"" and not (out / "tokenizer").exists()
    assert set(json.loads((out / "eval_results.json").read_text())) >= {"train", "validation"}

    (out / "notes.txt").write_text("mine")
    user_error(capsys, ["train", str(config)], "--training.overwrite true")
    assert (out / "notes.txt").read_text() == "mine"
    assert main(["train", str(config), "--training.overwrite", "true"]) == 0
    assert not (out / "notes.txt").exists() and check_model_folder(out)


@pytest.mark.parametrize("family", FAMILIES)
def test_evaluate_prints_and_writes_scores_with_signatures(trained, test_files, tmp_path, capsys,
                                                           family: str) -> None:
    output = tmp_path / "results.json"
    argv = ["evaluate", "--model", str(trained[family].folder), "--source-file", str(test_files.source),
            "--reference-file", str(test_files.reference), "--num-beams", "2", "--batch-size", "3",
            "--output", str(output)]
    assert main(argv) == 0
    printed = json.loads(capsys.readouterr().out)
    assert json.loads(output.read_text()) == printed
    assert printed["num_sentences"] == len(SOURCES) and printed["num_beams"] == 2
    expected = sacrebleu_scores(trained[family].folder, test_files, capsys, "--num-beams", "2", "--batch-size", "3")
    assert {key: printed[key] for key in expected} == expected
    for part in ("nrefs:1", "case:mixed", "tok:13a", "version:"):
        assert part in printed["bleu_signature"]
    assert printed["chrf_signature"].startswith("nrefs:1|")

    before = output.read_text()
    user_error(capsys, argv, str(output), "--overwrite")  # checked before any translation
    assert output.read_text() == before
    assert main([*argv, "--overwrite"]) == 0


def test_length_penalty_reaches_beam_search(trained, test_files, tmp_path, capsys) -> None:
    """``--length-penalty`` replaces the generation config's value in both commands: evaluate records it, and a
    strong penalty either way changes the beam's choices on this data (longer or shorter outputs)."""
    folder = str(trained["transformer"].folder)
    lengths = {}
    for penalty in ("-3.0", "3.0"):
        assert main(["evaluate", "--model", folder, "--source-file", str(test_files.source), "--reference-file",
                     str(test_files.reference), "--num-beams", "4", "--length-penalty", penalty]) == 0
        printed = json.loads(capsys.readouterr().out)
        assert printed["length_penalty"] == float(penalty)
        output = tmp_path / f"lp{penalty}.txt"
        assert main(["translate", "--model", folder, "--input", str(test_files.source), "--output", str(output),
                     "--num-beams", "4", "--length-penalty", penalty]) == 0
        lengths[penalty] = sum(len(line) for line in output.read_text().splitlines())
    assert lengths["-3.0"] < lengths["3.0"]


def test_evaluate_records_its_scores_in_the_model_card(copy_of, test_files, capsys) -> None:
    """``--card-dataset`` rewrites the card: the new scores in the text and the model-index, the training rows that
    ``encdec train`` recorded kept."""
    folder = copy_of("rnn")
    assert main(["evaluate", "--model", str(folder), "--source-file", str(test_files.source), "--reference-file",
                 str(test_files.reference), "--num-beams", "3", "--card-dataset", "Dates (held out)",
                 "--card-dataset-id", "someone/dates"]) == 0
    printed = json.loads(capsys.readouterr().out)
    card = ModelCard.load(folder / "README.md")
    scores = {(r.metric_type, r.metric_config): r for r in card.data.eval_results}
    assert scores[("bleu", None)].metric_value == round(printed["bleu"], 2)
    assert scores[("bleu", "lowercase")].metric_value == round(printed["bleu_lowercase"], 2)
    assert scores[("chrf", None)].metric_value == round(printed["chrf"], 2)
    assert {(r.dataset_name, r.dataset_type, r.dataset_split) for r in scores.values()} == {
        ("Dates (held out)", "someone/dates", "test")}
    assert "| beam 3 |" in card.text and "| optimiser steps |" in card.text


@pytest.mark.parametrize("family", FAMILIES)
def test_average_of_the_trainer_checkpoints_evaluates(test_files, tmp_path, capsys, family: str) -> None:
    """``encdec average`` over the checkpoints ``encdec train`` kept (tokenizer and steps read from them) gives a
    folder that ``encdec evaluate`` scores."""
    config = write_run_config(tmp_path, family, tmp_path / "run", training={"save_total_limit": 3})
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["train", str(config)]) == 0
    checkpoints = sorted((tmp_path / "run").glob("checkpoints/checkpoint-*"),
                         key=lambda path: int(path.name.split("-")[1]))
    assert [path.name for path in checkpoints] == ["checkpoint-5", "checkpoint-10"]
    out = tmp_path / "avg"
    assert main(["average", *map(str, checkpoints), "--output", str(out)]) == 0
    assert json.loads((out / "averaging.json").read_text())["steps"] == [5, 10]
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out), "--source-file", str(test_files.source), "--reference-file",
                 str(test_files.reference), "--num-beams", "2"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert {key: printed[key] for key in ("bleu", "chrf")} == sacrebleu_scores(out, test_files, capsys,
                                                                               "--num-beams", "2")


def test_translate_file_and_stdin(trained, tmp_path, capsys, monkeypatch) -> None:
    folder = str(trained["transformer"].folder)
    lines = ["3rd of March 2021", "", "1/2/2000", "a line\u2028with a line separator"]  # U+2028 does not end a line
    source = write_lines(tmp_path / "in.txt", lines)
    output = tmp_path / "out.txt"
    options = ["--num-beams", "1", "--max-new-tokens", "8", "--batch-size", "2"]
    assert main(["translate", "--model", folder, "--input", str(source), "--output", str(output), *options]) == 0
    assert capsys.readouterr().out == ""
    translated = output.read_text(encoding="utf-8")
    assert translated.endswith("\n")
    assert len(translated.split("\n")) == len(lines) + 1  # one output line per input line
    assert translated.split("\n")[1] == ""  # a blank line stays blank

    monkeypatch.setattr(sys, "stdin", io.StringIO(source.read_text(encoding="utf-8")))
    assert main(["translate", "--model", folder, *options]) == 0
    assert capsys.readouterr().out == translated

    user_error(capsys, ["translate", "--model", folder, "--input", str(source), "--output", str(output)],
               str(output), "--overwrite")
    assert output.read_text(encoding="utf-8") == translated


def test_push_uploads_the_shippable_files(copy_of, fake_hub, capsys) -> None:
    folder = copy_of("rnn")
    assert main(["push", "--model", str(folder), "--repo-id", "someone/dates-rnn", "--private"]) == 0
    assert capsys.readouterr().out.strip() == (f"pushed {folder} to https://huggingface.co/someone/dates-rnn/commit/"
                                               "0123")
    assert fake_hub.repos == [{"repo_id": "someone/dates-rnn", "private": True}]
    [commit] = fake_hub.commits
    files = commit["files"]
    assert sorted(files) == UPLOAD["rnn"]  # written out in tests/test_hub.py, not recomputed the product's way
    assert all((folder / name).is_file() for name in files)
    # training leftovers stay home
    assert not {"eval_results.json", "checkpoints", "tokenizer"} & {name.split("/")[0] for name in files}
    assert ModelCard.load(folder / "README.md").data.eval_results  # the trained card, with its scores, is kept


@pytest.mark.parametrize("family", FAMILIES)
def test_plot_attention_writes_a_png(trained, tmp_path, capsys, family: str) -> None:
    out = tmp_path / "plots" / "attention.png"
    argv = ["plot-attention", "--model", str(trained[family].folder), "--text", "3rd of March 2021", "--out", str(out)]
    assert main(argv) == 0
    assert capsys.readouterr().out.strip() == f"attention heatmap written to {out}"
    png = out.read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    if family == "transformer":
        user_error(capsys, argv, str(out), "--overwrite")
        assert out.read_bytes() == png
        assert main([*argv, "--overwrite", "--mean"]) == 0


def test_python_dash_m_encdec() -> None:
    done = subprocess.run([sys.executable, "-m", "encdec", "--help"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    for command in ("tokenizer", "train", "evaluate", "translate", "push", "plot-attention"):
        assert command in done.stdout


def test_console_script() -> None:
    script = Path(sys.executable).with_name("encdec")
    if not script.is_file():
        pytest.skip(f"no {script}: the console script appears after `pip install -e .`")
    done = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0 and "plot-attention" in done.stdout


def test_data_writes_the_demo_splits_as_aligned_text_that_evaluate_scores(trained, tmp_path, capsys) -> None:
    """`encdec data` writes the demo config's built-in splits (any `--section.key value` override applied, its
    `--output` before or after the config) as aligned `{split}.src` / `{split}.tgt`, the pairs `load_data` gives;
    `encdec evaluate` scores the written test split; a second run needs `--overwrite`, which replaces the folder."""
    config, out = str(REPO_ROOT / "configs" / "demo-transformer.yaml"), tmp_path / "dates"
    sizes = ["--data.builtin_train", "50", "--data.builtin_validation", "7", "--data.builtin_test", "12"]
    capsys.readouterr()
    assert main(["data", config, "--output", str(out), *sizes]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{split}: {count} lines in {out / f'{split}.src'}, {out / f'{split}.tgt'}"
        for split, count in (("train", 50), ("validation", 7), ("test", 12))]
    expected = load_data(load_run_config(config, sizes).data)
    for split in ("train", "validation", "test"):
        assert (out / f"{split}.src").read_text().splitlines() == expected[split]["source"]
        assert (out / f"{split}.tgt").read_text().splitlines() == expected[split]["target"]
    assert sorted(path.name for path in out.iterdir()) == sorted(f"{split}.{side}" for split in expected
                                                                 for side in ("src", "tgt"))

    results = tmp_path / "scores.json"
    assert main(["evaluate", "--model", str(trained["transformer"].folder), "--source-file", str(out / "test.src"),
                 "--reference-file", str(out / "test.tgt"), "--output", str(results), "--quiet"]) == 0
    assert json.loads(results.read_text())["num_sentences"] == 12

    before = (out / "train.src").read_bytes()
    user_error(capsys, ["data", config, "--output", str(out), *sizes], str(out), "pass --overwrite")
    assert (out / "train.src").read_bytes() == before
    assert main(["data", "--output", str(out), config, "--overwrite", "--data.builtin_train", "30",
                 "--data.builtin_test", "0"]) == 0  # no test split now: no test files left behind
    assert sorted(path.name for path in out.iterdir()) == ["train.src", "train.tgt", "validation.src",
                                                           "validation.tgt"]
    assert len((out / "train.tgt").read_text().splitlines()) == 30
    user_error(capsys, ["data", config], "--output DIR")


# --- user errors: one line, exit status 2 ---------------------------------------------------------------------------

def test_missing_files(trained, test_files, tmp_path, capsys) -> None:
    folder = str(trained["transformer"].folder)
    user_error(capsys, ["train", str(tmp_path / "missing.yaml")], "missing.yaml", "does not exist")
    user_error(capsys, ["evaluate", "--model", folder, "--source-file", str(tmp_path / "missing.txt"),
                        "--reference-file", str(test_files.reference)], "source file", "missing.txt")
    user_error(capsys, ["evaluate", "--model", folder, "--source-file", str(test_files.source),
                        "--reference-file", str(tmp_path)], "reference file", "is not a file")
    user_error(capsys, ["translate", "--model", folder, "--input", str(tmp_path / "missing.txt")],
               "input file", "missing.txt")
    user_error(capsys, ["translate", "--model", str(tmp_path / "no-model"), "--input", str(test_files.source)],
               "no-model", "does not exist")
    user_error(capsys, ["tokenizer", "train", "--files", str(tmp_path / "missing.txt"), "--output",
                        str(tmp_path / "tok")], "missing.txt")
    config = write_run_config(tmp_path, "rnn", tmp_path / "out")
    user_error(capsys, ["train", str(config), "--model", str(tmp_path / "nope.json")], "model config", "nope.json",
               "does not exist")
    assert not (tmp_path / "missing.txt").exists()


def test_misaligned_files(trained, tmp_path, capsys) -> None:
    data = tmp_path / "data"
    data.mkdir()
    write_lines(data / "train.de", ["eins", "zwei", "drei"])
    write_lines(data / "train.en", ["one", "two"])
    text = {"format": "text", "data_dir": str(data), "splits": {"train": "train"}, "source_lang": "de",
            "target_lang": "en"}
    config = write_run_config(tmp_path, "transformer", tmp_path / "out", data=text)
    user_error(capsys, ["train", str(config)], str(data / "train.de"), "3 lines", str(data / "train.en"), "has 2")

    source = write_lines(tmp_path / "src.txt", SOURCES)
    reference = write_lines(tmp_path / "ref.txt", REFERENCES[:3])
    user_error(capsys, ["evaluate", "--model", str(trained["transformer"].folder), "--source-file", str(source),
                        "--reference-file", str(reference)], str(source), "4 lines", str(reference), "3")


def test_empty_dataset_after_filtering_leaves_the_output_folder_reusable(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    config = write_run_config(tmp_path, "transformer", out)
    user_error(capsys, ["train", str(config), "--training.max_source_length", "2"],
               "max_source_length=2", "overlong='truncate'")
    assert not out.exists() or not any(out.iterdir())  # a corrected re-run is not refused as "not empty"


def test_unknown_config_keys_list_the_valid_keys(tmp_path, capsys) -> None:
    config = write_run_config(tmp_path, "transformer", tmp_path / "out")
    line = user_error(capsys, ["train", str(config), "--training.max_stepz", "5"], "training.max_stepz")
    assert "max_steps" in line.split("valid keys")[1] and "eval_steps" in line
    bad = write_run_config(tmp_path, "transformer", tmp_path / "out", "bad1", training={"learning_rat": 0.1})
    user_error(capsys, ["train", str(bad)], "training.learning_rat", "learning_rate")
    bad = write_run_config(tmp_path, "transformer", tmp_path / "out", "bad2", optimiser={"beta": 0.9})
    user_error(capsys, ["train", str(bad)], "optimiser", "model, data, tokenizer, training, generation")
    user_error(capsys, ["train", str(config), "--data.fromat", "text"], "data.fromat", "format")
    user_error(capsys, ["train", str(config), "training.max_steps", "5"], "--section.key value")
    assert not (tmp_path / "out").exists()


def test_wrong_types(tmp_path, capsys) -> None:
    config = write_run_config(tmp_path, "transformer", tmp_path / "out")
    user_error(capsys, ["train", str(config), "--training.max_steps", "abc"], "training.max_steps", "int", "'abc'")
    user_error(capsys, ["train", str(config), "--training.overwrite", "yes please"], "training.overwrite", "bool")
    user_error(capsys, ["train", str(config), "--training.max_steps", "2.5"], "training.max_steps", "int")
    unquoted = tmp_path / "unquoted.yaml"  # in a YAML file, `no` is a boolean: the error says to quote it
    unquoted.write_text(config.read_text().replace("eval_strategy: steps", "eval_strategy: no"))
    user_error(capsys, ["train", str(unquoted)], "training.eval_strategy", "quote")
    bad = write_run_config(tmp_path, "transformer", tmp_path / "out", "bad", data={"builtin_train": "many"})
    user_error(capsys, ["train", str(bad)], "data.builtin_train", "int")
    user_error(capsys, ["train", str(config), "--data.format", "parquet"], "data.format", "jsonl")
    assert load_run_config(config, ["--training.eval_strategy", "no", "--training.overwrite", "yes"]).training \
        == load_run_config(config, ["--training.eval_strategy", "'no'", "--training.overwrite", "true"]).training
    config.write_text("model: [unclosed\n")
    user_error(capsys, ["train", str(config)], str(config), "not valid YAML")
    assert not (tmp_path / "out").exists()


def test_a_scheduler_other_than_vaswani_needs_a_learning_rate(tmp_path, capsys) -> None:
    config = write_run_config(tmp_path, "rnn", tmp_path / "out")
    user_error(capsys, ["train", str(config), "--training.learning_rate", "null"], "training.learning_rate",
               "vaswani")  # the LSTM demo config uses the linear schedule
    assert not any((tmp_path / "out").iterdir())


def test_train_refuses_a_non_empty_output_dir(tmp_path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    config = write_run_config(tmp_path, "transformer", out)
    user_error(capsys, ["train", str(config)], str(out), "--training.overwrite true",
               "--training.resume_from_checkpoint true")
    assert [p.name for p in out.iterdir()] == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"


def test_learned_positions_and_over_long_sources(tmp_path, capsys, caplog) -> None:
    """Learned positions cannot extrapolate. `train` refuses lengths over max_position_embeddings up front;
    `translate` refuses an over-long line; `evaluate` truncates the source to fit, with a warning; `plot-attention`
    truncates the source and caps the generated length."""
    config = write_run_config(tmp_path, "transformer", tmp_path / "out")
    overrides = ["--model_overrides.position_embedding_type", "learned", "--model_overrides.max_position_embeddings",
                 "8"]
    user_error(capsys, ["train", str(config), *overrides], "max_position_embeddings=8",
               "training.max_source_length=32", "generation.max_new_tokens=12", "lower them")
    assert not any((tmp_path / "out").iterdir())

    tokenizer = date_tokenizer()
    folder = save_for_pipeline(folder_model("transformer", tokenizer, position_embedding_type="learned",
                                            max_position_embeddings=8), tokenizer, tmp_path / "learned")
    long_line = "Wednesday, 3 March 2021 and Thursday, 4 March 2021 and Friday, 5 March 2021"
    assert len(tokenizer(long_line)["input_ids"]) > 8
    long_file = write_lines(tmp_path / "long.txt", [long_line, "1/2/2000"])
    output = tmp_path / "out.txt"
    user_error(capsys, ["translate", "--model", str(folder), "--input", str(long_file), "--output", str(output)],
               "max_position_embeddings`=8", "truncate the input")
    assert not output.exists()
    short = write_lines(tmp_path / "short.txt", ["1/2/2000"])
    assert main(["translate", "--model", str(folder), "--input", str(short), "--num-beams", "1"]) == 0

    reference = write_lines(tmp_path / "ref.txt", ["2021-03-03", "2000-01-02"])
    capsys.readouterr()
    with caplog.at_level(logging.WARNING, logger="encdec.inference.evaluation"):
        assert main(["evaluate", "--model", str(folder), "--source-file", str(long_file), "--reference-file",
                     str(reference), "--num-beams", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["num_sentences"] == 2
    [warning] = [r for r in caplog.records if r.name == "encdec.inference.evaluation"]
    assert warning.levelno == logging.WARNING
    assert "1 of 2 sources" in warning.getMessage() and "max_position_embeddings" in warning.getMessage()

    png = tmp_path / "long.png"
    assert main(["plot-attention", "--model", str(folder), "--text", long_line, "--out", str(png)]) == 0
    assert png.read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("damage", ["missing", "truncated"])
@pytest.mark.parametrize("command", ["evaluate", "translate", "plot-attention", "push"])
def test_missing_or_corrupt_weights(copy_of, test_files, tmp_path, capsys, fake_hub, command: str,
                                    damage: str) -> None:
    folder = copy_of("transformer")
    weights = folder / "model.safetensors"
    if damage == "missing":
        weights.unlink()
    else:
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    png = tmp_path / "plot.png"
    argv = {
        "evaluate": ["--source-file", str(test_files.source), "--reference-file", str(test_files.reference)],
        "translate": ["--input", str(test_files.source)],
        "plot-attention": ["--text", "1/2/2000", "--out", str(png)],
        "push": ["--repo-id", "someone/broken"],
    }[command]
    user_error(capsys, [command, "--model", str(folder), *argv], str(weights),
               "is missing" if damage == "missing" else "not a readable safetensors file")
    assert not png.exists() and fake_hub.commits == []


def test_evaluate_keeps_its_scores_beside_the_model_but_never_over_it(copy_of, test_files, capsys) -> None:
    """`scripts/multi30k.sh` writes test2016-beam5.json into the model folder: a new file there is fine (and may be
    rewritten with --overwrite); a file that makes the model, or one in a subfolder, is refused before any work."""
    folder = copy_of("rnn")
    base = ["evaluate", "--model", str(folder), "--source-file", str(test_files.source), "--reference-file",
            str(test_files.reference), "--num-beams", "1"]
    assert main([*base, "--output", str(folder / "test-beam1.json")]) == 0
    assert main([*base, "--output", str(folder / "test-beam1.json"), "--overwrite"]) == 0
    assert json.loads((folder / "test-beam1.json").read_text())["bleu"] == sacrebleu_scores(
        folder, test_files, capsys, "--num-beams", "1")["bleu"]
    config = (folder / "config.json").read_text()
    for name in ("config.json", "model.safetensors", "tokenizer/x.json"):
        capsys.readouterr()
        assert main([*base, "--output", str(folder / name), "--overwrite"]) == 2
        assert "is part of the model" in capsys.readouterr().err
    assert (folder / "config.json").read_text() == config


def test_n_best_widens_a_narrower_default_beam_and_names_the_flags(trained, tmp_path, capsys) -> None:
    """The tour's `--n-best 3` on a model that decodes greedily by default (its generation config says 1 beam): the
    run decodes with 3 beams, says so in one line, and gives 3 hypotheses per input, as `--num-beams 3` does. An
    explicit `--num-beams` below K is refused, naming both flags as typed."""
    folder = trained["rnn"].folder
    assert json.loads((folder / "generation_config.json").read_text()).get("num_beams", 1) == 1
    source = tmp_path / "in.txt"
    source.write_text("3rd of March 2021\nMar 3, 21\n")
    capsys.readouterr()
    assert main(["translate", "--model", str(folder), "--input", str(source), "--n-best", "3", "--quiet"]) == 0
    widened = capsys.readouterr()
    assert widened.err.strip().splitlines() == [
        "encdec translate: --n-best 3 needs 3 beams; the model decodes with 1 by default, so this run uses "
        "--num-beams 3."]
    assert [line.split(" ||| ")[0] for line in widened.out.splitlines()] == ["0", "0", "0", "1", "1", "1"]
    assert main(["translate", "--model", str(folder), "--input", str(source), "--n-best", "3", "--num-beams", "3",
                 "--quiet"]) == 0
    assert capsys.readouterr().out == widened.out
    line = user_error(capsys, ["translate", "--model", str(folder), "--input", str(source), "--n-best", "3",
                               "--num-beams", "2"])
    assert line == ("encdec translate: error: --n-best must be between 1 and the beam size (2), got 3; raise "
                    "--num-beams.")


def test_a_command_under_a_launcher_says_how_many_processes_run() -> None:
    """One line at start, from the main process alone: N processes and how they share the work; under accelerate's
    plain launcher (what `accelerate launch --num_processes N` runs without GPUs) one process, said as such, with the
    ways that start N. Nothing outside a launcher."""
    from encdec_cli import describe_processes

    two = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    assert describe_processes("translate", two) == ("encdec translate: 2 processes: process p translates chunks p, "
                                                    "p + N, ... and the main one writes them in order")
    assert describe_processes("train", {**two, "WORLD_SIZE": "4"}) == (
        "encdec train: 4 processes, 2 on this machine: each process trains on its share of every batch (data "
        "parallel) and the main one saves")
    assert describe_processes("translate", {**two, "RANK": "1"}) is None  # said once
    assert describe_processes("evaluate", {"ACCELERATE_MIXED_PRECISION": "no"}) == (
        "encdec evaluate: 1 process: accelerate launch started one (on a machine without GPUs, `--num_processes N` "
        "alone starts one); `accelerate launch --config_file configs/accelerate/cpu-2proc.yaml` (edit num_processes) "
        "or `torchrun --nproc_per_node N` start N")
    assert describe_processes("translate", {}) is None
    assert describe_processes("serve", two) is None  # not a command a launcher runs


def test_a_wrong_flag_gets_a_suggestion_first_then_its_command_usage(capsys) -> None:
    with pytest.raises(SystemExit) as done:
        main(["translate", "--model", "runs/x", "--num-beamz", "3"])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "encdec translate: error: unrecognized arguments: --num-beamz 3 (did you mean --num-beams?)"
    assert err[1].startswith("usage: encdec translate ")  # then the command's usage, not the top-level one
    with pytest.raises(SystemExit):
        main(["serve", "--model", "runs/x", "--zzz"])
    assert capsys.readouterr().err.strip().splitlines()[0] == "encdec serve: error: unrecognized arguments: --zzz"
    for argv, line in ((["translate", "--nbest", "3"], "encdec translate: error: the following arguments are required: "
                        "--model"),
                       (["export", "--model", "m", "--output", "o", "--format", "onx"],
                        "encdec export: error: argument --format: invalid choice: 'onx'")):
        with pytest.raises(SystemExit) as done:  # argparse's own errors too: their line first, then the usage
            main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert done.value.code == 2 and err[0].startswith(line) and err[1].startswith(f"usage: encdec {argv[0]} ")
