"""Glossaries: source terms that must come out of a translation as given target terms.

**Entries** are written as DeepL's API takes them: TSV or CSV, one entry a line, the source term first; empty lines
are skipped; each term is stripped of surrounding whitespace and must be non-empty, at most 1,024 UTF-8 bytes, and
free of control characters (C0, C1) and Unicode line separators; a source term appears once; a glossary holds at
most ``MAX_GLOSSARY_BYTES``. A CSV line may add the source and the target language after the two terms, as DeepL's
CSV does; all lines must then name the same pair.

**Where a term matches**: as whole words (no letter or digit right before or after it) of the source, case for case;
a term that starts in lower case also matches with its first letter upper-cased (a sentence's first word, a title),
and its target term is then written with an upper-case first letter too. The text is read from the left, and at
each place the longest term that matches there is taken; matches never overlap.

**How a term is put in** (``Glossary.apply``): the sentence is translated as it is without the glossary, and each
matched term whose target term is not already in the translation replaces the target words aligned to the term's
source words (those of a target term already there aside): the longest unbroken run of them, keeping the punctuation
around that run. A term aligned to no target word is put in after the target word aligned to the closest source word
before it (at the start when there is none), before that word's trailing punctuation. The alignment is the one
encdec gives every translation (``encdec.inference.alignment``: the attention of the model's alignment layer, Garg
et al. 2019), so the rest of the sentence is the model's own translation, word for word. The other methods of the
literature either need models trained for them (placeholders, or the inline target terms of Dinu et al. 2019,
"Training Neural Machine Translation to Apply Terminology Constraints") or a beam search of their own over every
engine (Post and Vilar 2018, "Fast Lexically Constrained Decoding with Dynamic Beam Allocation"; Hu et al. 2019),
which neither CTranslate2 nor transformers' ``generate()`` offers today; replacement through the alignment works
with any model trained as it is. Inflection is left as the glossary writes it.

Standard library only, like ``encdec.decoding_options``, which declares the ``glossary`` option.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

try:
    from .errors import EncdecError
except ImportError:  # read alone by ``encdec --help`` (see decoding_options)
    EncdecError = ValueError  # type: ignore[assignment,misc]

MAX_TERM_BYTES = 1024  # DeepL's limit on a source or target term, in UTF-8 bytes
MAX_GLOSSARY_BYTES = 10 * 1024 * 1024  # DeepL's limit on a glossary's entries
FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # C0 and C1 control characters, Unicode line separators
EDGE = re.compile(r"^(\W*)(.*?)(\W*)$", re.DOTALL)  # a word's leading punctuation, its core, its trailing punctuation
TOKEN = re.compile(r"\w+|[^\w\s]")  # a word or one mark: where a term may begin
WORD_CHARACTER = re.compile(r"\w")


@dataclass(frozen=True)
class Match:
    """A source term found in a text: its character span, and the target term to put in (capitalised already)."""

    start: int
    end: int
    target: str


@dataclass(frozen=True)
class Glossary:
    """Source term -> target term, for one language pair (``source_lang``/``target_lang``: None when not said)."""

    entries: tuple[tuple[str, str], ...]
    source_lang: str | None = None
    target_lang: str | None = None

    @classmethod
    def of(cls, entries: Mapping[str, str] | Iterable[tuple[str, str]], source_lang: str | None = None,
           target_lang: str | None = None, where: str = "glossary") -> Glossary:
        """A glossary of ``entries`` (a mapping or pairs), each checked as a read entry is (``check_term``)."""
        pairs = list(entries.items() if isinstance(entries, Mapping) else entries)
        return cls(checked([(f"entry {n}", *pair) for n, pair in enumerate(pairs, 1)], where), source_lang,
                   target_lang)

    def __len__(self) -> int:
        return len(self.entries)

    @cached_property
    def identity(self) -> str:
        """What a resumable output records of it: its language pair and the SHA-256 of its entries."""
        digest = hashlib.sha256("\n".join(f"{s}\t{t}" for s, t in self.entries).encode("utf-8")).hexdigest()
        return f"{len(self)} entries, {self.source_lang or '?'}-{self.target_lang or '?'}, sha256 {digest}"

    @cached_property
    def _by_first_token(self) -> dict[str, list[tuple[str, str]]]:
        """Each form of a source term (``_variants``) with its target term, by the form's first token, longest first:
        a text is searched token by token, whatever the glossary's size."""
        index: dict[str, list[tuple[str, str]]] = {}
        for source, target in self.entries:
            for variant, written in _variants(source, target):
                index.setdefault(TOKEN.search(variant).group(), []).append((variant, written))
        for candidates in index.values():
            candidates.sort(key=lambda candidate: -len(candidate[0]))
        return index

    def matches(self, text: str) -> list[Match]:
        """Where the source terms occur in ``text`` (see the module docstring): from the left, the longest term at
        each place, none overlapping."""
        found: list[Match] = []
        for token in TOKEN.finditer(text):
            start = token.start()
            if found and start < found[-1].end:
                continue
            for variant, written in self._by_first_token.get(token.group(), ()):
                stop = start + len(variant)
                if text.startswith(variant, start) and not _word_at(text, start - 1) and not _word_at(text, stop):
                    found.append(Match(start, stop, written))
                    break
        return found

    def apply(self, source: str, translation: str, links: Iterable[tuple[int, int]]) -> str:
        """``translation`` of ``source`` with each matched term's target term put in (see the module docstring).

        :param links: the alignment, (source word, target word) pairs over the whitespace-separated words of
            ``source`` and ``translation`` (``encdec.inference.alignment``'s Pharaoh links)
        """
        return self.apply_aligned(source, translation, links)[0]

    def apply_aligned(self, source: str, translation: str, links: Iterable[tuple[int, int]]
                      ) -> tuple[str, set[tuple[int, int]]]:
        """``apply``'s text, and ``links`` carried over to its words: a replaced word's links go to the term's words,
        and a term's source words are linked to its words (markup put back after a glossary follows them)."""
        words, links = translation.split(), set(links)
        matches = self.matches(source)
        kept = {j for match in matches for j in _occurrence(words, match.target)}  # terms there already stay
        edits = []
        for match in matches:
            if _occurrence(words, match.target):
                continue
            terms = _words_within(source, match.start, match.end)
            aligned = sorted({j for i, j in links if i in terms and j < len(words) and j not in kept})
            run = _longest_run(aligned)
            if run:
                edits.append((run[0], run[-1], match.target, terms))
            else:
                before = [j for i, j in links if terms and i < terms[0] and j < len(words)]
                place = max(before) + 1 if before else 0
                edits.append((place, place - 1, match.target, terms))  # an empty range: put in before ``place``
        if not edits:
            return translation, links
        edited, moved, added = _edited(words, edits)
        return " ".join(edited), {(i, k) for i, j in links if j < len(moved) for k in moved[j]} | added


def _word_at(text: str, index: int) -> bool:
    """Whether ``text[index]`` is a letter, a digit or ``_`` (so a term there would be part of a longer word)."""
    return 0 <= index < len(text) and WORD_CHARACTER.match(text[index]) is not None


def _variants(source: str, target: str) -> list[tuple[str, str]]:
    """The forms of ``source`` that match, each with the target term it gives."""
    if source[:1].islower():
        return [(source, target), (source[0].upper() + source[1:], target[:1].upper() + target[1:])]
    return [(source, target)]


def _words_within(text: str, start: int, end: int) -> list[int]:
    """The indices of the whitespace-separated words of ``text`` that overlap the span ``start:end``."""
    return [n for n, word in enumerate(re.finditer(r"\S+", text)) if word.start() < end and word.end() > start]


def _occurrence(words: list[str], term: str) -> range:
    """Where the words (their punctuation aside) first hold ``term``'s words in a row, case aside; empty if not."""
    cores = [EDGE.match(word).group(2).casefold() for word in words]
    wanted = [word.casefold() for word in term.split()]
    found = (n for n in range(len(cores) - len(wanted) + 1) if cores[n:n + len(wanted)] == wanted)
    start = next(found, None)
    return range(0) if start is None else range(start, start + len(wanted))


def _longest_run(indices: list[int]) -> list[int]:
    """The longest run of consecutive numbers in sorted ``indices`` (the first of equal ones)."""
    best: list[int] = []
    run: list[int] = []
    for index in indices:
        run = [*run, index] if run and index == run[-1] + 1 else [index]
        if len(run) > len(best):
            best = run
    return best


def _edited(words: list[str], edits: list[tuple[int, int, str, list[int]]]
            ) -> tuple[list[str], list[list[int]], set[tuple[int, int]]]:
    """``words`` with each edit (first, last, term, its source words) made: words first..last replaced by the term,
    keeping the leading punctuation of the first and the trailing punctuation of the last (and the first word's
    capital at the start), or, for an empty range (last < first), the term put in before word ``first``, the
    punctuation that ended the word before it then ending the term. An edit that overlaps one before it is put in
    after that one instead. Also returned: where each old word went (its new words) and the links of the terms'
    source words to their new words."""
    done: list[tuple[int, int, str, list[int]]] = []
    for first, last, term, terms in sorted(edits, key=lambda edit: edit[:2]):
        overlaps = done and first <= done[-1][1]
        done.append((done[-1][1] + 1, done[-1][1], term, terms) if overlaps else (first, last, term, terms))
    new: list[str] = []
    moved: list[list[int]] = [[] for _ in words]
    added: set[tuple[int, int]] = set()
    k = 0
    for first, last, term, terms in done:
        while k < min(first, len(words)):
            moved[k], k = [len(new)], k + 1
            new.append(words[k - 1])
        if last < first:
            trail = EDGE.match(new[-1]).group(3) if new else ""
            if trail:
                new[-1] = new[-1][:-len(trail)]
            pieces = (term + trail).split()
        else:
            lead, core, _ = EDGE.match(words[first]).groups()
            if first == 0 and core[:1].isupper():
                term = term[:1].upper() + term[1:]
            pieces = (lead + term + EDGE.match(words[last]).group(3)).split()
            for old in range(first, last + 1):
                moved[old] = list(range(len(new), len(new) + len(pieces)))
            k = last + 1
        added |= {(i, j) for i in terms for j in range(len(new), len(new) + len(pieces))}
        new.extend(pieces)
    for old in range(k, len(words)):
        moved[old] = [len(new)]
        new.append(words[old])
    return new, moved, added


# --- reading entries -----------------------------------------------------------------------------------------------

def check_term(term: str, where: str) -> str:
    """``term`` stripped, or an error naming ``where``: empty, too long, or holding a control character."""
    term = term.strip()
    if not term:
        raise EncdecError(f"{where}: a term is empty; give both a source and a target term.")
    if len(term.encode("utf-8")) > MAX_TERM_BYTES:
        raise EncdecError(f"{where}: a term is over {MAX_TERM_BYTES} bytes (UTF-8); shorten it.")
    if FORBIDDEN.search(term):
        raise EncdecError(f"{where}: the term {term[:40]!r} holds a control character or a line separator; "
                          "remove it.")
    return term


def checked(lines: list[tuple[str, str, str]], where: str) -> tuple[tuple[str, str], ...]:
    """(line name, source, target) rows as checked entries; duplicates and an empty glossary are refused."""
    if not lines:
        raise EncdecError(f"{where} has no entries; give at least one `source term<TAB>target term` line.")
    seen: dict[str, str] = {}
    entries = []
    for name, source, target in lines:
        source, target = check_term(source, f"{where}, {name}"), check_term(target, f"{where}, {name}")
        if source in seen:
            raise EncdecError(f"{where}, {name}: the source term {source!r} is already on {seen[source]}; give each "
                              "source term once.")
        seen[source] = name
        entries.append((source, target))
    return tuple(entries)


def parse_glossary(text: str, form: str = "tsv", where: str = "glossary") -> Glossary:
    """A glossary from its entries as text: ``tsv`` (source and target term apart by one tab) or ``csv``."""
    if len(text.encode("utf-8")) > MAX_GLOSSARY_BYTES:
        raise EncdecError(f"{where} is over {MAX_GLOSSARY_BYTES // 2 ** 20} MiB; split it.")
    if form == "csv":
        return _from_csv(text, where)
    if form != "tsv":
        raise EncdecError(f"{where}: entries come as tsv or csv, not {form!r}.")
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if line.count("\t") != 1:
            problem = "has no tab between its terms" if "\t" not in line else "has more than one tab"
            raise EncdecError(f"{where}, line {number} {problem}: write `source term<TAB>target term` (a CSV file "
                              "takes commas: name it .csv).")
        lines.append((f"line {number}", *line.split("\t")))
    return Glossary(checked(lines, where))


def _from_csv(text: str, where: str) -> Glossary:
    lines, pairs = [], set()
    for number, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) not in (2, 4):
            raise EncdecError(f"{where}, line {number} has {len(row)} fields: write `source,target` (or `source,"
                              "target,source language,target language`), quoting a term that holds a comma.")
        lines.append((f"line {number}", row[0], row[1]))
        pairs.add(tuple(cell.strip().lower() for cell in row[2:]) or None)
    named = {pair for pair in pairs if pair}
    if len(named) > 1 or (named and None in pairs):
        raise EncdecError(f"{where}: its lines name different language pairs ({sorted(named)}); one glossary holds "
                          "one pair.")
    source_lang, target_lang = next(iter(named)) if named else (None, None)
    return Glossary(checked(lines, where), source_lang, target_lang)


def read_glossary(path: str | os.PathLike) -> Glossary:
    """The glossary in a file: ``.csv`` is CSV, anything else TSV (DeepL's two entry formats)."""
    path = Path(path)
    try:
        if path.stat().st_size > MAX_GLOSSARY_BYTES:
            raise EncdecError(f"The glossary {path} is over {MAX_GLOSSARY_BYTES // 2 ** 20} MiB; split it.")
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError as err:
        raise EncdecError(f"The glossary {path} does not exist; give a TSV or CSV file of terms.") from err
    except UnicodeDecodeError as err:
        raise EncdecError(f"The glossary {path} is not UTF-8 text; save it as UTF-8.") from err
    return parse_glossary(text, "csv" if path.suffix.lower() == ".csv" else "tsv", f"The glossary {path}")


def as_glossary(value: Glossary | Mapping[str, str] | None, where: str = "glossary") -> Glossary | None:
    """A ``Glossary`` from what a caller gave: one, a mapping of terms, or None. A path is not read here (a server
    takes no path): read a file with ``read_glossary``."""
    if value is None or isinstance(value, Glossary):
        return value
    if isinstance(value, Mapping):
        return Glossary.of(value, where=where)
    raise EncdecError(f"{where} takes a mapping of source term -> target term (or encdec.glossary.Glossary), not "
                      f"{type(value).__name__}; read a file with encdec.glossary.read_glossary.")


__all__ = ["Glossary", "Match", "as_glossary", "parse_glossary", "read_glossary"]
