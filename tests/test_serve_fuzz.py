"""A fuzz test of ``encdec serve``'s request schema: seeded random bodies, each field given values of the wrong type
and at the extremes (strings for numbers, huge, negative, fractional and non-finite numbers, nested lists, null,
booleans, lone surrogates as JSON escapes and as bytes, empty and very long strings, unknown and broken keys), and
bodies that are not JSON objects at all. The server never answers 500; every answer that is not 200 is a 4xx
``ErrorResponse`` whose message names its field; and it goes on serving as before.

``ENCDEC_FUZZ_SEED`` and ``ENCDEC_FUZZ_CASES`` replay or widen a run (defaults: seed 0, 300 cases, a few seconds).
"""

from __future__ import annotations

import http.client
import json
import os
import random

import pytest

from encdec.serve.server import ErrorResponse
from test_serve import SAMPLE, only_batcher, serve_app
from tiny_model_folders import build_model_folders

SEED = int(os.environ.get("ENCDEC_FUZZ_SEED", "0"))
CASES = int(os.environ.get("ENCDEC_FUZZ_CASES", "300"))
FIELDS = ("text", "num_beams", "max_new_tokens", "length_penalty", "n_best", "keep_duplicates", "return_scores",
          "return_alignments", "split_sentences")
LIMITS = {"max_texts": 8, "max_beams": 4, "max_new_tokens": 8, "max_body_bytes": 20_000}
# JSON number literals, as sent: Python's json (which FastAPI uses) also reads NaN and +-Infinity
NUMBERS = ["0", "-1", "1", "2", "3", "4", "5", "8", "9", "64", "-0.0", "0.5", "1.0", "2.5", "-10", "10", "10.000001",
           "-10.5", "1e308", "-1e308", "1e400", "-1e400", "1e-320", "NaN", "Infinity", "-Infinity", "9" * 40,
           "-" + "9" * 40, str(2**63), str(2**64 + 1)]
# JSON string literals, as sent: escapes of half a surrogate pair decode to lone surrogates
STRINGS = ['""', '" "', '"\\t\\n"', '"NaN"', '"3"', '"true"', '"null"', '"\\ud800"', '"ab\\udfffcd"',
           '"\\udc00\\ud800"', '"\\ud83d\\ude00 ok"', '"\\u0000"', '"日本語のテキスト"', '"مرحبا"',
           '"e\\u0301\\u0301\\u0301"', '"</s> <pad> <unk>"', '"\\u2581"', json.dumps(SAMPLE)]
KEYS = ['"text "', '"TEXT"', '""', '"\\ud800"', '"num_beams\\u0000"', '"beam"', json.dumps("k" * 3000)]


def scalar(rng: random.Random) -> str:
    kind = rng.choice(["null", "boolean", "number", "number", "string", "string", "long"])
    if kind == "long":
        return json.dumps(rng.choice("xé日 ") * rng.choice([100, 1_000, 5_000, 30_000]), ensure_ascii=False)
    return {"null": "null", "boolean": rng.choice(["true", "false"]), "number": rng.choice(NUMBERS),
            "string": rng.choice(STRINGS)}[kind]


def value(rng: random.Random, depth: int = 0) -> str:
    """Any JSON value, as text: a scalar, a list or an object of them, or lists nested 2 to 1,200 deep."""
    kind = rng.choice(["scalar"] * 4 + ["list", "object", "nested"]) if depth < 3 else "scalar"
    if kind == "list":
        return "[" + ", ".join(value(rng, depth + 1) for _ in range(rng.choice([0, 1, 2, 3, 9, 40]))) + "]"
    if kind == "object":
        return '{"text": ' + value(rng, depth + 1) + ', "x": ' + value(rng, depth + 1) + "}"
    if kind == "nested":
        depth = rng.choice([2, 50, 1_200])
        return "[" * depth + rng.choice(["", "1", json.dumps(SAMPLE)]) + "]" * depth
    return scalar(rng)


def good(field: str, rng: random.Random) -> str:
    """A value the server takes for ``field`` (so that the other fields' errors show)."""
    if field == "text":
        return json.dumps(rng.choice([SAMPLE, [SAMPLE] * rng.randint(1, 3), "12 January 1999"]))
    if field in ("keep_duplicates", "return_scores", "return_alignments", "split_sentences"):
        return rng.choice(["true", "false"])
    numbers = {"num_beams": rng.randint(1, 4), "max_new_tokens": rng.randint(1, 8), "n_best": 1,
               "length_penalty": round(rng.uniform(-10, 10), 3)}
    return json.dumps(numbers[field])


def body(rng: random.Random) -> bytes:
    """A request body: mostly a JSON object whose fields are good or wild; else any JSON value, or not JSON."""
    shape = rng.random()
    if shape < 0.1:
        return value(rng).encode()
    if shape < 0.2:
        broken = ['{"text": "x"', "", "{'text': 'x'}", '{"text": "caf\xe9"}', '{"text": "a"}\x00']
        text = rng.choice(broken)
        return text.encode(rng.choice(["latin-1", "utf-16"])) if rng.random() < 0.5 else text.encode()
    members = [f'"{field}": {good(field, rng) if rng.random() < 0.6 else value(rng)}' for field in FIELDS
               if rng.random() < (0.9 if field == "text" else 0.4)]
    if rng.random() < 0.1:
        members.append(f"{rng.choice(KEYS)}: {value(rng)}")
    rng.shuffle(members)
    return ("{" + ", ".join(members) + "}").encode()


def post(url: str, data: bytes, content_type: str | None) -> tuple[int, dict, dict[str, str]]:
    """(status, JSON answer, headers) of one POST /translate, on a connection of its own."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        headers = {"Content-Type": content_type} if content_type else {}
        connection.request("POST", "/translate", body=data, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read()), {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


def check_answer(status: int, answer: dict, headers: dict[str, str], data: bytes) -> None:
    """200 with one translation per text, or a 4xx ErrorResponse whose one-line message names its field."""
    case = repr(data[:300])
    assert status in (200, 400, 413, 415, 422), (status, answer, case)
    if status == 200:
        sent = json.loads(data)["text"]
        assert len(answer["translations"]) == (1 if isinstance(sent, str) else len(sent)), case
        return
    error = ErrorResponse.model_validate(answer, strict=True)
    assert set(answer) == {"error", "field", "request_id"}, case
    assert error.error and "\n" not in error.error and len(error.error) < 600, (error.error, case)
    assert error.request_id == headers["x-request-id"], case
    assert error.field is not None and error.error.startswith(f"{error.field}: "), (answer, case)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return build_model_folders(tmp_path_factory.mktemp("fuzz"))["transformer"]  # random weights: enough here


def test_random_bodies_get_200_or_a_documented_4xx_and_the_server_goes_on(model_folder) -> None:
    rng = random.Random(SEED)
    seen: dict[int, int] = {}
    with serve_app(model_folder, **LIMITS) as server:
        before = post(server.url, json.dumps({"text": [SAMPLE, "12 January 1999"], "num_beams": 2}).encode(),
                      "application/json")
        for _ in range(CASES):
            data = body(rng)
            content_type = rng.choices(["application/json", "text/plain", None], [0.9, 0.05, 0.05])[0]
            status, answer, headers = post(server.url, data, content_type)
            check_answer(status, answer, headers, data)
            seen[status] = seen.get(status, 0) + 1
        after = post(server.url, json.dumps({"text": [SAMPLE, "12 January 1999"], "num_beams": 2}).encode(),
                     "application/json")
        batcher = only_batcher(server)
        assert batcher.thread.is_alive()
    assert before[0] == after[0] == 200 and before[1] == after[1]  # serving as before
    print(f"seed {SEED}: {CASES} bodies, answers by status {dict(sorted(seen.items()))}")
    assert set(seen) == {200, 400, 413, 415, 422}, seen  # every kind of answer came up: the fuzz reached them all
