"""The native API, an adapter like any other (``encdec.serve.adapter``) that owns the paths no other API claims:
``POST /translate`` (a text or a list; the model by pair or name; the decoding options of ``encdec translate``;
sentence by sentence), ``GET /health`` and ``GET /info``. Its request schema and errors in words are
``encdec.serve.schema``'s; a request is checked against the limits (``admit``), given its route of models
(``ServedModels.route``: by name, or by its languages, through a pivot where no model serves them directly, none for
one language) and answered by the serving core (``core.route_answers``), the pivot languages named in ``pivot``. Its
errors are the server's own shape, ``ErrorResponse`` (``encdec.serve.http_errors``), with the field at fault."""

from collections.abc import Callable
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from . import core
from .adapter import Adapter
from .http_errors import error_response
from .limits import Access, client_address
from .offload import too_deep
from .schema import (
    EXAMPLE,
    TranslateResponse,
    Translation,
    error_responses,
    request_schema,
    validation_message,
    value_hints,
)
from .served_models import ServedModels
from .service import RequestError, widest


class NativeAPI(Adapter):
    """``POST /translate``, ``GET /health`` and ``GET /info`` over the served models (module docstring)."""

    def mount(self, app: Any) -> None:
        serving = self.serving
        models, access = serving.models, serving.access
        # the schema takes the largest limits of the models; each model's own are checked when its jobs are made
        schema = request_schema(widest([model.service.limits for model in models.models.values()]))
        add_handlers(app, value_hints(schema))
        guarded = (401,) if access.required else ()
        busy = (429,) * access.limited + (503,) * any(b.max_queue is not None for b in serving.batchers.values())
        add_translate(app, schema, error_responses(400, *guarded, 413, 415, 422, *busy, 500))
        add_health_and_info(app, models, guarded)


def add_handlers(app: Any, hints: dict[str, str]) -> None:
    """A body that breaks the schema: 400, 413, 415 or 422 in words (``schema.validation_message``)."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        status, message, field = validation_message(list(error.errors()), request.headers.get("content-type", ""),
                                                    request.scope.get("state", {}).get("body_bytes", 0), hints)
        return error_response(status, message, request, field)


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


def add_translate(app: Any, schema: type, errors: dict[int | str, dict[str, Any]]) -> None:
    """``POST /translate``: pick the model, and answer once the serving core has translated every text."""

    async def translate(body: schema, http: Request) -> TranslateResponse:  # type: ignore[valid-type]
        request = body.model_dump()
        admit(app.state.access, http, request["text"])
        models = app.state.models
        route = models.route(request.pop("source"), request.pop("target"), request.pop("model"))
        check = next(iter(models.models.values())).service  # texts of one language, checked as any
        answers = await core.route_answers(route, app.state.batchers, request, check)
        return TranslateResponse(translations=[Translation.of(answer, listed) for answer, listed in answers],
                                 pivot=route.pivots or None)

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
    ``models``, each with its name, language pair (none for a multilingual model serving all its directions) and
    the directions it serves (``[source, target]`` each); ``pivots``: the pairs that only a pivot reaches, each with
    the languages it passes through and the models it takes (``{"source", "target", "through", "models"}``)."""
    described = []
    for name, model in models.models.items():
        info = model.service.info()
        described.append({**info, "folder": info["name"], "name": name, "source": model.source,
                          "target": model.target, "directions": [[hop.source, hop.target] for hop in model.directions]})
    pivots = [{"source": route.source, "target": route.target, "through": route.pivots,
               "models": [hop.model.name for hop in route.hops]} for route in models.pivoted()]
    return {**described[0], "models": described, "pivots": pivots}


def add_health_and_info(app: Any, models: ServedModels, guarded: tuple[int, ...]) -> None:
    """``GET /health`` and ``/info``; ``guarded``: (401,) behind an API key."""
    errors = error_responses(*guarded)

    @app.get("/health", summary="Liveness: 200 while the server takes requests", responses=errors)
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/info", summary="The model: family, size, languages, card metrics; the engine, defaults and limits",
             responses=errors)
    async def info() -> dict[str, Any]:
        return models_info(models)


ADAPTER = NativeAPI

__all__ = ["ADAPTER", "NativeAPI", "models_info"]
