"""Multilingual data: language codes, translation directions, and the operations on a split that holds several.

A multilingual split has four string columns, ``source``, ``target``, ``source_lang`` and ``target_lang`` (a
language is a short code such as ``de``; bilingual data keeps ``source``/``target`` only). A direction is a
``(source_lang, target_lang)`` pair, written ``de-en`` as fairseq writes it. Here:

- ``parse_directions``: ``"de-en,fr-en"``, a list, or every direction between some languages, checked;
- ``split_by_direction``: one dataset per direction, as views of the split (no copy);
- ``direction_probabilities`` and ``sample_by_temperature``: the directions sampled with a temperature
  (Arivazhagan et al. 2019), so that a small direction is not drowned by a large one;
- ``balanced_sample``: the same number of distinct sentences per language, to train a joint tokenizer on.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence

import numpy as np
from datasets import Dataset, Features, Value, interleave_datasets

from ..errors import EncdecError

MULTILINGUAL_COLUMNS = ("source", "target", "source_lang", "target_lang")
MULTILINGUAL_FEATURES = Features({column: Value("string") for column in MULTILINGUAL_COLUMNS})
STOPPING_STRATEGIES = ("all_exhausted", "first_exhausted", "all_exhausted_without_replacement")
READ_BATCH = 10_000  # rows read from the Arrow cache at a time

Direction = tuple[str, str]


def direction_name(direction: Direction) -> str:
    """``("de", "en")`` -> ``"de-en"``."""
    return f"{direction[0]}-{direction[1]}"


def every_direction(languages: Sequence[str]) -> list[Direction]:
    """Every ordered pair of two different languages, in the languages' order: 4 languages, 12 directions."""
    return [(source, target) for source in languages for target in languages if source != target]


def _read_direction(item: str | Sequence[str], languages: Sequence[str], where: str) -> Direction:
    """One direction, ``"de-en"`` or ``("de", "en")``. A code may hold a hyphen itself (``pt-BR-en``): the
    direction is read at the one hyphen that leaves a known language on each side."""
    listed = ", ".join(languages)
    if isinstance(item, str):
        cuts = [(item[:i], item[i + 1:]) for i, char in enumerate(item) if char == "-"]
        known = [cut for cut in cuts if cut[0] in languages and cut[1] in languages]
        if len(known) != 1:
            unknown = next((lang for cut in cuts[:1] for lang in cut if lang not in languages), None)
            why = f"names the language {unknown!r}, which is not among" if unknown else "is not SOURCE-TARGET of"
            raise EncdecError(f"{where}: the direction {item!r} {why} the languages {listed}; write directions "
                              "as SOURCE-TARGET, e.g. de-en.")
        return known[0]
    if len(item) != 2 or any(lang not in languages for lang in item):
        raise EncdecError(f"{where}: the direction {item!r} must be two of the languages {listed}, e.g. de-en.")
    return item[0], item[1]


def parse_directions(directions: str | Iterable[str | Sequence[str]] | None, languages: Sequence[str],
                     where: str = "directions") -> list[Direction]:
    """The directions asked for, checked against ``languages``.

    :param directions: ``None`` or ``"all"``: every direction between ``languages``; ``"de-en,fr-en"``; or a list
        of ``"de-en"`` strings or ``(source, target)`` pairs. The order given is kept.
    :param where: what the message names (e.g. ``data.directions``)
    :raises EncdecError: for an unknown language, a language into itself, a repeated direction or none at all
    """
    if directions is None or directions == "all":
        chosen = every_direction(languages)
    else:
        items = [part.strip() for part in directions.split(",")] if isinstance(directions, str) else directions
        chosen = [_read_direction(item, languages, where) for item in items]
    if not chosen:
        raise EncdecError(f"{where}: no directions; name at least one, e.g. de-en (languages: "
                          f"{', '.join(languages) or 'none'}).")
    for index, (source, target) in enumerate(chosen):
        if source == target:
            raise EncdecError(f"{where}: the direction {source}-{target} translates {source!r} into itself; name "
                              "two different languages.")
        if (source, target) in chosen[:index]:
            raise EncdecError(f"{where}: the direction {source}-{target} is named twice; name it once.")
    return chosen


def direction_rows(dataset: Dataset) -> dict[Direction, np.ndarray]:
    """The row numbers of each direction of a multilingual split, in the order the directions first appear. Only
    the two language columns are read, a batch at a time."""
    missing = [column for column in MULTILINGUAL_COLUMNS if column not in dataset.column_names]
    if missing:
        raise EncdecError(f"The split has no column {', '.join(map(repr, missing))}: a multilingual split has the "
                          f"columns {', '.join(MULTILINGUAL_COLUMNS)}.")
    rows: dict[Direction, list[np.ndarray]] = {}
    start = 0
    for batch in dataset.select_columns(["source_lang", "target_lang"]).iter(batch_size=READ_BATCH):
        keys = np.asarray([f"{s}\t{t}" for s, t in zip(batch["source_lang"], batch["target_lang"], strict=True)])
        found, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        for index in np.argsort(first):  # the batch's directions in the order they appear
            source, target = str(found[index]).split("\t")
            rows.setdefault((source, target), []).append(np.flatnonzero(inverse == index) + start)
        start += len(keys)
    return {direction: np.concatenate(parts) for direction, parts in rows.items()}


def split_by_direction(dataset: Dataset) -> dict[Direction, Dataset]:
    """One dataset per direction of a multilingual split: views of it (``Dataset.select``), not copies."""
    return {direction: dataset.select(rows) for direction, rows in direction_rows(dataset).items()}


def direction_probabilities(counts: Mapping[Direction, int], temperature: float = 5.0) -> dict[Direction, float]:
    """How often each direction is sampled: ``p_d`` proportional to ``(n_d / N) ** (1 / T)`` (Arivazhagan et al.
    2019, "Massively Multilingual Neural Machine Translation in the Wild", section 4.2). ``T = 1`` samples in
    proportion to the data; a larger ``T`` moves towards the uniform distribution, which ``T = inf`` is."""
    if not temperature > 0:
        raise EncdecError(f"The sampling temperature must be > 0 (1: in proportion to the data, inf: uniform), got "
                          f"{temperature}.")
    empty = [direction_name(direction) for direction, count in counts.items() if count <= 0]
    if not counts or empty:
        raise EncdecError(f"Cannot sample directions with no pairs: {', '.join(empty) or 'none given'}.")
    total = sum(counts.values())
    weights = {d: 1.0 if math.isinf(temperature) else (n / total) ** (1 / temperature) for d, n in counts.items()}
    norm = sum(weights.values())
    return {direction: weight / norm for direction, weight in weights.items()}


def sample_by_temperature(dataset: Dataset, temperature: float = 5.0, seed: int = 0,
                          stopping_strategy: str = "all_exhausted") -> Dataset:
    """A multilingual split whose rows are drawn direction by direction with ``direction_probabilities``, by
    ``datasets.interleave_datasets`` (rows are chosen by index, nothing is copied).

    :param stopping_strategy: ``interleave_datasets``' own. ``all_exhausted`` (the default) stops once every pair
        has been drawn: a small direction is seen several times (up-sampled) while the largest is seen about once;
        ``first_exhausted`` stops at the first direction to run out.
    """
    if stopping_strategy not in STOPPING_STRATEGIES:
        raise EncdecError(f"stopping_strategy must be one of {', '.join(STOPPING_STRATEGIES)}, got "
                          f"{stopping_strategy!r}.")
    parts = split_by_direction(dataset)
    probabilities = direction_probabilities({direction: len(part) for direction, part in parts.items()},
                                            temperature)
    return interleave_datasets(list(parts.values()), probabilities=[probabilities[d] for d in parts], seed=seed,
                               stopping_strategy=stopping_strategy)


def _distinct_sentences(dataset: Dataset) -> dict[str, dict[str, None]]:
    """Each language's distinct sentences, source and target sides of every direction together, in the order
    first read."""
    found: dict[str, dict[str, None]] = {}
    for batch in dataset.select_columns(list(MULTILINGUAL_COLUMNS)).iter(batch_size=READ_BATCH):
        for side in ("source", "target"):
            for text, language in zip(batch[side], batch[f"{side}_lang"], strict=True):
                found.setdefault(language, {})[text] = None
    return found


def balanced_sample(dataset: Dataset, per_language: int | None = None, seed: int = 0) -> dict[str, list[str]]:
    """The same number of sentences for every language of a multilingual split, to train a joint tokenizer on:
    a large language does not crowd the vocabulary out of a small one (as XLM's and mBART's sampling intend).

    A sentence that several directions share (Multi30k's ``train.en`` is the target of de-en, fr-en and cs-en) is
    counted once. Every language gets ``min(per_language, the fewest distinct sentences of any language)`` of its
    distinct sentences, drawn with ``seed`` and kept in the order they were read; the same split and seed give the
    same sample. Each language's distinct sentences are held in memory while they are counted.
    """
    if per_language is not None and per_language < 1:
        raise EncdecError(f"per_language must be at least 1 (or None for as many as the smallest language has), "
                          f"got {per_language}.")
    found = _distinct_sentences(dataset)
    if not found:
        raise EncdecError("Cannot draw a balanced sample from an empty split.")
    size = min(len(sentences) for sentences in found.values())
    size = size if per_language is None else min(size, per_language)
    sample = {}
    for language in sorted(found):
        sentences = list(found[language])
        keep = sorted(random.Random(f"{seed}:{language}").sample(range(len(sentences)), size))
        sample[language] = [sentences[i] for i in keep]
    return sample


__all__ = ["MULTILINGUAL_COLUMNS", "MULTILINGUAL_FEATURES", "STOPPING_STRATEGIES", "Direction", "balanced_sample",
           "direction_name", "direction_probabilities", "direction_rows", "every_direction", "parse_directions",
           "sample_by_temperature", "split_by_direction"]
