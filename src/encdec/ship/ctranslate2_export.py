"""Export a Transformer model folder to CTranslate2 (Klein et al. 2020, "Efficient and High-Quality Neural Machine
Translation with OpenNMT"), the C++ inference engine that production NMT runs on CPUs.

CTranslate2 converts only the architectures it knows, so encdec brings its own converter, written with the engine's
Python API: ``EncdecTransformerConverter`` is a ``ctranslate2.converters.Converter`` that fills a
``ctranslate2.specs.TransformerSpec`` from a ``TransformerSeq2SeqForConditionalGeneration``, switch by switch:

- ``normalize_before``: post-LN (``pre_norm=False``) or pre-LN with the final LayerNorm of each stack;
- positions: the table itself, sinusoidal (either layout) or learned, since CTranslate2's own sinusoid puts the
  sines first and would be wrong for the paper's interleaved layout;
- ``scale_embedding``: sqrt(d_model) or 1; ``tie_word_embeddings``: the same matrix in three places, which the
  engine stores once; ``activation_function``: relu, gelu (erf) or swish (= silu); ``layer_norm_eps``;
- ``final_logits_bias`` (Marian's output bias): the bias of the engine's output projection, ``W_out s_t + b``;
- the special tokens and the decoder start token, by name, from the tokenizer saved in the folder: ``<s>`` or, for
  a model without one (Marian's), the pad token the decoder starts from; the engine then keeps its default ``<s>``,
  which it only uses to prefix sources (``add_source_bos``, off), as CTranslate2's own Marian converter does.

The exported folder holds the engine's files (``model.bin``, ``config.json``, the vocabulary), the tokenizer, the
``generation_config.json`` of the source folder and ``encdec_export.json`` (what was exported, and how), so that
``encdec translate --engine ctranslate2 --model OUT`` needs nothing else. The RNN family is refused: CTranslate2 has
no recurrent decoder.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..errors import EncdecError
from ..folders import require_model_folder
from ..inference import load_model_and_tokenizer
from ..inference.engines.ctranslate2_engine import BACKEND, EXPORT_INFO, read_export_info, require_ctranslate2
from ..inference.engines.int8 import note_if_int8_is_slower
from ..io_utils import atomic_write_json, refuse_existing, refuse_overlap

try:  # an optional extra: encdec[ct2]
    import ctranslate2
    from ctranslate2.converters import Converter
    from ctranslate2.specs import common_spec, transformer_spec
except ImportError:  # the converter class below still defines; creating one raises CTranslate2Missing
    ctranslate2 = None
    Converter = object

QUANTIZATIONS = BACKEND.export_quantize  # float32, int8, int8_float32, bfloat16, float16
RNN_REFUSAL = ("CTranslate2 has no recurrent (LSTM/GRU) decoder, so RNN models cannot be exported to it; for fast "
               "CPU inference of an RNN model use torch's dynamic int8 instead: `encdec translate --quantize int8`.")


def vocabulary_tokens(tokenizer: PreTrainedTokenizerBase, vocab_size: int) -> list[str]:
    """The tokenizer's tokens in id order, padded to the model's ``vocab_size`` with unused names (a model may have
    more output rows than its tokenizer has tokens; the engine needs a name for each)."""
    by_id = {index: token for token, index in tokenizer.get_vocab().items()}
    if sorted(by_id) != list(range(len(by_id))):
        raise EncdecError("The tokenizer's ids are not contiguous from 0, so they cannot be listed as a vocabulary; "
                          "re-train it with `encdec tokenizer train`.")
    if len(by_id) > vocab_size:
        raise EncdecError(f"The tokenizer has {len(by_id)} tokens but the model's `vocab_size` is {vocab_size}; use "
                          "the tokenizer the model was trained with.")
    tokens = [by_id[i] for i in range(len(by_id))]
    taken = set(tokens)
    unused = (f"<encdec_unused_{i}>" for i in range(vocab_size * 2))
    return tokens + [name for name in unused if name not in taken][: vocab_size - len(tokens)]


def activation_of(config: Any) -> Any:
    """CTranslate2's activation for ``config.activation_function``; the switch is named when it has none."""
    activations = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU,
                   "swish": common_spec.Activation.SWISH, "silu": common_spec.Activation.SWISH}  # x * sigmoid(x)
    if config.activation_function not in activations:
        raise EncdecError(f"CTranslate2 cannot represent `activation_function`={config.activation_function!r}; it "
                          f"supports {sorted(activations)}.")
    return activations[config.activation_function]


def position_table(embeddings: Any, num_positions: int) -> Any:
    """(P, D) the encodings the model adds at positions 0 .. P-1, whichever kind it has."""
    return embeddings.embed_positions(0, num_positions).detach()


class EncdecTransformerConverter(Converter):
    """A ``ctranslate2.converters.Converter`` for encdec's Transformer: ``convert(output_dir, quantization=...)``."""

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> None:
        require_ctranslate2()
        if model.config.model_type != "transformer_seq2seq":
            raise EncdecError(RNN_REFUSAL if model.config.model_type == "rnn_seq2seq" else
                              f"CTranslate2 export covers encdec's Transformer; got `model_type`="
                              f"{model.config.model_type!r}.")
        self.model = model
        self.tokenizer = tokenizer

    def _load(self) -> Any:
        config, model = self.model.config, self.model.model
        activation = activation_of(config)
        pre_norm = bool(config.normalize_before)
        encoder = transformer_spec.TransformerEncoderSpec(config.encoder_layers, config.encoder_attention_heads,
                                                          pre_norm=pre_norm, activation=activation)
        decoder = transformer_spec.TransformerDecoderSpec(config.decoder_layers, config.decoder_attention_heads,
                                                          pre_norm=pre_norm, activation=activation)
        self.set_stack(encoder, model.encoder, config)
        self.set_stack(decoder, model.decoder, config)
        for layer_spec, layer in zip(encoder.layer, model.encoder.layers, strict=True):
            self.set_self_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_layer_norm)
            self.set_ffn(layer_spec.ffn, layer)
        for layer_spec, layer in zip(decoder.layer, model.decoder.layers, strict=True):
            self.set_self_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_layer_norm)
            self.set_cross_attention(layer_spec.attention, layer.cross_attn, layer.cross_attn_layer_norm)
            self.set_ffn(layer_spec.ffn, layer)
        set_linear(decoder.projection, self.model.lm_head)
        if self.model.final_logits_bias is not None:  # (1, V): the logits' bias, the projection's bias to the engine
            decoder.projection.bias = self.model.final_logits_bias.detach()[0]
        spec = transformer_spec.TransformerSpec(encoder, decoder)
        self.set_config(spec.config, config)
        tokens = vocabulary_tokens(self.tokenizer, config.vocab_size)
        spec.register_source_vocabulary(tokens)
        spec.register_target_vocabulary(tokens)
        return spec

    @staticmethod
    def set_stack(spec: Any, stack: Any, config: Any) -> None:
        """Embeddings (x embed_scale, + the position table), and the final LayerNorm of a pre-LN stack."""
        embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
        embeddings.weight = stack.embeddings.embed_tokens.weight.detach()
        spec.scale_embeddings = float(stack.embeddings.embed_scale)
        spec.position_encodings.encodings = position_table(stack.embeddings, config.max_position_embeddings)
        if stack.final_layer_norm is not None:
            set_layer_norm(spec.layer_norm, stack.final_layer_norm)

    @staticmethod
    def set_self_attention(spec: Any, attention: Any, norm: Any) -> None:
        """[W^Q; W^K; W^V] is already one matrix, as the engine wants it, then W^O."""
        set_linear(spec.linear[0], attention.qkv_proj)
        set_linear(spec.linear[1], attention.out_proj)
        set_layer_norm(spec.layer_norm, norm)

    @staticmethod
    def set_cross_attention(spec: Any, attention: Any, norm: Any) -> None:
        """W^Q, then [W^K; W^V] (one matrix, as the engine wants it), then W^O."""
        set_linear(spec.linear[0], attention.q_proj)
        set_linear(spec.linear[1], attention.kv_proj)
        set_linear(spec.linear[2], attention.out_proj)
        set_layer_norm(spec.layer_norm, norm)

    @staticmethod
    def set_ffn(spec: Any, layer: Any) -> None:
        set_linear(spec.linear_0, layer.ffn.fc1)
        set_linear(spec.linear_1, layer.ffn.fc2)
        set_layer_norm(spec.layer_norm, layer.ffn_layer_norm)

    def set_config(self, spec_config: Any, config: Any) -> None:
        """The special tokens by name (the engine speaks tokens, not ids) and the LayerNorm epsilon."""
        name = self.tokenizer.convert_ids_to_tokens
        if config.bos_token_id is not None:  # none (Marian's): the engine's default, never used (module docstring)
            spec_config.bos_token = name(config.bos_token_id)
        spec_config.eos_token = name(config.eos_token_id)
        spec_config.unk_token = self.tokenizer.unk_token or name(config.pad_token_id)
        spec_config.decoder_start_token = name(config.decoder_start_token_id)
        spec_config.layer_norm_epsilon = float(config.layer_norm_eps)


def set_linear(spec: Any, linear: Any) -> None:
    spec.weight = linear.weight.detach()
    if linear.bias is not None:
        spec.bias = linear.bias.detach()


def set_layer_norm(spec: Any, norm: Any) -> None:
    spec.gamma = norm.weight.detach()
    spec.beta = norm.bias.detach()


def export_ctranslate2(model_dir: str | os.PathLike, output_dir: str | os.PathLike, quantization: str = "float32",
                       overwrite: bool = False) -> Path:
    """Export the Transformer in ``model_dir`` to a CTranslate2 folder ``output_dir``, with its tokenizer and
    generation defaults; written beside it under a temporary name and renamed into place when complete.

    :param quantization: how the weights are stored: ``float32``, ``int8``, ``int8_float32``, ``bfloat16`` or
        ``float16`` (CTranslate2 converts them to the compute type at load time, so any folder runs on any CPU)
    """
    if quantization not in QUANTIZATIONS:
        raise EncdecError(f"`quantization` must be one of {list(QUANTIZATIONS)}, got {quantization!r}.")
    require_ctranslate2()
    model_dir = require_model_folder(model_dir)
    refuse_overlap(output_dir, [model_dir])  # before anything is loaded or replaced, --overwrite or not
    model, tokenizer = load_model_and_tokenizer(model_dir)
    converter = EncdecTransformerConverter(model, tokenizer)  # refuses the RNN family before anything is written
    output_dir = refuse_existing(output_dir, overwrite, "export folder", folder=True)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=output_dir.parent, prefix=f".{output_dir.name}."))
    try:  # everything is written under a temporary name; the old folder goes only once the new one is complete
        converter.convert(str(staging / "ct2"), quantization=None if quantization == "float32" else quantization)
        for item in (staging / "ct2").iterdir():
            item.rename(staging / item.name)
        (staging / "ct2").rmdir()
        tokenizer.save_pretrained(staging)
        model.generation_config.save_pretrained(staging)
        atomic_write_json(staging / EXPORT_INFO, export_info(model, quantization, model_dir))
        if output_dir.exists():
            shutil.rmtree(output_dir)
        staging.rename(output_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return output_dir


def export_command(model_dir: str | os.PathLike, output_dir: str | os.PathLike, quantize: str, overwrite: bool) -> str:
    """``encdec export --format ctranslate2`` (its backend's ``exporter``): export, and the line it prints (with the
    note when int8 weights measured slower than float32 for a model this small)."""
    out = export_ctranslate2(model_dir, output_dir, quantization=quantize, overwrite=overwrite)
    if quantize.startswith("int8"):  # the folder will compute in int8: say when that is the slower choice
        note_if_int8_is_slower(BACKEND.name, read_export_info(out)["model_config"])
    return (f"CTranslate2 model ({quantize}) written to {out}; translate with "
            f"`encdec translate --engine {BACKEND.name} --model {out}`")


def export_info(model: PreTrainedModel, quantization: str, model_dir: Path) -> dict[str, Any]:
    """What ``encdec_export.json`` records: the engine, the weights' type, and the source model's config."""
    return {"engine": "ctranslate2", "ctranslate2_version": ctranslate2.__version__, "quantization": quantization,
            "source_folder": str(model_dir.resolve()), "model_config": model.config.to_dict()}


__all__ = ["EncdecTransformerConverter", "QUANTIZATIONS", "RNN_REFUSAL", "export_command", "export_ctranslate2",
           "vocabulary_tokens"]
