"""TransformerSeq2SeqConfig: paper defaults, aliases, validation messages and serialisation round-trips."""

from __future__ import annotations

import json
import re

import pytest
from transformers import AutoConfig

from encdec import TransformerSeq2SeqConfig


def _without_name(data: dict) -> dict:
    return {k: v for k, v in data.items() if k != "_name_or_path"}


def test_defaults_are_the_paper_base_model() -> None:
    config = TransformerSeq2SeqConfig()
    assert (config.d_model, config.encoder_layers, config.decoder_layers) == (512, 6, 6)
    assert (config.encoder_attention_heads, config.encoder_ffn_dim, config.dropout) == (8, 2048, 0.1)
    assert config.activation_function == "relu"
    assert config.position_embedding_type == "sinusoidal" and config.sinusoid_layout == "interleaved"
    assert config.normalize_before is False and config.scale_embedding is True
    assert config.tie_word_embeddings is True and config.is_encoder_decoder is True
    assert config.head_dim == 64


def test_attribute_map_aliases(tiny_transformer_config) -> None:
    config = tiny_transformer_config(d_model=24, decoder_layers=3, encoder_layers=1, decoder_attention_heads=4)
    assert config.hidden_size == 24
    assert config.num_hidden_layers == 3  # the decoder's: DynamicCache(config=...) sizes itself from it
    assert config.num_attention_heads == 4
    assert config.head_dim == 6


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"d_model": 30, "encoder_attention_heads": 4}, "encoder_attention_heads"),
        ({"d_model": 30, "encoder_attention_heads": 2, "decoder_attention_heads": 4}, "decoder_attention_heads"),
        *[({name: value}, name) for name in ("dropout", "attention_dropout", "activation_dropout")
          for value in (-0.1, 1.0, 1.5)],
        ({"activation_function": "swishy"}, "activation_function"),
        ({"position_embedding_type": "rotary"}, "position_embedding_type"),
        ({"sinusoid_layout": "diagonal"}, "sinusoid_layout"),
        ({"pad_token_id": 24}, "pad_token_id"),
        ({"bos_token_id": 24}, "bos_token_id"),
        ({"eos_token_id": 99}, "eos_token_id"),
        ({"eos_token_id": [2, 24]}, "eos_token_id"),
        ({"decoder_start_token_id": 24}, "decoder_start_token_id"),
        ({"pad_token_id": -1}, "pad_token_id"),
        ({"pad_token_id": None}, "pad_token_id"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"encoder_layers": 0}, "encoder_layers"),
        ({"decoder_ffn_dim": 2.5}, "decoder_ffn_dim"),
        ({"d_model": 15, "encoder_attention_heads": 1, "decoder_attention_heads": 1}, "d_model"),
        ({"layer_norm_eps": 0.0}, "layer_norm_eps"),
        ({"final_logits_bias": 1}, "final_logits_bias"),
        ({"final_logits_bias": "yes"}, "final_logits_bias"),
    ],
)
def test_invalid_config_raises_naming_the_field(tiny_transformer_config, overrides: dict, field: str) -> None:
    # the backticks make "`dropout`" not match "`attention_dropout`"
    with pytest.raises(ValueError, match=re.escape(f"`{field}`")):
        tiny_transformer_config(**overrides)


def test_odd_d_model_is_fine_with_learned_positions(tiny_transformer_config) -> None:
    config = tiny_transformer_config(d_model=15, encoder_attention_heads=3, decoder_attention_heads=5,
                                     position_embedding_type="learned")
    assert config.d_model == 15


def test_to_dict_from_dict_round_trip(tiny_transformer_config) -> None:
    config = tiny_transformer_config(normalize_before=True, position_embedding_type="learned", dropout=0.25,
                                     tie_word_embeddings=False, activation_function="gelu")
    data = config.to_dict()
    assert data["model_type"] == "transformer_seq2seq"
    restored = TransformerSeq2SeqConfig.from_dict(data)
    assert restored.to_dict() == data
    # passing the whole dict back as keyword arguments must not clash with explicit parameters
    assert TransformerSeq2SeqConfig(**data).to_dict() == data


def test_save_load_round_trip(tmp_path, tiny_transformer_config) -> None:
    config = tiny_transformer_config(d_model=32, encoder_layers=1, decoder_layers=3, sinusoid_layout="half_split",
                                     scale_embedding=False, eos_token_id=3)
    config.save_pretrained(tmp_path)
    for loader in (TransformerSeq2SeqConfig.from_pretrained, AutoConfig.from_pretrained):
        restored = loader(tmp_path)
        assert type(restored) is TransformerSeq2SeqConfig
        assert _without_name(restored.to_dict()) == _without_name(config.to_dict())
        assert restored.is_encoder_decoder is True


@pytest.mark.parametrize("activation", ["swish", "silu"])
def test_marian_s_switches_build_and_round_trip(tmp_path, tiny_transformer_config, activation: str) -> None:
    """What `encdec import` writes for a Marian model: swish (or its other name, silu), the logits bias, the
    half-split table, no <s> and the pad token as the decoder's start; the bias is off unless asked."""
    assert tiny_transformer_config().final_logits_bias is False
    config = tiny_transformer_config(activation_function=activation, final_logits_bias=True,
                                     sinusoid_layout="half_split", bos_token_id=None, decoder_start_token_id=0)
    assert TransformerSeq2SeqConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()
    config.save_pretrained(tmp_path)
    restored = AutoConfig.from_pretrained(tmp_path)
    assert _without_name(restored.to_dict()) == _without_name(config.to_dict())
    assert (restored.activation_function, restored.final_logits_bias) == (activation, True)
    assert (restored.bos_token_id, restored.decoder_start_token_id, restored.pad_token_id) == (None, 0, 0)


def test_loading_an_invalid_config_json_raises(tmp_path, tiny_transformer_config) -> None:
    tiny_transformer_config().save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    data = json.loads(path.read_text())
    data["attention_dropout"] = 1.0
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="`attention_dropout`"):
        TransformerSeq2SeqConfig.from_pretrained(tmp_path)


def test_auto_config_for_model() -> None:
    config = AutoConfig.for_model("transformer_seq2seq", d_model=64, vocab_size=100)
    assert type(config) is TransformerSeq2SeqConfig
    assert (config.d_model, config.vocab_size) == (64, 100)
