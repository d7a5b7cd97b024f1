"""``encdec serve``: a translation server (FastAPI on uvicorn, the optional extra ``encdec[serve]``).

One server serves one model or several (``ServedModels``, by language pair), each with its own dynamic batcher.
Under ``/libretranslate/`` it also speaks LibreTranslate's API (``encdec.serve.libretranslate``) over the same models
and batchers.

Endpoints: ``POST /translate``, ``GET /health``, ``GET /info`` and ``GET /``, a page that translates and shows the
alignment as a heatmap (one HTML file, no external assets), and the API page ``/docs`` (Swagger UI), whose script
and styles come from the package ``fastapi-offline`` rather than a CDN, so that all of it works offline. ReDoc
(``/redoc``) is off: its page loads the Redocly logo from a CDN whatever it is given.
``service.py`` holds the checks and ``batcher.py`` the batching; ``schema.py`` the request's schema (which the OpenAPI
page at ``/docs`` shows) and its errors in words; ``limits.py`` who may ask and how much (the key database:
``keys.py``), ``metrics.py`` ``GET /metrics``; this module holds HTTP: the errors as one-line JSON, the API key, the
body limit, request ids, and a graceful stop (uvicorn: on SIGTERM no new connections, requests in flight finish, then
the batcher drains).

With ``--offline-site SITE`` it also serves, at ``/offline/``, the static site that ``encdec export --format web``
wrote: a page that translates in the browser, with no request to this server once loaded.

``encdec serve`` says where it listens once it does, with the port the system gave for ``--port 0``, and says when
a SIGTERM has closed the listening socket (``EncdecServer``).

A test hook, inert unless its environment variable is set: under ``ENCDEC_TEST_HOLD_BATCHES=1`` every model's
batcher starts held (``DynamicBatcher(held=True)``): requests queue and none is decoded; each request that queues
prints ``encdec serve: test hold: N job(s) held by the batcher of NAME`` on stderr; and ``encdec serve`` releases
the batchers when a line (or the end of input) arrives on its stdin. So a test can have requests in flight at a
known point (the graceful stop on SIGTERM; batching by the batcher's own queue) without racing the server.

Every error answer, 4xx or 500, is an ``ErrorResponse``: ``{"error": "<field>: <what is wrong>; <the fix>", "field":
..., "request_id": ...}`` (``ERROR_STATUSES`` says which status means what; the OpenAPI schema documents them).
"""

import asyncio
import base64
import binascii
import contextlib
import dataclasses
import errno
import ipaddress
import logging
import mimetypes
import os
import socket
import sys
import threading
import uuid
from collections.abc import Callable
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

import psutil

from ..errors import EncdecError
from ..inference import load_engine
from .batcher import DynamicBatcher
from .keys import SERVER_TIMEOUT, KeyDatabase
from .limits import Access, Overloaded, RedactKeys, client_address
from .metrics import ServerMetrics
from .offload import off_loop, too_deep
from .registry import ModelSpec, ServedModels, served_as
from .service import RequestError, ServeLimits, TranslationService

SERVE_INSTALL = "pip install 'encdec[serve]'"
try:
    import uvicorn
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
    from fastapi.routing import APIRoute
    from fastapi.staticfiles import StaticFiles
    from fastapi_offline import FastAPIOffline
    from pydantic import BaseModel
    from starlette.exceptions import HTTPException as StarletteHTTPException
except ImportError as missing:  # the CLI prints this as one line
    raise EncdecError(f"`encdec serve` needs FastAPI and uvicorn; install the extra with `{SERVE_INSTALL}`.") \
        from missing
from .documents import available_formats  # noqa: E402
from .files import FileAPI, FileSettings  # noqa: E402
from .libretranslate import CORS_HEADERS, LibreTranslateAPI  # noqa: E402
from .libretranslate import PREFIX as LIBRETRANSLATE_PREFIX  # noqa: E402 (needs FastAPI, checked above)
from .libretranslate_routes import SLASHES  # noqa: E402
from .schema import (  # noqa: E402 (needs pydantic, checked above)
    ERROR_STATUSES,
    EXAMPLE,
    FIELD_CHARS,
    ErrorResponse,
    TranslateResponse,
    Translation,
    error_responses,
    parse_failure,
    printable,
    request_schema,
    validation_message,
    value_hints,
)
from .split import translate_split  # noqa: E402

CORS = [(name.lower().encode(), value.encode()) for name, value in CORS_HEADERS.items()]  # LibreTranslate's API
logger = logging.getLogger("encdec.serve")
API_KEY_ENV = "ENCDEC_API_KEY"
HOLD_ENV = "ENCDEC_TEST_HOLD_BATCHES"  # the test hook of the module docstring
STARTUP_FAILURE = 3  # the exit status of uvicorn.run when the server could not start (a port taken)
PAGE = "web/index.html"
FAVICON = "web/favicon.svg"
INTERNAL_ERROR = "internal server error; the server log has the details under this request id."
# what each error status means, for the OpenAPI schema (every one is an ErrorResponse)
def error_response(status: int, message: str, request: Request, field: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": printable(message), "field": None if field is None else printable(field, FIELD_CHARS),
            "request_id": request_id(request.scope)}
    return JSONResponse(body, status_code=status, headers=headers)


def request_id(scope: dict) -> str | None:
    return scope.get("state", {}).get("request_id")


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse to serve beyond this machine without an API key (``api_key``: the key, or the key database's path)."""
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = False
    if not local and not api_key:
        raise EncdecError(f"Binding to {host} makes the server reachable from other machines: give an API key with "
                          f"--api-key or the {API_KEY_ENV} environment variable, or keys with --api-keys-db (or bind "
                          "to 127.0.0.1).")


def check_port(host: str, port: int) -> None:
    """Refuse, before the models load, a port that another socket listens on: a probe binds each address of
    ``host`` as uvicorn will (``SO_REUSEADDR``, IPv6 only on IPv6), then lets go (port 0 always binds)."""
    try:
        addresses = {info[:1] + info[4:] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                                        flags=socket.AI_PASSIVE)}
    except socket.gaierror as error:
        raise EncdecError(f"--host {host}: not an address to listen on ({error.strerror}).") from None
    for family, address in sorted(addresses, key=str):
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as error:
                taken = error.errno == errno.EADDRINUSE
                raise EncdecError(f"--port {port}: {'already in use' if taken else error.strerror} on {host}; "
                                  f"{'stop what listens there, or ' if taken else ''}give another port (--port 0 takes "
                                  "a free one).") from None


def server_config(app: Any, host: str, port: int, log_level: str = "info",
                  trusted_proxies: list[str] | None = None) -> Any:
    """uvicorn's configuration of ``encdec serve``: proxy headers read only from ``trusted_proxies`` (uvicorn's
    ``forwarded_allow_ips``; none: never, whatever ``FORWARDED_ALLOW_IPS`` says), requests in flight always finished
    on a stop, and keys redacted from the access log (``limits.RedactKeys``)."""
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, proxy_headers=bool(trusted_proxies),
                            forwarded_allow_ips=list(trusted_proxies or []), timeout_graceful_shutdown=None)
    access_log = logging.getLogger("uvicorn.access")  # configured by uvicorn.Config: the filter comes after
    if not any(isinstance(found, RedactKeys) for found in access_log.filters):
        access_log.addFilter(RedactKeys())
    return config


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

    def __init__(self, app: Any, access: Access, max_body_bytes: int, metrics: ServerMetrics | None = None,
                 uploads: dict[str, tuple[int, str]] | None = None) -> None:
        self.app, self.access, self.max_body_bytes, self.metrics = app, access, max_body_bytes, metrics
        self.uploads = uploads or {}  # path -> its own body limit and flag (a file upload: --max-file-bytes)

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

        cors = CORS if scope.get("path", "").startswith(LIBRETRANSLATE_PREFIX) else []

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
        # LibreTranslate's clients send the key in the body, and browsers send CORS preflights without one: the
        # adapter checks the key itself (encdec.serve.libretranslate)
        if self.access.required and not path.startswith(LIBRETRANSLATE_PREFIX):
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


def create_app(served: TranslationService | ServedModels, api_key: str | None = None,
               files: FileSettings | None = None, keys: KeyDatabase | None = None, suggestions: bool = False,
               metrics: bool = False, offline_site: str | os.PathLike | None = None) -> Any:
    """The ASGI app over one service or several (``ServedModels``): each model's batcher starts with the app and
    drains when it stops; so do the translated files (``files``: their limits, ``encdec.serve.files``). ``/docs``
    (Swagger UI) serves its script from the package ``fastapi-offline``: no CDN, so it works offline. ``keys``: a key
    database (``encdec.serve.limits.Access`` has the rules); ``metrics``: ``GET /metrics``; ``offline_site``: a site
    of ``encdec export --format web``, served at ``/offline/``."""
    models = served if isinstance(served, ServedModels) else ServedModels([served_as(served)])
    first = next(iter(models.models.values())).service
    limits = first.limits
    access = Access(api_key, keys, limits.req_limit, limits.char_limit, suggestions)
    observer = ServerMetrics() if metrics else None
    batchers = make_batchers(models, observer)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        for batcher in batchers.values():
            batcher.start()
        logger.info("batching up to %d texts, waiting up to %s ms", limits.max_batch_size, limits.max_wait_ms)
        file_api.start()
        yield
        for batcher in batchers.values():  # every job submitted is answered first
            await asyncio.to_thread(batcher.stop)
        file_api.close()

    app = FastAPIOffline(title="encdec translation server", version=first.info()["encdec_version"],
                         lifespan=lifespan, redoc_url=None,
                         description="Translate with an encdec model. Every error is an `ErrorResponse`, "
                                     "`{error, field, request_id}`:\n\n"
                                     + "\n".join(f"- {status}: {text}" for status, text in ERROR_STATUSES.items()))
    app.state.models, app.state.batchers, app.state.access = models, batchers, access
    # the schema takes the largest limits of the models; each model's own are checked when its jobs are made
    widest = {name: max(getattr(model.service.limits, name) for model in models.models.values())
              for name in ("max_new_tokens", "max_source_tokens")}
    schema = request_schema(dataclasses.replace(limits, **widest))
    add_error_handlers(app, value_hints(schema))
    guarded = (401,) if access.required else ()
    busy = (429,) * access.limited + (503,) * any(b.max_queue is not None for b in batchers.values())
    add_translate(app, schema, error_responses(400, *guarded, 413, 415, 422, *busy, 500))
    add_pages(app, models, guarded)
    libretranslate = LibreTranslateAPI(models, batchers, access, presented_key, available_formats())
    libretranslate.mount(app)
    file_api = app.state.files = FileAPI(libretranslate, files or FileSettings())
    file_api.mount(app)
    if observer is not None:
        add_metrics(app, observer, guarded)
    if offline_site is not None:
        add_offline_site(app, offline_site)
    return Guard(app, access, limits.max_body_bytes, observer, file_api.body_limits)


def make_batchers(models: ServedModels, metrics: ServerMetrics | None) -> dict[str, DynamicBatcher]:
    """Each model's dynamic batcher, its queue bounded by ``--max-queue``, counted by ``metrics``; held under the
    test hook (module docstring), which is off in every real run."""
    held = os.environ.get(HOLD_ENV, "") not in ("", "0")
    batchers = {}
    for name, model in models.models.items():
        limits, decode = model.service.limits, model.service.decode
        batchers[name] = batcher = DynamicBatcher(decode if metrics is None else metrics.observed(decode, name),
                                                  limits.max_batch_size, limits.max_wait_ms, held=held, name=name,
                                                  max_queue=limits.max_queue)
        if metrics is not None:
            metrics.watch_queue(name, lambda batcher=batcher: batcher.depth)
    return batchers


def add_metrics(app: Any, metrics: ServerMetrics, guarded: tuple[int, ...]) -> None:
    """``GET /metrics`` (``--metrics``): Prometheus' text format; behind the API key like every native route."""

    @app.get("/metrics", summary="Prometheus metrics: requests, latency, batches, queues, tokens translated",
             responses=error_responses(*guarded, json_route=False))
    async def exposition() -> Response:
        body, media_type = metrics.exposition()
        return Response(body, media_type=media_type)


def admit(access: Access, request: Request, text: str | list[str]) -> None:
    """The limits of ``POST /translate``: the request limit (``OverLimit``: 429, a text counting as one request) and
    the character limit (a ``RequestError`` naming the text: 422)."""
    texts = [text] if isinstance(text, str) else text
    key = request.scope.get("state", {}).get("api_key")
    access.admit(key, client_address(request.scope), len(texts))
    if (over := access.too_long(texts, key)) is not None:
        i, length, limit = over
        raise RequestError("text" if isinstance(text, str) else f"text[{i}]",
                           f"{length} characters exceed the limit of {limit} per text (--char-limit); split the text.")


def add_offline_site(app: Any, site: str | os.PathLike) -> None:
    """The static site at ``/offline/`` (its page finds its files beside it, so ``/offline`` redirects there)."""
    if not os.path.isfile(os.path.join(site, "encdec.js")):
        raise EncdecError(f"--offline-site {site}: not a site written by `encdec export --format web` (no encdec.js); "
                          "export one with `encdec export --format web --model MODEL --output SITE`.")
    mimetypes.add_type("application/wasm", ".wasm")  # what WebAssembly and ONNX files are, on any system
    mimetypes.add_type("application/octet-stream", ".onnx")
    app.get("/offline", include_in_schema=False)(lambda: RedirectResponse("/offline/"))
    app.mount("/offline", StaticFiles(directory=site, html=True), name="offline")


def add_translate(app: Any, schema: type[BaseModel], errors: dict[int | str, dict[str, Any]]) -> None:
    """``POST /translate``: pick the model, check the request into jobs, and answer once its batcher has decoded
    them all."""

    async def translate(body: schema, http: Request) -> TranslateResponse:  # type: ignore[valid-type]
        request = body.model_dump()
        admit(app.state.access, http, request["text"])
        split = request.pop("split_sentences")
        served = app.state.models.pick(request.pop("source"), request.pop("target"), request.pop("model"))
        if split:  # sentence by sentence, as the LibreTranslate API translates (encdec.serve.split)
            answers = await translate_split(served, app.state.batchers[served.name], request)
        else:
            jobs = await off_loop(served.service.jobs, **request)
            futures = app.state.batchers[served.name].submit(jobs)
            answers = served.service.per_text(jobs, await asyncio.gather(*(asyncio.wrap_future(f) for f in futures)))
        return TranslateResponse(translations=[Translation(**answer) for answer in answers])

    app.router.add_api_route("/translate", translate, methods=["POST"], response_model=TranslateResponse,
                             response_model_exclude_none=True, responses=errors, route_class_override=BoundedJSONRoute,
                             summary="Translate a text or a list of texts")


class BoundedJSONRoute(APIRoute):
    """A route whose JSON body is refused (400) before it is parsed when it nests deeper than ``MAX_JSON_DEPTH``
    (``encdec.serve.offload``)."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def bounded(request: Request) -> Response:
            if (why := too_deep(await request.body())) is not None:  # the body is kept for the handler
                return error_response(400, f"body: JSON {why}; {EXAMPLE}.", request, "body")
            return await handler(request)
        return bounded


def models_info(models: ServedModels) -> dict[str, Any]:
    """``GET /info``: the first model's description (one model: the server's, as before), and every model's under
    ``models``, each with its name and language pair."""
    described = []
    for name, model in models.models.items():
        info = model.service.info()
        described.append({**info, "folder": info["name"], "name": name, "source": model.source,
                          "target": model.target})
    return {**described[0], "models": described}


def add_pages(app: Any, models: ServedModels, guarded: tuple[int, ...]) -> None:
    """``GET /health``, ``/info``, the page at ``/`` and its icon; ``guarded``: (401,) behind an API key."""
    page = resources.files("encdec").joinpath(PAGE).read_text(encoding="utf-8")
    icon = resources.files("encdec").joinpath(FAVICON).read_bytes()
    errors = error_responses(*guarded)

    @app.get("/health", summary="Liveness: 200 while the server takes requests", responses=errors)
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/info", summary="The model: family, size, languages, card metrics; the engine, defaults and limits",
             responses=errors)
    async def info() -> dict[str, Any]:
        return models_info(models)

    @app.get("/", response_class=HTMLResponse, summary="A page that translates and shows the alignment",
             responses=error_responses(*guarded, json_route=False))
    async def index() -> HTMLResponse:
        return HTMLResponse(page)

    @app.get("/favicon.ico", include_in_schema=False)
    @app.get("/favicon.svg", include_in_schema=False)
    async def favicon() -> Response:
        return Response(icon, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


def add_error_handlers(app: Any, hints: dict[str, str]) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        status, message, field = validation_message(list(error.errors()), request.headers.get("content-type", ""),
                                                    request.scope.get("state", {}).get("body_bytes", 0), hints)
        return error_response(status, message, request, field)

    @app.exception_handler(RequestError)
    async def refused(request: Request, error: RequestError) -> JSONResponse:
        return error_response(422, str(error), request, error.field)

    @app.exception_handler(Overloaded)  # 429 over a request limit, 503 with a full queue: in each API's words
    async def overloaded(request: Request, error: Overloaded) -> JSONResponse:
        if request.url.path.startswith(LIBRETRANSLATE_PREFIX):
            return JSONResponse({"error": error.lt_message}, error.status, headers=error.headers)
        return error_response(error.status, error.message, request, headers=error.headers)

    @app.exception_handler(Exception)  # Starlette answers with this, then re-raises for Guard to log
    async def internal(request: Request, error: Exception) -> JSONResponse:
        return error_response(500, INTERNAL_ERROR, request)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        messages = {400: parse_failure(error.__cause__),
                    404: f"no endpoint {request.url.path}; see /docs for the API.",
                    405: f"{request.method} is not allowed on {request.url.path}; see /docs for the API.",
                    413: "body: larger than the limit (--max-body-bytes)."}
        field = "body" if error.status_code in (400, 413) else None
        return error_response(error.status_code, messages.get(error.status_code, f"{error.detail}."), request,
                              field, getattr(error, "headers", None))


def build_service(model_dir: str, engine: str | None = "torch", quantize: str | None = None,
                  dtype: str | None = None, limits: ServeLimits | None = None) -> TranslationService:
    translator, tokenizer = load_engine(model_dir, engine or "torch", quantize=quantize, dtype=dtype)
    return TranslationService(translator, tokenizer, limits, model_dir=model_dir)


def load_models(models: str | list[str], engine: str = "torch", quantize: str | None = None,
                dtype: str | None = None, limits: ServeLimits | None = None) -> ServedModels:
    """The ``--model`` arguments (``[SRC-TGT=]DIR[,engine=E,quantize=Q,dtype=D]``), each loaded once, with the
    command's engine options as defaults; every refusal (a malformed value, two models for one pair, a pair that the
    card contradicts) comes before the server starts."""
    specs = [ModelSpec.parse(value) for value in ([models] if isinstance(models, str) else models)]
    defaults = {"engine": engine, "quantize": quantize, "dtype": dtype}
    return ServedModels.load(specs, lambda model_dir, options: build_service(model_dir, limits=limits, **options),
                             defaults)


class EncdecServer(uvicorn.Server):
    """uvicorn's server, saying where it listens once it does (``announce``: the bound address, so ``--port 0``
    gives the port the system chose) and, on SIGTERM or SIGINT, once it takes no more connections."""

    def __init__(self, config: Any, announce: Callable[[list[str]], None]) -> None:
        super().__init__(config)
        self.announce = announce

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.announce(self.urls())

    def urls(self) -> list[str]:
        """``http://HOST:PORT`` of each listening socket (``localhost`` may bind IPv4 and IPv6 alike)."""
        found = []
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
                found += [url] if url not in found else []
        return found

    async def shutdown(self, sockets: Any = None) -> None:
        for server in self.servers:  # uvicorn's first step too: closed here so that the line below is true
            server.close()
        print("encdec serve: stopping: no new connections; finishing the requests in flight", flush=True)
        await super().shutdown(sockets=sockets)


def release_on_stdin(batchers: dict[str, DynamicBatcher]) -> None:
    """The test hook's release (module docstring): a thread that opens the held batchers once stdin gives a line
    or ends."""

    def wait_for_line() -> None:
        sys.stdin.readline()
        for batcher in batchers.values():
            batcher.release()

    threading.Thread(target=wait_for_line, name="encdec-test-release", daemon=True).start()


def serve(models: str | list[str], engine: str = "torch", quantize: str | None = None, dtype: str | None = None,
          host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None, limits: ServeLimits | None = None,
          log_level: str = "info", files: FileSettings | None = None, api_keys_db: str | None = None,
          suggestions: bool = False, metrics: bool = False, offline_site: str | None = None,
          trusted_proxies: list[str] | None = None) -> None:
    """Load the models and serve them until SIGINT or SIGTERM (``encdec serve``); ``port`` 0 takes a free port,
    which the start-up line names. A port in use and a key database that cannot be used are refused before the
    models load; ``trusted_proxies``: the proxies whose ``X-Forwarded-For`` names the client (``server_config``)."""
    api_key = api_key or os.environ.get(API_KEY_ENV) or None
    check_bind(host, api_key or api_keys_db)
    check_port(host, port)
    keys = KeyDatabase(api_keys_db, timeout=SERVER_TIMEOUT) if api_keys_db else None
    Access(api_key, keys, suggestions=suggestions)  # its refusals, before the models load
    served = load_models(models, engine, quantize, dtype, limits)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name, model in served.models.items():
        info = model.service.info()
        print(f"encdec serve: {info['family']} model {model.service.model_dir} ({info['engine']} engine) as {name}",
              flush=True)
    resident = psutil.Process().memory_info().rss / 2**20

    def announce(urls: list[str]) -> None:  # once bound: the port is the real one, also for --port 0
        print(f"encdec serve: {len(served.models)} model(s) loaded, {resident:,.0f} MiB resident; on "
              f"{' and '.join(urls)} - page at /, API docs at /docs", flush=True)

    app = create_app(served, api_key, files=files, keys=keys, suggestions=suggestions, metrics=metrics,
                     offline_site=offline_site)
    if os.environ.get(HOLD_ENV, "") not in ("", "0"):
        release_on_stdin(app.app.state.batchers)
    server = EncdecServer(server_config(app, host, port, log_level, trusted_proxies), announce)
    with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run: Ctrl-C ends the command quietly
        server.run()
    if not server.started:  # as uvicorn.run
        sys.exit(STARTUP_FAILURE)


__all__ = ["API_KEY_ENV", "HOLD_ENV", "SERVE_INSTALL", "EncdecServer", "ErrorResponse", "TranslateResponse",
           "build_service", "check_bind", "check_port", "create_app", "load_models", "request_schema", "serve",
           "server_config"]
