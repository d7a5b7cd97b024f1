"""The batching section: batches by tokens (`training.max_tokens`) against fixed 64-pair batches grouped by length
(`group_by_length`, the Trainer's own), on Multi30k's training split with the `transformer-small` recipe's model.

Both batch plans cover one epoch of the same tokenized split (the recipe's tokenizer and length limits). The padding
shares and the pairs and target tokens per batch are exact, counted over the whole epoch. The speed is measured on a
sample: the same model (one initialisation, copied) takes training steps (forward, backward, AdamW) on batches drawn
evenly at random from each epoch, collated by `DataCollatorForSeq2Seq` as in training, the two plans timed in
interleaved blocks (see `common.time_interleaved`). Target tokens/s is the sampled batches' real (non-padding) target
tokens over their summed step time: what a run with that plan learns from per second.

    python scripts/benchmark.py --sections batching
"""

from __future__ import annotations

import copy
import logging
import tempfile
from pathlib import Path

import numpy as np
import torch
from transformers import AutoModelForSeq2SeqLM, DataCollatorForSeq2Seq

from encdec.data import LengthGroupedPairs, load_data, padding_share, pair_lengths, token_batches
from encdec.training import build_model_config, get_tokenizer, load_run_config, tokenize_splits

from .common import BenchmarkSettings, Section, time_interleaved
from .corpus import MULTI30K_DATA

logger = logging.getLogger(__name__)

RECIPE = Path("configs/multi30k-transformer-small.yaml")
FIXED_BATCH = 64  # pairs a batch with group_by_length (the recipe's per_device_train_batch_size)
MAX_TOKENS = 1200  # padded tokens a batch with max_tokens
SAMPLED = 48  # timed steps per plan
WARMUP = 2  # un-timed steps per plan


def plans(source: np.ndarray, target: np.ndarray, seed: int) -> dict[str, list[np.ndarray]]:
    """One epoch's batches under each plan, as the Trainer would draw them for ``seed``."""
    torch.manual_seed(seed)  # LengthGroupedSampler draws from torch's global generator, which the Trainer seeds
    order = np.fromiter(LengthGroupedPairs(FIXED_BATCH, source), dtype=np.int64, count=len(source))
    fixed = [order[i:i + FIXED_BATCH] for i in range(0, len(order), FIXED_BATCH)]
    by_tokens = token_batches(np.maximum(source, target), MAX_TOKENS, seed, 0)
    return {f"{FIXED_BATCH} pairs, group_by_length": fixed, f"max_tokens {MAX_TOKENS}": by_tokens}


def make_steps(model, collate, split, batches: list[np.ndarray], learning_rate: float):
    """A training step on the next of ``batches`` at each call; returns the call and the target tokens it saw."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    model.train()
    seen: list[int] = []

    def step() -> None:
        batch = collate([split[int(i)] for i in batches[len(seen) % len(batches)]])
        seen.append(int((batch["labels"] != -100).sum()))
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step, seen


def batching(settings: BenchmarkSettings) -> Section | None:
    if not (MULTI30K_DATA / "train.de").is_file():
        logger.info("batching: skipped (no Multi30k in %s)", MULTI30K_DATA)
        return None
    torch.set_num_threads(settings.threads)
    config = load_run_config(RECIPE, ["--data.data_dir", str(MULTI30K_DATA.resolve()), "--data.splits",
                                      "{train: train}"])
    split = load_data(config.data)["train"]
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = get_tokenizer(config, split, Path(tmp))
    train = tokenize_splits({"train": split}, tokenizer, config.training, config.data)[0]["train"]
    source, target = pair_lengths(train)
    epoch = plans(source, target, config.training.seed)
    torch.manual_seed(settings.seed)
    model = AutoModelForSeq2SeqLM.from_config(build_model_config(config, tokenizer))
    collate = DataCollatorForSeq2Seq(tokenizer, model=model)
    rng = np.random.default_rng(settings.seed)
    calls, seen = [], []
    for batches in epoch.values():
        sample = [batches[i] for i in rng.choice(len(batches), SAMPLED + WARMUP, replace=False)]
        step, tokens = make_steps(copy.deepcopy(model), collate, train, sample, config.training.learning_rate)
        calls.append(step)
        seen.append(tokens)
    times = time_interleaved(calls, WARMUP, SAMPLED, block=4)
    rows = []
    for (name, batches), tokens, seconds in zip(epoch.items(), seen, times, strict=True):
        rows.append((name, batches, source, target, sum(tokens[WARMUP:]) / sum(seconds), np.median(seconds)))
    return Section("Batches by tokens", method_text(len(train)), table(rows))


def method_text(pairs: int) -> str:
    return (f"Multi30k's training split ({pairs:,} pairs after the recipe's length filter), tokenized with the "
            f"`{RECIPE.name}` recipe's tokenizer, and its model (d_model 256, 3 + 3 layers). The padding shares, "
            "pairs and target tokens per batch count one whole epoch of each plan. The speed is the same model "
            f"training on {SAMPLED} batches drawn at random from each epoch, timed interleaved in blocks of 4, one "
            "thread; target tokens/s counts real target tokens (no padding).")


def table(rows: list[tuple]) -> str:
    lines = ["| Batches | Batches an epoch | Pairs a batch | Target tokens a batch | Padding, source | "
             "Padding, target | Median s a step | Target tokens/s | x fixed |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base = rows[0][4]
    for name, batches, source, target, speed, median in rows:
        pairs = np.mean([len(batch) for batch in batches])
        tokens = np.mean([int(target[batch].sum()) for batch in batches])
        lines.append(f"| {name} | {len(batches):,} | {pairs:.1f} | {tokens:,.0f} | "
                     f"{padding_share(source, batches):.1%} | {padding_share(target, batches):.1%} | {median:.2f} | "
                     f"{speed:,.0f} | {speed / base:.2f} |")
    return "\n".join(lines)


__all__ = ["batching"]
