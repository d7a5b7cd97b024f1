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

import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import nn
from torch.func import functional_call
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, CacheLayerMixin
from transformers.modeling_outputs import BaseModelOutput, Seq2SeqLMOutput, Seq2SeqModelOutput
from transformers.utils import ModelOutput, logging

from .attention import additive_attention_scores, masked_softmax
from .configuration_rnn_seq2seq import RNNSeq2SeqConfig
from .seq2seq_utils import OutputFlags, Seq2SeqLMMixin, as_return_type, seed_auto_map

logger = logging.get_logger(__name__)

RNN_CLASSES: dict[str, type[nn.RNNBase]] = {"lstm": nn.LSTM, "gru": nn.GRU}


def warn_no_self_attention() -> None:
    """Say once, when attentions are asked for, which fields an RNN leaves empty (as transformers' models without
    attention leave theirs)."""
    logger.warning_once(
        "RNN seq2seq models have no self-attention: `encoder_attentions` and `decoder_attentions` are None. "
        "`cross_attentions` holds the alignment (one layer, one head), or None with `attention='none'`."
    )


class DecoderState(NamedTuple):
    """The decoder's recurrent state between two steps, layer-first as torch's RNNs take it."""

    hidden: torch.Tensor  # (Ld, B, H): s_t of every layer
    cell: torch.Tensor | None  # (Ld, B, H): the LSTM memory cell; None for a GRU
    feed: torch.Tensor | None  # (B, 1, H): h̃_{t-1} with Luong input feeding; None otherwise

    def map_batch(self, fn: Callable[[torch.Tensor, int], torch.Tensor]) -> DecoderState:
        """``fn(tensor, batch_dim)`` applied to every tensor: beam reordering, expansion and selection."""
        return DecoderState(fn(self.hidden, 1), None if self.cell is None else fn(self.cell, 1),
                            None if self.feed is None else fn(self.feed, 0))


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
        hidden_states: with ``output_hidden_states``, the embedding output (B, S, E) and each layer's output
            (B, S, De), both directions concatenated: Le + 1 tensors, the last one ``last_hidden_state``.
        attentions: always None (no self-attention).
        final_hidden_state: (B, Le x directions, He) the last state of each layer and direction, taken at the true
            length (for the backward direction: its state at the first word). Layer-major, as torch orders it.
        final_cell_state: (B, Le x directions, He) the LSTM memory cells, in the same order; None for a GRU.
    """

    final_hidden_state: torch.FloatTensor | None = None
    final_cell_state: torch.FloatTensor | None = None


class RNNDecoderOutput(NamedTuple):
    """One decoder call: the vector the softmax reads and, as asked, every layer's states and the alignments."""

    readout: torch.Tensor  # (B, T, O)
    hidden_states: tuple[torch.Tensor, ...] | None  # the embedding output (B, T, E), then each layer's s_t (B, T, H)
    alignments: torch.Tensor | None  # (B, 1, T, S): alpha_t, one "head"


def split_state(state: torch.Tensor | tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """torch's LSTM state is ``(h, c)``, a GRU's is ``h``: return ``(h, c or None)``."""
    return state if isinstance(state, tuple) else (state, None)


def run_rnn(rnn: nn.RNNBase, inputs: torch.Tensor, hidden: torch.Tensor, cell: torch.Tensor | None
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """One fused call of a stacked RNN over all of ``inputs``: the fast path.

    :param inputs: (B, T, In); :param hidden, cell: (L, B, H)
    :return: top-layer states (B, T, H), then the last hidden and cell states (L, B, H)
    """
    outputs, state = rnn(inputs, hidden if cell is None else (hidden, cell))
    return outputs, *split_state(state)


def rnn_layer(rnn: nn.RNNBase, layer: int, inputs: torch.Tensor | nn.utils.rnn.PackedSequence,
              state: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None) -> tuple:
    """Layer ``layer`` of a stacked torch RNN run on its own, with that layer's own weights (a weightless one-layer
    twin filled by ``functional_call``). The fused stacked call runs exactly this per layer, so the results are
    bitwise equal; only the dropout between layers is drawn separately (see the callers).

    :return: what the one-layer RNN returns: the outputs and its final state
    """
    directions = 2 if rnn.bidirectional else 1
    input_size = rnn.input_size if layer == 0 else directions * rnn.hidden_size
    twin = type(rnn)(input_size, rnn.hidden_size, 1, bias=rnn.bias, batch_first=rnn.batch_first,
                     bidirectional=rnn.bidirectional, device="meta")  # built per call: no shared mutable module
    weights = {name: getattr(rnn, name.replace("_l0", f"_l{layer}")) for name, _ in twin.named_parameters()}
    return functional_call(twin, weights, (inputs,) if state is None else (inputs, state))


class StepStack:
    """One optional output (a layer's states, or the alignments) gathered over the steps of one decoder call.

    The returned tensor is part of the graph both ways: a loss built on it trains the model (it is computed from
    the steps), and a loss built from the logits back-propagates into it: ``retain_grad()`` on it gets the gradient
    of what the next computations read. A fused call records the whole tensor once, and that is the tensor the next
    computations read. A token-by-token call records one step at a time, and its concatenation comes after all the
    steps, so no later computation reads it. There each step is *tapped* before anything reads it:
    x_t + (P_t - P_t.detach()) equals x_t and sends x_t's gradient into slice t of a zero tensor P, and a hook adds
    P's gradient to the concatenation's ``.grad`` when ``retain_grad()`` was called on it.
    """

    def __init__(self, num_steps: int, dim: int) -> None:
        self.num_steps, self.dim = num_steps, dim  # dim: the time axis
        self.pieces: list[torch.Tensor] = []
        self.recorded = 0
        self.tap: torch.Tensor | None = None

    def __call__(self, piece: torch.Tensor) -> torch.Tensor:
        """Record ``piece`` (steps ``recorded`` .. along ``dim``) and return what the next computation must read."""
        start, width = self.recorded, piece.size(self.dim)
        self.recorded += width
        self.pieces.append(piece)
        if width == self.num_steps or not piece.requires_grad:
            return piece
        if self.tap is None:
            shape = list(piece.shape)
            shape[self.dim] = self.num_steps
            self.tap = piece.new_zeros(shape, requires_grad=True)
        tap = self.tap.narrow(self.dim, start, width)
        return piece + (tap - tap.detach())

    def result(self) -> torch.Tensor:
        """The recorded steps as one tensor, ``num_steps`` long along ``dim``."""
        if len(self.pieces) == 1:
            return self.pieces[0]
        stacked = torch.cat(self.pieces, dim=self.dim)
        if self.tap is not None:
            self.tap.register_hook(functools.partial(add_to_retained_grad, weakref.ref(stacked)))
        return stacked


def add_to_retained_grad(target: weakref.ref, grad: torch.Tensor) -> None:
    """Tensor hook: accumulate ``grad`` into ``target``'s ``.grad`` when ``retain_grad()`` was called on it."""
    tensor = target()
    if tensor is not None and tensor.retains_grad:
        tensor.grad = grad.detach().clone() if tensor.grad is None else tensor.grad + grad.detach()


class DecoderRecord:
    """The decoder's optional outputs over one call, as asked: every layer's states (which makes the step run its
    RNN layer by layer) and the alignments."""

    def __init__(self, num_steps: int, num_layers: int, hidden_states: bool, alignments: bool) -> None:
        self.layers = [StepStack(num_steps, dim=1) for _ in range(num_layers)] if hidden_states else None
        self.alignments = StepStack(num_steps, dim=2) if alignments else None

    def align(self, weights: torch.Tensor) -> torch.Tensor:
        """:param weights: (B, T, S) alpha_t :return: the same, as the context must read them (recorded as
        (B, 1, T, S), the shape transformers gives cross-attentions)"""
        if self.alignments is None:
            return weights
        return self.alignments(weights[:, None])[:, 0]


def run_rnn_layers(rnn: nn.RNNBase, inputs: torch.Tensor, hidden: torch.Tensor, cell: torch.Tensor | None,
                   record: list[StepStack]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The stacked (unidirectional) RNN of ``run_rnn``, layer by layer, recording every layer's states s_t.

    Between layers, dropout as the fused call applies it in training (Zaremba et al. 2014).
    :param inputs: (B, T, In); :param hidden, cell: (L, B, H); :param record: one ``StepStack`` per layer
    :return: as ``run_rnn``
    """
    layer_input, hiddens, cells = inputs, [], []
    for layer, stack in enumerate(record):
        state = hidden[layer : layer + 1] if cell is None else (hidden[layer : layer + 1], cell[layer : layer + 1])
        outputs, final = rnn_layer(rnn, layer, layer_input, state)  # (B, T, H), (1, B, H)
        outputs = stack(outputs)
        final_hidden, final_cell = split_state(final)
        hiddens.append(final_hidden)
        cells.append(final_cell)
        layer_input = nn.functional.dropout(outputs, p=rnn.dropout, training=rnn.training)
    return outputs, torch.cat(hiddens), (torch.cat(cells) if cell is not None else None)  # (L, B, H)


class RNNStateLayer(CacheLayerMixin):
    """The decoder's recurrent state as a transformers cache layer: s_t (and the LSTM's c_t) of every decoder layer,
    and Luong's h̃_t with input feeding.

    A decoder call reads the latest state and writes the state after its tokens; a step's cost does not depend on
    how many tokens came before, and by default only the latest state is kept. ``crop`` needs the earlier ones:
    after ``activate_past_recording()`` (transformers' switch, which assisted and prompt-lookup decoding turn on)
    the layer keeps a checkpoint after every call (in ``generate``, after every token) and the embedded tokens each
    call read, so it can go back to any length since: to a checkpoint, or into a call of several tokens (assisted
    decoding verifies its candidates in one call) by replaying that call's first tokens at the start of the next
    call. While recording, its memory grows with the tokens consumed, as a Transformer's key/value cache does. Beam
    search's reordering keeps only the current state: the earlier ones belong to other hypotheses.
    """

    is_compileable = False
    is_croppable = True  # once recording
    supports_early_init = False

    def __init__(self) -> None:
        super().__init__()
        self.checkpoints: list[tuple[int, DecoderState]] = []  # (tokens consumed, the state after them)
        self.inputs: list[torch.Tensor] = []  # inputs[i]: (B, n, E), read between checkpoints i and i + 1
        self.replay: torch.Tensor | None = None  # (B, r, E): tokens cropped into, run again before the next ones
        self.record_past = False

    def activate_past_recording(self) -> None:
        """Keep every state from now on, so that ``crop`` can go back to it."""
        self.record_past = True

    def start(self, state: DecoderState) -> None:
        """A new source: the decoder's initial state, before any target token."""
        self.checkpoints, self.inputs, self.replay = [(0, state)], [], None
        self.device, self.is_initialized = state.hidden.device, True

    def read(self) -> tuple[DecoderState, torch.Tensor | None]:
        """:return: the latest state and the embedded tokens to replay from it (None, unless cropped into a call)"""
        return self.checkpoints[-1][1], self.replay

    def write(self, state: DecoderState, inputs: torch.Tensor) -> None:
        """:param state: the state after ``inputs`` (B, n, E), which the call read from the latest state on"""
        checkpoint = (self.checkpoints[-1][0] + inputs.size(1), state)
        if self.record_past:
            self.checkpoints.append(checkpoint)
            self.inputs.append(inputs)
        else:
            self.checkpoints, self.inputs = [checkpoint], []
        self.replay = None

    def get_seq_length(self) -> int:
        if not self.checkpoints:
            return 0
        return self.checkpoints[-1][0] + (self.replay.size(1) if self.replay is not None else 0)

    def crop(self, tokens_to_remove: int) -> None:
        """Go back to an earlier length: ``tokens_to_remove`` <= 0 removes that many tokens (transformers' convention:
        ``crop(0)`` changes nothing)."""
        if tokens_to_remove > 0:
            raise ValueError(f"`crop` takes minus the number of tokens to remove, got {tokens_to_remove}; e.g. "
                             "`crop(-2)` goes back two tokens.")
        length = self.get_seq_length()
        target, earliest = length + tokens_to_remove, self.checkpoints[0][0] if self.checkpoints else 0
        if target == length:
            return
        if target < earliest:
            raise ValueError(
                f"Cannot crop the RNN cache back to {target} tokens: it holds the states from {earliest} tokens on. "
                "It keeps earlier ones only while recording (call `activate_past_recording()` on the cache before "
                "decoding; assisted decoding does), and beam search's reordering drops them."
            )
        start = self.checkpoints[-1][0]
        if self.replay is not None and target >= start:  # still inside the call being replayed
            self.replay = self.replay[:, : target - start] if target > start else None
            return
        self.replay, inputs = None, None
        while self.checkpoints[-1][0] > target:
            self.checkpoints.pop()
            inputs = self.inputs.pop()  # what the call ending at the dropped checkpoint read
        start = self.checkpoints[-1][0]
        if start < target:
            self.replay = inputs[:, : target - start]

    def map_batch(self, fn: Callable[[torch.Tensor, int], torch.Tensor]) -> None:
        """``fn(tensor, batch_dim)`` on every state and input kept."""
        self.checkpoints = [(length, state.map_batch(fn)) for length, state in self.checkpoints]
        self.inputs = [fn(inputs, 0) for inputs in self.inputs]
        self.replay = fn(self.replay, 0) if self.replay is not None else None

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search: the state of each surviving beam; the history is dropped (see the class docstring)."""
        self.checkpoints, self.inputs = self.checkpoints[-1:], []
        self.map_batch(lambda tensor, dim: tensor.index_select(dim, beam_idx.to(tensor.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.map_batch(lambda tensor, dim: tensor.repeat_interleave(repeats, dim=dim))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        indices = indices.nonzero().squeeze(-1) if indices.dtype == torch.bool else indices  # a mask, or positions
        self.map_batch(lambda tensor, dim: tensor.index_select(dim, indices.to(tensor.device)))

    def offload(self) -> None:
        self.map_batch(lambda tensor, dim: tensor.to("cpu", non_blocking=True))

    def prefetch(self) -> None:
        if self.is_initialized:
            self.map_batch(lambda tensor, dim: tensor.to(self.device, non_blocking=True))

    def reset(self) -> None:
        self.checkpoints, self.inputs, self.replay = [], [], None
        self.is_initialized = False

    def get_max_length(self) -> int:
        return -1  # no limit

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        raise NotImplementedError("RNNStateLayer holds a recurrent state, set with `start` and `write`.")

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        raise NotImplementedError("RNNStateLayer holds a recurrent state, not key/value states: use `write`.")


class AttentionKeysLayer(CacheLayerMixin):
    """The encoder states as the attention score projects them (``keys``: W_h h_i for Bahdanau and concat, W_a h_i
    for Luong's general, h_i itself for dot), computed at the first decoder step of a source. They depend on the
    source alone, so cropping keeps them."""

    is_compileable = False
    is_croppable = True
    supports_early_init = False

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor | None = None) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor | None = None, *args, **kwargs
               ) -> tuple[torch.Tensor, None]:
        """:param key_states: (B, S, A) :return: the keys, and None (attention reads the values h_i from the
        encoder output)"""
        if not self.is_initialized:
            self.lazy_initialization(key_states)
        self.keys = key_states
        return self.keys, None

    def get_seq_length(self) -> int:
        return self.keys.size(1) if self.keys is not None else 0  # source positions

    def crop(self, tokens_to_remove: int) -> None:
        pass

    def apply(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        if self.keys is not None:
            self.keys = fn(self.keys)

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.apply(lambda keys: keys.index_select(0, beam_idx.to(keys.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.apply(lambda keys: keys.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.apply(lambda keys: keys[indices.to(keys.device)])  # a mask or positions

    def offload(self) -> None:
        self.apply(lambda keys: keys.to("cpu", non_blocking=True))

    def prefetch(self) -> None:
        if self.is_initialized:
            self.apply(lambda keys: keys.to(self.device, non_blocking=True))

    def reset(self) -> None:
        self.keys, self.is_initialized = None, False

    def get_max_length(self) -> int:
        return -1

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length(), 0


class RNNSeq2SeqCache(Cache):
    """The decoder's state between two ``generate`` steps, passed around as ``past_key_values``: a
    ``transformers.Cache`` of two layers, the recurrent state (``RNNStateLayer``) and the attention keys
    (``AttentionKeysLayer``). ``get_seq_length`` counts the target tokens consumed; ``reorder_cache`` and the batch
    operations act on both; ``crop`` goes back to any length consumed since ``activate_past_recording()``.
    ``hidden`` (Ld, B, H), ``cell`` and ``feed`` (B, 1, H) show the current state.
    """

    def __init__(self) -> None:
        super().__init__(layers=[RNNStateLayer(), AttentionKeysLayer()])

    @property
    def state(self) -> RNNStateLayer:
        return self.layers[0]

    @property
    def keys(self) -> torch.Tensor | None:
        """(B, S, A) the projected encoder states, or None before the first step (and without attention)."""
        return self.layers[1].keys

    @property
    def is_empty(self) -> bool:
        return not self.state.checkpoints

    @property
    def hidden(self) -> torch.Tensor | None:
        return None if self.is_empty else self.state.read()[0].hidden

    @property
    def cell(self) -> torch.Tensor | None:
        return None if self.is_empty else self.state.read()[0].cell

    @property
    def feed(self) -> torch.Tensor | None:
        return None if self.is_empty else self.state.read()[0].feed

    def write(self, state: DecoderState, inputs: torch.Tensor, keys: torch.Tensor | None) -> None:
        """After a decoder call: the state after ``inputs`` (B, n, E), and the keys its attention projected."""
        self.state.write(state, inputs)
        if keys is not None and self.keys is None:
            self.layers[1].update(keys)

    def reorder_beams(self, beam_idx: torch.LongTensor) -> None:
        """Beam search's reordering: the recurrent state only. ``beam_idx`` moves beams within their own sentence, and
        the keys of all beams of a sentence are the same (they depend on the source alone), so they stay as they are
        instead of being copied at every step."""
        self.state.reorder_cache(beam_idx)


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

    def forward(self, query: torch.Tensor, memory: EncoderMemory, record: DecoderRecord | None = None
                ) -> tuple[torch.Tensor, EncoderMemory]:
        """:param query: (B, T, H) :param record: records the weights alpha_t (B, T, S) when asked
        :return: the context c_t (B, T, De) and the memory with its keys (projected here at the first step of a
        source)"""
        if memory.keys is None:
            memory = memory._replace(keys=self.project_keys(memory.values))  # (B, S, A), once per source
        weights = masked_softmax(self.score(query, memory.keys), memory.mask)  # (B, T, S)
        if record is not None:
            weights = record.align(weights)
        return torch.bmm(weights, memory.values), memory  # (B, T, De)


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
    and the memory (whose keys its attention projects at the first step); a ``DecoderRecord`` collects what the
    caller asked for besides. It takes T > 1 only where ``fused`` is True, that is where one call over the whole
    target gives the same result as T calls of one token.
    """

    fused = True

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__()
        num_layers = config.decoder_layers
        self.rnn = RNN_CLASSES[config.cell_type](
            config.decoder_input_size, config.hidden_size, num_layers, batch_first=True,
            dropout=config.dropout if num_layers > 1 else 0.0,
        )

    def recur(self, inputs: torch.Tensor, state: DecoderState, record: DecoderRecord | None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """s_t = RNN(x_t, s_{t-1}) in every layer: one fused call of the stacked RNN, or layer by layer where the
        record asks for every layer's states. :param inputs: (B, T, In) :return: s_t of the top layer (B, T, H) and
        the new hidden and cell states (Ld, B, H)"""
        if record is None or record.layers is None:
            return run_rnn(self.rnn, inputs, state.hidden, state.cell)
        return run_rnn_layers(self.rnn, inputs, state.hidden, state.cell, record.layers)

    def forward(self, inputs: torch.Tensor, state: DecoderState, memory: EncoderMemory,
                record: DecoderRecord | None = None) -> tuple[torch.Tensor, DecoderState, EncoderMemory]:
        """:param inputs: (B, T, E) :return: s_t (B, T, H), the state, the memory as given"""
        outputs, hidden, cell = self.recur(inputs, state, record)  # (B, T, H)
        return outputs, DecoderState(hidden, cell, None), memory


class ContextFeedingDecoderStep(DecoderStep):
    """Cho et al. 2014, Section 2.2: one fixed context c summarises the source, and both the recurrence and the
    output read it at every step: s_t = RNN([E y_{t-1}; c], s_{t-1}), p(y_t) = g([s_t; c]).

    c is the top encoder layer's final state, both directions concatenated ([h_T^forward; h_1^backward]). Cho et al.
    take c = tanh(V h_N) with a learned V; here c is h_N itself (already in [-1, 1]), and the weights that read c
    (the RNN's input weights and W_o) are linear maps of it anyway. As in
    ``BahdanauDecoderStep``, g is one linear map of [s_t; c] (their maxout over y_{t-1} left out). c does not change
    with t, so the whole target runs in one call (``fused``).
    """

    def forward(self, inputs: torch.Tensor, state: DecoderState, memory: EncoderMemory,
                record: DecoderRecord | None = None) -> tuple[torch.Tensor, DecoderState, EncoderMemory]:
        """:param inputs: (B, T, E) :return: [s_t; c] (B, T, H + De), the state, the memory as given"""
        context = memory.summary.expand(-1, inputs.size(1), -1)  # (B, T, De)
        outputs, hidden, cell = self.recur(torch.cat([inputs, context], dim=-1), state, record)  # (B, T, H)
        return torch.cat([outputs, context], dim=-1), DecoderState(hidden, cell, None), memory


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

    def forward(self, inputs: torch.Tensor, state: DecoderState, memory: EncoderMemory,
                record: DecoderRecord | None = None) -> tuple[torch.Tensor, DecoderState, EncoderMemory]:
        """:param inputs: (B, 1, E) :return: [s_t; c_t] (B, 1, H + De), the state, the memory"""
        previous = state.hidden[-1:].transpose(0, 1)  # (B, 1, H): s_{t-1} of the top layer
        context, memory = self.attention(previous, memory, record)  # (B, 1, De); W_h h_i kept in the memory
        rnn_inputs = torch.cat([inputs, context], dim=-1)  # (B, 1, E + De)
        outputs, hidden, cell = self.recur(rnn_inputs, state, record)  # (B, 1, H)
        return torch.cat([outputs, context], dim=-1), DecoderState(hidden, cell, None), memory  # (B, 1, H + De)


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

    def forward(self, inputs: torch.Tensor, state: DecoderState, memory: EncoderMemory,
                record: DecoderRecord | None = None) -> tuple[torch.Tensor, DecoderState, EncoderMemory]:
        """:param inputs: (B, T, E) (T = 1 with input feeding) :return: h̃_t (B, T, H), the state, the memory"""
        rnn_inputs = torch.cat([inputs, state.feed], dim=-1) if self.input_feeding else inputs  # (B, T, E [+ H])
        outputs, hidden, cell = self.recur(rnn_inputs, state, record)  # (B, T, H)
        context, memory = self.attention(outputs, memory, record)  # (B, T, De)
        attentional = torch.tanh(self.W_c(torch.cat([context, outputs], dim=-1)))  # (B, T, H): h̃_t
        feed = attentional if self.input_feeding else None  # (B, 1, H)
        return attentional, DecoderState(hidden, cell, feed), memory


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
        self.config = config
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
    ) -> RNNSeq2SeqEncoderOutput | tuple:
        """:param input_ids: (B, S); :param attention_mask: (B, S), 1 = token, 0 = padding (right-padded); the output
        flags left at None take the config's values (an RNN has no self-attention: ``attentions`` stays None).
        :return: ``last_hidden_state`` (B, S, De), the final states (B, Le x directions, He), and with
        ``output_hidden_states`` the embedding output and every layer's output"""
        flags = OutputFlags.resolve(self.config, output_attentions, output_hidden_states, return_dict=return_dict)
        if flags.attentions:
            warn_no_self_attention()
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `input_ids` / `inputs_embeds`.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, S, E)
        embeds = nn.functional.dropout(inputs_embeds, p=self.dropout, training=self.training)
        lengths = source_lengths(attention_mask, *embeds.shape[:2])
        if flags.hidden_states:
            outputs, hidden, cell, layer_outputs = self.run_layers(embeds, lengths)
        else:
            packed = pack_padded_sequence(embeds, lengths, batch_first=True, enforce_sorted=False)
            packed_outputs, state = self.rnn(packed)  # the final states come back in the original batch order
            outputs, _ = pad_packed_sequence(packed_outputs, batch_first=True, total_length=embeds.size(1))
            hidden, cell = split_state(state)  # (Le x directions, B, He) each
        output = RNNSeq2SeqEncoderOutput(
            last_hidden_state=outputs,  # (B, S, De)
            hidden_states=(embeds, *layer_outputs) if flags.hidden_states else None,
            final_hidden_state=hidden.transpose(0, 1).contiguous(),  # (B, Le x directions, He)
            final_cell_state=cell.transpose(0, 1).contiguous() if cell is not None else None,
        )
        return as_return_type(output, flags.return_dict)

    def run_layers(self, embeds: torch.Tensor, lengths: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, list[torch.Tensor]]:
        """The stacked RNN one layer at a time (bitwise the fused call in eval mode), keeping each layer's output.

        Each layer reads the previous layer's padded output, packed again, so that output is the tensor the next
        layer reads. :param embeds: (B, S, E) :return: h_i (B, S, De), the final states (Le x directions, B, He),
        and every layer's output (B, S, De)"""
        layer_input, layer_outputs, finals = embeds, [], []
        for layer in range(self.rnn.num_layers):
            packed = pack_padded_sequence(layer_input, lengths, batch_first=True, enforce_sorted=False)
            packed_outputs, state = rnn_layer(self.rnn, layer, packed)
            outputs, _ = pad_packed_sequence(packed_outputs, batch_first=True, total_length=embeds.size(1))
            layer_outputs.append(outputs)  # (B, S, De)
            finals.append(split_state(state))  # (directions, B, He) each
            layer_input = nn.functional.dropout(outputs, p=self.rnn.dropout, training=self.training)
        hidden = torch.cat([h for h, _ in finals])  # (Le x directions, B, He), layer-major as torch orders it
        cell = torch.cat([c for _, c in finals]) if finals[0][1] is not None else None
        return layer_outputs[-1], hidden, cell, layer_outputs


class RNNSeq2SeqDecoder(nn.Module):
    """Embedding, the bridge from the encoder's final states, and the decoder step, unrolled over the target."""

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_dim, config.pad_token_id)
        self.dropout = config.dropout
        self.num_layers = config.decoder_layers
        self.has_attention = config.attention != "none"
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

    def unroll(self, inputs: torch.Tensor, state: DecoderState, memory: EncoderMemory, record: DecoderRecord | None
               ) -> tuple[torch.Tensor, DecoderState, EncoderMemory]:
        """Run the step over ``inputs`` (B, T, E): in one call where it is ``fused``, else token by token.

        :return: the readouts (B, T, O), the final state, the memory
        """
        if self.step.fused:
            return self.step(inputs, state, memory, record)
        readouts = []
        for t in range(inputs.size(1)):
            readout, state, memory = self.step(inputs[:, t : t + 1], state, memory, record)  # (B, 1, O)
            readouts.append(readout)
        return (readouts[0] if len(readouts) == 1 else torch.cat(readouts, dim=1)), state, memory  # (B, T, O)

    def forward(
        self,
        input_ids: torch.LongTensor | None,
        encoder_outputs: RNNSeq2SeqEncoderOutput,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: RNNSeq2SeqCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> RNNDecoderOutput:
        """:param input_ids: (B, T) previous tokens y_{t-1} (only the new ones when the cache holds a state)
        :param encoder_attention_mask: (B, S) :param past_key_values: read, then updated in place
        :return: the vector the softmax reads (B, T, O) and, as asked, the hidden states and the alignments"""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `decoder_input_ids` / `decoder_inputs_embeds` (or `labels`).")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, T, E)
        state, replay = self.resume(encoder_outputs, past_key_values)
        replayed = replay.size(1) if replay is not None else 0
        if replayed:  # the cache was cropped into a call: run those tokens again first
            inputs_embeds = torch.cat([replay, inputs_embeds], dim=1)  # (B, r + T, E)
        embeds = nn.functional.dropout(inputs_embeds, p=self.dropout, training=self.training)
        memory = self.memory(encoder_outputs, encoder_attention_mask, past_key_values)
        record = None
        if output_hidden_states or output_attentions:
            record = DecoderRecord(embeds.size(1), self.num_layers, output_hidden_states,
                                   output_attentions and self.has_attention)
        readout, state, memory = self.unroll(embeds, state, memory, record)
        if past_key_values is not None:
            past_key_values.write(state, inputs_embeds, memory.keys)
        readout = nn.functional.dropout(readout, p=self.dropout, training=self.training)
        if self.output_projection is not None:
            readout = self.output_projection(readout)  # (B, T, E)
        hidden_states = (embeds, *(stack.result() for stack in record.layers)) if output_hidden_states else None
        alignments = record.alignments.result() if record is not None and record.alignments is not None else None
        if replayed:  # return the new tokens' outputs only
            readout = readout[:, replayed:]
            hidden_states = tuple(h[:, replayed:] for h in hidden_states) if hidden_states else None
            alignments = alignments[:, :, replayed:] if alignments is not None else None
        return RNNDecoderOutput(readout, hidden_states, alignments)

    def resume(self, encoder_outputs: RNNSeq2SeqEncoderOutput, past_key_values: RNNSeq2SeqCache | None
               ) -> tuple[DecoderState, torch.Tensor | None]:
        """The state to go on from, and the embedded tokens (B, r, E) to run again first (after a crop into a call;
        else None): the cache's, or for a new source the bridge's initial state, which the cache records."""
        if past_key_values is not None and not past_key_values.is_empty:
            return past_key_values.state.read()
        state = self.initial_state(encoder_outputs)
        if past_key_values is not None:
            past_key_values.state.start(state)
        return state, None

    def memory(self, encoder_outputs: RNNSeq2SeqEncoderOutput, encoder_attention_mask: torch.Tensor | None,
               past_key_values: RNNSeq2SeqCache | None) -> EncoderMemory:
        """What the step reads from the source: h_i, the keys kept in the cache, the padding mask and Cho et al.'s
        summary c (the top layer's final state, directions concatenated: (B, 1, De))."""
        summary = None
        if self.context_feeding:
            summary = encoder_outputs.final_hidden_state[:, -self.num_directions :].flatten(1).unsqueeze(1)
        keys = past_key_values.keys if past_key_values is not None else None
        mask = encoder_attention_mask.bool() if encoder_attention_mask is not None else None
        return EncoderMemory(encoder_outputs.last_hidden_state, keys, mask, summary)


def as_encoder_output(encoder_outputs: RNNSeq2SeqEncoderOutput | tuple) -> RNNSeq2SeqEncoderOutput:
    """Accept the encoder output as returned, or as its ``to_tuple()``: (h_i, [hidden states,] final h[, final c])."""
    if isinstance(encoder_outputs, RNNSeq2SeqEncoderOutput):
        return encoder_outputs
    tensors = [x for x in encoder_outputs if torch.is_tensor(x)] if isinstance(encoder_outputs, tuple) else []
    hidden_states = [x for x in encoder_outputs if isinstance(x, tuple)] if isinstance(encoder_outputs, tuple) else []
    if len(tensors) not in (2, 3) or len(hidden_states) > 1 or not torch.is_tensor(encoder_outputs[0]):
        raise ValueError("`encoder_outputs` must come from this model's encoder (it needs the final states), as its "
                         "output or its `to_tuple()`.")
    return RNNSeq2SeqEncoderOutput(
        last_hidden_state=tensors[0], hidden_states=hidden_states[0] if hidden_states else None,
        final_hidden_state=tensors[1], final_cell_state=tensors[2] if len(tensors) == 3 else None,
    )


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
    ) -> Seq2SeqModelOutput | tuple:
        """:param input_ids: (B, S) source ids; :param attention_mask: (B, S) 1 = token, 0 = pad (right-padded);
        :param decoder_input_ids: (B, T) (only the new tokens when the cache holds a state);
        :param decoder_attention_mask: accepted for API compatibility and unused: the decoder is causal, so
            right-padding of the target cannot change earlier positions.
        The output flags and ``use_cache`` left at None take the config's values.
        :return: ``Seq2SeqModelOutput`` (its ``to_tuple()`` when ``return_dict`` is False) with
            ``last_hidden_state`` (B, T, O) and the cache; with ``output_attentions`` the alignments as
            ``cross_attentions``, one entry (B, 1, T, S) (None without attention; an RNN has no self-attention, so
            ``encoder_attentions`` and ``decoder_attentions`` are None); with ``output_hidden_states`` the embedding
            output and every layer's states, for the encoder (Le + 1) and the decoder (Ld + 1)"""
        flags = OutputFlags.resolve(self.config, output_attentions, output_hidden_states, use_cache, return_dict)
        if flags.attentions:
            warn_no_self_attention()
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids, attention_mask, inputs_embeds,
                                           output_hidden_states=flags.hidden_states, return_dict=True)
        encoder_outputs = as_encoder_output(encoder_outputs)
        if flags.use_cache and past_key_values is None:
            past_key_values = RNNSeq2SeqCache()
        elif not flags.use_cache:
            past_key_values = None
        decoded = self.decoder(decoder_input_ids, encoder_outputs, attention_mask, past_key_values,
                               decoder_inputs_embeds, output_attentions=flags.attentions,
                               output_hidden_states=flags.hidden_states)
        output = Seq2SeqModelOutput(
            last_hidden_state=decoded.readout,
            past_key_values=past_key_values,
            decoder_hidden_states=decoded.hidden_states,
            cross_attentions=(decoded.alignments,) if decoded.alignments is not None else None,  # one "layer"
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
        )
        return as_return_type(output, flags.return_dict)


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
        """The state is recurrent, not key/value: generate must not make a ``DynamicCache`` (see below)."""
        return False

    def _prepare_cache_for_generation(self, generation_config, model_kwargs: dict, *args, **kwargs) -> None:
        """``generate`` starts with an empty ``RNNSeq2SeqCache`` (assisted decoding needs a cache before the first
        step), unless the caller passed one or ``use_cache=False``. It grows as it goes, as the "dynamic" cache does;
        a static, offloaded or quantized key/value cache has no meaning for a recurrent state."""
        if model_kwargs.get("past_key_values") is None and generation_config.use_cache is not False:
            if generation_config.cache_implementation not in (None, "dynamic"):
                raise ValueError(
                    f"`cache_implementation`={generation_config.cache_implementation!r} does not apply to an RNN: its "
                    "cache is the recurrent state (RNNSeq2SeqCache). Leave `cache_implementation` unset."
                )
            model_kwargs["past_key_values"] = RNNSeq2SeqCache()
            if getattr(generation_config, "is_assistant", False):  # a draft model's cache is cropped every round
                model_kwargs["past_key_values"].activate_past_recording()
            return
        super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)

    def generate(self, *args, **kwargs):
        """transformers' ``generate``, unchanged, except that with ``return_dict_in_generate`` and
        ``output_attentions`` the field an RNN cannot fill, ``decoder_attentions`` (self-attention), is None instead
        of one None per step (``encoder_attentions`` is None already)."""
        output = super().generate(*args, **kwargs)
        if isinstance(output, ModelOutput) and output.get("decoder_attentions") is not None:
            output = type(output)(**{name: value for name, value in output.items() if name != "decoder_attentions"})
        return output

    @staticmethod
    def _reorder_cache(past_key_values: RNNSeq2SeqCache, beam_idx: torch.LongTensor) -> RNNSeq2SeqCache:
        """Beam search: keep the states of the surviving beams (the keys are the same for all beams of a sentence)."""
        past_key_values.reorder_beams(beam_idx)
        return past_key_values

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
    ) -> Seq2SeqLMOutput | tuple:
        """:param labels: (B, T) target ids, -100 = ignored; they are shifted right into ``decoder_input_ids``
        when those are not given. :return: ``Seq2SeqLMOutput`` with ``logits`` (B, T, V) and the base model's
        outputs (see ``RNNSeq2SeqModel.forward``); its ``to_tuple()`` when ``return_dict`` is False"""
        if labels is not None:
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
            encoder_outputs=encoder_outputs, past_key_values=past_key_values, inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds, use_cache=use_cache, output_attentions=output_attentions,
            output_hidden_states=output_hidden_states, return_dict=True,
        )
        return self.lm_output(outputs, labels, num_items_in_batch, return_dict)


__all__ = [
    "RNNSeq2SeqCache",
    "RNNSeq2SeqForConditionalGeneration",
    "RNNSeq2SeqModel",
    "RNNSeq2SeqPreTrainedModel",
]
