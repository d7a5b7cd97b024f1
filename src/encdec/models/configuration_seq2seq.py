"""What the configurations of both families share.

This file is copied next to the weights by ``save_pretrained``: it imports only transformers and single-dot siblings.
"""

from __future__ import annotations

from transformers import PretrainedConfig

from .compat import CACHE_OUTPUT_NAMES
from .validation import check_languages, check_special_tokens


class Seq2SeqConfig(PretrainedConfig):
    """An encoder-decoder over one joint source/target vocabulary, with its special-token ids.

    A family's config sets its own fields, then calls this ``__init__``, which passes the rest to transformers and
    checks everything: ``validate_hyperparameters`` (the family's checks, each a ``ValueError`` that names the field
    and the fix), then the special-token ids against the vocabulary.

    ``languages``: the language codes of a multilingual model, in order (``["de", "en", "fr"]``; each has a token
    ``__CODE__`` in the vocabulary, which the tokenizer maps); None or empty for a bilingual model. A bilingual config
    has no ``languages`` entry in its ``__dict__``, so ``config.json`` stays as it was (transformers writes every
    instance attribute that its base config lacks); the class attribute answers None.
    """

    keys_to_ignore_at_inference = CACHE_OUTPUT_NAMES  # Trainer's predictions leave the cache out, under either name
    languages = None  # a bilingual model; a multilingual one sets the instance attribute (saved in config.json)

    def __init__(self, pad_token_id: int = 0, bos_token_id: int = 1, eos_token_id: int = 2,
                 decoder_start_token_id: int = 1, use_cache: bool = True, languages: list[str] | None = None,
                 **kwargs) -> None:
        self.use_cache = use_cache
        languages = check_languages(languages)
        if languages:
            self.languages = languages
        kwargs.setdefault("is_encoder_decoder", True)
        super().__init__(pad_token_id=pad_token_id, bos_token_id=bos_token_id, eos_token_id=eos_token_id,
                         decoder_start_token_id=decoder_start_token_id, **kwargs)
        self.validate_hyperparameters()
        check_special_tokens(self)

    def validate_hyperparameters(self) -> None:
        raise NotImplementedError


__all__ = ["Seq2SeqConfig"]
