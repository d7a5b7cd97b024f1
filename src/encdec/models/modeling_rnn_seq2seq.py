"""The recurrent encoder-decoder (LSTM or GRU) with no attention, Bahdanau attention or Luong attention.

- Sutskever et al. 2014 (arXiv:1409.3215) and Cho et al. 2014 (arXiv:1406.1078): the encoder's final state starts
  the decoder, and P(y_t | y_<t, x) = softmax(W_o s_t + b_o). With ``context_feeding`` (Cho et al. 2014, Section 2.2)
  the source summary c also joins every decoder input and the readout: P(y_t | y_<t, x) = softmax(W_o [s_t; c] + b_o).
- Bahdanau et al. 2015 (arXiv:1409.0473): before each decoder step, the previous state s_{t-1} scores every
  source position, and the context c_t joins the decoder input.
- Luong et al. 2015 (arXiv:1508.04025), global attention (Section 3.1): after each decoder step, s_t scores every
  source position, and the attentional vector h̃_t = tanh(W_c [c_t; s_t]) feeds the softmax (and, with input
  feeding, the next step).

Shape legend:
    B  batch size              S  source length            T  target tokens in this call
    E  embedding_dim           H  decoder hidden size      He encoder hidden size per direction
    Le / Ld  encoder / decoder layers                      De encoder output width (directions x He)
    A  attention width (H)     O  readout width            V  vocabulary size

This file is copied next to the weights by ``save_pretrained``; it imports only torch, transformers' public
modules and single-dot siblings, so a saved folder loads with ``trust_remote_code=True`` without encdec.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput, Seq2SeqModelOutput

from .attention import additive_attention_scores, masked_softmax
from .configuration_rnn_seq2seq import RNNSeq2SeqConfig
from .seq2seq_utils import Seq2SeqLMMixin, seed_auto_map

RNN_CLASSES: dict[str, type[nn.RNNBase]] = {"lstm": nn.LSTM, "gru": nn.GRU}


class DecoderState(NamedTuple):
    """The decoder's recurrent state between two steps, layer-first as torch's RNNs take it."""

    hidden: torch.Tensor  # (Ld, B, H): s_t of every layer
    cell: torch.Tensor | None  # (Ld, B, H): the LSTM memory cell; None for a GRU
    feed: torch.Tensor | None  # (B, 1, H): h̃_{t-1} with Luong input feeding; None otherwise


class EncoderMemory(NamedTuple):
    """What attention reads from the source."""

    values: torch.Tensor  # (B, S, De): h_i
    keys: torch.Tensor | None  # (B, S, A): h_i as the score projects it, computed once per source
    mask: torch.Tensor | None  # (B, S) boolean, True = real token; None = no padding
    summary: torch.Tensor | None = None  # (B, 1, De): Cho et al.'s fixed context c, with ``context_feeding`` only


@dataclass
class RNNSeq2SeqEncoderOutput(BaseModelOutput):
    """The encoder output. The final states are top-level batch-first tensors, so ``generate`` expands them for
    beams along dim 0 like ``last_hidden_state``.

    Args:
        last_hidden_state: (B, S, De) h_i, zero at padded positions.
        final_hidden_state: (B, Le x directions, He) the last state of each layer and direction, taken at the true
            length (for the backward direction: its state at the first word). Layer-major, as torch orders it.
        final_cell_state: (B, Le x directions, He) the LSTM memory cells, in the same order; None for a GRU.
    """

    final_hidden_state: torch.FloatTensor | None = None
    final_cell_state: torch.FloatTensor | None = None


def split_state(state: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """torch's LSTM state is ``(h, c)``, a GRU's is ``h``: return ``(h, c or None)``."""
    return state if isinstance(state, tuple) else (state, None)


def run_rnn(rnn: nn.RNNBase, inputs: torch.Tensor, hidden: torch.Tensor, cell: torch.Tensor | None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One fused call of a stacked RNN over all of ``inputs``.

    :param inputs: (B, T, In); :param hidden, cell: (L, B, H)
    :return: top-layer states (B, T, H), then the last hidden and cell states (L, B, H)
    """
    outputs, state = rnn(inputs, hidden if cell is None else (hidden, cell))
    return outputs, *split_state(state)


class RNNSeq2SeqCache:
    """The decoder's state between two ``generate`` steps, passed around as ``past_key_values``.

    It holds s_t (and c_t) of every layer, Luong's h̃_t for input feeding, and the encoder keys as the attention
    score projects them (e.g. W_h h_i), computed once per source. Every tensor is batch-first, so beam search's
    reordering and expansion act on dim 0. One decoder step reads it and writes it back; the cost of a step does
    not depend on how many tokens came before.
    """

    is_compileable = False
    is_croppable = False
    _fields = ("hidden", "cell", "feed", "keys")

    def __init__(self) -> None:
        self.hidden: torch.Tensor | None = None  # (B, Ld, H)
        self.cell: torch.Tensor | None = None  # (B, Ld, H)
        self.feed: torch.Tensor | None = None  # (B, 1, H)
        self.keys: torch.Tensor | None = None  # (B, S, A)
        self.seen_tokens = 0

    @property
    def is_empty(self) -> bool:
        return self.hidden is None

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """Number of target tokens the state has consumed."""
        return self.seen_tokens

    def read(self) -> tuple[DecoderState, torch.Tensor | None]:
        """:return: the state, layer-first (Ld, B, H), and the keys (B, S, A)"""
        cell = self.cell.transpose(0, 1).contiguous() if self.cell is not None else None
        return DecoderState(self.hidden.transpose(0, 1).contiguous(), cell, self.feed), self.keys

    def write(self, state: DecoderState, keys: torch.Tensor | None, num_tokens: int) -> None:
        self.hidden = state.hidden.transpose(0, 1)  # (B, Ld, H)
        self.cell = state.cell.transpose(0, 1) if state.cell is not None else None  # (B, Ld, H)
        self.feed = state.feed
        self.keys = keys
        self.seen_tokens += num_tokens

    def _apply(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        for name in self._fields:
            tensor = getattr(self, name)
            if tensor is not None:
                setattr(self, name, fn(tensor))

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search: keep the states of the beams that survive, in place."""
        self._apply(lambda t: t.index_select(0, beam_idx.to(t.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self._apply(lambda t: t.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self._apply(lambda t: t[indices])


class RNNSeq2SeqAttention(nn.Module):
    """Global attention over all source positions: alpha_t = softmax(score(q_t, h_i)) over the real tokens,
    c_t = sum_i alpha_ti h_i (Bahdanau et al. 2015, Eq. 5-6; Luong et al. 2015, Eq. 7).

    A subclass chooses the score; ``project_keys`` is its query-independent half. It runs at the first step of a
    source, inside ``forward`` (so a sharded module has its weights gathered), and the keys then travel with the
    memory and the generation cache.
    """

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__()

    def project_keys(self, values: torch.Tensor) -> torch.Tensor:
        """:param values: (B, S, De) h_i :return: (B, S, A) keys"""
        raise NotImplementedError

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """:param query: (B, T, H) :param keys: (B, S, A) :return: (B, T, S) energies"""
        raise NotImplementedError

    def forward(self, query: torch.Tensor, memory: EncoderMemory
                ) -> tuple[torch.Tensor, torch.Tensor, EncoderMemory]:
        """:param query: (B, T, H) :return: the context c_t (B, T, De), the weights alpha_t (B, T, S), and the
        memory with its keys (projected here at the first step of a source)"""
        if memory.keys is None:
            memory = memory._replace(keys=self.project_keys(memory.values))  # (B, S, A), once per source
        weights = masked_softmax(self.score(query, memory.keys), memory.mask)  # (B, T, S)
        return torch.bmm(weights, memory.values), weights, memory  # (B, T, De)


class AdditiveAttention(RNNSeq2SeqAttention):
    """Bahdanau et al. 2015, Appendix A.1.2: e_ti = v_aᵀ tanh(W_s s_{t-1} + W_h h_i). Luong et al. 2015's ``concat``
    score (Eq. 8), v_aᵀ tanh(W_a [s_t; h_i]), is the same function with W_a = [W_s, W_h]. The width A is H."""

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__(config)
        self.W_s = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.W_h = nn.Linear(config.encoder_output_size, config.hidden_size, bias=False)
        self.v_a = nn.Linear(config.hidden_size, 1, bias=False)

    def project_keys(self, values: torch.Tensor) -> torch.Tensor:
        return self.W_h(values)  # (B, S, A)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return additive_attention_scores(self.W_s(query), keys, self.v_a)  # (B, T, S)


class DotAttention(RNNSeq2SeqAttention):
    """Luong et al. 2015, Eq. 8, ``dot``: score(s_t, h_i) = s_tᵀ h_i (needs De = H, checked by the config)."""

    def project_keys(self, values: torch.Tensor) -> torch.Tensor:
        return values  # (B, S, De)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return torch.bmm(query, keys.transpose(1, 2))  # (B, T, S)


class GeneralAttention(DotAttention):
    """Luong et al. 2015, Eq. 8, ``general``: score(s_t, h_i) = s_tᵀ W_a h_i, computed as s_t · (W_a h_i) with the
    keys W_a h_i projected once per source (the same product, associated differently)."""

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__(config)
        self.W_a = nn.Linear(config.encoder_output_size, config.hidden_size, bias=False)

    def project_keys(self, values: torch.Tensor) -> torch.Tensor:
        return self.W_a(values)  # (B, S, H)


LUONG_SCORES: dict[str, type[RNNSeq2SeqAttention]] = {
    "luong_dot": DotAttention,
    "luong_general": GeneralAttention,
    "luong_concat": AdditiveAttention,
}


class ZeroBridge(nn.Module):
    """The decoder starts from zeros; it sees the source through attention only."""

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__()
        self.num_layers = config.decoder_layers
        self.hidden_size = config.hidden_size

    def forward(self, final_hidden: torch.Tensor, final_cell: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        zeros = final_hidden.new_zeros(self.num_layers, final_hidden.size(0), self.hidden_size)  # (Ld, B, H)
        return zeros, (zeros if final_cell is not None else None)


class LastStateBridge(nn.Module):
    """s_0 = h_T and c'_0 = c_T, layer by layer (Sutskever et al. 2014; Luong et al. 2015). For a bidirectional
    encoder, layer l starts from [h_T^forward; h_1^backward] of encoder layer l."""

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__()
        self.num_layers = config.decoder_layers

    def merge_directions(self, final: torch.Tensor) -> torch.Tensor:
        """(B, Le x directions, He) -> (Ld, B, directions x He)"""
        return final.reshape(final.size(0), self.num_layers, -1).transpose(0, 1).contiguous()

    def forward(self, final_hidden: torch.Tensor, final_cell: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        cell = self.merge_directions(final_cell) if final_cell is not None else None
        return self.merge_directions(final_hidden), cell


class LinearTanhBridge(nn.Module):
    """Bahdanau et al. 2015, Appendix A.2.2: s_0 = tanh(W_s h_1^backward), generalised: every decoder layer's h (and
    LSTM c) comes from one tanh layer over the final states of all encoder layers and directions."""

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__()
        in_features = config.encoder_layers * config.encoder_output_size
        out_features = config.decoder_layers * config.hidden_size
        self.num_layers = config.decoder_layers
        self.W_s = nn.Linear(in_features, out_features, bias=False)
        self.W_cell = nn.Linear(in_features, out_features, bias=False) if config.cell_type == "lstm" else None

    def initial(self, W: nn.Linear, final: torch.Tensor) -> torch.Tensor:
        """(B, Le x directions, He) -> (Ld, B, H)"""
        state = torch.tanh(W(final.flatten(1)))  # (B, Ld x H)
        return state.view(final.size(0), self.num_layers, -1).transpose(0, 1).contiguous()  # (Ld, B, H)

    def forward(self, final_hidden: torch.Tensor, final_cell: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor | None]:
        cell = self.initial(self.W_cell, final_cell) if final_cell is not None else None
        return self.initial(self.W_s, final_hidden), cell


BRIDGES: dict[str, type[nn.Module]] = {"zero": ZeroBridge, "last": LastStateBridge, "linear_tanh": LinearTanhBridge}


class DecoderStep(nn.Module):
    """The decoder without attention (Sutskever et al. 2014; Cho et al. 2014): s_t = RNN(E y_{t-1}, s_{t-1}), and
    the softmax reads s_t.

    A decoder step maps the embedded previous tokens (B, T, E) and the state to the readout (B, T, O), the new state,
    the alignment weights (B, T, S) or None, and the memory (whose keys its attention projects at the first step).
    It takes T > 1 only where ``fused`` is True, that is where one call over the whole target gives the same result
    as T calls of one token.
    """

    fused = True

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__()
        num_layers = config.decoder_layers
        self.rnn = RNN_CLASSES[config.cell_type](
            config.decoder_input_size, config.hidden_size, num_layers, batch_first=True,
            dropout=config.dropout if num_layers > 1 else 0.0,
        )

    def forward(self, inputs: torch.Tensor, state: DecoderState, memory: EncoderMemory
                ) -> tuple[torch.Tensor, DecoderState, torch.Tensor | None, EncoderMemory]:
        """:param inputs: (B, T, E) :return: s_t (B, T, H), the state, None, the memory as given"""
        outputs, hidden, cell = run_rnn(self.rnn, inputs, state.hidden, state.cell)  # (B, T, H)
        return outputs, DecoderState(hidden, cell, None), None, memory


class ContextFeedingDecoderStep(DecoderStep):
    """Cho et al. 2014, Section 2.2: one fixed context c summarises the source, and both the recurrence and the
    output read it at every step: s_t = RNN([E y_{t-1}; c], s_{t-1}), p(y_t) = g([s_t; c]).

    c is the top encoder layer's final state, both directions concatenated ([h_T^forward; h_1^backward]). Cho et al.
    take c = tanh(V h_N) with a learned V; here c is h_N itself (already in [-1, 1]), and the weights that read c
    (the RNN's input weights and W_o) are linear maps of it anyway. As in
    ``BahdanauDecoderStep``, g is one linear map of [s_t; c] (their maxout over y_{t-1} left out). c does not change
    with t, so the whole target runs in one call (``fused``).
    """

    def forward(self, inputs: torch.Tensor, state: DecoderState, memory: EncoderMemory
                ) -> tuple[torch.Tensor, DecoderState, None, EncoderMemory]:
        """:param inputs: (B, T, E) :return: [s_t; c] (B, T, H + De), the state, None, the memory as given"""
        context = memory.summary.expand(-1, inputs.size(1), -1)  # (B, T, De)
        outputs, hidden, cell = run_rnn(self.rnn, torch.cat([inputs, context], dim=-1), state.hidden, state.cell)
        return torch.cat([outputs, context], dim=-1), DecoderState(hidden, cell, None), None, memory


class BahdanauDecoderStep(DecoderStep):
    """Bahdanau et al. 2015, Section 3.1 and Appendix A.2: the top layer's previous state s_{t-1} attends (Eq. 5-6,
    additive score of A.1.2), then s_t = RNN([E y_{t-1}; c_t], s_{t-1}).

    The readout is [s_t; c_t]: the paper's p(y_t) = g(y_{t-1}, s_t, c_t) (Eq. 4) with the deep-output maxout layer
    (A.2.2) reduced to one linear map W_o [s_t; c_t] + b_o and y_{t-1} left out. The attention needs s_{t-1}, so
    the step takes one token at a time (``fused = False``).
    """

    fused = False

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__(config)
        self.attention = AdditiveAttention(config)

    def forward(self, inputs: torch.Tensor, state: DecoderState, memory: EncoderMemory
                ) -> tuple[torch.Tensor, DecoderState, torch.Tensor, EncoderMemory]:
        """:param inputs: (B, 1, E) :return: [s_t; c_t] (B, 1, H + De), the state, alpha_t (B, 1, S), the memory"""
        previous = state.hidden[-1:].transpose(0, 1)  # (B, 1, H): s_{t-1} of the top layer
        context, weights, memory = self.attention(previous, memory)  # (B, 1, De), (B, 1, S); W_h h_i kept
        rnn_inputs = torch.cat([inputs, context], dim=-1)  # (B, 1, E + De)
        outputs, hidden, cell = run_rnn(self.rnn, rnn_inputs, state.hidden, state.cell)  # (B, 1, H)
        readout = torch.cat([outputs, context], dim=-1)  # (B, 1, H + De)
        return readout, DecoderState(hidden, cell, None), weights, memory


class LuongDecoderStep(DecoderStep):
    """Luong et al. 2015, Section 3: s_t = RNN(x_t, s_{t-1}); alpha_t = align(s_t, h_i) (Eq. 7, score of Eq. 8);
    c_t = sum_i alpha_ti h_i; h̃_t = tanh(W_c [c_t; s_t]) (Eq. 5), which the softmax reads (Eq. 6).

    With input feeding (Section 3.3) x_t = [E y_{t-1}; h̃_{t-1}], one token at a time. Without it x_t = E y_{t-1}:
    the RNN runs over the whole target in one call and attention for all steps is one batched product.
    """

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__(config)
        self.attention = LUONG_SCORES[config.attention](config)
        self.W_c = nn.Linear(config.encoder_output_size + config.hidden_size, config.hidden_size, bias=False)
        self.input_feeding = config.input_feeding
        self.fused = not config.input_feeding

    def forward(self, inputs: torch.Tensor, state: DecoderState, memory: EncoderMemory
                ) -> tuple[torch.Tensor, DecoderState, torch.Tensor, EncoderMemory]:
        """:param inputs: (B, T, E) (T = 1 with input feeding)
        :return: h̃_t (B, T, H), the state, alpha_t (B, T, S), the memory"""
        rnn_inputs = torch.cat([inputs, state.feed], dim=-1) if self.input_feeding else inputs  # (B, T, E [+ H])
        outputs, hidden, cell = run_rnn(self.rnn, rnn_inputs, state.hidden, state.cell)  # (B, T, H)
        context, weights, memory = self.attention(outputs, memory)  # (B, T, De), (B, T, S)
        attentional = torch.tanh(self.W_c(torch.cat([context, outputs], dim=-1)))  # (B, T, H): h̃_t
        feed = attentional if self.input_feeding else None  # (B, 1, H)
        return attentional, DecoderState(hidden, cell, feed), weights, memory


def build_decoder_step(config: RNNSeq2SeqConfig) -> DecoderStep:
    if config.attention == "none":
        return ContextFeedingDecoderStep(config) if config.context_feeding else DecoderStep(config)
    if config.attention == "bahdanau":
        return BahdanauDecoderStep(config)
    return LuongDecoderStep(config)


def source_lengths(attention_mask: torch.Tensor | None, batch_size: int, length: int) -> torch.Tensor:
    """:param attention_mask: (B, S), 1 = token, 0 = padding, right-padded :return: (B,) lengths on the CPU"""
    if attention_mask is None:
        return torch.full((batch_size,), length, dtype=torch.long)
    lengths = attention_mask.sum(dim=1)  # (B,)
    positions = torch.arange(length, device=attention_mask.device)  # (S,)
    if not torch.equal(attention_mask.bool(), positions[None, :] < lengths[:, None]):
        raise ValueError("The RNN encoder packs sequences by length: the source must be right-padded (tokens first, "
                         "then padding), e.g. a tokenizer with `padding_side='right'`.")
    if int(lengths.min()) < 1:
        raise ValueError("Every source sequence needs at least one token (found an all-padding row).")
    return lengths.cpu()


class RNNSeq2SeqEncoder(nn.Module):
    """Embedding, then a stacked (optionally bidirectional) LSTM/GRU over the packed source: h_i, h_T, c_T.

    Packing (``enforce_sorted=False``) keeps padding out: the outputs at padded positions are zero and the final
    states are taken at each sequence's true length.
    """

    main_input_name = "input_ids"

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_dim, config.pad_token_id)
        self.dropout = config.dropout
        self.rnn = RNN_CLASSES[config.cell_type](
            config.embedding_dim, config.encoder_hidden_size, config.encoder_layers, batch_first=True,
            dropout=config.dropout if config.encoder_layers > 1 else 0.0, bidirectional=config.bidirectional_encoder,
        )

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> RNNSeq2SeqEncoderOutput:
        """:param input_ids: (B, S); :param attention_mask: (B, S), 1 = token, 0 = padding (right-padded)
        :return: ``last_hidden_state`` (B, S, De) and the final states (B, Le x directions, He)"""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `input_ids` / `inputs_embeds`.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, S, E)
        batch_size, length = inputs_embeds.shape[:2]
        embeds = nn.functional.dropout(inputs_embeds, p=self.dropout, training=self.training)
        lengths = source_lengths(attention_mask, batch_size, length)
        packed = pack_padded_sequence(embeds, lengths, batch_first=True, enforce_sorted=False)
        packed_outputs, state = self.rnn(packed)  # the final states come back in the original batch order
        outputs, _ = pad_packed_sequence(packed_outputs, batch_first=True, total_length=length)  # (B, S, De)
        hidden, cell = split_state(state)  # (Le x directions, B, He) each
        return RNNSeq2SeqEncoderOutput(
            last_hidden_state=outputs,
            final_hidden_state=hidden.transpose(0, 1).contiguous(),  # (B, Le x directions, He)
            final_cell_state=cell.transpose(0, 1).contiguous() if cell is not None else None,
        )


class RNNSeq2SeqDecoder(nn.Module):
    """Embedding, the bridge from the encoder's final states, and the decoder step, unrolled over the target."""

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_dim, config.pad_token_id)
        self.dropout = config.dropout
        self.input_feeding = config.input_feeding
        self.context_feeding = config.context_feeding
        self.num_directions = config.num_directions
        self.hidden_size = config.hidden_size
        self.bridge = BRIDGES[config.bridge](config)
        self.step = build_decoder_step(config)
        # weight tying needs the softmax input to be E wide: a bias-free linear map when the readout is not
        self.output_projection = nn.Linear(config.readout_size, config.output_size, bias=False) \
            if config.readout_size != config.output_size else None

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

    def initial_state(self, encoder_outputs: RNNSeq2SeqEncoderOutput) -> DecoderState:
        final_hidden = encoder_outputs.final_hidden_state  # (B, Le x directions, He)
        hidden, cell = self.bridge(final_hidden, encoder_outputs.final_cell_state)  # (Ld, B, H) each
        feed = final_hidden.new_zeros(final_hidden.size(0), 1, self.hidden_size) if self.input_feeding else None
        return DecoderState(hidden, cell, feed)  # h̃_0 = 0

    def unroll(self, inputs: torch.Tensor, state: DecoderState, memory: EncoderMemory
               ) -> tuple[torch.Tensor, DecoderState, torch.Tensor | None, EncoderMemory]:
        """Run the step over ``inputs`` (B, T, E): in one call where it is ``fused``, else token by token.

        :return: the readouts (B, T, O), the final state, the alignment weights (B, T, S) or None, the memory
        """
        if self.step.fused:
            return self.step(inputs, state, memory)
        readouts, alignments = [], []
        for t in range(inputs.size(1)):
            readout, state, weights, memory = self.step(inputs[:, t : t + 1], state, memory)  # (B, 1, O), (B, 1, S)
            readouts.append(readout)
            alignments.append(weights)
        return torch.cat(readouts, dim=1), state, torch.cat(alignments, dim=1), memory  # (B, T, O), (B, T, S)

    def forward(
        self,
        input_ids: torch.LongTensor | None,
        encoder_outputs: RNNSeq2SeqEncoderOutput,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: RNNSeq2SeqCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:param input_ids: (B, T) previous tokens y_{t-1} (only the new ones when the cache holds a state)
        :param encoder_attention_mask: (B, S) :param past_key_values: read, then updated in place
        :return: the vector the softmax reads (B, T, O) and the alignment weights (B, T, S) or None"""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `decoder_input_ids` / `decoder_inputs_embeds` (or `labels`).")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, T, E)
        embeds = nn.functional.dropout(inputs_embeds, p=self.dropout, training=self.training)
        values = encoder_outputs.last_hidden_state  # (B, S, De)
        if past_key_values is None or past_key_values.is_empty:
            state, keys = self.initial_state(encoder_outputs), None  # the step's attention projects the keys
        else:
            state, keys = past_key_values.read()
        mask = encoder_attention_mask.bool() if encoder_attention_mask is not None else None
        summary = None
        if self.context_feeding:  # c: the top layer's final state, directions concatenated (B, 1, De)
            summary = encoder_outputs.final_hidden_state[:, -self.num_directions :].flatten(1).unsqueeze(1)
        memory = EncoderMemory(values, keys, mask, summary)
        readout, state, alignments, memory = self.unroll(embeds, state, memory)
        if past_key_values is not None:
            past_key_values.write(state, memory.keys, embeds.size(1))
        readout = nn.functional.dropout(readout, p=self.dropout, training=self.training)
        if self.output_projection is not None:
            readout = self.output_projection(readout)  # (B, T, E)
        return readout, alignments


def as_encoder_output(encoder_outputs: RNNSeq2SeqEncoderOutput | tuple) -> RNNSeq2SeqEncoderOutput:
    """Accept the encoder output as returned, or as its ``to_tuple()``: (h_i, final h[, final c])."""
    if isinstance(encoder_outputs, RNNSeq2SeqEncoderOutput):
        return encoder_outputs
    if isinstance(encoder_outputs, BaseModelOutput) or len(encoder_outputs) not in (2, 3):
        raise ValueError("`encoder_outputs` must come from this model's encoder (it needs the final states), as its "
                         "output or its `to_tuple()`.")
    return RNNSeq2SeqEncoderOutput(last_hidden_state=encoder_outputs[0], final_hidden_state=encoder_outputs[1],
                                   final_cell_state=encoder_outputs[2] if len(encoder_outputs) == 3 else None)


class RNNSeq2SeqPreTrainedModel(PreTrainedModel):
    config_class = RNNSeq2SeqConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = False
    # The recurrent stacks and the decoder step are the units to keep whole (device maps) and to shard (FSDP). The
    # embeddings, the bridge and the output layer stay outside them: tied weights must not sit in two units.
    _no_split_modules = ["LSTM", "GRU", "DecoderStep", "BahdanauDecoderStep", "LuongDecoderStep"]
    # forward takes `num_items_in_batch`, so Trainer hands it over and the loss is exact under accumulation
    accepts_loss_kwargs = True

    def __init__(self, config: RNNSeq2SeqConfig, *inputs, **kwargs) -> None:
        super().__init__(config, *inputs, **kwargs)
        seed_auto_map(config, __name__, "RNNSeq2SeqModel")

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Every parameter uniform in [-init_range, init_range] (Sutskever et al. 2014, Section 3.4: 0.08; Luong
        et al. 2015, Section 4.1: 0.1), LSTM forget-gate biases included; a zero embedding row for padding."""
        for param in module.parameters(recurse=False):
            init.uniform_(param, -self.config.init_range, self.config.init_range)
        if isinstance(module, nn.Embedding) and module.padding_idx is not None \
                and not getattr(module.weight, "_is_hf_initialized", False):
            init.zeros_(module.weight[module.padding_idx])


class RNNSeq2SeqModel(RNNSeq2SeqPreTrainedModel):
    """The bare encoder-decoder: returns the vector the softmax reads (B, T, O) and the alignments."""

    # the source and target vocabularies are joint, so one matrix can serve both embeddings (and the output
    # projection, see below); applied only when `config.tie_word_embeddings` is True
    _tied_weights_keys = {"decoder.embed_tokens.weight": "encoder.embed_tokens.weight"}

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__(config)
        self.encoder = RNNSeq2SeqEncoder(config)
        self.decoder = RNNSeq2SeqDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.embed_tokens = value
        if self.config.tie_word_embeddings:
            self.decoder.embed_tokens = value

    def get_encoder(self, modality: str | None = None) -> RNNSeq2SeqEncoder:
        return self.encoder

    def get_decoder(self) -> RNNSeq2SeqDecoder:
        return self.decoder

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: RNNSeq2SeqEncoderOutput | tuple | None = None,
        past_key_values: RNNSeq2SeqCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> Seq2SeqModelOutput:
        """:param input_ids: (B, S) source ids; :param attention_mask: (B, S) 1 = token, 0 = pad (right-padded);
        :param decoder_input_ids: (B, T) (only the new tokens when the cache holds a state);
        :param decoder_attention_mask: accepted for API compatibility and unused: the decoder is causal, so
            right-padding of the target cannot change earlier positions.
        :return: ``Seq2SeqModelOutput`` with ``last_hidden_state`` (B, T, O), the cache, and with
            ``output_attentions`` the alignments as ``cross_attentions``: one entry (B, 1, T, S)"""
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids, attention_mask, inputs_embeds)
        encoder_outputs = as_encoder_output(encoder_outputs)
        if use_cache and past_key_values is None:
            past_key_values = RNNSeq2SeqCache()
        elif not use_cache:
            past_key_values = None
        hidden, alignments = self.decoder(decoder_input_ids, encoder_outputs, attention_mask, past_key_values,
                                          decoder_inputs_embeds)
        cross_attentions = (alignments[:, None],) if output_attentions and alignments is not None else None
        return Seq2SeqModelOutput(
            last_hidden_state=hidden,
            past_key_values=past_key_values,
            cross_attentions=cross_attentions,  # ((B, 1, T, S),): one "layer", one "head"
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


class RNNSeq2SeqForConditionalGeneration(Seq2SeqLMMixin, RNNSeq2SeqPreTrainedModel, GenerationMixin):
    """The encoder-decoder with its output layer: P(y_t | y_<t, x) = softmax(W_o o_t + b_o), where o_t is s_t (no
    attention), [s_t; c_t] (Bahdanau) or h̃_t (Luong, Eq. 6), mapped to E wide first when the weights are tied.
    Every variant keeps the bias b_o (Luong's Eq. 6 has none; a bias costs V parameters and cannot hurt)."""

    _tied_weights_keys = {
        "lm_head.weight": "model.encoder.embed_tokens.weight",
        "model.decoder.embed_tokens.weight": "model.encoder.embed_tokens.weight",
    }

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__(config)
        self.model = RNNSeq2SeqModel(config)
        self.lm_head = nn.Linear(config.output_size, config.vocab_size)  # W_o, b_o
        self.post_init()
        if self.generation_config is not None:  # saved as generation_config.json; transformers' default is 20
            # max_new_tokens rather than max_length: a caller's own max_new_tokens then replaces it without a warning
            self.generation_config.max_new_tokens = 256

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        """The state is recurrent, not key/value: generate must not inject a ``DynamicCache``; the model makes its
        own ``RNNSeq2SeqCache`` on the first step."""
        return False

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: RNNSeq2SeqEncoderOutput | tuple | None = None,
        past_key_values: RNNSeq2SeqCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
    ) -> Seq2SeqLMOutput:
        """:param labels: (B, T) target ids, -100 = ignored; they are shifted right into ``decoder_input_ids``
        when those are not given. :return: ``Seq2SeqLMOutput`` with ``logits`` (B, T, V)"""
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
            encoder_outputs=encoder_outputs, past_key_values=past_key_values, inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds, use_cache=use_cache, output_attentions=output_attentions,
        )
        return self.lm_output(outputs, labels, num_items_in_batch)


__all__ = [
    "RNNSeq2SeqCache",
    "RNNSeq2SeqForConditionalGeneration",
    "RNNSeq2SeqModel",
    "RNNSeq2SeqPreTrainedModel",
]
