"""The recurrent decoder's state between two ``generate`` steps, as a ``transformers.Cache``.

Shape legend: B batch, S source length, H decoder hidden size, Ld decoder layers, E embedding width, A attention width.

This file is copied next to the weights by ``save_pretrained``: it imports only torch and transformers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from transformers.cache_utils import Cache, LinearAttentionCacheLayerMixin, LinearAttentionLayer


class DecoderState(NamedTuple):
    """The decoder's recurrent state between two steps, layer-first as torch's RNNs take it."""

    hidden: torch.Tensor  # (Ld, B, H): s_t of every layer
    cell: torch.Tensor | None  # (Ld, B, H): the LSTM memory cell; None for a GRU
    feed: torch.Tensor | None  # (B, 1, H): h̃_{t-1} with Luong input feeding; None otherwise

    def map_batch(self, fn: Callable[[torch.Tensor, int], torch.Tensor]) -> DecoderState:
        """``fn(tensor, batch_dim)`` applied to every tensor: beam reordering, expansion and selection."""
        return DecoderState(fn(self.hidden, 1), None if self.cell is None else fn(self.cell, 1),
                            None if self.feed is None else fn(self.feed, 0))

    def batch_first(self) -> list[torch.Tensor]:
        """The tensors there are, batch first: s_t (B, Ld, H), c_t (B, Ld, H), h̃_t (B, 1, H) (views)."""
        tensors = [self.hidden.transpose(0, 1), None if self.cell is None else self.cell.transpose(0, 1), self.feed]
        return [tensor for tensor in tensors if tensor is not None]


class StateLayer(LinearAttentionLayer):
    """What the RNN cache's two layers share: they are transformers' recurrent-state layers (``LinearAttentionLayer``,
    the kind its Mamba-style models use), whose states the RNN sets whole, from its own tensors (``show``), rather
    than copying them into fixed buffers through ``update_recurrent_state``."""

    is_compileable = False  # the states are replaced, not copied into fixed buffers
    is_croppable = True  # see each layer's `crop`
    supports_early_init = False
    # no key/value states: None, as on transformers' DummyLayer, for code that reads them on every layer (exporters,
    # gathers across processes); the states are in `recurrent_states`
    keys = values = None

    def __init__(self) -> None:
        super().__init__(number_of_states=0)  # the states are counted when the first ones arrive (`count_states`)
        self.is_initialized = False

    def count_states(self, number_of_states: int) -> None:
        """transformers' per-state fields, empty, for ``number_of_states`` states (recording stays as it was)."""
        record_past = self.record_past
        LinearAttentionCacheLayerMixin.__init__(self, number_of_states=number_of_states)
        self.record_past = record_past

    def show(self, states: list[torch.Tensor]) -> None:
        """transformers' view of the current states: ``recurrent_states``, batch first (the tensors, not copies)."""
        self.recurrent_states = dict(enumerate(states))
        for index in self.recurrent_states:
            self.is_recurrent_states_initialized[index] = self.has_previous_state[index] = True

    def get_max_length(self) -> int:
        return -1  # no limit

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0

    def lazy_initialization(self, *args, **kwargs) -> None:
        raise NotImplementedError(f"{type(self).__name__} sets its states whole (see the class docstring).")

    def update_conv_state(self, *args, **kwargs) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} holds no convolution state.")

    def update_recurrent_state(self, *args, **kwargs) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} sets its states whole (see the class docstring).")


class RNNStateLayer(StateLayer):
    """The decoder's recurrent state as one of transformers' recurrent-state cache layers (the kind its Mamba-style
    models use): s_t (and the LSTM's c_t) of every decoder layer, and Luong's h̃_t with input feeding.

    transformers' fields show the current state, batch first, as generic cache code expects:
    ``recurrent_states[0]`` is s_t (B, Ld, H), then c_t (B, Ld, H) for an LSTM, then h̃_t (B, 1, H) with input
    feeding (``number_of_states`` says how many); there are no convolution states, and no key/value states
    (``keys`` and ``values`` are None). The decoder reads and writes the state layer-first, as torch's RNNs take it
    (``read`` and ``write``).

    A decoder call reads the latest state and writes the state after its tokens; a step's cost does not depend on
    how many tokens came before, and by default only the latest state is kept. ``crop`` needs the earlier ones:
    after ``activate_past_recording()`` (transformers' switch, which assisted and prompt-lookup decoding turn on)
    the layer keeps a checkpoint after every call (in ``generate``, after every token) and the embedded tokens each
    call read, so it can go back to any length since: to a checkpoint, or into a call of several tokens (assisted
    decoding verifies its candidates in one call) by replaying that call's first tokens at the start of the next
    call. While recording, its memory grows with the tokens consumed, as a Transformer's key/value cache does, until
    ``crop(0)``, which (as for transformers' recurrent-state layers) keeps only what the next call needs. Beam
    search's reordering keeps only the current state: the earlier ones belong to other hypotheses.
    """

    def __init__(self) -> None:
        super().__init__()
        self.checkpoints: list[tuple[int, DecoderState]] = []  # (tokens consumed, the state after them)
        self.inputs: list[torch.Tensor] = []  # inputs[i]: (B, n, E), read between checkpoints i and i + 1
        self.replay: torch.Tensor | None = None  # (B, r, E): tokens cropped into, run again before the next ones

    def activate_past_recording(self) -> None:
        """Keep every state from now on, so that ``crop`` can go back to it."""
        self.record_past = True

    def start(self, state: DecoderState) -> None:
        """A new source: the decoder's initial state, before any target token."""
        self.count_states(len(state.batch_first()))
        self.checkpoints, self.inputs, self.replay = [(0, state)], [], None
        self.device, self.dtype, self.is_initialized = state.hidden.device, state.hidden.dtype, True
        self.show(state.batch_first())

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
        self.show(state.batch_first())

    def get_seq_length(self) -> int:
        """The target tokens consumed (transformers' recurrent-state layers have no such count; this one does)."""
        if not self.checkpoints:
            return 0
        return self.checkpoints[-1][0] + (self.replay.size(1) if self.replay is not None else 0)

    def crop(self, tokens_to_remove: int) -> None:
        """Go back to an earlier length: ``tokens_to_remove`` <= 0 removes that many tokens (transformers' convention).
        ``crop(0)`` removes nothing and, while recording, forgets the states before the latest, as transformers'
        recurrent-state layers shrink to what the next call needs (``generate`` calls it once it has settled a
        step)."""
        if tokens_to_remove > 0:
            raise ValueError(f"`crop` takes minus the number of tokens to remove, got {tokens_to_remove}; e.g. "
                             "`crop(-2)` goes back two tokens.")
        length = self.get_seq_length()
        target, earliest = length + tokens_to_remove, self.checkpoints[0][0] if self.checkpoints else 0
        if target == length:
            self.checkpoints, self.inputs = self.checkpoints[-1:], []
            return
        if target < earliest:
            raise ValueError(
                f"Cannot crop the RNN cache back to {target} tokens: it holds the states from {earliest} tokens on. "
                "It keeps earlier ones only while recording (call `activate_past_recording()` on the cache before "
                "decoding; assisted decoding does), and beam search's reordering and `crop(0)` drop them."
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
        self.show(self.checkpoints[-1][1].batch_first())

    def map_batch(self, fn: Callable[[torch.Tensor, int], torch.Tensor]) -> None:
        """``fn(tensor, batch_dim)`` on every state and input kept."""
        self.checkpoints = [(length, state.map_batch(fn)) for length, state in self.checkpoints]
        self.inputs = [fn(inputs, 0) for inputs in self.inputs]
        self.replay = fn(self.replay, 0) if self.replay is not None else None
        if self.checkpoints:
            self.show(self.checkpoints[-1][1].batch_first())

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
        self.count_states(0)
        self.is_initialized = False


class SourceMemoryLayer(StateLayer):
    """What the attention reads from the source, as a recurrent-state layer: a state per sentence that does not grow
    with the target. ``recurrent_states[0]`` holds the keys, the encoder states as the attention score projects them
    (U_a h_j for Bahdanau and concat, W_a h_j for Luong's general, h_j itself for dot), (B, S, A), projected once per
    source, before the first decoder step; ``recurrent_states[1]`` the encoder states h_j that the context averages,
    (B, S, De). Both depend on the source alone, so cropping keeps them. No states without attention."""

    def store(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """:param keys: (B, S, A) :param values: (B, S, De)"""
        self.count_states(2)
        self.device, self.dtype, self.is_initialized = keys.device, keys.dtype, True
        self.show([keys, values])

    @property
    def source_keys(self) -> torch.Tensor | None:
        """(B, S, A), or None before the first step (and without attention)."""
        return self.recurrent_states.get(0)

    def get_seq_length(self) -> int:
        return self.source_keys.size(1) if self.source_keys is not None else 0  # source positions

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length(), 0

    def crop(self, tokens_to_remove: int) -> None:
        pass

    def apply(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        if self.source_keys is not None:
            self.show([fn(self.recurrent_states[index]) for index in (0, 1)])

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        self.apply(lambda states: states.index_select(0, beam_idx.to(states.device)))

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.apply(lambda states: states.repeat_interleave(repeats, dim=0))

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.apply(lambda states: states[indices.to(states.device)])  # a mask or positions

    def offload(self) -> None:
        self.apply(lambda states: states.to("cpu", non_blocking=True))

    def prefetch(self) -> None:
        if self.is_initialized:
            self.apply(lambda states: states.to(self.device, non_blocking=True))

    def reset(self) -> None:
        self.count_states(0)
        self.is_initialized = False


class RNNSeq2SeqCache(Cache):
    """The decoder's state between two ``generate`` steps, passed around as ``cache`` (``past_key_values`` before
    transformers 5.24): a ``transformers.Cache`` of two of transformers' recurrent-state layers, the decoder's state
    (``RNNStateLayer``) and what the attention reads from the source (``SourceMemoryLayer``). Generic code reads it
    as it reads a Mamba-style model's cache (``is_linear`` is True for both layers). ``get_seq_length`` counts the
    target tokens consumed; ``reorder_cache`` and the batch operations act on both layers; ``crop`` goes back to any
    length consumed since ``activate_past_recording()``. ``hidden`` (Ld, B, H), ``cell`` and ``feed`` (B, 1, H)
    show the current state.
    """

    def __init__(self) -> None:
        super().__init__(layers=[RNNStateLayer(), SourceMemoryLayer()])

    def get_seq_length(self, layer_idx: int = 0) -> int:
        """The target tokens consumed. (transformers' ``Cache`` asks its first key/value layer, and has none here.)"""
        return self.layers[layer_idx].get_seq_length()

    def get_mask_sizes(self, query_length: int, layer_idx: int = 0) -> tuple[int, int]:
        return self.layers[layer_idx].get_mask_sizes(query_length)

    def has_previous_state(self, layer_idx: int | None = None, state_idx: int | None = None) -> bool:
        """Whether the decoder has a state to go on from (transformers would ask the last recurrent-state layer, which
        is the source memory here, and empty without attention)."""
        if self.is_empty:
            return False
        return super().has_previous_state(0 if layer_idx is None else layer_idx, state_idx)

    @property
    def state(self) -> RNNStateLayer:
        return self.layers[0]

    @property
    def keys(self) -> torch.Tensor | None:
        """(B, S, A) the projected encoder states, or None before the first step (and without attention)."""
        return self.layers[1].source_keys

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

    def write(self, state: DecoderState, inputs: torch.Tensor) -> None:
        """After a decoder call: the state after ``inputs`` (B, n, E)."""
        self.state.write(state, inputs)

    def store_keys(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """:param keys: (B, S, A) the encoder states as the attention score projects them :param values: (B, S, De)
        the encoder states"""
        self.layers[1].store(keys, values)

    def reorder_beams(self, beam_idx: torch.LongTensor) -> None:
        """Beam search's reordering: the recurrent state only. ``beam_idx`` moves beams within their own sentence, and
        the keys of all beams of a sentence are the same (they depend on the source alone), so they stay as they are
        instead of being copied at every step."""
        self.state.reorder_cache(beam_idx)


__all__ = ["DecoderState", "RNNSeq2SeqCache", "RNNStateLayer", "SourceMemoryLayer"]
