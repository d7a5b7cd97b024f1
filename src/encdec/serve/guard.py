"""The server's guard: pure ASGI middleware in front of the app that gives every request an id (``X-Request-ID``),
checks the API key (``Authorization: Bearer``, ``X-API-Key`` or a browser's Basic login; an API whose adapter reads
the key itself is left to do so), bounds the body (``--max-body-bytes``, or an upload's own limit), adds the CORS
headers of the API a path belongs to (``encdec.serve.adapter``), counts every answer for ``--metrics``, and answers
500 with the request id for any error the app lets through (logged with its traceback)."""

from __future__ import annotations

import base64
import binascii
import logging
import re
import uuid
from typing import Any

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .adapter import Adapter, adapter_for
from .http_errors import INTERNAL_ERROR
from .limits import Access, Overloaded
from .metrics import ServerMetrics

SLASHES = re.compile("/{2,}")  # repeated slashes count as one where a path's own body limit is looked up
logger = logging.getLogger("encdec.serve")


def presented_key(headers: dict[bytes, bytes]) -> str | None:
    """The key of ``Authorization: Bearer KEY``, ``X-API-Key: KEY``, or the password of ``Authorization: Basic``
    (what a browser sends after its login prompt, so the web page works behind a key too)."""
    if b"x-api-key" in headers:
        return headers[b"x-api-key"].decode("latin-1")
    scheme, _, value = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            return base64.b64decode(value.strip()).decode("utf-8").partition(":")[2]
        except (binascii.Error, UnicodeDecodeError):
            return None
    return None


class Guard:
    """Pure ASGI middleware in front of the app: a request id for every request, the API key (``access``: the key
    found goes to ``scope["state"]["api_key"]``), the body limit, a 500 with the request id (logged with the
    traceback) for any error the app lets through, and with ``metrics`` every answer counted."""

    def __init__(self, app: Any, access: Access, max_body_bytes: int, adapters: list[Adapter],
                 metrics: ServerMetrics | None = None) -> None:
        self.app, self.access, self.max_body_bytes, self.metrics = app, access, max_body_bytes, metrics
        self.adapters = adapters  # each API's CORS headers, and whether it reads the key itself
        # path -> its own body limit and flag (a file upload: --max-file-bytes)
        self.uploads = {path: limit for adapter in adapters for path, limit in adapter.body_limits().items()}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.metrics is not None:
            return await self.metrics.observe(scope, receive, send, self.guarded)
        return await self.guarded(scope, receive, send)

    async def guarded(self, scope: dict, receive: Any, send: Any) -> None:
        rid = uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = rid
        headers = dict(scope["headers"])
        started = False

        api = adapter_for(self.adapters, scope.get("path", ""))
        cors = [(name.lower().encode(), value.encode()) for name, value in api.cors.items()]

        async def send_with_id(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message.setdefault("headers", []).extend([(b"x-request-id", rid.encode()), *cors])
            await send(message)

        try:
            refusal = await self.refusal(headers, scope.get("path", ""), scope["state"])
        except Overloaded as unavailable:  # the key database cannot say now: 503
            refusal = unavailable.status, unavailable.message, unavailable.headers
        if refusal is not None:
            status, text, extra = refusal
            field = None if status in (401, 503) else "body"
            response = JSONResponse({"error": text, "field": field, "request_id": rid}, status, headers=extra)
            return await response(scope, receive, send_with_id)
        try:
            await self.app(scope, self.limited(receive, scope["state"], scope.get("path", "")), send_with_id)
        except Exception:
            logger.exception("request %s (%s %s) failed", rid, scope.get("method"), scope.get("path"))
            if not started:
                await JSONResponse({"error": INTERNAL_ERROR, "field": None, "request_id": rid}, 500)(
                    scope, receive, send_with_id)

    async def refusal(self, headers: dict[bytes, bytes], path: str = "",
                      state: dict | None = None) -> tuple[int, str, dict[str, str]] | None:
        # an API whose clients send the key in the body, or whose browsers send CORS preflights without one, checks
        # the key itself (``Adapter.reads_key``)
        if self.access.required and not adapter_for(self.adapters, path).reads_key:
            key = await self.access.find(presented_key(headers))
            if state is not None:
                state["api_key"] = key
            if key is None:
                return 401, "a valid API key is required: send `Authorization: Bearer KEY` or `X-API-Key: KEY`.", \
                    {"WWW-Authenticate": 'Basic realm="encdec"'}
        length = headers.get(b"content-length", b"0")
        if not length.isdigit():
            return 400, "body: the Content-Length header is not a number; send the body's size in bytes.", {}
        limit, flag = self.body_limit(path)
        if int(length) > limit:
            return 413, f"body: {int(length)} bytes exceed the limit of {limit} ({flag}).", {}
        return None

    def body_limit(self, path: str) -> tuple[int, str]:
        """The body limit of ``path`` and its flag (repeated slashes count as one, as they route)."""
        return self.uploads.get(SLASHES.sub("/", path), (self.max_body_bytes, "--max-body-bytes"))

    def limited(self, receive: Any, state: dict, path: str = "") -> Any:
        """``receive`` that stops a chunked body at the limit (one without a Content-Length), and counts the bytes
        read in ``state["body_bytes"]`` (an empty body and a JSON ``null`` differ only there)."""
        seen = 0

        async def receive_limited() -> dict:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            state["body_bytes"] = seen
            if seen > self.body_limit(path)[0]:
                raise BodyTooLarge
            return message
        return receive_limited


class BodyTooLarge(StarletteHTTPException):
    """A body without a Content-Length that grew past the limit (FastAPI passes HTTP exceptions through)."""

    def __init__(self) -> None:
        super().__init__(413)


__all__ = ["BodyTooLarge", "Guard", "presented_key"]
