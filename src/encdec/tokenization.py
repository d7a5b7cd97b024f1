"""Tokenizers: train and load the joint source/target subword vocabulary with the `tokenizers` library, and check one
against a model. The package's one home for tokenizers; the modules that use one are named for what they do with it:
``encdec.data.token_ids`` turns a dataset's text pairs into token ids, ``encdec.training.run.get_tokenizer`` picks a
training run's tokenizer (configured, cached or trained here).

The result is a ``PreTrainedTokenizerFast`` (saved as a folder that ``AutoTokenizer.from_pretrained`` loads),
with ``<pad>``, ``<s>``, ``</s>`` and ``<unk>`` at ids 0-3 and ``</s>`` appended to every encoded text.
``train_tokenizer_from_files`` backs ``encdec tokenizer train``; ``load_tokenizer`` loads a saved folder.

A multilingual model's tokenizer (``train_tokenizer(..., languages=[...])``, ``multilingual_tokenizer``) is a
``Seq2SeqMultilingualTokenizer`` (``encdec.models.tokenization_multilingual``) with one ``__CODE__`` special token per
language; ``language_settings`` turns a source and a target language into ``generate()`` keywords.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from .errors import EncdecError, InputFileError, LanguageError
from .io_utils import ensure_output_dir, read_lines, refuse_existing, refuse_overlap
from .models.tokenization_multilingual import Seq2SeqMultilingualTokenizer, language_token
from .models.validation import check_languages

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
ALGORITHMS = ("bpe", "unigram")
PRE_TOKENIZERS = ("metaspace", "whitespace_punct")


def build_normalizer() -> normalizers.Normalizer:
    """NFKC, then every no-break space and tab becomes a plain space, runs of spaces collapse, ends trimmed."""
    return normalizers.Sequence([
        normalizers.NFKC(),
        normalizers.Replace(Regex(r"[\u00a0\u202f\t]"), " "),
        normalizers.Replace(Regex(r" {2,}"), " "),
        normalizers.Strip(),
    ])


def build_pre_tokenizer(name: str) -> tuple[pre_tokenizers.PreTokenizer, decoders.Decoder]:
    """``metaspace`` keeps spaces as ``▁`` so decoding restores the exact text (SentencePiece style);
    ``whitespace_punct`` also splits punctuation off words, and decodes through the same ``▁`` markers."""
    metaspace = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    if name == "metaspace":
        return metaspace, decoders.Metaspace(replacement="▁", prepend_scheme="always")
    if name == "whitespace_punct":
        split = pre_tokenizers.Punctuation(behavior="isolated")
        return pre_tokenizers.Sequence([metaspace, split]), decoders.Metaspace(replacement="▁", prepend_scheme="always")
    raise ValueError(f"`pre_tokenizer` must be one of {list(PRE_TOKENIZERS)}, got {name!r}.")


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 8000,
    algorithm: str = "bpe",
    pre_tokenizer: str = "metaspace",
    min_frequency: int = 2,
    model_max_length: int = 512,
    languages: Sequence[str] | None = None,
) -> PreTrainedTokenizerFast:
    """Train one vocabulary over source and target texts together (a joint vocabulary, so the embedding
    matrices can be tied) and wrap it as a ``PreTrainedTokenizerFast``.

    With ``languages`` (codes, in the model's order) the vocabulary gets one special token per language,
    ``__CODE__`` (M2M100's spelling), after the trained ones, and the result is a ``Seq2SeqMultilingualTokenizer``
    (``multilingual_tokenizer``): ``src_lang``/``tgt_lang`` put their token before each source/target.

    :param texts: every source and target sentence of the training split, or a sample of them; any iterable, read
        once (``training_texts`` streams a memory-mapped split)
    :param algorithm: ``"bpe"`` (Sennrich et al. 2016) or ``"unigram"`` (Kudo 2018)
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"`algorithm` must be one of {list(ALGORITHMS)}, got {algorithm!r}.")
    specials = list(SPECIAL_TOKENS.values())  # ids 0..3, in this order
    if algorithm == "bpe":
        tokenizer = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=specials,
                                      show_progress=False)
    else:
        tokenizer = Tokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=specials,
                                          unk_token=SPECIAL_TOKENS["unk_token"], show_progress=False)
    tokenizer.normalizer = build_normalizer()
    tokenizer.pre_tokenizer, tokenizer.decoder = build_pre_tokenizer(pre_tokenizer)
    texts = iter(texts)  # read once, never held whole: a corpus may have millions of lines
    head = []  # the texts up to the first that is not blank
    for text in texts:
        head.append(text)
        if text.strip():
            break
    else:
        raise ValueError("Cannot train a tokenizer on empty data: every text is blank.")
    tokenizer.train_from_iterator(itertools.chain(head, texts), trainer=trainer)
    eos = SPECIAL_TOKENS["eos_token"]
    tokenizer.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B {eos}", special_tokens=[(eos, tokenizer.token_to_id(eos))]
    )
    if languages:
        return multilingual_tokenizer(tokenizer, languages, model_max_length=model_max_length)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=model_max_length, **SPECIAL_TOKENS)


def multilingual_tokenizer(backend: Tokenizer, languages: Sequence[str], **kwargs) -> Seq2SeqMultilingualTokenizer:
    """A ``Seq2SeqMultilingualTokenizer`` over a trained ``tokenizers`` vocabulary (``backend``, left unchanged) with
    ``<pad>``, ``<s>``, ``</s>`` and ``<unk>``: each language's ``__CODE__`` token is added as a special token
    (one not in the vocabulary yet gets the next free id); ``kwargs`` go to the tokenizer (``src_lang``,
    ``model_max_length``, ...)."""
    check_languages(languages, "languages", error=EncdecError)
    tokens = {code: language_token(code) for code in languages}
    backend = Tokenizer.from_str(backend.to_str())  # a copy: the caller's vocabulary stays as it was
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in tokens.values()])
    return Seq2SeqMultilingualTokenizer(tokenizer_object=backend, language_tokens=tokens,
                                        extra_special_tokens=list(tokens.values()), **SPECIAL_TOKENS, **kwargs)


def special_token_ids(tokenizer: PreTrainedTokenizerFast) -> dict[str, Any]:
    """The ids a model config takes from its tokenizer: vocabulary size and the special tokens, and for a
    multilingual tokenizer its ``languages`` (codes, in order). The decoder starts from ``<s>``; a tokenizer without
    one (Marian's, whose vocabulary has no ``<s>``) starts it from the pad token, as ``MarianMTModel`` does."""
    bos = tokenizer.bos_token_id
    ids: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": bos,
        "eos_token_id": tokenizer.eos_token_id,
        "decoder_start_token_id": bos if bos is not None else tokenizer.pad_token_id,
    }
    if tokenizer_languages(tokenizer):
        ids["languages"] = tokenizer_languages(tokenizer)
    return ids


def tokenizer_languages(tokenizer) -> list[str] | None:
    """The language codes of a multilingual tokenizer (``Seq2SeqMultilingualTokenizer``, or its copy loaded through
    ``trust_remote_code``), in order; None for a bilingual one."""
    tokens = getattr(tokenizer, "language_tokens", None)
    return list(tokens) if tokens else None


def language_ids(tokenizer) -> dict[str, int]:
    """Each language code of a multilingual tokenizer with the id of its token, in order; {} for a bilingual one
    (what ``decoding_options.resolve`` checks a source and target language against)."""
    return {code: tokenizer.convert_tokens_to_ids(token)
            for code, token in (getattr(tokenizer, "language_tokens", None) or {}).items()}


def refuse_language_tokens(tokenizer, texts: Sequence[str]) -> None:
    """A ``LanguageError`` for a text that holds a language token (``__de__``) of a multilingual tokenizer: the
    tokenizer puts the source language's token itself, and a typed one would be read as a language."""
    tokens = (getattr(tokenizer, "language_tokens", None) or {}).values()
    for i, text in enumerate(texts):
        typed = next((token for token in tokens if token in text), None)
        if typed is not None:
            raise LanguageError(f"Source {i + 1} holds the language token {typed!r}; the model's languages are "
                                "chosen with the source and target language, not typed in the text: remove it.")


def language_settings(tokenizer, source_lang: str | None = None, target_lang: str | None = None) -> dict[str, int]:
    """The ``generate()`` keywords that translate from ``source_lang`` into ``target_lang``: for a multilingual
    tokenizer its ``src_lang`` is set to ``source_lang`` (when given) and the target language token is forced
    (``{"forced_bos_token_id": id}``); for a bilingual one, ``{}``.

    :raises LanguageError: a code the tokenizer lacks, a language given to a bilingual model, or no target language
        for a multilingual one; the message names the model's languages
    """
    languages = tokenizer_languages(tokenizer)
    asked = [code for code in (source_lang, target_lang) if code is not None]
    if not languages:
        if asked:
            raise LanguageError(f"This model is bilingual (it has no language tokens) and takes no language; drop "
                                f"{' and '.join(map(repr, asked))}.")
        return {}
    unknown = [code for code in asked if code not in languages]
    if unknown:
        raise LanguageError(f"This model has no language {unknown[0]!r}; its languages are {', '.join(languages)}.")
    if target_lang is None:
        raise LanguageError(f"This model is multilingual ({', '.join(languages)}): name the target language.")
    if source_lang is not None:
        tokenizer.src_lang = source_lang
    return {"forced_bos_token_id": tokenizer.get_lang_id(target_lang)}


def check_tokenizer_matches_model(tokenizer: PreTrainedTokenizerFast, config) -> None:
    """Raise a clear error when a tokenizer and a model config disagree on the vocabulary."""
    expected = special_token_ids(tokenizer)
    model_languages = getattr(config, "languages", None) or None
    if model_languages != expected.pop("languages", None):
        raise ValueError(
            f"Tokenizer and model disagree on `languages`: tokenizer has {tokenizer_languages(tokenizer)}, model "
            f"config has {model_languages}. Use the tokenizer the model was trained with, or build the model config "
            "from this tokenizer (encdec.tokenization.special_token_ids)."
        )
    for key, value in expected.items():
        model_value = getattr(config, key, None)
        mismatch = model_value < value if key == "vocab_size" else model_value != value
        if mismatch:
            raise ValueError(
                f"Tokenizer and model disagree on `{key}`: tokenizer has {value}, model config has {model_value}. "
                "Use the tokenizer the model was trained with, or rebuild the model config from this tokenizer."
            )


def train_tokenizer_from_files(
    files: list[str | os.PathLike],
    output_dir: str | os.PathLike,
    vocab_size: int = 8000,
    algorithm: str = "bpe",
    pre_tokenizer: str = "metaspace",
    min_frequency: int = 2,
    overwrite: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a joint vocabulary on plain-text files (one sentence per line; pass the source and the target files
    of the training split) and save it as a folder that ``AutoTokenizer.from_pretrained`` loads.

    The folder is written next to ``output_dir`` under a temporary name and renamed into place when complete, so
    ``output_dir`` holds either the old tokenizer or the new one, never half of one.

    :raises InputFileError: a missing, non-UTF-8 or empty file, named
    :raises OverwriteError: ``output_dir`` exists and is not empty, and ``overwrite`` is false
    """
    if not files:
        raise InputFileError("No text files given to train the tokenizer on.")
    refuse_overlap(output_dir, files)  # --overwrite empties the folder: never one that holds the training files
    texts = [line for file in files for line in read_lines(file, "tokenizer training file")]
    output_dir = Path(output_dir)
    refuse_existing(output_dir, overwrite, "tokenizer folder", folder=True)  # refused before training
    tokenizer = train_tokenizer(texts, vocab_size=vocab_size, algorithm=algorithm, pre_tokenizer=pre_tokenizer,
                                min_frequency=min_frequency)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=output_dir.parent, prefix=f".{output_dir.name}.", suffix=".tmp"))
    try:
        tokenizer.save_pretrained(tmp)
        ensure_output_dir(output_dir, overwrite=overwrite, what="tokenizer folder")  # empty, or emptied
        os.replace(tmp, output_dir)  # renaming onto an empty folder replaces it
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tokenizer


# the files a tokenizer folder may hold: ours, transformers' own, and target_tokenizer.json (an imported Marian model's
# target side, encdec.models.tokenization_marian_import)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "spiece.model", "sentencepiece.bpe.model",
                   "vocab.json", "vocab.txt", "target_tokenizer.json")


def load_tokenizer(path: str | os.PathLike) -> PreTrainedTokenizerFast:
    """``AutoTokenizer.from_pretrained`` on a tokenizer (or model) folder, with a clear error when the folder
    has no tokenizer files. A path that does not exist is tried as a Hub repository id."""
    folder = Path(path)
    if folder.is_dir():
        if not any((folder / name).is_file() for name in TOKENIZER_FILES):
            found = sorted(p.name for p in folder.iterdir())[:10]
            raise InputFileError(f"The folder {folder} has no tokenizer files (none of {list(TOKENIZER_FILES)}); "
                                 f"it has {found}. Train one with `encdec tokenizer train`.")
    elif folder.exists():
        raise InputFileError(f"The tokenizer path {folder} is a file; give the folder that holds tokenizer.json.")
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except OSError as err:
        raise InputFileError(f"Could not load a tokenizer from {path}: no such folder, and no reachable Hub "
                             f"repository of that name ({err}).") from err
