"""Text with markup translated on the server: LibreTranslate's ``format: "html"`` and its .html files, a .docx or
.odt paragraph's runs written as markup (``documents.runs``), and DeepL's ``tag_handling``. The tags are kept on the
words they enclosed, as Hanneman and Dinu (2020, "How Should Markup Tags Be Translated?", WMT) evaluate it and as
Bergamot translates a web page: the model translates each sentence without its tags, and each element is put back
around the target words aligned to its words (``encdec.markup``).

- **Blocks.** A text is cut at its block-level elements (``SPLITTING``: ``p``, ``div``, ``li``, ``h1``, ``td``,
  ``br``..., with the caller's ``splitting_tags`` and without its ``non_splitting_tags``, as DeepL takes them), and
  at anything that is not an element (a doctype, a processing instruction, CDATA): these, and an inline element
  that holds one of them (``<a>`` around a ``<div>``), are kept as written, so a sentence never runs across them.
- **Inside a block** the inline markup is read with ``markup.read_markup``; its plain text is cut into sentences
  (``inference.sentences``, in the route's source language) and each sentence is a job on the model's batcher that
  asks for its alignment (``return_alignments``). The sentences' links, offset into the block's words, give
  ``markup.restore_markup`` the block's alignment. Through a pivot (``pairs.Route`` of several models) each
  sentence goes through every model, and its links are composed (source -> pivot, then pivot -> target).
- **Kept as written**: the block-level tags and what lies between blocks, the attributes (never translated), a block
  with nothing to translate (``core.nothing_to_translate``), and the whole of an ignored element (``<code>``,
  ``<pre>``, the caller's ``ignored``; ``<script>`` and ``<style>`` always, whose content HTML does not read as
  markup). The text is escaped (``&``, ``<``, ``>``) where it goes out; inside a block, spaces between words come
  back as one space (as HTML shows them), and the block's own leading and trailing spaces are kept.
- **Refused** in one line (``service.RequestError``, before anything is decoded): markup that cannot be put back
  well-formed (``markup.MarkupError``: an element left open, an end tag that closes nothing, a stray ``<``, nesting
  over ``markup.MAX_DEPTH``) as the text's field; an engine that returns no attention (ctranslate2, onnxruntime),
  or a model without it, as ``field`` (the request's field that asked for markup); over ``max_pieces`` sentences
  (``core.TooManySentences``). With a glossary, the links are those carried over to the terms put in
  (``Glossary.apply_aligned``), so the tags go around the words the translation ends with.

Every pass over the texts runs on the CPU threads (``offload.off_loop``); the event loop only waits for the batcher.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

from ..inference.alignment import parse_pharaoh
from ..inference.engines import engines_that
from ..inference.sentences import sentences
from ..markup import IGNORED, VOID, Marked, MarkupError, read_markup, restore_markup
from .core import MAX_PIECES, TooManySentences, decoded, nothing_to_translate
from .offload import off_loop
from .pairs import Route
from .served_models import ServedModel
from .service import RequestError

# block-level elements (HTML's flow content that starts a new line, and the document's frame): a sentence ends there
SPLITTING = frozenset({
    "address", "article", "aside", "blockquote", "body", "br", "caption", "dd", "details", "dialog", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "head", "header",
    "hgroup", "hr", "html", "legend", "li", "main", "nav", "ol", "optgroup", "option", "p", "section", "select",
    "summary", "table", "tbody", "td", "textarea", "tfoot", "th", "thead", "title", "tr", "ul"})
RAW = frozenset({"script", "style"})  # HTML reads their content as raw text: always ignored
WORD = re.compile(r"\S+")

Links = set[tuple[int, int]]


@dataclass(frozen=True)
class Tags:
    """How a text's elements are read: ``splitting`` ones cut it into blocks, ``ignored`` ones are kept as written
    with their content (names in lower case, as HTML reads them)."""

    splitting: frozenset[str]
    ignored: frozenset[str]

    @classmethod
    def of(cls, ignored: Iterable[str] = IGNORED, splitting_tags: Iterable[str] = (),
           non_splitting_tags: Iterable[str] = ()) -> Tags:
        ignored = lowered(ignored) | RAW
        return cls((SPLITTING | lowered(splitting_tags)) - lowered(non_splitting_tags) - ignored, ignored)


def lowered(names: Iterable[str]) -> frozenset[str]:
    return frozenset(name.lower() for name in names)


@dataclass
class Block:
    """A run of inline markup between blocks: read (``marked``), its own spaces around it, and its sentences (each
    the index of its job in the request's list, the block's word its first word is, and the spaces after it)."""

    marked: Marked
    lead: str
    trail: str
    sentences: list[list] = field(default_factory=list)


class _Events(HTMLParser):
    """Where each tag, piece of text and declaration of a text starts: (offset, kind, name), kind ``start``,
    ``end``, ``void`` (void, self-closing, or the end tag of a void element), ``keep`` (not an element: a doctype,
    a processing instruction, CDATA) or ``text`` (text, entities, comments)."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=False)
        self.lines = [0] + [found.end() for found in re.finditer("\n", text)]  # html.parser counts lines by \n
        self.events: list[tuple[int, str, str]] = []

    def add(self, kind: str, name: str = "") -> None:
        line, column = self.getpos()  # during a handler: where the piece it handles starts
        self.events.append((self.lines[line - 1] + column, kind, name))

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.add("void" if tag in VOID else "start", tag)

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self.add("void", tag)

    def handle_endtag(self, tag: str) -> None:
        self.add("void" if tag in VOID else "end", tag)

    def handle_data(self, data: str) -> None:
        self.add("text")

    handle_entityref = handle_charref = handle_comment = handle_data

    def handle_decl(self, decl: str) -> None:
        self.add("keep")

    handle_pi = unknown_decl = handle_decl


def kept_events(events: list[tuple[int, str, str]], tags: Tags) -> set[int]:
    """The events kept as written, between blocks: the tags of splitting elements, declarations, and the tags of an
    element that holds either (the markup is well-formed: ``read_markup`` read it first). Nothing inside an ignored
    element."""
    kept: set[int] = set()
    stack: list[list] = []  # [name, its start event, splitting, holds something kept]
    skipping = 0  # the depth of the ignored element open, 0 for none
    for k, (_, kind, name) in enumerate(events):
        if kind == "start":
            stack.append([name, k, name in tags.splitting and not skipping, False])
            skipping = skipping or (len(stack) if name in tags.ignored else 0)
            kept.update([k] if stack[-1][2] else [])
        elif kind == "end":
            _, start, splitting, holds = stack.pop()
            skipping = 0 if len(stack) < skipping else skipping
            if (splitting or holds) and not skipping:
                kept.update((start, k))
                if stack:
                    stack[-1][3] = True
        elif not skipping and (kind == "keep" or (kind == "void" and name in tags.splitting)):
            kept.add(k)
            if stack:
                stack[-1][3] = True
    return kept


def pieces(text: str, tags: Tags) -> list[tuple[bool, str]]:
    """(kept as written, piece) of a well-formed text: the pieces that ``kept_events`` keeps, and the runs of inline
    markup between them; together they are the text."""
    reader = _Events(text)
    reader.feed(text)
    reader.close()
    events = reader.events
    kept = kept_events(events, tags)
    ends = [offset for offset, _, _ in events[1:]] + [len(text)] if events else []
    found: list[tuple[bool, str]] = []
    for k, ((offset, _, _), end) in enumerate(zip(events, ends, strict=True)):
        if k in kept or not found or found[-1][0]:
            found.append((k in kept, text[offset:end]))
        else:
            found[-1] = (False, found[-1][1] + text[offset:end])
    return found


def read_block(run: str, ignored: frozenset[str], language: str | None, todo: list[str]) -> Block | None:
    """A run of inline markup read, its sentences added to ``todo``; None when it has nothing to translate."""
    core = run.strip()
    if not core:
        return None
    marked = read_markup(core, ignored)
    if nothing_to_translate(marked.text):
        return None
    lead, trail = run[:len(run) - len(run.lstrip())], run[len(core) + len(run) - len(run.lstrip()):]
    block, starts, at = Block(marked, lead, trail), [found.start() for found in WORD.finditer(marked.text)], 0
    for sentence in sentences(marked.text, language):
        if sentence.strip():
            first = at + len(sentence) - len(sentence.lstrip())  # a letter: the word holding it is the last started
            block.sentences.append([len(todo), bisect.bisect_right(starts, first) - 1, ""])
            todo.append(sentence.strip())
        if block.sentences:  # the spaces after a sentence go between its translation and the next
            block.sentences[-1][2] += sentence[len(sentence.rstrip()):]
        at += len(sentence)
    return block


def read_texts(texts: list[str], tags: Tags, language: str | None, max_pieces: int | None
               ) -> tuple[list[list[str | Block]], list[str], list[int]]:
    """Each text as pieces kept as written (strings) and blocks, the sentences of all of them in order, and the text
    each sentence is from; markup that cannot be put back refused as the text's field, over ``max_pieces``
    sentences to translate as ``TooManySentences``."""
    cut, todo, owners = [], [], []
    for i, text in enumerate(texts):
        try:
            read_markup(text, tags.ignored)  # the whole text first: a fault is named where it is in the text
            found = [piece if keep else read_block(piece, tags.ignored, language, todo) or piece
                     for keep, piece in pieces(text, tags)]
        except MarkupError as error:
            raise RequestError(f"text[{i}]" if len(texts) > 1 else "text", str(error)) from None
        owners += [i] * (len(todo) - len(owners))
        cut.append(found)
    count = sum(not nothing_to_translate(sentence) for sentence in todo)
    if max_pieces is not None and count > max_pieces:
        raise TooManySentences(count, max_pieces)
    return cut, todo, owners


def compose(first: Links, then: Links) -> Links:
    """The links of two alignments one after the other: source -> pivot, then pivot -> target."""
    onward: dict[int, set[int]] = {}
    for j, k in then:
        onward.setdefault(j, set()).add(k)
    return {(i, k) for i, j in first for k in onward.get(j, ())}


def check_route(route: Route, field_name: str) -> None:
    """A ``RequestError`` for a route whose models cannot put markup back: an engine or a model without attention."""
    for hop in route.hops:
        service = hop.model.service
        if service.has_alignments:
            continue
        if service.engine.spec.alignments:
            raise RequestError(field_name, f"the tags are put back by the model's attention, and {hop.model.name} has "
                                           "none (attention='none'); send plain text.")
        raise RequestError(field_name, f"the tags are put back by the model's attention, which the "
                                       f"{service.engine.name} engine of {hop.model.name} does not return; serve it "
                                       f"with engine={' or engine='.join(engines_that('alignments'))} (--model "
                                       "SRC-TGT=DIR,engine=E), or send plain text.")


def markup_jobs(model: ServedModel, todo: list[str], owners: list[int], count: int,
                decoding: dict[str, Any] | None) -> list[Any]:
    """A job per sentence, asking its alignment (decoded as ``decoding`` asks, else the model's default); a sentence
    over the source limit is cut to it, with a warning in the log (``service.TranslationService.jobs_for``)."""
    service = model.service
    options = service.options(**{**(decoding or {}), "return_alignments": True}, **model.direction)
    jobs = []
    for sentence, owner in zip(todo, owners, strict=True):
        try:
            jobs += service.jobs_for(sentence, options, cut=True)
        except RequestError as error:
            raise RequestError(f"text[{owner}]" if count > 1 else "text", error.reason) from None
    return jobs


async def along(route: Route, batchers: dict[str, Any], todo: list[str], owners: list[int], count: int,
                decoding: dict[str, Any] | None) -> tuple[list[str], list[Links]]:
    """Each sentence's translation along ``route`` and its links to the sentence's words (composed through the
    pivots); a sentence with nothing to translate (or a pivot's empty translation) is its own, word for word."""
    current = list(todo)
    links = [{(n, n) for n in range(len(sentence.split()))} for sentence in todo]
    for hop in route.hops:
        asked = [k for k, sentence in enumerate(current) if not nothing_to_translate(sentence)]
        jobs = await off_loop(markup_jobs, hop.model, [current[k] for k in asked], [owners[k] for k in asked],
                              count, decoding)
        for k, answer in zip(asked, await decoded(batchers[hop.model.name], jobs), strict=True):
            current[k] = answer["text"]
            links[k] = compose(links[k], parse_pharaoh(answer["alignment"]["links"]))
    return current, links


def put_back(cut: list[list[str | Block]], translations: list[str], links: list[Links]) -> list[str]:
    """Each text again: its pieces kept as written, each block's translation (its sentences' in turn) with its
    markup put back by their links, offset into the block's words."""
    out = []
    for found in cut:
        written = []
        for piece in found:
            if isinstance(piece, str):
                written.append(piece)
                continue
            words, joined = 0, set()
            for k, first, _ in piece.sentences:
                joined |= {(first + i, words + j) for i, j in links[k]}
                words += len(translations[k].split())
            text = "".join(translations[k] + spaces for k, _, spaces in piece.sentences)  # the source's spacing
            written.append(piece.lead + restore_markup(piece.marked, text, joined) + piece.trail)
        out.append("".join(written))
    return out


async def translate_markup(route: Route, batchers: dict[str, Any], texts: list[str], *,
                           ignored: Iterable[str] = IGNORED, splitting_tags: Iterable[str] = (),
                           non_splitting_tags: Iterable[str] = (), decoding: dict[str, Any] | None = None,
                           max_pieces: int | None = MAX_PIECES, field_name: str = "format") -> list[str]:
    """Each text's translation with its markup kept (module docstring), along ``route`` (none: the texts as they
    are); a ``RequestError`` before anything is decoded for what cannot be translated so.

    :param ignored: elements kept as written with their content (``code`` and ``pre`` by default; DeepL's
        ``ignore_tags``); ``script`` and ``style`` are always
    :param splitting_tags: elements that cut a text into blocks besides ``SPLITTING`` (DeepL's ``splitting_tags``)
    :param non_splitting_tags: elements of ``SPLITTING`` read as inline markup (DeepL's ``non_splitting_tags``)
    :param decoding: decoding options by their JSON names (``core.Plan.decoding``), else the models' defaults
    :param max_pieces: sentences to translate the texts may hold (None: no bound)
    :param field_name: the request's field that asked for markup, named when the route's models cannot put it back
    """
    if not route.hops:
        return list(texts)
    check_route(route, field_name)
    cut, todo, owners = await off_loop(read_texts, texts, Tags.of(ignored, splitting_tags, non_splitting_tags),
                                       route.source, max_pieces)
    translations, links = await along(route, batchers, todo, owners, len(texts), decoding)
    return await off_loop(put_back, cut, translations, links)


__all__ = ["RAW", "SPLITTING", "Tags", "compose", "translate_markup"]
