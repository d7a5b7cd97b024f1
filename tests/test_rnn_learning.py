"""A tiny recurrent model actually learns: with attention it reverses digit sequences of 3-7 digits (the alignment
is the anti-diagonal), and without attention it copies short sequences through its final state alone.

Each training takes a few seconds on one CPU thread: hidden size 32-64, one layer, Adam at 1e-2 for 300 steps of
64 fresh examples, with the learning rate decayed linearly to 0 over the last third.
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

from encdec import RNNSeq2SeqConfig, RNNSeq2SeqForConditionalGeneration  # noqa: E402

PAD, BOS, EOS = 0, 1, 2
FIRST_DIGIT = 3  # ids 3..12 are the digits 0..9
VOCAB = FIRST_DIGIT + 10


def digit_batch(n: int, generator: torch.Generator, min_len: int, max_len: int, reverse: bool
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` right-padded examples: input_ids, attention_mask (n, S) and labels (n, S + 1): the digits, reversed
    or not, then EOS, then -100."""
    lengths = torch.randint(min_len, max_len + 1, (n,), generator=generator).tolist()
    input_ids = torch.full((n, max(lengths)), PAD)
    labels = torch.full((n, max(lengths) + 1), -100)
    for i, length in enumerate(lengths):
        digits = torch.randint(FIRST_DIGIT, VOCAB, (length,), generator=generator)
        input_ids[i, :length] = digits
        labels[i, :length] = digits.flip(0) if reverse else digits
        labels[i, length] = EOS
    return input_ids, (input_ids != PAD).long(), labels


def train(model: RNNSeq2SeqForConditionalGeneration, steps: int, min_len: int, max_len: int, reverse: bool) -> None:
    generator = torch.Generator().manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    decay = steps // 3
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (steps - step) / decay))
    model.train()
    for _ in range(steps):
        input_ids, attention_mask, labels = digit_batch(64, generator, min_len, max_len, reverse)
        model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    model.eval()


@torch.no_grad()
def exact_match(model: RNNSeq2SeqForConditionalGeneration, min_len: int, max_len: int, reverse: bool,
                n: int = 200) -> float:
    """Greedy ``generate`` on ``n`` held-out examples (another seed): the share that is right token for token,
    EOS included."""
    input_ids, attention_mask, labels = digit_batch(n, torch.Generator().manual_seed(12345), min_len, max_len, reverse)
    generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=max_len + 2)
    hits = 0
    for output, label in zip(generated[:, 1:].tolist(), labels.tolist(), strict=True):
        target = [token for token in label if token != -100]
        hits += output[: len(target)] == target
    return hits / n


def tiny_config(**overrides) -> RNNSeq2SeqConfig:
    kwargs = dict(vocab_size=VOCAB, embedding_dim=16, hidden_size=32, encoder_layers=1, decoder_layers=1,
                  bidirectional_encoder=True, dropout=0.0, pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS,
                  decoder_start_token_id=BOS)
    kwargs.update(overrides)
    return RNNSeq2SeqConfig(**kwargs)


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        dict(attention="bahdanau", cell_type="gru", bridge="linear_tanh"),  # Bahdanau's RNNsearch
        dict(attention="luong_dot", cell_type="lstm"),
        dict(attention="luong_general", cell_type="gru"),
        dict(attention="luong_concat", cell_type="lstm"),
    ],
    ids=lambda overrides: f"{overrides['attention']}-{overrides['cell_type']}",
)
def test_attention_learns_to_reverse(overrides: dict) -> None:
    torch.manual_seed(0)
    model = RNNSeq2SeqForConditionalGeneration(tiny_config(**overrides))
    train(model, steps=300, min_len=3, max_len=7, reverse=True)
    assert exact_match(model, 3, 7, reverse=True) >= 0.98


@pytest.mark.slow
@pytest.mark.parametrize("context_feeding", [False, True], ids=["sutskever", "cho-context-feeding"])
def test_no_attention_learns_to_copy_short_sequences(context_feeding: bool) -> None:
    torch.manual_seed(0)
    model = RNNSeq2SeqForConditionalGeneration(tiny_config(attention="none", hidden_size=64,
                                                           bidirectional_encoder=False,
                                                           context_feeding=context_feeding))
    train(model, steps=300, min_len=1, max_len=4, reverse=False)
    assert exact_match(model, 1, 4, reverse=False) >= 0.98
