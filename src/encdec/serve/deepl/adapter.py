"""DeepL's API as an adapter of ``encdec serve`` (``encdec.serve.adapter``): its routes under ``/deepl`` (``api``,
``glossaries``, ``documents``), CORS headers for browser clients, the key read by the routes themselves (DeepL's
``Authorization: DeepL-Auth-Key KEY``), and the server's refusals in DeepL's shape (``{"message": ...}``): 429 over a
request limit and 503 with a full queue (each with ``Retry-After``), 404 and 405 for a path that is no route, a
field's refusal as 400."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ..adapter import Adapter, Serving
from ..limits import Overloaded
from ..schema import printable
from ..service import RequestError
from .api import CORS_HEADERS, PREFIX, DeepLAPI
from .documents import Documents
from .fields import DeepLError
from .glossaries import Glossaries

REASONS = {404: "Not found", 405: "Method not allowed"}
ROOT_PATHS = ("/v2/", "/v3/")  # DeepL's versions; no other API of encdec serve has paths there


class DeepLAdapter(Adapter):
    """The routes of ``api.DeepLAPI``, ``glossaries.Glossaries`` and ``documents.Documents``."""

    prefix = PREFIX
    cors = CORS_HEADERS
    reads_key = True  # DeepL's own header, and browsers' CORS preflights come without one

    def __init__(self, serving: Serving, settings: Any = None) -> None:
        super().__init__(serving, settings)
        self.api = DeepLAPI(serving.models, serving.batchers, serving.access)
        self.glossaries = Glossaries(serving.models, serving.access, self.api.admit)
        self.documents = Documents(self.api)

    def owns(self, path: str) -> bool:
        """Under ``/deepl``, and DeepL's own paths at the root: the official clients join a relative path to
        their ``server_url`` (``urllib.parse.urljoin``), so ``http://HOST:PORT/deepl`` without its trailing slash
        asks for ``/v2/translate``."""
        return path.startswith(PREFIX) or path.startswith(ROOT_PATHS)

    def mount(self, app: Any) -> None:
        router = APIRouter(tags=["DeepL API"])
        self.api.mount(app, router)
        self.glossaries.mount(router)
        self.documents.mount(router)
        app.include_router(router, prefix=PREFIX)
        app.include_router(router, include_in_schema=False)  # the same routes at the root (``owns``)
        app.add_exception_handler(DeepLError, refused)

    def body_limits(self) -> dict[str, tuple[int, str]]:
        return {prefix + path: limit for path, limit in self.documents.body_limits().items()
                for prefix in (PREFIX, "")}

    def close(self) -> None:
        self.documents.close()

    def refused(self, request: Request, error: RequestError) -> JSONResponse:
        return JSONResponse({"message": "Bad request", "detail": printable(f"{error.field}: {error.reason}")}, 400)

    def overloaded(self, request: Request, error: Overloaded) -> JSONResponse:
        message = "Too many requests" if error.status == 429 else "Service unavailable"
        return JSONResponse({"message": message, "detail": error.message}, error.status, headers=error.headers)

    def not_routed(self, request: Request, error: Any) -> JSONResponse:
        status = getattr(error, "status_code", 404)
        return JSONResponse({"message": REASONS.get(status, "Not found"),
                             "detail": f"{request.method} {request.url.path}"}, status,
                            headers=getattr(error, "headers", None))


async def refused(request: Request, error: Exception) -> JSONResponse:
    assert isinstance(error, DeepLError)
    return JSONResponse({k: printable(v) for k, v in error.body().items()}, error.status, headers=error.headers)


ADAPTER = DeepLAdapter

__all__ = ["ADAPTER", "DeepLAdapter"]
