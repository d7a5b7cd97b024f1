"""Loading parallel text from every supported source into ``source``/``target`` splits, its errors, and turning
it into padded training batches."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import datasets
import pytest
import torch
from datasets import Dataset, DatasetDict, Features, Translation
from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerFast

from encdec import TransformerSeq2SeqForConditionalGeneration
from encdec.data import (
    TEXT_FEATURES,
    DataSpec,
    format_report,
    load_builtin_dates,
    load_data,
    load_delimited,
    load_hub_dataset,
    load_jsonl,
    load_parallel_corpus,
    load_text_pair,
    make_date_splits,
    tokenize_dataset,
    write_aligned_splits,
    write_data_folder,
)
from encdec.errors import EncdecError, InputFileError, OverwriteError
from encdec.tokenization import special_token_ids, train_tokenizer

MULTI30K = Path(os.environ.get("MULTI30K_DIR", Path(__file__).resolve().parents[1] / "data" / "multi30k"))

PAIRS = [("Ein Hund läuft.", "A dog runs."), ("Zwei Männer, \"lachend\".", "Two men, \"laughing\"."),
         ("NA", "12")]


@pytest.fixture(autouse=True)
def _datasets_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the Arrow files that ``datasets.load_dataset`` writes out of the user's cache."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_cache")


def escaped(*parts: object) -> str:
    """A regex matching the ``parts`` in order, anything between them."""
    return ".*".join(re.escape(str(part)) for part in parts)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def write_lines(path: Path, lines: list[str]) -> Path:
    return write(path, "".join(f"{line}\n" for line in lines))


def rows(dataset: Dataset) -> list[tuple[str, str]]:
    return list(zip(dataset["source"], dataset["target"], strict=True))


def assert_source_target(loaded: DatasetDict) -> None:
    for split in loaded.values():
        assert split.features == TEXT_FEATURES


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    """A Multi30k-shaped folder: {train,val,test2016}.{de,en}."""
    folder = tmp_path / "corpus"
    folder.mkdir()
    for prefix, n in (("train", 3), ("val", 2), ("test2016", 1)):
        write_lines(folder / f"{prefix}.de", [s for s, _ in PAIRS[:n]])
        write_lines(folder / f"{prefix}.en", [t for _, t in PAIRS[:n]])
    write(folder / "README.md", "not a language\n")
    return folder


# -- built-in task ------------------------------------------------------------------------------------------------


def test_builtin_dates_matches_make_date_splits() -> None:
    loaded = load_builtin_dates(train=30, validation=5, test=0, seed=3)
    expected = make_date_splits(30, 5, 0, seed=3)
    assert list(loaded) == ["train", "validation"]  # the empty test split is left out
    assert rows(loaded["train"]) == expected["train"]
    assert rows(loaded["validation"]) == expected["validation"]
    assert_source_target(loaded)


# -- plain text ---------------------------------------------------------------------------------------------------


def test_text_pair_keeps_lines_aligned(tmp_path: Path) -> None:
    # CRLF line ends and a BOM go; a stray CR or U+2028 inside a sentence does not split it
    source = write(tmp_path / "s.txt", "\ufeffeins\r\nzwei\rdrei\r\nvier\u2028fünf\r\n")
    target = write(tmp_path / "t.txt", "one\ntwo three\nfour five")  # no final line end
    loaded = load_text_pair(source, target, split="validation")
    assert rows(loaded["validation"]) == [("eins", "one"), ("zwei\rdrei", "two three"), ("vier\u2028fünf", "four five")]
    assert_source_target(loaded)


def test_parallel_corpus_folder(corpus_dir: Path) -> None:
    loaded = load_parallel_corpus(corpus_dir, "de", "en")
    assert {split: len(data) for split, data in loaded.items()} == {"train": 3, "validation": 2, "test": 1}
    assert rows(loaded["train"]) == PAIRS
    assert_source_target(loaded)
    reverse = load_parallel_corpus(corpus_dir, source_lang=None, target_lang="de", splits={"train": "val"})
    assert rows(reverse["train"]) == [(t, s) for s, t in PAIRS[:2]]  # the source inferred as the other language


def test_parallel_corpus_unknown_language_lists_the_languages(corpus_dir: Path) -> None:
    with pytest.raises(EncdecError, match=escaped(corpus_dir, "no language 'fr'", "found are: de, en.")):
        load_parallel_corpus(corpus_dir, "fr", "en")
    with pytest.raises(EncdecError, match=escaped(corpus_dir, "has the languages de, en: set both source_lang")):
        load_parallel_corpus(corpus_dir, None, None)
    with pytest.raises(EncdecError, match="both 'en'; choose two of de, en"):
        load_parallel_corpus(corpus_dir, "en", "en")
    with pytest.raises(InputFileError, match=escaped(corpus_dir / "missing", "does not exist")):
        load_parallel_corpus(corpus_dir / "missing")


def test_parallel_corpus_file_errors(corpus_dir: Path) -> None:
    (corpus_dir / "test2016.en").unlink()
    with pytest.raises(InputFileError, match=escaped(corpus_dir / "test2016.en", "does not exist")):
        load_parallel_corpus(corpus_dir)
    write(corpus_dir / "test2016.en", "\n \n")
    with pytest.raises(InputFileError, match=escaped(corpus_dir / "test2016.en", "is empty")):
        load_parallel_corpus(corpus_dir)
    write_lines(corpus_dir / "val.en", ["one", "two", "three"])
    with pytest.raises(InputFileError, match=escaped(corpus_dir / "val.de", "has 2 lines", corpus_dir / "val.en",
                                                     "has 3")):
        load_parallel_corpus(corpus_dir)
    (corpus_dir / "train.de").write_bytes("Männer\n".encode("latin-1"))
    with pytest.raises(InputFileError, match=escaped(corpus_dir / "train.de", "is not UTF-8")):
        load_parallel_corpus(corpus_dir)


@pytest.mark.skipif(not MULTI30K.is_dir(), reason=f"Multi30k is not at {MULTI30K}")
def test_multi30k_folder() -> None:
    loaded = load_data(DataSpec(format="text", data_dir=str(MULTI30K), source_lang="de", target_lang="en"))
    assert {split: len(data) for split, data in loaded.items()} == {"train": 29000, "validation": 1014, "test": 1000}
    assert_source_target(loaded)


# -- CSV and TSV --------------------------------------------------------------------------------------------------


def test_csv_with_default_and_named_columns(tmp_path: Path) -> None:
    csv_file = write(tmp_path / "train.csv",
                     'id,source,target\n1,"Hallo, Welt",Hello\n2,NA,null\n3,007,"Er sagt ""ja"""\n')
    loaded = load_delimited(csv_file)
    assert rows(loaded["train"]) == [("Hallo, Welt", "Hello"), ("NA", "null"), ("007", 'Er sagt "ja"')]  # all text
    assert_source_target(loaded)
    named = write(tmp_path / "val.csv", "en,de\nHello,Hallo\n")
    loaded = load_delimited({"validation": named}, source_column="de", target_column="en")
    assert rows(loaded["validation"]) == [("Hallo", "Hello")]


def test_tsv_keeps_quotes(tmp_path: Path) -> None:
    tsv = write(tmp_path / "pairs.tsv", 'source\ttarget\n"Hallo" sagt er\t"Hello" he says\n„Ja“\t"Yes\n')
    loaded = load_delimited({"train": tsv, "test": tsv})
    assert rows(loaded["test"]) == [('"Hallo" sagt er', '"Hello" he says'), ("„Ja“", '"Yes')]


def test_delimited_errors(tmp_path: Path) -> None:
    no_header = write(tmp_path / "a.csv", "Hallo,Hello\nWelt,World\n")
    with pytest.raises(InputFileError, match=escaped(no_header, "no column 'source', 'target'",
                                                     "columns ['Hallo', 'Hello']", "must be a header")):
        load_delimited(no_header)
    with pytest.raises(InputFileError, match=r"no column 'fr'.*\['Hallo', 'Hello'\]"):
        load_delimited(no_header, source_column="Hallo", target_column="fr")
    header_only = write(tmp_path / "b.csv", "source,target\n")
    with pytest.raises(InputFileError, match=escaped(header_only, "has no examples")):
        load_delimited(header_only)
    empty = write(tmp_path / "c.csv", "")
    with pytest.raises(InputFileError, match=escaped(empty, "is empty")):
        load_delimited(empty)
    too_many = write(tmp_path / "d.tsv", "source\ttarget\na\tb\nc\td\te\n")  # a tab inside a sentence
    with pytest.raises(InputFileError, match=escaped(too_many, "Expected 2 fields in line 3, saw 3")):
        load_delimited(too_many)
    too_few = write(tmp_path / "e.tsv", "source\ttarget\na\tb\nc\n\td\n")
    with pytest.raises(InputFileError, match=escaped(too_few, "has 1 rows with no 'source' value")):
        load_delimited(too_few)
    with pytest.raises(InputFileError, match=escaped(too_few, "has 1 rows with no 'target' value")):
        load_delimited({"train": too_few}, source_column="target", target_column="source")
    with pytest.raises(EncdecError, match=r"Cannot tell the delimiter.*\*\.csv or \*\.tsv"):
        load_delimited(write(tmp_path / "f.txt", "source,target\na,b\n"))


# -- JSON Lines ---------------------------------------------------------------------------------------------------


def write_jsonl(path: Path, records: list[dict]) -> Path:
    return write(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def test_jsonl_source_target_form(tmp_path: Path) -> None:
    file = write_jsonl(tmp_path / "a.jsonl", [{"source": s, "target": t, "id": i} for i, (s, t) in enumerate(PAIRS)])
    loaded = load_jsonl(file)
    assert rows(loaded["train"]) == PAIRS
    assert_source_target(loaded)


def test_jsonl_translation_form(tmp_path: Path) -> None:
    file = write_jsonl(tmp_path / "t.jsonl", [{"translation": {"de": s, "en": t}} for s, t in PAIRS])
    assert rows(load_jsonl(file, "de", "en")["train"]) == PAIRS
    assert rows(load_jsonl({"test": file}, source_lang="en")["test"]) == [(t, s) for s, t in PAIRS]  # en -> de
    with pytest.raises(EncdecError, match=escaped(file, "no language 'fr'", "found are: de, en.")):
        load_jsonl(file, "fr", "en")
    with pytest.raises(EncdecError, match=escaped(file, "has the languages de, en: set both")):
        load_jsonl(file)
    three = write_jsonl(tmp_path / "three.jsonl", [{"translation": {"de": "a", "en": "b", "fr": "c"}}])
    with pytest.raises(EncdecError, match="has the languages de, en, fr: set both"):
        load_jsonl(three, target_lang="en")


def test_jsonl_keeps_date_like_text_as_written(tmp_path: Path) -> None:
    """PyArrow's JSON reader takes fields whose every value looks like a date for timestamps; the text read back
    must be the text written (not "1964-03-04 00:00:00"), in both forms, with other fields kept."""
    pairs = [("4 March 1964", "1964-03-04"), ("1 Jan 2001", "2001-01-01"), ("12.10.99", "1999-10-12")]
    flat = write_jsonl(tmp_path / "d.jsonl", [{"source": s, "target": t, "id": i} for i, (s, t) in enumerate(pairs)])
    assert rows(load_jsonl(flat)["train"]) == pairs
    nested = write_jsonl(tmp_path / "n.jsonl", [{"translation": {"de": s, "iso": t}} for s, t in pairs])
    assert rows(load_jsonl(nested, "de", "iso")["train"]) == pairs
    assert rows(load_jsonl(nested, "iso", "de")["train"]) == [(t, s) for s, t in pairs]


def test_jsonl_errors(tmp_path: Path) -> None:
    missing_target = write_jsonl(tmp_path / "a.jsonl", [{"source": "a", "target": "b"}, {"source": "c"}])
    with pytest.raises(InputFileError, match=escaped(missing_target, "1 rows with no 'target' value")):
        load_jsonl(missing_target)
    other = write_jsonl(tmp_path / "b.jsonl", [{"de": "a", "text": "b"}])
    with pytest.raises(InputFileError, match=escaped(other, "neither a 'translation' column", "['de', 'text']")):
        load_jsonl(other)
    broken = write(tmp_path / "c.jsonl", '{"source": "a", "target": "b"\n')
    with pytest.raises(InputFileError, match=escaped("Could not read the data file", broken)):
        load_jsonl(broken)


# -- the Hub (up to the network boundary) -------------------------------------------------------------------------


def test_hub_dataset_maps_the_translation_column(monkeypatch: pytest.MonkeyPatch) -> None:
    features = Features({"translation": Translation(languages=["de", "en"])})
    hub = DatasetDict({
        split: Dataset.from_dict({"translation": [{"de": s, "en": t} for s, t in PAIRS[:n]]}, features=features)
        for split, n in (("train", 3), ("validation", 1))
    })
    calls = []

    def fake_load_dataset(*args, **kwargs) -> DatasetDict:
        calls.append((args, kwargs))
        return hub

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    loaded = load_data(DataSpec(format="hub", hub_name="wmt16", hub_config="de-en", source_lang="en"))
    assert calls == [(("wmt16", "de-en"), {"revision": None})]
    assert rows(loaded["train"]) == [(t, s) for s, t in PAIRS]
    assert len(loaded["validation"]) == 1
    assert_source_target(loaded)
    with pytest.raises(EncdecError, match=r"The Hub dataset 'wmt16' \(train split\) has no language 'fr'.*de, en"):
        load_hub_dataset("wmt16", "de-en", "fr", "en")


def test_hub_dataset_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args, **kwargs) -> DatasetDict:
        raise ConnectionError("Couldn't reach 'wmt16' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(EncdecError, match="Could not load the Hub dataset 'wmt16'.*OfflineModeIsEnabled"):
        load_hub_dataset("wmt16", "de-en", "de", "en")


# -- DataSpec and load_data ---------------------------------------------------------------------------------------


def test_load_data_dispatches_every_file_format(tmp_path: Path, corpus_dir: Path) -> None:
    csv_file = write(tmp_path / "a.txt", "de,en\nHallo,Hello\n")  # the format, not the suffix, sets the delimiter
    tsv_file = write(tmp_path / "b.txt", "de\ten\nHallo\tHello\n")
    jsonl = write_jsonl(tmp_path / "c.jsonl", [{"translation": {"de": "Hallo", "en": "Hello"}}])
    test_files = [str(corpus_dir / "test2016.de"), str(corpus_dir / "test2016.en")]
    specs = {
        "csv": DataSpec(format="csv", files={"train": str(csv_file)}, source_column="de", target_column="en"),
        "tsv": DataSpec(format="tsv", files={"train": str(tsv_file)}, source_column="de", target_column="en"),
        "jsonl": DataSpec(format="jsonl", files={"train": str(jsonl)}, source_lang="de", target_lang="en"),
        "text files": DataSpec(format="text", files={"train": test_files}),
        "text folder": DataSpec(format="text", data_dir=str(corpus_dir), target_lang="en",
                                splits={"train": "test2016"}),
    }
    for name, spec in specs.items():
        loaded = load_data(spec)
        assert list(loaded) == ["train"], name
        assert rows(loaded["train"]) == [("Hallo", "Hello") if name in ("csv", "tsv", "jsonl") else PAIRS[0]], name
        assert_source_target(loaded)
    builtin = load_data(DataSpec(builtin_train=20, builtin_validation=4, builtin_test=4, seed=1))
    assert {split: len(data) for split, data in builtin.items()} == {"train": 20, "validation": 4, "test": 4}


def test_data_spec_errors() -> None:
    with pytest.raises(EncdecError, match=r"data.format must be one of \['builtin_dates', 'text', 'csv', 'tsv', "
                                          r"'jsonl', 'hub'\], got 'parquet'"):
        DataSpec(format="parquet")
    with pytest.raises(EncdecError, match="'csv' needs data.files"):
        DataSpec(format="csv")
    with pytest.raises(EncdecError, match="exactly one of data.data_dir"):
        DataSpec(format="text", data_dir="x", files={"train": ["a", "b"]})
    with pytest.raises(EncdecError, match=r"data.files.train must be \[source_file, target_file\]"):
        DataSpec(format="text", files={"train": "a.txt"})
    with pytest.raises(EncdecError, match="needs data.hub_name"):
        DataSpec(format="hub")
    with pytest.raises(EncdecError, match="data.builtin_test must be >= 0"):
        DataSpec(builtin_test=-1)
    with pytest.raises(EncdecError, match="no splits"):
        load_data(DataSpec(builtin_train=0, builtin_validation=0, builtin_test=0))


# -- splits as aligned text files (encdec data, encdec distill's sources) -------------------------------------------


def test_splits_are_written_as_aligned_files_of_any_format(tmp_path: Path) -> None:
    """A JSON Lines corpus's splits, a quote and a stray U+2028 kept inside their line, named and suffixed as asked."""
    odd = [("a \u2028 b", "\"quoted\", too"), *PAIRS]
    files = {split: str(write_jsonl(tmp_path / f"{split}.jsonl", [{"source": s, "target": t} for s, t in pairs]))
             for split, pairs in (("train", odd), ("dev", PAIRS[:1]))}
    counts = write_aligned_splits(load_data(DataSpec(format="jsonl", files=files)), tmp_path / "out", ("de", "en"),
                                  names={"train": "original"})
    assert counts == {"train": 4, "dev": 1}
    out = tmp_path / "out"
    assert sorted(path.name for path in out.iterdir()) == ["dev.de", "dev.en", "original.de", "original.en"]
    assert (out / "original.de").read_text(encoding="utf-8") == "".join(f"{s}\n" for s, _ in odd)
    assert (out / "original.en").read_text(encoding="utf-8") == "".join(f"{t}\n" for _, t in odd)


@pytest.mark.parametrize("side", ["source", "target"])
def test_a_line_break_in_a_pair_is_refused_naming_the_split_and_line(tmp_path: Path, side: str) -> None:
    pairs = [("eins", "one"), ("zwei", "two"), ("drei\r", "three") if side == "source" else ("drei", "thr\nee")]
    splits = DatasetDict({"test": Dataset.from_dict({"source": [s for s, _ in pairs],
                                                     "target": [t for _, t in pairs]}, features=TEXT_FEATURES)})
    with pytest.raises(EncdecError, match=rf"Pair 3 of the 'test' split \(line 3 of its files\) holds a line break "
                                          rf"in its {side}; .* Remove the line breaks"):
        write_aligned_splits(splits, tmp_path / "out")
    assert not (tmp_path / "out" / "test.src").exists() and not (tmp_path / "out" / "test.tgt").exists()
    (tmp_path / "kept").mkdir()
    write(tmp_path / "kept" / "notes.txt", "mine")  # a refused `encdec data` leaves the old folder as it was
    with pytest.raises(EncdecError, match="'test' split"):
        write_data_folder(DataSpec(format="jsonl", files={"test": str(write_jsonl(
            tmp_path / "bad.jsonl", [{"source": s, "target": t} for s, t in pairs]))}), tmp_path / "kept",
            overwrite=True)
    assert [path.name for path in (tmp_path / "kept").iterdir()] == ["notes.txt"]
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".kept")] == []  # no temporary left


def test_a_data_folder_is_never_written_over_without_overwrite_nor_over_its_inputs(
        corpus_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = DataSpec(format="text", data_dir=str(corpus_dir), source_lang="de", target_lang="en")
    out = tmp_path / "out"
    assert write_data_folder(spec, out) == {"train": 3, "validation": 2, "test": 1}
    assert (out / "validation.tgt").read_text(encoding="utf-8") == "".join(f"{t}\n" for _, t in PAIRS[:2])
    write(out / "notes.txt", "mine")
    with pytest.raises(OverwriteError, match=escaped(out, "already exists and is not empty; pass --overwrite")):
        write_data_folder(spec, out)
    assert write_data_folder(spec, out, overwrite=True) == {"train": 3, "validation": 2, "test": 1}
    assert not (out / "notes.txt").exists() and (out / "train.src").is_file()
    for inside in (corpus_dir, corpus_dir.parent):  # replacing either would delete the corpus
        with pytest.raises(OverwriteError, match=escaped("--output", inside, "holds the input", corpus_dir)):
            write_data_folder(spec, inside, overwrite=True)
    (tmp_path / "configs").mkdir()
    config = write(tmp_path / "configs" / "run.yaml", "data: {}\n")  # the run config: an input as well
    with pytest.raises(OverwriteError, match=escaped("--output", config.parent, "holds the input", config)):
        write_data_folder(spec, config.parent, overwrite=True, inputs=[config])
    assert (corpus_dir / "train.de").is_file() and config.is_file()
    monkeypatch.chdir(out)
    for here in (Path("."), out.parent):  # the folder it runs in, or one that holds it, is never replaced
        with pytest.raises(OverwriteError, match=escaped("--output", here, "is the folder you run in, or holds it")):
            write_data_folder(spec, here, overwrite=True)
    assert (out / "train.src").is_file()
    with pytest.raises(OverwriteError, match="exists and is a file"):
        write_data_folder(spec, corpus_dir / "train.de", overwrite=True)


# -- tokenization and batching ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    splits = make_date_splits(300, 0, 0, seed=0)
    return train_tokenizer([text for pair in splits["train"] for text in pair], vocab_size=120)


def lengths_dataset(tokenizer: PreTrainedTokenizerFast) -> tuple[DatasetDict, list[int], list[int]]:
    data = load_builtin_dates(train=40, validation=10, test=0, seed=5)
    source_lengths = [len(tokenizer(s).input_ids) for s in data["train"]["source"]]
    target_lengths = [len(tokenizer(t).input_ids) for t in data["train"]["target"]]
    return data, source_lengths, target_lengths


def test_tokenize_filters_overlong_pairs(tokenizer: PreTrainedTokenizerFast) -> None:
    data, source_lengths, target_lengths = lengths_dataset(tokenizer)
    max_source = sorted(source_lengths)[len(source_lengths) // 2]  # the median: about half the pairs are too long
    tokenized, report = tokenize_dataset(data, tokenizer, max_source_length=max_source, max_target_length=64)
    kept = sum(n <= max_source for n in source_lengths)
    assert report["train"] == {"total": 40, "kept": kept, "filtered": 40 - kept, "truncated": 0}
    assert 0 < kept < 40
    train = tokenized["train"]
    assert train.column_names == ["input_ids", "attention_mask", "labels"]
    kept_sources = [s for s, n in zip(data["train"]["source"], source_lengths, strict=True) if n <= max_source]
    assert train["input_ids"] == tokenizer(kept_sources).input_ids  # the same pairs, in order, untouched
    assert all(ids[-1] == tokenizer.eos_token_id for ids in train["labels"])
    assert format_report(report).splitlines()[0] == f"train: {kept} of 40 pairs kept, {40 - kept} filtered, " \
                                                    "0 truncated (over-long)"
    assert max(target_lengths) <= 64


def test_tokenize_truncates_keeping_eos(tokenizer: PreTrainedTokenizerFast) -> None:
    data, source_lengths, target_lengths = lengths_dataset(tokenizer)
    tokenized, report = tokenize_dataset(data, tokenizer, max_source_length=4, max_target_length=3,
                                         overlong="truncate")
    assert report["train"] == {"total": 40, "kept": 40, "filtered": 0, "truncated": 40}
    train = tokenized["train"]
    assert [len(ids) for ids in train["input_ids"]] == [min(n, 4) for n in source_lengths]
    assert [len(ids) for ids in train["labels"]] == [min(n, 3) for n in target_lengths]
    assert all(ids[-1] == tokenizer.eos_token_id for ids in list(train["input_ids"]) + list(train["labels"]))
    assert all(len(m) == len(ids) and set(m) == {1} for m, ids in zip(train["attention_mask"], train["input_ids"],
                                                                          strict=True))


def test_tokenize_empty_after_filter_names_the_split(tokenizer: PreTrainedTokenizerFast) -> None:
    data, _, _ = lengths_dataset(tokenizer)
    with pytest.raises(EncdecError, match=r"'train' split.*max_source_length=2.*raise the max lengths"):
        tokenize_dataset(data, tokenizer, max_source_length=2, max_target_length=64)
    with pytest.raises(EncdecError, match="`overlong` must be one of"):
        tokenize_dataset(data, tokenizer, overlong="drop")


def test_collator_pads_and_shifts_labels(tokenizer: PreTrainedTokenizerFast, tiny_transformer_config) -> None:
    tokenized, _ = tokenize_dataset(load_builtin_dates(train=8, validation=0, test=0, seed=2), tokenizer)
    model = TransformerSeq2SeqForConditionalGeneration(tiny_transformer_config(**special_token_ids(tokenizer)))
    features = [tokenized["train"][i] for i in range(8)]
    batch = DataCollatorForSeq2Seq(tokenizer, model=model)(features)

    label_lengths = [len(f["labels"]) for f in features]
    source_lengths = [len(f["input_ids"]) for f in features]
    assert len(set(label_lengths)) > 1 and len(set(source_lengths)) > 1  # padding is exercised on both sides
    assert batch["input_ids"].shape == (8, max(source_lengths))
    assert batch["labels"].shape == (8, max(label_lengths))
    for i, f in enumerate(features):
        n, m = source_lengths[i], label_lengths[i]
        assert batch["input_ids"][i, :n].tolist() == f["input_ids"]
        assert (batch["input_ids"][i, n:] == tokenizer.pad_token_id).all()
        assert batch["attention_mask"][i].tolist() == [1] * n + [0] * (max(source_lengths) - n)
        assert batch["labels"][i, :m].tolist() == f["labels"]
        assert (batch["labels"][i, m:] == -100).all()
    # decoder inputs: <s> then the labels shifted right, with padding instead of -100
    expected = torch.cat([torch.full((8, 1), tokenizer.bos_token_id), batch["labels"][:, :-1]], dim=1)
    expected[expected == -100] = tokenizer.pad_token_id
    assert torch.equal(batch["decoder_input_ids"], expected)
    loss = model(**batch).loss
    assert torch.isfinite(loss)
