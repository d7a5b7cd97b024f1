"""How requests under ``/libretranslate`` find their route, as on LibreTranslate's own server
(``libretranslate.api`` holds the routes themselves).

- Repeated slashes count as one: ``/libretranslate//translate`` is ``/libretranslate/translate``. SearXNG and
  LibreTranslate's JavaScript client append ``/translate`` to the base URL they are given, so a base URL that ends
  with a slash asks for ``//translate``. LibreTranslate's server (werkzeug's ``merge_slashes``) answers with a
  redirect to the merged path; here the request is routed at once, so a client that does not follow a redirect of a
  POST is served too.
- A path that is no endpoint is a 404 and a known path asked with another method a 405, both in LibreTranslate's
  error shape ``{"error": ...}``; the native API keeps its ``ErrorResponse``.
- A browser's CORS preflight (``OPTIONS``, sent without a key) of an endpoint is a 200; the CORS headers come from
  ``encdec.serve.guard.Guard``, on every answer under the prefix (``libretranslate.adapter``).
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response

SLASHES, RAW_SLASHES = re.compile("/{2,}"), re.compile(b"/{2,}")
REASONS = {404: "Not Found", 405: "Method Not Allowed"}


class MergedSlashes:
    """ASGI middleware: repeated slashes in a path under ``prefix`` merged into one, before routing."""

    def __init__(self, app: Any, prefix: str) -> None:
        self.app, self.prefix = app, prefix

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        path = scope.get("path", "")
        if scope["type"] == "http" and path.startswith(self.prefix + "/") and "//" in path:
            scope["path"] = SLASHES.sub("/", path)  # in place: the route the router finds is the metrics' label
            if scope.get("raw_path"):
                scope["raw_path"] = RAW_SLASHES.sub(b"/", scope["raw_path"])
        await self.app(scope, receive, send)


def add_preflights(router: APIRouter, paths: list[str]) -> None:
    """``OPTIONS`` of each of ``paths``: a 200, which the CORS headers make a browser's preflight answer."""
    for path in paths:
        router.add_api_route(path, preflight, methods=["OPTIONS"], include_in_schema=False)


async def preflight() -> Response:
    return Response(status_code=200)


def merge_slashes(app: FastAPI, prefix: str) -> None:
    """Repeated slashes merged under ``prefix`` before routing."""
    app.add_middleware(MergedSlashes, prefix=prefix)


def not_routed(request: Request, error: Exception, prefix: str) -> Response | None:
    """A 404 or 405 under ``prefix`` in LibreTranslate's shape (None elsewhere: the server's own answer)."""
    if not request.url.path.startswith(prefix + "/") and request.url.path != prefix:
        return None
    status = getattr(error, "status_code", 404)
    return JSONResponse({"error": f"{REASONS[status]}: {request.method} {request.url.path}"}, status,
                        headers=getattr(error, "headers", None))


__all__ = ["MergedSlashes", "add_preflights", "merge_slashes", "not_routed"]
