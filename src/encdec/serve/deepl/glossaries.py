"""DeepL's glossaries, stored in the server's key database (``encdec.serve.keys``: table ``glossaries``), each owned
by the key that made it and seen by no other; they survive a restart.

- v2 (one language pair): ``POST /v2/glossaries`` (``name``, ``source_lang``, ``target_lang``, ``entries``,
  ``entries_format`` ``tsv`` or ``csv``), ``GET /v2/glossaries``, ``GET /v2/glossaries/{id}``,
  ``GET /v2/glossaries/{id}/entries`` (TSV), ``DELETE /v2/glossaries/{id}``, ``GET /v2/glossary-language-pairs``.
- v3 (multilingual: a dictionary per pair, what ``deepl.DeepLClient`` uses): ``POST /v3/glossaries`` (``name``,
  ``dictionaries``), ``GET`` one or all, ``GET /v3/glossaries/{id}/entries?source_lang=&target_lang=``,
  ``PATCH /v3/glossaries/{id}`` (a new name, dictionaries replaced pair by pair), ``DELETE`` a glossary or one
  dictionary (``/dictionaries?source_lang=&target_lang=``).

Entries are read as DeepL's (``encdec.glossary.parse_glossary``: a duplicate or empty term, a wrong delimiter, a
control character refused in one line naming the line); a pair must be one a served model translates directly
(``/v2/glossary-language-pairs``). A translation with ``glossary_id`` takes the dictionary of its pair
(``entries_for``). Glossaries need the key database: without ``--api-keys-db`` they are refused.
"""

from __future__ import annotations

import datetime
import json
import re
import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from ...errors import EncdecError
from ...glossary import parse_glossary
from ..limits import Access
from ..offload import off_loop
from ..served_models import ServedModels
from .fields import DeepLError, bad, read_body, string
from .languages import base_code

MAX_GLOSSARIES = 1_000  # glossaries a key may keep
MAX_DICTIONARIES = 100  # dictionaries of one multilingual glossary
MAX_NAME = 1_024  # characters of a glossary's name
FORM_FIELD = re.compile(r"dictionaries\[(\d{1,3})\]\.(\w+)")  # deepl-node's form fields of a dictionary
# the path's id, read by the routes themselves (no FastAPI validation error to document)
BY_ID = {"parameters": [{"name": "glossary_id", "in": "path", "required": True, "schema": {"type": "string"}}]}


def not_found(glossary_id: str) -> DeepLError:
    return DeepLError(404, "Glossary not found", f"no glossary {glossary_id} of this key; GET /v2/glossaries lists "
                                                 "them.")


def info_v3(record: dict[str, Any]) -> dict[str, Any]:
    """A stored glossary as v3 describes it."""
    return {"glossary_id": record["glossary_id"], "name": record["name"], "creation_time": record["creation_time"],
            "dictionaries": [{"source_lang": d["source_lang"], "target_lang": d["target_lang"],
                              "entry_count": d["entry_count"]} for d in json.loads(record["dictionaries"])]}


def info_v2(record: dict[str, Any]) -> dict[str, Any]:
    """A stored glossary of one dictionary as v2 describes it."""
    first = json.loads(record["dictionaries"])[0]
    return {"glossary_id": record["glossary_id"], "name": record["name"], "ready": True,
            "source_lang": first["source_lang"], "target_lang": first["target_lang"],
            "creation_time": record["creation_time"], "entry_count": first["entry_count"]}


async def entries_for(access: Access, caller: Any, glossary_id: str, source: str, target: str) -> dict[str, str]:
    """The entries of glossary ``glossary_id``'s dictionary for ``source`` -> ``target`` (a translation's)."""
    record = await Glossaries.find(access, caller, glossary_id)
    found = await off_loop(pair_entries, record, base_code(source), base_code(target))
    if found is not None:
        return found
    raise bad(f"glossary {glossary_id} has no dictionary from {base_code(source)} into {base_code(target)}; give "
              "source_lang and target_lang of one of its dictionaries.")


def pair_entries(record: dict[str, Any], source: str, target: str) -> dict[str, str] | None:
    """The entries of a stored glossary's dictionary for ``source`` -> ``target`` (base codes), or None."""
    for dictionary in json.loads(record["dictionaries"]):
        if (dictionary["source_lang"], dictionary["target_lang"]) == (source, target):
            return dict(parse_glossary(dictionary["entries"]).entries)
    return None


def folded(fields: dict[str, Any]) -> Any:
    """``dictionaries`` as JSON gives it, or from a form's ``dictionaries[N].field`` keys (deepl-node's)."""
    if "dictionaries" in fields:
        return fields["dictionaries"]
    found: dict[int, dict[str, Any]] = {}
    for name, value in fields.items():
        match = FORM_FIELD.fullmatch(name)
        if match:
            found.setdefault(int(match[1]), {})[match[2]] = value
    return [found[i] for i in sorted(found)] if found else None


def merged(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A dictionary's entries updated by another's of the same pair (DeepL's PATCH: the new term wins)."""
    entries = dict(parse_glossary(old["entries"]).entries) | dict(parse_glossary(new["entries"]).entries)
    return {**new, "entries": "\n".join(f"{a}\t{b}" for a, b in entries.items()), "entry_count": len(entries)}


class Glossaries:
    """The glossary routes over the key database of ``access``, for the pairs ``models`` translate directly."""

    def __init__(self, models: ServedModels, access: Access, admit: Any) -> None:
        self.models, self.access, self.admit = models, access, admit

    def mount(self, router: APIRouter) -> None:
        routes = [("/v2/glossary-language-pairs", self.pairs, "GET", "the language pairs a glossary may have")]
        for version, info in (("v2", info_v2), ("v3", info_v3)):
            routes += [(f"/{version}/glossaries", self.creator(version), "POST", f"create a glossary ({version})"),
                       (f"/{version}/glossaries", self.lister(version), "GET", f"the key's glossaries ({version})"),
                       (f"/{version}/glossaries/{{glossary_id}}", self.getter(info), "GET", f"a glossary ({version})"),
                       (f"/{version}/glossaries/{{glossary_id}}", self.delete, "DELETE", "delete a glossary")]
        routes += [("/v2/glossaries/{glossary_id}/entries", self.entries_v2, "GET", "a glossary's entries (TSV)"),
                   ("/v3/glossaries/{glossary_id}/entries", self.entries_v3, "GET", "a dictionary's entries"),
                   ("/v3/glossaries/{glossary_id}", self.patch, "PATCH", "rename a glossary, or replace dictionaries"),
                   ("/v3/glossaries/{glossary_id}/dictionaries", self.delete_dictionary, "DELETE",
                    "delete a glossary's dictionary"),
                   ("/v3/glossaries/{glossary_id}/dictionaries", self.replace_dictionary, "PUT",
                    "replace (or add) a glossary's dictionary of one pair")]
        for path, route, method, summary in routes:
            status = {"POST": 201, "DELETE": 204}.get(method, 200)
            router.add_api_route(path, route, methods=[method], status_code=status, summary=f"DeepL: {summary}",
                                 openapi_extra=BY_ID if "{glossary_id}" in path else None)

    @staticmethod
    def database(access: Access) -> Any:
        if access.database is None:
            raise bad("glossaries are stored per key in the server's key database, and this server has none: start "
                      "encdec serve with --api-keys-db PATH.")
        return access.database

    @staticmethod
    async def find(access: Access, caller: Any, glossary_id: str) -> dict[str, Any]:
        found = await access.database_call(Glossaries.database(access).glossaries, caller.key.key, glossary_id)
        if not found:
            raise not_found(glossary_id)
        return found[0]

    async def caller(self, request: Request) -> tuple[Any, dict[str, Any]]:
        fields = await read_body(request)
        caller = await self.admit(request, fields)
        self.database(self.access)
        return caller, fields

    def direct_pairs(self) -> set[tuple[str, str]]:
        return {(base_code(hop.source), base_code(hop.target)) for hop in self.models.directions()}

    def dictionary(self, given: Any, where: str) -> dict[str, Any]:
        """A dictionary of a creation (``source_lang``, ``target_lang``, ``entries``, ``entries_format``), checked."""
        if not isinstance(given, dict):
            raise bad(f"{where} must be an object with source_lang, target_lang, entries and entries_format.")
        source, target = (base_code(string(given, name, required=True)) for name in ("source_lang", "target_lang"))
        if (source, target) not in self.direct_pairs():
            raise bad(f"{where}: glossaries from {source} into {target} are not supported: no served model translates "
                      "the pair directly; GET /v2/glossary-language-pairs lists them.")
        entries_format = string(given, "entries_format") or "tsv"
        try:
            glossary = parse_glossary(string(given, "entries", required=True), entries_format, f"{where}: entries")
        except EncdecError as error:
            raise bad(str(error)) from None
        tsv = "\n".join(f"{source_term}\t{target_term}" for source_term, target_term in glossary.entries)
        return {"source_lang": source, "target_lang": target, "entries": tsv, "entry_count": len(glossary)}

    def dictionaries(self, fields: dict[str, Any], version: str) -> list[dict[str, Any]]:
        if version == "v2":
            return [self.dictionary(fields, "the glossary")]
        given = folded(fields)
        if not isinstance(given, list) or not given or len(given) > MAX_DICTIONARIES:
            raise bad(f"Parameter 'dictionaries' must be a list of 1 to {MAX_DICTIONARIES} dictionaries.")
        found = [self.dictionary(item, f"dictionaries[{i}]") for i, item in enumerate(given)]
        if len({(d["source_lang"], d["target_lang"]) for d in found}) < len(found):
            raise bad("Parameter 'dictionaries' has two dictionaries of one language pair; merge them.")
        return found

    def creator(self, version: str) -> Any:
        async def create(request: Request) -> JSONResponse:
            caller, fields = await self.caller(request)
            name = string(fields, "name", required=True)
            if len(name) > MAX_NAME:
                raise bad(f"Parameter 'name' has {len(name)} characters; at most {MAX_NAME}.")
            dictionaries = await off_loop(self.dictionaries, fields, version)
            owned = await self.access.database_call(self.access.database.count_glossaries, caller.key.key)
            if owned >= MAX_GLOSSARIES:
                raise DeepLError(456, "Quota exceeded", f"this key keeps {owned} glossaries, the most it may; delete "
                                                        "some first.")
            now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            record = {"glossary_id": str(uuid.uuid4()), "api_key": caller.key.key, "name": name,
                      "creation_time": now, "dictionaries": json.dumps(dictionaries)}
            await self.access.database_call(self.access.database.save_glossary, record)
            return JSONResponse((info_v2 if version == "v2" else info_v3)(record), 201)
        return create

    def lister(self, version: str) -> Any:
        async def listed(request: Request) -> JSONResponse:
            caller, _ = await self.caller(request)
            records = await self.access.database_call(self.access.database.glossaries, caller.key.key)
            if version == "v2":  # v2 describes a glossary of one dictionary
                records = [r for r in records if len(json.loads(r["dictionaries"])) == 1]
            return JSONResponse({"glossaries": [(info_v2 if version == "v2" else info_v3)(r) for r in records]})
        return listed

    def getter(self, info: Any) -> Any:
        async def get(request: Request) -> JSONResponse:
            glossary_id = request.path_params["glossary_id"]
            caller, _ = await self.caller(request)
            record = await self.find(self.access, caller, glossary_id)
            return JSONResponse(info(self.one_pair(record) if info is info_v2 else record))
        return get

    @staticmethod
    def one_pair(record: dict[str, Any]) -> dict[str, Any]:
        """A glossary v2 can describe: one of a single dictionary (404 for a multilingual one, as v2 lists none)."""
        if len(json.loads(record["dictionaries"])) != 1:
            raise DeepLError(404, "Glossary not found", f"glossary {record['glossary_id']} has several dictionaries; "
                                                        "read it with /v3/glossaries.")
        return record

    async def entries_v2(self, request: Request) -> Response:
        glossary_id = request.path_params["glossary_id"]
        caller, _ = await self.caller(request)
        first = json.loads(self.one_pair(await self.find(self.access, caller, glossary_id))["dictionaries"])[0]
        return Response(first["entries"], media_type="text/tab-separated-values; charset=utf-8")

    async def entries_v3(self, request: Request) -> JSONResponse:
        glossary_id = request.path_params["glossary_id"]
        caller, fields = await self.caller(request)
        record = await self.find(self.access, caller, glossary_id)
        source, target = (base_code(string(fields, name, required=True)) for name in ("source_lang", "target_lang"))
        found = [d for d in json.loads(record["dictionaries"]) if (d["source_lang"], d["target_lang"]) == (source,
                                                                                                          target)]
        if not found:
            raise DeepLError(404, "Glossary dictionary not found", f"glossary {glossary_id} has none from {source} "
                                                                   f"into {target}.")
        return JSONResponse({"dictionaries": [{**{k: found[0][k] for k in ("source_lang", "target_lang", "entries")},
                                               "entries_format": "tsv"}]})

    async def delete(self, request: Request) -> Response:
        glossary_id = request.path_params["glossary_id"]
        caller, _ = await self.caller(request)
        if not await self.access.database_call(self.access.database.delete_glossary, caller.key.key, glossary_id):
            raise not_found(glossary_id)
        return Response(status_code=204)

    async def patch(self, request: Request) -> JSONResponse:
        glossary_id = request.path_params["glossary_id"]
        caller, fields = await self.caller(request)
        record = await self.find(self.access, caller, glossary_id)
        if string(fields, "name") is not None:
            record["name"] = string(fields, "name")[:MAX_NAME]
        if folded(fields) is not None:  # each pair's entries merged into the stored ones, the new term winning
            kept = {(d["source_lang"], d["target_lang"]): d for d in json.loads(record["dictionaries"])}
            for new in await off_loop(self.dictionaries, fields, "v3"):
                pair = (new["source_lang"], new["target_lang"])
                kept[pair] = await off_loop(merged, kept[pair], new) if pair in kept else new
            record["dictionaries"] = json.dumps(list(kept.values()))
        await self.save(record)
        return JSONResponse(info_v3(record))

    async def save(self, record: dict[str, Any]) -> None:
        """A changed glossary written back, if it is still there (a DELETE meanwhile wins: 404)."""
        if not await self.access.database_call(self.access.database.update_glossary, record):
            raise not_found(record["glossary_id"])

    async def replace_dictionary(self, request: Request) -> JSONResponse:
        """``PUT /v3/glossaries/{id}/dictionaries``: one pair's dictionary replaced (or added)."""
        glossary_id = request.path_params["glossary_id"]
        caller, fields = await self.caller(request)
        record = await self.find(self.access, caller, glossary_id)
        new = await off_loop(self.dictionary, fields, "the dictionary")
        kept = [d for d in json.loads(record["dictionaries"])
                if (d["source_lang"], d["target_lang"]) != (new["source_lang"], new["target_lang"])]
        record["dictionaries"] = json.dumps([*kept, new])
        await self.save(record)
        return JSONResponse({k: new[k] for k in ("source_lang", "target_lang", "entry_count")})

    async def delete_dictionary(self, request: Request) -> Response:
        glossary_id = request.path_params["glossary_id"]
        caller, fields = await self.caller(request)
        record = await self.find(self.access, caller, glossary_id)
        pair = tuple(base_code(string(fields, name, required=True)) for name in ("source_lang", "target_lang"))
        dictionaries = json.loads(record["dictionaries"])
        kept = [d for d in dictionaries if (d["source_lang"], d["target_lang"]) != pair]
        if len(kept) == len(dictionaries):
            raise DeepLError(404, "Glossary dictionary not found", f"glossary {glossary_id} has none from {pair[0]} "
                                                                   f"into {pair[1]}.")
        if not kept:  # its last dictionary: the glossary goes with it
            await self.access.database_call(self.access.database.delete_glossary, caller.key.key, glossary_id)
            return Response(status_code=204)
        record["dictionaries"] = json.dumps(kept)
        await self.save(record)
        return Response(status_code=204)

    async def pairs(self, request: Request) -> JSONResponse:
        await self.admit(request, await read_body(request))
        return JSONResponse({"supported_languages": [{"source_lang": source, "target_lang": target}
                                                     for source, target in sorted(self.direct_pairs())]})


__all__ = ["Glossaries", "entries_for"]
