"""LibreTranslate's API as an adapter of ``encdec serve`` (``encdec.serve.adapter``): its routes under
``/libretranslate`` (``api``, and files: ``files``), the CORS headers LibreTranslate sends, the API key read from the
body or a header by the routes themselves, and the server's refusals in LibreTranslate's words: 429 over a request
limit as ``Slowdown: N per 1 minute`` (``libretranslate/app.py``'s 429 handler, around flask-limiter's description
of the limit), 503 as ``{"error": ...}``, and 404 and 405 as ``{"error": "Not Found: ..."}`` (``routes``)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from ..adapter import Adapter, Serving
from ..limits import OverLimit, Overloaded
from .api import CORS_HEADERS, PREFIX, LibreTranslateAPI
from .documents import available_formats
from .files import FileAPI, FileSettings
from .routes import not_routed


class LibreTranslateAdapter(Adapter):
    """The routes of ``api.LibreTranslateAPI`` and ``files.FileAPI`` (``serving.files``: a ``FileSettings``)."""

    prefix = PREFIX
    cors = CORS_HEADERS
    reads_key = True  # clients send it in the body, and browsers' CORS preflights come without one

    def __init__(self, serving: Serving) -> None:
        super().__init__(serving)
        self.api = LibreTranslateAPI(serving.models, serving.batchers, serving.access, serving.presented_key,
                                     available_formats())
        self.files = FileAPI(self.api, serving.files or FileSettings())

    def mount(self, app: Any) -> None:
        self.api.mount(app)
        self.files.mount(app)
        app.state.files = self.files

    def body_limits(self) -> dict[str, tuple[int, str]]:
        return self.files.body_limits

    def start(self) -> None:
        self.files.start()

    def close(self) -> None:
        self.files.close()

    def overloaded(self, request: Request, error: Overloaded) -> JSONResponse:
        message = f"Slowdown: {error.limit} per 1 minute" if isinstance(error, OverLimit) else error.message
        return JSONResponse({"error": message}, error.status, headers=error.headers)

    def not_routed(self, request: Request, error: Any) -> JSONResponse | None:
        return not_routed(request, error, PREFIX)


ADAPTER = LibreTranslateAdapter

__all__ = ["ADAPTER", "LibreTranslateAdapter"]
