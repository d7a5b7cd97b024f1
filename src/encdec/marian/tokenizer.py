"""A Marian tokenizer folder (``source.spm``, ``target.spm``, ``vocab.json``, ``tokenizer_config.json``: what
transformers' ``MarianTokenizer`` reads) as one ``MarianImportTokenizer`` (``models/tokenization_marian_import.py``,
whose docstring says how the ids are kept), read without SentencePiece: the ``.spm`` files are protocol buffers that
``transformers.convert_slow_tokenizer.import_protobuf`` parses.

Each side's backend follows its SentencePiece model's own normalizer spec (Kudo & Richardson 2018): the precompiled
character map, extra spaces removed, spaces escaped as ``▁``, a dummy ``▁`` before each stretch of text between two
special tokens (the slow tokenizer encodes each stretch on its own). It is built here rather than by
``SpmConverter.build_tokenizer_from_spm_proto``, which transformers 5.18 writes without the dummy prefix and the
space removal, so that every supported release writes the same ``tokenizer.json``.

What cannot be made exact is refused by name: a BPE, word or character model (``model_type``), ``byte_fallback``,
user-defined pieces, a non-default whitespace option, separate source and target vocabularies.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import Unigram
from transformers.convert_slow_tokenizer import import_protobuf

from ..errors import InputFileError
from ..models.tokenization_marian_import import MARK, SPIECE_UNDERLINE, MarianImportTokenizer, is_language_token

SPECIALS = {"eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}  # MarianTokenizer's, in its order
# SentencePiece's ModelProto.SentencePiece.Type and TrainerSpec.ModelType values
NORMAL, USER_DEFINED, UNIGRAM = 1, 4, 1
MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
# the normalizer options a backend reproduces only at their defaults, with the value each must have
WHITESPACE_OPTIONS = {"add_dummy_prefix": True, "remove_extra_whitespaces": True, "escape_whitespaces": True}
FETCH = "download it again from the model's Hub repository (Helsinki-NLP/opus-mt-...)"


def build_marian_tokenizer(folder: str | os.PathLike) -> tuple[MarianImportTokenizer, int]:
    """The tokenizer of the Marian folder ``folder`` and how many SentencePiece pieces (of either model) its
    ``vocab.json`` lacks (``MarianTokenizer`` encodes them as ``<unk>``, and so does this one).

    :raises InputFileError: a missing or malformed file, or a model this tokenizer cannot reproduce exactly; the
        message names the file and the fix
    """
    folder = Path(folder)
    settings = read_tokenizer_settings(folder / "tokenizer_config.json")
    specials = {key: special_token(settings.get(key), token) for key, token in SPECIALS.items()}
    vocab = read_vocab(folder / "vocab.json", specials.values())
    source_bytes, target_bytes = (read_file(folder / name, "a SentencePiece model") for name in ("source.spm",
                                                                                                  "target.spm"))
    source, source_missing = marian_backend(read_spm(folder / "source.spm", source_bytes), vocab, specials)
    target, target_missing = source, source_missing
    if target_bytes != source_bytes:  # many OPUS-MT pairs have two models; some ship one model twice
        target, target_missing = marian_backend(read_spm(folder / "target.spm", target_bytes), vocab, specials)
    tokenizer = MarianImportTokenizer(
        tokenizer_object=source, target_tokenizer_object=None if target is source else target,
        marian_vocab_size=len(vocab), source_lang=settings.get("source_lang"),
        target_lang=settings.get("target_lang"), model_max_length=settings.get("model_max_length", 512),
        # written down, as MarianTokenizer decodes: tokenizers.js (the browser runtime) cleans up without it
        clean_up_tokenization_spaces=False, **specials)
    return tokenizer, len(set(source_missing) | set(target_missing))


def special_token(value: Any, default: str) -> str:
    """A special token as ``tokenizer_config.json`` names it: a string, or a saved ``AddedToken`` (its content)."""
    if isinstance(value, dict):
        value = value.get("content")
    return str(value) if value else default


def read_file(path: Path, what: str) -> bytes:
    if not path.is_file():
        raise InputFileError(f"{path} ({what}) is missing; a Marian folder holds source.spm, target.spm and "
                             "vocab.json: copy it from the model's Hub repository (Helsinki-NLP/opus-mt-...).")
    return path.read_bytes()


def read_tokenizer_settings(path: Path) -> dict[str, Any]:
    """``tokenizer_config.json`` (optional: MarianTokenizer's defaults without it); separate vocabularies refused."""
    if not path.is_file():
        return {}
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputFileError(f"{path} (the tokenizer settings) is not readable JSON ({err}); fix it or remove it "
                             "(MarianTokenizer's defaults then apply).") from err
    if not isinstance(settings, dict):
        raise InputFileError(f"{path} (the tokenizer settings) must hold a JSON object; fix it or remove it.")
    if settings.get("separate_vocabs"):
        raise InputFileError(f"{path} sets `separate_vocabs: true` (a source vocab.json and a target_vocab.json); "
                             "encdec imports models with one joint vocabulary only.")
    return settings


def read_vocab(path: Path, specials: Any) -> dict[str, int]:
    """``vocab.json``: Marian's token -> id, ids 0..N-1 each once, with the special tokens."""
    try:
        vocab = json.loads(read_file(path, "the vocabulary").decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputFileError(f"{path} (the vocabulary) is not readable JSON ({err}); {FETCH}.") from err
    if not isinstance(vocab, dict) or not all(isinstance(index, int) for index in vocab.values()):
        raise InputFileError(f"{path} (the vocabulary) must map each token to its id; {FETCH}.")
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise InputFileError(f"{path} (the vocabulary) must number its {len(vocab)} tokens 0 to {len(vocab) - 1}, "
                             f"each once; {FETCH}.")
    missing = [token for token in specials if token not in vocab]
    if missing:
        raise InputFileError(f"{path} (the vocabulary) lacks the special tokens {missing} (Marian's vocabulary has "
                             f"</s>, <unk> and <pad>); {FETCH}.")
    return vocab


def read_spm(path: Path, data: bytes) -> Any:
    """The SentencePiece ``ModelProto`` in ``data`` (the bytes of ``path``), checked to be one this tokenizer
    reproduces exactly."""
    proto = import_protobuf().ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as err:  # google.protobuf.message.DecodeError (the class depends on the protobuf backend)
        raise InputFileError(f"{path} is not a SentencePiece model (it does not parse: {err}); it may be truncated: "
                             f"{FETCH}.") from err
    # a file cut where a field ends parses too: a whole model has pieces, then its trainer and normalizer specs
    if not (any(piece.type == NORMAL for piece in proto.pieces) and proto.HasField("trainer_spec")
            and proto.HasField("normalizer_spec")):
        raise InputFileError(f"{path} is not a SentencePiece model (its pieces or settings are missing); it may be "
                             f"truncated: {FETCH}.")
    model_type = proto.trainer_spec.model_type
    if model_type != UNIGRAM:
        raise InputFileError(f"{path} is a SentencePiece `model_type: {MODEL_TYPES.get(model_type, model_type)}` "
                             "model; encdec imports unigram models (Marian's default) only.")
    refusal = next((f"`{option}: {value}`" for option, value in _unsupported_options(proto)), None)
    if refusal:
        raise InputFileError(f"{path} is a SentencePiece model with {refusal}; encdec's tokenizer reproduces "
                             "SentencePiece exactly only without it, so this model cannot be imported.")
    return proto


def _unsupported_options(proto: Any) -> list[tuple[str, Any]]:
    spec = proto.normalizer_spec
    found = [(option, str(getattr(spec, option)).lower()) for option, value in WHITESPACE_OPTIONS.items()
             if getattr(spec, option) != value]
    if proto.trainer_spec.byte_fallback:
        found.append(("byte_fallback", "true"))
    if proto.trainer_spec.treat_whitespace_as_suffix:
        found.append(("treat_whitespace_as_suffix", "true"))
    if any(piece.type == USER_DEFINED for piece in proto.pieces):
        found.append(("user_defined_symbols", [piece.piece for piece in proto.pieces if piece.type == USER_DEFINED]))
    if proto.denormalizer_spec.precompiled_charsmap:
        found.append(("denormalizer_spec", "a character map"))
    return found


def marian_backend(proto: Any, vocab: Mapping[str, int], specials: Mapping[str, str]) -> tuple[Tokenizer, list[str]]:
    """The ``tokenizers`` backend of one side (``proto``: its SentencePiece model) over Marian's ``vocab``, and the
    pieces of ``proto`` that ``vocab`` lacks (put after it, so SentencePiece's segmentation is kept)."""
    scores = {piece.piece: piece.score for piece in proto.pieces if piece.type == NORMAL}
    floor = min(scores.values())
    whole = {*specials.values(), *(token for token in vocab if is_language_token(token))}  # added tokens below
    table = []
    for token in sorted(vocab, key=vocab.get):
        if token in scores:
            table.append((token, scores[token]))
        else:  # an added token, matched before the model sees the text, or a piece the lattice must never produce
            table.append((token if token in whole else MARK + token, floor))
    missing = [piece for piece in scores if piece not in vocab]
    table += [(piece, scores[piece]) for piece in missing]
    backend = Tokenizer(Unigram(table, unk_id=vocab[specials["unk_token"]], byte_fallback=False))
    backend.normalizer = spm_normalizer(proto.normalizer_spec.precompiled_charsmap)
    backend.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPIECE_UNDERLINE, prepend_scheme="always",
                                                     split=False)
    backend.decoder = decoders.Sequence([decoders.Replace(MARK, ""), decoders.Replace(SPIECE_UNDERLINE, " "),
                                         decoders.Fuse(), decoders.Strip(content=" ", left=1, right=0)])
    backend.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                for token in sorted(whole, key=vocab.get)])
    eos = specials["eos_token"]
    backend.post_processor = processors.TemplateProcessing(single=f"$A {eos}", pair=f"$A $B {eos}",
                                                           special_tokens=[(eos, vocab[eos])])
    return backend, missing


def spm_normalizer(charsmap: bytes) -> normalizers.Normalizer:
    """SentencePiece's default normalizer with the model's character map, applied to each stretch of text between
    special tokens: a typed ``MARK`` made some other unknown character first (so that it cannot reach a
    ``MARK``-spelled entry), then the map, spaces at the ends dropped and runs of spaces made one, spaces escaped,
    and a leading ``▁`` doubled (the Metaspace pre-tokenizer adds the dummy prefix only where none is, SentencePiece
    always adds it)."""
    steps = [normalizers.Replace(MARK, "\ue001")]
    if charsmap:
        steps.append(normalizers.Precompiled(charsmap))
    steps += [normalizers.Replace(Regex(r"\A +| +\z"), ""), normalizers.Replace(Regex(" {2,}"), " "),
              normalizers.Replace(" ", SPIECE_UNDERLINE), normalizers.Replace(Regex(r"\A▁"), "▁▁")]
    return normalizers.Sequence(steps)


__all__ = ["build_marian_tokenizer", "marian_backend", "read_spm", "read_vocab"]
