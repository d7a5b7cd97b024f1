"""Parallel text -> a ``datasets.DatasetDict`` whose splits have exactly two string columns, ``source`` and
``target``:

- aligned plain-text files, one sentence per line (``load_text_pair``, ``load_parallel_corpus`` for a folder of
  ``{prefix}.{lang}`` files as in Multi30k);
- CSV or TSV with a header row (``load_delimited``);
- JSON Lines with ``source``/``target`` fields or the Hub's ``{"translation": {"de": ..., "en": ...}}`` form
  (``load_jsonl``);
- a dataset on the Hugging Face Hub (``load_hub_dataset``);
- the built-in date task (``load_builtin_dates``, ``encdec.data.dates``).

Files go through ``datasets``' builders into its Arrow cache, which is memory-mapped: a corpus of millions of pairs
is read from disk as it is used, never held as Python lists, so memory stays flat in the corpus size. A rerun on
unchanged files reuses the cache (it is keyed by each file's path, size and modification time).

``load_data(DataSpec(...))`` dispatches on the run config's ``data`` section.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets
from datasets import Dataset, DatasetDict, Features, Translation, Value

from ..errors import EncdecError, InputFileError
from ..io_utils import require_file, text_lines
from .dates import DATE_LANGUAGES, make_date_splits
from .directions import direction_name, every_direction, parse_directions
from .multilingual import (
    MULTI30K_SPLITS,
    counted_text_files,
    file_identity,
    has_direction_files,
    languages_in,
    load_builtin_multilingual_dates,
    load_direction_folder,
    load_multiway_corpus,
    load_pair_folders,
)

COLUMNS = ("source", "target")
TEXT_FEATURES = Features({"source": Value("string"), "target": Value("string")})
FORMATS = ("builtin_dates", "text", "csv", "tsv", "jsonl", "hub")  # multilingual: builtin_dates and text
_DELIMITERS = {".csv": ",", ".tsv": "\t", ".tab": "\t"}

PathLike = str | os.PathLike


def _pairs_dataset(sources: list[str], targets: list[str]) -> Dataset:
    """A small in-memory dataset (the built-in task's)."""
    return Dataset.from_dict({"source": sources, "target": targets}, features=TEXT_FEATURES)


def _read_pairs(source_file: str, target_file: str, identity: str) -> Iterator[dict[str, str]]:
    """The pairs of two line-aligned files, one line at a time (``datasets``' generator builder writes them to its
    Arrow cache). ``identity`` (both files' sizes and modification times) is not read: it is part of the builder's
    cache key, so that a changed file is read again."""
    with open(source_file, "rb") as sources, open(target_file, "rb") as targets:
        for source, target in zip(text_lines(sources, f"The source file {source_file}"),
                                  text_lines(targets, f"The target file {target_file}"), strict=True):
            yield {"source": source, "target": target}


def _text_pair_dataset(source_file: PathLike, target_file: PathLike) -> Dataset:
    """Two aligned plain-text files as a memory-mapped dataset. Only ``\n`` (or ``\r\n``) ends a line, so a stray
    ``\r`` or U+2028 inside a sentence cannot break the alignment; the line counts are checked first, by a streaming
    count, before anything is read into the cache."""
    paths, counts = counted_text_files([(source_file, "source file"), (target_file, "target file")])
    if counts[0] != counts[1]:
        raise InputFileError(
            f"The parallel files are not aligned: the source file {paths[0]} has {counts[0]} lines but the target "
            f"file {paths[1]} has {counts[1]}. Line i of one must be the translation of line i of the other.")
    paths = [path.resolve() for path in paths]
    identity = file_identity(paths)
    try:
        return Dataset.from_generator(_read_pairs, features=TEXT_FEATURES, gen_kwargs={
            "source_file": str(paths[0]), "target_file": str(paths[1]), "identity": identity})
    except datasets.exceptions.DatasetGenerationError as error:  # a line that is not UTF-8: named by its number
        if isinstance(error.__cause__, EncdecError):
            raise error.__cause__ from None
        raise


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
    found = languages_in(data_dir, splits.values())
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
        split: _source_target(_load_json_split(file, split), source_lang, target_lang, f"The data file {file}")
        for split, file in files.items()
    })


def _is_temporal(feature: Any) -> bool:
    return isinstance(feature, Value) and feature.dtype.startswith(("timestamp", "date", "time", "duration"))


def _load_json_split(file: Path, split: str) -> Dataset:
    """One JSON Lines file through ``datasets``' builder, with its text kept as written. PyArrow's JSON reader (which
    the builder uses) reads a field whose every value looks like a date as a timestamp, and casting that back to text
    changes it (``"1964-03-04"`` becomes ``"1964-03-04 00:00:00"``): a date-normalisation corpus would train on wrong
    targets. Such a file is read again with every field of that kind declared a string (PyArrow's explicit schema;
    the builder has no way to pass one). That read holds the file in memory, which only such files pay."""
    dataset = _load_split("json", file, split)
    features = dataset.features
    if not any(_is_temporal(feature) or (isinstance(feature, dict) and any(map(_is_temporal, feature.values())))
               for feature in features.values()):
        return dataset
    import pyarrow as pa
    from pyarrow import json as pa_json

    def as_text(feature: Any) -> Any:
        if isinstance(feature, dict):
            return {name: as_text(inner) for name, inner in feature.items()}
        return Value("string") if _is_temporal(feature) else feature

    schema = Features({name: as_text(feature) for name, feature in features.items()}).arrow_schema
    try:
        table = pa_json.read_json(file, parse_options=pa_json.ParseOptions(explicit_schema=schema))
    except pa.ArrowInvalid as err:
        raise InputFileError(f"Could not read the data file {file} with its date-like fields as text: {err}") from err
    return Dataset(table)


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
    num_proc: int | None = None
    """Processes that tokenize the data. Default (null): every core for a split of 50,000 pairs or more, else one."""
    cache_dir: str | None = None
    """Where tokenized splits are kept, keyed by the data files (path, size, modification time), the tokenizer and
    the length settings, so that a rerun skips tokenization. Default (null): encdec-tokenized in the datasets cache
    (HF_DATASETS_CACHE)."""

    languages: list[str] | str | None = None
    """Multilingual data, for one model of several directions: its language codes, e.g. [de, en, fr, cs].
    builtin_dates: some of de, en, fr and iso (the multilingual date task; null with directions set: all four).
    text with data_dir: the languages of a multi-way parallel folder, one {prefix}.{lang} file each, line i the same
    sentence in every language (null with directions set: every suffix found). Null, with directions and pair_dirs
    null too: bilingual data (source_lang and target_lang)."""
    directions: list[str] | str | None = None
    """Multilingual data: the directions to load, e.g. [de-en, fr-en] or "de-en,fr-en"; null (or all): every
    direction between the languages (4 languages: 12)."""
    pair_dirs: dict[str, str] | None = None
    """text, multilingual: a folder per direction instead of data_dir, e.g. {de-en: data/de-en, fr-en: data/fr-en},
    each with {prefix}.{src} and {prefix}.{tgt} files (the prefixes of splits)."""
    temperature: float = 5.0
    """Multilingual data: the training directions are sampled with this temperature (Arivazhagan et al. 2019),
    p(direction) proportional to its share of the pairs to the power 1/temperature: 1 samples as the data is,
    larger values move towards every direction equally often, so a small direction is not drowned (T=5 there)."""

    distilled_from: str | None = None
    """Set by encdec distill: the model folder(s) whose translations are the training targets. The model card
    says so; nothing else changes."""

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise EncdecError(f"data.format must be one of {list(FORMATS)}, got {self.format!r}.")
        for name in ("builtin_train", "builtin_validation", "builtin_test"):
            if getattr(self, name) < 0:
                raise EncdecError(f"data.{name} must be >= 0, got {getattr(self, name)}.")
        if self.num_proc is not None and self.num_proc < 1:
            raise EncdecError(f"data.num_proc must be at least 1 (or null for the default), got {self.num_proc}.")
        if self.files is not None and not isinstance(self.files, Mapping):
            raise EncdecError(f"data.files must map split names to files, e.g. {{train: data/train.csv}}; "
                              f"got {self.files!r}.")
        if not self.temperature > 0:
            raise EncdecError(f"data.temperature must be > 0 (1: as the data is, larger: closer to uniform; default "
                              f"5), got {self.temperature}.")
        if isinstance(self.languages, str):
            self.languages = [lang.strip() for lang in self.languages.split(",") if lang.strip()]
        if self.multilingual:
            self._check_multilingual()
        elif self.format == "text":
            self._check_text()
        elif self.format in ("csv", "tsv", "jsonl") and not self.files:
            raise EncdecError(f"data.format {self.format!r} needs data.files, e.g. "
                              f"{{train: data/train.{self.format}}}.")
        elif self.format == "hub" and not self.hub_name:
            raise EncdecError("data.format 'hub' needs data.hub_name, e.g. wmt16 (and data.hub_config, e.g. de-en).")

    @property
    def multilingual(self) -> bool:
        """Whether the data has several directions (the columns source_lang and target_lang as well)."""
        return bool(self.languages or self.directions or self.pair_dirs)

    def _check_multilingual(self) -> None:
        if self.format not in ("builtin_dates", "text"):
            raise EncdecError(f"data.languages, data.directions and data.pair_dirs take data.format builtin_dates or "
                              f"text, not {self.format!r}.")
        if self.source_lang or self.target_lang:
            raise EncdecError("data.source_lang and data.target_lang choose one pair of bilingual data; multilingual "
                              "data names data.languages or data.directions instead. Drop one of them.")
        if self.files is not None:
            raise EncdecError("data.files takes one pair of bilingual files; for multilingual text use data.data_dir "
                              "or data.pair_dirs.")
        if self.format == "text" and (self.data_dir is None) == (self.pair_dirs is None):
            raise EncdecError("Multilingual data.format 'text' needs exactly one of data.data_dir (a multi-way "
                              "folder of {prefix}.{lang} files) and data.pair_dirs ({de-en: folder, ...}).")
        if self.pair_dirs is not None and (self.languages or self.directions):
            raise EncdecError("data.pair_dirs names the directions itself, one folder each; drop data.languages and "
                              "data.directions.")

    def _check_text(self) -> None:
        if (self.data_dir is None) == (self.files is None):
            raise EncdecError("data.format 'text' needs exactly one of data.data_dir (a folder of {prefix}.{lang} "
                              "files) and data.files ({split: [source_file, target_file]}).")
        for split, pair in (self.files or {}).items():
            if isinstance(pair, str | os.PathLike) or len(pair) != 2:
                raise EncdecError(f"data.files.{split} must be [source_file, target_file] for format 'text', "
                                  f"got {pair!r}.")


def load_data(spec: DataSpec) -> DatasetDict:
    """Load the parallel text that ``spec`` describes as a ``DatasetDict`` of ``source``/``target`` strings, and
    ``source_lang``/``target_lang`` as well for multilingual data (``spec.multilingual``)."""
    if spec.multilingual:
        loaded = _load_multilingual(spec)
    elif spec.format == "builtin_dates":
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


def _load_multilingual(spec: DataSpec) -> DatasetDict:
    """The multilingual data of ``spec``: the date task, pair folders, a folder of direction files (as ``encdec
    data`` writes them: ``train.de-en.de``, its splits' own names unless data.splits names others) or a multi-way
    folder."""
    if spec.format == "builtin_dates":
        languages = spec.languages or list(DATE_LANGUAGES)
        unknown = [lang for lang in languages if lang not in DATE_LANGUAGES]
        if unknown:
            raise EncdecError(f"data.languages: the multilingual date task has no language {unknown[0]!r}; its "
                              f"languages are {', '.join(DATE_LANGUAGES)}.")
        return load_builtin_multilingual_dates(spec.builtin_train, spec.builtin_validation, spec.builtin_test,
                                               parse_directions(spec.directions, languages, "data.directions"),
                                               spec.seed)
    if spec.pair_dirs is not None:
        return load_pair_folders(spec.pair_dirs, spec.splits)
    directions = spec.directions
    if directions is None and spec.languages:
        directions = [direction_name(d) for d in every_direction(spec.languages)]
    if has_direction_files(spec.data_dir):
        return load_direction_folder(spec.data_dir, directions,
                                     None if spec.splits == MULTI30K_SPLITS else spec.splits)
    return load_multiway_corpus(spec.data_dir, spec.languages, directions, spec.splits)
