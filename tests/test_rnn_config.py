"""The RNN config: paper defaults, derived sizes, errors that name the field, round trips and Auto classes."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM  # noqa: E402

from encdec import RNNSeq2SeqConfig, RNNSeq2SeqForConditionalGeneration, RNNSeq2SeqModel  # noqa: E402

ATTENTIONS = ["none", "bahdanau", "luong_dot", "luong_general", "luong_concat"]
TINY = dict(vocab_size=20, embedding_dim=8, hidden_size=12, encoder_layers=1, decoder_layers=1)


def test_defaults_are_luong_global_attention() -> None:
    config = RNNSeq2SeqConfig()
    assert (config.cell_type, config.attention, config.input_feeding, config.bridge) == \
        ("lstm", "luong_general", True, "last")
    assert (config.hidden_size, config.embedding_dim, config.encoder_layers, config.dropout, config.init_range) == \
        (1000, 1000, 4, 0.2, 0.1)
    assert config.is_encoder_decoder and not config.tie_word_embeddings
    special = (config.pad_token_id, config.bos_token_id, config.eos_token_id, config.decoder_start_token_id)
    assert special == (0, 1, 2, 1)
    assert config.num_hidden_layers == config.decoder_layers == 4


@pytest.mark.parametrize(("attention", "feeding"), [("none", False), ("bahdanau", False), ("luong_dot", True),
                                                    ("luong_general", True), ("luong_concat", True)])
def test_input_feeding_defaults_to_on_for_luong_only(attention: str, feeding: bool) -> None:
    assert RNNSeq2SeqConfig(attention=attention, **TINY).input_feeding is feeding
    assert RNNSeq2SeqConfig(attention=attention, input_feeding=False, **TINY).input_feeding is False


def test_derived_sizes() -> None:
    config = RNNSeq2SeqConfig(bidirectional_encoder=True, attention="bahdanau", **TINY)
    assert config.encoder_hidden_size == 6 and config.encoder_output_size == 12  # split over the two directions
    assert config.decoder_input_size == 8 + 12  # [E y_{t-1}; c_t]
    assert config.readout_size == config.output_size == 12 + 12  # [s_t; c_t]
    tied = RNNSeq2SeqConfig(attention="luong_concat", tie_word_embeddings=True, **TINY)
    assert tied.decoder_input_size == 8 + 12 and tied.readout_size == 12 and tied.output_size == 8
    config.num_hidden_layers = 3
    assert config.decoder_layers == 3


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        (dict(cell_type="rnn"), "cell_type"),
        (dict(attention="local_p"), "attention"),
        (dict(bridge="mean"), "bridge"),
        (dict(dropout=1.0), "dropout"),
        (dict(dropout=-0.1), "dropout"),
        (dict(hidden_size=0), "hidden_size"),
        (dict(encoder_layers=0, bridge="zero"), "encoder_layers"),
        (dict(input_feeding=True, attention="bahdanau"), "input_feeding"),
        (dict(input_feeding=True, attention="none"), "input_feeding"),
        (dict(context_feeding=True, attention="bahdanau"), "context_feeding"),
        (dict(context_feeding="yes", attention="none"), "context_feeding"),
        (dict(bridge="last", decoder_layers=2), "decoder_layers"),
        (dict(bridge="last", encoder_hidden_size=10), "encoder_hidden_size"),
        (dict(bridge="last", bidirectional_encoder=True, encoder_hidden_size=12), "bridge"),
        (dict(attention="luong_dot", bridge="zero", encoder_hidden_size=10), "luong_dot"),
        (dict(attention="none", bridge="zero"), "bridge"),
        (dict(pad_token_id=20), "pad_token_id"),
        (dict(eos_token_id=25), "eos_token_id"),
        (dict(decoder_start_token_id=None), "decoder_start_token_id"),
        (dict(init_range=0), "init_range"),
    ],
)
def test_invalid_combinations_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"`{field}`|{field}"):
        RNNSeq2SeqConfig(**{**TINY, **kwargs})


def test_linear_tanh_bridge_allows_any_sizes() -> None:
    config = RNNSeq2SeqConfig(bridge="linear_tanh", encoder_layers=3, decoder_layers=1, encoder_hidden_size=5,
                              bidirectional_encoder=True, **{k: v for k, v in TINY.items() if "layers" not in k})
    assert config.encoder_output_size == 10


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    config = RNNSeq2SeqConfig(cell_type="gru", attention="luong_concat", input_feeding=False, bridge="linear_tanh",
                              bidirectional_encoder=True, tie_word_embeddings=True, dropout=0.3, **TINY)
    config.save_pretrained(tmp_path)
    reloaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(reloaded, RNNSeq2SeqConfig)
    assert {**reloaded.to_dict(), "_name_or_path": ""} == config.to_dict()
    assert RNNSeq2SeqConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()


@pytest.mark.parametrize("attention", ATTENTIONS)
def test_auto_classes_build_every_attention(attention: str) -> None:
    # the paper-sized default builds without allocating memory
    with torch.device("meta"):
        big = AutoModelForSeq2SeqLM.from_config(AutoConfig.for_model("rnn_seq2seq", attention=attention))
    assert isinstance(big, RNNSeq2SeqForConditionalGeneration)
    config = AutoConfig.for_model("rnn_seq2seq", attention=attention, **TINY)
    model = AutoModelForSeq2SeqLM.from_config(config).eval()
    assert isinstance(model, RNNSeq2SeqForConditionalGeneration)
    assert isinstance(AutoModel.from_config(config), RNNSeq2SeqModel)
    input_ids = torch.tensor([[5, 6, 7, 8]])
    assert model.generate(input_ids=input_ids, max_new_tokens=3).shape[0] == 1
