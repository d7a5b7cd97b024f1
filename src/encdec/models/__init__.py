"""Model families. Each is a configuration file plus a modeling file with single-dot sibling imports only,
so ``save_pretrained`` can copy them next to the weights for ``trust_remote_code`` loading."""

from .configuration_rnn_seq2seq import RNNSeq2SeqConfig
from .configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from .modeling_rnn_seq2seq import (
    RNNSeq2SeqCache,
    RNNSeq2SeqForConditionalGeneration,
    RNNSeq2SeqModel,
    RNNSeq2SeqPreTrainedModel,
)
from .modeling_transformer_seq2seq import (
    TransformerSeq2SeqForConditionalGeneration,
    TransformerSeq2SeqModel,
    TransformerSeq2SeqPreTrainedModel,
)

__all__ = [
    "RNNSeq2SeqCache",
    "RNNSeq2SeqConfig",
    "RNNSeq2SeqForConditionalGeneration",
    "RNNSeq2SeqModel",
    "RNNSeq2SeqPreTrainedModel",
    "TransformerSeq2SeqConfig",
    "TransformerSeq2SeqForConditionalGeneration",
    "TransformerSeq2SeqModel",
    "TransformerSeq2SeqPreTrainedModel",
]
