"""What the configurations of both families share.

This file is copied next to the weights by ``save_pretrained``: it imports only transformers and single-dot siblings.
"""

from __future__ import annotations

from transformers import PretrainedConfig

from .compat import CACHE_OUTPUT_NAMES
from .validation import check_special_tokens


class Seq2SeqConfig(PretrainedConfig):
    """An encoder-decoder over one joint source/target vocabulary, with its special-token ids.

    A family's config sets its own fields, then calls this ``__init__``, which passes the rest to transformers and
    checks everything: ``validate_hyperparameters`` (the family's checks, each a ``ValueError`` that names the field
    and the fix), then the special-token ids against the vocabulary.
    """

    keys_to_ignore_at_inference = CACHE_OUTPUT_NAMES  # Trainer's predictions leave the cache out, under either name

    def __init__(self, pad_token_id: int = 0, bos_token_id: int = 1, eos_token_id: int = 2,
                 decoder_start_token_id: int = 1, use_cache: bool = True, **kwargs) -> None:
        self.use_cache = use_cache
        kwargs.setdefault("is_encoder_decoder", True)
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
                         decoder_start_token_id=decoder_start_token_id, **kwargs)
        self.validate_hyperparameters()
        check_special_tokens(self)

    def validate_hyperparameters(self) -> None:
        raise NotImplementedError


__all__ = ["Seq2SeqConfig"]
