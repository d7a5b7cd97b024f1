"""The tokenizer of a multilingual model: one joint vocabulary with a special token per language, as transformers'
``M2M100Tokenizer`` and ``NllbTokenizer`` (non-legacy) do it.

- ``language_tokens`` maps each language code to its token (``{"de": "__de__", ...}``: M2M100's spelling); it is
  saved in ``tokenizer_config.json``, so a model whose tokens are spelled otherwise uses the same machinery;
- a source text is encoded ``__SRC__ text </s>`` with ``src_lang``'s token, a target text (``text_target=``, the
  labels) ``__TGT__ text </s>`` with ``tgt_lang``'s; both are settable attributes (and ``from_pretrained`` keywords);
- at inference the target language token is forced as the first generated token:
  ``model.generate(**batch, forced_bos_token_id=tokenizer.get_lang_id("fr"))``;
  ``decode(..., skip_special_tokens=True)`` drops it.

``import encdec`` registers the class with ``AutoTokenizer`` and marks it so that ``save_pretrained`` copies this file
next to the tokenizer files and writes ``auto_map`` into ``tokenizer_config.json``: ``AutoTokenizer.from_pretrained(
folder, trust_remote_code=True)`` loads it where encdec is not installed. This file is copied next to the weights: it
imports only transformers and tokenizers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tokenizers import processors
from transformers import PreTrainedTokenizerFast


def language_token(code: str) -> str:
    """The token of language ``code`` in M2M100's spelling: ``"de"`` -> ``"__de__"``."""
    return f"__{code}__"


class Seq2SeqMultilingualTokenizer(PreTrainedTokenizerFast):
    """A ``PreTrainedTokenizerFast`` over a trained ``tokenizer.json`` whose special tokens include one token per
    language (``language_tokens``); it prefixes the source with ``src_lang``'s token and the target with
    ``tgt_lang``'s.

    Args:
        language_tokens: language code -> its token, in the model's order; every token must be in the vocabulary.
        src_lang: the source language; the first of ``language_tokens`` when not given (as M2M100 defaults to "en").
        tgt_lang: the target language of ``text_target=`` (labels); None until set.
    """

    def __init__(self, *args: Any, language_tokens: Mapping[str, str] | None = None, src_lang: str | None = None,
                 tgt_lang: str | None = None, **kwargs: Any) -> None:
        if not isinstance(language_tokens, Mapping) or not language_tokens:
            raise ValueError("`language_tokens` must map each language code to its token, e.g. {'de': '__de__', "
                             f"'fr': '__fr__'}}; got {language_tokens!r}.")
        self._language_tokens = {str(code): str(token) for code, token in language_tokens.items()}
        super().__init__(*args, language_tokens=dict(self._language_tokens), src_lang=src_lang, tgt_lang=tgt_lang,
                         **kwargs)
        vocab = self.get_vocab()
        missing = [token for token in self._language_tokens.values() if token not in vocab]
        if missing:
            raise ValueError(f"`language_tokens` names {missing}, which the vocabulary lacks; add them as special "
                             "tokens (encdec.tokenization.train_tokenizer(..., languages=[...]) does).")
        # the model's order is the order its tokens were added in: tokenizer_config.json keeps the mapping with its
        # keys sorted (transformers saves it with sort_keys), which would make [cs, de, en, fr] of [de, en, fr, cs]
        self._language_tokens = dict(sorted(self._language_tokens.items(), key=lambda item: vocab[item[1]]))
        self._src_lang = self._tgt_lang = None
        self.src_lang = src_lang if src_lang is not None else next(iter(self._language_tokens))
        self.tgt_lang = tgt_lang

    @classmethod
    def convert_to_native_format(cls, trust_remote_code: bool = False, **kwargs: Any) -> dict[str, Any]:
        """The backend is the saved ``tokenizer.json`` as it is: transformers rebuilds the backend of a class with an
        ``__init__`` of its own from the extracted vocabulary unless the class came as remote code, and this class
        builds no backend of its own, wherever it comes from."""
        return super().convert_to_native_format(trust_remote_code=True, **kwargs)

    @property
    def language_tokens(self) -> dict[str, str]:
        """Language code -> its token, in the model's order (a copy)."""
        return dict(self._language_tokens)

    @property
    def languages(self) -> list[str]:
        """The language codes, in the model's order."""
        return list(self._language_tokens)

    @property
    def src_lang(self) -> str:
        return self._src_lang

    @src_lang.setter
    def src_lang(self, code: str) -> None:
        self.get_lang_token(code)
        self._src_lang = self.init_kwargs["src_lang"] = code
        self._switch_to_input_mode()

    @property
    def tgt_lang(self) -> str | None:
        return self._tgt_lang

    @tgt_lang.setter
    def tgt_lang(self, code: str | None) -> None:
        if code is not None:
            self.get_lang_token(code)
        self._tgt_lang = self.init_kwargs["tgt_lang"] = code

    def get_lang_token(self, code: str) -> str:
        """The token of language ``code``; a one-line ``ValueError`` naming the known codes for another."""
        if code not in self._language_tokens:
            raise ValueError(f"Unknown language {code!r}: this tokenizer knows {', '.join(self._language_tokens)}; "
                             "pass one of them.")
        return self._language_tokens[code]

    def get_lang_id(self, code: str) -> int:
        """The token id of language ``code``: ``generate(..., forced_bos_token_id=tokenizer.get_lang_id("fr"))``."""
        return self.convert_tokens_to_ids(self.get_lang_token(code))

    def _switch_to_input_mode(self) -> None:
        """Sources: ``__SRC__ text </s>``."""
        self._set_language_prefix(self._src_lang)

    def _switch_to_target_mode(self) -> None:
        """Targets (``text_target=``): ``__TGT__ text </s>``."""
        if self._tgt_lang is None:
            raise ValueError(f"Set `tgt_lang` (one of {', '.join(self._language_tokens)}) before encoding a target "
                             "text: its language token starts the labels.")
        self._set_language_prefix(self._tgt_lang)

    def _set_language_prefix(self, code: str) -> None:
        token, eos = self.get_lang_token(code), str(self.eos_token)
        self._tokenizer.post_processor = processors.TemplateProcessing(
            single=[token, "$A", eos], pair=[token, "$A", "$B", eos],
            special_tokens=[(token, self.convert_tokens_to_ids(token)), (eos, self.eos_token_id)],
        )

    def _build_translation_inputs(self, raw_inputs: Any, return_tensors: str | None, src_lang: str | None,
                                  tgt_lang: str | None, **extra_kwargs: Any) -> Any:
        """As transformers' multilingual tokenizers: the encoded sources and the ``forced_bos_token_id`` of the
        target language."""
        if src_lang is None or tgt_lang is None:
            raise ValueError(f"Translation needs `src_lang` and `tgt_lang` (of {', '.join(self._language_tokens)}).")
        self.src_lang = src_lang
        inputs = self(raw_inputs, add_special_tokens=True, return_tensors=return_tensors, **extra_kwargs)
        inputs["forced_bos_token_id"] = self.get_lang_id(tgt_lang)
        return inputs


__all__ = ["Seq2SeqMultilingualTokenizer", "language_token"]
