"""``encdec train`` on several languages: a run config that names languages and directions trains one model with a
joint tokenizer (a token per language), token ids that carry each row's language tokens, directions sampled with a
temperature, validation scored per direction and the best checkpoint chosen on their average; the folder records its
languages (config and card) and translates each direction with ``generate(forced_bos_token_id=...)``.

The data is the built-in multilingual date task (German, English and ISO 8601 dates, three directions), with the
demo's Transformer for a few hundred steps."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest
from datasets import Dataset, DatasetDict
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from encdec.cards import card_languages, model_languages, read_card
from encdec.data import DataSpec, load_data, split_by_direction, tokenize_dataset
from encdec.errors import EncdecError
from encdec.folders import check_model_folder
from encdec.tokenization import train_tokenizer
from encdec.training import CHECKPOINT_SUBDIR, TOKENIZER_SUBDIR, load_run_config, train
from encdec.training.run import first_rows
from test_distributed import launch
from tiny_model_folders import REPO_ROOT, write_tiny_run_config

LANGUAGES = ["de", "en", "iso"]
DIRECTIONS = ["de-iso", "iso-de", "iso-en"]
# what a date looks like in each of the task's languages: "3. März 2021", "March 3, 2021", "2021-03-03"
FORMS = {"de": r"\d{1,2}\. \w+ \d{4}", "en": r"\w+ \d{1,2}, \d{4}", "iso": r"\d{4}-\d{2}-\d{2}"}
DEMO_MODEL = json.loads((REPO_ROOT / "configs" / "models" / "transformer-demo.json").read_text())


def multilingual_config(root: Path, output_dir: Path, max_steps: int = 300, **training) -> Path:
    """The demo's run config on three directions of the multilingual date task, evaluated every 100 steps."""
    sections = {
        "data": {"format": "builtin_dates", "languages": LANGUAGES, "directions": DIRECTIONS,
                 "builtin_train": 3000, "builtin_validation": 30, "builtin_test": 30},
        "training": {"output_dir": str(output_dir), "max_steps": max_steps, "eval_steps": 100, "save_total_limit": 3,
                     "per_device_eval_batch_size": 16, "logging_steps": 100, **training},
    }
    return write_tiny_run_config(root / "multilingual.yaml", "transformer", DEMO_MODEL, sections)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("multilingual-run")
    results = train(load_run_config(multilingual_config(root, root / "model")))
    return root / "model", results


def test_the_folder_records_its_languages_and_translates_every_direction(trained) -> None:
    folder, _ = trained
    check_model_folder(folder)  # the multilingual tokenizer's code file is there too
    assert json.loads((folder / "config.json").read_text())["languages"] == LANGUAGES
    assert card_languages(read_card(folder)) == tuple(LANGUAGES) == model_languages(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder)
    data = load_data(DataSpec(languages=LANGUAGES, directions=DIRECTIONS, builtin_train=1, builtin_validation=1,
                              builtin_test=60, seed=1))["test"]
    parts = split_by_direction(data)
    for direction in DIRECTIONS:
        source_lang, target_lang = direction.split("-")
        tokenizer.src_lang = source_lang
        batch = tokenizer(list(parts[source_lang, target_lang]["source"]), return_tensors="pt", padding=True)
        assert (batch["input_ids"][:, 0] == tokenizer.get_lang_id(source_lang)).all()
        output = model.generate(**batch, forced_bos_token_id=tokenizer.get_lang_id(target_lang), max_new_tokens=12)
        assert (output[:, 1] == tokenizer.get_lang_id(target_lang)).all()
        translations = tokenizer.batch_decode(output, skip_special_tokens=True)
        in_form = [re.fullmatch(FORMS[target_lang], text.strip()) is not None for text in translations]
        assert np.mean(in_form) >= 0.9, (direction, translations)  # the forced token decides the output's language


def test_validation_is_scored_per_direction_and_the_best_checkpoint_on_their_average(trained) -> None:
    folder, results = trained
    recorded = json.loads((folder / "eval_results.json").read_text())
    for split in ("validation", "test"):
        scores = recorded[split]
        for metric in ("bleu", "chrf", "loss"):
            per_direction = [scores[f"{direction}_{metric}"] for direction in DIRECTIONS]
            assert scores[metric] == pytest.approx(np.mean(per_direction), abs=1e-4)
    checkpoints = sorted((folder / CHECKPOINT_SUBDIR).glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))
    state = json.loads((checkpoints[-1] / "trainer_state.json").read_text())
    evaluations = [entry for entry in state["log_history"] if "eval_bleu" in entry]
    assert [entry["step"] for entry in evaluations] == [100, 200, 300]
    assert evaluations[-1]["eval_bleu"] > evaluations[0]["eval_bleu"] + 5  # learned, not only scored
    for entry in evaluations:
        assert entry["eval_bleu"] == pytest.approx(np.mean([entry[f"eval_{d}_bleu"] for d in DIRECTIONS]), abs=1e-4)
    best = max(evaluations, key=lambda entry: entry["eval_bleu"])
    assert state["best_metric"] == best["eval_bleu"]
    assert state["best_model_checkpoint"].endswith(f"checkpoint-{best['step']}")
    assert results["validation"]["bleu"] == pytest.approx(best["eval_bleu"])  # the final model is that checkpoint


def test_token_ids_carry_each_rows_language_tokens(trained) -> None:
    folder, _ = trained
    tokenizer = AutoTokenizer.from_pretrained(folder / TOKENIZER_SUBDIR)
    rows = {"source": ["3. März 2021", "2021-03-03", "2021-03-04"], "target": ["2021-03-03", "3. März 2021",
                                                                               "March 4, 2021"],
            "source_lang": ["de", "iso", "iso"], "target_lang": ["iso", "de", "en"]}
    tokenized, counts = tokenize_dataset(DatasetDict(test=Dataset.from_dict(rows)), tokenizer, use_cache=False)
    assert counts["test"]["kept"] == 3
    for i, row in enumerate(tokenized["test"]):
        tokenizer.src_lang, tokenizer.tgt_lang = rows["source_lang"][i], rows["target_lang"][i]
        expected = tokenizer(rows["source"][i], text_target=rows["target"][i])
        assert row["input_ids"] == expected["input_ids"] and row["labels"] == expected["labels"]
        assert row["input_ids"][0] == tokenizer.get_lang_id(rows["source_lang"][i])
        assert row["labels"][0] == tokenizer.get_lang_id(rows["target_lang"][i])
    with pytest.raises(EncdecError, match="the tokenizer lacks"):
        tokenize_dataset(DatasetDict(test=Dataset.from_dict({**rows, "target_lang": ["fr", "de", "en"]})), tokenizer,
                         use_cache=False)


def test_a_run_resumed_after_a_stop_ends_as_the_uninterrupted_run(trained, tmp_path) -> None:
    """Stopped after its step-100 checkpoint (a run of 100 steps), then resumed to step 200: the weights and the
    per-direction validation scores of the run that went through, at that step."""
    folder, _ = trained
    stopped = tmp_path / "stopped"
    config = multilingual_config(tmp_path, stopped)
    train(load_run_config(config, ["--training.max_steps", "100"]))
    resumed = train(load_run_config(config, ["--training.resume_from_checkpoint", "true", "--training.max_steps",
                                             "200"]))
    assert resumed["train"]["resumed_at_step"] == 100
    last = Path(CHECKPOINT_SUBDIR) / "checkpoint-200"
    assert (stopped / last / "model.safetensors").read_bytes() == (folder / last / "model.safetensors").read_bytes()

    def scores(run: Path) -> list[dict]:
        history = json.loads((run / last / "trainer_state.json").read_text())["log_history"]
        return [{key: value for key, value in entry.items() if "runtime" not in key and "per_second" not in key}
                for entry in history if "eval_bleu" in entry]

    assert scores(stopped) == scores(folder) and len(scores(folder)) == 2


def test_bad_multilingual_configs_are_refused_in_one_line(trained, tmp_path) -> None:
    bilingual = train_tokenizer(["3. März 2021", "2021-03-03", "March 3, 2021"] * 5, vocab_size=60)
    bilingual.save_pretrained(tmp_path / "bilingual")
    config = multilingual_config(tmp_path, tmp_path / "out")
    with pytest.raises(EncdecError, match=r"^tokenizer.path .*bilingual.* has no language token for de, en, iso "):
        train(load_run_config(config, ["--tokenizer.path", str(tmp_path / "bilingual")]))
    bilingual_run = write_tiny_run_config(tmp_path / "bilingual.yaml", "transformer", DEMO_MODEL, {
        "training": {"output_dir": str(tmp_path / "out")}})
    with pytest.raises(EncdecError, match=r"^tokenizer.path .* is multilingual \(languages de, en, iso\) and the data "
                                          "has one pair"):
        train(load_run_config(bilingual_run, ["--tokenizer.path", str(trained[0] / TOKENIZER_SUBDIR)]))
    with pytest.raises(EncdecError, match="^data.directions: the direction 'de-fr' names the language 'fr', which is "
                                          "not among the languages de, en, iso"):
        train(load_run_config(config, ["--data.directions", "de-iso,de-fr"]))
    with pytest.raises(EncdecError, match=r"^data.temperature must be > 0"):
        load_run_config(config, ["--data.temperature", "0"])
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_two_processes_train_a_multilingual_model_with_token_batches(tmp_path) -> None:
    """torchrun, two CPU processes, batches by tokens: every process evaluates the same directions (a direction
    missing in one would hang the other), and the scores per direction and their average come back."""
    out = tmp_path / "ddp"
    config = multilingual_config(tmp_path, out, max_steps=6, eval_steps=3, max_tokens=256,
                                 per_device_eval_batch_size=4)
    launch(["encdec", "train", str(config)])
    recorded = json.loads((out / "eval_results.json").read_text())["validation"]
    assert recorded["bleu"] == pytest.approx(np.mean([recorded[f"{d}_bleu"] for d in DIRECTIONS]), abs=1e-4)
    assert json.loads((out / "config.json").read_text())["languages"] == LANGUAGES


def test_the_multilingual_recipe_names_every_direction_of_the_date_task() -> None:
    config = load_run_config(REPO_ROOT / "configs" / "demo-multilingual.yaml")
    assert config.data.languages == ["de", "en", "fr", "iso"] and config.data.temperature == 5
    train = load_data(dataclasses.replace(config.data, builtin_train=120, builtin_validation=0, builtin_test=0))
    assert len(split_by_direction(train["train"])) == 12


@pytest.mark.parametrize(("temperature", "small_share"), [(1, 0.1), (5, 0.39)])
def test_a_small_direction_is_drawn_by_the_temperature(tmp_path, temperature: float, small_share: float) -> None:
    """Pair folders of 180 de-en and 20 fr-en pairs, drawn until every pair was drawn: T=1 draws fr-en 10% of the
    time, about the data as it is (200 rows); T=5 39% (p ~ share^(1/T)), about 180 / 0.61 = 295 rows, its pairs
    several times each."""
    for (source, target), count in {("de", "en"): 180, ("fr", "en"): 20}.items():
        folder = tmp_path / f"{source}-{target}"
        folder.mkdir()
        (folder / f"train.{source}").write_text("".join(f"{source} {i}\n" for i in range(count)))
        (folder / f"train.{target}").write_text("".join(f"{target} {i}\n" for i in range(count)))
    config = write_tiny_run_config(tmp_path / "pairs.yaml", "transformer", DEMO_MODEL, {
        "data": {"format": "text", "pair_dirs": {"de-en": str(tmp_path / "de-en"), "fr-en": str(tmp_path / "fr-en")},
                 "splits": {"train": "train"}, "temperature": temperature},
        "tokenizer": {"vocab_size": 60, "min_frequency": 1},
        "training": {"output_dir": str(tmp_path / "out"), "max_steps": 1, "eval_strategy": "no"}})
    results = train(load_run_config(config))
    drawn = results["data"]["train"]["total"]
    assert 180 / (1 - small_share) * 0.9 < drawn < 180 / (1 - small_share) * 1.15, drawn
    assert json.loads((tmp_path / "out" / "config.json").read_text())["languages"] == ["de", "en", "fr"]


def test_a_models_languages_are_read_from_its_config_first(tmp_path) -> None:
    """``model_languages``: a multilingual model's ``config.json`` decides over its card; a bilingual one's card."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "transformer_seq2seq", "languages": LANGUAGES}))
    assert model_languages(tmp_path) == tuple(LANGUAGES)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "transformer_seq2seq"}))
    assert model_languages(tmp_path) == ()


def test_eval_max_samples_keeps_the_first_rows_of_every_direction() -> None:
    """``training.eval_max_samples`` on a multilingual validation split keeps the first N rows of each direction
    (in their order), so a direction listed late is still scored; a bilingual split keeps its first N rows."""
    directions = [("de", "en")] * 5 + [("en", "fr")] * 3 + [("de", "en"), ("fr", "de")]
    split = Dataset.from_dict({"source": [str(i) for i in range(10)], "target": [str(i) for i in range(10)],
                               "source_lang": [s for s, _ in directions], "target_lang": [t for _, t in directions]})
    kept = first_rows(split, 2)
    assert kept["source"] == ["0", "1", "5", "6", "9"]
    assert {(s, t) for s, t in zip(kept["source_lang"], kept["target_lang"], strict=True)} == set(directions)
    assert first_rows(split.remove_columns(["source_lang", "target_lang"]), 3)["source"] == ["0", "1", "2"]
