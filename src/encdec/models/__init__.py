"""Model families. Each is a configuration file plus a modeling file with single-dot sibling imports only,
so ``save_pretrained`` can copy them next to the weights for ``trust_remote_code`` loading."""

from .configuration_transformer_seq2seq import TransformerSeq2SeqConfig
from .modeling_transformer_seq2seq import (
    TransformerSeq2SeqForConditionalGeneration,
    TransformerSeq2SeqModel,
    TransformerSeq2SeqPreTrainedModel,
)

__all__ = [
    "TransformerSeq2SeqConfig",
    "TransformerSeq2SeqForConditionalGeneration",
    "TransformerSeq2SeqModel",
    "TransformerSeq2SeqPreTrainedModel",
]
