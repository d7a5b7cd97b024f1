"""File translation under LibreTranslate's API: ``POST /libretranslate/translate_file`` and the translated files'
``GET /libretranslate/download_file/<id>/<name>``.

``translate_file`` takes a multipart form, as LibreTranslate's: ``file`` (.txt, .html, .docx or .odt:
``encdec.serve.documents.formats.available_formats``), ``source``, ``target`` and ``api_key``. It reads the file's texts
(``encdec.serve.documents``, within the bounds of ``FileSettings``: a .docx or .odt in a worker process),
translates them sentence by sentence on the model's batcher as the text API does (a .txt as ``format: "text"``,
``core.translate_parts``; an .html as ``format: "html"``, and a .docx or .odt paragraph's runs as markup,
``tagged_text.translate_markup``, so that formatting stays on its words), a few batches at a time so that other
clients' requests run between them (``fair_share``), writes the file again with the translations in place, and answers
``{"translatedFileUrl": "http://HOST/libretranslate/download_file/<id>/<name>"}``. The id is 128 random bits: as
in LibreTranslate, downloading needs no key.

A translated file is kept ``--file-expiry-minutes`` (30) in this server's own folder under ``--files-dir`` (by
default ``encdec-files-<user id>`` in the system's temporary folder), then deleted by a sweeper thread that runs
while the server does (and before each download); the server's stop deletes its folder. A server holds a lock on
its folder while it runs (``filelock``: the system drops it when the process ends, however it ends), so the next
server to start on the same ``--files-dir`` deletes the folders of servers that were killed (``kill -9``, out of
memory): their files could no longer be downloaded. Servers that share a ``--files-dir`` never delete each other's
files while they run. A files folder that cannot be written is refused at start, and a request finds it out
before it is counted (503).

The key and the request limit apply as to ``/translate`` (``LibreTranslateAPI.admit``: a missing key 400, a wrong
one 403, over the limit 429): a file is one request, and with a character limit (``--char-limit`` or the key's) it
costs, as LibreTranslate charges a file, its characters over the limit in requests (at least one); a file is not
refused for its length under the limit of characters (``--max-document-chars``).

Refused in LibreTranslate's words and shape (``{"error": ...}``, 400): a missing file, source or target; an empty
file; a format not offered; a language not served; a file that is not what its name says (a corrupt .docx, a .txt
that is not UTF-8); and with 413 a file over ``--max-file-bytes`` (10 MB, also sent in chunks without a
Content-Length) or over a bound of ``documents.Bounds`` (the option named). The server's body limit
(``--max-body-bytes``) does not apply to this route: its body may hold the largest file and the form's fields.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from filelock import FileLock, Timeout
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...errors import EncdecError
from ..core import Plan
from ..documents.formats import (
    Bounds,
    DocumentError,
    available_formats,
    characters,
)
from ..documents.runs import TAGS
from ..documents.worker import DocumentPool
from ..fair_share import FairShare
from ..limits import client_address
from .api import (
    ERROR_SCHEMA,
    PREFIX,
    STRING,
    LibreTranslateAPI,
    Refusal,
    choose,
    file_cost,
    request_body,
    translate_texts,
)
from .routes import add_preflights

logger = logging.getLogger("encdec.serve")

FORM_BYTES = 64 * 1024  # room in an upload's body for the form's other fields and the multipart headers
SWEEP_SECONDS = 60.0  # the sweeper looks for expired files this often (more often when they expire sooner)
MEDIA_TYPES = {".txt": "text/plain; charset=utf-8", ".html": "text/html; charset=utf-8",
               ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
               ".odt": "application/vnd.oasis.opendocument.text"}


def default_files_dir() -> Path:
    """Where translated files are kept without ``--files-dir``: one folder per user in the temporary folder."""
    return Path(tempfile.gettempdir()) / f"encdec-files-{os.getuid() if hasattr(os, 'getuid') else 'user'}"


def unwritable(folder: Path) -> str | None:
    """Why ``folder`` (or, if it is not there yet, the nearest folder above it) cannot hold files; None if it can."""
    found = next((path for path in (folder, *folder.parents) if path.exists()), None)
    if found is None or not found.is_dir():
        return f"{found} is not a folder"
    if not os.access(found, os.W_OK | os.X_OK):
        return f"{found} is not writable by this user"
    return None


@dataclass(frozen=True)
class FileSettings:
    """What file translation accepts and keeps (``encdec serve`` options of the same names; the bounds of a
    document: ``documents.Bounds``)."""

    max_file_bytes: int = 10_000_000  # the largest file to translate
    file_expiry_minutes: float = 30.0  # how long a translated file can be downloaded
    files_dir: str | None = None  # where translated files are kept (None: default_files_dir())
    document_memory_mb: int = 1024  # what a worker may take to read and write one .docx or .odt
    max_archive_entries: int = Bounds.max_archive_entries
    max_unpacked_bytes: int = Bounds.max_unpacked_bytes
    max_compression_ratio: int = Bounds.max_compression_ratio
    max_document_paragraphs: int = Bounds.max_document_paragraphs
    max_document_chars: int = Bounds.max_document_chars

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.type == "int" and (not isinstance(value, int) or value < 1):
                raise EncdecError(f"--{field.name.replace('_', '-')} must be a whole number >= 1, got {value!r}.")
        if not self.file_expiry_minutes > 0:
            raise EncdecError(f"--file-expiry-minutes must be > 0, got {self.file_expiry_minutes!r}.")
        if (why := unwritable(self.folder)) is not None:
            raise EncdecError(f"--files-dir {self.folder}: translated files cannot be kept there ({why}); give a "
                              "folder this user can write.")

    @property
    def folder(self) -> Path:
        return Path(self.files_dir) if self.files_dir else default_files_dir()

    @property
    def bounds(self) -> Bounds:
        return Bounds(**{field.name: getattr(self, field.name) for field in dataclasses.fields(Bounds)})


class FileStore:
    """Translated files, each in a folder of its own (its id) in this store's folder under ``base``, made (with its
    lock, module docstring) by ``open``, which ``start`` and the first ``put`` call. Each is deleted ``expiry``
    seconds after it was written: by ``sweep``, which a thread runs while the store is started and which every
    look-up runs first; ``close`` stops the thread and deletes them all. ``open`` and the sweeper also delete the
    folders of stores whose process has ended (their lock is free)."""

    def __init__(self, expiry: float, base: str | Path | None = None) -> None:
        self.expiry, self.base, self.root = expiry, Path(base) if base else default_files_dir(), None
        self.held: FileLock | None = None  # the lock on ``root`` (``<root>.lock``) while the store is open
        self.clock = time.monotonic  # what the deadlines are read on (a test sets its own)
        self.deadlines: dict[str, float] = {}  # id -> when it expires (on ``clock``)
        self.lock, self.stopped = threading.Lock(), threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.open()
        self.stopped.clear()
        self.thread = threading.Thread(target=self.run, name="encdec-file-sweeper", daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stopped.wait(min(SWEEP_SECONDS, self.expiry)):
            self.sweep()
            self.sweep_orphans()

    def open(self) -> None:
        """This store's folder, locked, after deleting the folders that no running store holds."""
        with self.lock:
            if self.root is not None:
                return
            self.base.mkdir(mode=0o700, parents=True, exist_ok=True)
            name = uuid.uuid4().hex
            self.held = FileLock(self.base / f"{name}.lock", thread_local=False)
            self.held.acquire(timeout=0)  # first: a folder without a held lock is an orphan
            self.root = self.base / name
            self.root.mkdir()
        self.sweep_orphans()

    def sweep_orphans(self) -> None:
        """Delete the folders (and locks) under ``base`` of stores whose process ended without ``close``."""
        for lock_path in self.base.glob("*.lock"):
            if self.root is not None and lock_path.stem == self.root.name:
                continue
            lock = FileLock(lock_path, thread_local=False)
            try:
                lock.acquire(timeout=0)
            except (Timeout, OSError):  # a live store's, or not ours to take
                continue
            try:
                shutil.rmtree(self.base / lock_path.stem, ignore_errors=True)
                logger.info("deleted the translated files of a server that ended: %s", self.base / lock_path.stem)
                lock_path.unlink(missing_ok=True)
            finally:
                lock.release()

    def check(self) -> None:
        """``Refusal`` (503) if translated files cannot be kept now: before a request is counted or translated."""
        try:
            self.open()
        except OSError as error:
            raise self.unwritable(error) from None
        if not self.root.is_dir() or not os.access(self.root, os.W_OK | os.X_OK):
            raise self.unwritable("not a writable folder")

    def unwritable(self, why: object) -> Refusal:
        logger.error("translated files cannot be kept in %s: %s", self.root or self.base, why)
        return Refusal(f"the server cannot keep translated files now: its folder {self.root or self.base} is not "
                       "writable (--files-dir); tell the server's operator", 503)

    def put(self, name: str, data: bytes) -> str:
        """Keep ``data`` as ``name``; its id."""
        self.open()
        file_id = uuid.uuid4().hex
        with self.lock:
            try:
                (self.root / file_id).mkdir()
                (self.root / file_id / name).write_bytes(data)
            except OSError as error:
                shutil.rmtree(self.root / file_id, ignore_errors=True)
                raise self.unwritable(error) from None
            self.deadlines[file_id] = self.clock() + self.expiry
        return file_id

    def read(self, file_id: str, name: str) -> bytes | None:
        """The file ``file_id`` as it was kept under ``name``, or None: no such file, or expired."""
        self.sweep()
        with self.lock:
            if file_id not in self.deadlines or name != safe_name(name):  # the name can hold no path
                return None
            path = self.root / file_id / name
            return path.read_bytes() if path.is_file() else None

    def sweep(self) -> None:
        """Delete the files whose time is up."""
        with self.lock:
            now = self.clock()
            for file_id in [key for key, deadline in self.deadlines.items() if deadline <= now]:
                shutil.rmtree(self.root / file_id, ignore_errors=True)
                del self.deadlines[file_id]

    def close(self) -> None:
        self.stopped.set()
        if self.thread is not None:
            self.thread.join(timeout=10)
        with self.lock:
            if self.root is not None:
                shutil.rmtree(self.root, ignore_errors=True)
                self.held.release()
                with contextlib.suppress(OSError):  # a store that starts meanwhile may hold it for a moment
                    Path(self.held.lock_file).unlink(missing_ok=True)
            self.root, self.held, self.deadlines = None, None, {}


def safe_name(filename: str) -> str:
    """An uploaded file's name as the translated file is kept and downloaded: its last path component, each
    character other than a letter, digit, ``.``, ``-`` or ``_`` (ASCII) replaced by ``_``, at most 100 characters
    with its extension."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", filename.replace("\\", "/").rsplit("/", 1)[-1]).lstrip(".")
    stem, dot, extension = name.rpartition(".")
    return (stem[:100 - len(extension) - 1] + dot + extension) if dot else name[:100] or "file"


class FileAPI:
    """``translate_file`` and ``download_file`` over the LibreTranslate API's models, batchers and key; ``start``
    and ``close`` with the server."""

    def __init__(self, api: LibreTranslateAPI, settings: FileSettings) -> None:
        self.api, self.settings = api, settings
        self.store = FileStore(settings.file_expiry_minutes * 60, settings.folder)
        self.documents = DocumentPool(settings.document_memory_mb)
        self.formats = available_formats()

    def start(self) -> None:
        self.store.start()

    def close(self) -> None:
        self.store.close()
        self.documents.close()

    @property
    def body_limits(self) -> dict[str, tuple[int, str]]:
        """The server's body limit for this route (``guard.Guard``): the largest file and the form around it."""
        return {f"{PREFIX}/translate_file": (self.settings.max_file_bytes + FORM_BYTES, "--max-file-bytes")}

    def mount(self, app: FastAPI) -> None:
        router = APIRouter(prefix=PREFIX, tags=["LibreTranslate API"])
        errors = {status: ERROR_SCHEMA | {"description": why} for status, why in (
            (400, "A bad request or file, in LibreTranslate's words"), (403, "A wrong API key"),
            (413, "A file over --max-file-bytes, or over a bound of a document (the option named)"),
            (503, "Translated files cannot be kept now (--files-dir)"))}
        if self.api.access.limited:
            errors[429] = ERROR_SCHEMA | {"description": "Slow down: over a request limit (see `Retry-After`)"}
        router.add_api_route("/translate_file", self.translate_file, methods=["POST"], responses=errors,
                             summary="LibreTranslate: translate a file (multipart: file, source, target, api_key)",
                             openapi_extra=request_body({"file": {"type": "string", "format": "binary"},
                                                         **dict.fromkeys(("source", "target", "api_key"), STRING)},
                                                        ["file", "source", "target"], ("multipart/form-data",)))
        router.add_api_route("/download_file/{file_id}/{name}", self.download_file, openapi_extra={"parameters": [
                                 {"name": name, "in": "path", "required": True, "schema": STRING}
                                 for name in ("file_id", "name")]},
                             responses={404: ERROR_SCHEMA | {"description": "No such file, or expired"}},
                             summary="LibreTranslate: download a translated file")
        add_preflights(router, ["/translate_file"])
        app.include_router(router)

    async def translate_file(self, request: Request) -> JSONResponse:
        body, upload = await self.read_form(request)
        await asyncio.to_thread(self.store.check)  # before the request is counted (disk work: off the event loop)
        key = await self.api.admit(body, request)  # the key as /translate's, and one request counted
        if upload is None:
            raise Refusal("Invalid request: missing file parameter")
        for name in ("source", "target"):
            if not body.get(name):
                raise Refusal(f"Invalid request: missing {name} parameter")
        if not upload.filename:
            raise Refusal("Invalid request: empty file")
        extension = Path(upload.filename).suffix.lower()
        if extension not in self.formats:
            raise Refusal(f"Invalid request: file format not supported (this server takes {', '.join(self.formats)})")
        route = choose(self.api.models, body["source"], body["target"])
        data = await upload.read(self.settings.max_file_bytes + 1)
        if len(data) > self.settings.max_file_bytes:
            raise Refusal(f"Invalid request: the file is larger than the limit of {self.settings.max_file_bytes} "
                          "bytes (--max-file-bytes)", 413)
        if not data.strip():
            raise Refusal("Invalid request: empty file")
        texts, text_format, write = await self.refused_as_lt(self.documents.read(extension, data,
                                                                                 self.settings.bounds))
        if (more := file_cost(self.api.access, characters(texts, text_format), key) - 1) > 0:  # as LibreTranslate
            self.api.access.admit(key, client_address(request.scope), more)
        # a few batches at a time on each model of the route: others' requests go between
        shares = {hop.model.name: FairShare(self.api.batchers[hop.model.name]) for hop in route.hops}
        try:
            plan = Plan("text" if text_format == "text" else "html", max_pieces=None)  # runs: markup, read as TAGS
            results = await translate_texts(route, shares, texts, plan, TAGS if text_format == "runs" else None)
        finally:
            for share in shares.values():
                share.close()
        translated = await self.refused_as_lt(write([found[0] for found in results]))
        name = safe_name(upload.filename)
        file_id = await asyncio.to_thread(self.store.put, name, translated)  # disk work off the event loop
        url = f"{str(request.base_url).rstrip('/')}{PREFIX}/download_file/{file_id}/{quote(name)}"
        return JSONResponse({"translatedFileUrl": url})

    @staticmethod
    async def refused_as_lt(work: Awaitable[Any]) -> Any:
        """What ``work`` gives; a ``DocumentError`` as LibreTranslate's refusal, with its status."""
        try:
            return await work
        except DocumentError as error:
            raise Refusal(f"Invalid request: {error}", error.status) from None

    async def read_form(self, request: Request) -> tuple[dict[str, Any], UploadFile | None]:
        """The form's fields (after the query's, as LibreTranslate's ``request.values``) and its file."""
        try:
            form = await request.form()
        except StarletteHTTPException as error:  # a body that is not multipart/form-data, or over the limit
            if error.status_code == 413:  # sent in chunks, without a Content-Length (guard.Guard stopped it)
                raise Refusal(f"Invalid request: the file is larger than the limit of "
                              f"{self.settings.max_file_bytes} bytes (--max-file-bytes)", 413) from None
            raise Refusal(f"Invalid request: {error.detail}") from None
        upload = form.get("file")
        fields = {key: value for key, value in form.items() if isinstance(value, str)}
        return {**request.query_params, **fields}, upload if isinstance(upload, UploadFile) else None

    async def download_file(self, request: Request) -> Response:  # the path's parts read here: no 422 to document
        file_id, name = request.path_params["file_id"], request.path_params["name"]
        data = await asyncio.to_thread(self.store.read, file_id, name)
        if data is None:
            raise Refusal(f"Invalid request: no translated file {file_id}/{name}: it was never made, or it expired "
                          f"(files are kept {self.settings.file_expiry_minutes:g} minutes)", 404)
        return Response(data, media_type=MEDIA_TYPES.get(Path(name).suffix.lower(), "application/octet-stream"),
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})


__all__ = ["FileAPI", "FileSettings", "FileStore", "default_files_dir", "safe_name"]
