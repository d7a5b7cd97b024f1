"""The two graphs of an ONNX export, as torch modules that take and return flat, batch-first tensors: what
``torch.onnx.export`` traces (``encdec.ship.onnx_export``). Each runs the model's own code: the encoder wrapper calls
the model's encoder (and, for the RNN, the decoder's bridge and the attention's key projection), the decoder wrapper
builds the model's cache object from its past tensors and calls the model's ``forward`` with it, as ``generate()``
does at every step. The names follow the layout of ``encdec.inference.engines.onnx_layout``.

- Transformer (Vaswani et al. 2017): the encoder graph returns each decoder layer's cross-attention keys and values
  ``cross.{i}.key``/``cross.{i}.value`` (B, H, S, Dh), computed once per source; the state is each layer's
  self-attention keys and values ``self.{i}.key``/``self.{i}.value`` (B, H, past_len, Dh), empty at the first step.
  The decoder takes any number of new tokens (a whole prefix at once, for teacher forcing).
- RNN (Bahdanau et al. 2015; Luong et al. 2015): the encoder graph returns h_j ``encoder_hidden_states`` (B, S, De),
  the attention's keys ``encoder_keys`` (B, S, A) (with attention), the encoder's final states
  ``encoder_final_hidden`` (with Cho et al.'s context feeding), and the decoder's initial state from the bridge:
  ``init.hidden`` (B, Ld, H), ``init.cell`` (LSTM), ``init.feed`` (B, 1, H) (Luong's input feeding). The state is
  ``hidden``, ``cell`` and ``feed``, the same shapes. A decoder step that feeds back into itself (Bahdanau, Luong with
  input feeding) is a loop over the tokens that tracing unrolls, so its graph takes one token a call
  (``multi_token`` False in the manifest).

Shape legend: B batch, S source length, T new target tokens, H heads (Transformer) or hidden size (RNN), Dh head
dim, Ld decoder layers, De encoder output width, A attention width, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import BaseModelOutput

from ..inference.engines.onnx_layout import EMPTY, StateEntry
from ..models.modeling_rnn_seq2seq import RNNSeq2SeqEncoderOutput
from ..models.rnn_cache import DecoderState, RNNSeq2SeqCache

SOURCE_INPUTS = ["input_ids", "attention_mask"]
DECODER_INPUTS = ["input_ids", "encoder_attention_mask"]


@dataclass(frozen=True)
class GraphNames:
    """What the two graphs of one model take and return (before the exporter drops an input a graph never reads)."""

    encoder_outputs: list[str]
    decoder_encoder_inputs: list[str]  # the encoder outputs the decoder reads
    state: list[StateEntry]
    multi_token: bool  # the decoder takes T > 1 new tokens in one call
    source_axes: dict[str, int]  # the encoder outputs that are as long as the source: their source axis

    @property
    def decoder_inputs(self) -> list[str]:
        return [*DECODER_INPUTS, *self.decoder_encoder_inputs, *(entry.past for entry in self.state)]

    @property
    def decoder_outputs(self) -> list[str]:
        return ["logits", *(entry.present for entry in self.state)]


def graph_names(model: PreTrainedModel) -> GraphNames:
    """The names (and the state's shapes) of ``model``'s graphs."""
    config = model.config
    if config.model_type == "transformer_seq2seq":
        heads, head_dim = config.decoder_attention_heads, config.d_model // config.decoder_attention_heads
        cross = [f"cross.{i}.{part}" for i in range(config.decoder_layers) for part in ("key", "value")]
        state = [StateEntry(f"self.{i}.{part}", ["batch", heads, "past_len", head_dim], EMPTY, grow_axis=2)
                 for i in range(config.decoder_layers) for part in ("key", "value")]
        return GraphNames(cross, cross, state, multi_token=True, source_axes=dict.fromkeys(cross, 2))
    memory = ["encoder_hidden_states", "encoder_keys"] if config.attention != "none" else []
    if config.attention == "none" and config.context_feeding:
        memory.append("encoder_final_hidden")
    parts = ["hidden", *(["cell"] if config.cell_type == "lstm" else []), *(["feed"] if config.input_feeding else [])]
    state = [StateEntry(part, ["batch", 1 if part == "feed" else config.decoder_layers, config.hidden_size],
                        f"init.{part}") for part in parts]
    # h_j is an output even where the decoder does not read it (no attention): the exporter fails on an RNN whose
    # output sequence is left unused, and a runner may want it
    outputs = list(dict.fromkeys(["encoder_hidden_states", *memory, *(f"init.{part}" for part in parts)]))
    return GraphNames(outputs, memory, state, multi_token=model.model.decoder.step.fused,
                      source_axes={"encoder_hidden_states": 1, "encoder_keys": 1})


class TransformerEncoderGraph(nn.Module):
    """(input_ids, attention_mask) -> ``cross.{i}.key``, ``cross.{i}.value`` of every decoder layer, (B, H, S, Dh):
    the encoder, then each cross-attention's projection W^K, W^V of its output (Section 3.2.3), computed once per
    source as the model's cache keeps them."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        hidden = self.model.model.encoder(input_ids, attention_mask, return_dict=True).last_hidden_state  # (B, S, D)
        outputs = []
        for layer in self.model.model.decoder.layers:
            _, key, value = layer.cross_attn.project(hidden[:, :1], hidden, None)  # (B, H, S, Dh) each
            outputs += [key, value]
        return tuple(outputs)


class TransformerDecoderGraph(nn.Module):
    """(input_ids, encoder_attention_mask, cross K/V..., past self K/V...) -> logits (B, T, V), present self K/V
    (B, H, past_len + T, Dh): the model's forward over an ``EncoderDecoderCache`` holding the past and the cross
    K/V (marked computed, as after generate()'s first step)."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model = model
        self.num_layers = model.config.decoder_layers

    def forward(self, input_ids: torch.Tensor, encoder_attention_mask: torch.Tensor,
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        cross, past = tensors[: 2 * self.num_layers], tensors[2 * self.num_layers :]
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        for i in range(self.num_layers):
            cache.cross_attention_cache.update(cross[2 * i], cross[2 * i + 1], i)
            cache.is_updated[i] = True
            cache.self_attention_cache.update(past[2 * i], past[2 * i + 1], i)
        # the decoder reads the encoder output only for the cross mask's sizes (B, S): the keys of head 0 have them
        encoded = BaseModelOutput(last_hidden_state=cross[0][:, 0])  # (B, S, Dh)
        out = self.model(encoder_outputs=encoded, attention_mask=encoder_attention_mask, decoder_input_ids=input_ids,
                         cache=cache, use_cache=True, return_dict=True)
        layers = cache.self_attention_cache.layers
        return out.logits, *(tensor for layer in layers for tensor in (layer.keys, layer.values))


class RNNEncoderGraph(nn.Module):
    """(input_ids, attention_mask) -> what the decoder reads from the source and its initial state, batch first
    (``graph_names``): the encoder, the bridge (``decoder.initial_state``) and the attention's key projection
    (``step.project_keys``: U_a h_j, W_a h_j or h_j), as the decoder computes them before its first step."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model = model
        self.names = graph_names(model)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        encoded = self.model.model.encoder(input_ids, attention_mask, return_dict=True)
        decoder = self.model.model.decoder
        state = decoder.initial_state(encoded)
        values = encoded.last_hidden_state  # (B, S, De)
        memory = {"encoder_hidden_states": values, "encoder_keys": decoder.step.project_keys(values),
                  "encoder_final_hidden": encoded.final_hidden_state}  # (B, S, A); (B, Le x directions, He)
        initial = dict(zip(("init.hidden", "init.cell", "init.feed"), state_tensors(state), strict=True))
        found = {**memory, **initial}
        return tuple(found[name] for name in self.names.encoder_outputs)


def state_tensors(state: DecoderState) -> tuple[torch.Tensor | None, ...]:
    """hidden, cell, feed batch first: (B, Ld, H), (B, Ld, H) or None, (B, 1, H) or None."""
    return (state.hidden.transpose(0, 1), None if state.cell is None else state.cell.transpose(0, 1), state.feed)


class RNNDecoderGraph(nn.Module):
    """(input_ids, encoder_attention_mask, memory..., past state...) -> logits (B, T, V), present state: the model's
    forward over an ``RNNSeq2SeqCache`` that holds the past state and the projected keys."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.model = model
        self.names = graph_names(model)

    def forward(self, input_ids: torch.Tensor, encoder_attention_mask: torch.Tensor,
                *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        named = dict(zip(self.names.decoder_inputs[2:], tensors, strict=True))
        past = [named.get(f"past.{part}") for part in ("hidden", "cell", "feed")]
        cache = RNNSeq2SeqCache()
        cache.state.start(DecoderState(past[0].transpose(0, 1).contiguous(),  # (Ld, B, H)
                                       None if past[1] is None else past[1].transpose(0, 1).contiguous(), past[2]))
        if "encoder_keys" in named:
            cache.store_keys(named["encoder_keys"], named["encoder_hidden_states"])
        encoded = RNNSeq2SeqEncoderOutput(last_hidden_state=named.get("encoder_hidden_states"),
                                          final_hidden_state=named.get("encoder_final_hidden"))
        out = self.model(encoder_outputs=encoded, attention_mask=encoder_attention_mask, decoder_input_ids=input_ids,
                         cache=cache, use_cache=True, return_dict=True)
        state = state_tensors(cache.state.read()[0])
        return out.logits, *(tensor for tensor in state if tensor is not None)


def graph_modules(model: PreTrainedModel) -> tuple[nn.Module, nn.Module]:
    """The encoder and decoder wrappers of ``model``'s family, in eval mode: ``torch.onnx.export`` puts a module back
    in the mode it found it in, and a wrapper left in training mode (an ``nn.Module``'s default) would put the model
    back into training mode, its dropout on, after the first export."""
    model.eval()
    if model.config.model_type == "transformer_seq2seq":
        return TransformerEncoderGraph(model).eval(), TransformerDecoderGraph(model).eval()
    return RNNEncoderGraph(model).eval(), RNNDecoderGraph(model).eval()


__all__ = ["DECODER_INPUTS", "SOURCE_INPUTS", "GraphNames", "RNNDecoderGraph", "RNNEncoderGraph",
           "TransformerDecoderGraph", "TransformerEncoderGraph", "graph_modules", "graph_names", "state_tensors"]
