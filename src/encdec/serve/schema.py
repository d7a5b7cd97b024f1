"""The JSON of ``POST /translate``: the request's schema with a server's limits (which the OpenAPI page at ``/docs``
shows), the answers' models, and every refused body or field turned into one line that names the field and says what
to send (``validation_message``). Needs pydantic (``encdec[serve]``, checked by ``encdec.serve.server``)."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from ..decoding_options import JSON, declared, json_name
from .offload import MAX_JSON_DEPTH
from .service import ServeLimits

MAX_INDEX = 256  # the schema's bound on a layer or head number; each model checks its own range
LayerNumber = Annotated[int, Field(ge=-MAX_INDEX, le=MAX_INDEX - 1)]
FIELD_CHARS = 60  # an unknown option's name is cut to this in an error (it may be as long as the body)
# pydantic's names of a union's member types, in an error's location
UNION_MEMBER = re.compile(r"^(str|int|float|bool|constrained-int|list\[.*\]|literal\[.*\])$")
EXAMPLE = 'send a JSON object such as {"text": "..."} with Content-Type: application/json'

ERROR_STATUSES = {
    400: f"The body is not JSON: empty, malformed, not UTF-8, or nested over {MAX_JSON_DEPTH} deep (`field`: `body`). "
         "(A request whose HTTP framing is broken, such as a Content-Length that is not a number, never reaches the "
         "app: uvicorn refuses it with a plain-text 400.)",
    401: "No valid API key (the server runs with one): send `Authorization: Bearer KEY` or `X-API-Key: KEY` "
         "(`field`: null).",
    413: "The body is larger than the server's limit (--max-body-bytes) (`field`: `body`).",
    404: "No such endpoint (`field`: null); not an operation's answer, so listed here only.",
    405: "An endpoint asked with a method it does not take (`field`: null); listed here only.",
    415: "The Content-Type is not application/json (`field`: `body`).",
    422: "JSON that breaks the request schema or the server's limits: `field` names the field at fault, such as "
         "a decoding field or `text[2]`, and `error` the fix.",
    429: "Over a request limit: --req-limit per client address, or the API key's own (`field`: null); the "
         "`Retry-After` header says how many seconds to wait.",
    500: "A fault of the server: the log has the traceback under `request_id` (`field`: null).",
    503: "The model's queue is full (--max-queue) (`field`: null); the `Retry-After` header says how many seconds "
         "to wait.",
}


class Translation(BaseModel):
    text: str = Field(description="The best translation.")
    score: float | None = Field(None, description="With `return_scores`: log P(translation | text), the natural-log "
                                                  "probability the model gives it, summed over its tokens and `</s>`.")
    n_best: list[dict[str, Any]] | None = Field(
        None, description="With `n_best`: up to n translations, each `{text}` (plus `score` with `return_scores`), "
                          "as `encdec translate --n-best` lists them: every beam ordered by log P(translation | "
                          "text), best first, each text once unless `keep_duplicates` (fewer than n when the beams "
                          "held fewer distinct texts: raise the beam size). The first can differ from `text`, the "
                          "translation beam search chose by its length-normalised score.")
    alignment: dict[str, Any] | None = Field(
        None, description="With `return_alignments`: `source_tokens` (S, with `</s>`), `target_tokens` (T, with "
                          "`</s>`), `weights`, an S x T matrix whose column t is the cross-attention over the "
                          "source when target token t was produced, and `links`, the word alignment in Pharaoh "
                          "format (`i-j`: source word i, output word j), as `encdec translate --alignments` gives "
                          "it. The layer is the model's alignment layer (recorded by `encdec align --record`, "
                          "else the penultimate), averaged over its heads, unless the request chose another layer or "
                          "head.")

    @classmethod
    def of(cls, answer: dict[str, Any], listed: list[dict[str, Any]] | None) -> Translation:
        """A text's translation from the serving core's answer and its n-best list, if asked (``core.answers``)."""
        return cls(**answer, n_best=listed)


class TranslateResponse(BaseModel):
    translations: list[Translation] = Field(description="One per input text, in order.")
    pivot: list[str] | None = Field(None, description="Where no served model translates `source` into `target`: "
                                                      "the languages the texts went through, in order (`[\"en\"]` "
                                                      "for de -> en -> fr), each step a model's translation of the "
                                                      "last; absent for a direct translation.")


class ErrorResponse(BaseModel):
    """Every error answer of the server, whatever its status."""

    error: str = Field(description="One line: `<field>: <what is wrong>; <the fix>`.",
                       examples=["text[2]: the text is empty; send some words to translate."])
    field: str | None = Field(description="The request field at fault (`text`, `text[2]`, a decoding field, ...), "
                                          "`body` for the body as a whole, null when no field is (401, 404, 500).",
                              examples=["text[2]"])
    request_id: str | None = Field(description="This request's id, also in the `X-Request-ID` header and, for a "
                                               "500, in the server log.", examples=["3f2c9a1d0b7e4c21"])


def error_responses(*statuses: int, json_route: bool = True) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` of an operation that can answer these error statuses: each an ``ErrorResponse``
    in JSON, also from a route whose own answer is not JSON (FastAPI would give ``model`` that route's media type)."""
    if json_route:
        return {status: {"model": ErrorResponse, "description": ERROR_STATUSES[status]} for status in statuses}
    schema = {"$ref": f"#/components/schemas/{ErrorResponse.__name__}"}
    return {status: {"description": ERROR_STATUSES[status], "content": {"application/json": {"schema": schema}}}
            for status in statuses}


def request_schema(limits: ServeLimits) -> type[BaseModel]:
    """The body of ``POST /translate``, with this server's limits in its checks and its OpenAPI schema."""
    return create_model(
        "TranslateRequest", __config__=ConfigDict(extra="forbid", strict=True),
        text=(str | list[str], Field(description=f"A text or a list of at most {limits.max_texts} texts, each at most "
                                                 f"{limits.max_source_tokens} source tokens.",
                                     examples=["Wednesday, 3 Mar 2021"])),
        **option_fields(limits),
        source=(str | None, Field(None, description="Several models served: the source language (with `target`), "
                                                    "in any case, with its aliases (`DE`, `pt-BR`, `zh-Hans`); "
                                                    "see `/info`.", examples=["de"])),
        target=(str | None, Field(None, description="Several models served: the target language (with `source`); "
                                                    "the same as `source`: the texts come back as they are; a pair "
                                                    "no model serves goes through a pivot (`pivot`).",
                                  examples=["en"])),
        model=(str | None, Field(None, description="Several models served: the name of the model to use (its pair, "
                                                   "`de-en`, or its folder's name); instead of source and target.")),
    )


def option_fields(limits: ServeLimits) -> dict[str, tuple[Any, Any]]:
    """The request's decoding fields, one for each option the native API offers (``decoding_options``, under its
    JSON name): its type, default, bounds (a server's limit where it has one) and description."""
    bounds = limits.decoding
    fields = {}
    for item in declared(JSON):
        meta = item.metadata
        high = getattr(bounds, meta["limit"]) if meta["limit"] else meta["maximum"]
        if isinstance(high, tuple):  # a range (the length penalty's)
            high = high[1]
        checks = {"ge": meta["minimum"], "le": high} if meta["kind"] in (int, float) else {}
        if meta["kind"] is float:
            checks["allow_inf_nan"] = False
        kind = LayerNumber | Literal["mean"] | None if meta["kind"] is str else (
            dict[str, str] | None if meta["kind"] is dict else  # a mapping of strings
            meta["kind"] if item.default is not None else meta["kind"] | None)
        fields[json_name(item.name)] = (kind, Field(item.default, description=meta["description"],
                                                    **{key: value for key, value in checks.items()
                                                       if value is not None}))
    return fields


def value_hints(schema: type[BaseModel]) -> dict[str, str]:
    """field -> the values it takes, in words, from the request's JSON schema: the fix an error message gives."""
    words = {"string": "a string", "array": "a list of strings", "boolean": "true or false",
             "integer": "a whole number", "number": "a finite number",
             "object": 'an object of strings, {"source term": "target term", ...}'}
    hints = {}
    for name, spec in schema.model_json_schema()["properties"].items():
        kinds = [option for option in spec.get("anyOf", [spec]) if option.get("type") != "null"]
        values = [value_words(kind, words) for kind in kinds]
        default = ", or null for the model's default" if len(kinds) < len(spec.get("anyOf", [spec])) else ""
        hints[name] = " or ".join(values) + default
    return hints


def value_words(kind: dict[str, Any], words: dict[str, str]) -> str:
    """One JSON schema type in words: ``a whole number from 1 to 8``, ``at least 0``, ``"mean"``."""
    if "const" in kind:
        return json.dumps(kind["const"])
    if "minimum" in kind and "maximum" in kind:
        return f"{words[kind['type']]} from {kind['minimum']:g} to {kind['maximum']:g}"
    return words[kind["type"]] + (f" of at least {kind['minimum']:g}" if "minimum" in kind else "")


def printable(text: str, limit: int | None = None) -> str:
    """``text`` as one line that UTF-8 can encode (lone surrogates escaped), cut to ``limit`` characters."""
    text = " ".join(text.encode("utf-8", "backslashreplace").decode("utf-8").split())
    return text if limit is None or len(text) <= limit else text[:limit - 3] + "..."


def field_name(location: tuple) -> str:
    """pydantic's error location -> ``text[2]``: the body prefix and union member names dropped."""
    name = ""
    for part in location[1:] if location and location[0] == "body" else location:
        if isinstance(part, int):
            name += f"[{part}]"
        elif not UNION_MEMBER.match(str(part)):
            name += f".{part}" if name else str(part)
    return name or "body"


def validation_message(errors: list[dict[str, Any]], content_type: str, body_size: int, hints: dict[str, str]
                       ) -> tuple[int, str, str]:
    """(status, message, field) of a failed check: 400 for a body that is not JSON (or empty), 415 for one that is
    not sent as JSON, else 422 for the first field at fault."""
    first = errors[0]
    if first["type"] == "json_invalid":
        return 400, f"body: malformed JSON ({first.get('ctx', {}).get('error', '')}); {EXAMPLE}.", "body"
    if field_name(first["loc"]) != "body":
        return 422, *field_message(errors, hints)
    if first["type"] == "missing" and not body_size:
        return 400, f"body: the body is empty; {EXAMPLE}.", "body"
    if first["type"] != "missing" and "json" not in content_type:
        return 415, f"body: Content-Type is {content_type or 'missing'}; {EXAMPLE}.", "body"
    if first["type"] == "string_unicode":  # a key with a lone surrogate (JSON "\ud800"): not text
        key = printable(json.dumps(first["input"]), FIELD_CHARS)
        return 422, f"body: the option name {key} is not valid Unicode (a lone surrogate); the options are " \
                    f"{', '.join(hints)}.", "body"
    got = json_type(None if first["type"] == "missing" else first.get("input"))
    return 422, f"body: must be a JSON object, not {got}; {EXAMPLE}.", "body"


def field_message(errors: list[dict[str, Any]], hints: dict[str, str]) -> tuple[str, str]:
    """(message, field) of the first field at fault: what is wrong, what was sent, and what to send."""
    first = errors[0]
    field = field_name(first["loc"])
    if first["type"] == "extra_forbidden":
        return f"{printable(field, FIELD_CHARS)}: unknown option; the options are {', '.join(hints)}.", field
    text_errors = [e for e in errors if field_name(e["loc"]).startswith("text")]
    if field == "text" and len(text_errors) > 1:  # a union: the error inside the list, if it is one
        first = max(text_errors, key=lambda e: len(e["loc"]))
        field = field_name(first["loc"])
        if field == "text":
            return f"text: must be a string or a list of strings (got {json_type(first.get('input'))}).", field
    got = f" (got {printable(json.dumps(first['input']), 60)})" if first["type"] != "missing" and "input" in first \
        else ""
    hint = "a string" if "[" in field else hints.get(field, "a value the schema at /docs describes")
    return f"{field}: {first['msg']}{got}; send {hint}.", field


def json_type(value: Any) -> str:
    """The JSON name of a parsed JSON value's type."""
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def parse_failure(cause: BaseException | None) -> str:
    """Why a body could not be parsed, for FastAPI's bare 400 "There was an error parsing the body"."""
    if isinstance(cause, UnicodeDecodeError):
        return f"body: is not UTF-8 (byte 0x{cause.object[cause.start]:02x} at offset {cause.start}); the body " \
               f"must be UTF-8 JSON: {EXAMPLE}."
    if isinstance(cause, RecursionError):
        return f"body: JSON nested too deeply to parse; {EXAMPLE}."
    reason = str(cause).split(":")[0] if cause is not None else "unreadable"
    return f"body: not valid JSON ({reason}); {EXAMPLE}."


__all__ = ["ERROR_STATUSES", "ErrorResponse", "TranslateResponse", "Translation", "error_responses", "field_name",
           "parse_failure", "printable", "request_schema", "validation_message", "value_hints"]
