"""Batches by tokens (``training.max_tokens``): as many pairs as fit a token budget, not a fixed number of sentences.

A batch of long sentences costs several times one of short ones, so a fixed sentence count leaves most batches
small and lets memory peak on the longest. Every NMT toolkit batches by tokens instead: fairseq ``--max-tokens``
(length-sorted, batches shuffled), OpenNMT ``batch_type: tokens``, Marian ``--mini-batch-fit``, Joey NMT
``batch_type: token``. transformers' Trainer has ``group_by_length`` only (it declined ``max_tokens``:
transformers#21325), so this sampler is written here.

``LengthGroupedPairs`` is the Trainer's own ``group_by_length`` sampler fed from the Arrow length column: transformers'
reads every example in Python to learn its length (a minute and a growing share of memory at 5M pairs).

``TokenBatchSampler`` does what fairseq does. Each epoch it orders the pairs by length (ties in a seeded random
order), cuts that order into batches whose padded size, the longest source or target times the number of pairs,
stays within ``max_tokens``, and shuffles the batches. The same seed and epoch give the same batches on every
process. Under ``accelerate`` (DDP, FSDP) each process takes every N-th batch of that list, and the list is padded
with its first batches to a multiple of N, so that all processes step together. The Trainer passes it as the
DataLoader's ``batch_sampler``, takes it as already split among processes (it is a ``BatchRebalanceSampler``, the
Trainer's kind of rank-aware batch sampler), and on resume skips the batches already trained; ``EncdecTrainer`` sets
its epoch at the start of each (``SamplerEpoch``), including a resumed one.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow.compute as pc
import torch
from datasets import Dataset
from transformers.trainer_pt_utils import BatchRebalanceSampler, LengthGroupedSampler

from ..errors import EncdecError


def column_lengths(dataset: Dataset, column: str) -> np.ndarray:
    """Each row's length of a list column (``input_ids``, ``labels``), read from Arrow without building Python
    lists (or copying the rows of a ``select``-ed dataset)."""
    lengths = pc.list_value_length(dataset.data.table.column(column)).to_numpy(zero_copy_only=False)
    lengths = lengths.astype(np.int64)
    if dataset._indices is not None:  # a view through an indices mapping: its rows' lengths, in its order
        lengths = lengths[dataset._indices.column(0).to_numpy(zero_copy_only=False)]
    return lengths


def pair_lengths(dataset: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """Each pair's source (``input_ids``) and target (``labels``) length in tokens (``column_lengths``)."""
    return column_lengths(dataset, "input_ids"), column_lengths(dataset, "labels")


def length_grouped_order(lengths: np.ndarray, batch_size: int, generator: torch.Generator | None = None
                         ) -> np.ndarray:
    """transformers' ``get_length_grouped_indices`` in NumPy, index for index: a random permutation (torch's, so the
    Trainer's seeding holds) cut into mega-batches of ``min(50, n // (4 x batch_size))`` batches, each sorted by
    length, longest first, then the longest pair of all swapped to the front (an out-of-memory error comes at once).
    The original builds Python lists of every index: about 36 bytes a pair, 180 MB at 5M pairs."""
    mult = max(min(len(lengths) // (batch_size * 4), 50), 1)
    size = mult * batch_size
    order = torch.randperm(len(lengths), generator=generator).numpy()
    longest, longest_at = -1, 0
    for start in range(0, len(order), size):
        mega = order[start:start + size]
        mega[:] = mega[np.argsort(-lengths[mega], kind="stable")]  # stable, like sorted(reverse=True)
        if lengths[mega[0]] > longest:  # the first of equal maxima, like torch.argmax
            longest, longest_at = int(lengths[mega[0]]), start
    order[0], order[longest_at] = order[longest_at], order[0]
    return order


class LengthGroupedPairs(LengthGroupedSampler):
    """The Trainer's ``group_by_length`` sampler (``LengthGroupedSampler``, same order for the same seed) with the
    source lengths given as an array (``pair_lengths``) and the order computed in NumPy (``length_grouped_order``).

    :param batch_size: pairs per optimizer step and process (batch size x gradient accumulation)
    :param lengths: each pair's source length
    """

    def __init__(self, batch_size: int, lengths: np.ndarray, generator: torch.Generator | None = None) -> None:
        # LengthGroupedSampler.__init__ would turn the lengths into a Python list: not called
        self.batch_size, self.lengths, self.generator = batch_size, lengths, generator

    def __iter__(self) -> Iterator[int]:
        order = length_grouped_order(self.lengths, self.batch_size, self.generator)
        for start in range(0, len(order), 65_536):  # Python ints a slice at a time, not a list of the corpus
            yield from order[start:start + 65_536].tolist()


def token_batches(lengths: np.ndarray, max_tokens: int, seed: int, epoch: int) -> list[np.ndarray]:
    """The batches (arrays of pair indices) of one epoch: the pairs sorted by length (equal lengths in a random
    order of ``seed`` and ``epoch``), packed greedily so that longest x count <= ``max_tokens``, then shuffled."""
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(lengths))
    order = order[np.argsort(lengths[order], kind="stable")]
    sorted_lengths = lengths[order]
    batches, start = [], 0
    while start < len(order):
        # sorted ascending, so the batch's longest pair is its last: the largest end with length[end-1] x count fits
        count = int(max_tokens // sorted_lengths[start])
        end = min(start + count, len(order))
        while end > start + 1 and sorted_lengths[end - 1] * (end - start) > max_tokens:
            end = start + int(max_tokens // sorted_lengths[end - 1])
        batches.append(order[start:end])
        start = end
    return [batches[i] for i in rng.permutation(len(batches))]


class TokenBatchSampler(BatchRebalanceSampler):
    """Batches of at most ``max_tokens`` padded tokens for process ``rank`` of ``world_size`` (see the module
    docstring).

    :param lengths: each pair's length, the longer of source and target (``np.maximum(*pair_lengths(dataset))``)
    :param max_tokens: the budget of one batch, padding included; it must hold the longest pair
    :param seed: the batch order's seed (``training.seed``)
    """

    def __init__(self, lengths: np.ndarray, max_tokens: int, seed: int = 0, world_size: int = 1, rank: int = 0
                 ) -> None:  # BatchRebalanceSampler's own __init__ is its own algorithm: not called
        if len(lengths) == 0:
            raise EncdecError("The training split has no pairs to batch.")
        longest = int(lengths.max())
        if max_tokens < longest:
            raise EncdecError(f"training.max_tokens={max_tokens} cannot hold the longest training pair ({longest} "
                              f"tokens); raise max_tokens to {longest} or more, or lower training.max_source_length "
                              "and max_target_length.")
        self.lengths, self.max_tokens, self.seed = lengths, max_tokens, seed
        self.world_size, self.rank, self.epoch = world_size, rank, 0
        self._first = token_batches(lengths, max_tokens, seed, 0)  # epoch 0's, built once (its count holds for all)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    @property
    def sampler(self) -> TokenBatchSampler:
        """Itself: accelerate's ``DataLoaderShard.set_epoch`` sets the epoch of a batch sampler it has wrapped for
        several processes through the wrapped one's ``sampler``."""
        return self

    def __len__(self) -> int:
        return -(-len(self._first) // self.world_size)  # batches per process

    def batches(self, epoch: int) -> list[np.ndarray]:
        """Every process's batches of ``epoch``, before they are split among processes."""
        return self._first if epoch == 0 else token_batches(self.lengths, self.max_tokens, self.seed, epoch)

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches(self.epoch)
        padded = batches + batches[:len(self) * self.world_size - len(batches)]  # every process steps alike
        for batch in padded[self.rank::self.world_size]:
            yield batch.tolist()


def padding_share(lengths: np.ndarray, batches: list[np.ndarray]) -> float:
    """The share of a batch plan's token slots (each batch padded to its longest) that are padding."""
    slots = sum(int(lengths[batch].max()) * len(batch) for batch in batches)
    return 1 - sum(int(lengths[batch].sum()) for batch in batches) / slots


def plan_summary(source: np.ndarray, target: np.ndarray, batches: list[np.ndarray], per_step: int = 1) -> str:
    """One line on an epoch's batches: how many, pairs per batch, target tokens per optimizer step (``per_step``
    batches: gradient accumulation x processes), and the padding share of the source and target tensors."""
    pairs = np.mean([len(batch) for batch in batches])
    tokens = np.mean([int(target[batch].sum()) for batch in batches]) * per_step
    return (f"{len(batches):,} batches an epoch, {pairs:.1f} pairs a batch, {tokens:,.0f} target tokens a step on "
            f"average; padding {padding_share(source, batches):.1%} of source and {padding_share(target, batches):.1%}"
            " of target tokens")


__all__ = ["LengthGroupedPairs", "TokenBatchSampler", "column_lengths", "length_grouped_order", "padding_share",
           "pair_lengths", "plan_summary", "token_batches"]
