"""Documents to translate (LibreTranslate's ``/translate_file``, DeepL's ``/v2/document``): the texts of a .txt,
.html, .docx or .odt file, and the file again with each text's translation in its place.

- .txt and .html: the file is one text, translated as LibreTranslate's ``format`` ``text`` or ``html`` translates a
  ``q`` (lines and sentences cut, tags and spacing kept: ``core.translate_parts``). UTF-8.
- .docx (python-docx) and .odt (odfdo): each paragraph (and heading, table cell paragraph; in .docx also the headers
  and footers) is one text. A model translates sentences, and a sentence may run across a change of formatting, so
  the paragraph is translated whole (sentence by sentence) and its translation goes into the paragraph's first
  piece of text (a .docx run, an .odt text node), which keeps its formatting; the paragraph's other pieces of text
  are emptied. Everything else stays as it was: paragraph styles, runs without text (pictures), tables, sections,
  notes and frames (whose own paragraphs are translated on their own). Tabs and line breaks inside a paragraph
  are text (``\\t``, ``\\n``): the translation's are written back as the format's tab and line break elements.

Every document is read within ``Bounds`` (``encdec serve``'s file options): a .docx or .odt archive's entries, their
unpacked size and its compression ratio are checked from its directory before any of it is unpacked
(``check_archive``; zipfile reads no more of an entry than its declared size), then the paragraphs are counted
before any is read, then the characters: over a bound is ``TooLarge`` (413), naming the option that raises it.
``documents.worker`` reads and writes .docx and .odt files in worker processes.

LibreTranslate (through argos-translate-files) also reads .odp, .pptx, .epub, .srt and .pdf; these are not offered.
The libraries are imported when a file of their format comes, and ``available_formats`` lists only the formats whose
library is installed (``encdec[serve]`` installs both), which ``/frontend/settings`` reports.
"""

from __future__ import annotations

import importlib.util
import io
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...errors import EncdecError

RATIO_GRACE = 1_000_000  # bytes: an entry unpacked to less is not held to the compression ratio (small ones vary)


class DocumentError(EncdecError):
    """A file that is not what its name says (a corrupt .docx, a .txt that is not UTF-8): the message says what.
    ``status``: the HTTP status it is answered with."""

    status = 400


class TooLarge(DocumentError):
    """A document over one of its ``Bounds`` (or over the memory a document may use): 413."""

    status = 413


@dataclass(frozen=True)
class Bounds:
    """How much of a document is read (``encdec serve``'s options of the same names)."""

    max_archive_entries: int = 1_000  # files in a .docx or .odt archive
    max_unpacked_bytes: int = 100_000_000  # their size once unpacked, all together
    max_compression_ratio: int = 100  # unpacked / packed size of an entry over RATIO_GRACE (Apache POI's 1 %)
    max_document_paragraphs: int = 100_000  # paragraphs (.docx, .odt)
    max_document_chars: int = 10_000_000  # characters of text to translate

    def refuse(self, what: str, found: int, name: str) -> None:
        """``TooLarge`` if ``found`` is over the bound ``name`` (a field), saying ``what`` is over it."""
        limit = getattr(self, name)
        if found > limit:
            flag = "--" + name.replace("_", "-")
            raise TooLarge(f"the file has {found:,} {what}, over the limit of {limit:,} ({flag}, an option of "
                           "encdec serve)")


def check_archive(data: bytes, extension: str, bounds: Bounds) -> None:
    """A .docx or .odt file's zip directory checked against ``bounds`` before anything in it is unpacked."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, EOFError) as error:
        raise DocumentError(f"the file is not a readable {extension} document ({type(error).__name__}: "
                            f"{error})") from None
    bounds.refuse("archive entries", len(entries), "max_archive_entries")
    bounds.refuse("unpacked bytes", sum(entry.file_size for entry in entries), "max_unpacked_bytes")
    for entry in entries:
        if entry.file_size > RATIO_GRACE:
            bounds.refuse(f"times compression in {entry.filename}", entry.file_size // max(1, entry.compress_size),
                          "max_compression_ratio")


@dataclass
class Document:
    """A file's texts to translate, how to cut them (``text`` or ``html``), and the file with their translations."""

    texts: list[str]
    text_format: str
    rebuild: Callable[[list[str]], bytes]  # the translations, one per text -> the translated file


def unreadable(error: Exception, extension: str) -> Exception:
    """What a library's failure to read a document is: ``MemoryError`` if it ran out of memory (lxml says so in its
    error log: ``ERR_NO_MEMORY``), else ``DocumentError`` naming the format and the library's error."""
    if isinstance(error, MemoryError) or any(entry.type_name == "ERR_NO_MEMORY"
                                             for entry in getattr(error, "error_log", ())):
        return MemoryError()
    return DocumentError(f"the file is not a readable {extension} document ({type(error).__name__}: {error})")


def read_text(data: bytes, extension: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise DocumentError(f"the {extension} file is not UTF-8 text (byte 0x{data[error.start]:02x} at offset "
                            f"{error.start}); save it as UTF-8") from None


def read_plain(data: bytes, bounds: Bounds) -> Document:
    return Document([read_text(data, ".txt")], "text", lambda translations: translations[0].encode("utf-8"))


def read_html(data: bytes, bounds: Bounds) -> Document:
    return Document([read_text(data, ".html")], "html", lambda translations: translations[0].encode("utf-8"))


def read_docx(data: bytes, bounds: Bounds) -> Document:
    """Every paragraph of the body (tables included), and of the headers and footers, with its runs."""
    import docx
    from docx.oxml.ns import qn
    from docx.text.paragraph import Paragraph

    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as error:  # python-docx raises what zipfile, its package reader and lxml raise
        raise unreadable(error, ".docx") from None
    stories = [document] + [story for section in document.sections
                            for story in (section.header, section.footer, section.first_page_header,
                                          section.first_page_footer, section.even_page_header,
                                          section.even_page_footer)
                            if not story.is_linked_to_previous]  # a linked one has no text of its own
    roots = {id(story.part.element): (story.part.element, story) for story in stories}  # the sections may share one
    counted = sum(int(root.xpath("count(.//w:p)")) for root, _ in roots.values())  # in lxml: no element made
    bounds.refuse("paragraphs", counted, "max_document_paragraphs")
    paragraphs = [Paragraph(p, story) for root, story in roots.values() for p in root.iter(qn("w:p"))]
    runs = [docx_runs(paragraph) for paragraph in paragraphs]

    def rebuild(translations: list[str]) -> bytes:
        for found, translation in zip(runs, translations, strict=True):
            place_in_runs(found, translation)
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()

    return Document(["".join(run.text for run in found) for found in runs], "text", rebuild)


def docx_runs(paragraph: Any) -> list[Any]:
    """A paragraph's runs with text, those of its hyperlinks included, in order."""
    from docx.text.hyperlink import Hyperlink

    runs = [run for item in paragraph.iter_inner_content()
            for run in (item.runs if isinstance(item, Hyperlink) else [item])]
    return [run for run in runs if run.text]


def place_in_runs(runs: list[Any], translation: str) -> None:
    """The translation in the first run (python-docx writes ``\\t`` and ``\\n`` as tab and break elements), the
    other runs' text emptied; a paragraph without text stays as it is."""
    if runs and "".join(run.text for run in runs) != translation:
        runs[0].text = translation
        for run in runs[1:]:
            run.text = ""


ODF_CHARACTERS = {"text:s", "text:tab", "text:line-break"}  # elements that stand for characters of the text
ODF_OWN_TEXT = {"text:p", "text:h", "text:note", "office:annotation", "draw:frame"}  # with paragraphs of their own


def read_odt(data: bytes, bounds: Bounds) -> Document:
    """Every paragraph and heading of the body (tables, lists, frames and notes included), with its text nodes."""
    from odfdo import Document as OdfDocument

    try:
        document = OdfDocument(io.BytesIO(data))
        if document.get_type() != "text":
            raise ValueError(f"it is an OpenDocument {document.get_type()}, not a text")
        paragraphs = document.body.xpath("descendant::text:p | descendant::text:h")
    except Exception as error:  # odfdo raises what zipfile and lxml raise
        raise unreadable(error, ".odt") from None
    bounds.refuse("paragraphs", len(paragraphs), "max_document_paragraphs")

    def rebuild(translations: list[str]) -> bytes:
        for paragraph, translation in zip(paragraphs, translations, strict=True):
            if odf_text(paragraph) != translation:
                place_in_nodes(paragraph, translation)
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()

    return Document([odf_text(paragraph) for paragraph in paragraphs], "text", rebuild)


def odf_text(element: Any) -> str:
    """A paragraph's own text: its text nodes and character elements, without the paragraphs inside it."""
    text = element.text or ""
    for child in element.children:
        if child.tag == "text:s":
            text += " " * (child.get_attribute_integer("text:c") or 1)
        elif child.tag in ODF_CHARACTERS:
            text += "\t" if child.tag == "text:tab" else "\n"
        elif child.tag not in ODF_OWN_TEXT:
            text += odf_text(child)
        text += child.tail or ""
    return text


def odf_slots(element: Any) -> list[tuple[Any, str]]:
    """The places a paragraph's own text lies, in order: (element, ``text`` or ``tail``)."""
    slots = [(element, "text")]
    for child in element.children:
        if child.tag not in ODF_OWN_TEXT:
            slots += odf_slots(child)
        slots.append((child, "tail"))
    return slots


def place_in_nodes(paragraph: Any, translation: str) -> None:
    """The translation in the paragraph's first text node, with its spaces, tabs and line breaks as odfdo writes
    them; the character elements that were text and the other text nodes emptied."""
    from odfdo import Paragraph

    for element, where in odf_slots(paragraph):
        if element.tag in ODF_CHARACTERS and where == "tail":
            element.parent.delete(element)  # its tail joins the text before it
    slots = [(element, where) for element, where in odf_slots(paragraph) if getattr(element, where)]
    if not slots:
        return
    for element, where in slots:
        setattr(element, where, None)
    written = Paragraph(translation)  # text, then text:s / text:tab / text:line-break elements with their tails
    owner, where = slots[0]
    setattr(owner, where, written.text)
    parent, start = (owner, 0) if where == "text" else (owner.parent, owner.parent.index(owner) + 1)
    for k, child in enumerate(written.children):
        parent.insert(child, position=start + k)


READERS: dict[str, tuple[Callable[[bytes, Bounds], Document], str | None]] = {  # extension: (reader, library to import)
    ".txt": (read_plain, None), ".html": (read_html, None), ".docx": (read_docx, "docx"), ".odt": (read_odt, "odfdo")}


def available_formats() -> list[str]:
    """The extensions of the formats this server reads: those whose library is installed."""
    return [extension for extension, (_, library) in READERS.items()
            if library is None or importlib.util.find_spec(library) is not None]


ARCHIVES = {".docx", ".odt"}  # the formats that are zip archives (read in worker processes)


def read_document(extension: str, data: bytes, bounds: Bounds | None = None) -> Document:
    """The document in ``data``, read as ``extension`` says (one of ``available_formats``) within ``bounds``."""
    bounds = bounds or Bounds()
    if extension in ARCHIVES:
        check_archive(data, extension, bounds)
    document = READERS[extension][0](data, bounds)
    bounds.refuse("characters", sum(len(text) for text in document.texts), "max_document_chars")
    return document


__all__ = ["ARCHIVES", "Bounds", "Document", "DocumentError", "TooLarge", "available_formats", "check_archive",
           "read_document"]
