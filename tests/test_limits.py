"""`encdec serve`'s limits (encdec.serve.limits): requests a minute per key and per client address (429 with
Retry-After, in each API's words), characters a text (LibreTranslate's 400, the native 422), a bounded queue (503 with
Retry-After), LibreTranslate's suggestions stored in the key database, and memory that stays flat under many clients.

The request limits are asserted on a limiter whose clock stands still (no allowance comes back during a test), so
that no assertion depends on how fast the machine is; requests to an unsupported language are counted and then
refused (400) without decoding, which keeps bursts cheap. The full queue is held by the batchers' test hook."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import http.client
import json
import logging
import shutil
import sqlite3
import urllib.parse
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from encdec.errors import EncdecError
from encdec.serve import ServeLimits
from encdec.serve.app import configured
from encdec.serve.held_batches import HOLD_ENV
from encdec.serve.keys import KeyDatabase
from encdec.serve.libretranslate.files import FileSettings
from encdec.serve.limits import SWEEP_EVERY, RateLimiter, redact_keys
from encdec.serve.server import EncdecServer, check_bind, create_app, load_models, server_config
from test_serve import Server, only_batcher, request
from test_translate_file import multipart
from tiny_model_folders import build_model_folders

LT = "/libretranslate"
FROZEN = 1000.0  # the limiter's clock in the server tests


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A random Transformer folder (what it translates does not matter here)."""
    return build_model_folders(tmp_path_factory.mktemp("limits"))["transformer"]


class ServedAsTheCommand(Server):
    """A ``Server`` run with the uvicorn configuration of ``encdec serve`` (``server_config``: its proxy headers,
    its access log)."""

    def __init__(self, app, log_level: str = "warning", trusted_proxies: list[str] | None = None) -> None:
        super().__init__(app)
        self.server = EncdecServer(server_config(app, "127.0.0.1", 0, log_level, trusted_proxies),
                                   announce=lambda urls: self.listening.set())


def start(folder, keys: KeyDatabase | None = None, api_key: str | None = None, suggestions: bool = False,
          config: dict | None = None, **limits) -> Server:
    """A server of ``folder`` as the de-en model; its limiter's clock stands still (``FROZEN``). With ``config``
    (``server_config``'s arguments), run as ``encdec serve`` runs it."""
    models = load_models([f"de-en={folder}"], limits=ServeLimits(**limits))
    app = create_app(models, api_key=api_key, keys=keys, suggestions=suggestions)
    app.app.state.access.rates.clock = lambda: FROZEN
    return Server(app) if config is None else ServedAsTheCommand(app, **config)


def post(url: str, path: str, body: dict, source: str = "127.0.0.1",
         headers: dict | None = None) -> tuple[int, dict, dict]:
    """(status, JSON, headers in lower case) of a POST sent from the loopback address ``source``."""
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60, source_address=(source, 0))
    try:
        connection.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
        response = connection.getresponse()
        return response.status, json.loads(response.read()), {k.lower(): v for k, v in response.getheaders()}
    finally:
        connection.close()


def cheap(url: str, key: str, source: str = "127.0.0.1") -> tuple[int, dict, dict]:
    """A LibreTranslate request that is counted, then refused as an unsupported language (no decoding)."""
    return post(url, f"{LT}/translate", {"q": "3 Mar 2021", "source": "de", "target": "xx", "api_key": key}, source)


def test_the_limiter_lets_a_burst_of_the_limit_through_then_one_every_60_over_limit_seconds() -> None:
    now = [0.0]
    limiter = RateLimiter(clock=lambda: now[0])
    assert [limiter.hit("a", 3) for _ in range(3)] == [None] * 3
    assert limiter.hit("a", 3) == pytest.approx(20.0) and limiter.hit("b", 3) is None  # b: an allowance of its own
    now[0] = 20.0
    assert limiter.hit("a", 3) is None and limiter.hit("a", 3) == pytest.approx(20.0)
    now[0] = 200.0  # a quiet client is back to a full burst; a request dearer than the limit costs the limit
    assert limiter.hit("a", 3, cost=50) is None and limiter.hit("a", 3) == pytest.approx(20.0)


def test_the_limiter_forgets_clients_that_are_back_to_a_full_allowance() -> None:
    """Memory stays flat: after a sweep only the clients still within their minute are kept."""
    now = [0.0]
    limiter = RateLimiter(clock=lambda: now[0])
    for i in range(SWEEP_EVERY - 1):
        limiter.hit(i, 60)  # each is back to a full allowance one second later
    now[0] = 5.0
    limiter.hit("late", 60)  # the sweep comes before this hit
    assert len(limiter.tats) == 1


def test_a_client_within_its_limit_is_served_while_others_over_theirs_get_429(folder, tmp_path) -> None:
    keys = KeyDatabase(tmp_path / "keys.db")
    roomy, tight = keys.add(100).key, keys.add(2).key
    with start(folder, keys, api_key="shared", req_limit=3) as server:
        tight_burst = [cheap(server.url, tight) for _ in range(5)]
        shared_burst = [cheap(server.url, "shared", "127.0.0.2") for _ in range(6)]  # --req-limit, per address
        roomy_burst = [cheap(server.url, roomy) for _ in range(10)]
        shared_here = cheap(server.url, "shared")
        served = post(server.url, f"{LT}/translate", {"q": "3 Mar 2021", "source": "de", "target": "en",
                                                      "api_key": roomy})
        native = [post(server.url, "/translate", {"text": "3 Mar 2021"}, "127.0.0.3", {"X-API-Key": "shared"})
                  for _ in range(4)]
    assert [status for status, _, _ in tight_burst] == [400, 400, 429, 429, 429]
    assert [status for status, _, _ in shared_burst] == [400] * 3 + [429] * 3
    assert {status for status, _, _ in roomy_burst} == {400} and shared_here[0] == 400
    assert tight_burst[-1][1] == {"error": "Slowdown: 2 per 1 minute"}  # LibreTranslate's words
    assert tight_burst[-1][2]["retry-after"] == "30"  # the next of 2 a minute, on a clock that stands still
    assert shared_burst[-1][1] == {"error": "Slowdown: 3 per 1 minute"}
    assert shared_burst[-1][2]["retry-after"] == "20"
    assert served[0] == 200 and isinstance(served[1]["translatedText"], str)
    assert [status for status, _, _ in native] == [200, 200, 200, 429]
    status, error, headers = native[-1]
    assert error["error"] == "more than 3 requests a minute per client address (--req-limit); retry after 20 s."
    assert error["field"] is None and headers["retry-after"] == "20"


def test_x_forwarded_for_counts_only_from_the_trusted_proxies(folder) -> None:
    """From 127.0.0.1, a new X-Forwarded-For address on every request still meets --req-limit: the header is
    ignored unless --trusted-proxies names the peer; then each forwarded client has its own allowance, and the client
    is the right-most address that is not a trusted proxy (a client's own X-Forwarded-For, to which a trusted proxy
    appends its peer, cannot rotate its way past the limit)."""
    def burst(server: Server, forwarded: str) -> list[int]:
        return [post(server.url, f"{LT}/translate", {"q": "a", "source": "de", "target": "xx"},
                     headers={"X-Forwarded-For": forwarded.format(i)})[0] for i in range(5)]
    with start(folder, req_limit=2, config={}) as server:
        ignored = burst(server, "203.0.113.{}")
    with start(folder, req_limit=2, config={"trusted_proxies": ["127.0.0.1", "10.0.0.0/8"]}) as server:
        forwarded = burst(server, "203.0.113.{}")
        appended = burst(server, "198.51.100.{}, 192.0.2.7, 10.1.2.3")  # a client's header, then 2 proxies' hops
    assert ignored == [400, 400, 429, 429, 429]
    assert forwarded == [400] * 5
    assert appended == [400, 400, 429, 429, 429]  # all counted as 192.0.2.7


def test_keys_stay_out_of_the_access_log(folder) -> None:
    """uvicorn's access log (``encdec serve --log-level info``) shows the request line with every key parameter of
    the query redacted."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())
    access_log = logging.getLogger("uvicorn.access")
    with start(folder, api_key="hunter2", config={"log_level": "info"}) as server:
        access_log.addHandler(handler)
        try:
            request(f"{server.url}{LT}/languages?api_key=hunter2&x=1")
            request(f"{server.url}{LT}/detect?apiKey=hunter3", {"q": "a"})
            request(f"{server.url}/health?api%5Fkey=hunter4&token=hunter5")
        finally:
            access_log.removeHandler(handler)
    assert len(lines) == 3 and not any("hunter" in line for line in lines), lines
    assert f"{LT}/languages?api_key=REDACTED&x=1" in lines[0] and "apiKey=REDACTED" in lines[1]
    assert redact_keys("/a?Api-Key=k&q=api_key%3Dv&key=&secret=s") == "/a?Api-Key=REDACTED&q=api_key%3Dv&key=REDACTED" \
        "&secret=REDACTED"


def test_a_list_counts_a_request_a_text(folder) -> None:
    """As LibreTranslate counts a list ``q``: two texts use two of the minute's requests."""
    with start(folder, req_limit=3) as server:
        pair = post(server.url, f"{LT}/translate", {"q": ["a", "b"], "source": "de", "target": "xx"})
        third = post(server.url, f"{LT}/translate", {"q": "c", "source": "de", "target": "xx"})
        fourth = post(server.url, f"{LT}/translate", {"q": "d", "source": "de", "target": "xx"})
    assert (pair[0], third[0], fourth[0]) == (400, 400, 429)


def test_a_full_queue_answers_503_with_retry_after_in_both_apis(folder, monkeypatch) -> None:
    monkeypatch.setenv(HOLD_ENV, "1")
    with start(folder, max_queue=2) as server:
        batcher = only_batcher(server)
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(request, f"{server.url}/translate", {"text": ["3 Mar 2021", "4 Mar 2021"]})
            assert batcher.wait_held(2, timeout=60), batcher.held
            native = request(f"{server.url}/translate", {"text": "5 Mar 2021"})
            libre = request(f"{server.url}{LT}/translate", {"q": "5 Mar 2021", "source": "de", "target": "en"})
            documented = request(f"{server.url}/openapi.json")[1]["paths"]["/translate"]["post"]["responses"]
            batcher.release()
            first = held.result(timeout=60)
        empty = request(f"{server.url}/translate", {"text": ["a", "b", "c"]})  # more than 2, into an empty queue
    busy = "the server is busy: 2 texts wait for the model de-en, the most it queues (--max-queue 2); retry after 1 s."
    assert native[0] == 503 and native[1]["error"] == busy and native[1]["field"] is None
    assert native[2]["retry-after"] == "1"
    assert libre[:2] == (503, {"error": busy}) and libre[2]["retry-after"] == "1"
    assert first[0] == 200 and len(first[1]["translations"]) == 2 and empty[0] == 200
    assert "503" in documented and "429" not in documented
    assert batcher.depth == 0


def test_the_char_limit_counts_a_text_natively_and_a_request_in_libretranslate_s_api(folder, tmp_path) -> None:
    """The native API counts each text; LibreTranslate's API counts the texts of ``q`` together, as LibreTranslate
    does (``chars = sum(len(text) for text in q)`` in ``libretranslate/app.py``): 64 texts of 41 characters do not
    pass a limit of 50."""
    keys = KeyDatabase(tmp_path / "keys.db")
    wide = keys.add(100, char_limit=50).key
    shared = {"X-API-Key": "shared"}
    with start(folder, keys, api_key="shared", char_limit=10) as server:
        one = request(f"{server.url}/translate", {"text": "x" * 11}, headers=shared)
        listed = request(f"{server.url}/translate", {"text": ["short", "y" * 12]}, headers=shared)
        within = request(f"{server.url}/translate", {"text": ["x" * 10, "y" * 10]}, headers=shared)
        libre = {q: request(f"{server.url}{LT}/translate", {"q": q, "source": "de", "target": "en", "api_key": key})
                 for q, key in [("x" * 11, "shared"), (("short", "y" * 6), "shared"), (("abcd", "efgh"), "shared"),
                                ("z" * 40, wide), ("z" * 51, wide), (("w" * 41,) * 64, wide)]}
        settings = request(f"{server.url}{LT}/frontend/settings")[1]
    assert one[:1] == (422,) and one[1]["field"] == "text"
    assert one[1]["error"] == "text: 11 characters exceed the limit of 10 per text (--char-limit); split the text."
    assert listed[0] == 422 and listed[1]["field"] == "text[1]" and "12 characters" in listed[1]["error"]
    assert within[0] == 200  # 20 characters in all: the native limit is per text
    assert libre["x" * 11][:2] == (400, {"error": "Invalid request: request (11) exceeds text limit (10)"})
    assert libre[("short", "y" * 6)][:2] == (400, {"error": "Invalid request: request (11) exceeds text limit (10)"})
    assert libre[("abcd", "efgh")][0] == 200
    assert libre["z" * 40][0] == 200  # the key's own limit
    assert libre["z" * 51][:2] == (400, {"error": "Invalid request: request (51) exceeds text limit (50)"})
    assert libre[("w" * 41,) * 64][:2] == (400, {"error": "Invalid request: request (2624) exceeds text limit (50)"})
    assert (settings["charLimit"], settings["keyRequired"], settings["apiKeys"], settings["suggestions"]) == \
        (10, True, True, False)


def test_suggestions_are_stored_in_the_key_database(folder, tmp_path) -> None:
    path = tmp_path / "keys.db"
    keys = KeyDatabase(path)
    key = keys.add(100).key
    suggestion = {"q": "3 Mar 2021", "s": "2021-03-03", "source": "de", "target": "en"}
    with start(folder, keys, suggestions=True) as server:
        stored = request(f"{server.url}{LT}/suggest", {**suggestion, "api_key": key})
        by_form = request(f"{server.url}{LT}/suggest", raw=urllib.parse.urlencode({**suggestion, "api_key": key,
                                                                                   "s": "03.03.2021"}).encode(),
                          headers={"Content-Type": "application/x-www-form-urlencoded"})
        missing = request(f"{server.url}{LT}/suggest", {**suggestion, "s": "", "api_key": key})
        too_long = [request(f"{server.url}{LT}/suggest", {**suggestion, name: "x" * 5001, "api_key": key})
                    for name in ("q", "s")]
        wrong_key = request(f"{server.url}{LT}/suggest", {**suggestion, "api_key": "nope"})
        settings = request(f"{server.url}{LT}/frontend/settings")[1]
    with start(folder) as server:
        disabled = request(f"{server.url}{LT}/suggest", suggestion)
    assert stored[:2] == (200, {"success": True}) and by_form[:2] == (200, {"success": True})
    assert missing[:2] == (400, {"error": "Invalid request: missing s parameter"})
    assert [answer[:2] for answer in too_long] == [(400, {"error": f"Invalid request: {name} (5001) exceeds text "
                                                                   "limit (5000)"}) for name in ("q", "s")]
    assert wrong_key[:2] == (403, {"error": "Invalid API key"})
    assert disabled[:2] == (403, {"error": "Suggestions are disabled on this server."})
    assert settings["suggestions"] is True
    rows = sqlite3.connect(path).execute("SELECT q, s, source, target FROM suggestions").fetchall()
    assert rows == [("3 Mar 2021", "2021-03-03", "de", "en"), ("3 Mar 2021", "03.03.2021", "de", "en")]
    with pytest.raises(EncdecError, match="--suggestions stores the suggestions in the key database"):
        configured(None, {"suggestions": True}, None)  # as serve() checks it, before the models load


def test_the_429_is_documented_and_a_key_database_may_face_the_network(folder, tmp_path) -> None:
    with start(folder, req_limit=5) as server:
        schema = request(f"{server.url}/openapi.json")[1]["paths"]
    assert set(schema["/translate"]["post"]["responses"]) == {"200", "400", "413", "415", "422", "429", "500"}
    assert "429" in schema[f"{LT}/translate"]["post"]["responses"]
    check_bind("0.0.0.0", str(tmp_path / "keys.db"))  # keys from the database guard it: no refusal
    with pytest.raises(EncdecError, match="--api-keys-db"):
        check_bind("0.0.0.0", None)


def test_detect_and_translate_file_take_the_key_and_count_as_requests(folder, tmp_path) -> None:
    """LibreTranslate's /detect and /translate_file check the key and count against its limit as /translate does
    (LibreTranslate's access_check and limiter); a file costs its characters over the character limit (at least one
    request), as LibreTranslate charges a file, and is not refused for its length."""
    keys = KeyDatabase(tmp_path / "keys.db")
    key = keys.add(4, char_limit=10).key
    sentence = {"q": "Das ist ein Haus."}
    text = "Das ist ein Haus. Das ist ein Haus. "  # 36 characters: 3 requests at 10 characters a request
    with start(folder, keys) as server:
        missing = post(server.url, f"{LT}/detect", sentence)
        wrong = post(server.url, f"{LT}/detect", {**sentence, "api_key": "nope"})
        detected = post(server.url, f"{LT}/detect", {**sentence, "api_key": key})
        uploads = [multipart({"source": "de", "target": "en", **fields}, ("a.txt", text.encode()))
                   for fields in ({}, {"api_key": key})]
        unkeyed, filed = [request(f"{server.url}{LT}/translate_file", raw=body, headers={"Content-Type": kind})
                          for body, kind in uploads]
        after = post(server.url, f"{LT}/detect", {**sentence, "api_key": key})
    assert missing[:2] == (400, {"error": "Please contact the server operator to get an API key"})
    assert wrong[:2] == (403, {"error": "Invalid API key"})
    assert detected[0] == 200 and detected[1][0]["language"] == "de"
    assert unkeyed[:2] == (400, {"error": "Please contact the server operator to get an API key"})
    assert filed[0] == 200 and "/download_file/" in filed[1]["translatedFileUrl"]
    assert after[:2] == (429, {"error": "Slowdown: 4 per 1 minute"})  # 1 + 1 + 3: the minute's 4 are spent


async def asgi_post(app, path: str, body: bytes, client: str, headers: dict[str, str] | None = None,
                    method: str = "POST") -> tuple[int, bytes]:
    """The status and body of one request answered by the ASGI ``app`` (no sockets: thousands a second)."""
    headers = {"content-type": "application/json", **(headers or {}), "content-length": str(len(body))}
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http",
             "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(name.encode(), value.encode()) for name, value in headers.items()],
             "client": (client, 40000), "server": ("127.0.0.1", 8000)}
    sent, status, answer = [{"type": "http.request", "body": body, "more_body": False}], [], []

    async def receive() -> dict:
        return sent.pop() if sent else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        if message["type"] == "http.response.start":
            status.append(message["status"])
        elif message["type"] == "http.response.body":
            answer.append(message.get("body", b""))

    await app(scope, receive, send)
    return status[0], b"".join(answer)


def quick_folder(folder: Path, tmp_path: Path) -> Path:
    """``folder`` with a budget of two new tokens (its generation config's ``max_new_tokens``, which every API takes
    when a request names none): every request decodes, in a fraction of the time."""
    copy = tmp_path / "quick"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "generation_config.json").read_text())
    (copy / "generation_config.json").write_text(json.dumps({**config, "max_new_tokens": 2}))
    return copy


class Traffic:
    """The three APIs' routes, in turn, each request from another address and with a key (of the database, or the
    single key): the native ``POST /translate``, LibreTranslate's ``POST /libretranslate/translate``, and its file
    translation (``POST /libretranslate/translate_file``, then the ``GET`` of the translated file, two requests).
    Every request is answered 200, so every one decoded (or downloaded what was decoded). The file store's clock
    moves on by the files' lifetime after each round of clients, so the files of a round expire (and are deleted by
    the next look-up's sweep) as they would over a long run."""

    def __init__(self, app, keys: tuple[str, str]) -> None:
        self.app, self.keys, self.sent, self.now = app, keys, 0, 0.0
        self.store = app.app.state.files.store
        self.store.clock = lambda: self.now
        self.upload = [multipart({"source": "de", "target": "en", "api_key": key}, ("a.txt", b"3 Mar 2021\n"))
                       for key in keys]

    async def one(self, i: int) -> int:
        """Request ``i`` (a file translation and its download for every third): how many requests it made."""
        address, key = f"127.{i // 65536 % 256}.{i // 256 % 256}.{i % 256}", self.keys[i % 2]
        if i % 3 == 0:
            status, _ = await asgi_post(self.app, "/translate", json.dumps({"text": "3 Mar 2021"}).encode(), address,
                                        {"x-api-key": key})
        elif i % 3 == 1:
            status, _ = await asgi_post(self.app, f"{LT}/translate", json.dumps(
                {"q": "3 Mar 2021", "source": "de", "target": "en", "api_key": key}).encode(), address)
        else:
            body, kind = self.upload[i % 2]
            status, answer = await asgi_post(self.app, f"{LT}/translate_file", body, address, {"content-type": kind})
            assert status == 200, answer
            status, answer = await asgi_post(self.app, urllib.parse.urlsplit(json.loads(answer)["translatedFileUrl"]
                                                                             ).path, b"", address, method="GET")
        assert status == 200, answer
        return 2 if i % 3 == 2 else 1

    async def run(self, count: int, clients: int = 128) -> None:
        """``count`` requests, ``clients`` at a time (so that the batchers batch them)."""
        goal = self.sent + count
        while self.sent < goal:
            made = await asyncio.gather(*(self.one(self.sent + j) for j in range(clients)))
            self.sent += sum(made)
            self.now += self.store.expiry + 1


def resident_mib() -> float:
    """This process's resident memory (RSS) in MiB, after a collection and, on glibc, after the allocator hands its
    free pages back (``malloc_trim``), so that what is measured is what is held."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    return psutil.Process().memory_info().rss / 2**20


@pytest.mark.timeout(300)
def test_memory_stays_flat_over_20000_requests_from_many_clients(folder, tmp_path) -> None:
    """20,000 requests that decode, through the three APIs' routes (``Traffic``), each from another address, half
    with a key of the database and half with the single key, with the request limit, the char limit and the metrics
    on: what the server keeps (the limiter's clients, the metrics' series, the key lookups, the kept files, the
    batchers' records) does not grow with them. As ``benchmarks/soak.py`` judges a soak: the resident memory grows by
    less than 8 MiB (under 470 bytes a request) from request 2,000 (caches warm, the first sweeps done) to the end.
    Last in this file: it is the longest."""
    keys = KeyDatabase(tmp_path / "keys.db")
    key = keys.add(1_000_000).key
    models = load_models([f"de-en={quick_folder(folder, tmp_path)}"],
                         limits=ServeLimits(req_limit=600, char_limit=100, max_batch_size=128))
    app = create_app(models, api_key="shared", keys=keys, metrics=True,
                     files=FileSettings(files_dir=str(tmp_path / "files")))
    traffic = Traffic(app, (key, "shared"))
    for batcher in app.app.state.batchers.values():  # its record of batches, bounded (RECORD_LENGTH), filled early
        batcher.record = deque(maxlen=50)

    async def run() -> tuple[float, float]:
        async with app.app.router.lifespan_context(app.app):  # the batchers and the file store, started and stopped
            await traffic.run(2_000)
            early = resident_mib()
            await traffic.run(18_000)
            return early, resident_mib()

    early, late = asyncio.run(run())
    assert traffic.sent >= 20_000 and max(next(iter(app.app.state.batchers.values())).batches) > 1  # batched
    assert late - early < 8, f"{early:.1f} MiB at request 2,000, {late:.1f} MiB at {traffic.sent:,}"
