"""The parts of the recurrent decoder: the recurrence (fused, or layer by layer), the records of what a call returns
besides its readout, the attention scores, the bridges from the encoder's final states, and the decoder steps.

Shape legend:
    B  batch size              S  source length            T  target tokens in this call
    E  embedding_dim           H  decoder hidden size      He encoder hidden size per direction
    Le / Ld  encoder / decoder layers                      De encoder output width (directions x He)
    A  attention width (H)     O  readout width

This file is copied next to the weights by ``save_pretrained``: it imports only torch, transformers' public API and
single-dot siblings.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn
from torch.func import functional_call
from transformers.modeling_layers import GradientCheckpointingLayer

from .attention import additive_attention_scores, masked_softmax
from .configuration_rnn_seq2seq import RNNSeq2SeqConfig
from .rnn_cache import DecoderState

RNN_CLASSES: dict[str, type[nn.RNNBase]] = {"lstm": nn.LSTM, "gru": nn.GRU}


class EncoderMemory(NamedTuple):
    """What the decoder steps read from the source."""

    values: torch.Tensor  # (B, S, De): h_j
    keys: torch.Tensor | None  # (B, S, A): h_j as the attention score reads it, projected once per source
    mask: torch.Tensor | None  # (B, S) boolean, True = real token; None = no padding
    final_hidden: torch.Tensor  # (B, Le x directions, He): the encoder's final states


class StepOutput(NamedTuple):
    """One decoder step: the vector the softmax reads, the state after it, the alignment (None without attention)."""

    readout: torch.Tensor  # (B, T, O)
    state: DecoderState
    weights: torch.Tensor | None  # (B, T, S): alpha_t


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


def layer_tensors(rnn: nn.RNNBase, layer: int, inputs: torch.Tensor | nn.utils.rnn.PackedSequence,
                  *state: torch.Tensor) -> tuple:
    """``rnn_layer`` with the state as separate tensors, in and out, as a checkpointed function takes and returns
    them: ``state`` is (h,) for a GRU, (h, c) for an LSTM, or nothing (zeros); returns (outputs, h) or (outputs, h, c).
    """
    initial = None if not state else state[0] if len(state) == 1 else tuple(state)
    outputs, final = rnn_layer(rnn, layer, inputs, initial)
    return (outputs, *final) if isinstance(final, tuple) else (outputs, final)


class CheckpointedSegment(GradientCheckpointingLayer):
    """A checkpointed segment as transformers knows one: a ``GradientCheckpointingLayer`` (transformers'
    ``modeling_layers``), which ``activation_checkpointing_enable()`` (``gradient_checkpointing_enable()`` before
    5.23) switches on, counts for ``every_n_layers`` and hands its checkpoint function, and which then runs its
    ``forward`` through that function with the tensors as positional arguments (what both of torch's checkpoint
    variants pass gradients through) and the rest as keywords. It holds no weights: ``run`` is the segment's work
    (a layer of an RNN, or a decoder step), so the state dict and saved folders are those of before."""

    def forward(self, *tensors: torch.Tensor | None, run: Callable) -> tuple:
        return run(*tensors)


class Checkpointing(nn.Module):
    """Gradient checkpointing (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost", arXiv:1604.06174):
    a checkpointed segment keeps only its inputs for the backward pass and runs again there to rebuild the
    activations inside it, one more forward per segment for memory that no longer grows with what the segment
    computes. transformers' ``activation_checkpointing_enable()`` (``gradient_checkpointing_enable()`` before 5.23)
    switches it on in every module that has a ``gradient_checkpointing`` attribute: this module's flag, and its
    ``segment``, a ``CheckpointedSegment`` through which each segment runs.

    While it is on in training, every RNN runs layer by layer (``run_rnn_layers``, the encoder's ``run_layers``),
    each layer a segment, with dropout between layers drawn from torch's generator, which the checkpoint restores
    for the second run (a fused stacked call on cuDNN draws that dropout from a state of its own, which the
    checkpoint does not restore); the token-by-token decoder makes each step a segment instead. The dropout masks
    are those of ``output_hidden_states=True``, which runs the RNNs layer by layer too.
    """

    gradient_checkpointing = False

    def __init__(self) -> None:
        super().__init__()
        self.segment = CheckpointedSegment()

    @property
    def layerwise(self) -> bool:
        """Whether the RNNs run layer by layer: with checkpointing on, in training (with or without gradients, so
        that the second run of a segment computes what the first did)."""
        return self.gradient_checkpointing and self.training

    def checkpoint_function(self) -> Callable | None:
        """``checkpoint(run, *tensors)`` through ``segment`` while training with gradients (the segment checkpoints
        where transformers switched it on, and runs as is where ``every_n_layers`` left it off); None otherwise
        (generation, evaluation)."""
        if not (self.layerwise and torch.is_grad_enabled()):
            return None
        return lambda run, *tensors: self.segment(*tensors, run=run)


def checkpointed_step(checkpoint: Callable, step: nn.Module, inputs: torch.Tensor, state: DecoderState,
                      memory: EncoderMemory) -> tuple[torch.Tensor, DecoderState]:
    """One token-by-token decoder step as a checkpointed segment: it keeps its inputs (B, 1, E), the state and the
    source memory (shared by all steps, not copied), and runs again in the backward pass. Tensors go in and come out
    as positional arguments, through which both of torch's checkpoint variants pass gradients.

    :return: the readout (B, 1, O) and the state after the step
    """
    def run(inputs: torch.Tensor, hidden: torch.Tensor, cell: torch.Tensor | None, feed: torch.Tensor | None,
            values: torch.Tensor, keys: torch.Tensor | None, final_hidden: torch.Tensor) -> tuple:
        out = step(inputs, DecoderState(hidden, cell, feed), EncoderMemory(values, keys, memory.mask, final_hidden))
        return out.readout, *out.state

    readout, *after = checkpoint(run, inputs, *state, memory.values, memory.keys, memory.final_hidden)
    return readout, DecoderState(*after)


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
                   record: list[StepStack] | None = None, checkpoint: Callable | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The stacked (unidirectional) RNN of ``run_rnn``, layer by layer: to record every layer's states s_t, or with
    each layer a checkpointed segment (``Checkpointing``).

    Between layers, dropout as the fused call applies it in training (Zaremba et al. 2014).
    :param inputs: (B, T, In); :param hidden, cell: (L, B, H); :param record: one ``StepStack`` per layer, or None
    :param checkpoint: the checkpoint function each layer runs through, or None
    :return: as ``run_rnn``
    """
    layer_input, hiddens, cells = inputs, [], []
    for layer in range(rnn.num_layers):
        state = (hidden[layer : layer + 1],) if cell is None else (hidden[layer : layer + 1], cell[layer : layer + 1])
        run = functools.partial(layer_tensors, rnn, layer)
        outputs, *final = run(layer_input, *state) if checkpoint is None else checkpoint(run, layer_input, *state)
        outputs = record[layer](outputs) if record is not None else outputs  # (B, T, H)
        hiddens.append(final[0])  # (1, B, H)
        cells.append(final[1] if cell is not None else None)
        layer_input = nn.functional.dropout(outputs, p=rnn.dropout, training=rnn.training)
    return outputs, torch.cat(hiddens), (torch.cat(cells) if cell is not None else None)  # (L, B, H)


class RNNSeq2SeqAttention(nn.Module):
    """Global attention over all source positions: alpha_t = softmax(score(q_t, h_i)) over the real tokens,
    c_t = sum_i alpha_ti h_i (Bahdanau et al. 2015, Eq. 5-6; Luong et al. 2015, Eq. 7).

    A subclass chooses the score; ``project_keys`` is its query-independent half, which the decoder runs once per
    source, before the first step (the keys then travel with the memory and the generation cache).
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
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """:param query: (B, T, H) :param record: records the weights when asked
        :return: the context c_t (B, T, De) and the weights alpha_t (B, T, S)"""
        weights = masked_softmax(self.score(query, memory.keys), memory.mask)  # (B, T, S)
        if record is not None:
            weights = record.align(weights)
        return torch.bmm(weights, memory.values), weights  # (B, T, De)


class AdditiveAttention(RNNSeq2SeqAttention):
    """Bahdanau et al. 2015, Appendix A.1.2: e_ij = v_aᵀ tanh(W_a s_{i-1} + U_a h_j), with U_a h_j computed once per
    source. Luong et al. 2015's ``concat`` score (Eq. 8), v_aᵀ tanh(W_a [s_t; h_s]), is the same function (their W_a
    is [W_a, U_a] here). The width A is H."""

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__(config)
        self.W_a = nn.Linear(config.hidden_size, config.hidden_size, bias=False)
        self.U_a = nn.Linear(config.encoder_output_size, config.hidden_size, bias=False)
        self.v_a = nn.Linear(config.hidden_size, 1, bias=False)

    def project_keys(self, values: torch.Tensor) -> torch.Tensor:
        return self.U_a(values)  # (B, S, A)

    def score(self, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        return additive_attention_scores(self.W_a(query), keys, self.v_a)  # (B, T, S)


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


class DecoderStep(Checkpointing):
    """The decoder without attention (Sutskever et al. 2014; Cho et al. 2014): s_t = RNN(E y_{t-1}, s_{t-1}), and
    the softmax reads s_t.

    A decoder step maps the embedded previous tokens (B, T, E) and the state to the readout (B, T, O), the new state
    and the alignment weights (B, T, S) or None. A ``DecoderRecord`` collects what the caller asked for besides. It
    takes T > 1 only where ``fused``, that is where one call over the whole target gives the same result as T calls
    of one token.
    """

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__()
        num_layers = config.decoder_layers
        self.rnn = RNN_CLASSES[config.cell_type](
            config.decoder_input_size, config.hidden_size, num_layers, batch_first=True,
            dropout=config.dropout if num_layers > 1 else 0.0,
        )

    @property
    def fused(self) -> bool:
        """Whether the step can run over the whole target in one call: no state feeds back but the RNN's own."""
        return True

    def project_keys(self, values: torch.Tensor) -> torch.Tensor | None:
        """The encoder states as this step's attention score reads them; None without attention."""
        return None

    def recur(self, inputs: torch.Tensor, state: DecoderState, record: DecoderRecord | None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """s_t = RNN(x_t, s_{t-1}) in every layer: one fused call of the stacked RNN, or layer by layer where the
        record asks for every layer's states or under gradient checkpointing, where a fused step checkpoints each
        layer (a token-by-token step is checkpointed whole by the decoder). :param inputs: (B, T, In) :return: s_t of
        the top layer (B, T, H) and the new hidden and cell states (Ld, B, H)"""
        layers = record.layers if record is not None else None
        if layers is None and not self.layerwise:
            return run_rnn(self.rnn, inputs, state.hidden, state.cell)
        checkpoint = self.checkpoint_function() if self.fused else None
        return run_rnn_layers(self.rnn, inputs, state.hidden, state.cell, layers, checkpoint)

    def forward(self, inputs: torch.Tensor, state: DecoderState, memory: EncoderMemory,
                record: DecoderRecord | None = None) -> StepOutput:
        """:param inputs: (B, T, E) :return: s_t (B, T, H), the state, no weights"""
        outputs, hidden, cell = self.recur(inputs, state, record)  # (B, T, H)
        return StepOutput(outputs, DecoderState(hidden, cell, None), None)


class ContextFeedingDecoderStep(DecoderStep):
    """Cho et al. 2014, Section 2.2: one fixed context c summarises the source, and both the recurrence and the
    output read it at every step: s_t = RNN([E y_{t-1}; c], s_{t-1}), p(y_t) = g([s_t; c]).

    c is the top encoder layer's final state, both directions concatenated ([h_T^forward; h_1^backward]). Cho et al.
    take c = tanh(V h_N) with a learned V; here c is h_N itself (already in [-1, 1]), and the weights that read c
    (the RNN's input weights and W_o) are linear maps of it anyway. As in ``BahdanauDecoderStep``, g is one linear
    map of [s_t; c] (their maxout over y_{t-1} left out). c does not change with t, so the whole target runs in one
    call.
    """

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__(config)
        self.num_directions = config.num_directions

    def summary(self, memory: EncoderMemory) -> torch.Tensor:
        """c: the top encoder layer's final state, directions concatenated (B, 1, De)."""
        return memory.final_hidden[:, -self.num_directions :].flatten(1).unsqueeze(1)

    def forward(self, inputs: torch.Tensor, state: DecoderState, memory: EncoderMemory,
                record: DecoderRecord | None = None) -> StepOutput:
        """:param inputs: (B, T, E) :return: [s_t; c] (B, T, H + De), the state, no weights"""
        context = self.summary(memory).expand(-1, inputs.size(1), -1)  # (B, T, De)
        outputs, hidden, cell = self.recur(torch.cat([inputs, context], dim=-1), state, record)  # (B, T, H)
        return StepOutput(torch.cat([outputs, context], dim=-1), DecoderState(hidden, cell, None), None)


class AttentionDecoderStep(DecoderStep):
    """A step with global attention over the source (``self.attention``)."""

    attention: RNNSeq2SeqAttention

    def project_keys(self, values: torch.Tensor) -> torch.Tensor:
        return self.attention.project_keys(values)  # (B, S, A)


class BahdanauDecoderStep(AttentionDecoderStep):
    """Bahdanau et al. 2015, Section 3.1 and Appendix A.2: the top layer's previous state s_{t-1} attends (Eq. 5-6,
    additive score of A.1.2), then s_t = RNN([E y_{t-1}; c_t], s_{t-1}).

    The readout is [s_t; c_t]: the paper's p(y_t) = g(y_{t-1}, s_t, c_t) (Eq. 4) with the deep-output maxout layer
    (A.2.2) reduced to one linear map W_o [s_t; c_t] + b_o and y_{t-1} left out. The attention needs s_{t-1}, so
    the step takes one token at a time (not ``fused``).
    """

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__(config)
        self.attention = AdditiveAttention(config)

    @property
    def fused(self) -> bool:
        return False

    def forward(self, inputs: torch.Tensor, state: DecoderState, memory: EncoderMemory,
                record: DecoderRecord | None = None) -> StepOutput:
        """:param inputs: (B, 1, E) :return: [s_t; c_t] (B, 1, H + De), the state, alpha_t (B, 1, S)"""
        previous = state.hidden[-1:].transpose(0, 1)  # (B, 1, H): s_{t-1} of the top layer
        context, weights = self.attention(previous, memory, record)  # (B, 1, De), (B, 1, S)
        rnn_inputs = torch.cat([inputs, context], dim=-1)  # (B, 1, E + De)
        outputs, hidden, cell = self.recur(rnn_inputs, state, record)  # (B, 1, H)
        readout = torch.cat([outputs, context], dim=-1)  # (B, 1, H + De)
        return StepOutput(readout, DecoderState(hidden, cell, None), weights)


class LuongDecoderStep(AttentionDecoderStep):
    """Luong et al. 2015, Section 3: s_t = RNN(x_t, s_{t-1}); alpha_t = align(s_t, h_s) (Eq. 7, score of Eq. 8);
    c_t = sum_s alpha_ts h_s; h̃_t = tanh(W_c [c_t; s_t]) (Eq. 5), which the softmax reads (Eq. 6).

    With input feeding (Section 3.3) x_t = [E y_{t-1}; h̃_{t-1}], one token at a time. Without it x_t = E y_{t-1}:
    the RNN runs over the whole target in one call and attention for all steps is one batched product.
    """

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__(config)
        self.attention = LUONG_SCORES[config.attention](config)
        self.W_c = nn.Linear(config.encoder_output_size + config.hidden_size, config.hidden_size, bias=False)
        self.input_feeding = config.input_feeding

    @property
    def fused(self) -> bool:
        return not self.input_feeding

    def forward(self, inputs: torch.Tensor, state: DecoderState, memory: EncoderMemory,
                record: DecoderRecord | None = None) -> StepOutput:
        """:param inputs: (B, T, E) (T = 1 with input feeding) :return: h̃_t (B, T, H), the state, alpha_t (B, T, S)"""
        rnn_inputs = torch.cat([inputs, state.feed], dim=-1) if self.input_feeding else inputs  # (B, T, E [+ H])
        outputs, hidden, cell = self.recur(rnn_inputs, state, record)  # (B, T, H)
        context, weights = self.attention(outputs, memory, record)  # (B, T, De), (B, T, S)
        attentional = torch.tanh(self.W_c(torch.cat([context, outputs], dim=-1)))  # (B, T, H): h̃_t
        feed = attentional if self.input_feeding else None  # (B, 1, H)
        return StepOutput(attentional, DecoderState(hidden, cell, feed), weights)


def build_decoder_step(config: RNNSeq2SeqConfig) -> DecoderStep:
    if config.attention == "none":
        return ContextFeedingDecoderStep(config) if config.context_feeding else DecoderStep(config)
    if config.attention == "bahdanau":
        return BahdanauDecoderStep(config)
    return LuongDecoderStep(config)

