"""The pages the server serves beside its APIs: the page at ``/`` (``encdec/serve/page/``: one HTML file, no external
assets, that translates through the native API and shows the alignment as a heatmap) and its icon, and with
``--offline-site SITE`` the static site that ``encdec export --format web`` wrote, at ``/offline/`` (a page that
translates in the browser, with no request to this server once loaded)."""

from __future__ import annotations

import mimetypes
import os
from importlib import resources
from typing import Any

from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from ..errors import EncdecError
from .schema import error_responses

PAGE = "serve/page/index.html"
FAVICON = "serve/page/favicon.svg"


def add_page(app: Any, guarded: tuple[int, ...]) -> None:
    """The page at ``/`` and its icon; ``guarded``: (401,) behind an API key."""
    page = resources.files("encdec").joinpath(PAGE).read_text(encoding="utf-8")
    icon = resources.files("encdec").joinpath(FAVICON).read_bytes()

    @app.get("/", response_class=HTMLResponse, summary="A page that translates and shows the alignment",
             responses=error_responses(*guarded, json_route=False))
    async def index() -> HTMLResponse:
        return HTMLResponse(page)

    @app.get("/favicon.ico", include_in_schema=False)
    @app.get("/favicon.svg", include_in_schema=False)
    async def favicon() -> Response:
        return Response(icon, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


def add_offline_site(app: Any, site: str | os.PathLike) -> None:
    """The static site at ``/offline/`` (its page finds its files beside it, so ``/offline`` redirects there)."""
    if not os.path.isfile(os.path.join(site, "encdec.js")):
        raise EncdecError(f"--offline-site {site}: not a site written by `encdec export --format web` (no encdec.js); "
                          "export one with `encdec export --format web --model MODEL --output SITE`.")
    mimetypes.add_type("application/wasm", ".wasm")  # what WebAssembly and ONNX files are, on any system
    mimetypes.add_type("application/octet-stream", ".onnx")
    app.get("/offline", include_in_schema=False)(lambda: RedirectResponse("/offline/"))
    app.mount("/offline", StaticFiles(directory=site, html=True), name="offline")


__all__ = ["add_offline_site", "add_page"]
