"""File translation within bounds (encdec.serve.documents.formats, .worker, .fair_share, .files): a zip bomb and a
file of empty paragraphs are refused from the archive's directory and the paragraph count, naming the option; a
worker that runs out of memory or dies fails its upload alone; a large file leaves room in the queue for other
clients; the translated files of a killed server are deleted by the next one; a chunked upload over the limit is a
413; a folder that cannot hold translated files is refused at start and before a request is counted."""

from __future__ import annotations

import asyncio
import http.client
import io
import json
import os
import shutil
import threading
import zipfile

import psutil
import pytest

from encdec.errors import EncdecError
from encdec.serve.documents import worker as document_worker
from encdec.serve.documents.formats import Bounds, TooLarge, read_document
from encdec.serve.documents.worker import DocumentPool, WorkerDied, extract
from encdec.serve.held_batches import HOLD_ENV
from encdec.serve.libretranslate.files import FileSettings, FileStore
from encdec_cli import main
from test_libretranslate import URL
from test_sentences import SENTENCES
from test_serve import ServeProcess, request
from test_translate_file import a_docx, an_odt, multipart, serve, upload

WORD = b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"><w:body>'


def with_document_xml(repeat: int, chunk: bytes) -> bytes:
    """``a_docx()`` with its word/document.xml replaced by ``chunk`` written ``repeat`` times (streamed: the whole
    entry is never in memory) between the document's opening and closing tags."""
    source = zipfile.ZipFile(io.BytesIO(a_docx()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            if info.filename != "word/document.xml":
                archive.writestr(info, source.read(info.filename))
                continue
            with archive.open(info.filename, "w", force_zip64=True) as entry:
                entry.write(WORD)
                for _ in range(repeat):
                    entry.write(chunk)
                entry.write(b"</w:body></w:document>")
    return out.getvalue()


@pytest.fixture(scope="module")
def zip_bomb() -> bytes:
    """A .docx of under 1 MB whose word/document.xml unpacks to 600 MiB."""
    return with_document_xml(repeat=600, chunk=b" " * 2**20)


def test_a_zip_bomb_is_refused_from_its_directory_and_the_server_does_not_grow(pairs, zip_bomb) -> None:
    assert len(zip_bomb) < 2**20
    process = psutil.Process()
    with serve(pairs) as server:
        upload(server, "warm.docx", a_docx())
        before = process.memory_info().rss
        status, answer, _ = upload(server, "bomb.docx", zip_bomb)
        grown = process.memory_info().rss - before
    unpacked = sum(entry.file_size for entry in zipfile.ZipFile(io.BytesIO(zip_bomb)).infolist())
    assert (status, answer) == (413, {"error": f"Invalid request: the file has {unpacked:,} unpacked bytes, over the "
                                               "limit of 100,000,000 (--max-unpacked-bytes, an option of encdec "
                                               "serve)"})
    assert grown < 50 * 2**20  # the file itself and the form: never the 600 MiB


def test_the_server_does_not_grow_with_ordinary_docx_uploads(pairs) -> None:
    """.docx files are read and written in worker processes, whose native memory (python-docx's, lxml's) goes when
    they are replaced: the server's own memory stays flat over many uploads (in the server's process it grew 0.25 to
    0.5 MiB an upload, kept by lxml in the threads that parsed)."""
    document, process = a_docx(), psutil.Process()
    with serve(pairs) as server:
        for _ in range(10):  # warm-up: the pool, the batcher, the translations' caches
            assert upload(server, "warm.docx", document)[0] == 200
        before = process.memory_info().rss
        for _ in range(80):
            assert upload(server, "again.docx", document)[0] == 200
        grown = process.memory_info().rss - before
    assert grown < 8 * 2**20, f"the server grew {grown / 2**20:.1f} MiB over 80 .docx uploads"


def test_empty_paragraphs_are_refused_by_ratio_and_by_count_without_being_read() -> None:
    """874,000 empty paragraphs (a 42 KB file): over the compression ratio, and with that raised, over the
    paragraph count, which is checked before any paragraph is read; an .odt and the characters likewise."""
    paragraphs = with_document_xml(repeat=874_000, chunk=b"<w:p/>")
    assert len(paragraphs) < 100_000
    with pytest.raises(TooLarge, match=r"^the file has \d+ times compression in word/document.xml, over the limit "
                                       r"of 100 \(--max-compression-ratio, an option of encdec serve\)$"):
        read_document(".docx", paragraphs)
    with pytest.raises(TooLarge, match=r"874,000 paragraphs, over the limit of 100,000 \(--max-document-paragraphs"):
        read_document(".docx", paragraphs, Bounds(max_compression_ratio=10_000))
    with pytest.raises(TooLarge, match=r"^the file has 5 paragraphs, over the limit of 4 \(--max-document-par"):
        read_document(".odt", an_odt(), Bounds(max_document_paragraphs=4))
    with pytest.raises(TooLarge, match=r"^the file has 18 archive entries, over the limit of 11 \(--max-archive-en"):
        read_document(".docx", a_docx(), Bounds(max_archive_entries=11))
    with pytest.raises(TooLarge, match=r"^the file has 100 characters, over the limit of 99 \(--max-document-chars"):
        read_document(".txt", b"x" * 100, Bounds(max_document_chars=99))


def test_a_document_worker_out_of_memory_or_dead_fails_its_document_alone() -> None:
    """A document that needs more than --document-memory-mb is TooLarge (413); a worker that dies is WorkerDied
    (500); the next document is read by a new worker."""
    big = with_document_xml(repeat=200_000, chunk=b"<w:p><w:r><w:t>Hallo Welt, wie geht es dir?</w:t></w:r></w:p>")

    async def run(pool: DocumentPool) -> list[object]:
        found = []
        for task in ((extract, ".docx", big, Bounds(max_compression_ratio=10_000, max_document_paragraphs=10**6)),
                     (os._exit,), (extract, ".docx", a_docx(), Bounds())):
            try:
                found.append(await pool.run(*task))
            except (TooLarge, WorkerDied) as error:
                found.append(type(error))
        return found

    pool = DocumentPool(memory_mb=64)
    try:
        found = asyncio.run(run(pool))
    finally:
        pool.close()
    assert found[:2] == [TooLarge, WorkerDied] and found[2] == read_document(".docx", a_docx()).texts
    assert (TooLarge.status, WorkerDied.status) == (413, 500)


def test_without_max_tasks_per_child_the_pool_is_replaced_after_its_tasks(monkeypatch) -> None:
    """Python 3.10 has no ``max_tasks_per_child``: there the pool itself is replaced after as many documents."""
    monkeypatch.setattr(document_worker, "NATIVE_RECYCLING", False)
    monkeypatch.setattr(document_worker, "TASKS_PER_CHILD", 1)

    async def run(pool: DocumentPool) -> list[tuple[list[str], object]]:
        return [(await pool.run(extract, ".odt", an_odt(), Bounds()), pool.executor) for _ in range(2)]

    pool = DocumentPool(memory_mb=256)
    try:
        (texts, first), (again, second) = asyncio.run(run(pool))
    finally:
        pool.close()
    assert None is not first is not second is not None
    assert texts == again == read_document(".odt", an_odt()).texts


def test_a_large_file_leaves_room_in_the_queue_for_other_clients(pairs, monkeypatch) -> None:
    """With --max-queue 8 and the batcher held, a file of 40 lines queues 4 of its sentences (2 chunks of 2), so a
    text request from another client is queued too (not a 503); both are answered once the batcher runs."""
    monkeypatch.setenv(HOLD_ENV, "1")
    lines = [SENTENCES[i % len(SENTENCES)] for i in range(40)]
    found: dict[str, tuple] = {}
    with serve(pairs, max_queue=8, max_batch_size=4) as server:
        batcher = server.server.config.app.app.state.batchers["de-en"]
        file_thread = threading.Thread(target=lambda: found.setdefault(
            "file", upload(server, "long.txt", "\n".join(lines).encode())))
        text_thread = threading.Thread(target=lambda: found.setdefault("text", request(
            f"{server.url}{URL}/translate", {"q": SENTENCES[0], "source": "de", "target": "en"})))
        file_thread.start()
        assert batcher.wait_held(4, timeout=60)
        text_thread.start()
        assert batcher.wait_held(5, timeout=60)
        held = batcher.held
        batcher.release()
        for thread in (file_thread, text_thread):
            thread.join(timeout=120)
    assert found["text"][0] == 200, found["text"]
    assert found["file"][0] == 200 and held == 5


def test_a_killed_server_s_files_are_deleted_by_the_next_and_live_ones_are_kept(pairs, tmp_path) -> None:
    """``kill -9`` of a real ``encdec serve``: its folder stays (nothing ran at exit); the next server on the same
    --files-dir deletes it at start, and keeps its own; two live stores never delete each other's files."""
    with ServeProcess("--model", f"de-en={pairs['de-en']}", "--files-dir", str(tmp_path)) as killed:
        body, content_type = multipart({"source": "de", "target": "en"}, ("a.txt", SENTENCES[0].encode()))
        assert request(f"{killed.url}{URL}/translate_file", raw=body, headers={"Content-Type": content_type})[0] == 200
        killed.process.kill()  # SIGKILL
        killed.process.wait(timeout=30)
    (old,) = [path for path in tmp_path.iterdir() if path.is_dir()]
    assert [path.name for path in old.rglob("*.txt")] == ["a.txt"]
    with serve(pairs, files=FileSettings(files_dir=str(tmp_path))) as server:
        store = server.server.config.app.app.state.files.store
        assert not old.exists() and [path for path in tmp_path.iterdir() if path.is_dir()] == [store.root]
    assert list(tmp_path.iterdir()) == []
    first, second = FileStore(60, tmp_path), FileStore(60, tmp_path)
    kept = first.put("a.txt", b"a"), second.put("b.txt", b"b")
    first.sweep_orphans()
    second.sweep_orphans()
    assert first.read(kept[0], "a.txt") == b"a" and second.read(kept[1], "b.txt") == b"b"
    first.close()
    second.sweep_orphans()
    assert second.read(kept[1], "b.txt") == b"b"
    second.close()


def test_a_chunked_upload_over_the_file_limit_is_a_413(pairs) -> None:
    body, content_type = multipart({"source": "de", "target": "en"}, ("a.txt", b"Hallo. " * 20_000))
    with serve(pairs, files=FileSettings(max_file_bytes=1000)) as server:
        host, port = server.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        connection.request("POST", f"{URL}/translate_file", body=iter([body[:1000], body[1000:]]),
                           headers={"Content-Type": content_type}, encode_chunked=True)  # no Content-Length
        response = connection.getresponse()
        status, answer = response.status, json.loads(response.read())
        connection.close()
    assert (status, answer) == (413, {"error": "Invalid request: the file is larger than the limit of 1000 bytes "
                                               "(--max-file-bytes)"})


def test_a_folder_that_cannot_keep_files_is_refused_at_start_and_before_counting(pairs, tmp_path, capsys) -> None:
    """At start, in one line before the models load; while serving, a 503 before the request is counted (the
    client's one request a minute is still there for a text)."""
    (tmp_path / "a-file").write_text("x")
    below_a_file = str(tmp_path / "a-file" / "files")
    with pytest.raises(EncdecError, match=r"^--files-dir .*a-file/files: translated files cannot be kept there \("
                                          r".*a-file is not a folder\); give a folder this user can write\.$"):
        FileSettings(files_dir=below_a_file)
    assert main(["serve", "--model", str(pairs["de-en"]), "--files-dir", below_a_file, "--port", "0"]) == 2
    assert "--files-dir" in capsys.readouterr().err
    with serve(pairs, req_limit=1, files=FileSettings(files_dir=str(tmp_path / "files"))) as server:
        store = server.server.config.app.app.state.files.store
        shutil.rmtree(store.root)
        store.root.write_text("not a folder any more")
        refused = upload(server, "a.txt", SENTENCES[0].encode())
        text = request(f"{server.url}{URL}/translate", {"q": SENTENCES[0], "source": "de", "target": "en"})
        store.root.unlink()
        store.root.mkdir()
    assert refused[0] == 503 and "(--files-dir)" in refused[1]["error"]
    assert text[0] == 200
