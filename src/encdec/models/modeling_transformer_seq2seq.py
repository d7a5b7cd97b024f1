"""The encoder-decoder Transformer of Vaswani et al. 2017, "Attention Is All You Need" (arXiv:1706.03762).

Shape legend:
    B  batch size            S  source length          T  target length
    D  d_model               H  attention heads        Dh head dim (d_k = d_v = D / H)
    F  FFN inner dim         V  vocabulary size

This file is copied next to the weights by ``save_pretrained``; it imports only torch, transformers' public
modules and single-dot siblings, so a saved folder loads with ``trust_remote_code=True`` without encdec.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable

import torch
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput, BaseModelOutputWithPastAndCrossAttentions, Seq2SeqModelOutput
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .attention import eager_attention_forward
from .compat import cache_argument, cache_field
from .configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from .seq2seq_utils import (
    LegacyKeysMixin,
    OutputFlags,
    Seq2SeqLMMixin,
    Seq2SeqModelMixin,
    as_return_type,
    seed_auto_map,
)


class SinusoidalPositionalEmbedding(nn.Module):
    """Fixed positions (Section 3.5): PE(pos, 2i) = sin(pos / 10000^(2i/D)), PE(pos, 2i+1) = cos(same).

    ``sinusoid_layout="half_split"`` stores all sines first, then all cosines (tensor2tensor, Marian).
    The table is a non-persistent buffer (never saved) and grows on demand, so any length works.
    """

    def __init__(self, config: TransformerSeq2SeqConfig) -> None:
        super().__init__()
        self.d_model = config.d_model
        self.interleaved = config.sinusoid_layout == "interleaved"
        self.register_buffer("table", self.build_table(config.max_position_embeddings), persistent=False)

    def build_table(self, num_positions: int) -> torch.Tensor:
        """The (P, D) float32 table. The half-split table is computed in float64, as Marian's numpy table is: in
        float32 the angles of far positions lose digits (up to 6e-5 at D=512, P=1024), and an imported Marian model
        would differ from its source by that much. The interleaved one stays computed in float32, as every encdec
        model of that layout was trained with it: their outputs stay bit for bit what they were."""
        dtype = torch.float32 if self.interleaved else torch.float64
        position = torch.arange(num_positions, dtype=dtype).unsqueeze(1)  # (P, 1)
        two_i = torch.arange(0, self.d_model, 2, dtype=dtype)  # (D/2,)
        inv_freq = torch.exp(two_i * (-math.log(10000.0) / self.d_model))  # 1 / 10000^(2i/D)
        angles = position * inv_freq  # (P, D/2)
        if self.interleaved:
            table = torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)  # (P, D): sin, cos, sin, cos ...
        else:
            table = torch.cat([angles.sin(), angles.cos()], dim=-1)  # (P, D): sin ... sin, cos ... cos
        return table.float()

    def forward(self, past_length: int, length: int) -> torch.Tensor:
        """:return: (length, D) encodings of positions past_length .. past_length + length - 1"""
        end = past_length + length
        table = self.table
        if end > table.size(0):
            table = self.build_table(end).to(table.device)
        return table[past_length:end]


class LearnedPositionalEmbedding(nn.Embedding):
    """Learned absolute positions (the paper's Table 3, row E: "nearly identical results")."""

    def __init__(self, config: TransformerSeq2SeqConfig) -> None:
        super().__init__(config.max_position_embeddings, config.d_model)

    def forward(self, past_length: int, length: int) -> torch.Tensor:
        """:return: (length, D)"""
        end = past_length + length
        if end > self.num_embeddings:
            raise ValueError(
                f"Sequence of {end} positions exceeds `max_position_embeddings`={self.num_embeddings} of this model "
                "(learned positions cannot extrapolate); truncate the input (e.g. tokenizer `max_length`) or "
                "generate fewer tokens."
            )
        return self.weight[past_length:end]


def build_position_embedding(config: TransformerSeq2SeqConfig) -> nn.Module:
    if config.position_embedding_type == "learned":
        return LearnedPositionalEmbedding(config)
    return SinusoidalPositionalEmbedding(config)


class TransformerSeq2SeqAttention(nn.Module):
    """Multi-head attention (Section 3.2.2).

    ``MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O`` with ``head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)``.

    The per-head projections of all heads are stacked into one matrix; self-attention stacks W^Q, W^K and W^V
    too (``qkv_proj``), cross-attention stacks W^K and W^V (``kv_proj``): one matrix product instead of three,
    identical math. Cross-attention K/V are computed once per source and kept in the ``EncoderDecoderCache``.
    """

    def __init__(self, config: TransformerSeq2SeqConfig, num_heads: int, is_cross_attention: bool = False,
                 is_causal: bool = False, layer_idx: int | None = None) -> None:
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads
        self.scaling = self.head_dim**-0.5  # 1 / sqrt(d_k)
        self.dropout = config.attention_dropout
        self.is_cross_attention = is_cross_attention
        self.is_causal = is_causal
        self.layer_idx = layer_idx
        d = config.d_model
        if is_cross_attention:
            self.q_proj = nn.Linear(d, d)  # W^Q
            self.kv_proj = nn.Linear(d, 2 * d)  # [W^K; W^V]
        else:
            self.qkv_proj = nn.Linear(d, 3 * d)  # [W^Q; W^K; W^V]
        self.out_proj = nn.Linear(d, d)  # W^O

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, D) -> (B, H, L, Dh)"""
        return x.view(*x.shape[:-1], self.num_heads, self.head_dim).transpose(1, 2)

    def project(self, hidden_states: torch.Tensor, key_value_states: torch.Tensor | None,
                cache: Cache | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return Q, K, V, each (B, H, L, Dh), reading and updating the cache."""
        if not self.is_cross_attention:
            query, key, value = self.qkv_proj(hidden_states).chunk(3, dim=-1)  # 3 x (B, T, D)
            query, key, value = self.split_heads(query), self.split_heads(key), self.split_heads(value)
            if cache is not None:  # append this step's K/V to the self-attention cache
                self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
                key, value = self_cache.update(key, value, self.layer_idx)  # (B, H, T_past + T, Dh)
            return query, key, value
        query = self.split_heads(self.q_proj(hidden_states))  # (B, H, T, Dh)
        if cache is not None and cache.is_updated.get(self.layer_idx):
            layer = cache.cross_attention_cache.layers[self.layer_idx]
            return query, layer.keys, layer.values  # encoder K/V computed at the first step
        key, value = self.kv_proj(key_value_states).chunk(2, dim=-1)  # 2 x (B, S, D)
        # contiguous: these are read at every generation step, and strided slices make each read slower
        key, value = self.split_heads(key).contiguous(), self.split_heads(value).contiguous()  # (B, H, S, Dh)
        if cache is not None:
            key, value = cache.cross_attention_cache.update(key, value, self.layer_idx)
            cache.is_updated[self.layer_idx] = True
        return query, key, value

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        key_value_states: torch.Tensor | None = None,
        cache: Cache | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:param hidden_states: (B, T, D) queries; :param key_value_states: (B, S, D) encoder output for
        cross-attention. :return: (B, T, D) and the weights (B, H, T, S) when ``output_attentions``."""
        query, key, value = self.project(hidden_states, key_value_states, cache)
        attention_fn: Callable = eager_attention_forward
        if not output_attentions:  # only the eager math returns the weights: such calls run through it (mask_config)
            # looked up at each call, so that `set_attn_implementation` switches a loaded model
            attention_fn = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation,
                                                                 eager_attention_forward)
        context, weights = attention_fn(
            self, query, key, value, attention_mask,
            scaling=self.scaling, dropout=self.dropout if self.training else 0.0,
        )  # context (B, T, H, Dh)
        context = context.reshape(*hidden_states.shape[:-1], -1)  # (B, T, D): Concat(head_1..head_h)
        return self.out_proj(context), (weights if output_attentions else None)


def mask_config(config: TransformerSeq2SeqConfig, output_attentions: bool) -> TransformerSeq2SeqConfig:
    """The config the attention masks are built for: the model's, or an eager copy of it when the call returns
    attention weights. Only the eager math returns them (SDPA, flash and flex attention do not), so such a call runs
    every attention through it (``TransformerSeq2SeqAttention``), whatever the backend, and its masks must be eager's:
    flex attention's are ``BlockMask``s and flash attention's 2-D."""
    if not output_attentions or config._attn_implementation == "eager":
        return config
    eager = copy.copy(config)
    eager._attn_implementation_internal = "eager"
    return eager


class FeedForward(nn.Module):
    """Position-wise FFN (Eq. 2): FFN(x) = act(x W_1 + b_1) W_2 + b_2, act = max(0, .) in the paper (relu), or gelu
    or swish (``config.activation_function``)."""

    def __init__(self, config: TransformerSeq2SeqConfig, ffn_dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, ffn_dim)
        self.fc2 = nn.Linear(ffn_dim, config.d_model)
        self.activation = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.activation(self.fc1(x))  # (B, L, F)
        h = nn.functional.dropout(h, p=self.activation_dropout, training=self.training)
        return self.fc2(h)  # (B, L, D)


class ResidualLayer(GradientCheckpointingLayer):
    """What encoder and decoder layers share: every sub-layer sits in a residual connection with a LayerNorm
    (Section 3.1), and its output is dropped out before the sum (Section 5.4).

    post-LN (the paper): x = LayerNorm(x + Dropout(Sublayer(x)))
    pre-LN (``normalize_before``, Xiong et al. 2020): x = x + Dropout(Sublayer(LayerNorm(x)))
    """

    def __init__(self, config: TransformerSeq2SeqConfig) -> None:
        super().__init__()
        self.normalize_before = config.normalize_before
        self.dropout = config.dropout

    def sublayer_input(self, x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        """What the sub-layer reads: LayerNorm(x) with pre-LN, x itself with post-LN."""
        return norm(x) if self.normalize_before else x

    def add_and_norm(self, x: torch.Tensor, sublayer_output: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        """The residual sum x + Dropout(Sublayer(...)), then LayerNorm with post-LN."""
        x = x + nn.functional.dropout(sublayer_output, p=self.dropout, training=self.training)
        return x if self.normalize_before else norm(x)


class TransformerSeq2SeqEncoderLayer(ResidualLayer):
    """Encoder layer (Section 3.1): self-attention, then the FFN, each wrapped in a residual + LayerNorm."""

    def __init__(self, config: TransformerSeq2SeqConfig) -> None:
        super().__init__(config)
        self.self_attn = TransformerSeq2SeqAttention(config, config.encoder_attention_heads)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config, config.encoder_ffn_dim)
        self.ffn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor | None = None,
                output_attentions: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:param x: (B, S, D) :return: (B, S, D) and self-attention weights (B, H, S, S) or None"""
        attended, weights = self.self_attn(self.sublayer_input(x, self.self_attn_layer_norm), attention_mask,
                                           output_attentions=output_attentions)
        x = self.add_and_norm(x, attended, self.self_attn_layer_norm)
        x = self.add_and_norm(x, self.ffn(self.sublayer_input(x, self.ffn_layer_norm)), self.ffn_layer_norm)
        return x, weights


class TransformerSeq2SeqDecoderLayer(ResidualLayer):
    """Decoder layer (Section 3.1): masked self-attention, cross-attention over the encoder output, then the
    FFN, each wrapped in a residual + LayerNorm."""

    def __init__(self, config: TransformerSeq2SeqConfig, layer_idx: int) -> None:
        super().__init__(config)
        heads = config.decoder_attention_heads
        self.self_attn = TransformerSeq2SeqAttention(config, heads, is_causal=True, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.cross_attn = TransformerSeq2SeqAttention(config, heads, is_cross_attention=True, layer_idx=layer_idx)
        self.cross_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.ffn = FeedForward(config, config.decoder_ffn_dim)
        self.ffn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        output_attentions: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """:param x: (B, T, D); :param encoder_hidden_states: (B, S, D)
        :return: (B, T, D), self-attention weights (B, H, T, T_total), cross-attention weights (B, H, T, S)"""
        attended, self_weights = self.self_attn(self.sublayer_input(x, self.self_attn_layer_norm), attention_mask,
                                                cache=cache, output_attentions=output_attentions)
        x = self.add_and_norm(x, attended, self.self_attn_layer_norm)
        attended, cross_weights = self.cross_attn(
            self.sublayer_input(x, self.cross_attn_layer_norm), encoder_attention_mask,
            key_value_states=encoder_hidden_states, cache=cache,
            output_attentions=output_attentions,
        )
        x = self.add_and_norm(x, attended, self.cross_attn_layer_norm)
        x = self.add_and_norm(x, self.ffn(self.sublayer_input(x, self.ffn_layer_norm)), self.ffn_layer_norm)
        return x, self_weights, cross_weights


class TransformerSeq2SeqPreTrainedModel(LegacyKeysMixin, PreTrainedModel):
    config_class = TransformerSeq2SeqConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _no_split_modules = ["TransformerSeq2SeqEncoderLayer", "TransformerSeq2SeqDecoderLayer"]
    # folders saved by encdec before 0.2 held each LayerNorm in a residual wrapper module
    _legacy_keys = {rf"\.{name}_block\.layer_norm\.": f".{name}_layer_norm."
                    for name in ("self_attn", "cross_attn", "ffn")}
    _supports_sdpa = True
    _supports_flash_attn = True
    _supports_flex_attn = True
    # forward takes `num_items_in_batch`, so Trainer hands it over and the loss is exact under accumulation
    accepts_loss_kwargs = True

    def __init__(self, config: TransformerSeq2SeqConfig, *inputs, **kwargs) -> None:
        super().__init__(config, *inputs, **kwargs)
        seed_auto_map(config, __name__, "TransformerSeq2SeqModel")

    @torch.no_grad()
    def _init_weights(self, module: nn.Module) -> None:
        """Xavier-uniform for every projection, zero biases (as the Annotated Transformer and fairseq do);
        N(0, init_std) for token embeddings (zero row for padding); the sinusoid table is recomputed."""
        if isinstance(module, nn.Linear):
            init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, SinusoidalPositionalEmbedding):
            init.copy_(module.table, module.build_table(module.table.size(0)))
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=self.config.init_std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, TransformerSeq2SeqForConditionalGeneration) and module.final_logits_bias is not None:
            init.zeros_(module.final_logits_bias)


class TransformerSeq2SeqEmbedding(nn.Module):
    """Token embedding x sqrt(D) (Section 3.4) plus positions (Section 3.5), then dropout (Section 5.4)."""

    def __init__(self, config: TransformerSeq2SeqConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.embed_positions = build_position_embedding(config)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.dropout = config.dropout

    def forward(self, input_ids: torch.Tensor | None, inputs_embeds: torch.Tensor | None,
                past_length: int = 0) -> torch.Tensor:
        """:param input_ids: (B, L) :return: (B, L, D)"""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of `input_ids` / `inputs_embeds` (and their `decoder_` versions).")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)  # (B, L, D)
        positions = self.embed_positions(past_length, inputs_embeds.size(1))  # (L, D)
        hidden = inputs_embeds * self.embed_scale + positions.to(inputs_embeds.dtype)
        return nn.functional.dropout(hidden, p=self.dropout, training=self.training)


class TransformerSeq2SeqStack(nn.Module):
    """What both stacks hold: the embedding, N layers and, for pre-LN, a final LayerNorm (pre-LN leaves the residual
    stream un-normalised, so the stack ends with one)."""

    def __init__(self, config: TransformerSeq2SeqConfig, layers: list[nn.Module]) -> None:
        super().__init__()
        self.config = config
        self.embeddings = TransformerSeq2SeqEmbedding(config)
        self.layers = nn.ModuleList(layers)
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) \
            if config.normalize_before else None

    def get_input_embeddings(self) -> nn.Embedding:
        return self.embeddings.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.embeddings.embed_tokens = value


class TransformerSeq2SeqEncoder(TransformerSeq2SeqStack):
    """A stack of N encoder layers over the embedded source (Section 3.1)."""

    main_input_name = "input_ids"

    def __init__(self, config: TransformerSeq2SeqConfig) -> None:
        super().__init__(config, [TransformerSeq2SeqEncoderLayer(config) for _ in range(config.encoder_layers)])

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
    ) -> BaseModelOutput | tuple:
        """:param input_ids: (B, S); :param attention_mask: (B, S), 1 = token, 0 = padding; the output flags left at
        None take the config's values.
        :return: ``last_hidden_state`` (B, S, D); with ``output_hidden_states`` the embedding output and every layer's
        output (N + 1 tensors, the last one after the final LayerNorm of pre-LN, i.e. ``last_hidden_state``); with
        ``output_attentions`` every layer's (B, H, S, S) weights"""
        flags = OutputFlags.resolve(self.config, output_attentions, output_hidden_states, return_dict=return_dict)
        hidden_states = self.embeddings(input_ids, inputs_embeds)  # (B, S, D)
        mask = create_bidirectional_mask(config=mask_config(self.config, flags.attentions), inputs_embeds=hidden_states,
                                         attention_mask=attention_mask)  # None, or per backend
        all_hidden = () if flags.hidden_states else None
        all_attentions = () if flags.attentions else None
        for layer in self.layers:
            if flags.hidden_states:
                all_hidden += (hidden_states,)
            hidden_states, weights = layer(hidden_states, attention_mask=mask, output_attentions=flags.attentions)
            if flags.attentions:
                all_attentions += (weights,)
        if self.final_layer_norm is not None:
            hidden_states = self.final_layer_norm(hidden_states)
        if flags.hidden_states:
            all_hidden += (hidden_states,)
        output = BaseModelOutput(last_hidden_state=hidden_states, hidden_states=all_hidden, attentions=all_attentions)
        return as_return_type(output, flags.return_dict)


class TransformerSeq2SeqDecoder(TransformerSeq2SeqStack):
    """A stack of N decoder layers (Section 3.1); the self-attention is causal (Section 3.2.3)."""

    def __init__(self, config: TransformerSeq2SeqConfig) -> None:
        super().__init__(config, [TransformerSeq2SeqDecoderLayer(config, layer_idx=i)
                                  for i in range(config.decoder_layers)])

    def forward(
        self,
        input_ids: torch.Tensor | None,
        encoder_hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """:param input_ids: (B, T) (only the new tokens when a cache is given); :param attention_mask:
        (B, T_past + T); :return: ``last_hidden_state`` (B, T, D), the cache, the hidden states (the embedding output
        and every layer's output, the last one after pre-LN's final LayerNorm), self- and cross-attention weights"""
        past_length = cache.get_seq_length() if cache is not None else 0
        hidden_states = self.embeddings(input_ids, inputs_embeds, past_length)  # (B, T, D)
        self_cache = cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache
        config = mask_config(self.config, output_attentions)
        causal_mask = None  # one new token without padding sees every cached position: nothing to mask
        if attention_mask is not None or hidden_states.size(1) > 1:
            # the cache is create_causal_mask's 4th argument on every release; only its keyword changed (compat)
            causal_mask = create_causal_mask(config, hidden_states, attention_mask, self_cache)
        cross_mask = create_bidirectional_mask(config=config, inputs_embeds=hidden_states,
                                               attention_mask=encoder_attention_mask,
                                               encoder_hidden_states=encoder_hidden_states)
        all_hidden = () if output_hidden_states else None
        self_attentions = () if output_attentions else None
        cross_attentions = () if output_attentions else None
        for layer in self.layers:
            if output_hidden_states:
                all_hidden += (hidden_states,)
            hidden_states, self_weights, cross_weights = layer(
                hidden_states, encoder_hidden_states, attention_mask=causal_mask,
                encoder_attention_mask=cross_mask, cache=cache,
                output_attentions=output_attentions,
            )
            if output_attentions:
                self_attentions += (self_weights,)
                cross_attentions += (cross_weights,)
        if self.final_layer_norm is not None:
            hidden_states = self.final_layer_norm(hidden_states)
        if output_hidden_states:
            all_hidden += (hidden_states,)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, hidden_states=all_hidden, attentions=self_attentions,
            cross_attentions=cross_attentions, **cache_field(cache),
        )


class TransformerSeq2SeqModel(Seq2SeqModelMixin, TransformerSeq2SeqPreTrainedModel):
    """The bare encoder-decoder: returns the decoder's last hidden states (B, T, D)."""

    # 3-way tying (Section 3.4): one matrix serves both embeddings (and the LM head, see below);
    # applied only when `config.tie_word_embeddings` is True
    _tied_weights_keys = {"decoder.embeddings.embed_tokens.weight": "encoder.embeddings.embed_tokens.weight"}

    def __init__(self, config: TransformerSeq2SeqConfig) -> None:
        super().__init__(config)
        self.encoder = TransformerSeq2SeqEncoder(config)
        self.decoder = TransformerSeq2SeqDecoder(config)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        past_key_values: Cache | None = None,
    ) -> Seq2SeqModelOutput | tuple:
        """:param input_ids: (B, S) source ids; :param attention_mask: (B, S) 1 = token, 0 = pad;
        :param decoder_input_ids: (B, T) (only new tokens with a cache); :param decoder_attention_mask: (B, T);
        :param cache: an ``EncoderDecoderCache``, read then updated in place, ``use_cache`` or not (as in Marian: a
        prefix the caller passes is used with labels too); ``past_key_values``: its name before transformers 5.24
        (either works); the output flags and ``use_cache`` left at None take the config's values (``use_cache``: make
        a cache when none is passed).
        :return: ``Seq2SeqModelOutput`` with ``last_hidden_state`` (B, T, D) (``to_tuple()`` if not ``return_dict``)"""
        cache = cache_argument(cache, past_key_values, owner=self)
        flags = OutputFlags.resolve(self.config, output_attentions, output_hidden_states, use_cache, return_dict)
        if encoder_outputs is None:
            encoder_outputs = self.encoder(input_ids, attention_mask, inputs_embeds,
                                           output_attentions=flags.attentions,
                                           output_hidden_states=flags.hidden_states, return_dict=True)
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        if cache is None and flags.use_cache:
            cache = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        decoded = self.decoder(
            decoder_input_ids, encoder_outputs.last_hidden_state, attention_mask=decoder_attention_mask,
            encoder_attention_mask=attention_mask, cache=cache,
            inputs_embeds=decoder_inputs_embeds, output_attentions=flags.attentions,
            output_hidden_states=flags.hidden_states,
        )
        output = Seq2SeqModelOutput(
            last_hidden_state=decoded.last_hidden_state,
            **cache_field(cache),
            decoder_hidden_states=decoded.hidden_states,
            decoder_attentions=decoded.attentions,
            cross_attentions=decoded.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )
        return as_return_type(output, flags.return_dict)


class TransformerSeq2SeqForConditionalGeneration(Seq2SeqLMMixin, TransformerSeq2SeqPreTrainedModel, GenerationMixin):
    """The Transformer with its pre-softmax projection: P(y_t | y_<t, x) = softmax(W_out s_t) (Section 3.4)."""

    _tied_weights_keys = {
        "lm_head.weight": "model.encoder.embeddings.embed_tokens.weight",
        "model.decoder.embeddings.embed_tokens.weight": "model.encoder.embeddings.embed_tokens.weight",
    }

    def __init__(self, config: TransformerSeq2SeqConfig) -> None:
        super().__init__(config)
        self.model = TransformerSeq2SeqModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        # Marian's output bias (config.final_logits_bias): a buffer, as in transformers' MarianMTModel, so an imported
        # checkpoint keeps its name and shape; None (no entry in the weights) for the paper's projection
        self.final_logits_bias = None
        if config.final_logits_bias:
            del self.final_logits_bias
            self.register_buffer("final_logits_bias", torch.zeros(1, config.vocab_size))  # (1, V)
        self.post_init()
        self.set_default_budget(config.max_position_embeddings - 1)  # + the start token

    @staticmethod
    def _reorder_cache(cache: EncoderDecoderCache, beam_idx: torch.LongTensor) -> EncoderDecoderCache:
        """Beam search: keep the self-attention K/V of the surviving beams. ``beam_idx`` only moves beams within
        their own sentence, and the cross-attention K/V are the same for every beam of a sentence (they depend on
        the source alone), so they stay as they are instead of being copied at every step."""
        cache.self_attention_cache.reorder_cache(beam_idx)
        return cache


__all__ = [
    "TransformerSeq2SeqForConditionalGeneration",
    "TransformerSeq2SeqModel",
    "TransformerSeq2SeqPreTrainedModel",
]
