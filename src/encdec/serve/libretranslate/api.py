"""LibreTranslate's HTTP API in front of ``encdec serve``'s models, under ``/libretranslate/``.

The clients people already translate with (Weblate, SearXNG, deep-translator, browser extensions, the LibreTranslate
libraries for Python, JavaScript, .NET and Dart) speak LibreTranslate's API. This adapter answers it with the field
names, types, status codes and error shapes of LibreTranslate's own server (``libretranslate/app.py``), over the same
models and dynamic batchers as the native ``/translate``: a request becomes jobs like any other, under the same
limits.

- ``POST /translate``: ``q`` (a string or a list), ``source``, ``target``, ``format`` (``text``, or ``html``: each
  sentence translated whole across its inline tags, which go back on the words they enclosed, the block-level tags
  kept as written: ``encdec.serve.tagged_text``; malformed HTML is a 400 naming ``q``), ``alternatives`` (up to that
  many other translations, from beam search; the translation itself is the same with or without them), ``api_key``;
  JSON or form-encoded.
  ``source: "auto"`` detects the language of ``q`` among the served languages with a route into ``target``
  (``encdec.serve.detection``) and says which in ``detectedLanguage``. The pairs as LibreTranslate takes them
  (``encdec.serve.pairs``): codes in any case and LibreTranslate's aliases; ``source`` equal to ``target`` gives
  ``q`` back as it is; a pair that no model serves goes through a pivot language, which ``pivot`` (encdec's own
  field) names; a text with nothing to translate (``core.nothing_to_translate``) comes back as it is. The serving
  core (``encdec.serve.core``) cuts every text into its lines and sentences, which are decoded as jobs of their own;
  a sentence over the source limit is cut to it, with a warning in the log, and the text is put back together around
  the translations.
- ``POST /detect``: ``q`` (a string or a list), ``api_key``: the served source languages it is most likely in.
- ``POST /translate_file`` and ``GET /download_file/<id>/<name>``: ``libretranslate.files``.
- ``GET /languages``, ``GET /frontend/settings``, ``GET /health``; ``POST /suggest`` (``q``, ``s``, ``source``,
  ``target``), stored in the key database under ``--suggestions``.
- encdec's own fields of ``POST /translate``: the decoding options declared for ``EXTENSION``
  (``decoding_options``), under their JSON names (``extension_options``).
- The key and the request limit apply to ``/translate``, ``/detect``, ``/translate_file`` and ``/suggest``, as
  LibreTranslate's ``access_check`` and limiter apply them; the character limit to ``/translate``, per request (the
  texts of ``q`` together, as LibreTranslate counts them), and to ``q`` and ``s`` of ``/suggest`` (a file's
  characters count as requests: ``libretranslate.files``). The keys and limits: ``encdec.serve.limits``.
- Every error is ``{"error": "..."}`` with LibreTranslate's status: 400 for a bad request, 403 for a wrong API key,
  404 for a path that is no endpoint (``libretranslate.routes``: repeated slashes count as one), 429
  over a request limit (``Slowdown: ...``, with ``Retry-After``), 503 with a full queue.
- CORS headers as LibreTranslate sends them, on every answer under the prefix, so that browser clients work.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from ...decoding_options import EXTENSION, declared, json_name
from ...version import __version__
from ..core import FORMATS, Plan, TooManySentences, plain_texts, translate_route
from ..detection import DetectionError, detect_source, served_sources
from ..detection import detect as detect_languages
from ..keys import ApiKey
from ..limits import Access, client_address
from ..offload import lone_surrogate, off_loop, too_deep
from ..pairs import Route, find_route, reachable, served_code
from ..schema import printable
from ..served_models import LANGUAGE_NAMES, ServedModels
from ..service import RequestError
from ..tagged_text import translate_markup
from .routes import add_preflights, merge_slashes

PREFIX = "/libretranslate"
CORS_HEADERS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Headers": "Authorization, Content-Type",
                "Access-Control-Expose-Headers": "Authorization", "Access-Control-Allow-Methods": "GET, POST",
                "Access-Control-Allow-Credentials": "true", "Access-Control-Max-Age": str(60 * 60 * 24 * 20)}
ERROR_SCHEMA = {"content": {"application/json": {"schema": {  # LibreTranslate's error answer, for /docs
    "type": "object", "properties": {"error": {"type": "string"}}, "required": ["error"]}}}}
TEXTS = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
         "description": "A text, or a list of texts"}
STRING = {"type": "string"}
SUGGESTION_CHARS = 5_000  # characters of q and of s in a suggestion, without a character limit


def request_body(fields: dict[str, Any], required: list[str],
                 media_types: tuple[str, ...] = ("application/json", "application/x-www-form-urlencoded")
                 ) -> dict[str, Any]:
    """An operation's body for the OpenAPI description (``/spec``, ``/docs``): an object of ``fields`` (JSON
    schemas), as JSON or as a form, as LibreTranslate takes either."""
    schema = {"type": "object", "properties": fields, "required": required}
    return {"requestBody": {"required": True, "content": {media: {"schema": schema} for media in media_types}}}


class Refusal(Exception):
    """A request LibreTranslate would refuse: ``{"error": message}`` with ``status``."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def over_request(access: Access, texts: list[str], key: ApiKey | None) -> tuple[int, int] | None:
    """(characters, limit) of a request whose texts together exceed the character limit (the key's, else the
    server's), as LibreTranslate counts a request (``sum(len(text) for text in q)``), or None."""
    limit = access.char_limit_for(key)
    characters = sum(len(text) for text in texts)
    return None if limit is None or characters <= limit else (characters, limit)


def file_cost(access: Access, texts: list[str], key: ApiKey | None) -> int:
    """What a file of ``texts`` costs in requests, as LibreTranslate charges ``/translate_file``: its size over the
    character limit (LibreTranslate's bytes; here the characters of its texts, not of its markup or packaging), at
    least 1; 1 without a character limit."""
    limit = access.char_limit_for(key)
    return 1 if limit is None else max(1, sum(len(text) for text in texts) // limit)


def refusal(error: RequestError) -> Refusal:
    """The serving core's refusal of a request (``core.TooManySentences``, or a text's ``RequestError``) in
    LibreTranslate's words."""
    if isinstance(error, TooManySentences):
        return Refusal(f"Invalid request: {error.count} sentences exceed the limit of {error.limit} per request; send "
                       "them in several requests")
    where = "q" + error.field.removeprefix("text") if error.field.startswith("text") else error.field
    return Refusal(f"Invalid request: {where}: {error.reason}")


async def translate_texts(route: Route, batchers: dict[str, Any], texts: list[str], plan: Plan,
                          tags: dict[str, Any] | None = None) -> list[list[str]]:
    """``core.translate_route``; HTML (``plan.text_format``) through ``tagged_text.translate_markup``, its elements
    read as ``tags`` say (its keyword arguments; default: HTML's); its refusals in LibreTranslate's words."""
    try:
        if plan.text_format != "html":
            return await translate_route(route, batchers, texts, plan)
        found = await translate_markup(route, batchers, texts, decoding=plan.decoding, max_pieces=plan.max_pieces,
                                       **(tags or {}))
        return [[text] for text in found]
    except RequestError as error:
        raise refusal(error) from None


def languages(models: ServedModels) -> list[dict[str, Any]]:
    """``GET /languages``: every served language, source or target, with its name and the codes it is translated
    into, directly or through a pivot (``encdec.serve.pairs``); none for a language served only as a target."""
    directions = models.directions()
    return [{"code": code, "name": name_of(code), "targets": reachable(directions, code)}
            for code in sorted(models.languages())]


def name_of(code: str) -> str:
    return LANGUAGE_NAMES.get(code, code)


def choose(models: ServedModels, source: str, target: str) -> Route:
    """The route of models for ``source`` -> ``target`` (codes in any case, or LibreTranslate's aliases: ``DE``,
    ``pt-BR``, ``zh-Hans``): none for one language, a direct model, else through a pivot (``encdec.serve.pairs``);
    refused in LibreTranslate's words."""
    directions, served = models.directions(), models.languages()
    found = served_code(source, served), served_code(target, served)
    if found[0] is not None and found[0] == found[1]:
        return Route(found[0], found[1], ())
    sources, targets = {hop.source for hop in directions}, {hop.target for hop in directions}
    for code, known, side in ((source, found[0], sources), (target, found[1], targets)):
        if known not in side:  # not a served language (None), or no model from it or into it
            raise Refusal(f"{code} is not supported")
    route = find_route(directions, *found)
    if route is None:
        raise Refusal(f"{name_of(found[1])} ({found[1]}) is not available as a target language from "
                      f"{name_of(found[0])} ({found[0]})")
    return route


async def read_body(request: Request) -> dict[str, Any]:
    """A JSON object (``json_object``), or a form's fields (``q`` repeated: a list), as LibreTranslate reads either;
    refused where a text field is not Unicode (``check_unicode``)."""
    if request.headers.get("content-type", "").split(";")[0].strip() == "application/json":
        return await off_loop(json_object, await request.body())
    form = await request.form()
    body: dict[str, Any] = {**request.query_params, **{key: form.get(key) for key in form}}  # as request.values
    texts = form.getlist("q") or request.query_params.getlist("q")
    if len(texts) > 1:
        body["q"] = texts
    check_unicode(body)
    return body


def json_object(raw: bytes) -> dict[str, Any]:
    """A JSON body's object, read within the bounds of ``encdec.serve.offload``: nested at most ``MAX_JSON_DEPTH``
    deep (checked before parsing), every text Unicode (``check_unicode``); refused in LibreTranslate's words."""
    if (why := too_deep(raw)) is not None:
        raise Refusal(f"Invalid JSON format: {why}")
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise Refusal("Invalid JSON format") from None
    if not isinstance(body, dict):
        raise Refusal("Invalid JSON format")
    check_unicode(body)
    return body


def check_unicode(body: dict[str, Any]) -> None:
    """Refuse a body whose text field (``q``, ``q[2]``, ``source``, ...) holds a lone surrogate (JSON's ``\\ud800``):
    no text of the API can hold one, and UTF-8 cannot encode it."""
    for name, value in body.items():
        for i, item in enumerate(value) if isinstance(value, list) else [(None, value)]:
            if isinstance(item, str) and (fault := lone_surrogate(item)) is not None:
                raise Refusal(f"Invalid request: {name}{'' if i is None else f'[{i}]'} is not valid Unicode: {fault}; "
                              "send UTF-8 text (a surrogate pair is fine, half of one is not)")


def extension_options(body: dict[str, Any], route: Route, alternatives: int) -> dict[str, Any] | None:
    """encdec's own fields of ``/translate`` (the options declared for ``EXTENSION``, under their JSON names),
    checked with the rest of the decoding (``Plan.decoding``); they shape the one translation of a direct route, so
    not with ``alternatives`` nor through a pivot."""
    asked = {json_name(item.name): body[json_name(item.name)] for item in declared(EXTENSION)
             if body.get(json_name(item.name)) is not None}
    named = ", ".join(asked)
    if asked and alternatives:
        raise Refusal(f"Invalid request: alternatives are not given with {named}; leave one of them out")
    if asked and route.pivots:
        raise Refusal(f"Invalid request: {named} needs a model that translates {route.source} into {route.target} "
                      f"directly, and this pair goes through {', '.join(route.pivots)}")
    return asked or None


def alternatives_of(body: dict[str, Any], limit: int) -> int:
    value = body.get("alternatives", 0) or 0
    try:
        count = max(0, int(value))
    except (TypeError, ValueError, OverflowError):
        raise Refusal("Invalid request: alternatives parameter is not a number") from None
    if count > limit:
        raise Refusal(f"Invalid request: alternatives parameter must be <= {limit}")
    return count


def texts_of(body: dict[str, Any], max_texts: int, fields: tuple[str, ...] = ()) -> tuple[list[str], bool]:
    """The texts of ``q`` and whether it was a list, with ``fields`` (strings) given too; refused in LibreTranslate's
    words."""
    for name in ("q", *fields):
        if not body.get(name):
            raise Refusal(f"Invalid request: missing {name} parameter")
    q = body["q"]
    batch = isinstance(q, list)
    texts = q if batch else [q]
    if not all(isinstance(text, str) for text in texts):
        raise Refusal("Invalid request: q must be a string or a list of strings")
    if not all(isinstance(body[name], str) for name in fields):
        raise Refusal(f"Invalid request: {' and '.join(fields)} must be strings")
    if batch and len(texts) > max_texts:
        raise Refusal(f"Invalid request: request ({len(texts)}) exceeds text limit ({max_texts})")
    return texts, batch


def check_request(body: dict[str, Any], max_texts: int) -> tuple[list[str], bool, str]:
    """The texts of ``q``, whether it was a list, and the format; refused in LibreTranslate's words."""
    texts, batch = texts_of(body, max_texts, ("source", "target"))
    text_format = body.get("format") or "text"
    if text_format not in FORMATS:
        raise Refusal(f"{text_format} format is not supported")
    return texts, batch, text_format


class LibreTranslateAPI:
    """The routes under ``/libretranslate`` over ``models`` and their ``batchers``, with the keys and limits of
    ``access``; ``presented_key(headers)`` reads an API key from a request's headers (the body's ``api_key`` comes
    first, as in LibreTranslate); ``suggestions``: ``/suggest`` stores what it is given (``--suggestions``) in the
    key database of ``access``."""

    def __init__(self, models: ServedModels, batchers: dict[str, Any], access: Access, presented_key: Any,
                 file_formats: list[str] | None = None, suggestions: bool = False) -> None:
        self.models, self.batchers, self.access, self.presented_key = models, batchers, access, presented_key
        self.suggestions = suggestions
        self.file_formats = file_formats or []  # what /translate_file takes (encdec.serve.files), for the settings
        self.limits = next(iter(models.models.values())).service.limits

    def mount(self, app: FastAPI) -> None:
        router = APIRouter(prefix=PREFIX, tags=["LibreTranslate API"])
        errors = {400: ERROR_SCHEMA | {"description": "A bad request, in LibreTranslate's words"}}
        if self.access.required:
            errors[403] = ERROR_SCHEMA | {"description": "A wrong API key (`api_key` in the body, or a header)"}
        if self.access.limited:
            errors[429] = ERROR_SCHEMA | {"description": "Slow down: over a request limit (see `Retry-After`)"}
        router.add_api_route("/translate", self.translate, methods=["POST"], responses=errors,
                             summary="LibreTranslate: translate q from source to target (JSON or form body)",
                             openapi_extra=request_body({"q": TEXTS, "source": STRING, "target": STRING,
                                                         "format": {"enum": list(FORMATS)}, "alternatives":
                                                         {"type": "integer"}, "api_key": STRING},
                                                        ["q", "source", "target"]))
        router.add_api_route("/detect", self.detect, methods=["POST"], responses=errors,
                             summary="LibreTranslate: the served source languages q is most likely in",
                             openapi_extra=request_body({"q": TEXTS, "api_key": STRING}, ["q"]))
        router.add_api_route("/languages", self.languages, summary="LibreTranslate: the served languages")
        router.add_api_route("/frontend/settings", self.settings, summary="LibreTranslate: front-end settings")
        router.add_api_route("/health", self.health, summary="LibreTranslate: liveness")
        router.add_api_route("/spec", self.spec, summary="LibreTranslate: this API's OpenAPI description")
        router.add_api_route("/suggest", self.suggest, methods=["POST"], summary="LibreTranslate: suggest a "
                             "translation (stored under --suggestions)", responses=errors | {403: ERROR_SCHEMA},
                             openapi_extra=request_body({name: STRING for name in ("q", "s", "source", "target",
                                                                                   "api_key")},
                                                        ["q", "s", "source", "target"]))
        add_preflights(router, ["/translate", "/detect", "/languages", "/frontend/settings", "/health", "/suggest",
                                "/spec"])
        app.include_router(router)
        merge_slashes(app, PREFIX)  # repeated slashes as one (404 and 405 as {"error": ...}: the adapter)
        for refused in (Refusal, DetectionError):  # the CORS headers: encdec.serve.guard.Guard, on every answer
            app.add_exception_handler(refused, self.refused)

    async def translate(self, request: Request) -> JSONResponse:
        body = await read_body(request)
        key = await self.admit(body, request)
        texts, batch, text_format = check_request(body, self.limits.max_texts)
        if (over := over_request(self.access, texts, key)) is not None:  # per request, in LibreTranslate's words
            raise Refusal(f"Invalid request: request ({over[0]}) exceeds text limit ({over[1]})")
        alternatives = alternatives_of(body, self.limits.max_beams - 1) if text_format == "text" else 0
        target = served_code(body["target"], self.models.languages()) or body["target"]
        detected = await off_loop(lambda: detect_source(self.models, plain_texts(texts, text_format), target)
                                  ) if body["source"].lower() == "auto" else None
        route = choose(self.models, detected["language"] if detected else body["source"], body["target"])
        decoding = extension_options(body, route, alternatives)
        results = await translate_texts(route, self.batchers, texts, Plan(text_format, alternatives, decoding))
        answer: dict[str, Any] = {"translatedText": [r[0] for r in results] if batch else results[0][0]}
        if alternatives:
            answer["alternatives"] = [r[1:] for r in results] if batch else results[0][1:]
        if detected:  # one language for all the texts, as LibreTranslate detects them
            answer["detectedLanguage"] = [detected] * len(texts) if batch else detected
        if route.pivots:  # encdec's own field: the languages the texts went through (docs/serving.md)
            answer["pivot"] = route.pivots
        return JSONResponse(answer)

    async def detect(self, request: Request) -> JSONResponse:
        body = await read_body(request)
        await self.admit(body, request)
        texts, _ = texts_of(body, self.limits.max_texts)
        return JSONResponse(await off_loop(detect_languages, texts, served_sources(self.models)))

    async def admit(self, body: dict[str, Any], request: Request) -> ApiKey | None:
        """The request's key (None without one), checked as LibreTranslate checks it (missing: 400, wrong: 403),
        then the request counted against its limit (a list ``q`` counts a request a text, as in LibreTranslate).
        ``/translate``, ``/detect``, ``/suggest`` and ``/translate_file`` (``libretranslate.files``) call it; the key
        database is read off the event loop (503 when it cannot say: ``limits.KeysUnavailable``)."""
        key = None
        if self.access.required:
            presented = (body.get("api_key") or self.presented_key(dict(request.scope["headers"]))
                         or body.get("apiKey"))  # the npm client `libretranslate` sends `apiKey`
            if not presented:
                raise Refusal("Please contact the server operator to get an API key")
            if (key := await self.access.find(presented)) is None:
                raise Refusal("Invalid API key", 403)
        q = body.get("q")
        self.access.admit(key, client_address(request.scope), len(q) if isinstance(q, list) else 1)
        return key

    async def suggest(self, request: Request) -> JSONResponse:
        """A suggested translation ``s`` of ``q``, stored in the key database (LibreTranslate's ``/suggest``); ``q``
        and ``s`` each up to the character limit, else ``SUGGESTION_CHARS``."""
        if not self.suggestions:
            raise Refusal("Suggestions are disabled on this server.", 403)
        body = await read_body(request)
        key = await self.admit(body, request)
        fields = ("q", "s", "source", "target")
        for name in fields:
            if not body.get(name):
                raise Refusal(f"Invalid request: missing {name} parameter")
        if not all(isinstance(body[name], str) for name in fields):
            raise Refusal("Invalid request: q, s, source and target must be strings")
        limit = self.access.char_limit_for(key) or SUGGESTION_CHARS
        for name in ("q", "s"):
            if len(body[name]) > limit:
                raise Refusal(f"Invalid request: {name} ({len(body[name])}) exceeds text limit ({limit})")
        await self.access.suggest(*(body[name] for name in fields))
        return JSONResponse({"success": True})

    async def languages(self) -> JSONResponse:
        return JSONResponse(languages(self.models))

    async def settings(self) -> JSONResponse:
        first = next(iter(self.models.directions()), None)  # the first direction served, a multilingual one's too
        pair = ([{"code": code, "name": name_of(code)} for code in (first.source, first.target)] if first else
                [{"code": "auto", "name": "Auto Detect"}, {"code": "", "name": ""}])
        return JSONResponse({"charLimit": self.access.char_limit or -1, "frontendTimeout": 500,
                             "apiKeys": self.access.required, "keyRequired": self.access.required,
                             "suggestions": self.suggestions, "filesTranslation": bool(self.file_formats),
                             "supportedFilesFormat": self.file_formats,
                             "language": {"source": pair[0], "target": pair[1]}})

    async def health(self) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def spec(self, request: Request) -> JSONResponse:
        """The OpenAPI description of the routes under the prefix (LibreTranslate's ``/spec``), their paths relative to
        the base URL, which ``servers`` names: the app's own document (FastAPI's, from the routes) cut to them."""
        document = copy.deepcopy(request.app.openapi())
        document["info"] = {"title": "LibreTranslate API (encdec serve)", "version": __version__,
                            "description": "LibreTranslate's API over the models this server serves."}
        document["paths"] = {path.removeprefix(PREFIX): item for path, item in document.get("paths", {}).items()
                             if path.startswith(PREFIX + "/")}
        document["servers"] = [{"url": PREFIX}]
        return JSONResponse(document)

    async def refused(self, request: Request, error: Exception) -> JSONResponse:
        return JSONResponse({"error": printable(str(error))}, getattr(error, "status", 400))  # UTF-8 can encode it


__all__ = ["CORS_HEADERS", "PREFIX", "LibreTranslateAPI", "Refusal", "file_cost", "languages", "over_request",
           "refusal", "request_body", "translate_texts"]
