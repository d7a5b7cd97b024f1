"""The ASGI app of ``encdec serve`` (FastAPI, with ``/docs`` from the package ``fastapi-offline``): each model's
dynamic batcher, started with the app and drained when it stops; every API of ``encdec.serve.apis`` mounted by its
adapter over the same models, batchers, keys and limits; the server's error answers (``http_errors``), the page at
``/`` and the offline site (``site``), ``GET /metrics`` (``metrics``), all behind the guard (``guard``: request ids,
API keys, body limits, CORS). ReDoc (``/redoc``) is off: its page loads the Redocly logo from a CDN whatever it is
given."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import logging
import os
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI
from fastapi.responses import Response
from fastapi_offline import FastAPIOffline

from . import apis
from .adapter import Adapter, Serving
from .batcher import DynamicBatcher
from .guard import Guard, presented_key
from .held_batches import batcher_class
from .http_errors import add_error_handlers
from .keys import KeyDatabase
from .limits import Access
from .metrics import ServerMetrics
from .schema import ERROR_STATUSES, error_responses
from .served_models import ServedModels, served_as
from .service import TranslationService
from .site import add_offline_site, add_page

logger = logging.getLogger("encdec.serve")


def create_app(served: TranslationService | ServedModels, api_key: str | None = None,
               keys: KeyDatabase | None = None, metrics: bool = False, offline_site: str | os.PathLike | None = None,
               api_settings: dict[str, dict[str, Any]] | None = None, **settings: Any) -> Any:
    """The ASGI app over one service or several (``ServedModels``). ``keys``: a key database
    (``encdec.serve.limits.Access`` has the rules); ``metrics``: ``GET /metrics``; ``offline_site``: a site of
    ``encdec export --format web``, served at ``/offline/``; ``api_settings`` and ``settings``: the APIs' own
    settings (``configured``), e.g. ``files=`` and ``suggestions=`` of LibreTranslate's API."""
    models = served if isinstance(served, ServedModels) else ServedModels([served_as(served)])
    first = next(iter(models.models.values())).service
    limits = first.limits
    access = Access(api_key, keys, limits.req_limit, limits.char_limit)
    configured_apis = configured(api_settings, settings, keys)
    observer = ServerMetrics() if metrics else None
    batchers = make_batchers(models, observer)
    adapters = make_adapters(Serving(models, batchers, access, presented_key), configured_apis)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        for batcher in batchers.values():
            batcher.start()
        logger.info("batching up to %d texts, waiting up to %s ms", limits.max_batch_size, limits.max_wait_ms)
        for adapter in adapters:
            adapter.start()
        yield
        for batcher in batchers.values():  # every job submitted is answered first
            await asyncio.to_thread(batcher.stop)
        for adapter in adapters:
            adapter.close()

    app = FastAPIOffline(title="encdec translation server", version=first.info()["encdec_version"],
                         lifespan=lifespan, redoc_url=None,
                         description="Translate with an encdec model. Every error is an `ErrorResponse`, "
                                     "`{error, field, request_id}`:\n\n"
                                     + "\n".join(f"- {status}: {text}" for status, text in ERROR_STATUSES.items()))
    app.state.models, app.state.batchers, app.state.access = models, batchers, access
    add_error_handlers(app, adapters)
    guarded = (401,) if access.required else ()
    for adapter in adapters:
        adapter.mount(app)
        if not adapter.prefix:  # the page at / goes with the paths of no API's prefix
            add_page(app, guarded)
    if observer is not None:
        add_metrics(app, observer, guarded)
    if offline_site is not None:
        add_offline_site(app, offline_site)
    return Guard(app, access, limits.max_body_bytes, adapters, observer)


def adapter_classes() -> dict[str, type[Adapter]]:
    """The adapter of each API that ``encdec.serve.apis`` lists, by its module."""
    return {api.module: importlib.import_module(api.module).ADAPTER for api in apis.ADAPTERS}


def configured(api_settings: dict[str, dict[str, Any]] | None, settings: dict[str, Any],
               keys: KeyDatabase | None) -> dict[str, Any]:
    """Each API's settings, by its module, made and checked by its adapter's ``configure``: the keyword arguments
    that ``api_settings`` holds under its module (``encdec.serve.apis.settings_from``: what its flags made of
    ``encdec serve``'s arguments) and those of ``settings`` that name a field of its ``Settings``; ``keys``: the key
    database. A setting no API takes is refused."""
    given, settings = dict(api_settings or {}), dict(settings)
    found = {}
    for module, adapter in adapter_classes().items():
        fields = [field.name for field in dataclasses.fields(adapter.Settings)] if adapter.Settings else []
        mine = {**given.pop(module, {}), **{name: settings.pop(name) for name in fields if name in settings}}
        found[module] = adapter.configure(mine, keys)
    if given or settings:
        raise TypeError(f"no API of encdec serve takes the settings {sorted([*given, *settings])}")
    return found


def make_adapters(serving: Serving, settings: dict[str, Any]) -> list[Adapter]:
    """An adapter of each API that ``encdec.serve.apis`` lists, over ``serving``, with its ``settings`` (by module:
    ``configured``)."""
    return [adapter(serving, settings.get(module)) for module, adapter in adapter_classes().items()]


def make_batchers(models: ServedModels, metrics: ServerMetrics | None) -> dict[str, DynamicBatcher]:
    """Each model's dynamic batcher, its queue bounded by ``--max-queue``, counted by ``metrics`` (held under the
    test hook of ``encdec.serve.held_batches``, which is off in every real run)."""
    batcher = batcher_class()
    batchers = {}
    for name, model in models.models.items():
        limits, decode = model.service.limits, model.service.decode
        batchers[name] = made = batcher(decode if metrics is None else metrics.observed(decode, name),
                                        limits.max_batch_size, limits.max_wait_ms, name=name,
                                        max_queue=limits.max_queue)
        if metrics is not None:
            metrics.watch_queue(name, lambda made=made: made.depth)
    return batchers


def add_metrics(app: Any, metrics: ServerMetrics, guarded: tuple[int, ...]) -> None:
    """``GET /metrics`` (``--metrics``): Prometheus' text format; behind the API key like every native route."""

    @app.get("/metrics", summary="Prometheus metrics: requests, latency, batches, queues, tokens translated",
             responses=error_responses(*guarded, json_route=False))
    async def exposition() -> Response:
        body, media_type = metrics.exposition()
        return Response(body, media_type=media_type)


__all__ = ["adapter_classes", "configured", "create_app", "make_adapters", "make_batchers"]
