"""Multilingual data: the built-in multilingual date task, multi-way and pair corpora into ``source``/``target``/
``source_lang``/``target_lang`` splits, directions sampled with a temperature, a balanced sample per language, and
``encdec data`` writing the directions as files. The Multi30k test skips where the corpus is absent."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import re
from collections import Counter
from pathlib import Path

import datasets
import pytest

from encdec.data import (
    DATE_LANGUAGES,
    MULTILINGUAL_FEATURES,
    DataSpec,
    balanced_sample,
    direction_probabilities,
    load_builtin_multilingual_dates,
    load_data,
    load_direction_folder,
    load_multiway_corpus,
    load_pair_files,
    load_pair_folders,
    make_date_pairs,
    make_date_splits,
    make_multilingual_date_rows,
    make_multilingual_date_splits,
    parse_directions,
    sample_by_temperature,
    split_by_direction,
    tokenize_dataset,
    write_data_folder,
)
from encdec.data.dates import DATE_RANGE, write_date
from encdec.data.multilingual import rows_dataset
from encdec.errors import EncdecError, InputFileError, OverwriteError
from encdec.training import load_run_config
from encdec_cli import main
from tiny_model_folders import REPO_ROOT

MULTI30K = next((path for path in (Path(os.environ.get("MULTI30K_DIR", REPO_ROOT / "data" / "multi30k")),
                                   REPO_ROOT.parent / "shared" / "data" / "multi30k") if (path / "train.fr").is_file()),
                None)
# Three languages, line i the same sentence in each: a multi-way parallel corpus as Multi30k's, in small
LINES = {"de": ["Ein Hund läuft.", "Zwei Männer lachen.", "Ein Kind spielt.", "Eine Frau liest."],
         "en": ["A dog runs.", "Two men laugh.", "A child plays.", "A woman reads."],
         "fr": ["Un chien court.", "Deux hommes rient.", "Un enfant joue.", "Une femme lit."]}
SPLITS = {"train": "train", "validation": "val", "test": "test2016"}


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the Arrow files that the generator builder writes out of the user's cache."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def multiway_dir(tmp_path: Path) -> Path:
    """train: 4 lines, val: 2, test2016: 1, in de, en and fr."""
    for prefix, size in (("train", 4), ("val", 2), ("test2016", 1)):
        for lang, lines in LINES.items():
            write_lines(tmp_path / "multiway" / f"{prefix}.{lang}", lines[:size])
    return tmp_path / "multiway"


def rows(dataset) -> list[tuple[str, str, str, str]]:
    return list(zip(dataset["source_lang"], dataset["target_lang"], dataset["source"], dataset["target"],
                    strict=True))


# -- the built-in multilingual date task ------------------------------------------------------------------------


@pytest.mark.parametrize(("date", "written"), [
    (dt.date(2021, 3, 3), {"de": "3. März 2021", "fr": "3 mars 2021", "en": "March 3, 2021", "iso": "2021-03-03"}),
    (dt.date(2021, 3, 1), {"de": "1. März 2021", "fr": "1er mars 2021", "en": "March 1, 2021", "iso": "2021-03-01"}),
    (dt.date(1999, 8, 21), {"de": "21. August 1999", "fr": "21 août 1999", "en": "August 21, 1999",
                            "iso": "1999-08-21"}),
    (dt.date(2049, 12, 1), {"de": "1. Dezember 2049", "fr": "1er décembre 2049", "en": "December 1, 2049",
                            "iso": "2049-12-01"}),
    (dt.date(1950, 2, 11), {"de": "11. Februar 1950", "fr": "11 février 1950", "en": "February 11, 1950",
                            "iso": "1950-02-11"}),
])
def test_each_language_writes_a_date_as_its_speakers_do(date: dt.date, written: dict[str, str]) -> None:
    assert {lang: write_date(date, lang) for lang in DATE_LANGUAGES} == written


def read_back() -> dict[str, dict[str, int]]:
    """Each language's written form of every date of the task's range -> the date's ordinal."""
    ordinals = range(DATE_RANGE[0], DATE_RANGE[1] + 1)
    return {lang: {write_date(dt.date.fromordinal(o), lang): o for o in ordinals} for lang in DATE_LANGUAGES}


def test_the_multilingual_date_task_has_twelve_directions_and_the_target_language_decides_the_output() -> None:
    forms = read_back()
    assert all(len(written) == DATE_RANGE[1] - DATE_RANGE[0] + 1 for written in forms.values())  # one form a date
    made = make_multilingual_date_rows(1200, seed=3)
    assert Counter((s, t) for s, t, _, _ in made) == {(s, t): 100 for s in DATE_LANGUAGES for t in DATE_LANGUAGES
                                                        if s != t}
    for source_lang, target_lang, source, target in made:  # the same date, as the target language writes it
        assert target == write_date(dt.date.fromordinal(forms[source_lang][source]), target_lang)
    assert make_multilingual_date_rows(50, seed=3) == made[:50]  # deterministic in the seed
    assert make_multilingual_date_rows(50, seed=4) != made[:50]
    assert {(s, t) for s, t, _, _ in make_multilingual_date_rows(30, "iso-de,fr-en")} == {("iso", "de"), ("fr", "en")}


def test_the_held_out_dates_of_the_multilingual_task_are_never_trained_on() -> None:
    forms = read_back()
    splits = make_multilingual_date_splits(3000, 120, 240, seed=1)
    dates = {split: [forms[s][source] for s, _, source, _ in made] for split, made in splits.items()}
    assert len(set(dates["test"])) == 240 and len(set(dates["validation"])) == 120  # a date of its own each
    assert not set(dates["train"]) & (set(dates["validation"]) | set(dates["test"]))
    assert not set(dates["validation"]) & set(dates["test"])
    assert Counter((s, t) for s, t, _, _ in splits["test"]) == {(s, t): 20 for s in DATE_LANGUAGES
                                                                for t in DATE_LANGUAGES if s != t}
    assert make_multilingual_date_splits(3000, 120, 240, seed=1) == splits
    with pytest.raises(ValueError, match="Could not hold out 40000 distinct dates"):
        make_multilingual_date_splits(10, 20000, 20000)


def test_the_builtin_multilingual_dates_load_as_a_dataset_dict_of_four_columns() -> None:
    loaded = load_builtin_multilingual_dates(train=120, validation=24, test=0, directions="de-iso,iso-fr", seed=2)
    assert list(loaded) == ["train", "validation"]  # a split of size 0 is left out
    assert loaded["train"].features == MULTILINGUAL_FEATURES
    assert rows(loaded["train"]) == make_multilingual_date_splits(120, 24, 0, "de-iso,iso-fr", seed=2)["train"]
    assert Counter(zip(loaded["validation"]["source_lang"], loaded["validation"]["target_lang"], strict=True)) == {
        ("de", "iso"): 12, ("iso", "fr"): 12}
    spec = load_data(DataSpec(languages=["de", "iso"], builtin_train=20, builtin_validation=4, builtin_test=4))
    assert set(zip(spec["test"]["source_lang"], spec["test"]["target_lang"], strict=True)) == {("de", "iso"),
                                                                                              ("iso", "de")}


def test_the_bilingual_date_task_is_unchanged() -> None:
    """Its pairs feed committed fixtures and the demo: the same seeds still give the same pairs, byte for byte."""
    made = json.dumps([make_date_splits(200, 20, 20, seed=0), make_date_pairs(50, seed=7)])
    assert hashlib.sha256(made.encode()).hexdigest() == \
        "53f4f85f9150482a959bc23337cf2e1dd015b786f403cd18cc928e7ea85b2f41"


# -- directions ---------------------------------------------------------------------------------------------------


def test_directions_are_read_from_names_lists_or_all() -> None:
    languages = ["de", "en", "fr"]
    assert parse_directions(None, languages) == [("de", "en"), ("de", "fr"), ("en", "de"), ("en", "fr"),
                                                 ("fr", "de"), ("fr", "en")]
    assert parse_directions("all", languages) == parse_directions(None, languages)
    assert parse_directions("fr-en, de-en", languages) == [("fr", "en"), ("de", "en")]
    assert parse_directions(["de-fr", ("en", "de")], languages) == [("de", "fr"), ("en", "de")]
    assert parse_directions("pt-BR-en", ["pt-BR", "en"]) == [("pt-BR", "en")]  # a code with a hyphen of its own


@pytest.mark.parametrize(("directions", "message"), [
    ("de-cs", "the direction 'de-cs' names the language 'cs', which is not among the languages de, en, fr"),
    ("deen", "the direction 'deen' is not SOURCE-TARGET"),
    ("de-de", "the direction de-de translates 'de' into itself"),
    ("de-en,de-en", "the direction de-en is named twice"),
    ([], "no directions; name at least one"),
])
def test_a_wrong_direction_is_one_line_naming_it_and_the_languages(directions, message: str) -> None:
    with pytest.raises(EncdecError, match=re.escape(f"data.directions: {message}")) as raised:
        parse_directions(directions, ["de", "en", "fr"], "data.directions")
    assert "\n" not in str(raised.value)


# -- multi-way, pair and direction folders --------------------------------------------------------------------------


def test_a_multiway_folder_loads_as_every_direction_or_the_chosen_ones(multiway_dir: Path) -> None:
    loaded = load_multiway_corpus(multiway_dir)
    assert {split: len(data) for split, data in loaded.items()} == {"train": 24, "validation": 12, "test": 6}
    assert list(split_by_direction(loaded["train"])) == parse_directions(None, ["de", "en", "fr"])
    fr_de = split_by_direction(loaded["validation"])[("fr", "de")]
    assert rows(fr_de) == [("fr", "de", LINES["fr"][i], LINES["de"][i]) for i in range(2)]  # line i with line i
    chosen = load_multiway_corpus(multiway_dir, directions="de-en,fr-en")
    assert rows(chosen["train"]) == [("de", "en", d, e) for d, e in zip(LINES["de"], LINES["en"], strict=True)] + \
        [("fr", "en", f, e) for f, e in zip(LINES["fr"], LINES["en"], strict=True)]
    two = load_data(DataSpec(format="text", data_dir=str(multiway_dir), languages="de,fr"))
    assert set(zip(two["test"]["source_lang"], two["test"]["target_lang"], strict=True)) == {("de", "fr"), ("fr", "de")}


def test_a_multiway_folder_with_a_missing_or_misaligned_file_is_refused_naming_it(multiway_dir: Path) -> None:
    (multiway_dir / "val.fr").unlink()
    with pytest.raises(InputFileError, match=re.escape(f"The data folder {multiway_dir} has no file val.fr for the "
                                                       "validation split of the language 'fr'; add it, or leave")):
        load_multiway_corpus(multiway_dir)
    assert len(load_multiway_corpus(multiway_dir, directions=["de-en"])["validation"]) == 2  # fr is not needed
    write_lines(multiway_dir / "val.fr", LINES["fr"][:3])
    with pytest.raises(InputFileError, match=re.escape(f"{multiway_dir / 'val.de'} has 2 lines but "
                                                       f"{multiway_dir / 'val.fr'} has 3")):
        load_multiway_corpus(multiway_dir)
    with pytest.raises(EncdecError, match="the direction 'de-cs' names the language 'cs', which is not among the "
                                          "languages de, en, fr"):
        load_multiway_corpus(multiway_dir, directions="de-cs")
    with pytest.raises(InputFileError, match=re.escape(f"The data folder {multiway_dir} has no files training.LANG, "
                                                       "dev.LANG")):
        load_multiway_corpus(multiway_dir, splits={"train": "training", "validation": "dev"})
    write_lines(multiway_dir / "val.fr", [])
    with pytest.raises(InputFileError, match=re.escape(f"The fr file {multiway_dir / 'val.fr'} is empty.")):
        load_multiway_corpus(multiway_dir)


def test_pair_folders_load_one_direction_each(tmp_path: Path) -> None:
    for direction in ("de-en", "fr-en"):
        source, target = direction.split("-")
        for prefix, size in (("train", 3), ("val", 1), ("test2016", 2)):
            write_lines(tmp_path / direction / f"{prefix}.{source}", LINES[source][:size])
            write_lines(tmp_path / direction / f"{prefix}.{target}", LINES[target][:size])
    spec = DataSpec(format="text", pair_dirs={"fr-en": str(tmp_path / "fr-en"), "de-en": str(tmp_path / "de-en")})
    loaded = load_data(spec)
    assert rows(loaded["test"]) == [("fr", "en", LINES["fr"][i], LINES["en"][i]) for i in range(2)] + \
        [("de", "en", LINES["de"][i], LINES["en"][i]) for i in range(2)]
    named = {d: {split: [str(tmp_path / d / f"{prefix}.{lang}") for lang in d.split("-")]
                 for split, prefix in SPLITS.items()} for d in ("fr-en", "de-en")}
    assert {split: rows(data) for split, data in load_pair_files(named).items()} == \
        {split: rows(data) for split, data in loaded.items()}  # the same files named one by one
    named["de-en"].pop("validation")
    with pytest.raises(EncdecError, match="The pair files of de-en must be .* for each of the splits train, "
                                          "validation, test"):
        load_pair_files(named)
    with pytest.raises(OverwriteError, match=re.escape(f"holds the input {tmp_path / 'de-en'}")):
        write_data_folder(spec, tmp_path / "de-en", overwrite=True)
    config = tmp_path / "configs" / "run.yaml"  # a config's pair folders are relative to the config's own folder
    config.parent.mkdir()
    config.write_text("model: m.json\ndata: {format: text, pair_dirs: {de-en: ../de-en}}\n", encoding="utf-8")
    assert load_run_config(config).data.pair_dirs == {"de-en": str(tmp_path / "de-en")}
    (tmp_path / "de-en" / "val.en").unlink()
    with pytest.raises(InputFileError, match=re.escape(f"The en file {tmp_path / 'de-en' / 'val.en'} does not "
                                                       "exist")):
        load_pair_folders({"de-en": tmp_path / "de-en"})


@pytest.mark.parametrize(("settings", "message"), [
    ({"format": "csv", "files": {"train": "a.csv"}, "languages": ["de", "en"]}, "take data.format builtin_dates or"),
    ({"languages": ["de", "iso"], "source_lang": "de"}, "data.source_lang and data.target_lang choose one pair"),
    ({"format": "text", "languages": ["de", "en"]}, "needs exactly one of data.data_dir"),
    ({"format": "text", "data_dir": "x", "pair_dirs": {"de-en": "y"}}, "needs exactly one of data.data_dir"),
    ({"format": "text", "pair_dirs": {"de-en": "y"}, "directions": "de-en"}, "drop data.languages and"),
    ({"format": "text", "files": {"train": ["a", "b"]}, "directions": "de-en"}, "data.files takes one pair"),
])
def test_a_wrong_multilingual_data_section_is_one_line(settings: dict, message: str) -> None:
    with pytest.raises(EncdecError, match=re.escape(message)):
        DataSpec(**settings)


def test_the_date_task_refuses_a_language_it_lacks_naming_its_own() -> None:
    with pytest.raises(EncdecError, match="the multilingual date task has no language 'cs'; its languages are de, "
                                          "en, fr, iso"):
        load_data(DataSpec(languages=["de", "cs"]))


def test_multilingual_splits_are_not_tokenized_without_their_language_tokens() -> None:
    """Tokenized as source/target alone, a model could not know which language to write: a tokenizer without
    language tokens is refused, not trained on (tests/test_multilingual_training.py tokenizes with them)."""
    loaded = load_builtin_multilingual_dates(12, 0, 0)
    with pytest.raises(EncdecError, match=r"several directions \(languages de, en, fr, iso\), and the tokenizer is "
                                          r"bilingual"):
        tokenize_dataset(loaded, tokenizer=None, use_cache=False)


# -- temperature sampling and the tokenizer's sample ----------------------------------------------------------------


def test_direction_probabilities_follow_the_temperature() -> None:
    counts = {("de", "en"): 900, ("fr", "en"): 100}
    assert direction_probabilities(counts, 1) == pytest.approx({("de", "en"): 0.9, ("fr", "en"): 0.1})
    assert direction_probabilities(counts, math.inf) == {("de", "en"): 0.5, ("fr", "en"): 0.5}
    at_five = direction_probabilities(counts, 5)
    assert at_five[("fr", "en")] == pytest.approx(0.1 ** 0.2 / (0.1 ** 0.2 + 0.9 ** 0.2))
    for wrong, message in ((0, "temperature must be > 0"), (-1, "temperature must be > 0")):
        with pytest.raises(EncdecError, match=message):
            direction_probabilities(counts, wrong)
    with pytest.raises(EncdecError, match="no pairs: fr-en"):
        direction_probabilities({("de", "en"): 3, ("fr", "en"): 0})


def test_a_temperature_sample_draws_directions_as_computed_and_upsamples_a_small_one() -> None:
    made = [("de", "en", f"de {i}", f"en {i}") for i in range(900)] + \
        [("fr", "en", f"fr {i}", f"en {i}") for i in range(100)]
    data = rows_dataset(made)
    sample = sample_by_temperature(data, temperature=5, seed=0)
    counts = Counter(zip(sample["source_lang"], sample["target_lang"], strict=True))
    total = len(sample)
    for direction, p in direction_probabilities({("de", "en"): 900, ("fr", "en"): 100}, 5).items():
        # within 4 standard deviations of a multinomial draw of this size (a fixed seed: the same sample every run)
        assert abs(counts[direction] - total * p) <= 4 * math.sqrt(total * p * (1 - p)), (direction, counts, total)
    assert counts[("fr", "en")] > 3 * 100  # every fr-en pair seen about 5 times: up-sampled ...
    assert counts[("fr", "en")] / total > 0.3 > 100 / 1000  # ... far above its share of the data
    assert set(sample["source"]) == set(data["source"])  # all_exhausted: every pair is drawn
    assert sample_by_temperature(data, temperature=5, seed=0)["source"] == sample["source"]  # deterministic
    proportional = Counter(sample_by_temperature(data, temperature=1, seed=0)["source_lang"])
    assert proportional["fr"] / sum(proportional.values()) < 0.15


def test_a_balanced_sample_has_as_many_distinct_sentences_of_every_language() -> None:
    """en is the target of de-en and fr-en: its shared sentences are counted once."""
    made = [("de", "en", f"de {i}", f"en {i}") for i in range(6)] + \
        [("fr", "en", f"fr {i}", f"en {i}") for i in range(4)] + [("en", "fr", "en 5", "fr 0")]
    data = rows_dataset(made)
    sample = balanced_sample(data, seed=1)
    assert list(sample) == ["de", "en", "fr"] and {len(texts) for texts in sample.values()} == {4}
    assert all(len(set(texts)) == 4 and all(text.startswith(lang) for text in texts) for lang, texts in sample.items())
    assert sample["fr"] == ["fr 0", "fr 1", "fr 2", "fr 3"]  # fr has 4 distinct sentences: all of them
    assert balanced_sample(data, seed=1) == sample  # deterministic
    assert {len(texts) for texts in balanced_sample(data, per_language=2).values()} == {2}


# -- encdec data: the directions as files -----------------------------------------------------------------------


def test_encdec_data_writes_each_direction_as_files_that_load_back(tmp_path: Path, capsys) -> None:
    out = tmp_path / "dates"
    assert main(["data", str(REPO_ROOT / "configs" / "demo-multilingual.yaml"), "--output", str(out),
                 "--data.languages", "[de, fr, iso]", "--data.directions", "de-fr,iso-de", "--data.builtin_train",
                 "30", "--data.builtin_validation", "4", "--data.builtin_test", "6"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == f"train.de-fr: 15 lines in {out / 'train.de-fr.de'}, {out / 'train.de-fr.fr'}"
    assert len(printed) == 6
    assert sorted(path.name for path in out.iterdir()) == sorted(
        f"{split}.{d}.{lang}" for split in ("train", "validation", "test") for d in ("de-fr", "iso-de")
        for lang in d.split("-"))
    expected = load_builtin_multilingual_dates(30, 4, 6, "de-fr,iso-de")
    assert (out / "test.iso-de.de").read_text(encoding="utf-8").splitlines() == \
        split_by_direction(expected["test"])[("iso", "de")]["target"]
    back = load_direction_folder(out)
    for split in expected:  # the same rows, grouped by direction
        assert sorted(rows(back[split])) == sorted(rows(expected[split]))
    assert sorted(rows(load_data(DataSpec(format="text", data_dir=str(out), directions="iso-de"))["train"])) == \
        sorted(rows(split_by_direction(expected["train"])[("iso", "de")]))
    bilingual = write_data_folder(DataSpec(builtin_train=5, builtin_validation=0, builtin_test=2), tmp_path / "bi")
    assert bilingual == {"train": 5, "test": 2}  # bilingual data: {split}.src and {split}.tgt as before
    assert sorted(path.name for path in (tmp_path / "bi").iterdir()) == ["test.src", "test.tgt", "train.src",
                                                                        "train.tgt"]


@pytest.mark.skipif(MULTI30K is None, reason="Multi30k's four languages are absent (set MULTI30K_DIR)")
def test_multi30k_loads_as_twelve_directions() -> None:
    loaded = load_data(DataSpec(format="text", data_dir=str(MULTI30K), directions="all"))
    sizes = {"train": 29000, "validation": 1014, "test": 1000}
    for split, data in loaded.items():
        parts = split_by_direction(data)
        assert len(parts) == 12 and {len(part) for part in parts.values()} == {sizes[split]}
    lines = {lang: (MULTI30K / f"val.{lang}").read_text(encoding="utf-8").splitlines() for lang in ("cs", "fr")}
    cs_fr = split_by_direction(loaded["validation"])[("cs", "fr")]
    assert cs_fr[1013] == {"source": lines["cs"][1013], "target": lines["fr"][1013], "source_lang": "cs",
                           "target_lang": "fr"}
