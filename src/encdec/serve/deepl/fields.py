"""Reading DeepL's requests, and refusing them in DeepL's words.

DeepL's API takes a JSON body (what its clients send: ``deepl`` for Python, ``deepl-node``) or a form
(``application/x-www-form-urlencoded``, with ``text`` repeated: older integrations such as Weblate's), and query
parameters on ``GET``; its clients also send form fields in the body of a ``GET`` (``/v2/languages`` with
``type=target``). Every refusal is ``{"message": ...}`` with DeepL's status: 400 a bad request, 403 a wrong key, 404
no such glossary or document, 413 too large, 429 too many requests (with ``Retry-After``), 456 the key's character
quota used up, 503 busy; the official clients turn each into their own exception.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Request

from ..offload import lone_surrogate, off_loop, too_deep

MAX_TEXTS = 50  # texts of one /v2/translate request (DeepL's own bound)
MAX_TAGS = 100  # tag names in ignore_tags, splitting_tags, non_splitting_tags
TRUE, FALSE = ("1", "true", "on"), ("0", "false", "off")


class DeepLError(Exception):
    """A refusal in DeepL's shape: ``{"message": message}`` (and ``detail``) with ``status``."""

    def __init__(self, status: int, message: str, detail: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.detail, self.headers = status, message, detail, headers

    def body(self) -> dict[str, str]:
        return {"message": self.message} | ({"detail": self.detail} if self.detail else {})


def bad(message: str) -> DeepLError:
    return DeepLError(400, "Bad request", message)


async def read_body(request: Request) -> dict[str, Any]:
    """The request's fields: a JSON object, or a form's fields (a repeated one as a list), over the query's."""
    fields: dict[str, Any] = dict(request.query_params)
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        fields.update(await off_loop(json_object, await request.body()))
    elif kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.form()
        for name in form:
            values = form.getlist(name)
            listed = len(values) > 1 or (name == "text" and kind != "multipart/form-data")
            fields[name] = values if listed else values[0]
    for name, value in fields.items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str) and (fault := lone_surrogate(item)) is not None:
                raise bad(f"{name} is not valid Unicode: {fault}; send UTF-8 text.")
    return fields


def json_object(raw: bytes) -> dict[str, Any]:
    """A JSON body's object, bounded in depth before it is parsed (``encdec.serve.offload.too_deep``)."""
    if (why := too_deep(raw)) is not None:
        raise bad(f"the JSON body is nested too deep: {why}")
    try:
        body = json.loads(raw) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError, RecursionError):
        raise bad("the body is not valid JSON; send a JSON object.") from None
    if not isinstance(body, dict):
        raise bad("the body is not a JSON object; send one, e.g. {\"text\": [\"...\"], \"target_lang\": \"DE\"}.")
    return body


def string(fields: dict[str, Any], name: str, required: bool = False) -> str | None:
    """Field ``name`` as a string (None when absent and not ``required``)."""
    value = fields.get(name)
    if value is None or value == "":
        if required:
            raise bad(f"Parameter '{name}' not specified.")
        return None
    if not isinstance(value, str):
        raise bad(f"Parameter '{name}' must be a string.")
    return value


def flag(fields: dict[str, Any], name: str) -> bool | None:
    """A boolean field: JSON's true/false, or ``0``/``1`` as a form sends it."""
    value = fields.get(name)
    if value is None or isinstance(value, bool):
        return value
    if str(value).strip().lower() in TRUE + FALSE:
        return str(value).strip().lower() in TRUE
    raise bad(f"Parameter '{name}' must be a boolean (true or false, 1 or 0).")


def tags(fields: dict[str, Any], name: str) -> frozenset[str]:
    """A tag list: a JSON list, or tags apart by commas."""
    value = fields.get(name) or []
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(item, str) for item in items):
        raise bad(f"Parameter '{name}' must be a list of tag names, or tag names apart by commas.")
    found = frozenset(tag.strip().lower() for item in items for tag in item.split(",") if tag.strip())
    if len(found) > MAX_TAGS:
        raise bad(f"Parameter '{name}' names {len(found)} tags; at most {MAX_TAGS}.")
    return found


def texts(fields: dict[str, Any]) -> list[str]:
    """``text``: one string or a list of up to ``MAX_TEXTS``, none empty."""
    value = fields.get("text")
    if value is None or value == [] or value == "":
        raise bad("Parameter 'text' not specified.")
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(item, str) for item in items):
        raise bad("Parameter 'text' must be a string or a list of strings.")
    if len(items) > MAX_TEXTS:
        raise bad(f"Parameter 'text' holds {len(items)} texts; at most {MAX_TEXTS} a request: send several.")
    return items


__all__ = ["MAX_TEXTS", "DeepLError", "bad", "flag", "read_body", "string", "tags", "texts"]
