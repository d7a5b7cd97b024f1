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

from toy import TINY_MODELS, exact_match, toy_batch, toy_model, train_on_toy_task  # noqa: E402

# one layer a side, hidden size 32, the "last" bridge unless a test names another
LEARNER = {**TINY_MODELS["rnn"], "hidden_size": 32, "bridge": "last"}


def train(model, steps: int, min_len: int, max_len: int, reverse: bool) -> None:
    """Adam at 1e-2 on ``steps`` batches of 64 fresh examples, decayed linearly to 0 over the last third."""
    train_on_toy_task(model, steps, batch_size=64, lr=1e-2, decay=steps // 3, optimizer=torch.optim.Adam,
                      min_len=min_len, max_len=max_len, reverse=reverse)
    model.eval()


@torch.no_grad()
def held_out_exact_match(model, min_len: int, max_len: int, reverse: bool, n: int = 200) -> float:
    """Greedy ``generate`` on ``n`` held-out examples (another seed): the share that is right token for token,
    EOS included."""
    input_ids, attention_mask, labels = toy_batch(n, torch.Generator().manual_seed(12345), min_len, max_len, reverse)
    generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=max_len + 2)
    return exact_match(generated, labels)


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
    model = toy_model(LEARNER, **overrides)
    train(model, steps=300, min_len=3, max_len=7, reverse=True)
    assert held_out_exact_match(model, 3, 7, reverse=True) >= 0.98


@pytest.mark.slow
@pytest.mark.parametrize("context_feeding", [False, True], ids=["sutskever", "cho-context-feeding"])
def test_no_attention_learns_to_copy_short_sequences(context_feeding: bool) -> None:
    model = toy_model(LEARNER, attention="none", hidden_size=64, bidirectional_encoder=False,
                      context_feeding=context_feeding)
    train(model, steps=300, min_len=1, max_len=4, reverse=False)
    assert held_out_exact_match(model, 1, 4, reverse=False) >= 0.98
