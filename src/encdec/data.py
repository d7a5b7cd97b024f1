"""Parallel text -> ``datasets.DatasetDict`` -> token ids, and the built-in generated task.

Every loader returns a ``DatasetDict`` whose splits have exactly two string columns, ``source`` and ``target``:

- aligned plain-text files, one sentence per line (``load_text_pair``, ``load_parallel_corpus`` for a folder of
  ``{prefix}.{lang}`` files as in Multi30k);
- CSV or TSV with a header row (``load_delimited``);
- JSON Lines with ``source``/``target`` fields or the Hub's ``{"translation": {"de": ..., "en": ...}}`` form
  (``load_jsonl``);
- a dataset on the Hugging Face Hub (``load_hub_dataset``);
- the built-in task (``load_builtin_dates``): human-readable dates in many formats -> ISO 8601 (``2021-03-03``).
  It needs no files, is deterministic by seed, and has non-monotonic alignment: the day often comes first in
  the source but last in the target, and month names must be mapped to numbers.

``load_data(DataSpec(...))`` dispatches on the run config's ``data`` section, and ``tokenize_dataset`` turns the
text into ``input_ids`` / ``attention_mask`` / ``labels`` for ``DataCollatorForSeq2Seq``.
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import datasets
from datasets import Dataset, DatasetDict, Features, Translation, Value

from .errors import EncdecError, InputFileError
from .io_utils import read_aligned_lines, require_file

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def _ordinal(day: int) -> str:
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


# Each format turns a date into one human-readable string; the target is always `date.isoformat()`.
DATE_FORMATS = [
    lambda d: f"{_ordinal(d.day)} of {MONTHS[d.month - 1]} {d.year}",  # 3rd of March 2021
    lambda d: f"{MONTHS[d.month - 1][:3]} {d.day}, {d.year % 100:02d}",  # Mar 3, 21
    lambda d: f"{d.day:02d}.{d.month:02d}.{d.year}",  # 03.03.2021
    lambda d: f"{d.month}/{d.day}/{d.year}",  # 3/3/2021 (US)
    lambda d: f"{MONTHS[d.month - 1]} {d.day}, {d.year}",  # March 3, 2021
    lambda d: f"{d.day} {MONTHS[d.month - 1]} {d.year}",  # 3 March 2021
    lambda d: f"{WEEKDAYS[d.weekday()]}, {d.day} {MONTHS[d.month - 1][:3]} {d.year}",  # Wednesday, 3 Mar 2021
    lambda d: f"{d.day} {MONTHS[d.month - 1].lower()} {d.year}",  # 3 march 2021
    lambda d: f"{MONTHS[d.month - 1][:3].upper()} {_ordinal(d.day)} {d.year}",  # MAR 3rd 2021
    lambda d: f"{d.year}/{d.month:02d}/{d.day:02d}",  # 2021/03/03
    lambda d: f"{d.day}-{MONTHS[d.month - 1][:3]}-{d.year % 100:02d}",  # 3-Mar-21
]

_FIRST = dt.date(1950, 1, 1).toordinal()
_LAST = dt.date(2049, 12, 31).toordinal()
DATE_RANGE = (_FIRST, _LAST)  # the ordinals of the first and last date drawn


def make_date_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Return ``n`` (human-readable date, ISO date) pairs, deterministic in ``seed``.

    Two-digit years are read as 1950-2049, matching the sampled range, so every source is unambiguous.
    """
    if n < 0:
        raise ValueError(f"`n` must be >= 0, got {n}.")
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        date = dt.date.fromordinal(rng.randint(_FIRST, _LAST))
        pairs.append((rng.choice(DATE_FORMATS)(date), date.isoformat()))
    return pairs


def make_date_splits(train: int, validation: int, test: int, seed: int = 0) -> dict[str, list[tuple[str, str]]]:
    """Disjoint train/validation/test splits: held-out sources never appear in training."""
    pool = make_date_pairs(4 * (train + validation + test), seed)
    seen: set[str] = set()
    unique = [p for p in pool if not (p[0] in seen or seen.add(p[0]))]
    needed = train + validation + test
    if len(unique) < needed:
        raise ValueError(f"Could not draw {needed} distinct dates; ask for fewer examples.")
    return {
        "train": unique[:train],
        "validation": unique[train:train + validation],
        "test": unique[train + validation:needed],
    }


# -- loading parallel text ----------------------------------------------------------------------------------------

COLUMNS = ("source", "target")
TEXT_FEATURES = Features({"source": Value("string"), "target": Value("string")})
MULTI30K_SPLITS = {"train": "train", "validation": "val", "test": "test2016"}  # split -> file prefix
FORMATS = ("builtin_dates", "text", "csv", "tsv", "jsonl", "hub")
OVERLONG = ("filter", "truncate")
_DELIMITERS = {".csv": ",", ".tsv": "\t", ".tab": "\t"}

PathLike = str | os.PathLike


def _pairs_dataset(sources: list[str], targets: list[str]) -> Dataset:
    return Dataset.from_dict({"source": sources, "target": targets}, features=TEXT_FEATURES)


def _text_pair_dataset(source_file: PathLike, target_file: PathLike) -> Dataset:
    return _pairs_dataset(*read_aligned_lines(source_file, target_file))


def load_text_pair(source_file: PathLike, target_file: PathLike, split: str = "train") -> DatasetDict:
    """Two aligned plain-text files, one sentence per line, as the single split ``split``."""
    return DatasetDict({split: _text_pair_dataset(source_file, target_file)})


def _resolve_languages(found: list[str], source_lang: str | None, target_lang: str | None,
                      where: str) -> tuple[str, str]:
    """Check the requested languages against the languages ``found`` in the data.

    When only one of them is given and the data has exactly two languages, the other one is the second. When
    neither is given, this raises: the translation direction is the user's choice, never guessed.
    """
    listed = ", ".join(sorted(found)) or "none"
    for lang in (source_lang, target_lang):
        if lang is not None and lang not in found:
            raise EncdecError(f"{where} has no language {lang!r}; the languages found are: {listed}.")
    if source_lang is None or target_lang is None:
        given = source_lang if source_lang is not None else target_lang
        if given is None or len(found) != 2:
            raise EncdecError(f"{where} has the languages {listed}: set both source_lang and target_lang to choose "
                              "the translation direction.")
        other = next(lang for lang in found if lang != given)
        source_lang, target_lang = (given, other) if source_lang is not None else (other, given)
    if source_lang == target_lang:
        raise EncdecError(f"{where}: source_lang and target_lang are both {source_lang!r}; choose two of {listed}.")
    return source_lang, target_lang


def load_parallel_corpus(
    data_dir: PathLike,
    source_lang: str | None = "de",
    target_lang: str | None = "en",
    splits: Mapping[str, str] | None = None,
) -> DatasetDict:
    """A folder of aligned ``{prefix}.{lang}`` files, e.g. Multi30k's ``train.de`` / ``train.en``.

    :param splits: split name -> file prefix; default ``{"train": "train", "validation": "val", "test": "test2016"}``
    """
    splits = dict(MULTI30K_SPLITS if splits is None else splits)
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise InputFileError(f"The data folder {data_dir} does not exist or is not a folder.")
    prefixes = set(splits.values())
    found = sorted({p.suffix[1:] for p in data_dir.iterdir() if p.is_file() and p.suffix and p.stem in prefixes})
    where = f"The data folder {data_dir} (files {', '.join(f'{prefix}.*' for prefix in splits.values())})"
    source_lang, target_lang = _resolve_languages(found, source_lang, target_lang, where)
    return DatasetDict({
        split: _text_pair_dataset(data_dir / f"{prefix}.{source_lang}", data_dir / f"{prefix}.{target_lang}")
        for split, prefix in splits.items()
    })


def _split_files(path: PathLike | Mapping[str, PathLike]) -> dict[str, Path]:
    """One file is the ``train`` split; a mapping names the split of each file."""
    files = {split: Path(p) for split, p in path.items()} if isinstance(path, Mapping) else {"train": Path(path)}
    if not files:
        raise EncdecError("No data files given: name at least one file, e.g. {train: data/train.csv}.")
    for file in files.values():
        require_file(file, "data file")
        if file.stat().st_size == 0:
            raise InputFileError(f"The data file {file} is empty.")
    return files


def _load_split(builder: str, file: Path, split: str, **kwargs: Any) -> Dataset:
    """``datasets.load_dataset(builder)`` on one file; a malformed file raises an ``InputFileError`` naming it."""
    try:
        return datasets.load_dataset(builder, data_files={split: str(file)}, split=split, **kwargs)
    except datasets.exceptions.DatasetGenerationError as err:
        raise InputFileError(f"Could not read the data file {file}: {err.__cause__ or err}") from err
    except ValueError as err:  # datasets: 'Instruction "train" corresponds to no data!'
        if "no data" not in str(err):
            raise
        raise InputFileError(f"The data file {file} has no examples.") from err


def _standardize(dataset: Dataset, source_column: str, target_column: str, where: str) -> Dataset:
    """Keep ``source_column`` and ``target_column`` as the string columns ``source`` and ``target``; refuse null
    cells and an empty dataset."""
    dataset = dataset.select_columns([source_column, target_column])
    renames = {old: new for old, new in zip((source_column, target_column), COLUMNS, strict=True) if old != new}
    if renames:
        dataset = dataset.rename_columns(renames).select_columns(list(COLUMNS))
    if dataset.features != TEXT_FEATURES:
        try:
            dataset = dataset.cast(TEXT_FEATURES)
        except (TypeError, ValueError) as err:
            raise InputFileError(f"{where}: the columns {source_column!r} and {target_column!r} must hold text, "
                                 f"found {dataset.features}: {err}") from None
    for column, name in zip(COLUMNS, (source_column, target_column), strict=True):
        nulls = dataset.data.column(column).null_count
        if nulls:
            raise InputFileError(f"{where} has {nulls} rows with no {name!r} value; fill them in or remove them.")
    if len(dataset) == 0:
        raise InputFileError(f"{where} has no examples.")
    return dataset


def _read_header(file: Path, delimiter: str, quoting: int) -> list[str]:
    try:
        with open(file, encoding="utf-8-sig", newline="") as f:
            return next(csv.reader(f, delimiter=delimiter, quoting=quoting), [])
    except UnicodeDecodeError as err:
        raise InputFileError(f"The data file {file} is not UTF-8 text (byte {err.start}: {err.reason}).") from None


def _infer_delimiter(files: list[Path]) -> str:
    suffixes = {file.suffix.lower() for file in files}
    delimiters = {_DELIMITERS.get(suffix) for suffix in suffixes}
    if len(delimiters) != 1 or None in delimiters:
        raise EncdecError(f"Cannot tell the delimiter from the file names {[str(f) for f in files]}; name the files "
                          "*.csv or *.tsv, or pass the delimiter.")
    return delimiters.pop()


def load_delimited(
    path: PathLike | Mapping[str, PathLike],
    source_column: str | None = None,
    target_column: str | None = None,
    delimiter: str | None = None,
) -> DatasetDict:
    """CSV or TSV files whose first line is a header naming the columns.

    :param path: one file (the ``train`` split) or split name -> file
    :param source_column: the header name of the source column (default ``source``); other columns are ignored
    :param delimiter: default from the file names, ``,`` for ``*.csv`` and a tab for ``*.tsv``. TSV fields are
        never quoted, so a ``"`` in a sentence stays as it is; CSV fields follow RFC 4180 quoting.
    :raises InputFileError: naming the file, for a missing column (listing the header's columns), a row with too
        many fields, or an empty cell or missing field in the source or target column
    """
    files = _split_files(path)
    source_column, target_column = source_column or "source", target_column or "target"
    if source_column == target_column:
        raise EncdecError(f"source_column and target_column are both {source_column!r}; name two columns.")
    delimiter = delimiter or _infer_delimiter(list(files.values()))
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    splits = {}
    for split, file in files.items():
        header = _read_header(file, delimiter, quoting)
        missing = [c for c in (source_column, target_column) if c not in header]
        if missing:
            raise InputFileError(
                f"The data file {file} has no column {', '.join(map(repr, missing))}; its header row has the columns "
                f"{header}. The first line must be a header; set source_column and target_column to name the columns."
            )
        if len(set(header)) != len(header):
            raise InputFileError(f"The data file {file} repeats a column name in its header row {header}.")
        # Every column is read (a row with too many fields is an error, not silently cut) and read as text ("007"
        # stays "007"); "NA" is text, while an empty cell or a missing field is a missing value (refused below).
        dataset = _load_split("csv", file, split, delimiter=delimiter, quoting=quoting,
                              features=Features({c: Value("string") for c in header}),
                              keep_default_na=False, na_values=[""])
        splits[split] = _standardize(dataset, source_column, target_column, f"The data file {file}")
    return DatasetDict(splits)


def _translation_languages(feature: Any) -> list[str]:
    """The language keys of a ``translation`` column: a ``Translation`` feature (Hub) or a struct (JSON)."""
    if isinstance(feature, Translation):
        return list(feature.languages)
    return list(feature) if isinstance(feature, dict) else []


def _source_target(dataset: Dataset, source_lang: str | None, target_lang: str | None, where: str) -> Dataset:
    """Map a ``translation`` column, ``source``/``target`` columns, or one column per language to
    ``source``/``target``."""
    columns = dataset.column_names
    if "translation" in columns:
        found = _translation_languages(dataset.features["translation"])
        source_lang, target_lang = _resolve_languages(found, source_lang, target_lang, where)
        flat = dataset.select_columns(["translation"]).flatten()  # columns translation.<lang>
        return _standardize(flat, f"translation.{source_lang}", f"translation.{target_lang}", where)
    if set(COLUMNS) <= set(columns):
        return _standardize(dataset, *COLUMNS, where)
    if source_lang in columns and target_lang in columns:
        return _standardize(dataset, source_lang, target_lang, where)
    raise InputFileError(f"{where} has neither a 'translation' column nor 'source' and 'target' columns; its columns "
                         f"are: {columns}.")


def load_jsonl(
    path: PathLike | Mapping[str, PathLike],
    source_lang: str | None = None,
    target_lang: str | None = None,
) -> DatasetDict:
    """JSON Lines with ``{"source": ..., "target": ...}`` or ``{"translation": {"de": ..., "en": ...}}`` per line.

    :param path: one file (the ``train`` split) or split name -> file
    :param source_lang: the translation form's source key; may be left out when ``target_lang`` is given and the
        file has exactly two languages (and vice versa)
    """
    files = _split_files(path)
    return DatasetDict({
        split: _source_target(_load_split("json", file, split), source_lang, target_lang, f"The data file {file}")
        for split, file in files.items()
    })


def load_hub_dataset(
    name: str,
    config_name: str | None = None,
    source_lang: str | None = None,
    target_lang: str | None = None,
    revision: str | None = None,
) -> DatasetDict:
    """A translation dataset on the Hugging Face Hub (e.g. ``wmt16`` with config ``de-en``), every split kept.

    Its ``translation`` column (or ``source``/``target`` columns, or one column per language) becomes
    ``source``/``target``.
    """
    try:
        loaded = datasets.load_dataset(name, config_name, revision=revision)
    except (OSError, ValueError) as err:  # ConnectionError, DatasetNotFoundError, unknown config
        raise EncdecError(f"Could not load the Hub dataset {name!r} (config {config_name!r}): {err}") from err
    return DatasetDict({
        split: _source_target(dataset, source_lang, target_lang, f"The Hub dataset {name!r} ({split} split)")
        for split, dataset in loaded.items()
    })


def load_builtin_dates(train: int = 20000, validation: int = 500, test: int = 500, seed: int = 0) -> DatasetDict:
    """The built-in date task (``make_date_splits``) as a ``DatasetDict``; a split of size 0 is left out."""
    splits = make_date_splits(train, validation, test, seed)
    return DatasetDict({
        split: _pairs_dataset([s for s, _ in pairs], [t for _, t in pairs]) for split, pairs in splits.items() if pairs
    })


@dataclass
class DataSpec:
    """The ``data`` section of a run config: where the parallel text comes from.

    Paths are used as given (relative paths against the working directory).
    """

    format: str = "builtin_dates"
    """Where the pairs come from: builtin_dates, text, csv, tsv, jsonl or hub."""
    data_dir: str | None = None
    """text: a folder of aligned {prefix}.{lang} files (e.g. train.de / train.en, as Multi30k); or use files."""
    splits: dict[str, str] = field(default_factory=lambda: dict(MULTI30K_SPLITS))
    """text with data_dir: split name -> file prefix. Default {train: train, validation: val, test: test2016}."""
    files: dict[str, Any] | None = None
    """csv, tsv, jsonl: split name -> file. text without data_dir: split name -> [source_file, target_file]."""
    source_lang: str | None = None
    """text: the source file suffix; jsonl (translation form) and hub: the source language key. May be left out
    when target_lang is given and the data has exactly two languages."""
    target_lang: str | None = None
    """Like source_lang, for the target side."""
    source_column: str = "source"
    """csv, tsv: the header name of the source column."""
    target_column: str = "target"
    """csv, tsv: the header name of the target column."""
    hub_name: str | None = None
    """hub: the dataset name on the Hugging Face Hub, e.g. wmt16."""
    hub_config: str | None = None
    """hub: the dataset's config name, e.g. de-en."""
    hub_revision: str | None = None
    """hub: a branch, tag or commit of the dataset repository (default: the main branch)."""
    builtin_train: int = 20000
    """builtin_dates: number of training pairs."""
    builtin_validation: int = 500
    """builtin_dates: number of validation pairs (0 leaves the split out)."""
    builtin_test: int = 500
    """builtin_dates: number of test pairs (0 leaves the split out)."""
    seed: int = 0
    """builtin_dates: the generator's seed; the same seed gives the same pairs."""

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise EncdecError(f"data.format must be one of {list(FORMATS)}, got {self.format!r}.")
        for name in ("builtin_train", "builtin_validation", "builtin_test"):
            if getattr(self, name) < 0:
                raise EncdecError(f"data.{name} must be >= 0, got {getattr(self, name)}.")
        if self.files is not None and not isinstance(self.files, Mapping):
            raise EncdecError(f"data.files must map split names to files, e.g. {{train: data/train.csv}}; "
                              f"got {self.files!r}.")
        if self.format == "text":
            self._check_text()
        elif self.format in ("csv", "tsv", "jsonl") and not self.files:
            raise EncdecError(f"data.format {self.format!r} needs data.files, e.g. "
                              f"{{train: data/train.{self.format}}}.")
        elif self.format == "hub" and not self.hub_name:
            raise EncdecError("data.format 'hub' needs data.hub_name, e.g. wmt16 (and data.hub_config, e.g. de-en).")

    def _check_text(self) -> None:
        if (self.data_dir is None) == (self.files is None):
            raise EncdecError("data.format 'text' needs exactly one of data.data_dir (a folder of {prefix}.{lang} "
                              "files) and data.files ({split: [source_file, target_file]}).")
        for split, pair in (self.files or {}).items():
            if isinstance(pair, str | os.PathLike) or len(pair) != 2:
                raise EncdecError(f"data.files.{split} must be [source_file, target_file] for format 'text', "
                                  f"got {pair!r}.")


def load_data(spec: DataSpec) -> DatasetDict:
    """Load the parallel text that ``spec`` describes as a ``DatasetDict`` of ``source``/``target`` strings."""
    if spec.format == "builtin_dates":
        loaded = load_builtin_dates(spec.builtin_train, spec.builtin_validation, spec.builtin_test, spec.seed)
    elif spec.format == "text" and spec.data_dir is not None:
        loaded = load_parallel_corpus(spec.data_dir, spec.source_lang, spec.target_lang, spec.splits)
    elif spec.format == "text":
        loaded = DatasetDict({split: _text_pair_dataset(*pair) for split, pair in spec.files.items()})
    elif spec.format in ("csv", "tsv"):
        loaded = load_delimited(spec.files, spec.source_column, spec.target_column,
                                delimiter="," if spec.format == "csv" else "\t")
    elif spec.format == "jsonl":
        loaded = load_jsonl(spec.files, spec.source_lang, spec.target_lang)
    else:
        loaded = load_hub_dataset(spec.hub_name, spec.hub_config, spec.source_lang, spec.target_lang,
                                  spec.hub_revision)
    if not loaded:
        raise EncdecError(f"The {spec.format} data has no splits: every split is empty.")
    for split, dataset in loaded.items():
        if len(dataset) == 0:
            raise EncdecError(f"The {split!r} split of the {spec.format} data is empty.")
    return loaded


# -- tokenization -------------------------------------------------------------------------------------------------


def _truncate(ids: list[int], max_length: int, eos_token_id: int | None) -> list[int]:
    """Cut ``ids`` to ``max_length``, keeping a final ``</s>`` (as the tokenizer's own truncation does)."""
    if ids and ids[-1] == eos_token_id:
        return ids[:max_length - 1] + [eos_token_id]
    return ids[:max_length]


def _encode_batch(batch: dict[str, list[str]], tokenizer: PreTrainedTokenizerBase, max_source_length: int,
                  max_target_length: int, truncate: bool) -> dict[str, list]:
    """Tokenize a batch of pairs; an over-long pair is dropped, or truncated and marked in ``truncated``."""
    encoded = tokenizer(batch["source"], text_target=batch["target"], verbose=False)
    out: dict[str, list] = {"input_ids": [], "attention_mask": [], "labels": [], "truncated": []}
    for ids, labels in zip(encoded["input_ids"], encoded["labels"], strict=True):
        overlong = len(ids) > max_source_length or len(labels) > max_target_length
        if overlong and not truncate:
            continue
        if overlong:
            ids = _truncate(ids, max_source_length, tokenizer.eos_token_id)
            labels = _truncate(labels, max_target_length, tokenizer.eos_token_id)
        out["input_ids"].append(ids)
        out["attention_mask"].append([1] * len(ids))
        out["labels"].append(labels)
        out["truncated"].append(overlong)
    return out


def tokenize_dataset(
    dataset: DatasetDict,
    tokenizer: PreTrainedTokenizerBase,
    max_source_length: int = 128,
    max_target_length: int = 128,
    overlong: str = "filter",
) -> tuple[DatasetDict, dict[str, dict[str, int]]]:
    """``source``/``target`` text -> ``input_ids``, ``attention_mask`` and ``labels`` (each ending with ``</s>``).

    A pair whose source is longer than ``max_source_length`` tokens or whose target is longer than
    ``max_target_length`` is dropped (``overlong="filter"``) or cut to the limits (``"truncate"``). The filter
    applies to every split: a benchmark's test set should fit the limits, or use ``"truncate"``.

    :return: the tokenized splits (text columns removed), and per split the counts
        ``{"total", "kept", "filtered", "truncated"}``
    :raises EncdecError: when filtering leaves a split empty
    """
    if overlong not in OVERLONG:
        raise EncdecError(f"`overlong` must be one of {list(OVERLONG)}, got {overlong!r}.")
    for name, value in (("max_source_length", max_source_length), ("max_target_length", max_target_length)):
        if value < 2:
            raise EncdecError(f"`{name}` must be >= 2 (one token and </s>), got {value}.")
    encode = functools.partial(_encode_batch, tokenizer=tokenizer, max_source_length=max_source_length,
                               max_target_length=max_target_length, truncate=overlong == "truncate")
    tokenized, report = {}, {}
    for split, data in dataset.items():
        encoded = data.map(encode, batched=True, remove_columns=data.column_names, desc=f"Tokenizing {split}")
        if len(encoded) == 0:
            raise EncdecError(
                f"Every pair of the {split!r} split is longer than max_source_length={max_source_length} or "
                f"max_target_length={max_target_length} tokens, so none is left; raise the max lengths or use "
                "overlong='truncate'."
            )
        report[split] = {"total": len(data), "kept": len(encoded), "filtered": len(data) - len(encoded),
                         "truncated": sum(encoded["truncated"])}
        tokenized[split] = encoded.remove_columns("truncated")
    return DatasetDict(tokenized), report


def format_report(report: dict[str, dict[str, int]]) -> str:
    """One line per split, e.g. ``train: 28990 of 29000 pairs kept, 10 filtered, 0 truncated (over-long)``."""
    return "\n".join(
        f"{split}: {c['kept']} of {c['total']} pairs kept, {c['filtered']} filtered, {c['truncated']} truncated "
        "(over-long)" for split, c in report.items()
    )
