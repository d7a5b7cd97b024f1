"""Documents to translate (LibreTranslate's ``/translate_file``, DeepL's ``/v2/document``): the texts of a .txt,
.html, .docx or .odt file, and the file again with each text's translation in its place.

- .txt and .html: the file is one text, translated as LibreTranslate's ``format`` ``text`` or ``html`` translates a
  ``q`` (``text``: lines and sentences cut, spacing kept, ``core.translate_parts``; ``html``: the tags kept on the
  words they enclosed, ``tagged_text.translate_markup``). UTF-8.
- .docx (python-docx) and .odt (odfdo): each paragraph (and heading, table cell paragraph; in .docx also the headers
  and footers) is one text: its runs written as markup (``documents.runs``: each run of other formatting, each
  hyperlink or link, an element carrying its index; ``text_format`` ``runs``), translated as HTML is, its sentences
  across the changes of formatting, and the translated markup made into runs again, so that bold, italic and links
  stay on the words they were on. Everything else stays as it was: paragraph styles, runs without text (pictures),
  tables, sections, notes and frames (whose own paragraphs are translated on their own). Tabs and line breaks
  inside a paragraph cut it as HTML's ``<br>`` does, and come back where they were.

Every document is read within ``Bounds`` (``encdec serve``'s file options): a .docx or .odt archive's entries, their
unpacked size and its compression ratio are checked from its directory before any of it is unpacked
(``check_archive``; zipfile reads no more of an entry than its declared size), then the paragraphs are counted
before any is read, then the characters: over a bound is ``TooLarge`` (413), naming the option that raises it. An
archive whose XML declares a DTD (external entities, entity expansion) is refused before it is parsed
(``check_declarations``). ``documents.worker`` reads and writes .docx and .odt files in worker processes.

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

from ...errors import EncdecError
from .runs import docx_paragraph, docx_rebuild, odt_paragraph, odt_rebuild, plain_text

PROLOG_BYTES = 65_536  # bytes of an XML part read for a DTD (it precedes the root element)
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


def check_declarations(data: bytes, extension: str) -> None:
    """Refuse a .docx or .odt whose XML declares a DTD: their formats never do, and a DTD's entities are how XML
    reads local files (external entities) or grows without bound (nested entities, "billion laughs"). A DTD stands in
    a part's prolog, before its root element, so the start of each part is read (the archive already checked)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for entry in archive.infolist():
            if entry.filename.endswith((".xml", ".rels")):
                with archive.open(entry) as part:
                    start = part.read(PROLOG_BYTES)
                if b"<!DOCTYPE" in start or b"<!ENTITY" in start:
                    raise DocumentError(f"{entry.filename} in this {extension} declares a DTD (<!DOCTYPE>), which "
                                        "Office and OpenDocument files never have, and whose entities could read "
                                        "files or grow without bound; save the document again from its editor")


@dataclass
class Document:
    """A file's texts to translate, how to read them (``text``, ``html``, or ``runs``: a paragraph's runs as markup,
    ``documents.runs``), and the file with their translations."""

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
    paragraphs = [docx_paragraph(Paragraph(p, story)) for root, story in roots.values() for p in root.iter(qn("w:p"))]

    def rebuild(translations: list[str]) -> bytes:
        for paragraph, translation in zip(paragraphs, translations, strict=True):
            docx_rebuild(paragraph, translation)
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()

    return Document([paragraph.markup for paragraph in paragraphs], "runs", rebuild)


def read_odt(data: bytes, bounds: Bounds) -> Document:
    """Every paragraph and heading of the body (tables, lists, frames and notes included), with its spans and
    links."""
    from odfdo import Document as OdfDocument

    try:
        document = OdfDocument(io.BytesIO(data))
        if document.get_type() != "text":
            raise ValueError(f"it is an OpenDocument {document.get_type()}, not a text")
        paragraphs = document.body.xpath("descendant::text:p | descendant::text:h")
    except Exception as error:  # odfdo raises what zipfile and lxml raise
        raise unreadable(error, ".odt") from None
    bounds.refuse("paragraphs", len(paragraphs), "max_document_paragraphs")
    found = [odt_paragraph(paragraph) for paragraph in paragraphs]  # all read before any is written

    def rebuild(translations: list[str]) -> bytes:
        for paragraph, translation in zip(found, translations, strict=True):
            odt_rebuild(paragraph, translation)
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()

    return Document([paragraph.markup for paragraph in found], "runs", rebuild)


READERS: dict[str, tuple[Callable[[bytes, Bounds], Document], str | None]] = {  # extension: (reader, library to import)
    ".txt": (read_plain, None), ".html": (read_html, None), ".docx": (read_docx, "docx"), ".odt": (read_odt, "odfdo")}


def available_formats() -> list[str]:
    """The extensions of the formats this server reads: those whose library is installed."""
    return [extension for extension, (_, library) in READERS.items()
            if library is None or importlib.util.find_spec(library) is not None]


ARCHIVES = {".docx", ".odt"}  # the formats that are zip archives (read in worker processes)


def characters(texts: list[str], text_format: str) -> list[str]:
    """The texts' characters to translate: a paragraph's without the markup of its runs."""
    return [plain_text(text) for text in texts] if text_format == "runs" else texts


def read_document(extension: str, data: bytes, bounds: Bounds | None = None) -> Document:
    """The document in ``data``, read as ``extension`` says (one of ``available_formats``) within ``bounds``."""
    bounds = bounds or Bounds()
    if extension in ARCHIVES:
        check_archive(data, extension, bounds)
        check_declarations(data, extension)
    document = READERS[extension][0](data, bounds)
    bounds.refuse("characters", sum(map(len, characters(document.texts, document.text_format))), "max_document_chars")
    return document


__all__ = ["ARCHIVES", "Bounds", "Document", "DocumentError", "TooLarge", "available_formats", "characters",
           "check_archive", "read_document"]
