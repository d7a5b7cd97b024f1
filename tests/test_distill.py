"""Sequence-level distillation (encdec.recipes.distill) on the built-in date task with tiny models: the whole workflow,
the distilled corpus equal to `encdec translate`'s output, kill -9 in the translation or the training stage then the
same command to the same student, and the refusals (another recipe on an existing corpus, mismatched tokenizers).

The kill -9 tests stop the run at a known point (``ENCDEC_STOP_AT``, ``encdec.stop_points``: right after the N-th
chunk of the teacher's translation, or the N-th checkpoint of the student, is on disk) and kill it there."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard

from encdec.errors import EncdecError
from encdec.inference import load_model_and_tokenizer, translate
from encdec.recipes.distill import distill, load_distill_config, shown_path
from encdec.tokenization import load_tokenizer
from encdec.training import load_run_config
from encdec_cli import main
from test_distributed import launch, run_until_stopped
from test_io_utils import hold_lock
from test_training import run_config
from tiny_model_folders import (
    DATE_RNN,
    DATE_TRANSFORMER,
    REPO_ROOT,
    date_data,
    date_tokenizer,
    save_folder,
    train_on_dates,
)

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "ENCDEC_THREADS": "1"}
TRAIN = 240  # built-in training dates: six chunks of 40 for the teacher to translate
# the demo's dates without their languages (en, iso): the corpus files are .source and .target, the student's card
# claims no languages
DATA = {"builtin_train": TRAIN, "builtin_validation": 20, "builtin_test": 20, "source_lang": None, "target_lang": None}
STUDENT_TRAINING = {"max_steps": 100, "eval_steps": 50, "logging_steps": 50, "save_total_limit": 3}


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    """A tiny Transformer trained on dates for a moment."""
    dates = date_data()
    model = train_on_dates({**DATE_TRANSFORMER, "encoder_layers": 1, "decoder_layers": 1}, dates, steps=150, lr=3e-3)
    return save_folder(model, dates[0], tmp_path_factory.mktemp("teacher") / "teacher")


def write_recipe(root: Path, teacher: Path | list[Path], **options) -> Path:
    """A recipe in ``root``: the teacher(s) with beam 2, a tiny student on ``TRAIN`` built-in dates, output in
    root/out."""
    sections = options.pop("student_sections", {})
    training = {**STUDENT_TRAINING, **sections.pop("training", {})}
    sections.setdefault("data", DATA)
    student = run_config(root, "transformer", root / "unused", training=training, **sections)
    models = [str(path) for path in (teacher if isinstance(teacher, list) else [teacher])]
    recipe = {"teacher": {"models": models, "num_beams": 2}, "student": student.name, "output_dir": str(root / "out"),
              "chunk_size": 40, **options}
    path = root / "distill.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def encdec_distill(recipe: Path, *extra: str) -> str:
    """``encdec distill recipe *extra`` run in this process (the kill -9 tests run it as a process of its own, as the
    user does): its standard output, once it has exited with status 0."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["distill", str(recipe), *extra])
    assert status == 0, out.getvalue()[-3000:]
    return out.getvalue()


@pytest.fixture(scope="module")
def finished(teacher, tmp_path_factory) -> Path:
    """An uninterrupted `encdec distill` run: its output folder."""
    root = tmp_path_factory.mktemp("distill")
    stdout = encdec_distill(write_recipe(root, teacher))
    assert f"distilled corpus: {TRAIN} of {TRAIN} teacher translations kept" in stdout
    return root / "out"


def test_the_workflow_writes_a_corpus_a_manifest_and_a_student_that_names_its_teacher(finished, teacher) -> None:
    corpus = finished / "corpus"
    manifest = json.loads((corpus / "manifest.json").read_text())
    assert manifest["stages"]["sources"] == {"train": TRAIN, "validation": 20, "test": 20}
    assert manifest["stages"]["corpus"] == {"translated": TRAIN, "empty": 0, "below_min_score": 0,
                                            "distilled": TRAIN, "original": 0}
    assert manifest["recipe"]["teacher"][0]["path"] == str(teacher.resolve())
    weights = hashlib.sha256((teacher / "model.safetensors").read_bytes()).hexdigest()
    assert manifest["recipe"]["teacher"][0]["model.safetensors"] == weights
    assert manifest["recipe"]["decoding"]["num_beams"] == 2
    for name, pairs in (("train", TRAIN), ("original", TRAIN), ("validation", 20), ("test", 20)):
        for side in ("source", "target"):
            assert len((corpus / f"{name}.{side}").read_text().splitlines()) == pairs, (name, side)
    assert (corpus / "original.source").read_text() == (corpus / "train.source").read_text()
    assert (corpus / "original.target").read_text() != (corpus / "train.target").read_text()  # the teacher's
    student = finished / "student"
    assert (student / "model.safetensors").is_file()
    card = (student / "README.md").read_text()
    assert "distilled from" in card and f"{teacher} (beam 2)" in card
    assert ModelCard.load(student / "README.md").data.language is None  # data without languages: none claimed
    results = json.loads((student / "eval_results.json").read_text())
    assert results["train"]["global_step"] == STUDENT_TRAINING["max_steps"]


def test_the_distilled_corpus_is_encdec_translate_of_the_sources(finished, teacher, tmp_path) -> None:
    """The teacher's scored translations are `encdec translate --scores` of the sources, byte for byte (with the
    recipe's beam and chunks), and the training targets are their text."""
    corpus = finished / "corpus"
    out = tmp_path / "translated.txt"
    assert main(["translate", "--model", str(teacher), "--input", str(corpus / "original.source"), "--output",
                 str(out), "--num-beams", "2", "--scores", "--chunk-size", "40"]) == 0
    assert out.read_bytes() == (corpus / "teacher.scored").read_bytes()
    texts = [line.rsplit(" ||| ", 1)[0] for line in out.read_text().splitlines()]
    assert len(texts) == TRAIN and "".join(text + "\n" for text in texts) == (corpus / "train.target").read_text()


def test_a_finished_run_is_not_redone(finished, tmp_path, monkeypatch) -> None:
    recipe = finished.parent / "distill.yaml"
    before = {path: path.stat().st_mtime_ns for path in finished.rglob("*") if path.is_file()}
    monkeypatch.setattr("encdec.recipes.distill.train", lambda *a: pytest.fail("the student was trained again"))
    monkeypatch.setattr("encdec.recipes.distill.translate_file", lambda *a, **k: pytest.fail("translated again"))
    result = distill(load_distill_config(recipe))
    assert result["student"]["train"]["global_step"] == STUDENT_TRAINING["max_steps"]
    assert {path: path.stat().st_mtime_ns for path in finished.rglob("*") if path.is_file()} == before


@pytest.mark.parametrize("stage", ["translation", "training"])
def test_kill_9_then_the_same_command_gives_the_same_student(finished, teacher, tmp_path, stage: str) -> None:
    """Killed right after the teacher's third chunk of 40 lines is on disk (exactly 120 lines done, their scored
    translations those of the finished run), or right after the student's first checkpoint (step 50) is saved, the
    same command finishes to the uninterrupted run's corpus and student, byte for byte; a resumed translation's
    manifest counts the seconds of both attempts."""
    recipe = write_recipe(tmp_path, teacher)
    corpus, student = tmp_path / "out" / "corpus", tmp_path / "out" / "student"
    stop_at = "chunk:3" if stage == "translation" else "checkpoint:1"
    run_until_stopped([sys.executable, "-m", "encdec", "distill", str(recipe)], ENV, stop_at, tmp_path / "killed.log")
    if stage == "translation":
        state = json.loads((corpus / "teacher.scored.partial.json").read_text())
        expected = "".join((finished / "corpus" / "teacher.scored").read_text().splitlines(keepends=True)[:120])
        assert state["lines"] == 120 and (corpus / "teacher.scored.partial").read_text() == expected
        assert not (corpus / "teacher.scored").exists() and not student.exists()
        counted = state["seconds"]  # the killed attempt's
    else:
        assert (corpus / "teacher.scored").read_bytes() == (finished / "corpus" / "teacher.scored").read_bytes()
        checkpoints = sorted(path.name for path in (student / "checkpoints").iterdir())
        assert checkpoints == ["checkpoint-50"] and not (student / "model.safetensors").exists()
        saved = json.loads((student / "checkpoints" / "checkpoint-50" / "trainer_state.json").read_text())
        assert saved["global_step"] == 50
    encdec_distill(recipe)
    if stage == "translation":  # the manifest's time counts both attempts: the killed one's, then this one's
        record = json.loads((corpus / "manifest.json").read_text())["stages"]["translation"]
        assert record["resumed"] and record["seconds_all_attempts"] == round(counted + record["seconds"], 1)
    else:
        trained = json.loads((student / "eval_results.json").read_text())["train"]
        assert (trained["resumed_at_step"], trained["global_step"]) == (50, STUDENT_TRAINING["max_steps"])
    for name in ("corpus/teacher.scored", "corpus/train.target", "student/model.safetensors"):
        assert (tmp_path / "out" / name).read_bytes() == (finished / name).read_bytes(), name


def test_another_recipe_on_an_existing_corpus_is_refused_naming_the_difference(finished) -> None:
    recipe = finished.parent / "distill.yaml"
    with pytest.raises(EncdecError, match=r"different recipe \(decoding num_beams: 2 before, 3 now\)"):
        distill(load_distill_config(recipe, ["--teacher.num_beams", "3"]))
    with pytest.raises(EncdecError, match=r"different recipe \(min_score: null before, -2.0 now\)"):
        distill(load_distill_config(recipe, ["--min_score", "-2"]))


def test_changed_teacher_weights_are_refused(teacher, tmp_path) -> None:
    copy = shutil.copytree(teacher, tmp_path / "teacher")
    recipe = write_recipe(tmp_path, copy, student_sections={"training": {"max_steps": 2, "eval_strategy": "no"}})
    distill(load_distill_config(recipe))
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-4] + b"\0\0\0\0")
    with pytest.raises(EncdecError, match=r"different recipe \(teacher 1 model.safetensors: "):
        distill(load_distill_config(recipe))


def test_filters_and_mixing_the_original_pairs(finished, teacher, tmp_path) -> None:
    """``min_score`` drops the pairs whose log-probability per target token (``</s>`` included) is below it, here
    the median of the finished run's; ``mix_original`` appends the original pairs."""
    lines = (finished / "corpus" / "teacher.scored").read_text().splitlines()
    texts, scores = zip(*(line.rsplit(" ||| ", 1) for line in lines), strict=True)
    lengths = [len(ids) for ids in load_tokenizer(teacher)(text_target=list(texts))["input_ids"]]
    per_token = sorted(float(score) / length for score, length in zip(scores, lengths, strict=True))
    median = per_token[len(per_token) // 2]
    recipe = write_recipe(tmp_path, teacher, mix_original=True, min_score=median,
                          student_sections={"training": {"max_steps": 2, "eval_strategy": "no"}})
    counts = distill(load_distill_config(recipe))["stages"]["corpus"]
    below = sum(value < median for value in per_token)
    assert counts == {"translated": TRAIN, "empty": 0, "below_min_score": below, "distilled": TRAIN - below,
                      "original": TRAIN}
    assert below == per_token.index(median)  # exactly the scores ranked before the median (half unless tied)
    corpus = tmp_path / "out" / "corpus"
    train = (corpus / "train.target").read_text().splitlines()
    assert len(train) == 2 * TRAIN - below
    assert train[TRAIN - below:] == (corpus / "original.target").read_text().splitlines()


def test_a_filter_that_leaves_nothing_is_refused_naming_it(teacher, tmp_path) -> None:
    recipe = write_recipe(tmp_path, teacher, min_score=-1e-9)
    with pytest.raises(EncdecError, match=r"No distilled pair is left: .* below min_score=-1e-09"):
        distill(load_distill_config(recipe))


def test_mismatched_tokenizers_are_refused_before_anything_is_written(teacher, tmp_path) -> None:
    other = tmp_path / "other-teacher"
    shutil.copytree(teacher, other)
    date_tokenizer(num_pairs=300, vocab_size=100).save_pretrained(other)
    with pytest.raises(EncdecError, match="tokenizer"):
        distill(load_distill_config(write_recipe(tmp_path, [teacher, other])))
    assert not (tmp_path / "out").exists()
    recipe = write_recipe(tmp_path, teacher, student_sections={"tokenizer": {"path": str(other)}})
    with pytest.raises(EncdecError, match=r"The student's tokenizer.path .* is not the teacher's"):
        distill(load_distill_config(recipe))
    assert not (tmp_path / "out").exists()


def test_a_student_given_the_teachers_tokenizer_keeps_it(teacher, tmp_path) -> None:
    recipe = write_recipe(tmp_path, teacher, student_sections={"tokenizer": {"path": str(teacher)},
                                                               "training": {"max_steps": 2, "eval_strategy": "no"}})
    distill(load_distill_config(recipe))
    student = tmp_path / "out" / "student"
    assert (student / "tokenizer.json").read_text() == (teacher / "tokenizer.json").read_text()


@pytest.mark.parametrize("student", ["transformer-small", "transformer-fast", "lstm-bahdanau"])
def test_the_multi30k_recipes_load_and_name_the_ensemble_teacher(student: str) -> None:
    config = load_distill_config(REPO_ROOT / "configs" / f"distill-multi30k-{student}.yaml")
    assert [Path(model).name for model in config.teacher.models] == ["multi30k-transformer-small",
                                                                     "multi30k-lstm-bahdanau"]
    assert config.corpus == Path("runs/distill-multi30k-corpus")  # one translation for the three students
    assert config.teacher.num_beams == 5 and not config.mix_original and config.min_score is None
    run = load_run_config(config.student, config.student_overrides)
    assert run.data.format == "text" and Path(run.data.data_dir).name == "multi30k"
    assert Path(run.model).is_file()


def test_the_multilingual_multi30k_recipe_teaches_every_direction_with_the_teachers_vocabulary() -> None:
    """Its teacher is the multilingual run's folder, asked no one direction; its student is that run's config (12
    directions) with one decoder layer and the teacher's tokenizer (an override: from the repository root)."""
    config = load_distill_config(REPO_ROOT / "configs" / "distill-multi30k-multilingual.yaml")
    teacher = Path(config.teacher.models[0])
    assert teacher.resolve() == REPO_ROOT / "runs" / "multi30k-multilingual-cpu"
    assert config.teacher.source_lang is None and config.teacher.target_lang is None
    run = load_run_config(config.student, config.student_overrides)
    assert run.data.multilingual and run.data.languages == ["de", "en", "fr", "cs"] and run.data.directions == "all"
    assert run.model_overrides["decoder_layers"] == 1
    assert (REPO_ROOT / run.tokenizer.path).resolve() == teacher.resolve()


DATES_RECIPE = REPO_ROOT / "configs" / "distill-dates.yaml"
DEMO_TEACHERS = ("demo-transformer", "demo-lstm-bahdanau")


def test_the_dates_recipe_names_the_demo_models_and_a_smaller_student_on_their_data() -> None:
    """From the repository root, the recipe's teachers are `encdec demo`'s folders; the demo configs train one
    tokenizer (an ensemble's members must share it), and the student learns on their data, so its held-out dates are
    theirs; its overrides are strings, as `--section.key value` items must be."""
    config = load_distill_config(DATES_RECIPE)
    assert [Path(model).resolve() for model in config.teacher.models] == [REPO_ROOT / "runs" / name
                                                                          for name in DEMO_TEACHERS]
    assert config.teacher.num_beams == 4 and config.output_dir == "runs/distill-dates" and config.corpus_dir is None
    assert all(isinstance(item, str) for item in config.student_overrides)
    student = load_run_config(config.student, config.student_overrides)
    assert student.model_overrides == {"d_model": 64, "decoder_layers": 1}
    demos = [load_run_config(REPO_ROOT / "configs" / f"{name}.yaml") for name in DEMO_TEACHERS]
    for demo in demos:
        assert (demo.data, demo.tokenizer) == (student.data, demos[0].tokenizer)


@pytest.fixture(scope="module")
def demo_teachers(tmp_path_factory) -> list[Path]:
    """Stand-ins for `encdec demo`'s models: a tiny Transformer and a tiny Bahdanau LSTM on one tokenizer, trained on
    dates for a moment, in folders named as the demo's."""
    dates = date_data()
    root = tmp_path_factory.mktemp("demo-runs")
    models = [train_on_dates({**DATE_TRANSFORMER, "encoder_layers": 1, "decoder_layers": 1}, dates, 150, 3e-3),
              train_on_dates(DATE_RNN, dates, 150, 5e-3)]
    return [save_folder(model, dates[0], root / name) for model, name in zip(models, DEMO_TEACHERS, strict=True)]


def test_the_dates_recipe_distils_the_demo_ensemble_into_a_student_that_translates(demo_teachers, tmp_path) -> None:
    """The real recipe file, its teachers pointed at the stand-ins and its student shortened on the command line
    (its own overrides kept, 300 training dates, 30 steps): the student loads, translates, is the recipe's smaller
    Transformer, and the manifest and its card name both teachers."""
    recipe = yaml.safe_load(DATES_RECIPE.read_text(encoding="utf-8"))
    short = [*recipe["student_overrides"], "--data.builtin_train", "300", "--data.builtin_validation", "20",
             "--data.builtin_test", "20", "--training.max_steps", "30", "--training.eval_steps", "30",
             "--training.warmup_steps", "5", "--training.logging_steps", "10"]
    out = tmp_path / "out"
    stdout = encdec_distill(DATES_RECIPE, "--teacher.models", json.dumps([str(path) for path in demo_teachers]),
                            "--output_dir", str(out), "--student_overrides", json.dumps(short))
    assert "distilled corpus: 300 of 300 teacher translations kept" in stdout
    assert f"student model folder: {out / 'student'}" in stdout
    manifest = json.loads((out / "corpus" / "manifest.json").read_text())
    assert [teacher["path"] for teacher in manifest["recipe"]["teacher"]] == [str(path.resolve())
                                                                              for path in demo_teachers]
    assert manifest["recipe"]["decoding"]["num_beams"] == 4
    assert manifest["stages"]["sources"] == {"train": 300, "validation": 20, "test": 20}
    model, tokenizer = load_model_and_tokenizer(out / "student")
    assert (model.config.d_model, model.config.decoder_layers) == (64, 1)
    outputs = translate(model, tokenizer, ["Wednesday, 3 Mar 2021", "4/5/99"], num_beams=4)
    assert len(outputs) == 2 and all(isinstance(output, str) for output in outputs)
    results = json.loads((out / "student" / "eval_results.json").read_text())
    assert results["train"]["global_step"] == 30 and {"validation", "test"} <= set(results)
    card = (out / "student" / "README.md").read_text()
    assert f"the ensemble of {demo_teachers[0].resolve()} + {demo_teachers[1].resolve()} (beam 4" in card


def test_two_processes_distil_the_same_corpus_as_one(finished, teacher, tmp_path) -> None:
    """Under `accelerate launch` each process translates its share of the chunks, and the student trains on both."""
    recipe = write_recipe(tmp_path, teacher, student_sections={"training": {"max_steps": 4, "eval_strategy": "no"}})
    launch(["encdec", "distill", str(recipe)], accelerate=True, timeout=600)
    for name in ("teacher.scored", "train.source", "train.target", "validation.target"):
        assert (tmp_path / "out" / "corpus" / name).read_bytes() == (finished / "corpus" / name).read_bytes(), name
    manifest = json.loads((tmp_path / "out" / "corpus" / "manifest.json").read_text())
    assert manifest["stages"]["translation"]["processes"] == 2
    assert (tmp_path / "out" / "student" / "model.safetensors").is_file()


def test_students_of_one_teacher_share_a_corpus_dir(finished, teacher, tmp_path, monkeypatch) -> None:
    """A second recipe naming the finished run's corpus (same teacher, decoding and data) trains its student on it
    without translating again."""
    recipe = write_recipe(tmp_path, teacher, corpus_dir=str(finished / "corpus"),
                          student_sections={"training": {"max_steps": 2, "eval_strategy": "no"}})
    monkeypatch.setattr("encdec.recipes.distill.translate_file", lambda *a, **k: pytest.fail("translated again"))
    result = distill(load_distill_config(recipe))
    assert result["stages"]["corpus"]["distilled"] == TRAIN
    assert (tmp_path / "out" / "student" / "model.safetensors").is_file() and not (tmp_path / "out" / "corpus").exists()


def test_a_student_stopped_before_its_first_checkpoint_goes_on(finished, teacher, tmp_path) -> None:
    """Killed during set-up or its first steps, the student's folder holds files but no checkpoint: the same
    command trains it from step 0 instead of refusing the folder."""
    recipe = write_recipe(tmp_path, teacher, corpus_dir=str(finished / "corpus"),
                          student_sections={"training": {"max_steps": 2, "eval_strategy": "no"}})
    (tmp_path / "out" / "student" / "runs").mkdir(parents=True)  # what an early kill leaves: logs, no checkpoint
    distill(load_distill_config(recipe))
    assert (tmp_path / "out" / "student" / "model.safetensors").is_file()


def test_two_runs_never_write_one_corpus_at_once(teacher, tmp_path) -> None:
    recipe = write_recipe(tmp_path, teacher)
    corpus = tmp_path / "out" / "corpus"
    corpus.mkdir(parents=True)
    holder = hold_lock(corpus / ".lock")  # another run, in another process, is translating into it
    try:
        with pytest.raises(EncdecError) as refused:
            distill(load_distill_config(recipe))
        assert str(refused.value) == (f"The distillation corpus in {corpus} is being written by another process "
                                      f"(PID {holder.pid}, which holds {corpus}/.lock); wait for it to finish, or "
                                      "stop it, then rerun.")
    finally:
        holder.kill()
        holder.wait(timeout=60)


def test_scores_written_into_a_teacher_folder_do_not_change_its_identity(teacher, tmp_path) -> None:
    """`encdec evaluate --output` and `--card-dataset` write into the teacher's folder: the corpus stays valid."""
    copy = shutil.copytree(teacher, tmp_path / "teacher")
    recipe = write_recipe(tmp_path, copy, student_sections={"training": {"max_steps": 2, "eval_strategy": "no"}})
    distill(load_distill_config(recipe))
    (copy / "test2016-beam5.json").write_text("{}")
    (copy / "README.md").write_text("a new card")
    assert distill(load_distill_config(recipe))["stages"]["corpus"]["distilled"] == TRAIN


def test_the_card_shows_a_teacher_inside_the_working_directory_relative_to_it(tmp_path, monkeypatch) -> None:
    (tmp_path / "runs" / "teacher").mkdir(parents=True)
    (tmp_path / "configs").mkdir()
    monkeypatch.chdir(tmp_path)
    assert shown_path(str(tmp_path / "configs" / ".." / "runs" / "teacher")) == "runs/teacher"
    outside = tmp_path.parent.resolve()
    assert shown_path(str(tmp_path / "..")) == str(outside)  # outside it: the resolved absolute path
