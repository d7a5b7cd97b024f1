"""Multilingual parallel text -> a ``DatasetDict`` whose splits have the columns ``source``, ``target``,
``source_lang`` and ``target_lang`` (``encdec.data.directions``), one direction after another:

- a multi-way parallel folder, one file per language and split with line i the same sentence in every language
  (Multi30k's ``train.en``, ``train.de``, ``train.fr``, ``train.cs``): every direction between its languages, or
  the ones chosen (``load_multiway_corpus``);
- a folder of direction files ``{prefix}.{src}-{tgt}.{src}`` / ``.{tgt}``, fairseq's naming, which ``encdec data``
  writes (``load_direction_folder``);
- several pair folders, one a direction, each holding ``{prefix}.{src}`` / ``{prefix}.{tgt}`` (``load_pair_folders``),
  or each direction's files named one by one (``load_pair_files``);
- the built-in multilingual date task (``load_builtin_multilingual_dates``, ``encdec.data.dates``).

Each direction is read from its two files by ``datasets``' generator builder into the Arrow cache (memory-mapped,
keyed by the files' paths, sizes and modification times, as ``encdec.data.loading`` reads a pair), and the
directions of a split are concatenated without a copy.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import datasets
from datasets import Dataset, DatasetDict, concatenate_datasets

from ..errors import EncdecError, InputFileError
from ..io_utils import count_text_lines, is_blank, require_file, text_lines
from .dates import make_multilingual_date_splits
from .directions import MULTILINGUAL_FEATURES, Direction, direction_name, parse_directions

MULTI30K_SPLITS = {"train": "train", "validation": "val", "test": "test2016"}  # split -> file prefix
ENCDEC_DATA_SPLITS = ("train", "validation", "test")  # the splits encdec data writes, named as they are

PathLike = str | os.PathLike
Directions = str | Iterable[str | Sequence[str]] | None


def counted_text_files(files: Sequence[tuple[PathLike, str]]) -> tuple[list[Path], list[int]]:
    """Check that each ``(path, what)`` is a readable, UTF-8, non-blank text file, and count its lines (a
    streaming pass each, before anything is read into the cache)."""
    paths = [require_file(path, what) for path, what in files]
    counts = [count_text_lines(path, what) for path, (_, what) in zip(paths, files, strict=True)]
    for path, (_, what) in zip(paths, files, strict=True):
        if is_blank(path):
            raise InputFileError(f"The {what} {path} is empty.")
    return paths, counts


def file_identity(paths: Iterable[Path]) -> str:
    """The files' sizes and modification times, for a builder's cache key: a changed file is read again. (A
    string: ``datasets`` reads a list in ``gen_kwargs`` as shards, one generator call each.)"""
    return " ".join(f"{path.stat().st_size}:{path.stat().st_mtime_ns}" for path in paths)


def _read_direction(source_file: str, target_file: str, source_lang: str, target_lang: str,
                    identity: str) -> Iterator[dict[str, str]]:
    """The rows of one direction's two line-aligned files, one line at a time; ``identity`` is only a cache key."""
    with open(source_file, "rb") as sources, open(target_file, "rb") as targets:
        for source, target in zip(text_lines(sources, f"The file {source_file}"),
                                  text_lines(targets, f"The file {target_file}"), strict=True):
            yield {"source": source, "target": target, "source_lang": source_lang, "target_lang": target_lang}


def _direction_dataset(source_file: Path, target_file: Path, direction: Direction) -> Dataset:
    """One direction of two checked, aligned files as a memory-mapped dataset."""
    paths = [source_file.resolve(), target_file.resolve()]
    try:
        return Dataset.from_generator(_read_direction, features=MULTILINGUAL_FEATURES, gen_kwargs={
            "source_file": str(paths[0]), "target_file": str(paths[1]), "source_lang": direction[0],
            "target_lang": direction[1], "identity": file_identity(paths)})
    except datasets.exceptions.DatasetGenerationError as error:  # a line that is not UTF-8: named by its number
        if isinstance(error.__cause__, EncdecError):
            raise error.__cause__ from None
        raise


def _aligned(files: Mapping[str, Path], fix: str) -> dict[str, Path]:
    """Check that the files (language -> file) have the same number of lines; one message names two that differ."""
    paths, counts = counted_text_files([(path, f"{lang} file") for lang, path in files.items()])
    for path, count in zip(paths[1:], counts[1:], strict=True):
        if count != counts[0]:
            raise InputFileError(f"The files are not aligned: {paths[0]} has {counts[0]} lines but {path} has "
                                 f"{count}. {fix}")
    return dict(zip(files, paths, strict=True))


def _folder(data_dir: PathLike, what: str) -> Path:
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise InputFileError(f"The {what} {data_dir} does not exist or is not a folder.")
    return data_dir


def languages_in(data_dir: Path, prefixes: Iterable[str]) -> list[str]:
    """The languages of a multi-way folder: the suffixes of its ``{prefix}.{lang}`` files, in sorted order."""
    prefixes = set(prefixes)
    return sorted({p.suffix[1:] for p in data_dir.iterdir() if p.is_file() and p.suffix and p.stem in prefixes})


def load_multiway_corpus(data_dir: PathLike, languages: Sequence[str] | None = None, directions: Directions = None,
                         splits: Mapping[str, str] | None = None) -> DatasetDict:
    """A multi-way parallel folder of ``{prefix}.{lang}`` files, line i the same sentence in every language (as
    Multi30k: ``train.en``, ``train.de``, ``train.fr``, ``train.cs``), as every direction or the chosen ones.

    :param languages: the languages to use (default: every ``{prefix}.{lang}`` suffix found); each needs a file
        for every split
    :param directions: ``None`` for every direction between ``languages`` (4 languages: 12), or some of them:
        ``"de-en,fr-en"`` or a list (``parse_directions``)
    :param splits: split name -> file prefix; default ``{"train": "train", "validation": "val", "test": "test2016"}``
    :raises InputFileError: naming the file, for a language without its file, files whose line counts differ, an
        empty or non-UTF-8 file
    """
    data_dir, splits = _folder(data_dir, "data folder"), dict(MULTI30K_SPLITS if splits is None else splits)
    languages = list(languages or languages_in(data_dir, splits.values()))
    if not languages:
        wanted = ", ".join(f"{prefix}.LANG" for prefix in splits.values())
        raise InputFileError(f"The data folder {data_dir} has no files {wanted} (e.g. train.de, train.en, as "
                             "Multi30k's); name the splits' file prefixes in splits.")
    directions = parse_directions(directions, languages, f"The data folder {data_dir}")
    used = [lang for lang in languages if any(lang in direction for direction in directions)]
    loaded = {}
    for split, prefix in splits.items():
        for lang in used:
            if not (data_dir / f"{prefix}.{lang}").is_file():
                raise InputFileError(f"The data folder {data_dir} has no file {prefix}.{lang} for the {split} split "
                                     f"of the language {lang!r}; add it, or leave {lang!r} out of the languages "
                                     "and directions.")
        files = _aligned({lang: data_dir / f"{prefix}.{lang}" for lang in used},
                         "Line i of each language's file must be the same sentence.")
        loaded[split] = concatenate_datasets([_direction_dataset(files[s], files[t], (s, t)) for s, t in directions])
    return DatasetDict(loaded)


def _pair_split(folder: Path, prefix: str, direction: Direction) -> Dataset:
    """One direction's split from ``folder/{prefix}.{src}`` and ``folder/{prefix}.{tgt}``."""
    files = _aligned({lang: folder / f"{prefix}.{lang}" for lang in direction},
                     f"Line i of one must be the translation of line i of the other ({direction_name(direction)}).")
    return _direction_dataset(files[direction[0]], files[direction[1]], direction)


def load_pair_folders(folders: Mapping[str | Sequence[str], PathLike], splits: Mapping[str, str] | None = None
                      ) -> DatasetDict:
    """Several pair folders, one a direction (``{"de-en": "data/de-en", "fr-en": "data/fr-en"}``), each holding
    ``{prefix}.{src}`` and ``{prefix}.{tgt}`` files as ``load_parallel_corpus`` reads them; the directions of each
    split are concatenated in the order given.

    :param splits: split name -> file prefix, the same in every folder; default Multi30k's
    """
    if not folders:
        raise EncdecError("No pair folders given: name at least one, e.g. {de-en: data/de-en}.")
    named = {key if isinstance(key, str) else direction_name(key): Path(folder) for key, folder in folders.items()}
    languages = sorted({lang for name in named for lang in name.split("-")})
    directions = parse_directions(list(named), languages, "The pair folders")
    splits = dict(MULTI30K_SPLITS if splits is None else splits)
    return DatasetDict({split: concatenate_datasets([
        _pair_split(_folder(named[direction_name(d)], f"pair folder of {direction_name(d)}"), prefix, d)
        for d in directions]) for split, prefix in splits.items()})


def load_pair_files(files: Mapping[str, Mapping[str, Sequence[PathLike]]]) -> DatasetDict:
    """Several directions' files named one by one: direction -> split -> ``[source_file, target_file]``, e.g.
    ``{"de-en": {"train": ["a.de", "a.en"]}, "fr-en": {"train": ["b.fr", "b.en"]}}``. Every direction needs the
    same splits; each split concatenates its directions in the order given."""
    if not files:
        raise EncdecError("No pair files given: name at least one direction, e.g. {de-en: {train: [a.de, a.en]}}.")
    languages = sorted({lang for name in files for lang in name.split("-")})
    directions = parse_directions(list(files), languages, "The pair files")
    splits = list(next(iter(files.values())))
    for direction, named in zip(directions, files.values(), strict=True):
        if list(named) != splits or any(len(pair) != 2 for pair in named.values()):
            raise EncdecError(f"The pair files of {direction_name(direction)} must be [source_file, target_file] for "
                              f"each of the splits {', '.join(splits)}, as the first direction's; got {dict(named)}.")
    return DatasetDict({split: concatenate_datasets([
        _direction_dataset(*_aligned({"source": Path(named[split][0]), "target": Path(named[split][1])},
                                     f"Line i of one must be the translation of line i of the other "
                                     f"({direction_name(direction)}).").values(), direction)
        for direction, named in zip(directions, files.values(), strict=True)]) for split in splits})


def load_direction_folder(data_dir: PathLike, directions: Directions = None, splits: Mapping[str, str] | None = None
                          ) -> DatasetDict:
    """A folder of direction files ``{prefix}.{src}-{tgt}.{src}`` and ``.{tgt}`` (fairseq's naming:
    ``train.de-fr.de``, ``train.de-fr.fr``), as ``encdec data`` writes multilingual data.

    :param directions: ``None`` for every direction with files for the first split, or some of them
    :param splits: split name -> file prefix; default: those of ``train``, ``validation`` and ``test`` (``encdec
        data``'s names) that have files
    """
    data_dir = _folder(data_dir, "data folder")
    if splits is None:
        splits = {split: split for split in ENCDEC_DATA_SPLITS if any(data_dir.glob(f"{split}.*-*.*"))}
    found = direction_files(data_dir, next(iter(splits.values()), "train"))
    languages = sorted({lang for direction in found for lang in direction})
    chosen = parse_directions(directions if directions is not None else [direction_name(d) for d in found],
                              languages, f"The data folder {data_dir}")
    return DatasetDict({split: concatenate_datasets([_pair_split(data_dir, f"{prefix}.{direction_name(d)}", d)
                                                     for d in chosen]) for split, prefix in splits.items()})


def has_direction_files(data_dir: PathLike) -> bool:
    """Whether ``data_dir`` holds direction files ``{prefix}.{src}-{tgt}.{lang}`` rather than multi-way ones."""
    return Path(data_dir).is_dir() and any(Path(data_dir).glob("*.*-*.*"))


def direction_files(data_dir: Path, prefix: str) -> list[Direction]:
    """The directions with a ``{prefix}.{src}-{tgt}.{src}`` file in ``data_dir``, sorted."""
    found = set()
    for path in data_dir.glob(f"{prefix}.*-*.*"):
        middle, lang = path.name[len(prefix) + 1:].rsplit(".", 1)
        found.update((lang, middle[cut + 1:]) for cut, char in enumerate(middle)
                     if char == "-" and middle[:cut] == lang)
    if not found:
        raise InputFileError(f"The data folder {data_dir} has no direction files {prefix}.SRC-TGT.SRC (e.g. "
                             f"{prefix}.de-en.de and {prefix}.de-en.en, as encdec data writes them).")
    return sorted(found)


def rows_dataset(rows: Sequence[tuple[str, str, str, str]]) -> Dataset:
    """Rows ``(source_lang, target_lang, source, target)`` as a small in-memory multilingual dataset."""
    columns = {"source_lang": [r[0] for r in rows], "target_lang": [r[1] for r in rows],
               "source": [r[2] for r in rows], "target": [r[3] for r in rows]}
    return Dataset.from_dict({name: columns[name] for name in MULTILINGUAL_FEATURES}, features=MULTILINGUAL_FEATURES)


def load_builtin_multilingual_dates(train: int = 24000, validation: int = 240, test: int = 480,
                                    directions: Directions = None, seed: int = 0) -> DatasetDict:
    """The built-in multilingual date task (``make_multilingual_date_splits``: de, en, fr and iso, any into any
    other, the validation and test dates disjoint from the training dates) as a ``DatasetDict``; a split of size 0
    is left out. The default sizes give each of the 12 directions 2,000 training, 20 validation and 40 test rows."""
    splits = make_multilingual_date_splits(train, validation, test, directions, seed)
    return DatasetDict({split: rows_dataset(rows) for split, rows in splits.items() if rows})


__all__ = ["ENCDEC_DATA_SPLITS", "MULTI30K_SPLITS", "counted_text_files", "direction_files", "file_identity",
           "has_direction_files", "languages_in", "load_builtin_multilingual_dates", "load_direction_folder",
           "load_multiway_corpus", "load_pair_files", "load_pair_folders", "rows_dataset"]
