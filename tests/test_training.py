"""``encdec train`` as a library: run configs, the learning-rate schedule, the Trainer arguments, tiny runs on text
and JSON Lines data that leave a complete, loadable model folder with its own exact scores, resuming from the latest
complete checkpoint, and early stopping. Through the command line (fresh processes): a seeded run repeats bit for
bit, and a run killed (kill -9) right after a checkpoint resumes to the uninterrupted run's result."""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import sacrebleu
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, TrainerState

from encdec import RNNSeq2SeqConfig, TransformerSeq2SeqConfig
from encdec.cards import training_summary
from encdec.data import load_data, make_date_splits
from encdec.errors import EncdecError
from encdec.folders import PIPELINE_TASK, check_model_folder
from encdec.stop_points import STOP_ENV
from encdec.training import (
    CHECKPOINT_SUBDIR,
    SNAPSHOT_SUBDIR,
    TOKENIZER_SUBDIR,
    EncdecTrainer,
    GenerationSettings,
    RunConfig,
    TrainingClock,
    TrainingSettings,
    check_averaging,
    latest_complete_checkpoint,
    load_run_config,
    post_ln_warmup_warning,
    resolve_learning_rate,
    train,
    training_arguments,
)
from encdec.training.averaging import WeightSnapshots, average_state_dicts, snapshot_folders
from test_io_utils import hold_lock
from tiny_model_folders import DEMO_CONFIGS, REPO_ROOT, write_tiny_run_config
from toy import TINY_MODELS

CODE_FILES = {
    "transformer": {"modeling_transformer_seq2seq.py", "configuration_transformer_seq2seq.py", "pipeline_seq2seq.py"},
    "rnn": {"modeling_rnn_seq2seq.py", "configuration_rnn_seq2seq.py", "pipeline_seq2seq.py"},
}


def run_config(root: Path, family: str, output_dir: Path, **sections: dict) -> Path:
    """A tiny run YAML in ``root``: the family's demo config with a tiny model, 200/20/20 built-in pairs, 6 steps
    (evaluated and saved every 3); ``sections`` update its sections (a ``data`` section replaces the built-in one)."""
    base = {
        "data": {"builtin_train": 200, "builtin_validation": 20, "builtin_test": 20},
        "tokenizer": {"vocab_size": 120, "min_frequency": 1},
        "training": {"output_dir": str(output_dir), "max_steps": 6, "eval_steps": 3, "eval_strategy": "steps",
                     "per_device_train_batch_size": 16, "per_device_eval_batch_size": 32, "warmup_steps": 2,
                     "logging_steps": 3, "save_total_limit": 2, "report_to": "none"},
    }
    for section, values in sections.items():
        base[section] = values if section == "data" else {**base.get(section, {}), **values}
    return write_tiny_run_config(root / f"{family}-run.yaml", family, TINY_MODELS[family], base)


@pytest.fixture
def spy(monkeypatch) -> SimpleNamespace:
    """Record each ``EncdecTrainer``, the checkpoint ``train()`` resumed from, and the training (micro-)steps run."""
    seen = SimpleNamespace(trainers=[], resumed_from=[], micro_steps=0)
    original_train, original_step = EncdecTrainer.train, EncdecTrainer.training_step

    def train_spy(self, *args, **kwargs):
        seen.trainers.append(self)
        seen.resumed_from.append(kwargs.get("resume_from_checkpoint"))
        return original_train(self, *args, **kwargs)

    def training_step_spy(self, *args, **kwargs):
        seen.micro_steps += 1
        return original_step(self, *args, **kwargs)

    monkeypatch.setattr(EncdecTrainer, "train", train_spy)
    monkeypatch.setattr(EncdecTrainer, "training_step", training_step_spy)
    return seen


def expected_scores(model, tokenizer, pairs: list[tuple[str, str]]) -> dict[str, float]:
    """BLEU, chrF and mean generated length of ``model`` on ``pairs``, computed here without encdec's metric code:
    one greedy batch (as the run's evaluation decodes the split: one batch of at most 32, padded on the right),
    decoded with the special tokens skipped, scored by sacreBLEU against the raw references, rounded as encdec's
    ``compute_metrics`` rounds. A row's length runs to its first EOS, the decoder start token included."""
    batch = tokenizer([source for source, _ in pairs], return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = model.generate(**batch)
    hypotheses = [text.strip() for text in tokenizer.batch_decode(generated, skip_special_tokens=True)]
    references = [target for _, target in pairs]
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    lengths = [row.index(eos) + 1 if eos in row else sum(token != pad for token in row)
               for row in generated.tolist()]
    return {"bleu": round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 4),
            "chrf": round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 4),
            "gen_len": round(sum(lengths) / len(lengths), 4)}


def assert_complete_model_folder(folder: Path, family: str, results: dict, split: str,
                                 pairs: list[tuple[str, str]]) -> None:
    """What ``train`` leaves: a shippable folder with the card, the scores and the code; loadable with remote code.
    The scores it records for ``split`` (whose sentence ``pairs`` the test wrote) are the saved model's own, exactly:
    recomputed from its translations with sacreBLEU, so a score of other weights, of another split or from a
    mis-decoded batch shows."""
    assert not (folder / ".final-tmp").exists()
    shipped = check_model_folder(folder)  # raises unless complete
    required = {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json",
                "tokenizer_config.json", "README.md"}
    assert required | CODE_FILES[family] <= set(shipped)
    assert (folder / "eval_results.json").is_file() and (folder / TOKENIZER_SUBDIR / "tokenizer.json").is_file()

    config = json.loads((folder / "config.json").read_text())
    assert {"AutoConfig", "AutoModelForSeq2SeqLM"} <= set(config["auto_map"])
    assert PIPELINE_TASK in config["custom_pipelines"]
    generation = json.loads((folder / "generation_config.json").read_text())
    assert generation["max_new_tokens"] == 12 and generation["num_beams"] == 1
    assert generation.get("max_length") in (None, 20)  # no stray max_length from evaluation (20 is the default)

    saved = json.loads((folder / "eval_results.json").read_text())
    assert saved == json.loads(json.dumps(results))

    card = ModelCard.load(folder / "README.md")
    assert card.data.library_name == "transformers" and card.data.model_name == folder.name
    assert ".final-tmp" not in card.text
    scores = {r.metric_type: r for r in card.data.eval_results}
    assert set(scores) == {"bleu", "chrf"}
    assert scores["bleu"].metric_value == round(saved[split]["bleu"], 2)
    assert scores["bleu"].dataset_split == split
    assert "optimiser steps" in card.text

    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    assert model.config.model_type == TINY_MODELS[family]["model_type"]
    batch = tokenizer(["3rd of March 2021", "1/2/2000"], return_tensors="pt", padding=True)
    with torch.no_grad():
        generated = model.generate(**batch, max_new_tokens=6)
    assert generated.shape[0] == 2 and 1 < generated.shape[1] <= 7
    expected = expected_scores(model, tokenizer, pairs)
    assert expected["chrf"] > 0, expected  # the model writes characters of the references: the check can see them
    assert {metric: saved[split][metric] for metric in expected} == expected


def checkpoint_number(path: Path) -> int:
    return int(path.name.split("-")[-1])


def best_checkpoint_weights_equal_final(folder: Path) -> bool:
    """load_best_model_at_end: the final weights are the best checkpoint's."""
    last = max((folder / CHECKPOINT_SUBDIR).glob("checkpoint-*"), key=checkpoint_number)  # by number: 10 after 9
    state = json.loads((last / "trainer_state.json").read_text())
    best = load_file(Path(state["best_model_checkpoint"]) / "model.safetensors")
    final = load_file(folder / "model.safetensors")
    return bool(best) and all(torch.equal(final[name], tensor) for name, tensor in best.items())


# --- run configs, learning rate, Trainer arguments -------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(DEMO_CONFIGS.values()))
def test_demo_configs_load_with_overrides(name: str) -> None:
    config = load_run_config(REPO_ROOT / "configs" / name,
                             ["--training.max_steps", "7", "--training.learning_rate", "1e-3",
                              "--training.resume_from_checkpoint", "true", "--data.builtin_train=50",
                              "--model_overrides.dropout", "0.2", "--tokenizer.path", "null"])
    assert isinstance(config, RunConfig)
    assert config.training.max_steps == 7 and config.training.learning_rate == 1e-3
    assert config.training.resume_from_checkpoint is True
    assert config.data.builtin_train == 50 and config.model_overrides == {"dropout": 0.2}
    assert config.tokenizer.path is None
    assert Path(config.model).is_absolute() and Path(config.model).is_file()


def test_input_paths_are_relative_to_the_yaml_and_overrides_to_the_current_folder(tmp_path, monkeypatch) -> None:
    """A copied config works from any folder: its model, data and tokenizer paths are read next to it; the output
    folder and command-line paths are where the command runs."""
    recipe = tmp_path / "recipes"
    (recipe / "models").mkdir(parents=True)
    (recipe / "models" / "tiny.json").write_text(json.dumps(TINY_MODELS["transformer"]))
    (recipe / "tok").mkdir()
    (recipe / "my.yaml").write_text(
        "model: models/tiny.json\n"
        "data: {format: text, files: {train: [corpus/train.de, corpus/train.en]}}\n"
        "tokenizer: {path: tok}\ntraining: {output_dir: runs/out}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = load_run_config(Path("..") / "recipes" / "my.yaml")
    assert Path(config.model) == recipe / "models" / "tiny.json"
    assert config.data.files == {"train": [str(recipe / "corpus" / "train.de"), str(recipe / "corpus" / "train.en")]}
    assert config.tokenizer.path == str(recipe / "tok")
    (recipe / "dir.yaml").write_text("model: models/tiny.json\ndata: {format: text, data_dir: ../corpus}\n")
    assert load_run_config(recipe / "dir.yaml").data.data_dir == str(tmp_path / "corpus")
    assert config.training.output_dir == "runs/out"  # the current folder's
    config = load_run_config(recipe / "my.yaml", ["--model", "mine.json", "--tokenizer.path", "org/hub-tokenizer"])
    assert config.model == "mine.json" and config.tokenizer.path == "org/hub-tokenizer"
    (recipe / "hub.yaml").write_text("model: models/tiny.json\ntokenizer: {path: org/hub-tokenizer}\n")
    assert load_run_config(recipe / "hub.yaml").tokenizer.path == "org/hub-tokenizer"  # no such folder: a Hub id


def test_config_errors_name_the_key(tmp_path) -> None:
    path = run_config(tmp_path, "transformer", tmp_path / "out")
    with pytest.raises(EncdecError, match=r"`config\.training\.max_stepz`.*valid keys.*max_steps"):
        load_run_config(path, ["--training.max_stepz", "5"])
    with pytest.raises(EncdecError, match=r"`config\.training\.max_steps` must be int, got 'abc'"):
        load_run_config(path, ["--training.max_steps", "abc"])
    with pytest.raises(EncdecError, match=r"`--training\.max_steps` has no value"):
        load_run_config(path, ["--training.max_steps"])


def test_vaswani_schedule_is_the_papers_rate() -> None:
    settings = TrainingSettings(lr_scheduler_type="vaswani", learning_rate=None, warmup_steps=400, lr_factor=2.0)
    rate, scheduler = resolve_learning_rate(settings, d_model=64)
    assert scheduler == "inverse_sqrt"
    assert rate == pytest.approx(2.0 * 64**-0.5 * 400**-0.5)
    assert rate == pytest.approx(2.0 / math.sqrt(64 * 400))
    # an explicit peak rate wins, still on the inverse-sqrt shape
    assert resolve_learning_rate(TrainingSettings(learning_rate=1e-3), 64) == (1e-3, "inverse_sqrt")
    assert resolve_learning_rate(TrainingSettings(lr_scheduler_type="cosine", learning_rate=5e-4), 64) == (
        5e-4, "cosine")
    with pytest.raises(EncdecError, match=r"training\.learning_rate.*vaswani"):
        resolve_learning_rate(TrainingSettings(lr_scheduler_type="linear", learning_rate=None), 64)


def test_deep_post_ln_with_a_short_warm_up_gets_a_warning() -> None:
    def config(**overrides):
        return TransformerSeq2SeqConfig(**{"encoder_layers": 6, "decoder_layers": 6, "normalize_before": False,
                                           **overrides})
    short, paper = TrainingSettings(warmup_steps=400), TrainingSettings(warmup_steps=4000)
    warning = post_ln_warmup_warning(config(), short)
    assert "6 layers" in warning and "400-step" in warning
    assert "training.warmup_steps" in warning and "normalize_before: true" in warning  # both fixes are named
    assert "6 layers" in post_ln_warmup_warning(config(encoder_layers=2), short)  # the deeper stack counts
    assert post_ln_warmup_warning(config(), paper) is None
    assert post_ln_warmup_warning(config(normalize_before=True), short) is None
    assert post_ln_warmup_warning(config(encoder_layers=3, decoder_layers=3), short) is None
    assert post_ln_warmup_warning(RNNSeq2SeqConfig(encoder_layers=6, decoder_layers=6), short) is None


@pytest.mark.parametrize("name", ["multi30k-transformer-small.yaml", "multi30k-transformer-base.yaml",
                                  "multi30k-transformer-fast.yaml", "multi30k-multilingual-small.yaml",
                                  "multi30k-multilingual-cpu.yaml", "multi30k-bilingual-cpu.yaml"])
def test_the_multi30k_transformer_recipes_pass_the_post_ln_check(name: str) -> None:
    run = load_run_config(REPO_ROOT / "configs" / name)
    values = json.loads((REPO_ROOT / run.model).read_text())
    values.pop("model_type")
    assert post_ln_warmup_warning(TransformerSeq2SeqConfig(**values, **run.model_overrides), run.training) is None


def test_training_arguments_carry_the_settings(tmp_path) -> None:
    settings = TrainingSettings(output_dir=str(tmp_path), label_smoothing=0.2, gradient_accumulation_steps=3,
                                learning_rate=None, warmup_steps=100, eval_strategy="steps", eval_steps=7,
                                max_steps=50, per_device_train_batch_size=8, save_total_limit=3, report_to="none",
                                metric_for_best_model="chrf")
    config = RunConfig(model="unused.json", training=settings, generation=GenerationSettings(num_beams=4))
    args = training_arguments(config, tmp_path, d_model=16, has_eval=True)
    assert args.label_smoothing_factor == 0.2
    assert args.gradient_accumulation_steps == 3
    assert args.learning_rate == pytest.approx(16**-0.5 * 100**-0.5)
    assert str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)) == "inverse_sqrt"
    assert args.warmup_steps == 100 and args.max_steps == 50 and args.per_device_train_batch_size == 8
    assert Path(args.output_dir) == tmp_path / CHECKPOINT_SUBDIR
    assert str(getattr(args.eval_strategy, "value", args.eval_strategy)) == "steps"
    assert args.eval_steps == 7 and args.save_steps == 7 and args.save_total_limit == 3
    assert args.load_best_model_at_end and args.metric_for_best_model == "chrf" and args.greater_is_better
    assert args.predict_with_generate and args.generation_num_beams == 4
    assert args.report_to in ([], "none", ["none"])  # transformers normalises "nothing"

    no_eval = training_arguments(config, tmp_path, d_model=16, has_eval=False)
    assert str(getattr(no_eval.eval_strategy, "value", no_eval.eval_strategy)) == "no"
    assert not no_eval.load_best_model_at_end
    loss = RunConfig(model="unused.json", training=TrainingSettings(metric_for_best_model="loss", learning_rate=1e-3,
                                                                   eval_strategy="epoch", report_to="none"))
    assert not training_arguments(loss, tmp_path, d_model=16, has_eval=True).greater_is_better


def test_validation_beam_size_and_length_grouping(tmp_path) -> None:
    """``eval_num_beams`` decodes the validation set with its own beam size (the saved generation config keeps
    ``generation.num_beams``); ``group_by_length`` switches the Trainer to its length-grouped sampler."""
    settings = TrainingSettings(learning_rate=1e-3, lr_scheduler_type="linear", report_to="none")
    config = RunConfig(model="unused.json", training=settings, generation=GenerationSettings(num_beams=5))
    plain = training_arguments(config, tmp_path, d_model=16, has_eval=True)
    assert plain.generation_num_beams == 5
    sampling = "train_sampling_strategy" if hasattr(plain, "train_sampling_strategy") else "group_by_length"
    assert getattr(plain, sampling) in ("random", False)
    settings.eval_num_beams, settings.group_by_length = 1, True
    grouped = training_arguments(config, tmp_path, d_model=16, has_eval=True)
    assert grouped.generation_num_beams == 1
    assert getattr(grouped, sampling) in ("group_by_length", True)
    settings.eval_num_beams = 0
    with pytest.raises(EncdecError, match=r"training\.eval_num_beams.*at least 1"):
        training_arguments(config, tmp_path, d_model=16, has_eval=True)


def test_latest_complete_checkpoint_skips_an_interrupted_write(tmp_path) -> None:
    assert latest_complete_checkpoint(tmp_path) is None
    for name, complete in [("checkpoint-2", True), ("checkpoint-10", True), ("checkpoint-12", False),
                           ("checkpoint-best", True)]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_bytes(b"x")
        if complete:
            (tmp_path / name / "trainer_state.json").write_text("{}")
    assert latest_complete_checkpoint(tmp_path) == tmp_path / "checkpoint-10"  # by number: 10 > 2, not "2" > "10"


# --- tiny runs -------------------------------------------------------------------------------------------------------

def test_text_format_run_leaves_a_complete_model_folder(tmp_path, spy) -> None:
    splits = make_date_splits(120, 12, 12, seed=3)
    data = tmp_path / "multi30k-like"
    data.mkdir()
    for split, prefix in (("train", "train"), ("validation", "val"), ("test", "test2016")):
        for lang, column in (("de", 0), ("en", 1)):
            (data / f"{prefix}.{lang}").write_text("".join(pair[column] + "\n" for pair in splits[split]))
    out = tmp_path / "model"
    path = run_config(tmp_path, "transformer", out,
                      data={"format": "text", "data_dir": str(data), "source_lang": "de", "target_lang": "en"},
                      training={"label_smoothing": 0.2, "gradient_accumulation_steps": 2,
                                "per_device_train_batch_size": 8, "lr_scheduler_type": "vaswani",
                                "learning_rate": None, "lr_factor": 0.5})
    results = train(load_run_config(path))

    [trainer] = spy.trainers
    assert trainer.args.label_smoothing_factor == 0.2 and trainer.label_smoother.epsilon == 0.2
    assert trainer.args.gradient_accumulation_steps == 2
    assert spy.micro_steps == 2 * 6  # two micro-batches per optimiser step
    assert trainer.args.learning_rate == pytest.approx(0.5 * 16**-0.5 * 2**-0.5)
    assert results["train"]["global_step"] == 6
    assert results["data"]["train"] == {"total": 120, "kept": 120, "filtered": 0, "truncated": 0}
    assert set(results) == {"train", "data", "config", "validation", "test"}
    assert_complete_model_folder(out, "transformer", results, split="test", pairs=splits["test"])
    assert best_checkpoint_weights_equal_final(out)
    assert "multi30k-like" in ModelCard.load(out / "README.md").text


def test_jsonl_format_run_with_the_rnn(tmp_path) -> None:
    splits = make_date_splits(120, 12, 0, seed=4)
    files = {}
    for split in ("train", "validation"):
        files[split] = str(tmp_path / f"{split}.jsonl")
        Path(files[split]).write_text("".join(json.dumps({"translation": {"human": s, "iso": t}}) + "\n"
                                              for s, t in splits[split]))
    out = tmp_path / "rnn-model"
    path = run_config(tmp_path, "rnn", out, data={"format": "jsonl", "files": files, "target_lang": "iso"},
                      training={"max_steps": 4, "eval_steps": 2})
    results = train(load_run_config(path))
    assert results["train"]["global_step"] == 4
    assert "test" not in results  # no test file: the card reports the validation scores
    # the run reads the file's text: "1964-03-04" stays that string (datasets' JSON reader, left to infer types, makes
    # it a timestamp, which becomes "1964-03-04 00:00:00" as text)
    assert list(load_data(load_run_config(path).data)["validation"]["target"]) == [t for _, t in splits["validation"]]
    assert_complete_model_folder(out, "rnn", results, split="validation", pairs=splits["validation"])
    config = json.loads((out / "config.json").read_text())
    assert config["attention"] == "bahdanau" and config["cell_type"] == "lstm"


def test_resume_continues_from_the_latest_complete_checkpoint(tmp_path, spy) -> None:
    out = tmp_path / "model"
    path = run_config(tmp_path, "transformer", out)
    first = train(load_run_config(path))
    assert first["train"]["global_step"] == 6
    assert first["train"]["train_runtime_total"] == first["train"]["train_runtime"]
    assert first["train"]["resumed_at_step"] is None
    checkpoints = out / CHECKPOINT_SUBDIR
    clock = json.loads((checkpoints / "checkpoint-6" / "trainer_state.json").read_text())["stateful_callbacks"]
    counted = clock["TrainingClock"]["args"]["seconds"]  # training seconds up to the save
    assert 0 < counted < first["train"]["train_runtime"]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint-3", "checkpoint-6"]  # save_total_limit 2
    tokenizer_before = (out / TOKENIZER_SUBDIR / "tokenizer.json").read_bytes()

    interrupted = checkpoints / "checkpoint-7"  # a save cut short: weights written, trainer_state.json not yet
    interrupted.mkdir()
    (interrupted / "model.safetensors").write_bytes((checkpoints / "checkpoint-6" / "model.safetensors").read_bytes())
    assert latest_complete_checkpoint(checkpoints) == checkpoints / "checkpoint-6"

    spy.micro_steps = 0
    second = train(load_run_config(path, ["--training.resume_from_checkpoint", "true", "--training.max_steps", "9"]))
    assert spy.resumed_from == [None, str(checkpoints / "checkpoint-6")]
    assert spy.micro_steps == 3  # steps 7, 8 and 9 only
    assert second["train"]["global_step"] == 9
    # the wall time counts both attempts: the first up to checkpoint-6, then the second
    assert second["train"]["resumed_at_step"] == 6
    assert second["train"]["train_runtime_total"] == pytest.approx(counted + second["train"]["train_runtime"])
    card = ModelCard.load(out / "README.md").text
    assert f"| wall time (s) | {second['train']['train_runtime_total']:.4g} |" in card
    assert f"| wall time since resuming at step 6 (s) | {second['train']['train_runtime']:.4g} |" in card
    assert json.loads((out / "eval_results.json").read_text())["train"]["global_step"] == 9
    assert (out / TOKENIZER_SUBDIR / "tokenizer.json").read_bytes() == tokenizer_before  # the run's own vocabulary
    state = json.loads((checkpoints / "checkpoint-9" / "trainer_state.json").read_text())
    assert state["global_step"] == 9
    evaluated = [entry["step"] for entry in state["log_history"] if "eval_bleu" in entry]
    assert evaluated == [3, 6, 9]  # the first run's history continues
    assert not (out / ".final-tmp").exists()
    check_model_folder(out)


def test_a_checkpoint_without_a_training_clock_resumes_with_the_total_unknown() -> None:
    """Checkpoints of an encdec version without the clock: the total is unknown (None), not the last attempt's time,
    and the clock enters the state so that Trainer's next save finds it."""
    clock, state = TrainingClock(), TrainerState(global_step=2000, stateful_callbacks={})
    clock.on_train_begin(None, state, None)
    assert clock.seconds is None and clock.total() is None and clock.first_step == 2001
    assert state.stateful_callbacks["TrainingClock"] == {"args": {"seconds": None}, "attributes": {}}
    summary = training_summary({"global_step": 2500, "train_runtime": 60.0, "train_runtime_total": None,
                                "resumed_at_step": 2000})
    assert "wall time (s)" not in summary and summary["wall time since resuming at step 2000 (s)"] == 60.0


def test_the_progress_bar_names_the_run(tmp_path, capsys) -> None:
    """The training bar's description is the output folder's name: ``encdec demo`` trains two models one after the
    other, and each bar says which one it is."""
    out = tmp_path / "dates-rnn"
    train(load_run_config(run_config(tmp_path, "rnn", out, training={"max_steps": 2, "eval_strategy": "no"})))
    bars = [line for line in re.split(r"[\r\n]", capsys.readouterr().err) if "%|" in line]  # tqdm: "desc: 50%|##"
    assert bars, "no progress bar on stderr"
    assert all(line.lstrip().startswith("Training dates-rnn: ") for line in bars), bars


# --- early stopping, seeded reruns, kill -9 and resume ---------------------------------------------------------------

def test_a_second_run_into_one_output_folder_is_refused(tmp_path) -> None:
    """While a run (another process) holds ``OUTPUT_DIR.lock``, a second run into that folder is refused before it
    writes anything, naming the first one's PID; once the first is gone the folder is free again."""
    out = tmp_path / "model"
    config = load_run_config(run_config(tmp_path, "rnn", out, training={"max_steps": 1, "eval_strategy": "no"}))
    holder = hold_lock(tmp_path / "model.lock")
    try:
        with pytest.raises(EncdecError) as refused:
            train(config)
        assert str(refused.value) == (f"The output folder {out} is being written by another process (PID "
                                      f"{holder.pid}, which holds {tmp_path / 'model.lock'}); wait for it to finish, "
                                      "or stop it, then rerun.")
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait(timeout=60)
    assert train(config)["train"]["global_step"] == 1
    assert not (tmp_path / "model.lock").exists()


def test_early_stopping_stops_at_the_patience_and_keeps_the_best_checkpoint(tmp_path, monkeypatch) -> None:
    """``training.early_stopping_patience: 2``: the run stops at the second evaluation in a row without a BLEU gain
    (a tie is no gain), long before ``max_steps``, and the model it saves is the best checkpoint's, not the last
    one's (docs/command-line.md: "the best checkpoint kept, early stopping"). The evaluations are real, their BLEU
    is scripted (a tiny model scores 0 at every step, which would make every evaluation a tie): 10, 20, 20, 15 at
    steps 2, 4, 6 and 8 put the best at step 4 and the stop at step 8 of 20."""
    import encdec.training.run as training_module  # build_trainer looks the metrics up there

    scripted, real_metrics = iter([10.0, 20.0, 20.0, 15.0]), training_module.build_compute_metrics

    def scripted_metrics(tokenizer):
        compute = real_metrics(tokenizer)
        return lambda prediction: {**compute(prediction), "bleu": next(scripted, 0.0)}  # 0 after the script

    monkeypatch.setattr(training_module, "build_compute_metrics", scripted_metrics)
    out = tmp_path / "model"
    path = run_config(tmp_path, "transformer", out, training={"max_steps": 20, "eval_steps": 2, "logging_steps": 2,
                                                               "early_stopping_patience": 2})
    results = train(load_run_config(path))

    assert results["train"]["global_step"] == 8
    checkpoints = out / CHECKPOINT_SUBDIR
    assert sorted(p.name for p in checkpoints.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-8"]  # best, last
    state = json.loads((checkpoints / "checkpoint-8" / "trainer_state.json").read_text())
    assert [(entry["step"], entry["eval_bleu"]) for entry in state["log_history"] if "eval_bleu" in entry] == [
        (2, 10.0), (4, 20.0), (6, 20.0), (8, 15.0)]
    assert Path(state["best_model_checkpoint"]).name == "checkpoint-4"
    final = load_file(out / "model.safetensors")
    best, last = (load_file(checkpoints / name / "model.safetensors") for name in ("checkpoint-4", "checkpoint-8"))
    assert all(torch.equal(final[name], tensor) for name, tensor in best.items())
    assert not all(torch.equal(final[name], tensor) for name, tensor in last.items())  # steps 5-8 changed weights


# A tiny recipe with dropout, 6 steps an epoch and a checkpoint every 5 steps: 15 steps cross two epoch boundaries.
# The best checkpoint by validation loss is the last one, and save_total_limit 2 keeps the last checkpoint besides
# the best in any case (with 1, Trainer deletes it at the end): the weights compared are those of step 15, not of a
# step before the kill (a tiny model's BLEU ties at 0, which would make step 5 the best).
SEEDED_RUN = {"data": {"builtin_train": 96, "builtin_validation": 16, "builtin_test": 16},
              "training": {"max_steps": 15, "eval_steps": 5, "logging_steps": 5, "save_total_limit": 2,
                           "metric_for_best_model": "loss"},
              "model_overrides": {"dropout": 0.1}}
RUN_TIMEOUT = 300  # seconds for one tiny `encdec train` process (about 10 s on a quiet machine)


def run_overrides(out: Path) -> list[str]:
    """Each run its own output folder and its own tokenized-data cache (where a trained tokenizer is also kept), so
    that every run trains its tokenizer and tokenizes anew."""
    return ["--training.output_dir", str(out), "--data.cache_dir", str(out.parent / f"{out.name}-cache")]


def start_run(config: Path, out: Path, stop_at: str | None = None) -> subprocess.Popen:
    """``encdec train config`` into ``out`` in a fresh process, its output in ``out``.log (a file: a pipe nobody
    reads could fill and block the run). The hash seed is left random, as a user's is: a run that depended on the
    order of a set or dict of strings would show as two runs that differ."""
    env = {key: value for key, value in os.environ.items() if key not in (STOP_ENV, "PYTHONHASHSEED")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", ENCDEC_THREADS="1")  # the thread count of this process
    if stop_at:
        env[STOP_ENV] = stop_at
    with open(out.parent / f"{out.name}.log", "w") as log:
        return subprocess.Popen([sys.executable, "-m", "encdec", "train", str(config), *run_overrides(out)],
                                cwd=config.parent, env=env, stdout=log, stderr=subprocess.STDOUT)


def log_tail(out: Path) -> str:
    return (out.parent / f"{out.name}.log").read_text(errors="replace")[-3000:]


def finish(process: subprocess.Popen, out: Path) -> None:
    try:
        assert process.wait(timeout=RUN_TIMEOUT) == 0, log_tail(out)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=60)


def wait_until_stopped(process: subprocess.Popen, out: Path) -> None:
    """Wait until the child ``process`` stops itself at its ``ENCDEC_STOP_AT`` point (SIGSTOP); fail if it exits
    first or takes longer than ``RUN_TIMEOUT``."""
    deadline = time.monotonic() + RUN_TIMEOUT
    while True:
        pid, status = os.waitpid(process.pid, os.WUNTRACED | os.WNOHANG)
        if pid:
            break
        assert time.monotonic() < deadline, f"no stop within {RUN_TIMEOUT} s: {log_tail(out)}"
        time.sleep(0.05)
    assert os.WIFSTOPPED(status), f"the run ended before its stopping point: {log_tail(out)}"


def without_timings(value):
    """``value`` (scores, ``eval_results.json``) without what differs between equal runs: wall times and speeds,
    and the folders each run was given."""
    if not isinstance(value, dict):
        return value
    return {key: without_timings(item) for key, item in value.items()
            if "runtime" not in key and "per_second" not in key and key not in ("output_dir", "cache_dir")}


def evaluations(out: Path) -> list[dict]:
    """Every validation of a run, from its last checkpoint's history, without wall times."""
    last = max((out / CHECKPOINT_SUBDIR).glob("checkpoint-*"), key=checkpoint_number)
    history = json.loads((last / "trainer_state.json").read_text())["log_history"]
    return [without_timings(entry) for entry in history if "eval_bleu" in entry]


def digest(path: Path) -> str:
    """The SHA-256 of a file: byte equality, with a short message when two differ."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def last_checkpoint_weights(out: Path) -> str:
    """The digest of the weights at the last step (15), whichever checkpoint was best."""
    return digest(out / CHECKPOINT_SUBDIR / "checkpoint-15" / "model.safetensors")


@pytest.fixture(scope="module")
def seeded_runs(tmp_path_factory) -> SimpleNamespace:
    """Two fresh ``encdec train`` processes of the ``SEEDED_RUN`` recipe with seed 0, side by side."""
    root = tmp_path_factory.mktemp("seeded")
    config = run_config(root, "transformer", root / "unused", **SEEDED_RUN)
    first, second = root / "first", root / "second"
    processes = [start_run(config, out) for out in (first, second)]
    for process, out in zip(processes, (first, second), strict=True):
        finish(process, out)
    return SimpleNamespace(config=config, first=first, second=second)


@pytest.mark.integration
def test_a_seeded_run_repeats_bit_for_bit_and_another_seed_does_not(seeded_runs, tmp_path) -> None:
    """docs/results.md, "Reproducibility": the same command twice gives bit-identical weights and tokenizer and the
    same scores, on the built-in data (tests/test_multi30k.py checks the same on Multi30k, where the data is
    present). Another ``training.seed`` gives other weights: the seed reaches the run, so the check can fail."""
    first, second = seeded_runs.first, seeded_runs.second
    for name in ("model.safetensors", "tokenizer.json", f"{TOKENIZER_SUBDIR}/tokenizer.json", "config.json",
                 "generation_config.json"):
        assert digest(first / name) == digest(second / name), name
    assert last_checkpoint_weights(first) == last_checkpoint_weights(second)
    results = [json.loads((out / "eval_results.json").read_text()) for out in (first, second)]
    assert without_timings(results[0]) == without_timings(results[1])
    assert [entry["step"] for entry in evaluations(first)] == [5, 10, 15]
    assert evaluations(first) == evaluations(second)

    other = tmp_path / "seed-1"
    train(load_run_config(seeded_runs.config, [*run_overrides(other), "--training.seed", "1"]))
    assert digest(other / "tokenizer.json") == digest(first / "tokenizer.json")  # the same data and vocabulary
    assert last_checkpoint_weights(other) != last_checkpoint_weights(first)


@pytest.mark.integration
def test_a_run_killed_after_a_checkpoint_resumes_to_the_uninterrupted_result(seeded_runs, tmp_path) -> None:
    """kill -9 at a known point: ``ENCDEC_STOP_AT=checkpoint:2`` stops the run right after its step-10 checkpoint
    is on disk (mid-epoch), the test kills it there, and ``resume_from_checkpoint: true`` goes on from that
    checkpoint to a result byte-identical to the uninterrupted run's: the final and the last weights, the scores,
    and every validation on the way (docs/testing.md, "Invariants")."""
    out = tmp_path / "killed"
    process = start_run(seeded_runs.config, out, stop_at="checkpoint:2")
    try:
        wait_until_stopped(process, out)
        assert "checkpoint-10" in {p.name for p in (out / CHECKPOINT_SUBDIR).glob("checkpoint-*")}
        assert not (out / CHECKPOINT_SUBDIR / "checkpoint-15").exists() and not (out / "model.safetensors").exists()
    finally:
        process.kill()  # SIGKILL reaches a stopped process
        process.wait(timeout=60)
    assert process.returncode == -signal.SIGKILL

    resumed = train(load_run_config(seeded_runs.config, [*run_overrides(out), "--training.resume_from_checkpoint",
                                                         "true"]))
    assert resumed["train"]["resumed_at_step"] == 10 and resumed["train"]["global_step"] == 15
    first = seeded_runs.first
    assert digest(out / "model.safetensors") == digest(first / "model.safetensors")
    assert last_checkpoint_weights(out) == last_checkpoint_weights(first)
    uninterrupted = without_timings(json.loads((first / "eval_results.json").read_text()))
    for split in ("validation", "test"):
        assert without_timings(resumed)[split] == uninterrupted[split]
    assert evaluations(out) == evaluations(first)


# --- training.average_last -------------------------------------------------------------------------------------------

def snapshot_names(out: Path) -> list[str]:
    return sorted((p.name for p in (out / CHECKPOINT_SUBDIR / SNAPSHOT_SUBDIR).iterdir()),
                  key=lambda name: int(name.split("-")[-1]))


@pytest.mark.parametrize("average_wins", [True, False])
def test_average_last_keeps_whichever_scores_better_on_validation(tmp_path, monkeypatch, average_wins) -> None:
    """Snapshots every 2 steps, the last 3 kept; the average replaces the best checkpoint exactly when its validation
    score is higher (the scores are rigged per branch, the evaluations are real), and averaging.json says so."""
    import encdec.training.results as training_module  # average_or_best scores through it there

    real_score, calls = training_module._validation_score, []

    def rigged(trainer, validation, metric, search):
        scores = real_score(trainer, validation, metric, search)
        calls.append((len(validation), search))
        first_wins = not average_wins
        return {**scores, metric: (20.0 if first_wins else 10.0) if len(calls) == 1 else (10.0 if first_wins else 20.0)}

    monkeypatch.setattr(training_module, "_validation_score", rigged)
    out = tmp_path / "model"
    path = run_config(tmp_path, "transformer", out,
                      training={"max_steps": 8, "eval_steps": 4, "average_last": 3, "average_every": 2},
                      generation={"num_beams": 2})
    results = train(load_run_config(path))
    # the best checkpoint and the average, each on every validation pair with the generation beam size
    assert calls == [(20, {"num_beams": 2}), (20, {"num_beams": 2})]
    assert snapshot_names(out) == ["step-4", "step-6", "step-8"]  # step-2 rotated out

    record = json.loads((out / "averaging.json").read_text())
    assert record["steps"] == [4, 6, 8] and record["best_checkpoint_step"] == int(
        Path(json.loads((out / CHECKPOINT_SUBDIR / "checkpoint-8" / "trainer_state.json").read_text())
             ["best_model_checkpoint"]).name.split("-")[-1])
    assert record["chosen"] == ("average" if average_wins else "best_checkpoint")
    assert results["averaging"] == record and record["num_beams"] == 2
    assert set(results) == {"train", "data", "config", "averaging", "validation", "test"}
    final = load_file(out / "model.safetensors")
    if average_wins:
        expected = average_state_dicts([out / CHECKPOINT_SUBDIR / SNAPSHOT_SUBDIR / name / "model.safetensors"
                                        for name in snapshot_names(out)])
        assert all(torch.equal(final[name], tensor) for name, tensor in expected.items())
        assert not best_checkpoint_weights_equal_final(out)
        assert "average of the steps 4, 6, 8" in ModelCard.load(out / "README.md").text
    else:
        assert best_checkpoint_weights_equal_final(out)  # restored exactly after scoring the average
        assert "checkpoint of step" in ModelCard.load(out / "README.md").text
    check_model_folder(out)


def test_average_last_settings_are_checked() -> None:
    check_averaging(TrainingSettings(), has_eval=False)  # off by default
    for settings, has_eval, words in (
            (TrainingSettings(average_last=1, average_every=10), True, "training.average_last`=1"),
            (TrainingSettings(average_last=3), True, "training.average_every`=None"),
            (TrainingSettings(average_last=3, average_every=0), True, "training.average_every`=0"),
            (TrainingSettings(average_last=3, average_every=10), False, "validation split")):
        with pytest.raises(EncdecError, match=re.escape(words)):
            check_averaging(settings, has_eval)


def test_snapshots_of_an_interrupted_attempt_are_dropped_on_resume(tmp_path) -> None:
    """A resumed run re-trains the steps after its checkpoint: the old attempt's later snapshots must not be averaged
    with the new ones."""
    model = AutoModelForSeq2SeqLM.from_config(TransformerSeq2SeqConfig(**{
        k: v for k, v in TINY_MODELS["transformer"].items() if k != "model_type"}))
    folder = tmp_path / "snapshots"
    callback = WeightSnapshots(folder, every=5, keep=2)
    for step in (5, 10, 15):
        callback.on_step_end(None, SimpleNamespace(global_step=step, max_steps=20, is_world_process_zero=True), None,
                             model=model)
    assert [p.name for p in snapshot_folders(folder)] == ["step-10", "step-15"]
    callback.on_step_end(None, SimpleNamespace(global_step=7, max_steps=20, is_world_process_zero=True), None,
                         model=model)  # not a snapshot step: nothing changes
    assert [p.name for p in snapshot_folders(folder)] == ["step-10", "step-15"]
    callback.on_step_end(None, SimpleNamespace(global_step=10, max_steps=20, is_world_process_zero=True), None,
                         model=model)  # resumed from step 5: step 15 belongs to the interrupted attempt
    assert [p.name for p in snapshot_folders(folder)] == ["step-10"]
    assert not list(folder.glob(".*"))  # no staging folder left behind
    callback.on_step_end(None, SimpleNamespace(global_step=13, max_steps=13, is_world_process_zero=True), None,
                         model=model)  # the last step is always a snapshot
    assert [p.name for p in snapshot_folders(folder)] == ["step-10", "step-13"]
