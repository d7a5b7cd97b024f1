"""Training data at corpus scale: memory-mapped loading, the tokenization cache, batches by tokens (``max_tokens``),
and their place in ``encdec train`` (bad settings, resume)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset
from safetensors.torch import load_file
from transformers.trainer_pt_utils import LengthGroupedSampler

from encdec.data import (
    LengthGroupedPairs,
    TokenBatchSampler,
    load_text_pair,
    make_date_pairs,
    pair_lengths,
    token_batches,
    tokenize_dataset,
)
from encdec.data import token_ids as token_ids_module
from encdec.errors import EncdecError, InputFileError
from encdec.tokenization import train_tokenizer
from encdec.training import CHECKPOINT_SUBDIR, load_run_config, train
from encdec.training import run as training_run  # get_tokenizer trains through it
from test_training import run_config


def write_pairs(folder: Path, pairs: list[tuple[str, str]], name: str = "train") -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    source, target = folder / f"{name}.src", folder / f"{name}.tgt"
    source.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    target.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return source, target


@pytest.fixture(scope="module")
def tokenizer():
    pairs = make_date_pairs(300, seed=1)
    return train_tokenizer([s for s, _ in pairs] + [t for _, t in pairs], vocab_size=150, min_frequency=1)


# --- loading ---------------------------------------------------------------------------------------------------------

def test_text_files_are_memory_mapped_not_held_in_python(tmp_path) -> None:
    pairs = make_date_pairs(50, seed=2)
    loaded = load_text_pair(*write_pairs(tmp_path, pairs))["train"]
    assert loaded.cache_files  # read from datasets' Arrow cache on disk
    assert [(row["source"], row["target"]) for row in loaded] == pairs


def test_line_counts_are_compared_before_anything_is_read(tmp_path) -> None:
    source, target = write_pairs(tmp_path, make_date_pairs(5, seed=3))
    target.write_text(target.read_text() + "one more\n")
    with pytest.raises(InputFileError, match=rf"{source}.* has 5 lines but the target file {target} has 6"):
        load_text_pair(source, target)


# --- the tokenization cache ------------------------------------------------------------------------------------------

def test_tokenization_is_cached_and_a_changed_file_is_tokenized_again(tmp_path, tokenizer, monkeypatch) -> None:
    source, target = write_pairs(tmp_path / "data", make_date_pairs(40, seed=4))
    cache = tmp_path / "cache"
    calls = []
    original = token_ids_module._tokenize
    monkeypatch.setattr(token_ids_module, "_tokenize", lambda *a, **k: calls.append(1) or original(*a, **k))

    def tokenize(**settings):
        return tokenize_dataset(load_text_pair(source, target), tokenizer, cache_dir=cache, **settings)

    first, report = tokenize()
    again, report_again = tokenize()
    assert len(calls) == 1 and report_again == report  # the second run loaded the cache
    assert again["train"]["input_ids"] == first["train"]["input_ids"]
    assert again["train"]["labels"] == first["train"]["labels"]
    assert all(Path(f["filename"]).is_relative_to(cache) for f in again["train"].cache_files)

    tokenize(max_source_length=8, overlong="truncate")  # other length settings: another entry
    assert len(calls) == 2
    source.write_text(source.read_text().replace("\n", " extra\n", 1))  # the file changed: tokenized again
    changed, _ = tokenize()
    assert len(calls) == 3
    assert changed["train"]["input_ids"][0] != first["train"]["input_ids"][0]
    assert len([p for p in cache.iterdir() if not p.name.startswith(".")]) == 3
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no work folders left behind


def test_a_rerun_reuses_the_trained_tokenizer_until_the_data_or_its_settings_change(tmp_path, monkeypatch) -> None:
    """Training a tokenizer on millions of pairs takes minutes; a rerun on the same split with the same settings
    (a second seed, a new recipe) loads it from the cache instead, and gets the same ids."""
    source, _ = write_pairs(tmp_path / "data", make_date_pairs(60, seed=9))
    data = {"format": "text", "data_dir": str(tmp_path / "data"), "source_lang": "src", "target_lang": "tgt",
            "splits": {"train": "train"}, "cache_dir": str(tmp_path / "cache")}
    trained = []
    original = training_run.train_tokenizer
    monkeypatch.setattr(training_run, "train_tokenizer", lambda *a, **k: trained.append(1) or original(*a, **k))

    def run(name: str, **tokenizer) -> Path:
        out = tmp_path / name
        path = run_config(tmp_path, "transformer", out, data=data, tokenizer=tokenizer,
                          training={"max_steps": 1, "eval_strategy": "no"})
        train(load_run_config(path))
        return out / "tokenizer" / "tokenizer.json"

    first = run("first")
    assert (run("second").read_text(), len(trained)) == (first.read_text(), 1)  # loaded from the cache
    run("third", vocab_size=100)  # another setting: trained again
    assert len(trained) == 2
    source.write_text(source.read_text().replace("\n", " extra\n", 1))  # the file changed: trained again
    run("fourth")
    assert len(trained) == 3
    assert not [p for p in (tmp_path / "cache" / "tokenizers").iterdir() if p.name.startswith(".")]


def test_several_processes_tokenize_as_one_does(tmp_path, tokenizer) -> None:
    data = load_text_pair(*write_pairs(tmp_path, make_date_pairs(60, seed=5)))
    one, report = tokenize_dataset(data, tokenizer, num_proc=1, use_cache=False)
    two, report_two = tokenize_dataset(data, tokenizer, num_proc=2, use_cache=False)
    assert report == report_two
    assert one["train"]["input_ids"] == two["train"]["input_ids"]
    with pytest.raises(EncdecError, match="num_proc"):
        tokenize_dataset(data, tokenizer, num_proc=0)


# --- batches by tokens -----------------------------------------------------------------------------------------------

LENGTHS = np.random.default_rng(0).integers(2, 40, size=997)


@pytest.mark.parametrize("max_tokens", [40, 100, 512])
def test_batches_stay_within_max_tokens_and_hold_every_pair_once(max_tokens: int) -> None:
    batches = token_batches(LENGTHS, max_tokens, seed=0, epoch=0)
    assert all(LENGTHS[batch].max() * len(batch) <= max_tokens for batch in batches)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(LENGTHS)))
    # packed: a batch could not have taken the next pair of its length order (else it would be one batch)
    assert np.mean([LENGTHS[batch].max() * len(batch) for batch in batches]) > 0.6 * max_tokens


def test_the_seed_and_epoch_decide_the_batches() -> None:
    same = [token_batches(LENGTHS, 100, seed=3, epoch=1) for _ in range(2)]
    assert all(np.array_equal(a, b) for a, b in zip(*same, strict=True))
    other_epoch = token_batches(LENGTHS, 100, seed=3, epoch=2)
    assert [b.tolist() for b in other_epoch] != [b.tolist() for b in same[0]]  # reshuffled each epoch
    sampler = TokenBatchSampler(LENGTHS, 100, seed=3)
    sampler.set_epoch(1)
    assert list(sampler) == [b.tolist() for b in same[0]]
    assert len(sampler) == len(same[0])


@pytest.mark.parametrize("world_size", [2, 3])
def test_processes_get_disjoint_batches_that_cover_the_epoch_and_step_together(world_size: int) -> None:
    shares = [list(TokenBatchSampler(LENGTHS, 100, seed=5, world_size=world_size, rank=rank))
              for rank in range(world_size)]
    assert len({len(share) for share in shares}) == 1  # every process steps alike
    batches = [b.tolist() for b in token_batches(LENGTHS, 100, seed=5, epoch=0)]
    padding = len(shares[0]) * world_size - len(batches)
    assert 0 <= padding < world_size
    taken = [batch for share in shares for batch in share]
    assert sorted(map(tuple, taken)) == sorted(map(tuple, batches + batches[:padding]))  # padded with the first ones
    assert sorted(i for batch in batches for i in batch) == list(range(len(LENGTHS)))


def test_max_tokens_below_the_longest_pair_is_refused() -> None:
    with pytest.raises(EncdecError, match=r"max_tokens=30 cannot hold the longest training pair \(39 tokens\)"):
        TokenBatchSampler(LENGTHS, 30)


def test_pair_lengths_read_the_tokenized_columns(tmp_path, tokenizer) -> None:
    data = load_text_pair(*write_pairs(tmp_path, make_date_pairs(30, seed=6)))
    tokenized, _ = tokenize_dataset(data, tokenizer, use_cache=False)
    source, target = pair_lengths(tokenized["train"])
    assert source.tolist() == [len(ids) for ids in tokenized["train"]["input_ids"]]
    assert target.tolist() == [len(ids) for ids in tokenized["train"]["labels"]]
    picked = tokenized["train"].select([5, 2])  # an indices mapping: read in its order
    assert pair_lengths(picked)[0].tolist() == [source[5], source[2]]


@pytest.mark.parametrize(("pairs", "batch_size"), [(7, 64), (1000, 8), (5000, 3), (29000, 64)])
def test_length_grouped_pairs_is_the_trainers_order(pairs: int, batch_size: int) -> None:
    """``group_by_length`` keeps transformers' order for the same seed, index for index (mega-batches sorted by
    length, the longest pair first), with lengths from an array instead of a pass over the examples."""
    lengths = np.random.default_rng(pairs).integers(1, 40, pairs)
    for seed in (0, 1):
        torch.manual_seed(seed)
        theirs = list(LengthGroupedSampler(batch_size, lengths=lengths.tolist()))
        torch.manual_seed(seed)
        ours = list(LengthGroupedPairs(batch_size, lengths))
        assert ours == theirs
        assert lengths[ours[0]] == lengths.max()


def test_a_run_grouped_by_length_never_reads_the_examples_one_by_one(tmp_path, monkeypatch) -> None:
    """transformers' sampler learns lengths by iterating the dataset (``for feature in dataset``): a minute and a
    growing share of memory at 5M pairs. ``encdec train`` gives it the Arrow lengths instead."""
    path = run_config(tmp_path, "transformer", tmp_path / "run", training={"group_by_length": True, "max_steps": 2,
                                                                          "eval_strategy": "no"})
    orders = []
    original_iter = LengthGroupedPairs.__iter__
    monkeypatch.setattr(LengthGroupedPairs, "__iter__", lambda self: orders.append(len(self)) or original_iter(self))
    monkeypatch.setattr(Dataset, "__iter__", lambda self: pytest.fail("a dataset was read example by example"))
    train(load_run_config(path))
    assert orders and orders[0] > 0


# --- in encdec train -------------------------------------------------------------------------------------------------

def test_token_batching_settings_are_checked_before_anything_is_written(tmp_path) -> None:
    out = tmp_path / "out"
    path = run_config(tmp_path, "transformer", out, training={"max_tokens": 100, "max_source_length": 128})
    with pytest.raises(EncdecError, match=r"max_tokens=100 is smaller than the longest pair the length limits allow "
                                          r"\(128 tokens"):
        train(load_run_config(path))
    path = run_config(tmp_path, "transformer", out, training={"max_tokens": 256, "group_by_length": True,
                                                               "max_source_length": 32, "max_target_length": 32})
    with pytest.raises(EncdecError, match="group_by_length"):
        train(load_run_config(path))
    assert not out.exists()


def test_a_run_batched_by_tokens_resumes_to_the_same_weights(tmp_path, caplog, monkeypatch) -> None:
    """Batches by tokens through the Trainer, resumed from the step-3 checkpoint of a 6-step run (the Trainer skips
    the batches already trained, the sampler reshuffles at each epoch): step 6 is bit for bit the uninterrupted
    run's."""
    training = {"max_tokens": 96, "max_source_length": 24, "max_target_length": 24, "max_steps": 6,
                "eval_steps": 3, "learning_rate": 3e-3, "lr_scheduler_type": "linear"}  # checkpoints at 3 and 6
    data = {"builtin_train": 40, "builtin_validation": 4, "builtin_test": 0}  # 40 pairs: several epochs in 6 steps
    out = tmp_path / "run"
    path = run_config(tmp_path, "transformer", out, training=training, data=data)
    epochs = []  # the epoch of each pass the Trainer starts over the sampler
    original_iter = TokenBatchSampler.__iter__
    monkeypatch.setattr(TokenBatchSampler, "__iter__", lambda self: epochs.append(self.epoch) or original_iter(self))
    with caplog.at_level("INFO", logger="encdec.training"):
        train(load_run_config(path))
    assert epochs == [0, 1]  # 5 batches an epoch: steps 1-5, then 6 in the reshuffled epoch 1
    assert "batches by tokens (max_tokens 96)" in caplog.text and "padding" in caplog.text
    checkpoints = out / CHECKPOINT_SUBDIR
    uninterrupted = load_file(checkpoints / "checkpoint-6" / "model.safetensors")
    state = json.loads((checkpoints / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["epoch"] > 1  # steps 4 to 6 cross an epoch boundary: the reshuffle is part of what must match
    shutil.rmtree(checkpoints / "checkpoint-6")  # as if the run had been killed after step 5
    epochs.clear()
    train(load_run_config(path, ["--training.resume_from_checkpoint", "true"]))
    assert epochs == [0, 1]  # epoch 0 (its first 3 batches skipped), then epoch 1 as before
    resumed = load_file(checkpoints / "checkpoint-6" / "model.safetensors")
    assert resumed.keys() == uninterrupted.keys()
    assert all(torch.equal(resumed[name], uninterrupted[name]) for name in resumed)


def test_tokenizer_training_streams_the_corpus(tmp_path) -> None:
    """A generator is read once and never turned into a list; all-blank data is still refused."""
    pairs = make_date_pairs(100, seed=8)
    read = []

    def texts():
        for s, t in pairs:
            read.append(1)
            yield s
            yield t

    tokenizer = train_tokenizer(texts(), vocab_size=120, min_frequency=1)
    assert len(read) == 100 and tokenizer.tokenize("March")
    with pytest.raises(ValueError, match="every text is blank"):
        train_tokenizer(iter(["", "  "]), vocab_size=120)

