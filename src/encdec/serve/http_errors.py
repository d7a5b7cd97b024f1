"""The server's error answers: every one, 4xx or 500, an ``ErrorResponse`` (``{"error": "<field>: <what is wrong>;
<the fix>", "field": ..., "request_id": ...}``; ``schema.ERROR_STATUSES`` says which status means what), unless the
API a path belongs to writes it in its own words (``encdec.serve.adapter.Adapter``: a request refused for now, a
path that is no route). A fault of the server is a 500 whose body names only the request id; the log has the rest."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .adapter import Adapter, adapter_for
from .limits import Overloaded
from .schema import FIELD_CHARS, parse_failure, printable
from .service import RequestError

INTERNAL_ERROR = "internal server error; the server log has the details under this request id."


def error_response(status: int, message: str, request: Request, field: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    body = {"error": printable(message), "field": None if field is None else printable(field, FIELD_CHARS),
            "request_id": request_id(request.scope)}
    return JSONResponse(body, status_code=status, headers=headers)


def request_id(scope: dict) -> str | None:
    return scope.get("state", {}).get("request_id")


def add_error_handlers(app: Any, adapters: list[Adapter]) -> None:
    """The handlers of the errors every API may meet: a request the serving core refuses (``RequestError``, 422),
    ``Overloaded`` (429, 503), an HTTP error of the routing or the
    body (400, 404, 405, 413), and any other exception (500); each in the words of the path's API where its adapter
    has some (``adapter_for``)."""

    def api(request: Request) -> Adapter:
        return adapter_for(adapters, request.url.path)

    @app.exception_handler(RequestError)  # the serving core's refusal of a request: 422 naming the field
    async def refused(request: Request, error: RequestError) -> JSONResponse:
        return api(request).refused(request, error) or error_response(422, str(error), request, error.field)

    @app.exception_handler(Overloaded)  # 429 over a request limit, 503 with a full queue: in each API's words
    async def overloaded(request: Request, error: Overloaded) -> JSONResponse:
        answer = api(request).overloaded(request, error)
        return answer or error_response(error.status, error.message, request, headers=error.headers)

    @app.exception_handler(Exception)  # Starlette answers with this, then re-raises for Guard to log
    async def internal(request: Request, error: Exception) -> JSONResponse:
        return error_response(500, INTERNAL_ERROR, request)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        if error.status_code in (404, 405) and (answer := api(request).not_routed(request, error)) is not None:
            return answer
        messages = {400: parse_failure(error.__cause__),
                    404: f"no endpoint {request.url.path}; see /docs for the API.",
                    405: f"{request.method} is not allowed on {request.url.path}; see /docs for the API.",
                    413: "body: larger than the limit (--max-body-bytes)."}
        field = "body" if error.status_code in (400, 413) else None
        return error_response(error.status_code, messages.get(error.status_code, f"{error.detail}."), request,
                              field, getattr(error, "headers", None))


__all__ = ["INTERNAL_ERROR", "add_error_handlers", "error_response", "request_id"]
