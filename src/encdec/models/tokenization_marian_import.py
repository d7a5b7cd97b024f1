"""The tokenizer of a Marian model imported into encdec (OPUS-MT, Tiedemann & Thottingal 2020): the ids and texts
of transformers' ``MarianTokenizer``, without SentencePiece at run time.

``MarianTokenizer`` encodes a text with the source (or, for ``text_target=``, the target) SentencePiece model (Kudo &
Richardson 2018), then looks each piece *string* up in ``vocab.json``, Marian's own numbering. One fast ``tokenizers``
backend per side reproduces that (``encdec.marian.tokenizer`` builds them from the ``.spm`` files):

- its Unigram table is ``vocab.json`` in id order, so a token id is Marian's id. The pieces of the side's
  SentencePiece model keep their spelling and score; every other entry (the other side's pieces) is spelled
  ``MARK + piece``, which no normalized text contains, so the lattice never produces it but its id still decodes;
- the side's pieces that ``vocab.json`` lacks come after it (ids ``>= marian_vocab_size``), so the segmentation is
  SentencePiece's;
- two rules the ``tokenizers`` pipeline cannot express are applied to the ids (``_marian_ids``), as
  ``MarianTokenizer`` does: a piece ``vocab.json`` lacks is ``<unk>``; a run of unknown characters, which
  SentencePiece returns as its own text, gets that text's id when ``vocab.json`` has it (a character that only the
  other side's model knows), else ``<unk>``.

``tokenizer.json`` holds the source backend, ``target_tokenizer.json`` the target one when the two SentencePiece
models differ; ``text_target=`` switches to the target backend, as ``MarianTokenizer`` switches models. Decoding
follows ``MarianTokenizer.decode``: special tokens between the SentencePiece-decoded stretches, each followed by a
space, the stretches decoded as the source model decodes pieces (a piece it does not know is copied as it is).

A model with several target languages has ``>>fra<<``-style tokens in its vocabulary (``target_language_tokens``);
a source starts with the target language's token (OPUS-MT's convention, not encdec's multilingual one, whose
``language_tokens`` name a source token and a forced first target token: this class has no ``language_tokens``, so
encdec's tools treat the model as one that reads the token typed at the start of the text). Setting ``tgt_lang``
puts it there (a text that already starts with ``>>xxx<<`` is left as it is). ``MarianTokenizer`` reads such a
token only at the start of a text, this tokenizer anywhere (it is an added token of the backend).

``import encdec`` registers the class with ``AutoTokenizer``, and ``save_pretrained`` copies this file next to the
tokenizer files for ``trust_remote_code`` loading where encdec is not installed: it imports only transformers,
tokenizers and the standard library.
"""

from __future__ import annotations

import os
import re
from typing import Any

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

MARK = "\ue000"  # a private-use character: a piece spelled with it can never be matched in a normalized text
SPIECE_UNDERLINE = "\u2581"  # SentencePiece's escaped space
TOKENIZER_FILE = "tokenizer.json"
TARGET_TOKENIZER_FILE = "target_tokenizer.json"


def is_language_token(token: str) -> bool:
    """Whether ``token`` is a target-language token (``>>fra<<``), as ``MarianTokenizer`` tells them."""
    return token.startswith(">>") and token.endswith("<<") and len(token) > 4


def leading_code(text: str) -> str | None:
    """The ``>>xxx<<`` code that ``text`` starts with, as ``MarianTokenizer.remove_language_code`` reads one."""
    end = text.find("<<") if text.startswith(">>") else -1
    return text[:end + 2] if end != -1 else None


class MarianImportTokenizer(PreTrainedTokenizerFast):
    """A ``PreTrainedTokenizerFast`` that encodes and decodes as transformers' ``MarianTokenizer`` with a joint
    ``vocab.json``.

    ``text_target=`` swaps the backend for the call, as ``MarianTokenizer`` swaps its SentencePiece model: threads
    that share one instance should encode sources only.

    Args:
        target_tokenizer_file: ``target_tokenizer.json``, the backend of ``text_target=``; None: the source backend.
        target_tokenizer_object: the same as a ``tokenizers.Tokenizer`` (what the builder passes).
        marian_vocab_size: the number of entries of ``vocab.json``; backend ids from it on are SentencePiece pieces
            that ``vocab.json`` lacks, encoded as ``<unk>``.
        tgt_lang: a code of ``target_language_tokens`` whose token starts every source; None: none is added.
        source_lang, target_lang: the language pair, as ``MarianTokenizer`` keeps it (informational).
    """

    vocab_files_names = {"tokenizer_file": TOKENIZER_FILE, "target_tokenizer_file": TARGET_TOKENIZER_FILE}
    model_input_names = ["input_ids", "attention_mask"]
    # vocab.json, its size and the number of pieces after it: set once __init__ has the backend (the base class's
    # __init__ may ask for the vocabulary before)
    _marian_vocab: dict[str, int] | None = None
    marian_vocab_size: int | None = None
    _extra_pieces = 0

    def __init__(self, *args: Any, target_tokenizer_file: str | None = None,
                 target_tokenizer_object: Tokenizer | None = None, marian_vocab_size: int | None = None,
                 tgt_lang: str | None = None, source_lang: str | None = None, target_lang: str | None = None,
                 **kwargs: Any) -> None:
        kwargs.setdefault("model_max_length", 512)  # MarianTokenizer's default
        super().__init__(*args, marian_vocab_size=marian_vocab_size, tgt_lang=tgt_lang, source_lang=source_lang,
                         target_lang=target_lang, **kwargs)
        self._source_backend = self._tokenizer
        if target_tokenizer_object is not None:
            self._target_backend = target_tokenizer_object
        elif target_tokenizer_file is not None and os.path.isfile(target_tokenizer_file):
            self._target_backend = Tokenizer.from_file(target_tokenizer_file)
        else:
            self._target_backend = self._source_backend
        self._target_mode = False
        self.source_lang, self.target_lang = source_lang, target_lang
        size = self._source_backend.get_vocab_size(with_added_tokens=False)
        self.marian_vocab_size = int(marian_vocab_size) if marian_vocab_size is not None else size
        self._extra_pieces = size - self.marian_vocab_size
        self._marian_vocab = {token.removeprefix(MARK): index for token, index in
                              self._source_backend.get_vocab(with_added_tokens=True).items()
                              if index < self.marian_vocab_size}
        # what each side's SentencePiece model knows, for decoding as it does
        self._known_pieces = {"source": known_pieces(self._source_backend),
                              "target": known_pieces(self._target_backend)}
        self._language_tokens = {token[2:-2]: token for token, _ in
                                 sorted(self._marian_vocab.items(), key=lambda item: item[1])
                                 if is_language_token(token)}
        self._tgt_lang = None
        self.tgt_lang = tgt_lang

    @classmethod
    def convert_to_native_format(cls, trust_remote_code: bool = False, **kwargs: Any) -> dict[str, Any]:
        """The backend is the saved ``tokenizer.json`` as it is: transformers rebuilds the backend of a class with an
        ``__init__`` of its own from the extracted vocabulary unless the class came as remote code, and this class
        builds no backend of its own, wherever it comes from."""
        return super().convert_to_native_format(trust_remote_code=True, **kwargs)

    # --- the vocabulary: vocab.json, as MarianTokenizer's ---------------------------------------------------------

    @property
    def vocab_size(self) -> int:
        return self.marian_vocab_size if self.marian_vocab_size is not None else super().vocab_size

    def __len__(self) -> int:
        """``vocab.json``'s entries and any token added since (the pieces it lacks are not ids of the model)."""
        return self._tokenizer.get_vocab_size(with_added_tokens=True) - self._extra_pieces

    def get_vocab(self) -> dict[str, int]:
        if self._marian_vocab is None:
            return super().get_vocab()
        return {**self._marian_vocab, **self.get_added_vocab()}

    def _convert_token_to_id_with_added_voc(self, token: str) -> int:
        index = self._marian_vocab.get(token) if self._marian_vocab is not None else None
        if index is None:  # a token added since, or none: <unk>, as for a piece vocab.json lacks
            index = super()._convert_token_to_id_with_added_voc(token)
            if self.vocab_size <= index < self.vocab_size + self._extra_pieces:
                index = self.unk_token_id
        return index

    def convert_ids_to_tokens(self, ids: int | list[int], skip_special_tokens: bool = False) -> str | list[str]:
        tokens = super().convert_ids_to_tokens(ids, skip_special_tokens=skip_special_tokens)
        if isinstance(tokens, str):
            return tokens.removeprefix(MARK)
        return [token.removeprefix(MARK) if token is not None else token for token in tokens]

    # --- languages ------------------------------------------------------------------------------------------------

    @property
    def target_language_tokens(self) -> dict[str, str]:
        """Target language code -> its token (``{"fra": ">>fra<<"}``), in vocabulary order; {} for one target
        language."""
        return dict(self._language_tokens)

    @property
    def tgt_lang(self) -> str | None:
        """The target language whose token starts each source; None: the source is encoded as it is."""
        return self._tgt_lang

    @tgt_lang.setter
    def tgt_lang(self, code: str | None) -> None:
        if code is not None and code not in self._language_tokens:
            known = ", ".join(self._language_tokens) or "none: this model has one target language"
            raise ValueError(f"Unknown target language {code!r}; this tokenizer's language tokens are for {known}.")
        self._tgt_lang = self.init_kwargs["tgt_lang"] = code

    # --- encoding -------------------------------------------------------------------------------------------------

    def _switch_to_input_mode(self) -> None:
        """Sources: the source SentencePiece model's backend."""
        self._tokenizer, self._target_mode = self._source_backend, False

    def _switch_to_target_mode(self) -> None:
        """Targets (``text_target=``): the target SentencePiece model's backend."""
        self._tokenizer, self._target_mode = self._target_backend, True

    def _encode_plus(self, text: Any, text_pair: Any = None, **kwargs: Any) -> Any:
        """The backend's encoding, with ``tgt_lang``'s token before each source and ``MarianTokenizer``'s ids."""
        split = kwargs.get("is_split_into_words", False)
        batched = isinstance(text, (list, tuple)) and (not split or (bool(text) and isinstance(text[0], (list, tuple))))
        prefix = self._language_tokens[self._tgt_lang] if self._tgt_lang is not None and not self._target_mode else ""
        text = [self._marian_text(one, prefix) for one in text] if batched else self._marian_text(text, prefix)
        if text_pair is not None:
            text_pair = [self._marian_text(one) for one in text_pair] if batched else self._marian_text(text_pair)
        return_tensors = kwargs.pop("return_tensors", None)
        encoded = super()._encode_plus(text, text_pair, **kwargs)
        if encoded.encodings is None:  # not the backend's encodings (a chat template's path)
            return encoded.convert_to_tensors(return_tensors)
        samples = list(zip(text, text_pair or [None] * len(text), strict=True)) if batched else [(text, text_pair)]
        rows = encoded.get("overflow_to_sample_mapping", range(len(encoded.encodings)))
        unk = self.unk_token_id
        ids = [self._marian_ids(encoding, samples[row], split, unk)
               for encoding, row in zip(encoded.encodings, rows, strict=True)]
        unbatched = not batched and not kwargs.get("return_overflowing_tokens", False)
        encoded["input_ids"] = ids[0] if unbatched else ids
        # the base class keeps the batch axis of a single text when it makes tensors
        return encoded.convert_to_tensors(return_tensors, prepend_batch_axis=unbatched and return_tensors is not None)

    def _marian_text(self, text: Any, prefix: str = "") -> Any:
        """``text`` as ``MarianTokenizer`` reads it: a ``>>xxx<<`` code that starts a stretch of text between
        special tokens is one token, ``<unk>`` when the vocabulary lacks it; a text that does not start with one gets
        ``prefix`` (``tgt_lang``'s token). A text split into words is read word by word, the prefix a word of its
        own."""
        if not isinstance(text, str):
            words = [self._marian_text(word) for word in text]
            return [prefix, *words] if prefix and not (words and leading_code(words[0])) else words
        if ">>" not in text:
            return prefix + text
        stretches = re.split(f"({'|'.join(map(re.escape, self.all_special_tokens))})", text)
        if leading_code(stretches[0]):
            prefix = ""
        for i in range(0, len(stretches), 2):  # the stretches between the special tokens
            code = leading_code(stretches[i])
            if code is not None and code not in self._language_tokens.values():
                stretches[i] = self.unk_token + stretches[i][len(code):]
        return prefix + "".join(stretches)

    def _marian_ids(self, encoding: Any, texts: tuple[Any, Any], split: bool, unk: int) -> list[int]:
        """The ids ``MarianTokenizer`` gives: a piece ``vocab.json`` lacks is ``<unk>``; an unknown run whose text
        (normalized as SentencePiece does) is in ``vocab.json`` is that entry."""
        ids = encoding.ids
        lacking = range(self.marian_vocab_size, self.marian_vocab_size + self._extra_pieces)  # pieces vocab.json lacks
        if unk not in ids and not (lacking and any(index in lacking for index in ids)):
            return ids
        normalizer = self._tokenizer.normalizer
        for i, (index, (start, end)) in enumerate(zip(ids, encoding.offsets, strict=True)):
            if index in lacking:
                ids[i] = unk
            elif index == unk and end > start and encoding.sequence_ids[i] is not None:
                text = texts[encoding.sequence_ids[i]]
                surface = (text[encoding.word_ids[i]] if split else text)[start:end]
                if surface != self.unk_token:  # a typed <unk> is the token itself
                    ids[i] = self._marian_vocab.get(normalizer.normalize_str(surface) if normalizer else surface, unk)
        return ids

    # --- decoding -------------------------------------------------------------------------------------------------

    def _decode(self, token_ids: int | list[int], skip_special_tokens: bool = False,
                clean_up_tokenization_spaces: bool | None = None, **kwargs: Any) -> str:
        """``MarianTokenizer.decode``: with a joint vocabulary it decodes with the source model unless
        ``use_source_tokenizer=False``."""
        side = "source" if kwargs.pop("use_source_tokenizer", True) else "target"
        tokens = self.convert_ids_to_tokens([token_ids] if isinstance(token_ids, int) else list(token_ids),
                                            skip_special_tokens=skip_special_tokens)
        text = self._join(tokens, self._known_pieces[side])
        if clean_up_tokenization_spaces if clean_up_tokenization_spaces is not None else \
                self.clean_up_tokenization_spaces:
            text = self.clean_up_tokenization(text)
        return text

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        return self._join(tokens, self._known_pieces["source"])

    def _join(self, tokens: list[str | None], known: set[str]) -> str:
        """``MarianTokenizer.convert_tokens_to_string``: each special token after the stretch before it and
        followed by a space, then every ``▁`` a space and the ends stripped."""
        special, stretch, text = set(self.all_special_tokens), [], ""
        for token in tokens:
            if token in special:
                text += decode_pieces(stretch, known) + token + " "
                stretch = []
            elif token is not None:
                stretch.append(token)
        text += decode_pieces(stretch, known)
        return text.replace(SPIECE_UNDERLINE, " ").strip()

    def _save_pretrained(self, save_directory: str | os.PathLike, file_names: tuple[str, ...],
                         legacy_format: bool | None = None, filename_prefix: str | None = None) -> tuple[str, ...]:
        """``tokenizer.json`` (the source backend) and, when the target's differs, ``target_tokenizer.json``."""
        backends = {TOKENIZER_FILE: self._source_backend}
        if self._target_backend is not self._source_backend:
            backends[TARGET_TOKENIZER_FILE] = self._target_backend
        prefix = filename_prefix + "-" if filename_prefix else ""
        for name, backend in backends.items():
            path = os.path.join(str(save_directory), prefix + name)
            backend.save(path)
            file_names += (path,)
        return file_names


def known_pieces(backend: Tokenizer) -> set[str]:
    """The pieces of the SentencePiece model that ``backend`` was built from: its entries not spelled with ``MARK``
    (the other side's), less its added tokens (``</s>``, ``<unk>``, ``<pad>``, language tokens)."""
    added = {token.content for token in backend.get_added_tokens_decoder().values()}
    return {token for token in backend.get_vocab(with_added_tokens=False) if not token.startswith(MARK)} - added


def decode_pieces(pieces: list[str], known: set[str]) -> str:
    """``SentencePieceProcessor.decode_pieces`` of a model that knows the pieces ``known``, with its default
    normalizer (a dummy prefix, extra whitespace removed), as its ``Decode`` does it: a piece the model does not know
    is copied as it is; the leading ``▁`` of known pieces is dropped until some text is out."""
    text = ""
    for piece in pieces:
        if piece not in known:
            text += piece
        else:
            text += (piece if text else piece.removeprefix(SPIECE_UNDERLINE)).replace(SPIECE_UNDERLINE, " ")
    return text


__all__ = ["MARK", "MarianImportTokenizer", "TARGET_TOKENIZER_FILE", "decode_pieces", "is_language_token"]
