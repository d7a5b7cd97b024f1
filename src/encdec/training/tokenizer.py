"""The run's tokenizer (configured, saved by a resumed run, reused from the cache, or trained on the training split)
and the tokenized splits."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from datasets import DatasetDict

from ..data import DataSpec, tokenize_dataset, trained_tokenizer_folder
from ..io_utils import publish_folder
from ..processes import process_state
from ..tokenization import load_tokenizer, train_tokenizer
from .config import RunConfig, TrainingSettings
from .run_folder import TOKENIZER_SUBDIR

logger = logging.getLogger(__name__)


def training_texts(train_split: Any, batch_size: int = 10_000) -> Iterator[str]:
    """Every source, then every target sentence of the training split, read batch by batch from its memory-mapped
    columns (a tokenizer is trained on them without holding the corpus as a list)."""
    for column in ("source", "target"):
        for batch in train_split.select_columns([column]).iter(batch_size=batch_size):
            yield from batch[column]


def get_tokenizer(config: RunConfig, train_split: Any, output_dir: Path):
    """Load the configured tokenizer, reuse the one a resumed run saved or an earlier run trained on the same
    split with the same settings (kept in ``data.cache_dir``), or train one on the training split."""
    saved = output_dir / TOKENIZER_SUBDIR
    if config.tokenizer.path:
        return load_tokenizer(config.tokenizer.path)
    state = process_state()
    with state.main_process_first():  # several processes: the main one trains and saves it, the others load it
        if (saved / "tokenizer_config.json").is_file():  # saved whole (publish_folder), or not at all
            return load_tokenizer(saved)
        s = config.tokenizer
        settings = {"vocab_size": s.vocab_size, "algorithm": s.algorithm, "pre_tokenizer": s.pre_tokenizer,
                    "min_frequency": s.min_frequency,
                    "model_max_length": max(config.training.max_source_length, config.training.max_target_length)}
        cached = trained_tokenizer_folder(train_split, settings, config.data.cache_dir)
        if (cached / "tokenizer.json").is_file():
            logger.info("tokenizer: reused %s (trained on this training split with these settings)", cached)
            tokenizer = load_tokenizer(cached)
        else:
            tokenizer = train_tokenizer(training_texts(train_split), **settings)
            publish_folder(tokenizer.save_pretrained, cached)
        if state.num_processes > 1 and not (saved / "tokenizer_config.json").is_file():
            publish_folder(tokenizer.save_pretrained, saved)
    return tokenizer  # one process: train() saves it to <output_dir>/tokenizer once the run is set up


def tokenize_splits(datasets: DatasetDict, tokenizer, settings: TrainingSettings, data: DataSpec | None = None
                    ) -> tuple[DatasetDict, dict]:
    """Over-long training pairs are filtered (or truncated, per ``overlong``); evaluation splits are only ever
    truncated, so BLEU is always computed on every validation and test sentence. Tokenized on ``data.num_proc``
    processes and cached in ``data.cache_dir`` (``encdec.data.tokenizing``)."""
    lengths = (settings.max_source_length, settings.max_target_length)
    data = data or DataSpec()
    where = {"num_proc": data.num_proc, "cache_dir": data.cache_dir}
    train, counts = tokenize_dataset(DatasetDict(train=datasets["train"]), tokenizer, *lengths,
                                     overlong=settings.overlong, **where)
    others = DatasetDict({name: split for name, split in datasets.items() if name != "train"})
    if others:
        evaluated, eval_counts = tokenize_dataset(others, tokenizer, *lengths, overlong="truncate", **where)
        train.update(evaluated)
        counts.update(eval_counts)
    return train, counts
