"""``encdec train`` as a library: run configs, the learning-rate schedule, the Trainer arguments, tiny runs on text
and JSON Lines data that leave a complete, loadable model folder, and resuming from the latest complete
checkpoint."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, TrainerState

from encdec import RNNSeq2SeqConfig, TransformerSeq2SeqConfig
from encdec.averaging import WeightSnapshots, average_state_dicts, snapshot_folders
from encdec.cards import training_summary
from encdec.data import make_date_splits
from encdec.errors import EncdecError
from encdec.folders import PIPELINE_TASK, check_model_folder
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


def assert_complete_model_folder(folder: Path, family: str, results: dict, split: str) -> None:
    """What ``train`` leaves: a shippable folder with the card, the scores and the code; loadable with remote code."""
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
    for metric in ("bleu", "chrf"):
        assert 0.0 <= saved[split][metric] <= 100.0

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


def best_checkpoint_weights_equal_final(folder: Path) -> bool:
    """load_best_model_at_end: the final weights are the best checkpoint's."""
    state = json.loads(sorted((folder / CHECKPOINT_SUBDIR).glob("checkpoint-*/trainer_state.json"))[-1].read_text())
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
    with pytest.raises(EncdecError, match="has no value"):
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
                                  "multi30k-transformer-fast.yaml"])
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
    assert_complete_model_folder(out, "transformer", results, split="test")
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
    assert_complete_model_folder(out, "rnn", results, split="validation")
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


# --- training.average_last -------------------------------------------------------------------------------------------

def snapshot_names(out: Path) -> list[str]:
    return sorted((p.name for p in (out / CHECKPOINT_SUBDIR / SNAPSHOT_SUBDIR).iterdir()),
                  key=lambda name: int(name.split("-")[-1]))


@pytest.mark.parametrize("average_wins", [True, False])
def test_average_last_keeps_whichever_scores_better_on_validation(tmp_path, monkeypatch, average_wins) -> None:
    """Snapshots every 2 steps, the last 3 kept; the average replaces the best checkpoint exactly when its validation
    score is higher (the scores are rigged per branch, the evaluations are real), and averaging.json says so."""
    import encdec.training as training_module

    real_score, calls = training_module._validation_score, []

    def rigged(trainer, validation, metric, num_beams):
        scores = real_score(trainer, validation, metric, num_beams)
        calls.append((len(validation), num_beams))
        first_wins = not average_wins
        return {**scores, metric: (20.0 if first_wins else 10.0) if len(calls) == 1 else (10.0 if first_wins else 20.0)}

    monkeypatch.setattr(training_module, "_validation_score", rigged)
    out = tmp_path / "model"
    path = run_config(tmp_path, "transformer", out,
                      training={"max_steps": 8, "eval_steps": 4, "average_last": 3, "average_every": 2},
                      generation={"num_beams": 2})
    results = train(load_run_config(path))
    # the best checkpoint and the average, each on every validation pair with the generation beam size
    assert calls == [(20, 2), (20, 2)]
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
        with pytest.raises(EncdecError, match=words.replace(".", r"\.").replace("`", "`")):
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
