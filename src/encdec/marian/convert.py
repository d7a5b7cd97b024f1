"""A Marian checkpoint (transformers' ``MarianMTModel``: OPUS-MT, Tiedemann & Thottingal 2020; the Marian toolkit,
Junczys-Dowmunt et al. 2018) as encdec's Transformer: the config mapped field by field and the weights copied by name.

Marian's network is the Transformer of Vaswani et al. 2017 with switches encdec has: post-LN, sinusoidal positions
with all sines first (``sinusoid_layout="half_split"``), embeddings scaled by sqrt(d_model), one embedding matrix
for the source, the target and the output layer. What Marian adds is the activation (swish in OPUS-MT) and the
output layer's bias (``final_logits_bias``): both are named switches of ``TransformerSeq2SeqConfig``. Anything else
a config asks for is refused by name, never dropped: it would be another network.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from ..errors import EncdecError
from ..models.configuration_transformer_seq2seq import TransformerSeq2SeqConfig

# MarianConfig fields copied as they are (same name and meaning in TransformerSeq2SeqConfig)
_SAME = ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
         "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "activation_function", "dropout",
         "attention_dropout", "activation_dropout", "max_position_embeddings", "init_std", "scale_embedding",
         "tie_word_embeddings", "pad_token_id", "eos_token_id", "decoder_start_token_id", "use_cache")
# keys of old OPUS-MT config.json files (BART-era converter) and the only value each may have in a Marian network;
# another value would mean another network (an embedding LayerNorm, learned positions, pre-LN, ...)
_FIXED = {"normalize_embedding": False, "normalize_before": False, "static_position_embeddings": True,
          "add_bias_logits": False, "add_final_layer_norm": False, "is_decoder": False,
          "share_encoder_decoder_embeddings": True}


def check_marian_config(config: Mapping[str, Any], name: str = "config.json") -> None:
    """Refuse, naming the option, a Marian config encdec's Transformer cannot represent exactly."""
    if config.get("model_type") != "marian":
        raise EncdecError(f"{name} is a {config.get('model_type')!r} model, not a Marian one (`model_type: marian`); "
                          "`encdec import` reads MarianMTModel checkpoints (OPUS-MT).")
    architectures = config.get("architectures") or ["MarianMTModel"]
    if architectures != ["MarianMTModel"]:
        raise EncdecError(f"{name} holds a {architectures} model; `encdec import` reads MarianMTModel checkpoints "
                          "(a MarianForCausalLM has no encoder).")
    for key, value in _FIXED.items():
        if key in config and config[key] != value:
            raise EncdecError(f"{name} sets `{key}: {config[key]!r}`, which encdec's Transformer cannot represent "
                              f"(it has `{key}: {value!r}` only); this checkpoint cannot be imported exactly.")
    if config.get("decoder_vocab_size") not in (None, config.get("vocab_size")):
        raise EncdecError(f"{name} sets `decoder_vocab_size: {config['decoder_vocab_size']}` (separate source and "
                          f"target vocabularies of {config.get('vocab_size')} and {config['decoder_vocab_size']}); "
                          "encdec imports models with one joint vocabulary only.")
    activation = config.get("activation_function", "gelu")
    if activation not in ("relu", "gelu", "swish", "silu"):
        raise EncdecError(f"{name} sets `activation_function: {activation!r}`; encdec's Transformer has relu, gelu "
                          "and swish.")


def marian_config_to_encdec(config: Mapping[str, Any], name: str = "config.json") -> TransformerSeq2SeqConfig:
    """The ``TransformerSeq2SeqConfig`` of the network a Marian ``config.json`` describes (checked first)."""
    check_marian_config(config, name)
    known = {key: config[key] for key in _SAME if key in config}
    known.setdefault("activation_function", "gelu")  # MarianConfig's default
    known.setdefault("scale_embedding", False)
    known.setdefault("max_position_embeddings", 1024)
    return TransformerSeq2SeqConfig(
        **known,
        bos_token_id=None,  # Marian has no <s>: a sentence starts with the pad token (decoder_start_token_id)
        sinusoid_layout="half_split", position_embedding_type="sinusoidal", normalize_before=False,
        layer_norm_eps=1e-5,  # torch's default, which Marian's LayerNorms use
        final_logits_bias=True,
    )


def _layer_names(side: str, index: int) -> dict[str, tuple[str, ...]]:
    """encdec's name -> the Marian names whose tensors it is (several are stacked along dim 0, in this order)."""
    ours, theirs = f"model.{side}.layers.{index}.", f"model.{side}.layers.{index}."
    names = {"self_attn.qkv_proj": ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),
             "self_attn.out_proj": ("self_attn.out_proj",), "self_attn_layer_norm": ("self_attn_layer_norm",),
             "ffn.fc1": ("fc1",), "ffn.fc2": ("fc2",),
             # Marian's per-layer `final_layer_norm` is the LayerNorm after the FFN; encdec's `final_layer_norm` is
             # the pre-LN stack's last norm, which a post-LN model lacks: mapped by whole name, never by suffix
             "ffn_layer_norm": ("final_layer_norm",)}
    if side == "decoder":
        names |= {"cross_attn.q_proj": ("encoder_attn.q_proj",),
                  "cross_attn.kv_proj": ("encoder_attn.k_proj", "encoder_attn.v_proj"),
                  "cross_attn.out_proj": ("encoder_attn.out_proj",),
                  "cross_attn_layer_norm": ("encoder_attn_layer_norm",)}
    return {ours + mine: tuple(theirs + source for source in sources) for mine, sources in names.items()}


def marian_weight_names(config: TransformerSeq2SeqConfig) -> dict[str, tuple[str, ...]]:
    """Every tensor of the encdec model -> the Marian tensors it is made of."""
    names: dict[str, tuple[str, ...]] = {}
    for side in ("encoder", "decoder"):
        for index in range(getattr(config, f"{side}_layers")):
            for mine, sources in _layer_names(side, index).items():
                for kind in ("weight", "bias"):
                    names[f"{mine}.{kind}"] = tuple(f"{source}.{kind}" for source in sources)
    names["model.encoder.embeddings.embed_tokens.weight"] = ("model.encoder.embed_tokens.weight",)
    names["model.decoder.embeddings.embed_tokens.weight"] = ("model.decoder.embed_tokens.weight",)
    names["lm_head.weight"] = ("lm_head.weight",)
    names["final_logits_bias"] = ("final_logits_bias",)
    return names


def marian_state_dict_to_encdec(state: Mapping[str, torch.Tensor], config: TransformerSeq2SeqConfig,
                                name: str = "the weights") -> dict[str, torch.Tensor]:
    """Marian's tensors under encdec's names: q;k;v stacked into ``qkv_proj``, k;v into ``kv_proj``, the rest
    copied. ``state`` is a ``MarianMTModel``'s ``state_dict()``; a missing tensor or a wrong shape is named."""
    state = dict(state)
    # A tied checkpoint may hold the one matrix under any of its names (safetensors keeps one of tied tensors); an
    # untied one (`tie_word_embeddings: false`) holds the encoder's, the decoder's and the output layer's own
    shared = next((state[key] for key in ("model.shared.weight", "model.encoder.embed_tokens.weight",
                                          "model.decoder.embed_tokens.weight") if key in state), None)
    for key in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
        if key not in state or config.tie_word_embeddings:
            state[key] = shared
    if "final_logits_bias" not in state:  # Marian's own loader lets it be absent (then zeros)
        state["final_logits_bias"] = torch.zeros(1, config.vocab_size)
    d, ffn = config.d_model, {"encoder": config.encoder_ffn_dim, "decoder": config.decoder_ffn_dim}
    out = {}
    for mine, sources in marian_weight_names(config).items():
        missing = [source for source in sources if state.get(source) is None]
        if missing:
            raise EncdecError(f"{name} lack {missing[0]}, which a Marian model of this config.json has; the "
                              "checkpoint is incomplete or of another architecture.")
        expected = _source_shape(_expected_shape(mine, config, d, ffn), len(sources))
        for source in sources:
            if tuple(state[source].shape) != expected:
                raise EncdecError(f"{name}: {source} has shape {tuple(state[source].shape)}, but config.json's sizes "
                                  f"make it {expected}; the weights and config.json are of different models.")
        tensors = [state[source].detach().to(torch.float32) for source in sources]
        out[mine] = tensors[0].clone() if len(tensors) == 1 else torch.cat(tensors, dim=0)
    return out


def _expected_shape(name: str, config: TransformerSeq2SeqConfig, d: int, ffn: dict[str, int]) -> tuple[int, ...]:
    side = "decoder" if ".decoder." in name else "encoder"
    bias = name.endswith(".bias")
    if name.endswith("embed_tokens.weight") or name == "lm_head.weight":
        return config.vocab_size, d
    if name == "final_logits_bias":
        return 1, config.vocab_size
    rows = {"qkv_proj": 3 * d, "kv_proj": 2 * d, "fc1": ffn[side]}.get(name.rsplit(".", 2)[-2], d)
    if bias or "layer_norm" in name:
        return (rows,)
    return rows, ffn[side] if name.endswith("fc2.weight") else d


def _source_shape(expected: tuple[int, ...], stacked: int) -> tuple[int, ...]:
    return (expected[0] // stacked, *expected[1:])


__all__ = ["check_marian_config", "marian_config_to_encdec", "marian_state_dict_to_encdec", "marian_weight_names"]
