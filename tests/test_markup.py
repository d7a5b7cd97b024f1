"""Markup kept through translation (``encdec.markup``): a sentence read into its plain text and elements, the
elements put back around the aligned target words with exact expected outputs, well-formed under any alignment (a
property checked on random alignments), and bad markup refused in one line before any work."""

from __future__ import annotations

import random
import re

import pytest

from encdec.inference import translate
from encdec.inference.tagged import translate_tagged
from encdec.markup import MAX_DEPTH, MarkupError, read_markup, restore_markup

DIAGONAL = {(n, n) for n in range(20)}


def test_the_plain_text_is_the_words_without_their_tags() -> None:
    marked = read_markup('Ein <a href="/x?a=1&amp;b=2">großer <b>roter</b> Hund</a><br>bellt <code>x &lt; y</code> '
                         "laut &amp; lang.")
    assert marked.text.split() == ["Ein", "großer", "roter", "Hund", "bellt", "laut", "&", "lang."]
    link, br, code = marked.root.children
    assert (link.start, link.end, sorted(link.all_words())) == ('<a href="/x?a=1&amp;b=2">', "</a>", [1, 2, 3])
    assert link.children[0].words == [2]
    assert (br.atomic, br.at, code.atomic, code.at, code.start) == (True, 4, True, 5, "<code>x &lt; y</code>")
    assert not read_markup("Kein Markup.").has_markup


@pytest.mark.parametrize(("source", "translation", "links", "expected"), [
    # the element goes with its words, wherever the translation puts them
    ("Der <b>rote</b> Hund", "The red dog", DIAGONAL, "The <b>red</b> dog"),
    ("Der <b>Hund</b> ist rot", "The red dog", {(0, 0), (1, 2), (2, 2), (3, 1)}, "The red <b>dog</b>"),
    # nested and attributed, kept as written; text escaped on the way out
    ('Ein <a href="x" title="Hund">großer <i>Hund</i></a>', "A big dog", DIAGONAL,
     'A <a href="x" title="Hund">big <i>dog</i></a>'),
    ("A <b>&lt;b&gt;</b> tag", "Ein <b> Tag", DIAGONAL, "Ein <b>&lt;b&gt;</b> Tag"),
    # void and self-closing elements and ignored ones go back as one piece, before the word after them
    ("Zeile eins<br>Zeile zwei", "Line one line two", DIAGONAL, "Line one <br>line two"),
    ("Ruf <code>ls -l</code> auf", "Run it on", {(0, 0), (1, 2)}, "Run <code>ls -l</code> it on"),
    ("Ein <b>x</b>", "A <b>", DIAGONAL, "A <b>&lt;b&gt;</b>"),  # the model's text is text
    ("Ein Bild <img src='a.png'/> hier", "A picture here", {(0, 0), (1, 1), (2, 2)},
     "A picture <img src='a.png'/> here"),
    # of equally long runs, the one beside the translation of the word before (the earlier link: attention looking
    # ahead), on either side of it: the word order may change
    ("in einer <b>Bar</b>", "a table in a bar", {(0, 2), (1, 3), (2, 1), (2, 4)}, "a table in a <b>bar</b>"),
    ("Mai <b>Jahr</b>", "year may year", {(0, 1), (1, 0), (1, 2)}, "<b>year</b> may year"),
    # words aligned to nothing: the element goes back empty where its first word would be
    ("Der <b>sehr</b> Hund", "The dog", {(0, 0), (2, 1)}, "The <b></b> dog"),
])
def test_elements_go_back_around_the_aligned_words(source: str, translation: str, links: set,
                                                    expected: str) -> None:
    assert restore_markup(read_markup(source), translation, links) == expected


def test_siblings_follow_their_words_and_never_overlap() -> None:
    """<b> holds words 0-1 and <i> word 2: the translation swaps them, and so do the tags; where the alignment would
    make them overlap, the later one starts after the earlier one."""
    marked = read_markup("<b>eins zwei</b> <i>drei</i>")
    assert restore_markup(marked, "three one two", {(0, 1), (1, 2), (2, 0)}) == "<i>three</i> <b>one two</b>"
    assert restore_markup(marked, "one two three", {(0, 0), (1, 1), (2, 1), (2, 2)}) == "<b>one two</b> <i>three</i>"


def tags(text: str) -> list[str]:
    return re.findall(r"<[^>]*>", text)


@pytest.mark.parametrize("seed", range(20))
def test_any_alignment_gives_well_formed_markup_with_every_tag_and_word(seed: int) -> None:
    rng = random.Random(seed)
    source = ('<p>Ein <a href="x">großer <b>roter</b> Hund</a> <i>bellt <u>sehr</u></i><br> laut '
              "<code>a&lt;b</code> und <span class='z'>lange <em>Zeit</em></span>.</p>")
    marked = read_markup(source)
    words = [f"w{n}" for n in range(rng.randint(1, 12))]
    links = {(rng.randrange(len(marked.text.split())), rng.randrange(len(words))) for _ in range(rng.randint(0, 15))}
    out = restore_markup(marked, " ".join(words), links)
    again = read_markup(out)  # well-formed: read back without a refusal
    assert again.text.split() == words  # every word, in order, nothing else
    assert sorted(tags(out)) == sorted(tags(source.replace("<code>a&lt;b</code>", "<code>a&lt;b</code>")))
    assert [t for t in tags(out) if not t.startswith("</")][:1] == ["<p>"]  # the outermost element stays outermost


@pytest.mark.parametrize(("markup", "message"), [
    ("Der <b>Hund", "<b> is never closed; close it"),
    ("Der Hund</b>", r"the end tag </b> at line 1, column 9 closes nothing open \(nothing is open\)"),
    ("<b><i>Hund</b></i>", r"the end tag </b> .* closes nothing open \(<i> is open\)"),
    ("a < b", "starts no tag; write it as &lt;"),
    ("Hund <b", "starts no tag"),
])
def test_bad_markup_is_refused_naming_the_place(markup: str, message: str) -> None:
    with pytest.raises(MarkupError, match=message):
        read_markup(markup)


def test_markup_nested_1000_deep_is_refused_before_any_work() -> None:
    with pytest.raises(MarkupError, match=f"nested over {MAX_DEPTH} elements deep"):
        read_markup("<b>" * 1000 + "x" + "</b>" * 1000)
    assert read_markup("<b>" * MAX_DEPTH + "x" + "</b>" * MAX_DEPTH).text == "x"


# --- through a trained model ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_a_trained_models_markup_goes_with_the_year(aligned_models, aligned_dates, family) -> None:
    """The date task writes "YYYY MM DD": a source whose year is wrapped in <b> (and the rest in <i>) comes back with
    <b> around the year and <i> around the month and day, in the translation's order; a text without markup is
    translated as ``translate`` does, and a text of tags alone comes back as its tags."""
    model, (tokenizer, _, held_out) = aligned_models[family], aligned_dates
    rows = [(source, target) for source, target, _ in held_out if target.split()[0] in source.split()][:30]
    assert len(rows) == 30
    tagged = []
    for source, target in rows:
        words = source.split()
        year = words.index(target.split()[0])
        others = [w for n, w in enumerate(words) if n != year]
        before, after = (" ".join(others[:year]), " ".join(others[year:]))
        tagged.append(" ".join(part for part in (f"<i>{before}</i>" if before else "", f"<b>{words[year]}</b>",
                                                 f"<i>{after}</i>" if after else "") if part))
    plain = translate(model, tokenizer, [source for source, _ in rows])
    out = translate_tagged(model, tokenizer, tagged)
    assert [re.sub(r"<[^>]*>", "", text).split() for text in out] == [text.split() for text in plain]
    right = sum(text.startswith(f"<b>{plain_text.split()[0]}</b>") for text, plain_text in zip(out, plain,
                                                                                                strict=True))
    assert right >= 28, list(zip(tagged, out, strict=True))
    assert all(read_markup(text).text.split() == p.split() for text, p in zip(out, plain, strict=True))
    assert translate_tagged(model, tokenizer, ["March 3, 2021", "<br/>"]) == [
        translate(model, tokenizer, ["March 3, 2021"])[0], "<br/>"]


def test_markup_goes_around_the_glossarys_terms(aligned_models, aligned_dates) -> None:
    """The tags are put back by the alignment of the final translation: a year wrapped in <b> and mapped by the
    glossary comes back as the term, inside <b>."""
    model, (tokenizer, _, held_out) = aligned_models["transformer"], aligned_dates
    rows = [(source, target) for source, target, _ in held_out if target.split()[0] in source.split()][:10]
    glossary = {target.split()[0]: f"Y{target.split()[0]}" for _, target in rows}
    tagged = [source.replace(target.split()[0], f"<b>{target.split()[0]}</b>") for source, target in rows]
    out = translate_tagged(model, tokenizer, tagged, glossary=glossary)
    plain = translate(model, tokenizer, [source for source, _ in rows], glossary=glossary)
    assert [re.sub(r"<[^>]*>", "", text) for text in out] == plain
    assert sum(text.startswith(f"<b>Y{target.split()[0]}</b>") for text, (_, target) in zip(out, rows,
                                                                                            strict=True)) >= 9
