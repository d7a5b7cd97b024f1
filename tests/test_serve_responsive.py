"""The event loop of ``encdec serve`` stays free while requests compute (encdec.serve.offload): with big texts held in
the middle of their sentence splitting, tokenizing, language detection or JSON parsing (each held on an event, never
timed), ``/health`` on both APIs answers, and the held requests finish once let go. The tokenizer, called from several
of the server's threads at once, gives each text what it gives alone."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from encdec.serve import ServeLimits, TranslationService, core, tagged_text
from encdec.serve.libretranslate import api as lt
from encdec.serve.server import build_service, create_app, load_models
from test_serve import Server, request
from tiny_model_folders import build_model_folders

BIG = "Wednesday, 3 Mar 2021 " * 5_000  # 110 KB, one sentence: cut to the source limit, one job
WAIT = 60  # seconds any wait here may take before the test fails


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return build_model_folders(tmp_path_factory.mktemp("responsive"))


def held(monkeypatch, owner, name: str, signals: tuple[threading.Semaphore, threading.Event] | None = None
         ) -> tuple[threading.Semaphore, threading.Event]:
    """``owner.name`` replaced by the same function that first says it was entered, then waits to be let go
    (``signals``: another held function's, to hold both together)."""
    entered, release = signals or (threading.Semaphore(0), threading.Event())
    original = getattr(owner, name)

    def holding(*args, **kwargs):
        entered.release()
        assert release.wait(WAIT), "never let go"
        return original(*args, **kwargs)
    monkeypatch.setattr(owner, name, holding)
    return entered, release


@pytest.fixture(scope="module")
def server(folders):
    models = load_models([f"de-en={folders['transformer']}", f"en-de={folders['rnn']}"],
                         limits=ServeLimits(max_body_bytes=3_000_000, max_new_tokens=4))
    with Server(create_app(models)) as running:
        yield running


@pytest.fixture
def clients():
    with ThreadPoolExecutor(4) as pool:
        yield pool


def health_while_held(server, entered: threading.Semaphore, count: int, release: threading.Event) -> None:
    """Once ``count`` requests are held, both health routes answer; then the requests are let go."""
    for _ in range(count):
        assert entered.acquire(timeout=WAIT), "a request never reached the held work"
    try:
        answers = [request(f"{server.url}{path}", timeout=WAIT)[:2] for path in ("/health", "/libretranslate/health")]
        assert not release.is_set() and answers == [(200, {"status": "ok"})] * 2
    finally:
        release.set()


BIG_REQUESTS = [("/libretranslate/translate", {"q": BIG, "source": "de", "target": "en"}),
                ("/libretranslate/translate", {"q": f"<p>{BIG}</p>", "source": "de", "target": "en",
                                               "format": "html"}),
                ("/translate", {"text": BIG, "model": "de-en", "split_sentences": True})]


def test_health_answers_while_big_texts_are_split(server, clients, monkeypatch) -> None:
    """The texts held in the core's sentence splitting, the HTML in its own (``tagged_text``)."""
    entered, release = held(monkeypatch, tagged_text, "sentences", held(monkeypatch, core, "split_parts"))
    sent = [clients.submit(request, server.url + path, body, timeout=WAIT) for path, body in BIG_REQUESTS]
    health_while_held(server, entered, len(BIG_REQUESTS), release)
    assert [future.result(timeout=WAIT)[0] for future in sent] == [200] * len(BIG_REQUESTS)


@pytest.mark.parametrize(("owner", "name", "path", "body"), [
    (TranslationService, "jobs_for", "/translate", {"text": ["12 January 1999", "3 Mar"], "model": "de-en"}),
    (lt, "detect_languages", "/libretranslate/detect", {"q": BIG}),
    (lt, "detect_source", "/libretranslate/translate", {"q": BIG, "source": "auto", "target": "en"}),
    (lt, "json_object", "/libretranslate/translate", {"q": BIG, "source": "de", "target": "en"}),
])
def test_health_answers_while_a_request_tokenizes_detects_or_parses(server, clients, monkeypatch, owner, name: str,
                                                                   path: str, body: dict) -> None:
    entered, release = held(monkeypatch, owner, name)
    sent = clients.submit(request, server.url + path, body, timeout=WAIT)
    health_while_held(server, entered, 1, release)
    assert sent.result(timeout=WAIT)[0] == 200


def test_the_tokenizer_gives_each_text_what_it_gives_alone_under_threads(folders) -> None:
    """A text over the source limit is cut by tokenizing it again with truncation, which changes the fast
    tokenizer's state: unguarded, a text beside it on another thread came out uncut, or cut."""
    service = build_service(str(folders["transformer"]), limits=ServeLimits(max_source_tokens=16))
    options = service.options()
    texts = ["Wednesday, 3 Mar 2021 " * 300, "12 January 1999"] * 100
    alone = {text: [job.source_ids for job in service.jobs_for(text, options, cut=True)] for text in texts[:2]}
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda text: [job.source_ids for job in service.jobs_for(text, options, cut=True)],
                              texts))
    assert found == [alone[text] for text in texts]
    assert len(alone[texts[0]][0]) == 16
