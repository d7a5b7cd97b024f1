"""Markup kept through translation: a sentence's tags put back around the target words aligned to the words they
enclosed.

A sentence with inline markup (``Der <b>rote</b> Hund``) is translated as one sentence without its tags, as Bergamot
translates a web page and as Hanneman and Dinu (2020, "How Should Markup Tags Be Translated?", WMT) evaluate it:
the model sees the plain text, and each element is then put back around the target words aligned to the source
words it enclosed (the alignment of ``encdec.inference.alignment``), so that ``<b>`` wraps "red" in "The <b>red</b>
dog" whatever the word order. The rules:

- **What a tag encloses**: the whitespace-separated words of the plain text its content overlaps. Its place in the
  translation is the longest unbroken run of target words aligned to any of them (a stray link elsewhere does not
  stretch it over other words); of equally long runs, the one next to the translation of the source word before
  the element, on either side of it (the attention often looks at a word while the words before its translation
  are written, which links an earlier word to it: measured on Multi30k, docs/results.md "Markup"). An element whose
  words are aligned to nothing is put back empty where its first word would go (after the target word aligned to
  the source word before it).
- **Always well-formed**: each element's span is cut to lie within its parent's and not to overlap its siblings'
  (siblings may change places, as their words do), so the tags nest as in the source; every element opened is
  closed, in order.
- **Kept as written**: the start tags with their attributes (never translated), end tags, void and self-closing
  tags (``<br>``, ``<img ...>``, ``<x/>``), and the whole of an ignored element (``<code>`` and ``<pre>`` by
  default, as DeepL's ``ignore_tags``): its content is not translated, and it goes back as one piece before the
  target word aligned to the source word after it. The text is escaped (``&``, ``<``, ``>``) where it goes out, and
  the translation's spacing between its words is kept.
- **Refused** (``MarkupError``, naming the place): an element left open, an end tag that closes nothing open or
  another element, a ``<`` that starts no tag, markup nested deeper than ``MAX_DEPTH``.

Standard library only (``html.parser``): a sentence's markup is parsed here, bounded, before any model runs.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html.parser import HTMLParser

try:
    from .errors import EncdecError
except ImportError:  # pragma: no cover - read alone
    EncdecError = ValueError  # type: ignore[assignment,misc]

MAX_DEPTH = 100  # elements open at once; deeper markup is refused before any work
VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
                  "track", "wbr"})  # HTML's void elements: no end tag, no content
IGNORED = frozenset({"code", "pre", "script", "style"})  # their content stays as written


class MarkupError(EncdecError):
    """Markup that cannot be put back well-formed: the message names the place and the fix."""


@dataclass
class Element:
    """One element of a sentence: its start tag as written, its end tag (empty for a void or self-closing one, or
    the whole element as written for an ignored one), the source words it encloses and its children."""

    start: str
    end: str = ""
    words: list[int] = field(default_factory=list)
    children: list[Element] = field(default_factory=list)
    at: int = 0  # the source word before which it stands (a void, self-closing or ignored element)
    atomic: bool = False  # void, self-closing or ignored: put back as one piece
    gap: bool = False  # (atomic) whitespace followed it in the source: a space follows it in the translation

    def all_words(self) -> set[int]:
        return set(self.words).union(*(child.all_words() for child in self.children))


@dataclass
class Marked:
    """A sentence read: its plain text (what the model translates) and its elements (a root holding the others)."""

    text: str
    root: Element

    @property
    def has_markup(self) -> bool:
        return bool(self.root.children)


class _Reader(HTMLParser):
    """Events of ``html.parser`` into ``Element``s over the words of the plain text."""

    def __init__(self, ignored: frozenset[str]) -> None:
        super().__init__(convert_charrefs=False)  # entities apart: a '<' in the data is then a stray one
        self.ignored, self.stack = ignored, [Element("")]
        self.chunks: list[str] = []  # the plain text, in pieces (joined once: ``text``)
        self.words, self.open_word = 0, False  # words so far; whether the text ends inside the last one
        self.names: list[str] = [""]
        self.skipping: list[str] = []  # the raw text of an ignored element while inside it
        self.pending: Element | None = None  # the last atomic element, until the text after it says its gap

    @property
    def text(self) -> str:
        return "".join(self.chunks)

    def word_index(self) -> int:
        """The index of the next word of the plain text (kept as a count: the text is never split again, so that
        reading is linear in its length)."""
        return self.words - self.open_word

    def handle_starttag(self, tag: str, attrs: list) -> None:
        raw = self.get_starttag_text() or f"<{tag}>"
        if self.skipping:
            self.skipping.append(raw)
            self.names.append(tag)
            return
        if tag in self.ignored:
            self.skipping, self.names = [raw], [*self.names, tag]
            return
        if tag in VOID:
            self.atomic(raw)
            return
        if len(self.stack) > MAX_DEPTH:
            raise MarkupError(f"markup nested over {MAX_DEPTH} elements deep at line {self.getpos()[0]}, column "
                              f"{self.getpos()[1] + 1}; flatten it.")
        element = Element(raw, f"</{_name(raw)}>")
        self.stack[-1].children.append(element)
        self.stack.append(element)
        self.names.append(tag)

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        raw = self.get_starttag_text() or f"<{tag}/>"
        if self.skipping:
            self.skipping.append(raw)
        else:
            self.atomic(raw)

    def atomic(self, raw: str) -> None:
        """An element put back as one piece; it parts the words on either side of it (``a<br>b`` is two words)."""
        if self.open_word:
            self.chunks.append(" ")
            self.open_word = False
        self.pending = Element(raw, at=self.word_index(), atomic=True)
        self.stack[-1].children.append(self.pending)

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID and not self.skipping:
            return  # </br>: HTML reads it as <br>; nothing to close
        if len(self.names) < 2 or self.names[-1] != tag:
            open_now = f"<{self.names[-1]}> is open" if len(self.names) > 1 else "nothing is open"
            raise MarkupError(f"the end tag </{tag}> at line {self.getpos()[0]}, column {self.getpos()[1] + 1} "
                              f"closes nothing open ({open_now}); close the elements in the order they were opened.")
        self.names.pop()
        if self.skipping:
            self.skipping.append(f"</{_name(self.skipping[0]) if len(self.names) == len(self.stack) else tag}>")
            if len(self.names) == len(self.stack):  # the ignored element itself is closed
                raw, self.skipping = "".join(self.skipping), []
                self.atomic(raw)
            return
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self.skipping:
            self.skipping.append(data)
            return
        if "<" in data:
            raise MarkupError(f"a '<' at line {self.getpos()[0]} starts no tag; write it as &lt;.")
        self.add_text(data)

    def handle_entityref(self, name: str) -> None:
        self.skipping.append(f"&{name};") if self.skipping else self.add_text(html.unescape(f"&{name};"))

    def handle_charref(self, name: str) -> None:
        self.skipping.append(f"&#{name};") if self.skipping else self.add_text(html.unescape(f"&#{name};"))

    def add_text(self, data: str) -> None:
        """Text of the sentence: the words it touches are enclosed by every element open."""
        if self.pending is not None and data:
            self.pending.gap, self.pending = data[0].isspace(), None
        self.chunks.append(data)
        if not data.strip():
            self.open_word = self.open_word and not data
            return
        first = self.words - (self.open_word and not data[0].isspace())  # the word its first letter belongs to
        self.words += len(data.split()) - (self.open_word and not data[0].isspace())
        self.open_word = not data[-1].isspace()
        for element in self.stack[1:]:  # words only grow: one already held is the element's last
            element.words.extend(n for n in range(first, self.words) if not element.words or n > element.words[-1])

    def handle_comment(self, data: str) -> None:
        target = self.skipping if self.skipping else None
        if target is not None:
            target.append(f"<!--{data}-->")
        else:
            self.atomic(f"<!--{data}-->")


def _name(start_tag: str) -> str:
    """The element's name as written in its start tag (``<Foo a="1">`` -> ``Foo``)."""
    found = re.match(r"<\s*([^\s/>]+)", start_tag)
    return found.group(1) if found else ""


def read_markup(text: str, ignored: Iterable[str] = IGNORED) -> Marked:
    """A sentence with markup as its plain text and elements (see the module docstring); ``MarkupError`` for markup
    that cannot be put back well-formed."""
    reader = _Reader(frozenset(name.lower() for name in ignored))
    reader.feed(text)
    reader.close()
    if reader.rawdata:  # html.parser holds back what it could not read: a '<' that starts no tag
        raise MarkupError(f"{reader.rawdata[:20]!r} at the end starts no tag; write '<' as &lt;.")
    if len(reader.names) > 1:
        raise MarkupError(f"<{reader.names[-1]}> is never closed; close it (</{reader.names[-1]}>).")
    return Marked(reader.text, reader.stack[0])


def restore_markup(marked: Marked, translation: str, links: Iterable[tuple[int, int]]) -> str:
    """``translation`` of ``marked.text`` with ``marked``'s elements put back (see the module docstring).

    :param links: (source word, target word) pairs over the whitespace-separated words of the two texts
    """
    words = translation.split()
    spaces = re.findall(r"\s+", translation.strip())  # the translation's own spacing between its words, kept
    by_source: dict[int, set[int]] = {}
    for i, j in links:
        if j < len(words):
            by_source.setdefault(i, set()).add(j)
    marks: list[list[tuple[bool, str]]] = [[] for _ in range(len(words) + 1)]  # (a close?, tag) before word n
    _place(marked.root.children, 0, len(words), by_source, marks)
    out = []
    for n, found in enumerate(marks):
        closing = next((k for k, (is_close, _) in enumerate(found) if not is_close), len(found))
        left, right = "".join(tag for _, tag in found[:closing]), "".join(tag for _, tag in found[closing:])
        out.append(left + (spaces[n - 1] if 0 < n < len(words) else "") + right)  # a close ends the word before,
        if n < len(words):                                                         # the rest begins the next one
            out.append(html.escape(words[n], quote=False))
    return "".join(out)


def _place(elements: Sequence[Element], low: int, high: int, by_source: dict[int, set[int]],
           marks: list[list[tuple[bool, str]]]) -> None:
    """Each element's span [start, end) of target words within [low, high), its tags added before the words they
    stand before. Siblings go in the translation's order (the word order may change), each after the one before it
    where their spans would overlap; an atomic element is a point, put after the target word aligned to the source
    word before it."""
    spans = []
    for element in elements:
        if element.atomic:
            before = [j for i, found in by_source.items() if i < element.at for j in found]
            point = max(before) + 1 if before else low
            spans.append((point, point, element))
        else:
            spans.append((*_span(element, low, by_source), element))
    floor = low
    for start, end, element in sorted(spans, key=lambda span: span[:2]):  # stable: ties keep the source's order
        start = min(max(start, floor), high)
        end = max(min(end, high), start)
        if element.atomic:
            marks[start].append((False, element.start + (" " if element.gap and start < high else "")))
            floor = start
            continue
        marks[start].append((False, element.start))
        _place(element.children, start, end, by_source, marks)
        # an element left empty stands as one piece, a space after it as after a word
        marks[end].append((True, element.end) if end > start else (False, element.end + (" " if end < high else "")))
        floor = end


def _span(element: Element, floor: int, by_source: dict[int, set[int]]) -> tuple[int, int]:
    """The target words [start, end) aligned to the element's source words; empty, where its first word would go
    (after the target word aligned to the source word before it), when none is aligned."""
    aligned = sorted({j for i in element.all_words() for j in by_source.get(i, ())})
    if aligned:  # the longest unbroken run of them: a stray link does not stretch it
        runs = [[aligned[0]]]
        for j in aligned[1:]:
            runs[-1:] = [[*runs[-1], j]] if j == runs[-1][-1] + 1 else [runs[-1], [j]]
        longest = max(map(len, runs))
        previous = [i for i in by_source if i < min(element.all_words())]
        run = _beside(by_source[max(previous)] if previous else set(), [run for run in runs if len(run) == longest])
        return run[0], run[-1] + 1
    first = min(element.all_words(), default=None)
    before = [j for i, found in by_source.items() if first is not None and i < first for j in found]
    place = max(before) + 1 if before else floor
    return place, place


def _beside(neighbour: set[int], runs: list[list[int]]) -> list[int]:
    """Of equally long runs, the one next to the translation of the neighbour (the nearest aligned source word
    before the element), on either side of it as the word order may change; the first one if none is nearer. An
    earlier run is often the attention looking ahead at the element's word while the words before its translation
    were written ("a <b>table</b> in a bar" for "in einer <b>Bar</b>")."""
    if not neighbour:
        return runs[0]
    return min(runs, key=lambda run: min(abs(run[0] - max(neighbour) - 1), abs(run[-1] + 1 - min(neighbour))))


__all__ = ["IGNORED", "MAX_DEPTH", "VOID", "Marked", "MarkupError", "read_markup", "restore_markup"]
