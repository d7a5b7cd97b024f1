"""A DeepL request's texts translated by the serving core, as its options say (``api``'s module docstring).

``split_sentences`` picks the core's path: ``1`` and ``nonewlines`` cut each text into sentences
(``core.translate_route``; ``nonewlines`` reads a newline as a space first), ``0`` decodes each text as one sentence
(``core.route_answers``: a text over the source limit is refused, not cut). ``tag_handling`` translates text with
markup by the alignment (``encdec.serve.tagged_text``): each block of text without its tags, the inline tags then put
back around the words aligned to those they enclosed (``encdec.markup``). The core's refusals come back in DeepL's
words: a field's as 400, too many sentences as 413.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ...markup import IGNORED
from ..core import Plan, TooManySentences, route_answers, translate_route
from ..documents.runs import TAGS
from ..pairs import Route
from ..service import RequestError
from ..tagged_text import SPLITTING, translate_markup
from .fields import DeepLError, bad

END = re.compile(r"[.!?\u2026\u3002\uff01\uff1f:;]+$")  # punctuation that ends a sentence


@dataclass
class Asked:
    """A translation request's options, checked (``api.DeepLAPI.asked``); languages as served codes."""

    source: str | None
    target: str
    split: str  # "0", "1" or "nonewlines"
    preserve_formatting: bool
    tag_handling: str | None  # None, "html" or "xml"
    ignore_tags: frozenset[str]
    splitting_tags: frozenset[str]
    non_splitting_tags: frozenset[str]
    outline_detection: bool
    glossary: dict[str, str] | None = None


async def translate_group(route: Route, batchers: dict[str, Any], texts: list[str], asked: Asked) -> list[str]:
    """The translations of ``texts`` (all in the route's source language), refusals in DeepL's words."""
    decoding = {"glossary": asked.glossary} if asked.glossary else None
    try:
        if asked.tag_handling:
            found = await marked(route, batchers, texts, asked, decoding)
        elif asked.split == "0":
            found = await whole(route, batchers, texts, decoding)
        else:
            given = [re.sub(r"\s*\r?\n\s*", " ", text) for text in texts] if asked.split == "nonewlines" else texts
            found = [versions[0] for versions in await translate_route(route, batchers, given, Plan("text", 0,
                                                                                                    decoding))]
    except TooManySentences as error:
        raise DeepLError(413, "Request Entity Too Large", error.reason) from None
    except RequestError as error:
        raise bad(f"{error.field}: {error.reason}") from None
    return [keep_formatting(source, text) for source, text in zip(texts, found, strict=True)] \
        if asked.preserve_formatting else found


async def whole(route: Route, batchers: dict[str, Any], texts: list[str], decoding: dict[str, Any] | None
                ) -> list[str]:
    """``split_sentences=0``: each text decoded as one sentence."""
    if not route.hops:
        return list(texts)
    found = await route_answers(route, batchers, {"text": texts, **(decoding or {})}, route.hops[0].model.service)
    return [answer["text"] for answer, _ in found]


async def marked(route: Route, batchers: dict[str, Any], texts: list[str], asked: Asked,
                 decoding: dict[str, Any] | None) -> list[str]:
    """``tag_handling``: the markup kept around the aligned words (``encdec.serve.tagged_text``)."""
    non_splitting = asked.non_splitting_tags
    if asked.tag_handling == "xml":  # XML's elements are not HTML's: only the splitting_tags asked cut blocks
        non_splitting = (SPLITTING | non_splitting) - asked.splitting_tags
    return await translate_markup(route, batchers, texts, ignored=IGNORED | asked.ignore_tags,
                                  splitting_tags=asked.splitting_tags, non_splitting_tags=non_splitting,
                                  decoding=decoding, field_name="tag_handling")


async def translate_runs(route: Route, batchers: dict[str, Any], texts: list[str], asked: Asked) -> list[str]:
    """A .docx's or .odt's paragraphs, their runs as markup (``encdec.serve.documents.runs``), refusals in DeepL's
    words."""
    decoding = {"glossary": asked.glossary} if asked.glossary else None
    try:
        return await translate_markup(route, batchers, texts, **TAGS, decoding=decoding, max_pieces=None)
    except RequestError as error:
        raise bad(f"{error.field}: {error.reason}") from None


def keep_formatting(source: str, translation: str) -> str:
    """``preserve_formatting``: the translation with the source's formatting where a model would change it: the
    case of its first letter, its sentence-ending punctuation (kept or left out as in the source), and the
    whitespace around it."""
    core = translation.strip()
    start, end = source[: len(source) - len(source.lstrip())], source[len(source.rstrip()):]
    stripped = source.strip()
    if not core or not stripped:
        return translation
    if stripped[0].isalpha() and core[0].isalpha():
        core = (core[0].lower() if stripped[0].islower() else core[0].upper()) + core[1:]
    ending = END.search(stripped)
    core = END.sub("", core) + (ending.group() if ending else "")
    return start + core + end


__all__ = ["Asked", "keep_formatting", "translate_group"]
