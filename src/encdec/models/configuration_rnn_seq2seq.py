"""Configuration of the recurrent encoder-decoder (LSTM or GRU), with or without attention.

One config covers the family's papers:

- no attention: Sutskever et al. 2014, "Sequence to Sequence Learning with Neural Networks" (LSTM), and
  Cho et al. 2014, "Learning Phrase Representations using RNN Encoder-Decoder" (GRU);
- ``attention="bahdanau"``: Bahdanau et al. 2015, "Neural Machine Translation by Jointly Learning to Align and
  Translate" (additive attention, bidirectional encoder);
- ``attention="luong_*"``: Luong et al. 2015, "Effective Approaches to Attention-based Neural Machine
  Translation" (global attention, Section 3.1, with the dot / general / concat scores of Eq. 8).

Every default is Luong et al.'s global-attention model (Section 4.1): a 4-layer unidirectional LSTM with
1000 cells and 1000-dim embeddings, the ``general`` score, input feeding, dropout 0.2 and uniform init in
[-0.1, 0.1]. Every deviation from a paper is a named switch.
"""

from __future__ import annotations

from .configuration_seq2seq import Seq2SeqConfig
from .validation import check_choice, check_dropout, check_positive_int

_CELL_TYPES = ("lstm", "gru")
_ATTENTIONS = ("none", "bahdanau", "luong_dot", "luong_general", "luong_concat")
_BRIDGES = ("last", "linear_tanh", "zero")


class RNNSeq2SeqConfig(Seq2SeqConfig):
    r"""Hyper-parameters of [`RNNSeq2SeqModel`] and [`RNNSeq2SeqForConditionalGeneration`].

    Args:
        vocab_size: size of the joint source/target vocabulary (Luong: 50K).
        embedding_dim: width of the token embeddings (Luong: 1000; Bahdanau: 620).
        hidden_size: width of the decoder's recurrent state s_t (Luong: 1000).
        encoder_hidden_size: width of each encoder direction. ``None`` gives ``hidden_size`` for a unidirectional
            encoder and ``hidden_size // 2`` for a bidirectional one, so that the encoder output (both directions
            concatenated) is as wide as the decoder state (the OpenNMT convention).
        encoder_layers / decoder_layers: depth of the stacked RNNs (Luong: 4; Sutskever: 4).
        cell_type: ``"lstm"`` (Hochreiter & Schmidhuber 1997; Sutskever, Luong) or ``"gru"`` (Cho et al. 2014;
            Bahdanau's "gated hidden unit").
        bidirectional_encoder: read the source in both directions and concatenate the two states per position,
            ``h_i = [h_i^forward; h_i^backward]`` (Bahdanau, Section 3.2). Luong: unidirectional.
        attention: ``"none"`` (the decoder sees the source only through its initial state), ``"bahdanau"``
            (additive score on s_{t-1}, before the decoder step), or ``"luong_dot"`` / ``"luong_general"`` /
            ``"luong_concat"`` (Luong's Eq. 8 score on s_t, after the decoder step).
        input_feeding: feed the attentional vector h̃_{t-1} into the next decoder step (Luong, Section 3.3).
            ``None`` means on for the Luong variants (the paper) and off otherwise; it exists only for Luong.
        context_feeding: with ``attention="none"`` only: the source summary c (the top encoder layer's final
            state) joins every decoder step's input and the readout (Cho et al. 2014, Section 2.2), instead of
            reaching the decoder through its initial state alone (Sutskever et al. 2014; default False).
        bridge: how the decoder's initial state is made from the encoder's final states.
            ``"last"``: s_0 = h_T and c'_0 = c_T per layer (Sutskever; Luong), both directions concatenated for a
            bidirectional encoder; the encoder output width and the layer counts must match the decoder's.
            ``"linear_tanh"``: s_0 = tanh(W_s h_final) (Bahdanau, Appendix A.2.2, where h_final is the backward
            state at the first word), generalised to all encoder layers and directions, and to every decoder
            layer, for h and (LSTM) c alike. ``"zero"``: start from zeros (needs attention to see the source).
        dropout: dropout on the embeddings, between stacked RNN layers (Zaremba et al. 2014) and on the vector
            the softmax reads (Luong: 0.2).
        tie_word_embeddings: share one matrix between the encoder embedding, the decoder embedding and the output
            projection (Press & Wolf 2017). The papers do not tie (default False). When the vector the softmax
            reads is not ``embedding_dim`` wide, a bias-free linear ``output_projection`` maps it to that width.
        init_range: every parameter starts uniform in [-init_range, init_range] (Luong: 0.1; Sutskever: 0.08).
    """

    model_type = "rnn_seq2seq"
    # transformers' generic names; the alignment is one distribution over the source per step: one "head"
    attribute_map = {"num_hidden_layers": "decoder_layers", "num_attention_heads": "alignment_heads"}

    def __init__(
        self,
        vocab_size: int = 50000,
        embedding_dim: int = 1000,
        hidden_size: int = 1000,
        encoder_hidden_size: int | None = None,
        encoder_layers: int = 4,
        decoder_layers: int = 4,
        cell_type: str = "lstm",
        bidirectional_encoder: bool = False,
        attention: str = "luong_general",
        input_feeding: bool | None = None,
        context_feeding: bool = False,
        bridge: str = "last",
        dropout: float = 0.2,
        tie_word_embeddings: bool = False,
        init_range: float = 0.1,
        **kwargs,  # the special-token ids, use_cache, languages and transformers' own keys (Seq2SeqConfig)
    ) -> None:
        self.vocab_size = vocab_size
        self.embedding_dim = embedding_dim
        self.hidden_size = hidden_size
        self.bidirectional_encoder = bidirectional_encoder
        if encoder_hidden_size is None and isinstance(hidden_size, int):
            encoder_hidden_size = hidden_size // 2 if bidirectional_encoder else hidden_size
        self.encoder_hidden_size = encoder_hidden_size
        self.encoder_layers = encoder_layers
        self.decoder_layers = decoder_layers
        self.cell_type = cell_type
        self.attention = attention
        self.input_feeding = input_feeding
        self.context_feeding = context_feeding
        self.bridge = bridge
        self.dropout = dropout
        self.init_range = init_range
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)

    def validate_hyperparameters(self) -> None:
        """Resolve ``input_feeding`` and raise a ``ValueError`` that names the offending field and the fix."""
        check_choice("cell_type", self.cell_type, _CELL_TYPES)
        check_choice("attention", self.attention, _ATTENTIONS)
        check_choice("bridge", self.bridge, _BRIDGES)
        for name in ("vocab_size", "embedding_dim", "hidden_size", "encoder_layers", "decoder_layers"):
            check_positive_int(name, getattr(self, name))
        if self.bidirectional_encoder and self.encoder_hidden_size == 0:
            raise ValueError("`hidden_size`=1 cannot be split over two encoder directions; set `encoder_hidden_size`.")
        check_positive_int("encoder_hidden_size", self.encoder_hidden_size)
        check_dropout("dropout", self.dropout)
        if not isinstance(self.init_range, (int, float)) or isinstance(self.init_range, bool) or self.init_range <= 0:
            raise ValueError(f"`init_range` must be a positive number, got {self.init_range!r}.")
        self._check_input_feeding()
        if not isinstance(self.context_feeding, bool):
            raise ValueError(f"`context_feeding` must be True or False, got {self.context_feeding!r}.")
        if self.context_feeding and self.attention != "none":
            raise ValueError(
                f"`context_feeding`=True feeds one fixed source summary to every step (Cho et al. 2014); with "
                f"`attention`={self.attention!r} each step already reads its own context. Set `context_feeding` to "
                "False, or `attention` to 'none'."
            )
        self._check_shapes()

    def _check_input_feeding(self) -> None:
        is_luong = self.attention.startswith("luong")
        if self.input_feeding is None:
            self.input_feeding = is_luong
        elif not isinstance(self.input_feeding, bool):
            raise ValueError(f"`input_feeding` must be True, False or None, got {self.input_feeding!r}.")
        elif self.input_feeding and not is_luong:
            raise ValueError(
                f"`input_feeding`=True needs a Luong attention (luong_dot / luong_general / luong_concat), but "
                f"`attention`={self.attention!r}; set `input_feeding` to False or None (Luong et al. 2015, Section "
                "3.3, feeds the attentional vector h̃_{t-1}, which only the Luong variants compute)."
            )

    def _check_shapes(self) -> None:
        if self.bridge == "last":
            if self.encoder_layers != self.decoder_layers:
                raise ValueError(
                    f"`bridge`='last' copies each encoder layer's final state into the same decoder layer, but "
                    f"`encoder_layers`={self.encoder_layers} != `decoder_layers`={self.decoder_layers}; make them "
                    "equal or use `bridge`='linear_tanh' (or 'zero')."
                )
            if self.encoder_output_size != self.hidden_size:
                raise ValueError(
                    f"`bridge`='last' needs the encoder's final state ({self.num_directions} direction(s) x "
                    f"`encoder_hidden_size`={self.encoder_hidden_size} = {self.encoder_output_size}) to be as wide as "
                    f"the decoder's `hidden_size`={self.hidden_size}; leave `encoder_hidden_size` at None or use "
                    "`bridge`='linear_tanh'."
                )
        if self.attention == "luong_dot" and self.encoder_output_size != self.hidden_size:
            raise ValueError(
                f"`attention`='luong_dot' scores s_tᵀ h_i, so the encoder output width ({self.encoder_output_size}) "
                f"must equal `hidden_size`={self.hidden_size}; leave `encoder_hidden_size` at None or use "
                "'luong_general'."
            )
        if self.attention == "none" and self.bridge == "zero":
            raise ValueError(
                "`bridge`='zero' with `attention`='none' leaves the decoder blind to the source; use `bridge`='last' "
                "or 'linear_tanh', or add attention."
            )

    @property
    def alignment_heads(self) -> int:
        """1: the alignment alpha_t is a single distribution over the source (``num_attention_heads``)."""
        return 1

    @alignment_heads.setter
    def alignment_heads(self, value: int) -> None:
        if value != 1:
            raise ValueError(f"`num_attention_heads` of an RNN seq2seq model is 1 (one alignment per step), got "
                             f"{value!r}.")

    @property
    def num_directions(self) -> int:
        return 2 if self.bidirectional_encoder else 1

    @property
    def encoder_output_size(self) -> int:
        """Width of h_i, the encoder output at one source position (both directions concatenated)."""
        return self.num_directions * self.encoder_hidden_size

    @property
    def fed_context_size(self) -> int:
        """Width of the context that joins both the decoder input and the readout: c_t (Bahdanau) or c (context
        feeding) are ``encoder_output_size`` wide; the other variants feed none (0)."""
        return self.encoder_output_size if self.attention == "bahdanau" or self.context_feeding else 0

    @property
    def decoder_input_size(self) -> int:
        """Width of the decoder RNN input: E y_{t-1}, plus c_t (Bahdanau), c (context feeding) or h̃_{t-1} (Luong
        input feeding)."""
        return self.embedding_dim + self.fed_context_size + (self.hidden_size if self.input_feeding else 0)

    @property
    def readout_size(self) -> int:
        """Width of the vector the softmax reads: s_t (none), [s_t; c] (context feeding), [s_t; c_t] (Bahdanau) or
        h̃_t (Luong, Eq. 5)."""
        return self.hidden_size + self.fed_context_size

    @property
    def output_size(self) -> int:
        """Input width of the output projection W_o: ``embedding_dim`` when it is tied to the embeddings."""
        return self.embedding_dim if self.tie_word_embeddings else self.readout_size


__all__ = ["RNNSeq2SeqConfig"]
