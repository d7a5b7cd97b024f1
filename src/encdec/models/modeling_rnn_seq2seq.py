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
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqModelOutput,
)
from transformers.utils import ModelOutput, logging

from .compat import CACHE_NAME, cache_argument, cache_field
from .configuration_rnn_seq2seq import RNNSeq2SeqConfig
from .rnn_cache import DecoderState, RNNSeq2SeqCache
from .rnn_steps import (
    BRIDGES,
    RNN_CLASSES,
    Checkpointing,
    DecoderRecord,
    EncoderMemory,
    build_decoder_step,
    checkpointed_step,
    layer_tensors,
    split_state,
)
from .seq2seq_utils import (
    LegacyKeysMixin,
    OutputFlags,
    Seq2SeqLMMixin,
    Seq2SeqModelMixin,
    as_return_type,
    seed_auto_map,
)

logger = logging.get_logger(__name__)


def warn_no_self_attention() -> None:
    """Say once, at the info level (``TRANSFORMERS_VERBOSITY=info``), when attentions are asked for, which fields an
    RNN leaves empty, as transformers' models without attention leave theirs; a warning on every plot or alignment
    would be noise, and the README documents it."""
    logger.info_once(
        "RNN seq2seq models have no self-attention: `encoder_attentions` and `decoder_attentions` are None. "
        "`cross_attentions` holds the alignment (one layer, one head), or None with `attention='none'`."
    )


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


class RNNSeq2SeqEncoder(Checkpointing):
    """Embedding, then a stacked (optionally bidirectional) LSTM/GRU over the packed source: h_i, h_T, c_T.

    Packing (``enforce_sorted=False``) keeps padding out: the outputs at padded positions are zero and the final
    states are taken at each sequence's true length. Under gradient checkpointing each layer is a checkpointed
    segment (``Checkpointing``).
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

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embed_tokens = value

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
        if flags.hidden_states or self.layerwise:
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
        """The stacked RNN one layer at a time (bitwise the fused call in eval mode), keeping each layer's output;
        under gradient checkpointing each layer is a checkpointed segment.

        Each layer reads the previous layer's padded output, packed again, so that output is the tensor the next
        layer reads. :param embeds: (B, S, E) :return: h_i (B, S, De), the final states (Le x directions, B, He),
        and every layer's output (B, S, De)"""
        layer_input, layer_outputs, finals = embeds, [], []
        checkpoint = self.checkpoint_function()
        for layer in range(self.rnn.num_layers):
            run = functools.partial(self.encode_layer, layer, lengths)
            outputs, *final = run(layer_input) if checkpoint is None else checkpoint(run, layer_input)
            layer_outputs.append(outputs)  # (B, S, De)
            finals.append(final)  # h (and c): (directions, B, He) each
            layer_input = nn.functional.dropout(outputs, p=self.rnn.dropout, training=self.training)
        hidden = torch.cat([final[0] for final in finals])  # (Le x directions, B, He), layer-major as torch orders it
        cell = torch.cat([final[1] for final in finals]) if len(finals[0]) > 1 else None
        return layer_outputs[-1], hidden, cell, layer_outputs

    def encode_layer(self, layer: int, lengths: torch.Tensor, layer_input: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Layer ``layer`` over the packed source. :param layer_input: (B, S, In) :return: its output (B, S, De),
        zero at padding, and its final h (and c for an LSTM), (directions, B, He)"""
        packed = pack_padded_sequence(layer_input, lengths, batch_first=True, enforce_sorted=False)
        packed_outputs, *final = layer_tensors(self.rnn, layer, packed)
        outputs, _ = pad_packed_sequence(packed_outputs, batch_first=True, total_length=layer_input.size(1))
        return outputs, *final


class RNNSeq2SeqDecoder(Checkpointing):
    """Embedding, the bridge from the encoder's final states, and the decoder step, unrolled over the target. Under
    gradient checkpointing a fused step checkpoints its RNN layer by layer, and a token-by-token step is checkpointed
    whole, token by token, except in a call that returns hidden states or alignments (which the step records as it
    runs, and a second run would record twice)."""

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.embedding_dim, config.pad_token_id)
        self.dropout = config.dropout
        self.num_layers = config.decoder_layers
        self.has_attention = config.attention != "none"
        self.input_feeding = config.input_feeding
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
               ) -> tuple[torch.Tensor, DecoderState]:
        """Run the step over ``inputs`` (B, T, E): in one call where it is ``fused``, else token by token.

        :return: the readouts (B, T, O) and the final state
        """
        if self.step.fused:
            readout, state, _ = self.step(inputs, state, memory, record)
            return readout, state
        readouts, checkpoint = [], self.checkpoint_function() if record is None else None
        for t in range(inputs.size(1)):
            if checkpoint is None:
                readout, state, _ = self.step(inputs[:, t : t + 1], state, memory, record)  # (B, 1, O)
            else:
                readout, state = checkpointed_step(checkpoint, self.step, inputs[:, t : t + 1], state, memory)
            readouts.append(readout)
        return (readouts[0] if len(readouts) == 1 else torch.cat(readouts, dim=1)), state  # (B, T, O)

    def forward(
        self,
        input_ids: torch.LongTensor | None,
        encoder_outputs: RNNSeq2SeqEncoderOutput,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: RNNSeq2SeqCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """:param input_ids: (B, T) previous tokens y_{t-1} (only the new ones when the cache holds a state)
        :param encoder_attention_mask: (B, S) :param cache: read, then updated in place
        :return: ``last_hidden_state``, the vector the softmax reads (B, T, O); the cache; as asked,
            ``hidden_states`` (the embedding output (B, T, E), then each layer's s_t (B, T, H)) and
            ``cross_attentions``, ((B, 1, T, S),): alpha_t as one layer with one head"""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `decoder_input_ids` / `decoder_inputs_embeds` (or `labels`).")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, T, E)
        state, replay = self.resume(encoder_outputs, cache)
        replayed = replay.size(1) if replay is not None else 0
        if replayed:  # the cache was cropped into a call: run those tokens again first
            inputs_embeds = torch.cat([replay, inputs_embeds], dim=1)  # (B, r + T, E)
        embeds = nn.functional.dropout(inputs_embeds, p=self.dropout, training=self.training)
        memory = self.memory(encoder_outputs, encoder_attention_mask, cache)
        record = None
        if output_hidden_states or output_attentions:
            record = DecoderRecord(embeds.size(1), self.num_layers, output_hidden_states,
                                   output_attentions and self.has_attention)
        readout, state = self.unroll(embeds, state, memory, record)
        if cache is not None:
            cache.write(state, inputs_embeds)
        readout = nn.functional.dropout(readout, p=self.dropout, training=self.training)
        if self.output_projection is not None:
            readout = self.output_projection(readout)  # (B, T, E)
        hidden_states = (embeds, *(stack.result() for stack in record.layers)) if output_hidden_states else None
        alignments = record.alignments.result() if record is not None and record.alignments is not None else None
        if replayed:  # return the new tokens' outputs only
            readout = readout[:, replayed:]
            hidden_states = tuple(h[:, replayed:] for h in hidden_states) if hidden_states else None
            alignments = alignments[:, :, replayed:] if alignments is not None else None
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=readout, hidden_states=hidden_states, **cache_field(cache),
            cross_attentions=(alignments,) if alignments is not None else None)  # one "layer"

    def resume(self, encoder_outputs: RNNSeq2SeqEncoderOutput, cache: RNNSeq2SeqCache | None
               ) -> tuple[DecoderState, torch.Tensor | None]:
        """The state to go on from, and the embedded tokens (B, r, E) to run again first (after a crop into a call;
        else None): the cache's, or for a new source the bridge's initial state, which the cache records."""
        if cache is not None and not cache.is_empty:
            return cache.state.read()
        state = self.initial_state(encoder_outputs)
        if cache is not None:
            cache.state.start(state)
        return state, None

    def memory(self, encoder_outputs: RNNSeq2SeqEncoderOutput, encoder_attention_mask: torch.Tensor | None,
               cache: RNNSeq2SeqCache | None) -> EncoderMemory:
        """What the steps read from the source: h_j, the keys of the attention score (projected here, once per
        source, before the first step; kept in the cache between steps), the padding mask, the final states."""
        values = encoder_outputs.last_hidden_state  # (B, S, De)
        keys = cache.keys if cache is not None else None
        if keys is None:
            keys = self.step.project_keys(values)  # (B, S, A), or None without attention
            if keys is not None and cache is not None:
                cache.store_keys(keys, values)
        mask = encoder_attention_mask.bool() if encoder_attention_mask is not None else None
        return EncoderMemory(values, keys, mask, encoder_outputs.final_hidden_state)


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


class RNNSeq2SeqPreTrainedModel(LegacyKeysMixin, PreTrainedModel):
    config_class = RNNSeq2SeqConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True  # see `Checkpointing` (rnn_steps.py)
    # The recurrent stacks are the units to keep whole (device maps) and to shard (FSDP): they hold most weights and
    # no tied one. The rest of each decoder step (attention, W_c) stays with the embeddings, bridge and output layer
    # in the root unit, so that the decoder can project the attention keys before the first step.
    _no_split_modules = [rnn.__name__ for rnn in RNN_CLASSES.values()]
    # folders saved by encdec before 0.2 named Bahdanau's W_a and U_a (Appendix A.1.2) W_s and W_h
    _legacy_keys = {r"\.attention\.W_s\.": ".attention.W_a.", r"\.attention\.W_h\.": ".attention.U_a."}
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


class RNNSeq2SeqModel(Seq2SeqModelMixin, RNNSeq2SeqPreTrainedModel):
    """The bare encoder-decoder: returns the vector the softmax reads (B, T, O) and the alignments."""

    # the source and target vocabularies are joint, so one matrix can serve both embeddings (and the output
    # projection, see below); applied only when `config.tie_word_embeddings` is True
    _tied_weights_keys = {"decoder.embed_tokens.weight": "encoder.embed_tokens.weight"}

    def __init__(self, config: RNNSeq2SeqConfig) -> None:
        super().__init__(config)
        self.encoder = RNNSeq2SeqEncoder(config)
        self.decoder = RNNSeq2SeqDecoder(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: RNNSeq2SeqEncoderOutput | tuple | None = None,
        cache: RNNSeq2SeqCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        past_key_values: RNNSeq2SeqCache | None = None,
    ) -> Seq2SeqModelOutput | tuple:
        """:param input_ids: (B, S) source ids; :param attention_mask: (B, S) 1 = token, 0 = pad (right-padded);
        :param decoder_input_ids: (B, T) (only the new tokens when the cache holds a state);
        :param decoder_attention_mask: accepted for API compatibility and unused: the decoder is causal, so
            right-padding of the target cannot change earlier positions.
        :param cache: an ``RNNSeq2SeqCache``, read then updated in place (``past_key_values``: its name before
            transformers 5.24; either works).
        The output flags and ``use_cache`` left at None take the config's values.
        :return: ``Seq2SeqModelOutput`` (its ``to_tuple()`` when ``return_dict`` is False) with
            ``last_hidden_state`` (B, T, O) and the cache; with ``output_attentions`` the alignments as
            ``cross_attentions``, one entry (B, 1, T, S) (None without attention; an RNN has no self-attention, so
            ``encoder_attentions`` and ``decoder_attentions`` are None); with ``output_hidden_states`` the embedding
            output and every layer's states, for the encoder (Le + 1) and the decoder (Ld + 1)"""
        cache = cache_argument(cache, past_key_values)
        flags = OutputFlags.resolve(self.config, output_attentions, output_hidden_states, use_cache, return_dict)
        if flags.attentions:
            warn_no_self_attention()
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids, attention_mask, inputs_embeds,
                                           output_hidden_states=flags.hidden_states, return_dict=True)
        encoder_outputs = as_encoder_output(encoder_outputs)
        cache = (cache if cache is not None else RNNSeq2SeqCache()) if flags.use_cache else None
        decoded = self.decoder(decoder_input_ids, encoder_outputs, attention_mask, cache,
                               decoder_inputs_embeds, output_attentions=flags.attentions,
                               output_hidden_states=flags.hidden_states)
        output = Seq2SeqModelOutput(
            last_hidden_state=decoded.last_hidden_state,
            **cache_field(cache),
            decoder_hidden_states=decoded.hidden_states,
            cross_attentions=decoded.cross_attentions,
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
        self.set_default_budget(256)

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        """The state is recurrent, not key/value: generate must not make a ``DynamicCache`` (see below)."""
        return False

    def _prepare_cache_for_generation(self, generation_config, model_kwargs: dict, *args, **kwargs) -> None:
        """``generate`` starts with an empty ``RNNSeq2SeqCache`` (assisted decoding needs a cache before the first
        step), unless the caller passed one or ``use_cache=False``. It grows as it goes, as the "dynamic" cache does;
        a static, offloaded or quantized key/value cache has no meaning for a recurrent state. ``generate`` keeps the
        cache in ``model_kwargs`` under the running release's name (``compat.CACHE_NAME``)."""
        if model_kwargs.get(CACHE_NAME) is None and generation_config.use_cache is not False:
            if generation_config.cache_implementation not in (None, "dynamic"):
                raise ValueError(
                    f"`cache_implementation`={generation_config.cache_implementation!r} does not apply to an RNN: its "
                    "cache is the recurrent state (RNNSeq2SeqCache). Leave `cache_implementation` unset."
                )
            model_kwargs[CACHE_NAME] = RNNSeq2SeqCache()
            if getattr(generation_config, "is_assistant", False):  # a draft model's cache is cropped every round
                model_kwargs[CACHE_NAME].activate_past_recording()
            return
        super()._prepare_cache_for_generation(generation_config, model_kwargs, *args, **kwargs)

    def prepare_inputs_for_generation(self, input_ids: torch.LongTensor, next_sequence_length: int | None = None,
                                      **kwargs) -> dict:
        """Continued generation from a cache: the decoder reads only the tokens the cache has not consumed.
        transformers' ``generate`` works that out itself (``_prefill``) only for caches with key/value layers; this
        cache's layers are recurrent-state layers, which it leaves to the model (as for Mamba), so the rule is applied
        here: without a ``decoder_attention_mask``, or with one as long as the ids, the ids hold the whole prefix and
        the consumed ones are dropped; with a longer mask they are only the new tokens (transformers' convention)."""
        cache, mask = kwargs.get(CACHE_NAME), kwargs.get("decoder_attention_mask")
        if next_sequence_length is None and cache is not None and (mask is None or mask.shape[1] == input_ids.shape[1]):
            consumed = cache.get_seq_length()
            if 0 < consumed < input_ids.shape[1]:
                next_sequence_length = input_ids.shape[1] - consumed
        return super().prepare_inputs_for_generation(input_ids, next_sequence_length=next_sequence_length, **kwargs)

    def generate(self, *args, **kwargs):
        """transformers' ``generate``, unchanged, except that with ``return_dict_in_generate`` and
        ``output_attentions`` the field an RNN cannot fill, ``decoder_attentions`` (self-attention), is None instead
        of one None per step (``encoder_attentions`` is None already)."""
        output = super().generate(*args, **kwargs)
        if isinstance(output, ModelOutput) and output.get("decoder_attentions") is not None:
            output = type(output)(**{name: value for name, value in output.items() if name != "decoder_attentions"})
        return output

    @staticmethod
    def _reorder_cache(cache: RNNSeq2SeqCache, beam_idx: torch.LongTensor) -> RNNSeq2SeqCache:
        """Beam search: keep the states of the surviving beams (the keys are the same for all beams of a sentence)."""
        cache.reorder_beams(beam_idx)
        return cache


__all__ = [
    "RNNSeq2SeqCache",
    "RNNSeq2SeqForConditionalGeneration",
    "RNNSeq2SeqModel",
    "RNNSeq2SeqPreTrainedModel",
]
