"""A property-based fuzz of both of ``encdec serve``'s APIs from their own OpenAPI descriptions (schemathesis over
Hypothesis): the native one at ``/openapi.json`` and LibreTranslate's at ``/libretranslate/spec``, every operation
(the multipart ``/translate_file`` and ``/download_file`` included), with requests that follow the schema and
requests that break it (wrong types, missing and extra fields, odd strings), with the right API key and without.
The server never answers 5xx, and it goes on translating afterwards. Then a fixed list of the bodies that once gave
500s or might: JSON nested 1,000 deep, lone surrogates as escapes and as raw bytes, wrong types and huge numbers, on
every route of both APIs, each a 4xx in its API's shape.

The server is a real one on 127.0.0.1 (``test_serve.Server``) over two tiny random models; Hypothesis is
derandomized (the same cases every run) and bounded (``EXAMPLES`` per API; ``ENCDEC_FUZZ_EXAMPLES`` widens a run).
"""

from __future__ import annotations

import os
import urllib.parse

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode

from encdec.serve import ServeLimits
from encdec.serve.keys import KeyDatabase
from encdec.serve.offload import MAX_JSON_DEPTH
from encdec.serve.server import ErrorResponse, create_app, load_models
from test_serve import Server, request
from tiny_model_folders import build_model_folders

EXAMPLES = int(os.environ.get("ENCDEC_FUZZ_EXAMPLES", "200"))
KEY = "sesame"
LT = "/libretranslate"
LIMITS = {"max_texts": 4, "max_beams": 2, "max_new_tokens": 6, "max_body_bytes": 200_000}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server of two tiny random models (de-en, en-de) behind a key database holding ``KEY``, with suggestions."""
    root = tmp_path_factory.mktemp("schema-fuzz")
    folders = build_model_folders(root)
    keys = KeyDatabase(root / "keys.db")
    keys.add(10**6, key=KEY)
    models = load_models([f"de-en={folders['transformer']}", f"en-de={folders['rnn']}"],
                         limits=ServeLimits(**LIMITS))
    with Server(create_app(models, keys=keys, suggestions=True)) as running:
        yield running


def still_serving(url: str) -> None:
    """Both APIs translate, with the key."""
    native = request(f"{url}/translate", {"text": ["12 January 1999", "3 Mar"], "model": "de-en"},
                     headers={"X-API-Key": KEY})
    libre = request(f"{url}{LT}/translate", {"q": "12 January 1999", "source": "en", "target": "de",
                                             "api_key": KEY})
    assert native[0] == libre[0] == 200, (native, libre)
    assert len(native[1]["translations"]) == 2 and isinstance(libre[1]["translatedText"], str)


def fuzz(url: str, spec_path: str) -> dict[int, int]:
    """``EXAMPLES`` cases of the operations of the OpenAPI description at ``spec_path`` (the native one's own: the
    LibreTranslate routes have theirs), half of them breaking the schema; with the key (in a header, and in a
    LibreTranslate body) or without, and with a served language pair or the one drawn: answers by status. Fails on
    a 5xx."""
    schema = schemathesis.openapi.from_url(f"{url}{spec_path}", headers={"X-API-Key": KEY}, timeout=60)
    libre = spec_path.startswith(LT)
    schema = schema if libre else schema.exclude(path_regex=f"^{LT}/")
    cases = schema.as_strategy(GenerationMode.POSITIVE) | schema.as_strategy(GenerationMode.NEGATIVE)
    seen: dict[int, int] = {}

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True, print_blob=True,
              suppress_health_check=list(HealthCheck))
    @given(case=cases, keyed=st.sampled_from([True, False]),
           pair=st.sampled_from([("de", "en"), ("en", "de"), ("auto", "en"), None]))
    def check(case, keyed: bool, pair: tuple[str, str] | None) -> None:
        if isinstance(case.body, dict) and pair:  # a served pair (the native API: its model, of two served)
            case.body.update(dict(zip(("source", "target"), pair, strict=True)) if libre else
                             {"model": "-".join(pair).replace("auto", "de"), "source": None, "target": None})
        if isinstance(case.body, dict) and libre and keyed:
            case.body["api_key"] = KEY
        response = case.call(base_url=url + LT * libre, headers={"X-API-Key": KEY} if keyed else {}, timeout=60)
        seen[response.status_code] = seen.get(response.status_code, 0) + 1
        assert response.status_code < 500, (case.method, case.path, case.body, response.text[:300])

    check()
    return seen


@pytest.mark.parametrize("spec_path", ["/openapi.json", f"{LT}/spec"])
def test_fuzzing_each_openapi_description_finds_no_5xx_and_the_server_goes_on(server, spec_path: str) -> None:
    seen = fuzz(server.url, spec_path)
    still_serving(server.url)
    print(f"{spec_path}: answers by status {dict(sorted(seen.items()))}")
    assert 200 in seen and any(400 <= status < 500 for status in seen), seen  # it reached answers and refusals


DEEP = "[" * 1000 + "]" * 1000
OVER = "[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1)
NATIVE_BODIES = [  # (raw JSON body, what its error names)
    f'{{"text": {DEEP}}}', DEEP, f'{{"text": "x", "model": {OVER}}}', '{"text": "ab\\ud800cd"}',
    '{"text": ["ok", "\\udfff"]}', '{"text": "x", "model": "\\ud800"}', '{"text": "x", "source": "\\ud800", '
    '"target": "en"}', '{"\\ud800": 1, "text": "x"}', '{"text": "x", "num_beams": 1e400}',
    '{"text": "x", "num_beams": 99999999999999999999999999}', '{"text": "x", "length_penalty": NaN}',
    '{"text": 5}', '{"text": {"a": "b"}}', '{"text": [[["x"]]]}', '{"text": "x", "model": 5}', "null", "[]", '"x"',
]
LT_BODIES = [
    f'{{"q": {DEEP}, "source": "de", "target": "en"}}', DEEP, f'{{"q": "x", "source": "de", "target": "en", '
    f'"format": {OVER}}}', '{"q": "ab\\ud800cd", "source": "de", "target": "en"}',
    '{"q": "ab\\ud800cd", "source": "auto", "target": "en"}', '{"q": ["ok", "\\udfff"], "source": "de", '
    '"target": "en"}', '{"q": "x", "source": "\\ud800", "target": "en"}', '{"q": "x", "source": "de", '
    '"target": "\\ud800"}', '{"q": "x", "source": "de", "target": "en", "format": "\\ud800"}',
    '{"q": "x", "s": "\\ud800", "source": "de", "target": "en"}', '{"q": "x", "source": "de", "target": "en", '
    '"alternatives": 1e400}',
    '{"q": "x", "source": "de", "target": "en", "alternatives": 99999999999999999999999999}',
    '{"q": "x", "source": "de", "target": "en", "alternatives": [1]}', '{"q": 5, "source": "de", "target": "en"}',
    '{"q": {"a": 1}, "source": "de", "target": "en"}', '{"q": [1, 2], "source": "de", "target": "en"}',
    '{"q": "x", "source": ["de"], "target": "en"}', '{"q": "x", "source": "de", "target": {"x": 1}}',
    '{"q": "x", "source": "de", "target": "en", "format": ["html"]}', "null", "[]", '"x"', "{",
]


def raw_bytes(body: str) -> bytes:
    """``body`` with its first ``\\ud800``-style escape sent as the raw UTF-8 bytes of the surrogate (not UTF-8)."""
    return body.encode().replace(b"\\ud800", b"\xed\xa0\x80").replace(b"\\udfff", b"\xed\xbf\xbf")


def post(url: str, raw: bytes, content_type: str = "application/json") -> tuple[int, object]:
    status, answer, _ = request(url, raw=raw, headers={"Content-Type": content_type, "X-API-Key": KEY})
    return status, answer


@pytest.mark.parametrize("body", NATIVE_BODIES)
def test_malformed_native_bodies_are_4xx_error_responses(server, body: str) -> None:
    for raw in {body.encode(), raw_bytes(body)}:
        status, answer = post(f"{server.url}/translate", raw)
        assert 400 <= status < 500, (status, answer, raw[:80])
        ErrorResponse.model_validate(answer, strict=True)


@pytest.mark.parametrize("route", ["translate", "detect", "suggest"])
@pytest.mark.parametrize("body", LT_BODIES)
def test_malformed_libretranslate_bodies_are_4xx_errors_on_every_route(server, route: str, body: str) -> None:
    for raw in {body.encode(), raw_bytes(body)}:
        status, answer = post(f"{server.url}{LT}/{route}", raw)
        assert 400 <= status < 500 and set(answer) == {"error"}, (status, answer, raw[:80])


def test_the_refusals_name_the_depth_limit_and_the_field_with_a_lone_surrogate(server) -> None:
    deep = post(f"{server.url}{LT}/translate", LT_BODIES[0].encode())
    native_deep = post(f"{server.url}/translate", NATIVE_BODIES[0].encode())
    surrogate = post(f"{server.url}{LT}/translate", LT_BODIES[5].encode())
    source = post(f"{server.url}{LT}/detect", b'{"q": "x", "api_key": "\\ud800"}')
    assert deep == (400, {"error": f"Invalid JSON format: nested 1001 deep, over the limit of {MAX_JSON_DEPTH}"})
    assert native_deep[0] == 400 and native_deep[1]["field"] == "body"
    assert native_deep[1]["error"].startswith(f"body: JSON nested 1001 deep, over the limit of {MAX_JSON_DEPTH};")
    assert surrogate[0] == 400 and surrogate[1]["error"].startswith(
        "Invalid request: q[1] is not valid Unicode: a lone surrogate (U+DFFF) at character 0;")
    assert source[0] == 400 and source[1]["error"].startswith("Invalid request: api_key is not valid Unicode")
    at_limit = "[" * (MAX_JSON_DEPTH - 1) + '"x"' + "]" * (MAX_JSON_DEPTH - 1)  # at the limit: a type error
    assert post(f"{server.url}{LT}/translate", f'{{"q": {at_limit}, "source": "de", "target": "en"}}'.encode()) \
        == (400, {"error": "Invalid request: q must be a string or a list of strings"})


FORMS = [  # urlencoded form fields, as bytes: percent-escapes of a lone surrogate's bytes, and of bytes not UTF-8
    b"q=ab%ED%A0%80cd&source=de&target=en", b"q=%FF%FE&source=de&target=en", b"q=x&source=%ED%A0%80&target=en",
    b"q=x&source=de&target=en&alternatives=1e400", b"q=x&source=de&target=en&alternatives=%ED%A0%80",
    b"q=x&q=y&q=z&q=w&q=v&source=de&target=en", b"q=x&source=de&target=en&format=%00", b"%ED%A0%80=1&q=x",
]


@pytest.mark.parametrize("route", ["translate", "detect", "suggest"])
@pytest.mark.parametrize("form", FORMS)
def test_malformed_libretranslate_forms_are_not_5xx(server, route: str, form: bytes) -> None:
    status, answer = post(f"{server.url}{LT}/{route}", form, "application/x-www-form-urlencoded")
    assert status < 500 and (status == 200 or set(answer) == {"error"}), (status, answer)


@pytest.mark.parametrize(("fields", "file"), [
    ({"source": "de", "target": "en"}, ("a\udcff.txt", b"x")),  # a file name of bytes that are not UTF-8
    ({"source": "de\udcff", "target": "en"}, ("a.txt", b"x")),
    ({"source": "de", "target": "en"}, ("a.txt", b"ab\xed\xa0\x80cd")),  # a lone surrogate's bytes in the file
    ({"source": "de", "target": "en"}, ("a.html", b"<p>" * 10_000)),
    ({"source": "de", "target": "en"}, ("a.txt", b"\xff\xfe")),
    ({"source": "de", "target": "en", "api_key": "\udcff"}, ("a.txt", b"x")),
    ({"source": "de", "target": "en"}, None),
])
def test_odd_file_uploads_are_not_5xx(server, fields: dict[str, str], file) -> None:
    boundary = "fuzzboundary"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'
             for name, value in fields.items()]
    if file is not None:
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{file[0]}"\r\n\r\n'
                     + file[1].decode("utf-8", "surrogateescape") + "\r\n")
    body = ("".join(parts) + f"--{boundary}--\r\n").encode("utf-8", "surrogateescape")  # \udcff: the byte 0xff
    status, answer = post(f"{server.url}{LT}/translate_file", body, f"multipart/form-data; boundary={boundary}")
    assert status < 500 and set(answer) == ({"translatedFileUrl"} if status == 200 else {"error"}), (status, answer)
    still_serving(server.url)


@pytest.mark.parametrize("path", ["/health", "/info", "/", f"{LT}/languages", f"{LT}/frontend/settings",
                                  f"{LT}/health", f"{LT}/spec", f"{LT}/download_file/%ED%A0%80/a.txt",
                                  f"{LT}/download_file/x/%2e%2e%2fkeys.db", f"{LT}/download_file/{'a' * 5000}/b"])
def test_every_get_route_answers_odd_queries_without_5xx(server, path: str) -> None:
    query = urllib.parse.urlencode({"q": "\udcff", "x": "[" * 2000}, encoding="utf-8", errors="surrogateescape")
    status, _, _ = request(f"{server.url}{path}?{query}", headers={"X-API-Key": KEY})
    assert status < 500, path
