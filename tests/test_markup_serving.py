"""Markup kept through the server's translation (encdec.serve.tagged_text, encdec.serve.documents.runs), on a model
whose alignment is known (the date task: "25 March 1965" -> "1965 03 25", each field aligned to the word that writes
it): HTML through LibreTranslate's `format: "html"` comes back well-formed with each tag on the words aligned to its
own, across sentences and through a pivot; bad markup is a 400 naming q; a .docx's and an .odt's bold, italic and
link stay on the aligned word. Without a server: the cut into blocks, the links through a pivot, a paragraph's runs
as markup and back, and the refusal of what cannot put markup back."""

from __future__ import annotations

import io
from types import SimpleNamespace

import docx
import odfdo
import pytest
from docx.oxml import OxmlElement
from docx.oxml.ns import qn

from encdec.folders import save_for_pipeline
from encdec.serve import ServeLimits
from encdec.serve.documents.formats import read_document
from encdec.serve.pairs import Hop, Route
from encdec.serve.server import create_app, load_models
from encdec.serve.service import RequestError
from encdec.serve.tagged_text import Tags, check_route, compose, pieces
from test_libretranslate import URL
from test_serve import Server, request
from test_translate_file import translate_file
from tiny_model_folders import DATE_TRANSFORMER, train_on_dates

ALIGNED = ({**DATE_TRANSFORMER, "decoder_layers": 3}, 200, 3e-3)  # conftest's aligned_models["transformer"]


@pytest.fixture(scope="module")
def server(aligned_dates, tmp_path_factory):
    """The aligned Transformer served as de-en and en-fr (so de -> fr goes through en)."""
    config, steps, lr = ALIGNED
    folder = save_for_pipeline(train_on_dates(config, aligned_dates, steps, lr), aligned_dates[0],
                               tmp_path_factory.mktemp("aligned") / "model")
    with Server(create_app(load_models([f"de-en={folder}", f"en-fr={folder}"], limits=ServeLimits()))) as running:
        yield running


def html(server: Server, q: str | list[str], target: str = "en") -> tuple[int, dict]:
    status, answer, _ = request(f"{server.url}{URL}/translate", {"q": q, "source": "de", "target": target,
                                                                 "format": "html"})
    return status, answer


def test_html_tags_go_on_the_aligned_words(server) -> None:
    """The tags follow their words into the translation's order, nested and with their attributes as written; a
    void element and <code> go back as one piece after the word aligned to the word before them; each sentence of a
    paragraph is translated alone, its tags on its own words, and the spaces between sentences are kept."""
    status, answer = html(server, [
        '<p class="x"><b>25</b> March <i>1965</i></p>',
        '<div><p>4 <a href="x">December <b>1954</b></a></p>\n<p>25 <img src="a.png"> March 1965 <code>x &lt; y</code>'
        '</p></div>',
        "<p><b>25</b> March 1965.  <i>Friday</i>, 2 <u>Jun</u> 1978</p>",
    ])
    assert status == 200 and answer == {"translatedText": [
        '<p class="x"><i>1965</i> 03 <b>25</b></p>',
        '<div><p><a href="x"><b>1954</b> 12</a> 04</p>\n<p>1965 03 25<img src="a.png"><code>x &lt; y</code></p></div>',
        "<p>1965 03 <b>25</b>  <i></i> 1978 <u>06 02</u></p>",  # a weekday is aligned to nothing: <i> stays empty
    ]}


def test_through_a_pivot_the_links_are_composed(server) -> None:
    """de -> en -> fr: the second model reads "1965 03 25" as "1965 11 25", its "1965" and "11" aligned to "1965"
    (the first word): <i> goes around both, <b> on "25"; "March" reaches no word."""
    assert html(server, '<p class="x"><b>25</b> March <i>1965</i></p>', "fr") == (
        200, {"translatedText": '<p class="x"><i>1965 11</i> <b>25</b></p>', "pivot": ["en"]})


@pytest.mark.parametrize(("q", "error"), [
    (["<b>25</b> March 1965", "25 < 26"], "q[1]: a '<' at line 1 starts no tag; write it as &lt;."),
    ("<p>25 March 1965", "q: <p> is never closed; close it (</p>)."),
    ("<p>25 March 1965</b></p>", "q: the end tag </b> at line 1, column 17 closes nothing open (<p> is open); close "
                                 "the elements in the order they were opened."),
    ("<b>" * 1000 + "25 March 1965" + "</b>" * 1000, "q: markup nested over 100 elements deep at line 1, column "
                                                     "301; flatten it."),
    ("<p>25 March 1965</p>" * 1025, "1025 sentences exceed the limit of 1024 per request; send them in several "
                                    "requests"),
])
def test_markup_that_cannot_be_put_back_is_a_400_naming_q(server, q, error: str) -> None:
    assert html(server, q) == (400, {"error": f"Invalid request: {error}"})


def test_a_glossary_s_terms_take_the_tags_of_the_words_they_replace(server) -> None:
    """With a glossary, the tags go around the words the translation ends with: the alignment carried over to the
    terms put in (``Glossary.apply_aligned``)."""
    status, answer, _ = request(f"{server.url}{URL}/translate", {"q": "<b>25</b> March <i>1965</i>", "source": "de",
                                                                 "target": "en", "format": "html",
                                                                 "glossary": {"1965": "the year MCMLXV"}})
    assert (status, answer) == (200, {"translatedText": "<i>the year MCMLXV</i> 03 <b>25</b>"})


def a_docx() -> bytes:
    """"25 **March** *1965*", and "4 [December](#x) 1954" with a hyperlink (to a bookmark: no relationship)."""
    document = docx.Document()
    paragraph = document.add_paragraph("25 ")
    paragraph.add_run("March").bold = True
    paragraph.add_run(" ")
    paragraph.add_run("1965").italic = True
    linked = document.add_paragraph("4 ")
    link = OxmlElement("w:hyperlink")
    link.set(qn("w:anchor"), "x")
    run = OxmlElement("w:r")
    run.append(OxmlElement("w:t"))
    run[0].text = "December"
    link.append(run)
    linked._p.append(link)
    linked.add_run(" 1954")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def an_odt() -> bytes:
    document = odfdo.Document("text")
    document.body.clear()
    paragraph = odfdo.Paragraph("25 ")
    paragraph.append(odfdo.Span("March", style="Strong"))
    paragraph.append(" ")
    paragraph.append(odfdo.Span("1965", style="Emphasis"))
    linked = odfdo.Paragraph("4 ")
    linked.append(odfdo.Link("http://x", text="December"))
    linked.append(" 1954")
    document.body.extend([paragraph, linked])
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_a_docx_and_an_odt_keep_bold_italic_and_links_on_the_aligned_words(server) -> None:
    translated_docx = docx.Document(io.BytesIO(translate_file(server, "dates.docx", a_docx())))
    plain, linked = translated_docx.paragraphs
    assert [(run.text, bool(run.bold), bool(run.italic)) for run in plain.runs] == [
        ("1965", False, True), (" ", False, False), ("03", True, False), (" 25", False, False)]
    assert [(type(item).__name__, item.text) for item in linked.iter_inner_content()] == [
        ("Run", "1954 "), ("Hyperlink", "12"), ("Run", " 04")]
    assert linked.hyperlinks[0].fragment == "x"
    translated_odt = odfdo.Document(io.BytesIO(translate_file(server, "dates.odt", an_odt())))
    plain, linked = translated_odt.body.children
    assert [plain.serialize(), linked.serialize()] == [  # odfdo writes a space beside an element as <text:s/>
        '<text:p><text:span text:style-name="Emphasis">1965</text:span><text:s/><text:span text:style-name="Strong">'
        "03</text:span><text:s/>25</text:p>",
        '<text:p>1954<text:s/><text:a xlink:href="http://x">12</text:a><text:s/>04</text:p>']


# --- without a server --------------------------------------------------------------------------------------------

def test_a_text_is_cut_at_its_blocks_and_declarations_and_nothing_is_lost() -> None:
    text = ('<!DOCTYPE html><body><p class="x">Der <b>Hund</b>.</p>\n<a href="u"><div>Block</div> nach</a>'
            '<script>if (a < b) {}</script><br/>Ende</body>')
    cut = pieces(text, Tags.of())
    assert "".join(piece for _, piece in cut) == text
    assert cut == [(True, "<!DOCTYPE html>"), (True, "<body>"), (True, '<p class="x">'), (False, "Der <b>Hund</b>."),
                   (True, "</p>"), (False, "\n"), (True, '<a href="u">'), (True, "<div>"), (False, "Block"),
                   (True, "</div>"), (False, " nach"), (True, "</a>"), (False, "<script>if (a < b) {}</script>"),
                   (True, "<br/>"), (False, "Ende"), (True, "</body>")]
    tags = Tags.of(splitting_tags=["B"], non_splitting_tags=["p"])  # as DeepL's options name them
    assert pieces("<p>x</p> <p>y</p>", tags) == [(False, "<p>x</p> <p>y</p>")]
    assert pieces("x <b>y</b> z", tags) == [(False, "x "), (True, "<b>"), (False, "y"), (True, "</b>"), (False, " z")]
    assert pieces("<p>x <b>y</b></p>", tags) == [  # an element holding a block is kept as written around it
        (True, "<p>"), (False, "x "), (True, "<b>"), (False, "y"), (True, "</b>"), (True, "</p>")]


def test_links_through_a_pivot_are_composed() -> None:
    assert compose({(0, 1), (1, 0), (2, 5)}, {(1, 2), (0, 0), (0, 3)}) == {(0, 2), (1, 0), (1, 3)}


def test_a_route_that_cannot_put_markup_back_is_refused_in_one_line() -> None:
    def route(engine: str, alignments: bool, attention: bool) -> Route:
        service = SimpleNamespace(has_alignments=alignments and attention,
                                  engine=SimpleNamespace(name=engine, spec=SimpleNamespace(alignments=alignments)))
        return Route("de", "en", (Hop(SimpleNamespace(name="de-en", service=service), "de", "en"),))

    with pytest.raises(RequestError, match=r"^format: the tags are put back by the model's attention, which the "
                                           r"ctranslate2 engine of de-en does not return; serve it with engine=torch"):
        check_route(route("ctranslate2", False, False), "format")
    with pytest.raises(RequestError, match=r"^tag_handling: .* de-en has none \(attention='none'\); send plain"):
        check_route(route("torch", True, False), "tag_handling")
    check_route(route("torch", True, True), "format")


def test_a_paragraphs_runs_are_escaped_markup_and_come_back_as_runs() -> None:
    """A "<" or "&" in a run is text; the markup's runs are made again, each in its run's formatting."""
    document = docx.Document()
    paragraph = document.add_paragraph("a < b ")
    paragraph.add_run("& c").bold = True
    paragraph.add_run("\td")
    out = io.BytesIO()
    document.save(out)
    read = read_document(".docx", out.getvalue())
    assert (read.texts, read.text_format) == (["a &lt; b <r1>&amp; c</r1><tab/>d"], "runs")
    again = docx.Document(io.BytesIO(read.rebuild(["<r1>x &lt;</r1> y<tab/>z &amp;"])))
    assert [(run.text, bool(run.bold)) for run in again.paragraphs[0].runs] == [("x <", True), (" y\tz &", False)]
