"""DeepL's HTTP API in front of ``encdec serve``'s models, under ``/deepl``.

Most tools integrate DeepL's API first: its official clients (``deepl`` for Python, ``deepl-node``, .NET, Java, PHP,
Ruby) take a server URL, so pointing them at ``http://HOST:PORT/deepl`` has them translate with the models served
here, unchanged. The routes (DeepL's API reference, v2 and v3):

- ``POST /v2/translate``: ``text`` (a string or up to 50), ``target_lang`` (DeepL's codes and variants: ``EN-US``,
  ``EN-GB``, ``PT-BR`` reach the served ``en`` and ``pt``; ``languages``), ``source_lang`` (optional: each text's
  language is then detected among the served source languages with a route into the target,
  ``encdec.serve.detection``), ``split_sentences`` (``1``: lines and sentences, the default; ``nonewlines``: sentences
  only, a newline is a space; ``0``: each text one sentence), ``preserve_formatting`` (the source's case at the
  start and its punctuation at the end kept), ``formality`` (the models have one register: ``default`` and
  ``prefer_*`` translate as they are, ``more``/``less`` are refused, as DeepL refuses them for a language without
  formality), ``glossary_id`` (a stored glossary's terms in the translation: ``glossaries``; needs ``source_lang``),
  ``tag_handling`` (``html``, ``xml``: the markup kept around the aligned words, with ``ignore_tags``,
  ``splitting_tags``, ``non_splitting_tags``; ``translation``), ``context`` (accepted, not translated nor counted;
  the models translate sentence by sentence). The answer: ``translations``, each ``text``,
  ``detected_source_language`` and ``billed_characters``.
- ``GET /v2/languages`` (``type=source`` or ``target``), ``GET /v2/usage`` (the key's characters this month and its
  quota, from the key database), glossaries (``glossaries``), documents (``documents``).
- Keys as DeepL sends them (``Authorization: DeepL-Auth-Key KEY``; also the guard's ``Bearer``), checked against
  the server's keys (``--api-key``, ``--api-keys-db``); the request limit counts a request a text; a key with a
  character quota (``encdec keys add --char-quota N``) is charged the characters of its texts before they are
  translated (given back if the translation fails), and refused with 456 over its quota.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse

from ..detection import DetectionError, detect, served_sources
from ..guard import presented_key
from ..keys import ApiKey
from ..limits import Access, client_address
from ..offload import off_loop
from ..pairs import Route, find_route
from ..served_models import ServedModels
from .fields import DeepLError, bad, flag, read_body, string, tags, texts
from .glossaries import entries_for
from .languages import deepl_code, read_code, source_languages, target_languages
from .translation import Asked, translate_group

PREFIX = "/deepl"
CORS_HEADERS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Headers": "Authorization, Content-Type",
                "Access-Control-Allow-Methods": "GET, POST, DELETE, PATCH, PUT"}
UNLIMITED = 1_000_000_000_000  # the limit /v2/usage reports without a quota (DeepL's own for unlimited accounts)
ERROR_SCHEMA = {"content": {"application/json": {"schema": {  # DeepL's error answer, for /docs
    "type": "object", "properties": {"message": {"type": "string"}, "detail": {"type": "string"}},
    "required": ["message"]}}}}
FORMALITY = ("default", "more", "less", "prefer_more", "prefer_less")
SPLITTING = ("0", "1", "nonewlines")


@dataclass
class Caller:
    """Who asks: the key (None without keys) and what it was presented as."""

    key: ApiKey | None
    presented: str | None


def deepl_key(request: Request) -> str | None:
    """The key of ``Authorization: DeepL-Auth-Key KEY`` (else the guard's headers)."""
    scheme, _, value = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "deepl-auth-key":
        return value.strip()
    return presented_key(dict(request.scope["headers"]))


def month() -> str:
    """The quota's period: the calendar month, UTC."""
    return time.strftime("%Y-%m", time.gmtime())


class DeepLAPI:
    """The routes under ``/deepl`` over ``models`` and their ``batchers``, with the keys and limits of ``access``."""

    def __init__(self, models: ServedModels, batchers: dict[str, Any], access: Access) -> None:
        self.models, self.batchers, self.access = models, batchers, access

    def mount(self, app: FastAPI, router: APIRouter) -> None:
        errors = {status: ERROR_SCHEMA | {"description": why} for status, why in (
            (400, "A bad request: `detail` names the field and the fix"), (403, "A wrong or missing key"),
            (404, "An unknown glossary"), (413, "Too many sentences"), (429, "Over the request limit (`Retry-After`)"),
            (456, "Over the key's character quota"), (503, "The queue is full (`Retry-After`)"))}
        router.add_api_route("/v2/translate", self.translate, methods=["POST"], responses=errors,
                             summary="DeepL: translate text into target_lang")
        router.add_api_route("/v2/languages", self.languages, methods=["GET", "POST"],
                             summary="DeepL: the served source (type=source) or target (type=target) languages")
        router.add_api_route("/v2/usage", self.usage, methods=["GET", "POST"],
                             summary="DeepL: the key's characters this month and its quota")

    async def admit(self, request: Request, fields: dict[str, Any], cost: int = 1) -> Caller:
        """The caller's key, checked (403 without a valid one where keys are required), and the request counted
        against its request limit (429 over it)."""
        presented = deepl_key(request) or fields.get("auth_key")
        key = None
        if self.access.required:
            if not presented:
                raise DeepLError(403, "Authorization failure: send the header `Authorization: DeepL-Auth-Key KEY`.")
            if (key := await self.access.find(presented)) is None:
                raise DeepLError(403, "Wrong authorization key: the server does not know this key.")
        self.access.admit(key, client_address(request.scope), cost)
        return Caller(key, presented)

    async def charge(self, caller: Caller, characters: int) -> str:
        """Count ``characters`` against the key's quota (456 over it); nothing without a key database. Returns the
        period charged (what ``refund`` gives them back to)."""
        period = month()
        if caller.key is None or self.access.database is None:
            return period
        counted, used, quota = await self.access.database_call(self.access.database.charge, caller.key.key,
                                                               characters, period)
        if not counted:
            raise DeepLError(456, "Quota exceeded", f"the key has used {used} of its {quota} characters this month; "
                                                    f"these texts have {characters}.")
        return period

    async def refund(self, caller: Caller, characters: int, period: str) -> None:
        """Give back characters charged in ``period`` (not once it has passed: the new month starts from 0)."""
        if caller.key is not None and self.access.database is not None and period == month():
            await self.access.database_call(self.access.database.charge, caller.key.key, -characters, period)

    async def translate(self, request: Request) -> JSONResponse:
        fields = await read_body(request)
        items = texts(fields)
        caller = await self.admit(request, fields, len(items))
        asked = self.asked(fields)
        asked.glossary = await self.glossary_of(caller, fields, asked)
        characters = sum(len(text) for text in items)
        period = await self.charge(caller, characters)
        try:
            found = await self.translated(items, asked)
        except BaseException:
            await self.refund(caller, characters, period)
            raise
        return JSONResponse({"translations": [
            {"detected_source_language": deepl_code(source), "text": text, "billed_characters": len(items[i])}
            for i, (source, text) in enumerate(found)]})

    def asked(self, fields: dict[str, Any]) -> Asked:
        """A request's options, checked; the languages read as served codes."""
        served = sorted(self.models.languages())
        target_field = string(fields, "target_lang", required=True)
        target = read_code(target_field, served)
        if target is None or target not in {hop.target for hop in self.models.directions()}:
            raise bad(f"Value for 'target_lang' not supported: {target_field}; GET /v2/languages?type=target lists "
                      "the served ones.")
        source_field = string(fields, "source_lang")
        source = read_code(source_field, served) if source_field else None
        if source_field and source not in {hop.source for hop in self.models.directions()}:
            raise bad(f"Value for 'source_lang' not supported: {source_field}; GET /v2/languages lists the served "
                      "ones.")
        formality = string(fields, "formality") or "default"
        if formality not in FORMALITY:
            raise bad(f"Value for 'formality' not supported: {formality}; one of {', '.join(FORMALITY)}.")
        if formality in ("more", "less"):
            raise bad("'formality' is not supported for given 'target_lang': the served models have one register; "
                      "use prefer_more or prefer_less to fall back to it.")
        handling = string(fields, "tag_handling")
        if handling not in (None, "html", "xml"):
            raise bad(f"Value for 'tag_handling' not supported: {handling}; html or xml.")
        split = str(fields.get("split_sentences", "nonewlines" if handling else "1"))
        if split not in SPLITTING:
            raise bad(f"Value for 'split_sentences' not supported: {split}; 0, 1 or nonewlines.")
        return Asked(source, target, split, bool(flag(fields, "preserve_formatting")), handling,
                     tags(fields, "ignore_tags"), tags(fields, "splitting_tags"), tags(fields, "non_splitting_tags"),
                     flag(fields, "outline_detection") is not False)

    async def glossary_of(self, caller: Caller, fields: dict[str, Any], asked: Asked) -> dict[str, str] | None:
        """The entries of the glossary ``glossary_id`` names, for the request's pair (``glossaries``)."""
        if fields.get("glossary_ids"):
            raise bad("Parameter 'glossary_ids' is not supported by this server: give one glossary_id.")
        glossary_id = string(fields, "glossary_id")
        if glossary_id is None:
            return None
        if asked.source is None:
            raise bad("Parameter 'source_lang' is required with 'glossary_id': a glossary is for one language pair.")
        return await entries_for(self.access, caller, glossary_id, asked.source, asked.target)

    async def translated(self, items: list[str], asked: Asked) -> list[tuple[str, str]]:
        """(source language, translation) of each text: grouped by source language (detected where not given),
        each group along its route."""
        sources = [asked.source] * len(items) if asked.source else await off_loop(self.detected, items, asked.target)
        found: list[tuple[str, str]] = [("", "")] * len(items)
        for source in dict.fromkeys(sources):
            group = [i for i, code in enumerate(sources) if code == source]
            route = self.route(source, asked.target, asked.glossary is not None)
            translations = await translate_group(route, self.batchers, [items[i] for i in group], asked)
            for i, text in zip(group, translations, strict=True):
                found[i] = (source, text)
        return found

    def detected(self, items: list[str], target: str) -> list[str]:
        """Each text's language, among the served sources with a route into ``target``, and ``target`` itself (a
        text already in it comes back as it is)."""
        among = sorted({*served_sources(self.models, target), target} & set(self.models.languages()))
        try:
            return [detect([text], among)[0]["language"] for text in items]
        except DetectionError as error:
            raise bad(f"source_lang: {error}; give source_lang.") from None

    def route(self, source: str, target: str, glossary: bool) -> Route:
        route = find_route(self.models.directions(), source, target)
        if route is None:
            raise bad(f"No route from {deepl_code(source)} to {deepl_code(target)}: no served model, nor a pivot.")
        if glossary and len(route.hops) > 1:
            raise bad(f"A glossary needs a model that translates {deepl_code(source)} into {deepl_code(target)} "
                      f"directly; this pair goes through {', '.join(map(deepl_code, route.pivots))}.")
        return route

    async def languages(self, request: Request) -> JSONResponse:
        fields = await read_body(request)
        kind = string(fields, "type") or "source"
        if kind not in ("source", "target"):
            raise bad(f"Value for 'type' not supported: {kind}; source or target.")
        directions = self.models.directions()
        if kind == "source":
            return JSONResponse(source_languages(list({hop.source for hop in directions})))
        return JSONResponse(target_languages(list({hop.target for hop in directions})))

    async def usage(self, request: Request) -> JSONResponse:
        caller = await self.admit(request, await read_body(request))
        used, quota = 0, None
        if caller.key is not None and self.access.database is not None:
            used, quota = await self.access.database_call(self.access.database.usage, caller.key.key, month())
        return JSONResponse({"character_count": used, "character_limit": UNLIMITED if quota is None else quota})


__all__ = ["CORS_HEADERS", "PREFIX", "Caller", "DeepLAPI", "month"]
