"""File translation under LibreTranslate's API: ``POST /libretranslate/translate_file`` and the translated files'
``GET /libretranslate/download_file/<id>/<name>``.

``translate_file`` takes a multipart form, as LibreTranslate's: ``file`` (.txt, .html, .docx or .odt:
``documents.available_formats``), ``source``, ``target`` and ``api_key``. It reads the file's texts
(``documents``), translates them sentence by sentence on the model's batcher as the text API does
(``libretranslate.translate_parts``), writes the file again with the translations in place, and answers
``{"translatedFileUrl": "http://HOST/libretranslate/download_file/<id>/<name>"}``. A translated file is kept
``--file-expiry-minutes`` (30) in a temporary folder, then deleted by a sweeper thread that runs while the server
does (and before each download); the server's stop deletes them all. The id is 128 random bits: as in
LibreTranslate, downloading needs no key.

The key and the request limit apply as to ``/translate`` (``LibreTranslateAPI.admit``: a missing key 400, a wrong
one 403, over the limit 429): a file is one request, and with a character limit (``--char-limit`` or the key's) it
costs, as LibreTranslate charges a file, its characters over the limit in requests (at least one); a file is not
refused for its length (``--max-file-bytes`` bounds it). A full queue is a 503, as for ``/translate``.

Refused in LibreTranslate's words and shape (``{"error": ...}``, 400): a missing file, source or target; an empty
file; a format not offered; a language not served; a file that is not what its name says (a corrupt .docx, a .txt
that is not UTF-8); and with 413 a file over ``--max-file-bytes`` (10 MB). The server's body limit
(``--max-body-bytes``) does not apply to this route: its body may hold the largest file and the form's fields.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import EncdecError
from .documents import DocumentError, available_formats, read_document
from .libretranslate import (
    ERROR_SCHEMA,
    PREFIX,
    STRING,
    LibreTranslateAPI,
    Refusal,
    choose,
    request_body,
    translate_parts,
)
from .libretranslate_routes import add_preflights
from .limits import client_address

logger = logging.getLogger("encdec.serve")

FORM_BYTES = 64 * 1024  # room in an upload's body for the form's other fields and the multipart headers
SWEEP_SECONDS = 60.0  # the sweeper looks for expired files this often (more often when they expire sooner)
MEDIA_TYPES = {".txt": "text/plain; charset=utf-8", ".html": "text/html; charset=utf-8",
               ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
               ".odt": "application/vnd.oasis.opendocument.text"}


@dataclass(frozen=True)
class FileSettings:
    """What file translation accepts and keeps (``encdec serve`` options of the same names)."""

    max_file_bytes: int = 10_000_000  # the largest file to translate
    file_expiry_minutes: float = 30.0  # how long a translated file can be downloaded

    def __post_init__(self) -> None:
        if not isinstance(self.max_file_bytes, int) or self.max_file_bytes < 1:
            raise EncdecError(f"--max-file-bytes must be a whole number >= 1, got {self.max_file_bytes!r}.")
        if not self.file_expiry_minutes > 0:
            raise EncdecError(f"--file-expiry-minutes must be > 0, got {self.file_expiry_minutes!r}.")


class FileStore:
    """Translated files, each in a folder of its own (its id) under a temporary folder made with the first one.
    Each is deleted ``expiry`` seconds after it was written: by ``sweep``, which a thread runs while the store is
    started and which every look-up runs first; ``close`` stops the thread and deletes them all."""

    def __init__(self, expiry: float) -> None:
        self.expiry, self.root = expiry, None
        self.clock = time.monotonic  # what the deadlines are read on (a test sets its own)
        self.deadlines: dict[str, float] = {}  # id -> when it expires (on ``clock``)
        self.lock, self.stopped = threading.Lock(), threading.Event()
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.stopped.clear()
        self.thread = threading.Thread(target=self.run, name="encdec-file-sweeper", daemon=True)
        self.thread.start()

    def run(self) -> None:
        while not self.stopped.wait(min(SWEEP_SECONDS, self.expiry)):
            self.sweep()

    def put(self, name: str, data: bytes) -> str:
        """Keep ``data`` as ``name``; its id."""
        file_id = uuid.uuid4().hex
        with self.lock:
            if self.root is None:
                self.root = Path(tempfile.mkdtemp(prefix="encdec-files-"))
            (self.root / file_id).mkdir()
            (self.root / file_id / name).write_bytes(data)
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
            self.root, self.deadlines = None, {}


def safe_name(filename: str) -> str:
    """An uploaded file's name as the translated file is kept and downloaded: its last path component, each
    character other than a letter, digit, ``.``, ``-`` or ``_`` (ASCII) replaced by ``_``, at most 100 characters
    with its extension."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", filename.replace("\\", "/").rsplit("/", 1)[-1]).lstrip(".")
    stem, dot, extension = name.rpartition(".")
    return (stem[:100 - len(extension) - 1] + dot + extension) if dot else name[:100] or "file"


class FileAPI:
    """``translate_file`` and ``download_file`` over the LibreTranslate API's models, batchers and key."""

    def __init__(self, api: LibreTranslateAPI, settings: FileSettings) -> None:
        self.api, self.settings = api, settings
        self.store = FileStore(settings.file_expiry_minutes * 60)
        self.formats = available_formats()

    @property
    def body_limits(self) -> dict[str, tuple[int, str]]:
        """The server's body limit for this route (``server.Guard``): the largest file and the form around it."""
        return {f"{PREFIX}/translate_file": (self.settings.max_file_bytes + FORM_BYTES, "--max-file-bytes")}

    def mount(self, app: FastAPI) -> None:
        router = APIRouter(prefix=PREFIX, tags=["LibreTranslate API"])
        errors = {status: ERROR_SCHEMA | {"description": why} for status, why in (
            (400, "A bad request or file, in LibreTranslate's words"), (403, "A wrong API key"),
            (413, "A file over --max-file-bytes"))}
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
        model = choose(self.api.models, body["source"], body["target"])
        data = await upload.read(self.settings.max_file_bytes + 1)
        if len(data) > self.settings.max_file_bytes:
            raise Refusal(f"Invalid request: the file is larger than the limit of {self.settings.max_file_bytes} "
                          "bytes (--max-file-bytes)", 413)
        if not data.strip():
            raise Refusal("Invalid request: empty file")
        try:
            document = await asyncio.to_thread(read_document, extension, data)
        except DocumentError as error:
            raise Refusal(f"Invalid request: {error}") from None
        if (more := self.api.access.file_cost(document.texts, key) - 1) > 0:  # its characters, as LibreTranslate
            self.api.access.admit(key, client_address(request.scope), more)
        results = await translate_parts(model, self.api.batchers[model.name], document.texts, document.text_format,
                                        0, max_pieces=None)  # the file limit bounds its sentences
        name = safe_name(upload.filename)
        file_id = self.store.put(name, await asyncio.to_thread(document.rebuild, [found[0] for found in results]))
        url = f"{str(request.base_url).rstrip('/')}{PREFIX}/download_file/{file_id}/{quote(name)}"
        return JSONResponse({"translatedFileUrl": url})

    async def read_form(self, request: Request) -> tuple[dict[str, Any], UploadFile | None]:
        """The form's fields (after the query's, as LibreTranslate's ``request.values``) and its file."""
        try:
            form = await request.form()
        except StarletteHTTPException as error:  # a body that is not multipart/form-data
            raise Refusal(f"Invalid request: {error.detail}") from None
        upload = form.get("file")
        fields = {key: value for key, value in form.items() if isinstance(value, str)}
        return {**request.query_params, **fields}, upload if isinstance(upload, UploadFile) else None

    async def download_file(self, request: Request) -> Response:  # the path's parts read here: no 422 to document
        file_id, name = request.path_params["file_id"], request.path_params["name"]
        data = self.store.read(file_id, name)
        if data is None:
            raise Refusal(f"Invalid request: no translated file {file_id}/{name}: it was never made, or it expired "
                          f"(files are kept {self.settings.file_expiry_minutes:g} minutes)", 404)
        return Response(data, media_type=MEDIA_TYPES.get(Path(name).suffix.lower(), "application/octet-stream"),
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})


__all__ = ["FileAPI", "FileSettings", "FileStore", "safe_name"]
