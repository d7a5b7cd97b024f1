"""A .docx or .odt paragraph's runs as one text with markup, and the translated markup made into runs again, so that
bold, italic and links stay on the words they were on (the server translates the markup as it translates HTML:
``encdec.serve.tagged_text``).

A paragraph is one text. Each piece whose formatting is not the paragraph's plain one is a synthetic element that
carries its index: ``<r3>...</r3>`` (a .docx run, consecutive runs of one formatting together; an .odt span),
``<link1>...</link1>`` (a .docx hyperlink, an .odt link), and ``<keep2/>`` (an .odt element that is not text to
translate: a note, a frame, a bookmark, a field), put back by the alignment as one piece. A tab is ``<tab/>`` and a
line break ``<br/>``, which cut the paragraph into blocks as HTML's ``<br>`` does (``SPLITTING_TAGS``); the text is
escaped, so that a ``<`` or ``&`` in a run is text. The plain formatting of a .docx paragraph is that of its runs
without properties, else that of its most characters (the first such run); in an .odt, the paragraph's own text.
The translation's elements become runs again: each element's text in a copy of its run's formatting (a .docx run's
properties, an .odt span's or link's attributes), the text outside them in the plain formatting. Runs without text
(pictures) stay where they were.

Standard library (``html.parser``) and the document's own library (python-docx, odfdo), in the worker process that
reads the document (``documents.worker``).
"""

from __future__ import annotations

import copy
import html
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any

SPLITTING_TAGS = frozenset({"tab"})  # cut a paragraph into blocks, as <br/> does (a tab separates, as a column)
TAGS = {"ignored": (), "splitting_tags": SPLITTING_TAGS}  # how ``tagged_text.translate_markup`` reads the markup
SYNTHETIC = re.compile(r"(r|link|keep)(\d+)")
DOCX_TEXT = "w:br | w:cr | w:noBreakHyphen | w:ptab | w:t | w:tab"  # what python-docx reads as a run's text


@dataclass
class Node:
    """An element of a paragraph's markup: its name, and its content (None: an element that stands alone)."""

    name: str
    children: list[Node | str] | None = None

    @property
    def index(self) -> tuple[str, int]:
        """(``r``, ``link`` or ``keep``, the index it carries)."""
        found = SYNTHETIC.fullmatch(self.name)
        return (found[1], int(found[2])) if found else ("", -1)


def escaped(text: str) -> str:
    """Text as markup: escaped, tabs and line breaks as their elements."""
    return html.escape(text, quote=False).replace("\t", "<tab/>").replace("\n", "<br/>")


def write(nodes: list[Node | str]) -> str:
    out = []
    for node in nodes:
        if isinstance(node, str):
            out.append(escaped(node))
        else:
            out.append(f"<{node.name}/>" if node.children is None else
                       f"<{node.name}>{write(node.children)}</{node.name}>")
    return "".join(out)


def plain_text(markup: str) -> str:
    """A paragraph's text without its markup (what its characters are counted on)."""
    return html.unescape(re.sub(r"<[^>]*>", "", markup.replace("<tab/>", "\t").replace("<br/>", "\n")))


class _Tree(HTMLParser):
    """Markup that ``write`` or the translation wrote, as ``Node``s (tabs and line breaks as text again)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[list[Node | str]] = [[]]

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in ("tab", "br"):
            self.handle_data("\t" if tag == "tab" else "\n")
            return
        node = Node(tag, [])
        self.stack[-1].append(node)
        self.stack.append(node.children)

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self.handle_data("\t" if tag == "tab" else "\n") if tag in ("tab", "br") else self.stack[-1].append(Node(tag))

    def handle_endtag(self, tag: str) -> None:
        if tag not in ("tab", "br") and len(self.stack) > 1:
            self.stack.pop()

    def handle_data(self, data: str) -> None:
        if self.stack[-1] and isinstance(self.stack[-1][-1], str):
            self.stack[-1][-1] += data
        else:
            self.stack[-1].append(data)


def read(markup: str) -> list[Node | str]:
    tree = _Tree()
    tree.feed(markup)
    tree.close()
    return tree.stack[0]


# --- .docx ---------------------------------------------------------------------------------------------------------

@dataclass
class DocxParagraph:
    """A .docx paragraph's runs with text (``runs``, python-docx ``Run``s), the hyperlink each is in (an index into
    ``links``, their elements), the run of plain formatting, and its markup."""

    paragraph: Any
    runs: list[Any] = field(default_factory=list)
    in_link: list[int | None] = field(default_factory=list)
    links: list[Any] = field(default_factory=list)
    plain: int = 0
    markup: str = ""


def docx_paragraph(paragraph: Any) -> DocxParagraph:
    """A paragraph's runs with text, those of its hyperlinks included, in order, and its markup."""
    from docx.text.hyperlink import Hyperlink

    found = DocxParagraph(paragraph)
    for item in paragraph.iter_inner_content():
        if isinstance(item, Hyperlink):
            found.links.append(item._hyperlink)
        for run in item.runs if isinstance(item, Hyperlink) else [item]:
            if run.text:
                found.runs.append(run)
                found.in_link.append(len(found.links) - 1 if isinstance(item, Hyperlink) else None)
    formats = [formatting(run) for run in found.runs]
    sizes: dict[bytes, int] = {}
    for run, key in zip(found.runs, formats, strict=True):
        sizes[key] = sizes.get(key, 0) + len(run.text)
    # runs without properties, else the formatting of the most characters (the first of them)
    found.plain = formats.index(max(sizes, key=lambda key: (not key, sizes[key]))) if formats else 0
    found.markup = write(docx_nodes(found, formats))
    return found


def formatting(run: Any) -> bytes:
    """A run's properties as written (what makes two runs look alike)."""
    from lxml import etree

    properties = run._r.rPr
    return b"" if properties is None else etree.tostring(properties)


def docx_nodes(found: DocxParagraph, formats: list[bytes]) -> list[Node | str]:
    """The markup of a paragraph's runs: consecutive runs of one formatting and link together, each formatting but
    the plain one an ``r`` element (its first run's index), each hyperlink a ``link`` element around its runs."""
    nodes: list[Node | str] = []
    last: tuple[int | None, bytes] | None = None  # the link and formatting of the run before
    for k, run in enumerate(found.runs):
        link, key = found.in_link[k], formats[k]
        if link is not None and (last is None or last[0] != link):
            nodes.append(Node(f"link{link}", []))
        holder = nodes if link is None else nodes[-1].children
        if last == (link, key):  # the same formatting goes on: one piece
            if isinstance(holder[-1], str):
                holder[-1] += run.text
            else:
                holder[-1].children[0] += run.text
        else:
            holder.append(run.text if key == formats[found.plain] else Node(f"r{k}", [run.text]))
        last = (link, key)
    return nodes


def docx_rebuild(found: DocxParagraph, translation: str) -> None:
    """The translation's runs in place of the paragraph's runs with text (module docstring)."""
    if translation == found.markup or not found.runs:
        return
    paragraph = found.paragraph._p
    anchor = found.runs[0]._r
    while anchor.getparent() is not paragraph:  # a run of a hyperlink: before the hyperlink
        anchor = anchor.getparent()
    made, open_link = [], None
    for text, run, link in flat(read(translation)):
        element = docx_run(found, found.plain if run is None else run, text)
        if link is None:
            made.append(element)
            open_link = None
            continue
        if open_link is None or open_link[0] != link:
            open_link = (link, copy.deepcopy(found.links[link]))
            for old in open_link[1].xpath("w:r"):  # its runs are the translation's
                open_link[1].remove(old)
            made.append(open_link[1])
        open_link[1].append(element)
    for element in made:
        anchor.addprevious(element)
    remove_text(found)


def flat(nodes: list[Node | str], run: int | None = None, link: int | None = None
         ) -> list[tuple[str, int | None, int | None]]:
    """(text, its run, its hyperlink) of a .docx paragraph's translated markup, in order."""
    out = []
    for node in nodes:
        if isinstance(node, str):
            out.append((node, run, link))
        elif node.children is not None:
            kind, index = node.index
            out += flat(node.children, index if kind == "r" else run, index if kind == "link" else link)
    return [piece for piece in out if piece[0]]


def docx_run(found: DocxParagraph, template: int, text: str) -> Any:
    """A new run of ``text`` with the properties of the paragraph's run ``template``."""
    from docx.oxml import OxmlElement
    from docx.text.run import Run

    element = OxmlElement("w:r")
    properties = found.runs[template]._r.rPr
    if properties is not None:
        element.append(copy.deepcopy(properties))
    Run(element, found.paragraph).text = text  # python-docx writes \t and \n as tab and break elements
    return element


def remove_text(found: DocxParagraph) -> None:
    """The old runs' text removed: a run left with nothing but its properties goes, and a hyperlink left without
    runs; a page break or a picture stays."""
    for run in found.runs:
        element = run._r
        for piece in element.xpath(DOCX_TEXT):
            if str(piece):
                element.remove(piece)
        if all(child is element.rPr for child in element) and element.getparent() is not None:
            element.getparent().remove(element)
    for link in found.links:
        if not link.xpath("w:r") and link.getparent() is not None:
            link.getparent().remove(link)


# --- .odt ----------------------------------------------------------------------------------------------------------

ODF_CHARACTERS = {"text:s": " ", "text:tab": "\t", "text:line-break": "\n"}  # elements that stand for characters
ODF_MARKUP = {"text:span": "r", "text:a": "link"}  # elements around text, kept around its translation


@dataclass
class OdtParagraph:
    """An .odt paragraph (or heading), its elements by the index their markup carries, and its markup."""

    paragraph: Any
    elements: list[Any] = field(default_factory=list)
    markup: str = ""


def odt_paragraph(paragraph: Any) -> OdtParagraph:
    found = OdtParagraph(paragraph)
    found.markup = write(odt_nodes(paragraph, found.elements))
    return found


def odt_nodes(element: Any, elements: list[Any]) -> list[Node | str]:
    """The markup of an element's content: its text, spans and links around theirs, spaces, tabs and line breaks as
    text, and any other element (a note, a frame, a bookmark, a field) a ``keep`` element standing alone."""
    nodes: list[Node | str] = [element.text] if element.text else []
    for child in element.children:
        if child.tag in ODF_CHARACTERS:
            count = (child.get_attribute_integer("text:c") or 1) if child.tag == "text:s" else 1
            nodes.append(ODF_CHARACTERS[child.tag] * count)
        else:
            elements.append(child)
            name = f"{ODF_MARKUP.get(child.tag, 'keep')}{len(elements) - 1}"
            nodes.append(Node(name, odt_nodes(child, elements)) if child.tag in ODF_MARKUP else Node(name))
        if child.tail:
            nodes.append(child.tail)
    return nodes


def odt_rebuild(found: OdtParagraph, translation: str) -> None:
    """The paragraph's content made again from its translated markup (module docstring)."""
    if translation == found.markup:
        return
    paragraph = found.paragraph
    paragraph.text = None
    for child in paragraph.children:
        child.tail = None
        paragraph.delete(child)
    odt_append(paragraph, read(translation), found.elements)


def odt_append(parent: Any, nodes: list[Node | str], elements: list[Any]) -> None:
    for node in nodes:
        if isinstance(node, str):
            parent.append(node)  # odfdo writes spaces, tabs and line breaks as their elements
            continue
        kind, index = node.index
        if not 0 <= index < len(elements):
            continue
        if kind == "keep":
            elements[index].tail = None
            parent.append(elements[index])
            continue
        made = elements[index].clone  # its attributes (its style, its link), none of its content
        made.text = made.tail = None
        for child in made.children:
            made.delete(child)
        parent.append(made)
        odt_append(made, node.children or [], elements)


__all__ = ["SPLITTING_TAGS", "TAGS", "DocxParagraph", "OdtParagraph", "docx_paragraph", "docx_rebuild", "odt_paragraph",
           "odt_rebuild", "plain_text"]
