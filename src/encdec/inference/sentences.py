"""Long texts: a text cut into the sentences a sentence-level model translates, and put back together around their
translations.

A model trained on sentence pairs translates one sentence: given a paragraph it drops or garbles what follows the
first sentence, and a text longer than its positions does not fit at all. ``split_text`` cuts a text into its lines
and each line into its sentences, the pieces to translate, and keeps everything between them (the spaces after a
sentence, line breaks, blank lines) as pieces to write back unchanged; ``join`` puts each translation in its
sentence's place. ``encdec translate --split-sentences`` (``decode_split``), and on ``encdec serve`` the
LibreTranslate API (always), the native API (when asked) and file translation all cut and join with these
functions and decode the sentences through the one decoding path (``decoding.decode_sources`` here, the server's
batcher and ``decoding.decode_batch`` there), so a sentence translates as it does alone.

The splitter is sentencex (Wikimedia; MIT): rules for about 300 languages (abbreviations, and ordinals such as the
German "am 3. März") through fallback chains between languages, no data fetched at run time, and its sentences
together are the text, character for character. Compared on German text: pysbd splits as well but covers 22
languages and has had no release since 2021; blingfire's language-independent model cut "am 3. März" after "3." and
dropped the spaces between sentences.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from typing import Any

import sentencex

from ..cards import model_languages
from .decoding import DecodeOptions, decode_sources, encode, max_source_length

logger = logging.getLogger("encdec.inference")

# A text as pieces, each (to translate, piece); the pieces together are the text.
Parts = list[tuple[bool, str]]
# sentencex's rules when the source language is not known: English abbreviations on top of the punctuation rules
# that every language shares
UNKNOWN_LANGUAGE = "en"


def sentences(text: str, language: str | None) -> list[str]:
    """The sentences of ``text`` in ``language`` (a code such as ``de``; None: not known), each with the spaces
    after it: together they are ``text``. (A splitter that lost a character would leave the text whole.)"""
    found = list(sentencex.segment(language or UNKNOWN_LANGUAGE, text))
    return found if "".join(found) == text else [text]


def line_parts(text: str) -> Parts:
    """A plain text's lines: each non-blank line a piece to translate (a sentence-level model would drop the lines
    after the first), the line breaks and blank lines kept."""
    parts: Parts = []
    for k, line in enumerate(text.split("\n")):
        if k:
            parts.append((False, "\n"))
        parts.append((bool(line.strip()), line))
    return parts


def split_parts(parts: Parts, language: str | None) -> Parts:
    """``parts`` with each piece to translate cut into its sentences; the blank between two sentences is a piece
    to keep."""
    cut: Parts = []
    for translate, piece in parts:
        cut += [(bool(sentence.strip()), sentence) for sentence in sentences(piece, language)] if translate \
            else [(False, piece)]
    return cut


def split_text(text: str, language: str | None) -> Parts:
    """A plain text cut into lines, and each line into its sentences (``split_parts``)."""
    return split_parts(line_parts(text), language)


def join(parts: Parts, translations: Iterable[str]) -> str:
    """The text of ``parts`` again, each piece to translate replaced by the next translation within the piece's own
    leading and trailing spaces. Takes one translation per piece to translate from ``translations``, so that one
    iterator can serve several texts in turn."""
    done, out = iter(translations), []
    for translate, piece in parts:
        if translate:
            core = piece.strip()
            start = piece.index(core)
            out.append(piece[:start] + next(done) + piece[start + len(core):])
        else:
            out.append(piece)
    return "".join(out)


def pieces_to_translate(cut: Sequence[Parts]) -> list[str]:
    """The pieces to translate of several texts' parts, in order, without their surrounding spaces."""
    return [piece.strip() for parts in cut for translate, piece in parts if translate]


def fit(tokenizer: Any, texts: Sequence[str], ids: Sequence[list[int]], limit: int) -> list[list[int]]:
    """Each text's ``ids``; one over ``limit`` tokens is tokenized again, cut to the limit (``</s>`` kept, as
    ``decoding.encode(truncate=True)`` cuts), with a warning in the log: a sentence too long for the model still
    translates (its start), and the texts beside it are not refused with it."""
    fitted = []
    for text, found in zip(texts, ids, strict=True):
        if len(found) > limit:
            logger.warning("a sentence of %d source tokens is cut to the limit of %d tokens (its start is "
                           "translated): %.60r", len(found), limit, text)
            found = tokenizer(text, truncation=True, max_length=limit, verbose=False)["input_ids"]
        fitted.append(list(found))
    return fitted


def decode_split(engine: Any, tokenizer: Any, lines: Sequence[str], options: DecodeOptions,
                 language: str | None, batch_size: int = 32) -> list[str]:
    """Each line's translation, sentence by sentence (``encdec translate --split-sentences``): the sentences of all
    the lines decoded together (``decoding.decode_sources``: batched longest first), each line put back together
    around them; a sentence over the model's source length is cut to it (``fit``)."""
    cut = [split_text(line.rstrip("\r\n"), language) for line in lines]
    todo = pieces_to_translate(cut)
    if not todo:
        return [join(parts, []) for parts in cut]
    ids = fit(tokenizer, todo, encode(tokenizer, todo, engine.config, source_lang=options.source_lang),
              max_source_length(tokenizer, engine.config))
    translations = iter(found[0].text for found in decode_sources(engine, tokenizer, ids, options, batch_size))
    return [join(parts, translations) for parts in cut]  # each line takes its own sentences' translations


def card_source_language(model_dir: str | os.PathLike) -> str | None:
    """The source language that a model folder's card names (``encdec.cards.model_languages``: a pair, ``[source,
    target]`` as ``encdec train`` writes it), or None: a card of several languages names no one source."""
    languages = model_languages(model_dir)
    return languages[0] if len(languages) == 2 else None

__all__ = ["Parts", "card_source_language", "decode_split", "fit", "join", "line_parts", "pieces_to_translate",
           "sentences", "split_parts", "split_text"]
