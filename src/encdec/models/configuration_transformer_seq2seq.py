"""Configuration of the encoder-decoder Transformer (Vaswani et al. 2017, "Attention Is All You Need").

Every default is the paper's base model (Section 3 and Table 3, row "base"). Every deviation from the paper
is a named switch whose default is the paper's choice.
"""

from __future__ import annotations

from .configuration_seq2seq import Seq2SeqConfig
from .validation import check_choice, check_dropout, check_positive_int

_ACTIVATIONS = ("relu", "gelu", "swish", "silu")
_POSITION_TYPES = ("sinusoidal", "learned")
_SINUSOID_LAYOUTS = ("interleaved", "half_split")


class TransformerSeq2SeqConfig(Seq2SeqConfig):
    r"""Hyper-parameters of [`TransformerSeq2SeqModel`] and [`TransformerSeq2SeqForConditionalGeneration`].

    Args:
        vocab_size: size of the joint source/target vocabulary.
        d_model: model width ``d_model`` (paper: 512).
        encoder_layers / decoder_layers: ``N`` (paper: 6 each).
        encoder_attention_heads / decoder_attention_heads: ``h`` (paper: 8). ``d_k = d_v = d_model / h``.
        encoder_ffn_dim / decoder_ffn_dim: inner width ``d_ff`` of the position-wise FFN (paper: 2048).
        activation_function: ``"relu"`` (paper, Eq. 2), ``"gelu"`` or ``"swish"`` (= ``"silu"``, x * sigmoid(x);
            Ramachandran et al. 2017), the activation of Marian's OPUS-MT models (Junczys-Dowmunt et al. 2018).
        dropout: ``P_drop`` on sub-layer outputs and on embeddings + positions (paper: 0.1).
        attention_dropout: dropout on the attention weights (paper: none).
        activation_dropout: dropout inside the FFN, after the activation (paper: none).
        max_position_embeddings: longest sequence the position table covers.
        position_embedding_type: ``"sinusoidal"`` (paper, Section 3.5) or ``"learned"``.
        sinusoid_layout: ``"interleaved"`` puts sin on even and cos on odd dims (paper);
            ``"half_split"`` puts all sines first (tensor2tensor / Marian), for porting such checkpoints.
        normalize_before: ``False`` is post-LN, ``LayerNorm(x + Sublayer(x))`` (paper);
            ``True`` is pre-LN, ``x + Sublayer(LayerNorm(x))``, with a final LayerNorm on each stack
            (Xiong et al. 2020), which trains without a careful warm-up. Post-LN needs a warm-up that grows with
            depth (Liu et al. 2020): on Multi30k a 6+6 post-LN model stalled with a 400-step warm-up and trained
            with 4,000 steps, while 3+3 layers trained with 400 (encdec's docs/results.md).
        scale_embedding: multiply embeddings by ``sqrt(d_model)`` (paper, Section 3.4).
        tie_word_embeddings: share one matrix between the encoder embedding, the decoder embedding and the
            pre-softmax projection (paper, Section 3.4; Press & Wolf 2017).
        layer_norm_eps: epsilon of every LayerNorm.
        init_std: std of the normal init of embeddings (projections use Xavier-uniform).
        final_logits_bias: add a bias of one value per target token to the logits, ``softmax(W_out s_t + b)``,
            as Marian's output layer has (``MarianMTModel.final_logits_bias``, kept when a checkpoint is imported);
            the paper's projection has none. ``b`` is the (1, V) buffer ``final_logits_bias``: saved and loaded
            with the weights, zeros for a new model, and not trained (as in transformers' Marian).
    """

    model_type = "transformer_seq2seq"
    attribute_map = {
        "hidden_size": "d_model",
        "num_hidden_layers": "decoder_layers",
        "num_attention_heads": "decoder_attention_heads",
    }

    def __init__(
        self,
        vocab_size: int = 37000,
        d_model: int = 512,
        encoder_layers: int = 6,
        decoder_layers: int = 6,
        encoder_attention_heads: int = 8,
        decoder_attention_heads: int = 8,
        encoder_ffn_dim: int = 2048,
        decoder_ffn_dim: int = 2048,
        activation_function: str = "relu",
        dropout: float = 0.1,
        attention_dropout: float = 0.0,
        activation_dropout: float = 0.0,
        max_position_embeddings: int = 512,
        position_embedding_type: str = "sinusoidal",
        sinusoid_layout: str = "interleaved",
        normalize_before: bool = False,
        scale_embedding: bool = True,
        tie_word_embeddings: bool = True,
        layer_norm_eps: float = 1e-5,
        init_std: float = 0.02,
        final_logits_bias: bool = False,
        **kwargs,  # the special-token ids, use_cache, languages and transformers' own keys (Seq2SeqConfig)
    ) -> None:
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers
        self.encoder_attention_heads = encoder_attention_heads
        self.decoder_attention_heads = decoder_attention_heads
        self.encoder_ffn_dim = encoder_ffn_dim
        self.decoder_ffn_dim = decoder_ffn_dim
        self.activation_function = activation_function
        self.dropout = dropout
        self.attention_dropout = attention_dropout
        self.activation_dropout = activation_dropout
        self.max_position_embeddings = max_position_embeddings
        self.position_embedding_type = position_embedding_type
        self.sinusoid_layout = sinusoid_layout
        self.normalize_before = normalize_before
        self.scale_embedding = scale_embedding
        self.layer_norm_eps = layer_norm_eps
        self.init_std = init_std
        self.final_logits_bias = final_logits_bias
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    def validate_hyperparameters(self) -> None:
        """Raise a ``ValueError`` that names the offending field and the fix."""
        for name in ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                     "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings"):
            check_positive_int(name, getattr(self, name))
        for side in ("encoder", "decoder"):
            heads = getattr(self, f"{side}_attention_heads")
            if self.d_model % heads:
                raise ValueError(
                    f"`d_model`={self.d_model} is not divisible by `{side}_attention_heads`={heads}; choose a head "
                    f"count that divides d_model (d_k = d_model / heads)."
                )
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            check_dropout(name, getattr(self, name))
        check_choice("activation_function", self.activation_function, _ACTIVATIONS)
        check_choice("position_embedding_type", self.position_embedding_type, _POSITION_TYPES)
        check_choice("sinusoid_layout", self.sinusoid_layout, _SINUSOID_LAYOUTS)
        if self.position_embedding_type == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"`d_model`={self.d_model} must be even for sinusoidal positions (sin/cos pairs).")
        if not isinstance(self.layer_norm_eps, float) or self.layer_norm_eps <= 0:
            raise ValueError(f"`layer_norm_eps` must be a positive float, got {self.layer_norm_eps!r}.")
        if not isinstance(self.final_logits_bias, bool):
            raise ValueError(f"`final_logits_bias` must be true or false, got {self.final_logits_bias!r}.")
        if not isinstance(self.init_std, (int, float)) or self.init_std <= 0:
            raise ValueError(f"`init_std` must be a positive number, got {self.init_std!r}.")

    @property
    def head_dim(self) -> int:
        """``d_k = d_v = d_model / h`` (paper, Section 3.2.2)."""
        return self.d_model // self.decoder_attention_heads


__all__ = ["TransformerSeq2SeqConfig"]
