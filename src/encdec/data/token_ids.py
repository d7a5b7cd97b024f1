"""Text pairs -> ``input_ids``, ``attention_mask`` and ``labels`` for ``DataCollatorForSeq2Seq``, in parallel and
cached.

``tokenize_dataset`` maps each split with ``datasets`` on ``num_proc`` processes and keeps the result in a cache
folder keyed by the split's data (its ``datasets`` fingerprint: for files, their path, size and modification time),
the tokenizer (its serialised form), the length limits and the over-long policy. A rerun with the same key (a
resumed run, a second seed, another recipe on the same data and tokenizer) loads the memory-mapped result instead of
tokenizing again; a changed file or tokenizer gives a new key.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import datasets
import pyarrow.compute as pc
from datasets import Dataset, DatasetDict

from ..errors import EncdecError
from ..io_utils import publish_folder

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

logger = logging.getLogger(__name__)

OVERLONG = ("filter", "truncate")


def _truncate(ids: list[int], max_length: int, eos_token_id: int | None) -> list[int]:
    """Cut ``ids`` to ``max_length``, keeping a final ``</s>`` (as the tokenizer's own truncation does)."""
    if ids and ids[-1] == eos_token_id:
        return ids[:max_length - 1] + [eos_token_id]
    return ids[:max_length]


def _encode_by_language(tokenizer: Any, batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
    """A multilingual batch encoded as its tokenizer encodes one direction (``__SRC__ source </s>``, labels
    ``__TGT__ target </s>``): the rows of each (source language, target language) pair in one call with that pair's
    ``src_lang``/``tgt_lang``; the tokenizer's languages are restored afterwards."""
    groups: dict[tuple[str, str], list[int]] = {}
    for row, direction in enumerate(zip(batch["source_lang"], batch["target_lang"], strict=True)):
        groups.setdefault(direction, []).append(row)
    input_ids: list[Any] = [None] * len(batch["source"])
    labels: list[Any] = [None] * len(batch["source"])
    kept = tokenizer.src_lang, tokenizer.tgt_lang
    try:
        for (source_lang, target_lang), rows in groups.items():
            tokenizer.src_lang, tokenizer.tgt_lang = source_lang, target_lang
            encoded = tokenizer([batch["source"][i] for i in rows], text_target=[batch["target"][i] for i in rows],
                                verbose=False)
            for i, ids, target in zip(rows, encoded["input_ids"], encoded["labels"], strict=True):
                input_ids[i], labels[i] = ids, target
    finally:
        tokenizer.src_lang, tokenizer.tgt_lang = kept
    return {"input_ids": input_ids, "labels": labels}


def _encode_batch(batch: dict[str, list[str]], tokenizer: PreTrainedTokenizerBase, max_source_length: int,
                  max_target_length: int, truncate: bool) -> dict[str, list]:
    """Tokenize a batch of pairs (a multilingual batch with each row's language tokens, ``_encode_by_language``); an
    over-long pair is dropped, or truncated and marked in ``truncated``."""
    if "target_lang" in batch:
        encoded = _encode_by_language(tokenizer, batch)
    else:
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


CACHE_VERSION = 1  # part of every cache key: raise it when what a tokenized split holds changes
ONE_PROCESS_BELOW = 50_000  # pairs: a smaller split is tokenized in one process (starting workers costs more)


def default_cache_dir() -> Path:
    """Where tokenized splits are kept: ``encdec-tokenized`` in ``datasets``' cache (``HF_DATASETS_CACHE``)."""
    return Path(datasets.config.HF_DATASETS_CACHE) / "encdec-tokenized"


def tokenizer_identity(tokenizer: PreTrainedTokenizerBase) -> str:
    """The SHA-256 of what decides a tokenizer's ids: its serialised ``tokenizers`` pipeline (vocabulary, merges,
    normaliser, pre-tokenizer, post-processor) and its special ids."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    specials = {name: getattr(tokenizer, name, None) for name in ("bos_token_id", "eos_token_id", "pad_token_id",
                                                                    "unk_token_id")}
    return hashlib.sha256((text + json.dumps(specials, sort_keys=True)).encode("utf-8")).hexdigest()


def cache_key(data: Dataset, tokenizer_id: str, settings: dict[str, Any]) -> str:
    """The cache folder name of one tokenized split: a hash of the split's ``datasets`` fingerprint (for files: their
    path, size and modification time), the tokenizer and the length settings."""
    record = {"version": CACHE_VERSION, "data": data._fingerprint, "tokenizer": tokenizer_id, **settings}
    return hashlib.sha256(json.dumps(record, sort_keys=True).encode("utf-8")).hexdigest()[:32]


def _processes(num_proc: int | None, pairs: int) -> int:
    if num_proc is not None:
        return num_proc
    return 1 if pairs < ONE_PROCESS_BELOW else max(1, os.cpu_count() or 1)


def tokenize_dataset(
    dataset: DatasetDict,
    tokenizer: PreTrainedTokenizerBase,
    max_source_length: int = 128,
    max_target_length: int = 128,
    overlong: str = "filter",
    num_proc: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
) -> tuple[DatasetDict, dict[str, dict[str, int]]]:
    """``source``/``target`` text -> ``input_ids``, ``attention_mask`` and ``labels`` (each ending with ``</s>``;
    for multilingual splits, ``source_lang``/``target_lang`` columns too, each starting with its language token).

    A pair whose source is longer than ``max_source_length`` tokens or whose target is longer than
    ``max_target_length`` is dropped (``overlong="filter"``) or cut to the limits (``"truncate"``). The filter
    applies to every split: a benchmark's test set should fit the limits, or use ``"truncate"``.

    :param num_proc: processes that tokenize (``datasets.map``); None: every core for a split of 50,000 pairs or
        more, else one
    :param cache_dir: where tokenized splits are kept (default ``default_cache_dir()``); a split whose key (see the
        module docstring) is there is loaded, memory-mapped, instead of tokenized
    :param use_cache: False tokenizes in memory and keeps nothing
    :return: the tokenized splits (text columns removed), and per split the counts
        ``{"total", "kept", "filtered", "truncated"}``
    :raises EncdecError: filtering leaves a split empty; multilingual splits, a tokenizer without their languages
    """
    settings = {"max_source_length": max_source_length, "max_target_length": max_target_length, "overlong": overlong}
    _check(settings, num_proc)
    languages = _check_languages(dataset, tokenizer)
    encode = functools.partial(_encode_batch, tokenizer=tokenizer, max_source_length=max_source_length,
                               max_target_length=max_target_length, truncate=overlong == "truncate")
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    tokenizer_id = tokenizer_identity(tokenizer) if use_cache else ""
    tokenized, report = {}, {}
    for split, data in dataset.items():
        cached = folder / cache_key(data, tokenizer_id, {**settings, **languages}) if use_cache else None
        if cached is not None and (cached / "report.json").is_file():
            logger.info("tokenized %s split: reused %s", split, cached)
            tokenized[split] = Dataset.load_from_disk(str(cached))
            report[split] = json.loads((cached / "report.json").read_text(encoding="utf-8"))
            continue
        if cached is None:
            tokenized[split], report[split] = _tokenize(data, encode, split, num_proc, settings, keep_in_memory=True)
            continue
        cached.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cached.parent, prefix=".work.") as work:  # map's files, dropped after
            encoded, report[split] = _tokenize(data, encode, split, num_proc, settings,
                                               cache_file_name=str(Path(work) / "tokens.arrow"))
            tokenized[split] = _keep(encoded, report[split], cached)
    return DatasetDict(tokenized), report


def _check(settings: dict[str, Any], num_proc: int | None) -> None:
    if settings["overlong"] not in OVERLONG:
        raise EncdecError(f"`overlong` must be one of {list(OVERLONG)}, got {settings['overlong']!r}.")
    for name in ("max_source_length", "max_target_length"):
        if settings[name] < 2:
            raise EncdecError(f"`{name}` must be >= 2 (one token and </s>), got {settings[name]}.")
    if num_proc is not None and num_proc < 1:
        raise EncdecError(f"`num_proc` (data.num_proc) must be at least 1, got {num_proc}.")


def _check_languages(dataset: DatasetDict, tokenizer: Any) -> dict[str, Any]:
    """Multilingual splits (``source_lang``/``target_lang`` columns) need a multilingual tokenizer that knows every
    language in them: each source gets its language token, each target (the labels) its own. Returns what the cache
    key adds for them (the tokenizer's language tokens), ``{}`` for bilingual splits."""
    if not any("target_lang" in data.column_names for data in dataset.values()):
        return {}
    known = getattr(tokenizer, "language_tokens", None)
    found = sorted({lang for data in dataset.values() for column in ("source_lang", "target_lang")
                    if column in data.column_names for lang in data.unique(column)})
    if not known:
        raise EncdecError(f"This data has several directions (languages {', '.join(found)}), and the tokenizer is "
                          "bilingual (it has no language tokens): leave tokenizer.path null to train a joint one with "
                          "a token per language, or give a multilingual tokenizer.")
    unknown = [lang for lang in found if lang not in known]
    if unknown:
        raise EncdecError(f"The data has the language {unknown[0]!r}, which the tokenizer lacks (its languages: "
                          f"{', '.join(known)}); give a tokenizer with every language of the data, or drop that "
                          "direction.")
    return {"language_tokens": dict(known)}


def _tokenize(data: Dataset, encode: Any, split: str, num_proc: int | None, settings: dict[str, Any],
              **where: Any) -> tuple[Dataset, dict[str, int]]:
    """One split tokenized by ``datasets.map`` on ``num_proc`` processes, and its counts."""
    encoded = data.map(encode, batched=True, remove_columns=data.column_names, desc=f"Tokenizing {split}",
                       num_proc=_processes(num_proc, len(data)), load_from_cache_file=False, **where)
    if len(encoded) == 0:
        raise EncdecError(
            f"Every pair of the {split!r} split is longer than max_source_length={settings['max_source_length']} or "
            f"max_target_length={settings['max_target_length']} tokens, so none is left; raise the max lengths or "
            "use overlong='truncate'."
        )
    truncated = pc.sum(encoded.data.column("truncated")).as_py() or 0
    report = {"total": len(data), "kept": len(encoded), "filtered": len(data) - len(encoded), "truncated": truncated}
    return encoded.remove_columns("truncated"), report


def _keep(encoded: Dataset, report: dict[str, int], folder: Path) -> Dataset:
    """Save a tokenized split into the cache ``folder`` and return it, memory-mapped from there."""

    def save(tmp: Path) -> None:
        encoded.save_to_disk(str(tmp))
        (tmp / "report.json").write_text(json.dumps(report), encoding="utf-8")

    publish_folder(save, folder)
    return Dataset.load_from_disk(str(folder))


def trained_tokenizer_folder(data: Dataset, settings: dict[str, Any], cache_dir: str | os.PathLike | None = None
                             ) -> Path:
    """Where the tokenizer trained on the split ``data`` with the trainer ``settings`` is kept for reruns:
    ``tokenizers/<hash>`` in the cache folder, the hash of the split's fingerprint (for files: their path, size and
    modification time) and the settings. Training one takes minutes on millions of pairs, and comes out the same."""
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    record = {"version": CACHE_VERSION, "data": data._fingerprint, **settings}
    return folder / "tokenizers" / hashlib.sha256(json.dumps(record, sort_keys=True).encode("utf-8")).hexdigest()[:32]


def format_report(report: dict[str, dict[str, int]]) -> str:
    """One line per split, e.g. ``train: 28990 of 29000 pairs kept, 10 filtered, 0 truncated (over-long)``."""
    return "\n".join(
        f"{split}: {c['kept']} of {c['total']} pairs kept, {c['filtered']} filtered, {c['truncated']} truncated "
        "(over-long)" for split, c in report.items()
    )
