"""Splits of parallel text as aligned plain-text files: ``{name}.{source suffix}`` and ``{name}.{target suffix}``,
one sentence a line, line i of one the translation of line i of the other. Multilingual splits are written a
direction at a time, as fairseq names them: ``{split}.{src}-{tgt}.{src}`` and ``{split}.{src}-{tgt}.{tgt}``
(``train.de-fr.de``, ``train.de-fr.fr``), which ``encdec.data.multilingual.load_direction_folder`` reads back.

``write_aligned_splits`` writes the splits of a loaded ``DatasetDict`` into a folder, file by file (each atomic),
streamed from the ``datasets`` cache: ``encdec distill`` writes its student's sources with it. ``write_data_folder``
writes a run config's ``data`` section (any format) as a new folder, all or nothing: ``encdec data``, so that the
built-in task, which exists only in memory, can be scored with ``encdec evaluate --source-file ...
--reference-file ...`` like any corpus.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from datasets import Dataset

from ..errors import EncdecError, OverwriteError
from ..io_utils import atomic_output, refuse_existing, replace_folder
from .directions import MULTILINGUAL_COLUMNS, direction_name, split_by_direction
from .loading import DataSpec, load_data

SUFFIXES = ("src", "tgt")  # encdec data's file suffixes: {split}.src / {split}.tgt
READ_BATCH = 10_000  # pairs read from the Arrow cache at a time: memory stays flat in the corpus size


def write_aligned_splits(splits: Mapping[str, Dataset], folder: str | os.PathLike,
                         suffixes: tuple[str, str] = SUFFIXES, names: Mapping[str, str] | None = None
                         ) -> dict[str, int]:
    """Write each split's ``source`` / ``target`` columns as ``folder/{name}.{suffix}`` (two files, each written
    atomically) and return each split's line count.

    :param suffixes: the source and the target files' suffixes (e.g. the languages)
    :param names: split -> file name, where it is not the split's own (``{"train": "original"}``)
    :raises EncdecError: for a sentence holding a line break (``\\n`` or ``\\r``), which would break the alignment,
        naming the split, its line and side; nothing of that split is written
    """
    folder, names = Path(folder), names or {}
    counts = {}
    for split, data in splits.items():
        name = names.get(split, split)
        with atomic_output(folder / f"{name}.{suffixes[0]}") as s, atomic_output(folder / f"{name}.{suffixes[1]}") \
                as t, open(s, "w", encoding="utf-8") as source_file, open(t, "w", encoding="utf-8") as target_file:
            line = 0
            for batch in data.iter(batch_size=READ_BATCH):
                for source, target in zip(batch["source"], batch["target"], strict=True):
                    line += 1
                    source_file.write(_one_line(source, split, line, "source") + "\n")
                    target_file.write(_one_line(target, split, line, "target") + "\n")
        counts[split] = line
    return counts


def write_direction_splits(splits: Mapping[str, Dataset], folder: str | os.PathLike) -> dict[str, int]:
    """Write each direction of each multilingual split as ``folder/{split}.{src}-{tgt}.{src}`` and ``.{tgt}`` (each
    file atomically) and return the line count of each, by file stem (``{"train.de-en": 2000, ...}``). The
    directions of a split come in the order they first appear in it."""
    counts = {}
    for split, data in splits.items():
        for direction, part in split_by_direction(data).items():
            counts.update(write_aligned_splits({f"{split}.{direction_name(direction)}": part}, folder, direction))
    return counts


def data_file_names(name: str) -> tuple[str, str]:
    """The two files that ``write_data_folder`` wrote for ``name``, one of its counts' keys: ``test`` ->
    ``(test.src, test.tgt)``; ``test.de-en`` -> ``(test.de-en.de, test.de-en.en)``."""
    if "." not in name:
        return f"{name}.{SUFFIXES[0]}", f"{name}.{SUFFIXES[1]}"
    source, target = name.split(".", 1)[1].split("-", 1)
    return f"{name}.{source}", f"{name}.{target}"


def _one_line(text: str, split: str, line: int, side: str) -> str:
    if "\n" in text or "\r" in text:
        raise EncdecError(f"Pair {line} of the {split!r} split (line {line} of its files) holds a line break in its "
                          f"{side}; aligned text files cannot keep it. Remove the line breaks from the data first.")
    return text


def write_data_folder(spec: DataSpec, output: str | os.PathLike, overwrite: bool = False,
                      inputs: Sequence[str | os.PathLike] = ()) -> dict[str, int]:
    """Every split of ``spec`` (a run config's ``data`` section) as ``output/{split}.src`` and ``{split}.tgt``;
    returns each split's line count. Multilingual data (``spec.multilingual``) is written a direction at a time
    (``write_direction_splits``: ``output/{split}.{src}-{tgt}.{src}``, ``.{tgt}``); the counts are then by file stem
    (``data_file_names`` gives the two files of each).

    The folder is written beside ``output`` and renamed to it once every split is written: a refusal (a line break
    in a sentence) or an interruption leaves the old folder as it was. An existing non-empty ``output`` is replaced
    only with ``overwrite``, and never when it is or holds the working folder, the data's own files or one of
    ``inputs`` (the run config).
    """
    output = refuse_existing(output, overwrite, "output folder", folder=True)
    _refuse_replacing_inputs(spec, output, inputs)
    splits = load_data(spec)
    multilingual = all(set(MULTILINGUAL_COLUMNS) <= set(data.column_names) for data in splits.values())
    write = write_direction_splits if multilingual else write_aligned_splits
    return replace_folder(lambda staging: write(splits, staging), output)


def _refuse_replacing_inputs(spec: DataSpec, output: Path, inputs: Sequence[str | os.PathLike]) -> None:
    """``output`` may not be the working folder, the data folder, or a folder that holds the working folder, the
    data's files or ``inputs``: replacing it would delete them."""
    inputs = [*inputs, *([spec.data_dir] if spec.data_dir else []), *(spec.pair_dirs or {}).values()]
    for files in (spec.files or {}).values():
        inputs += [files] if isinstance(files, str | os.PathLike) else list(files)
    target, here = output.resolve(), Path.cwd().resolve()
    if target == here or target in here.parents:
        raise OverwriteError(f"--output {output} is the folder you run in, or holds it; the split files go into a new "
                             "folder of their own (replacing this one would delete everything in it). Choose another "
                             "--output path, e.g. data/dates.")
    for path in map(Path, inputs):
        if target == path.resolve() or target in path.resolve().parents:
            raise OverwriteError(f"--output {output} holds the input {path}; writing there would destroy it. Choose "
                                 "another --output path.")


__all__ = ["SUFFIXES", "data_file_names", "write_aligned_splits", "write_data_folder", "write_direction_splits"]
