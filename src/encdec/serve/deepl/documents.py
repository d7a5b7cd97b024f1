"""DeepL's document translation: ``POST /v2/document`` (a multipart upload: ``file``, ``target_lang``, ``source_lang``,
``glossary_id``, ``formality``, ``output_format``), ``POST /v2/document/{id}`` (its status, with the
``document_key`` the upload gave) and ``POST /v2/document/{id}/result`` (the translated file, once; then it is
deleted, as DeepL deletes it).

The formats are file translation's (``encdec.serve.documents``: .txt, .html, .docx, .odt): a document is read at
upload, within the same bounds (a .docx or .odt in a worker process, its archive checked before it is unpacked), so
a zip bomb, a file over ``MAX_DOCUMENT_BYTES`` or a corrupt one is refused then (413, 400); its characters are
charged to the key's quota then (456 over it). It is translated in the background, a few batches at a time
(``encdec.serve.fair_share``) so that others' requests go between; .html as ``tag_handling=html``. The upload
answers once the translation is done or after ``UPLOAD_WAIT`` seconds, whichever comes first, so a short document is
``done`` at the first status call (the official clients poll every 5 s). Translated documents are kept in memory, at
most ``MAX_KEPT`` of them (``MAX_KEPT_PER_KEY`` of a key) for ``KEEP_SECONDS`` each, and do not survive a restart
(DeepL keeps them a day).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from starlette.datastructures import UploadFile

from ..documents.formats import (
    Bounds,
    DocumentError,
    available_formats,
    characters,
)
from ..documents.worker import DocumentPool
from ..fair_share import FairShare
from ..limits import Overloaded
from ..offload import off_loop
from .fields import DeepLError, bad, read_body, string
from .translation import translate_group, translate_runs

logger = logging.getLogger("encdec.serve")
MAX_DOCUMENT_BYTES = 30 * 2 ** 20  # an upload (DeepL's own bound for .docx)
DOCUMENT_MEMORY_MB = 1_024  # a worker's memory beyond what it starts with (a .docx or .odt)
UPLOAD_WAIT = 2.0  # seconds an upload waits for its translation before it answers
MAX_KEPT = 100  # documents kept at once (translating or translated)
MAX_KEPT_PER_KEY = 20  # of them, of one key
KEEP_SECONDS = 30 * 60.0
BY_ID = {"parameters": [{"name": "document_id", "in": "path", "required": True, "schema": {"type": "string"}}]}
MEDIA_TYPES = {".txt": "text/plain; charset=utf-8", ".html": "text/html; charset=utf-8",
               ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
               ".odt": "application/vnd.oasis.opendocument.text"}


@dataclass
class Translation:
    """A document being translated, or translated: its owner and key, its status and its result."""

    owner: str | None
    key: str
    extension: str
    characters: int
    period: str  # the month its characters were charged to
    status: str = "translating"  # translating, done, error
    result: bytes | None = None
    error: str | None = None
    made: float = field(default_factory=time.monotonic)
    task: Any = None


def beginning(texts: list[str], text_format: str) -> tuple[int, str]:
    """A document's characters to translate (its text without its runs' markup) and its first 2,000 (to detect its
    language)."""
    plain = characters(texts, text_format)
    return sum(map(len, plain)), " ".join(plain)[:2_000]


class Documents:
    """The document routes over ``api`` (a ``DeepLAPI``: its keys, quota, options and models)."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.pool = DocumentPool(DOCUMENT_MEMORY_MB)
        self.bounds = Bounds()
        self.kept: dict[str, Translation] = {}
        self.formats = available_formats()

    def mount(self, router: APIRouter) -> None:
        router.add_api_route("/v2/document", self.upload, methods=["POST"],
                             summary="DeepL: upload a document to translate (multipart)")
        router.add_api_route("/v2/document/{document_id}", self.status, methods=["POST", "GET"], openapi_extra=BY_ID,
                             summary="DeepL: a document's status")
        router.add_api_route("/v2/document/{document_id}/result", self.result, methods=["POST", "GET"],
                             openapi_extra=BY_ID,
                             summary="DeepL: download a translated document (once)")

    def body_limits(self) -> dict[str, tuple[int, str]]:
        return {"/v2/document": (MAX_DOCUMENT_BYTES + 2 ** 16, "DeepL's document limit")}

    def close(self) -> None:
        for kept in self.kept.values():
            if kept.task is not None:
                kept.task.cancel()
        self.pool.close()

    async def upload(self, request: Request) -> JSONResponse:
        fields = await read_body(request)
        caller = await self.api.admit(request, fields)
        self.sweep(caller.presented)  # before any work: a full store refuses at once
        upload = fields.get("file")
        if not isinstance(upload, UploadFile) or not upload.filename:
            raise bad("Parameter 'file' not specified: upload the document as the multipart field 'file'.")
        extension = Path(string(fields, "filename") or upload.filename).suffix.lower()
        if extension not in self.formats:
            raise bad(f"Invalid file type {extension or '(none)'}: this server translates {', '.join(self.formats)}.")
        output = string(fields, "output_format")
        if output and "." + output.lower().lstrip(".") != extension:
            raise bad(f"output_format {output}: a document comes back in its own format ({extension}).")
        asked = self.api.asked({**fields, "tag_handling": None})
        asked.glossary = await self.api.glossary_of(caller, fields, asked)
        data = await upload.read(MAX_DOCUMENT_BYTES + 1)
        if len(data) > MAX_DOCUMENT_BYTES:
            raise DeepLError(413, "Request Entity Too Large", f"the document is over {MAX_DOCUMENT_BYTES} bytes.")
        texts, text_format, write = await self.read(extension, data)
        count, start = await off_loop(beginning, texts, text_format)
        source = asked.source or asked.target
        if asked.source is None and texts:  # the document's language, from its beginning
            source = (await off_loop(self.api.detected, [start], asked.target))[0]
        route = self.api.route(source, asked.target, asked.glossary is not None)
        period = await self.api.charge(caller, count)
        document_id, kept = secrets.token_hex(16).upper(), Translation(caller.presented, secrets.token_hex(32),
                                                                      extension, count, period)
        self.kept[document_id] = kept
        kept.task = asyncio.ensure_future(self.translate(kept, route, (texts, text_format), asked, write, caller))
        await asyncio.wait([kept.task], timeout=UPLOAD_WAIT)
        return JSONResponse({"document_id": document_id, "document_key": kept.key})

    async def read(self, extension: str, data: bytes) -> tuple[list[str], str, Any]:
        """``DocumentPool.read``, its refusals in DeepL's words."""
        try:
            return await self.pool.read(extension, data, self.bounds)
        except DocumentError as error:
            raise DeepLError(error.status, "Request Entity Too Large" if error.status == 413 else "Bad request",
                             str(error)) from None

    async def translate(self, kept: Translation, route: Any, read: tuple[list[str], str], asked: Any, write: Any,
                        caller: Any) -> None:
        """The document's texts translated as they read (a paragraph's runs: markup whose tags are runs), then
        written back; a failure kept as the document's error, its characters given back."""
        texts, text_format = read
        shares = {hop.model.name: FairShare(self.api.batchers[hop.model.name]) for hop in route.hops}
        try:
            if text_format == "runs":
                found = await translate_runs(route, shares, texts, asked)
            else:
                asked.tag_handling = "html" if text_format == "html" else None
                found = await translate_group(route, shares, texts, asked) if texts else []
            kept.result, kept.status = await write(found), "done"
        except Exception as error:  # a refusal, a full queue, a worker that died: the document's error, not lost
            if not isinstance(error, DeepLError | DocumentError | Overloaded):
                logger.exception("translating document %s failed", kept.extension)
            kept.status = "error"
            kept.error = getattr(error, "detail", None) or getattr(error, "message", None) or str(error) or \
                type(error).__name__
            await self.api.refund(caller, kept.characters, kept.period)
        finally:
            for share in shares.values():
                share.close()

    def find(self, document_id: str, fields: dict[str, Any]) -> Translation:
        kept = self.kept.get(document_id)
        key = string(fields, "document_key", required=True)
        if kept is None or not hmac.compare_digest(kept.key, key):
            raise DeepLError(404, "Document not found", f"no document {document_id} with this document_key: it was "
                                                        "never uploaded, was downloaded, or expired.")
        return kept

    async def status(self, request: Request) -> JSONResponse:
        document_id = request.path_params["document_id"]
        fields = await read_body(request)
        await self.api.admit(request, fields)
        kept = self.find(document_id, fields)
        answer: dict[str, Any] = {"document_id": document_id, "status": kept.status}
        if kept.status == "done":
            answer["billed_characters"] = kept.characters
        elif kept.status == "error":
            answer["error_message"] = kept.error
        else:
            answer["seconds_remaining"] = 1
        return JSONResponse(answer)

    async def result(self, request: Request) -> Response:
        document_id = request.path_params["document_id"]
        fields = await read_body(request)
        await self.api.admit(request, fields)
        kept = self.find(document_id, fields)
        if kept.status != "done":
            raise DeepLError(503 if kept.status == "translating" else 400, "Document not ready",
                             kept.error or "the document is still being translated.")
        del self.kept[document_id]
        return Response(kept.result, media_type=MEDIA_TYPES.get(kept.extension, "application/octet-stream"))

    def sweep(self, owner: str | None) -> None:
        """Forget documents kept longer than ``KEEP_SECONDS`` (one still translating is stopped); refuse an upload
        when ``MAX_KEPT`` remain, or ``MAX_KEPT_PER_KEY`` of its key."""
        now = time.monotonic()
        for document_id in [i for i, kept in self.kept.items() if now - kept.made > KEEP_SECONDS]:
            if (kept := self.kept.pop(document_id)).task is not None:
                kept.task.cancel()
        if sum(kept.owner == owner for kept in self.kept.values()) >= MAX_KEPT_PER_KEY:
            raise DeepLError(429, "Too many requests", f"this key has {MAX_KEPT_PER_KEY} documents waiting to be "
                             "downloaded; download them first.", {"Retry-After": "60"})
        if len(self.kept) >= MAX_KEPT:
            raise DeepLError(429, "Too many requests", f"{MAX_KEPT} documents are waiting to be downloaded; download "
                             "them first.", {"Retry-After": "60"})


__all__ = ["Documents", "MAX_DOCUMENT_BYTES"]
