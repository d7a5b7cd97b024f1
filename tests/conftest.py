"""Shared fixtures: offline Hub, a fixed seed, tiny configs and the built-in "reverse the digits" toy task."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # before transformers is imported: tests never touch the network
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

from collections.abc import Callable  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

import encdec  # noqa: E402,F401  (registers the Auto classes)
from encdec import TransformerSeq2SeqConfig, TransformerSeq2SeqForConditionalGeneration  # noqa: E402

# Tiny models run fastest on one thread, and the test machine is shared (2 cores): more threads only contend.
torch.set_num_threads(1)

PAD, BOS, EOS = 0, 1, 2
FIRST_DIGIT = 3  # ids 3..12 are the digits 0..9 of the toy task
TOY_VOCAB_SIZE = FIRST_DIGIT + 10


def tiny_transformer_config(**overrides) -> TransformerSeq2SeqConfig:
    """A Transformer small enough to run a forward pass in milliseconds; ``overrides`` replace any field."""
    kwargs = dict(
        vocab_size=24,
        d_model=16,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        dropout=0.0,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        decoder_start_token_id=BOS,
    )
    kwargs.update(overrides)
    return TransformerSeq2SeqConfig(**kwargs)


def make_reverse_batch(
    n: int, generator: torch.Generator, min_len: int = 3, max_len: int = 8
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` examples of the toy task "reverse a digit sequence", right-padded.

    :return: input_ids (n, S), attention_mask (n, S), labels (n, S + 1) = reversed digits + EOS, -100 on padding
    """
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=generator)
    src_len = int(lengths.max())
    input_ids = torch.full((n, src_len), PAD, dtype=torch.long)
    attention_mask = torch.zeros(n, src_len, dtype=torch.long)
    labels = torch.full((n, src_len + 1), -100, dtype=torch.long)
    for i, length in enumerate(lengths.tolist()):
        digits = torch.randint(FIRST_DIGIT, TOY_VOCAB_SIZE, (length,), generator=generator)
        input_ids[i, :length] = digits
        attention_mask[i, :length] = 1
        labels[i, :length] = digits.flip(0)
        labels[i, length] = EOS
    return input_ids, attention_mask, labels


def train_on_reverse_task(model: TransformerSeq2SeqForConditionalGeneration, steps: int, batch_size: int,
                          lr: float, seed: int = 0, warmup: int = 0,
                          exclude: set[tuple[int, ...]] | None = None) -> list[float]:
    """Plain AdamW loop on freshly generated toy batches (linear warm-up, then linear decay); returns the losses.

    ``exclude``: padded source rows (as tuples) never to train on, e.g. a held-out set.
    """
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)

    def schedule(step: int) -> float:
        return min((step + 1) / max(warmup, 1), (steps - step) / max(steps - warmup, 1))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    model.train()
    losses = []
    for _ in range(steps):
        input_ids, attention_mask, labels = make_reverse_batch(batch_size, generator)
        if exclude:
            keep = torch.tensor([tuple(row) not in exclude for row in input_ids.tolist()])
            input_ids, attention_mask, labels = input_ids[keep], attention_mask[keep], labels[keep]
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(name="tiny_transformer_config")
def tiny_transformer_config_fixture() -> Callable[..., TransformerSeq2SeqConfig]:
    """Factory: ``tiny_transformer_config(**overrides)``."""
    return tiny_transformer_config


@pytest.fixture
def make_transformer() -> Callable[..., TransformerSeq2SeqForConditionalGeneration]:
    """Factory: a tiny model in eval mode, ``make_transformer(attn_implementation=..., **config_overrides)``."""

    def make(attn_implementation: str = "sdpa", **overrides) -> TransformerSeq2SeqForConditionalGeneration:
        config = tiny_transformer_config(**overrides)
        model = TransformerSeq2SeqForConditionalGeneration._from_config(config, attn_implementation=attn_implementation)
        return model.eval()

    return make


@pytest.fixture
def reverse_batch() -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """Factory: ``reverse_batch(n, generator, min_len=3, max_len=8)`` -> (input_ids, attention_mask, labels)."""
    return make_reverse_batch


@pytest.fixture
def train_reverse() -> Callable[..., list[float]]:
    """Factory: ``train_reverse(model, steps, batch_size, lr, seed=0, warmup=0, exclude=None)`` -> losses."""
    return train_on_reverse_task


@pytest.fixture(scope="session")
def trained_tiny_transformer() -> TransformerSeq2SeqForConditionalGeneration:
    """A tiny pre-LN model trained for ~1 s on the toy task: its outputs depend on the input and end with EOS at
    varied steps, which random weights do not give (they repeat one token). Shared: do not modify it."""
    torch.manual_seed(0)
    config = tiny_transformer_config(vocab_size=TOY_VOCAB_SIZE, d_model=32, encoder_layers=1, decoder_layers=1,
                                     encoder_ffn_dim=64, decoder_ffn_dim=64, normalize_before=True)
    model = TransformerSeq2SeqForConditionalGeneration(config)
    train_on_reverse_task(model, steps=80, batch_size=32, lr=3e-3)
    return model.eval()
