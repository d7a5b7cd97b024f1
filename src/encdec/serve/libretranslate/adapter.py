"""LibreTranslate's API as an adapter of ``encdec serve`` (``encdec.serve.adapter``): its routes under
``/libretranslate`` (``api``, and files: ``files``), the CORS headers LibreTranslate sends, the API key read from the
body or a header by the routes themselves, and the server's refusals in LibreTranslate's words: 429 over a request
limit as ``Slowdown: N per 1 minute`` (``libretranslate/app.py``'s 429 handler, around flask-limiter's description
of the limit), 503 as ``{"error": ...}``, and 404 and 405 as ``{"error": "Not Found: ..."}`` (``routes``). Its
settings (``LibreTranslateSettings``) come from its flags (``flags``) or ``create_app``'s ``files=`` and
``suggestions=``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from ...errors import EncdecError
from ..adapter import Adapter, Serving
from ..documents.formats import available_formats
from ..keys import KeyDatabase
from ..limits import OverLimit, Overloaded
from .api import CORS_HEADERS, PREFIX, LibreTranslateAPI
from .files import FileAPI, FileSettings
from .routes import not_routed


@dataclass(frozen=True)
class LibreTranslateSettings:
    """What ``encdec serve``'s flags of this API set (``flags``): ``files``, file translation's ``FileSettings`` (or
    their keyword arguments); ``suggestions``, whether ``/suggest`` stores suggestions in the key database."""

    files: FileSettings | dict[str, Any] | None = None
    suggestions: bool = False


class LibreTranslateAdapter(Adapter):
    """The routes of ``api.LibreTranslateAPI`` and ``files.FileAPI``, with its ``settings``
    (``LibreTranslateSettings``)."""

    prefix = PREFIX
    cors = CORS_HEADERS
    reads_key = True  # clients send it in the body, and browsers' CORS preflights come without one
    Settings = LibreTranslateSettings

    def __init__(self, serving: Serving, settings: LibreTranslateSettings | None = None) -> None:
        settings = settings or self.configure({}, serving.access.database)
        super().__init__(serving, settings)
        self.api = LibreTranslateAPI(serving.models, serving.batchers, serving.access, serving.presented_key,
                                     available_formats(), settings.suggestions)
        self.files = FileAPI(self.api, settings.files)

    @classmethod
    def configure(cls, given: dict[str, Any], keys: KeyDatabase | None) -> LibreTranslateSettings:
        """The settings, ``files`` made a ``FileSettings`` (its refusals: a bound below 1, a ``--files-dir`` that
        cannot be written); suggestions need the key database, where they are stored."""
        settings = LibreTranslateSettings(**given)
        if settings.suggestions and keys is None:
            raise EncdecError("--suggestions stores the suggestions in the key database: give --api-keys-db PATH "
                              "too.")
        files = settings.files if isinstance(settings.files, FileSettings) else FileSettings(**settings.files or {})
        return dataclasses.replace(settings, files=files)

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

__all__ = ["ADAPTER", "LibreTranslateAdapter", "LibreTranslateSettings"]
