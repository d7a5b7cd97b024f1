"""File translation under LibreTranslate's API (encdec.serve.files, encdec.serve.documents): .txt, .html, .docx and
.odt files round-trip (uploaded, translated, downloaded, parsed), each paragraph what `encdec translate
--split-sentences` gives for it and in its place, a bold run's sentence bold; the settings say so; translated files
expire; bad files get LibreTranslate's error shape, naming the problem, and the server keeps serving."""

from __future__ import annotations

import html
import io
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import docx
import odfdo
import pytest

from encdec.errors import EncdecError
from encdec.serve import ServeLimits
from encdec.serve.libretranslate.files import FileSettings, FileStore
from encdec.serve.server import create_app, load_models
from encdec_cli import main
from test_libretranslate import URL
from test_sentences import PARAGRAPH, SENTENCES
from test_serve import Server, request

S = SENTENCES


def serve(pairs, api_key: str | None = None, files: FileSettings | None = None, **limits) -> Server:
    models = load_models([f"{pair}={path}" for pair, path in pairs.items()], limits=ServeLimits(**limits))
    return Server(create_app(models, api_key=api_key, files=files))


def multipart(fields: dict[str, str], file: tuple[str, bytes] | None) -> tuple[bytes, str]:
    """A multipart/form-data body of ``fields`` and ``file`` (its name and bytes), and its Content-Type."""
    boundary = uuid.uuid4().hex
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
             for name, value in fields.items()]
    if file is not None:
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{file[0]}"\r\n'
                     "Content-Type: application/octet-stream\r\n\r\n".encode() + file[1] + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def upload(server: Server, name: str, data: bytes, **fields: str) -> tuple[int, dict, dict]:
    body, content_type = multipart({"source": "de", "target": "en", **fields}, (name, data))
    return request(f"{server.url}{URL}/translate_file", raw=body, headers={"Content-Type": content_type})


def download(url: str) -> tuple[int, bytes, dict]:
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read(), dict(error.headers)


def translate_file(server: Server, name: str, data: bytes) -> bytes:
    """``data`` uploaded as ``name``, translated de -> en, downloaded."""
    status, answer, _ = upload(server, name, data)
    assert status == 200, answer
    assert answer["translatedFileUrl"].startswith(f"{server.url}{URL}/download_file/")
    assert answer["translatedFileUrl"].endswith(f"/{name}")
    status, content, headers = download(answer["translatedFileUrl"])
    assert status == 200 and headers["content-disposition"] == f'attachment; filename="{name}"'
    return content


def encdec_translate(pairs, lines: list[str], tmp_path: Path) -> dict[str, str]:
    """Each line -> what `encdec translate --split-sentences de` gives for it."""
    source = tmp_path / "lines.de"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    assert main(["translate", "--model", str(pairs["de-en"]), "--input", str(source), "--output",
                 str(tmp_path / "lines.en"), "--split-sentences", "de", "--overwrite"]) == 0
    return dict(zip(lines, (tmp_path / "lines.en").read_text(encoding="utf-8").split("\n"), strict=False))


def expected(translated: dict[str, str], text: str) -> str:
    """A paragraph's translation: each of its lines' (a paragraph's line breaks are kept)."""
    return "\n".join(translated[line] for line in text.split("\n"))


def a_docx() -> bytes:
    document = docx.Document()
    document.add_heading(S[0], 1)
    mixed = document.add_paragraph(f"{S[1]} ")
    mixed.add_run(S[2]).bold = True
    mixed.add_run(f" {S[3]}").add_break()
    mixed.add_run(S[4])
    document.add_paragraph(PARAGRAPH, style="Quote")
    document.add_paragraph("")
    table = document.add_table(rows=1, cols=2)
    table.cell(0, 0).text, table.cell(0, 1).text = S[5], f"{S[6]}  {S[7]}"
    document.sections[0].header.paragraphs[0].text = S[8]
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def docx_paragraphs(data: bytes) -> list[tuple[str, str]]:
    """(style, text) of every paragraph: the body's, the table's, the header's."""
    document = docx.Document(io.BytesIO(data))
    found = [*document.paragraphs, *(p for cell in document.tables[0].rows[0].cells for p in cell.paragraphs),
             *document.sections[0].header.paragraphs]
    return [(paragraph.style.name, paragraph.text) for paragraph in found]


def an_odt() -> bytes:
    document = odfdo.Document("text")
    document.body.clear()
    document.body.append(odfdo.Header(1, S[0]))
    mixed = odfdo.Paragraph(f"{S[1]} ")
    mixed.append(odfdo.Span(S[2], style="Strong_20_Emphasis"))
    mixed.append(f" {S[3]}")
    mixed.append(odfdo.LineBreak())
    mixed.append(S[4])
    document.body.append(mixed)
    document.body.append(odfdo.Paragraph(PARAGRAPH))
    document.body.append(odfdo.Paragraph(""))
    document.body.append(odfdo.Paragraph(f"{S[6]}  {S[7]}"))
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def odt_paragraphs(data: bytes) -> list[tuple[str, str]]:
    document = odfdo.Document(io.BytesIO(data))
    return [(element.tag, element.inner_text) for element in document.body.children]


def test_each_format_round_trips_paragraph_by_paragraph(pairs, tmp_path) -> None:
    text = f"{S[0]} {S[1]}\n\n  {S[2]}\n{PARAGRAPH}\n"
    page = f"<html><body><h1>{S[0]}</h1>\n<p>{S[1]} <i>{S[2]}</i> {S[3]}</p></body></html>"
    docx_in, odt_in = docx_paragraphs(a_docx()), odt_paragraphs(an_odt())
    lines = {line for _, paragraph in docx_in + odt_in for line in paragraph.split("\n")}
    lines |= {*text.split("\n"), S[1], S[2], S[3]}  # and the sentences of the page
    translated = encdec_translate(pairs, sorted(lines), tmp_path)
    with serve(pairs) as server:
        files = {name: translate_file(server, name, data) for name, data in (
            ("notes.txt", text.encode()), ("page.html", page.encode()), ("report.docx", a_docx()),
            ("report.odt", an_odt()))}
        _, settings, _ = request(f"{server.url}{URL}/frontend/settings")
    assert files["notes.txt"].decode() == expected(translated, text)
    e = {line: html.escape(translation, quote=False) for line, translation in translated.items()}
    # each sentence translated, the <i> around the words aligned to its own (here, all of its sentence's)
    assert files["page.html"].decode() == (f"<html><body><h1>{e[S[0]]}</h1>\n<p>{e[S[1]]} <i>{e[S[2]]}</i> "
                                           f"{e[S[3]]}</p></body></html>")
    assert docx_paragraphs(files["report.docx"]) == [(style, expected(translated, paragraph))
                                                     for style, paragraph in docx_in]
    assert odt_paragraphs(files["report.odt"]) == [(tag, expected(translated, paragraph))
                                                   for tag, paragraph in odt_in]
    assert docx_in[1][1] == f"{S[1]} {S[2]} {S[3]}\n{S[4]}" and odt_in[1][1] == docx_in[1][1]  # line breaks too
    t = [translated[sentence] for sentence in S[1:5]]  # the bold sentence's translation is bold, the rest plain
    runs = docx.Document(io.BytesIO(files["report.docx"])).paragraphs[1].runs
    assert [(run.text, bool(run.bold)) for run in runs] == [(f"{t[0]} ", False), (t[1], True),
                                                             (f" {t[2]}\n{t[3]}", False)]
    mixed = odfdo.Document(io.BytesIO(files["report.odt"])).body.children[1]
    assert [(span.inner_text, span.style) for span in mixed.get_spans()] == [(t[1], "Strong_20_Emphasis")]
    assert (settings["filesTranslation"], settings["supportedFilesFormat"]) == (True, [".txt", ".html", ".docx",
                                                                                       ".odt"])


def test_translated_files_expire_and_go_with_the_server(pairs) -> None:
    """Kept 1.2 s here, on a clock the test moves: downloadable until then, deleted by the sweeper thread
    afterwards without a request, and all deleted when the server stops."""
    now = [0.0]
    with serve(pairs, files=FileSettings(file_expiry_minutes=0.02)) as server:  # the sweeper looks every 1.2 s
        store = server.server.config.app.app.state.files.store
        store.clock = lambda: now[0]
        _, answer, _ = upload(server, "a.txt", S[0].encode())
        url = answer["translatedFileUrl"]
        assert download(url)[0] == 200
        file_id = url.split("/")[-2]
        assert (store.root / file_id / "a.txt").is_file()
        now[0] += 1.3
        deadline = time.monotonic() + 30  # the sweeper deletes it, with no request made
        while (store.root / file_id).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not (store.root / file_id).exists()
        status, body, _ = download(url)
        root = store.root
    assert status == 404 and b"it was never made, or it expired (files are kept 0.02 minutes)" in body
    assert not root.exists()


def test_a_look_up_sweeps_expired_files_first(tmp_path) -> None:
    now = [0.0]
    store = FileStore(expiry=10)
    store.clock = lambda: now[0]
    kept, gone = store.put("a.txt", b"a"), store.put("b.txt", b"b")
    now[0] = 5.0
    store.put("c.txt", b"c")
    assert store.read(kept, "a.txt") == b"a" and store.read(gone, "../b.txt") is None
    now[0] = 12.0
    assert store.read(kept, "a.txt") is None and sorted(path.name for path in store.root.iterdir()) == [
        next(iter(store.deadlines))]
    store.close()


@pytest.fixture(scope="module")
def docx_bytes() -> bytes:
    return a_docx()


def test_bad_files_are_refused_in_libretranslates_words_and_the_server_goes_on(pairs, docx_bytes) -> None:
    cases = [  # (fields, file, status, error)
        ({"source": "de", "target": "en"}, None, 400, "Invalid request: missing file parameter"),
        ({"target": "en"}, ("a.txt", b"Hallo."), 400, "Invalid request: missing source parameter"),
        ({"source": "de"}, ("a.txt", b"Hallo."), 400, "Invalid request: missing target parameter"),
        ({"source": "de", "target": "en"}, ("a.txt", b""), 400, "Invalid request: empty file"),
        ({"source": "de", "target": "en"}, ("a.pdf", b"%PDF-1.4"), 400,
         "Invalid request: file format not supported (this server takes .txt, .html, .docx, .odt)"),
        ({"source": "fr", "target": "en"}, ("a.txt", b"Salut."), 400, "fr is not supported"),
        ({"source": "de", "target": "en"}, ("a.txt", b"\xff\xfeHallo"), 400,
         "Invalid request: the .txt file is not UTF-8 text (byte 0xff at offset 0); save it as UTF-8"),
        ({"source": "de", "target": "en"}, ("a.docx", docx_bytes[:3000]), 400,
         "Invalid request: the file is not a readable .docx document (BadZipFile: File is not a zip file)"),
        ({"source": "de", "target": "en"}, ("a.odt", docx_bytes[:50_000]), 400,
         "Invalid request: the file is not a readable .odt document (KeyError: \"There is no item named "
         "'mimetype' in the archive\")"),
        ({"source": "de", "target": "en"}, ("a.txt", b"Hallo. " * 10_000), 413,
         "Invalid request: the file is larger than the limit of 60000 bytes (--max-file-bytes)"),
        ({"source": "de", "target": "en", "api_key": "open"}, ("a.txt", b"Hallo."), 403, "Invalid API key"),
    ]
    with serve(pairs, api_key="sesame", files=FileSettings(max_file_bytes=60_000)) as server:
        for fields, file, status, error in cases:
            body, content_type = multipart({"api_key": "sesame", **fields}, file)
            got = request(f"{server.url}{URL}/translate_file", raw=body, headers={"Content-Type": content_type})
            assert got[:2] == (status, {"error": error}), (fields, file and file[0])
        huge = request(f"{server.url}{URL}/translate_file", raw=multipart({}, ("a.txt", b"x" * 200_000))[0],
                       headers={"Content-Type": "multipart/form-data; boundary=x"})
        after = upload(server, "a.txt", S[0].encode(), api_key="sesame")
        text = request(f"{server.url}{URL}/translate", {"q": S[0], "source": "de", "target": "en",
                                                        "api_key": "sesame"})
    assert huge[0] == 413 and huge[1]["error"].endswith("exceed the limit of 125536 (--max-file-bytes).")
    assert after[0] == 200 and text[0] == 200


def test_a_base_url_that_ends_with_a_slash_keeps_the_file_limit(pairs) -> None:
    """``//translate_file`` (a base URL that ends with a slash) is the file route, with its body limit, not
    --max-body-bytes: the file is read, then refused for its language without decoding."""
    body, content_type = multipart({"source": "fr", "target": "en"}, ("a.txt", b"Salut. " * 3_000))
    with serve(pairs, max_body_bytes=10_000) as server:
        got = request(f"{server.url}{URL}//translate_file", raw=body, headers={"Content-Type": content_type})
        native = request(f"{server.url}/translate", raw=body, headers={"Content-Type": "application/json"})
    assert got[:2] == (400, {"error": "fr is not supported"})
    assert native[0] == 413  # the server's body limit elsewhere


def test_the_file_settings_are_checked_as_the_flags_name_them() -> None:
    with pytest.raises(EncdecError, match=r"--max-file-bytes must be a whole number >= 1, got 0"):
        FileSettings(max_file_bytes=0)
    with pytest.raises(EncdecError, match=r"--file-expiry-minutes must be > 0, got -1"):
        FileSettings(file_expiry_minutes=-1)
