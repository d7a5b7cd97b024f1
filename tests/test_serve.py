"""``encdec serve``: a real server (on 127.0.0.1 port 0, its bound port read back) answers as offline translation
does, batches without changing any answer, refuses each bad input with a one-line JSON error (exact) and goes on
serving, guards itself with an API key, stops gracefully on SIGTERM, serves int8 models of both engines, survives a
load test, and its page and its API page (/docs) work in headless Chromium that can reach no other host. Every error
status is in the OpenAPI schema, as ``ErrorResponse`` (tests/test_serve_fuzz.py fuzzes the request schema).

Batching is asserted through the batcher itself, never through timing: under ``ENCDEC_TEST_HOLD_BATCHES`` a server's
batchers are held (``encdec.serve.held_batches.HeldBatcher``): they queue the requests, the test sees them queued,
releases them, and reads which batches ran and why (``HeldBatcher.decisions``). The SIGTERM test holds its requests
the same way. No test asserts a duration: every request, wait and subprocess has a timeout instead.

The models are trained here on the built-in date task (a few seconds each): trained models end their outputs with
EOS at varied steps and their beams compete, so batching mistakes would show.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import queue
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
import uvicorn

from encdec.cards import write_model_card
from encdec.decoding_options import DecodeRequest
from encdec.errors import EncdecError
from encdec.inference import load_engine, load_model_and_tokenizer, translate, translate_detailed
from encdec.inference.plotting import attention_matrix
from encdec.serve import DecodeOptions, DynamicBatcher, Job, RequestError, ServeLimits, TranslationService
from encdec.serve.held_batches import HOLD_ENV, BatchRecord, HeldBatcher
from encdec.serve.server import EncdecServer, ErrorResponse, build_service, check_bind, create_app
from encdec.ship.ctranslate2_export import export_ctranslate2
from encdec_cli import main
from tiny_model_folders import date_data

SAMPLE = "Wednesday, 3 Mar 2021"


@pytest.fixture(scope="module")
def dates():
    return date_data()


@pytest.fixture(scope="module")
def folders(date_models):
    """family -> model folder, each trained 600 steps on dates: the session's (conftest's ``date_models``, which
    test_engines.py decodes too). Read only: a test that changes a folder copies it first."""
    return date_models


@pytest.fixture(scope="module")
def sources(dates):
    return [source for source, _ in dates[2]]


class Server:
    """An app served by uvicorn in a thread of this process, on 127.0.0.1 port 0: the port is read from the socket
    uvicorn bound (``server.servers[0].sockets``) once it says it listens (``EncdecServer``'s ``announce``)."""

    def __init__(self, app) -> None:
        self.listening = threading.Event()
        self.server = EncdecServer(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on"),
                                   announce=lambda urls: self.listening.set())
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        try:
            self.server.run()
        finally:
            self.listening.set()  # a server that failed to start: __enter__ sees it at once

    def __enter__(self) -> Server:
        self.thread.start()
        assert self.listening.wait(timeout=60) and self.server.started, "the server did not start"
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the server did not stop"


def request(url: str, body: object = None, method: str | None = None, headers: dict | None = None,
            raw: bytes | None = None, timeout: float = 60) -> tuple[int, dict | str, dict]:
    """(status, JSON or text, headers) of one HTTP request."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", **(headers or {})} if data is not None else dict(headers or {})
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            status, payload, got = response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as error:
        status, payload, got = error.code, error.read(), dict(error.headers)
    text = payload.decode()
    is_json = got.get("content-type", "").startswith("application/json")
    return status, json.loads(text) if is_json else text, got


def status_of(url: str) -> int:
    """The status of a GET of ``url`` (whatever its body)."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def serve_app(folder: Path, api_key: str | None = None, **limits) -> Server:
    return Server(create_app(build_service(str(folder), limits=ServeLimits(**limits)), api_key=api_key))


def only_batcher(server: Server) -> DynamicBatcher:
    """The batcher of a server of one model."""
    (batcher,) = server.server.config.app.app.state.batchers.values()
    return batcher


@pytest.fixture(scope="module")
def transformer_server(folders):
    with serve_app(folders["transformer"], max_texts=8, max_source_tokens=24, max_beams=6,
                   max_body_bytes=4000) as server:
        yield server


def teacher_forced_log_prob(model, tokenizer, source: str, num_beams: int) -> float:
    """log P(y | x) of the translation that generate() gives ``source`` alone, summed over its tokens and </s>."""
    source_ids = tokenizer(source)["input_ids"]
    with torch.no_grad():
        generated = model.generate(input_ids=torch.tensor([source_ids]), num_beams=num_beams)[0, 1:].tolist()
    target_ids = [i for i in generated if i != tokenizer.pad_token_id]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([source_ids]), labels=torch.tensor([target_ids])).logits[0]
    return float(logits.log_softmax(-1).gather(-1, torch.tensor(target_ids)[:, None]).sum())


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_translate_answers_as_offline_translation(family, folders, sources) -> None:
    texts = sources[:8]
    engine, tokenizer = load_engine(folders[family])
    expected = translate(engine, tokenizer, texts, num_beams=3)
    expected_n_best = [[h.text for h in found] for found in translate_detailed(engine, tokenizer, texts, 2,
                                                                               num_beams=3)]
    with serve_app(folders[family]) as server:
        status, body, _ = request(f"{server.url}/translate", {"text": texts, "num_beams": 3, "n_best": 2,
                                                               "return_scores": True})
        single_status, single, _ = request(f"{server.url}/translate", {"text": texts[0], "num_beams": 3})
    assert status == 200 and single_status == 200
    answers = body["translations"]
    assert [a["text"] for a in answers] == expected  # one per text, in order
    assert [[h["text"] for h in a["n_best"]] for a in answers] == expected_n_best
    assert single == {"translations": [{"text": expected[0]}]}  # nothing that was not asked
    for text, answer in zip(texts, answers, strict=True):
        log_prob = teacher_forced_log_prob(engine.model, tokenizer, text, num_beams=3)
        assert answer["score"] == pytest.approx(log_prob, abs=1e-4)
        assert answer["n_best"][0]["score"] >= answer["score"]  # the list's first: the best log P of the beams
        assert answer["score"] < 0


def test_n_best_lists_are_translate_s_best_first_and_distinct(folders, sources, tmp_path, capsys) -> None:
    """A native n-best list is the one `encdec translate --n-best` prints for that text: best first by the printed
    score, each text once (trained, the beams of some of these texts repeat one); with `keep_duplicates`, as
    `--keep-duplicates`. The translation, its score and its alignment are those of a request without `n_best`."""
    folder, texts = folders["transformer"], sources[:60]
    (tmp_path / "in.txt").write_text("".join(text + "\n" for text in texts))
    asked = {"text": texts, "num_beams": 8, "return_scores": True, "return_alignments": True}
    with serve_app(folder) as server:
        _, plain, _ = request(f"{server.url}/translate", asked)
        answers = {keep: request(f"{server.url}/translate", {**asked, "n_best": 4, **({"keep_duplicates": True}
                                                                                   if keep else {})})[1]
                   for keep in (False, True)}  # by default: distinct
    capsys.readouterr()  # what the server said
    repeats = {}
    for keep in (False, True):
        flags = ["--keep-duplicates"] if keep else []
        assert main(["translate", "--model", str(folder), "--input", str(tmp_path / "in.txt"), "--num-beams", "8",
                     "--n-best", "4", "--scores", *flags]) == 0
        printed = [[] for _ in texts]
        for line in capsys.readouterr().out.splitlines():
            index, text, score = line.split(" ||| ")
            printed[int(index)].append((text, float(score)))
        lists = [[(h["text"], float(f"{h['score']:.4f}")) for h in answer.pop("n_best")]
                 for answer in answers[keep]["translations"]]
        assert lists == printed
        assert all([score for _, score in listed] == sorted([score for _, score in listed], reverse=True)
                   for listed in lists)
        repeats[keep] = sum(len({text for text, _ in listed}) < len(listed) for listed in lists)
        assert answers[keep] == plain
    assert repeats[False] == 0 and repeats[True] > 0


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_the_server_s_alignment_is_translate_s_and_the_plot_s(family, folders, tmp_path, capsys) -> None:
    """One meaning of alignment: for a sentence, the server's links equal `encdec translate --alignments`, and its
    weights are the plotted matrix; by default (the model's alignment layer, its heads' mean) and for a layer and a
    head chosen in each front end's words."""
    folder = folders[family]
    (tmp_path / "one.txt").write_text(SAMPLE + "\n")
    model, tokenizer = load_model_and_tokenizer(folder)
    chosen = [{}, {"alignment_layer": -1, "alignment_head": 1}, {"alignment_layer": "mean"}]
    if family == "rnn":  # one layer, one head
        chosen = [{}, {"alignment_layer": 0, "alignment_head": 0}]
    matrices = []
    with serve_app(folder) as server:
        for selection in chosen:
            _, body, _ = request(f"{server.url}/translate", {"text": SAMPLE, "return_alignments": True,
                                                           "max_new_tokens": 12, **selection})
            answer = body["translations"][0]
            flags = [f for key, value in selection.items() for f in (f"--{key.replace('_', '-')}", str(value))]
            assert main(["translate", "--model", str(folder), "--input", str(tmp_path / "one.txt"), "--alignments",
                         "--max-new-tokens", "12", *flags]) == 0
            assert capsys.readouterr().out.strip() == f"{answer['text']} ||| {answer['alignment']['links']}"
            plotted = attention_matrix(model, tokenizer, SAMPLE, layer=selection.get("alignment_layer"),
                                       head=selection.get("alignment_head"),
                                       decoding=DecodeRequest(num_beams=1, max_new_tokens=12))[0]  # (T, S)
            weights = torch.tensor(answer["alignment"]["weights"]).T
            assert torch.allclose(weights, torch.from_numpy(plotted).float(), atol=1e-5)
            matrices.append(weights)
    if family == "transformer":  # several decoder layers and heads: each choice is another matrix
        assert not torch.allclose(matrices[0], matrices[1]) and not torch.allclose(matrices[0], matrices[2])


def test_an_alignment_layer_or_head_the_model_lacks_is_refused_by_field(folders) -> None:
    config = json.loads((folders["transformer"] / "config.json").read_text())
    beyond = (("alignment_layer", config["decoder_layers"]), ("alignment_head", config["decoder_attention_heads"]))
    with serve_app(folders["transformer"]) as server:
        for field, value in (*beyond, ("alignment_layer", "first")):
            status, error, _ = request(f"{server.url}/translate", {"text": SAMPLE, "return_alignments": True,
                                                                 field: value})
            assert (status, error["field"]) == (422, field), error
            assert error["error"].startswith(f"{field}: ")
            assert ("'mean'" in error["error"] or '"mean"' in error["error"]) == (field == "alignment_layer")


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_alignment_is_a_source_by_target_distribution(family, folders) -> None:
    engine, tokenizer = load_engine(folders[family])
    with serve_app(folders[family]) as server:
        _, body, _ = request(f"{server.url}/translate", {"text": SAMPLE, "return_alignments": True})
    answer = body["translations"][0]
    alignment = answer["alignment"]
    source_ids = tokenizer(SAMPLE)["input_ids"]
    assert alignment["source_tokens"] == tokenizer.convert_ids_to_tokens(source_ids)
    assert alignment["target_tokens"][-1] == "</s>"
    assert tokenizer.convert_tokens_to_string(alignment["target_tokens"][:-1]).strip() == answer["text"]
    weights = torch.tensor(alignment["weights"])  # (S, T)
    assert weights.shape == (len(source_ids), len(alignment["target_tokens"]))
    assert torch.allclose(weights.sum(dim=0), torch.ones(weights.size(1)), atol=1e-4)  # each column: over the source
    assert (weights >= 0).all()


def test_batching_gives_each_text_what_it_gets_alone(folders, sources) -> None:
    """Jobs with mixed options, queued at once, are batched by options; every answer equals that job decoded alone,
    including greedy jobs with budgets that cut their outputs, batched with jobs of longer budgets. The batcher is
    held while the jobs queue, so the batches it runs are known: each group of equal options in batches of 16."""
    engine, tokenizer = load_engine(folders["transformer"])
    service = TranslationService(engine, tokenizer)
    requests = [dict(text=text, num_beams=beams, max_new_tokens=budget, return_scores=True)
                for text, beams, budget in zip(sources[:60], [1, 1, 3] * 20, [None, 4, None, 16, 6] * 12,
                                               strict=False)]
    jobs = [job for options in requests for job in service.jobs(**options)]
    alone = [service.decode([job])[0] for job in jobs]
    batcher = HeldBatcher(service.decode, max_batch_size=16, max_wait_ms=0)
    batcher.start()
    try:
        futures = batcher.submit(jobs)
        assert batcher.held == len(jobs) and batcher.batches == []  # all queued, none run
        batcher.release()
        answers = [future.result(timeout=60) for future in futures]
    finally:
        batcher.stop()
    assert answers == alone
    groups = Counter(job.key for job in jobs)
    greedy = [key for key in groups if key[0][0] == 1]
    assert greedy == [(jobs[0].options.search, None)] and groups[greedy[0]] == 40  # greedy jobs share a batch
    # whatever their budgets; beam jobs do not:
    assert {key[1] for key in groups if key[0][0] == 3} == {job.budget for job in jobs if job.options.num_beams == 3}
    assert sorted(batcher.batches) == sorted(size for count in groups.values()
                                             for size in [16] * (count // 16) + [count % 16] * (count % 16 > 0))
    cut = [answer["text"] for answer, options in zip(answers, requests, strict=True) if options["max_new_tokens"] == 4]
    assert all(len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= 4 for text in cut)


def test_concurrent_requests_are_batched_and_answered_in_order(folders, sources, monkeypatch) -> None:
    """Eight requests (36 texts) held in the batcher's queue run as a batch of 32 (the largest), then the 4 left
    once they waited --max-wait-ms: texts of different requests share a batch, and each request gets its own
    answers, in order."""
    engine, tokenizer = load_engine(folders["transformer"])
    expected = translate(engine, tokenizer, sources[:64], num_beams=1)
    monkeypatch.setenv(HOLD_ENV, "1")
    with serve_app(folders["transformer"], max_wait_ms=50) as server:
        batcher = only_batcher(server)

        def ask(i: int) -> list[str]:
            texts = sources[8 * i:8 * i + 8] if i % 2 else sources[8 * i]
            status, body, _ = request(f"{server.url}/translate", {"text": texts, "num_beams": 1})
            assert status == 200
            return [t["text"] for t in body["translations"]]

        with ThreadPoolExecutor(8) as pool:
            asked = [pool.submit(ask, i) for i in range(8)]
            assert batcher.wait_held(36, timeout=60), batcher.held
            assert batcher.held == 36 and batcher.batches == []
            batcher.release()
            got = [future.result(timeout=60) for future in asked]
    for i, answer in enumerate(got):
        assert answer == (expected[8 * i:8 * i + 8] if i % 2 else [expected[8 * i]])
    assert list(batcher.decisions) == [BatchRecord(32, "expected", 1), BatchRecord(4, "waited", 32)]


def lone_job(length: int) -> Job:
    return Job(list(range(3, 3 + length)), DecodeOptions(num_beams=1, length_penalty=None, n_best=1,
                                                          max_new_tokens=None), budget=8)


def test_the_batcher_runs_a_lone_client_at_once() -> None:
    """A window of ten minutes, and requests that come one at a time: each runs alone as soon as it comes (well
    within the minute each may wait), because one job is what the batcher expects, not because the window ran out."""
    batcher = DynamicBatcher(lambda jobs: [len(job.source_ids) for job in jobs], max_batch_size=8,
                             max_wait_ms=600_000)
    batcher.start()
    try:
        answers = [batcher.submit([lone_job(n)])[0].result(timeout=60) for n in (1, 2, 3)]
        assert batcher.expected == 1
    finally:
        batcher.stop()
    assert answers == [1, 2, 3]
    assert batcher.batches == [1, 1, 1]


def test_the_server_answers_a_lone_client_without_waiting_for_the_window(folders) -> None:
    """`--max-wait-ms` of ten minutes: each of two requests, sent one after the other, is decoded as a batch of one
    the moment it comes (within the minute each may wait), and answered."""
    engine, tokenizer = load_engine(folders["transformer"])
    with serve_app(folders["transformer"], max_wait_ms=600_000) as server:
        answers = [request(f"{server.url}/translate", {"text": text}, timeout=60) for text in (SAMPLE, "1/2/2000")]
        record = only_batcher(server).batches
    assert [(status, body) for status, body, _ in answers] == [
        (200, {"translations": [{"text": text}]}) for text in translate(engine, tokenizer, [SAMPLE, "1/2/2000"])]
    assert record == [1, 1]


def test_health_info_page_and_schema(folders, tmp_path) -> None:
    folder = shutil.copytree(folders["rnn"], tmp_path / "rnn")
    write_model_card(folder, dataset_name="dates", metrics={"bleu": 98.5, "chrf": 99.1, "split": "test"})
    with serve_app(folder, max_beams=4) as server:
        health = request(f"{server.url}/health")
        _, info, _ = request(f"{server.url}/info")
        page_status, page, page_headers = request(f"{server.url}/")
        _, schema, _ = request(f"{server.url}/openapi.json")
        icon_status, icon, icon_headers = request(f"{server.url}/favicon.ico")
        api_pages = {path: request(f"{server.url}{path}") for path in ("/docs",)}
        assets = [status_of(f"{server.url}{src}") for _, html, _ in api_pages.values()
                  for src in re.findall(r'(?:src|href)="(/[^"]+)"', html)]
    assert health[:2] == (200, {"status": "ok"})
    assert info["family"] == "rnn_seq2seq" and info["architecture"]["attention"] == "bahdanau"
    weights = sum(parameter.numel() for parameter in load_engine(folder)[0].model.parameters())
    assert info["parameters"] == weights and info["alignments"] is True
    assert (info["engine"], info["compute_type"]) == ("torch", "float32")
    assert info["metrics"] == [{"dataset": "dates", "split": "test", "metric": "bleu", "value": 98.5},
                               {"dataset": "dates", "split": "test", "metric": "chrf", "value": 99.1}]
    # an RNN has no position limit: sources up to its tokenizer's model_max_length, budgets up to the server's 1024
    assert info["limits"] == {"max_batch_size": 32, "max_wait_ms": 10.0, "max_texts": 64, "max_source_tokens": 512,
                              "max_new_tokens": 1024, "max_beams": 4, "max_body_bytes": 1_000_000,
                              "req_limit": None, "char_limit": None, "max_queue": None}
    assert page_status == 200 and page_headers["content-type"].startswith("text/html")
    assert 'id="heatmap"' in page and 'id="translate"' in page
    assert "src=\"http" not in page and "href=\"http" not in page and "@import" not in page  # no external assets
    request_schema = schema["components"]["schemas"]["TranslateRequest"]
    assert set(request_schema["properties"]) == {"text", "num_beams", "max_new_tokens", "length_penalty",
                                                 "no_repeat_ngram_size", "glossary", "n_best",
                                                 "keep_duplicates", "return_scores", "return_alignments",
                                                 "alignment_layer", "alignment_head", "split_sentences", "source",
                                                 "target", "model"}
    assert [(m["name"], m["source"], m["family"]) for m in info["models"]] == [("rnn", None, "rnn_seq2seq")]
    assert all(p.get("description") for p in request_schema["properties"].values())
    assert request_schema["additionalProperties"] is False
    beams = request_schema["properties"]["num_beams"]["anyOf"][0]
    assert beams["maximum"] == 4 and beams["minimum"] == 1
    answer_schema = schema["components"]["schemas"]["Translation"]
    assert all(p.get("description") for p in answer_schema["properties"].values())
    for name, spec in request_schema["properties"].items():  # every number: a type, a minimum and a maximum
        for option in spec.get("anyOf", [spec]):
            if option["type"] in ("integer", "number"):
                assert "minimum" in option and "maximum" in option, name
    penalty = request_schema["properties"]["length_penalty"]["anyOf"][0]
    assert (penalty["minimum"], penalty["maximum"]) == (-10, 10)
    assert icon_status == 200 and icon_headers["content-type"] == "image/svg+xml" and icon.startswith("<svg")
    assert 'rel="icon"' in page
    for path, (status, html, _) in api_pages.items():  # Swagger UI: its scripts from this server
        assert status == 200 and "cdn" not in html and not re.search(r'(?:src|href)="https?:', html), path
    assert len(assets) >= 3 and set(assets) == {200}


def test_openapi_documents_the_errors_the_server_sends(folders) -> None:
    """Every error status an operation answers is in its OpenAPI responses, as ``ErrorResponse``; FastAPI's
    ``HTTPValidationError`` (``{detail: [...]}``), which the server never sends, is nowhere; 401 only with a key."""
    with serve_app(folders["transformer"]) as server:
        _, schema, _ = request(f"{server.url}/openapi.json")
    with serve_app(folders["transformer"], api_key="k") as server:
        _, guarded, _ = request(f"{server.url}/openapi.json", headers={"X-API-Key": "k"})
    others = {path: item for path, item in schema["paths"].items() if not path.startswith("/deepl/")}  # DeepL's
    assert "HTTPValidationError" not in json.dumps(schema) and "detail" not in json.dumps(others)  # own has detail
    assert set(schema["components"]["schemas"]["ErrorResponse"]["properties"]) == {"error", "field", "request_id"}
    translate_errors = schema["paths"]["/translate"]["post"]["responses"]
    assert set(translate_errors) == {"200", "400", "413", "415", "422", "500"}
    for spec, status in [(translate_errors[s], s) for s in translate_errors if s != "200"]:
        assert spec["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorResponse"}, status
        assert spec["description"], status
    for path, operations in guarded["paths"].items():
        if path.startswith(("/libretranslate/", "/deepl/")):  # APIs that read their own keys: 403 when wrong
            assert not path.endswith("/translate") or "403" in operations["post"]["responses"], path
            continue
        for operation in operations.values():
            assert operation["responses"]["401"]["content"]["application/json"]["schema"]["$ref"].endswith(
                "/ErrorResponse"), path
    assert "401" not in json.dumps([op["responses"] for ops in schema["paths"].values() for op in ops.values()])


SEND_JSON = 'send a JSON object such as {"text": "..."} with Content-Type: application/json.'
OPTIONS = ("text, num_beams, max_new_tokens, length_penalty, no_repeat_ngram_size, n_best, keep_duplicates, "
           "return_scores, "
           "return_alignments, alignment_layer, alignment_head, split_sentences, glossary, source, target, model")
BEAMS_1_TO_6 = "send a whole number from 1 to 6, or null for the model's default."
PENALTY_HINT = "send a finite number from -10 to 10, or null for the model's default."
SURROGATE = "is not text; send valid Unicode (a surrogate pair is fine, half of one is not)."
# each bad request: (body, status, field, the whole error message)
BAD_INPUTS = {
    "malformed JSON": (b'{"text": "x"', 400, "body", f"body: malformed JSON (Expecting ',' delimiter); {SEND_JSON}"),
    "not an object": ([SAMPLE], 422, "body", f"body: must be a JSON object, not a list; {SEND_JSON}"),
    "wrong type": ({"text": 5}, 422, "text", "text: must be a string or a list of strings (got a number)."),
    "wrong item type": ({"text": [SAMPLE, 5]}, 422, "text[1]",
                        "text[1]: Input should be a valid string (got 5); send a string."),
    "wrong option type": ({"text": SAMPLE, "num_beams": "3"}, 422, "num_beams",
                          f'num_beams: Input should be a valid integer (got "3"); {BEAMS_1_TO_6}'),
    "unknown option": ({"text": SAMPLE, "beam": 3}, 422, "beam", f"beam: unknown option; the options are {OPTIONS}."),
    "missing text": ({"num_beams": 2}, 422, "text", "text: Field required; send a string or a list of strings."),
    "empty text": ({"text": "  "}, 422, "text", "text: the text is empty; send some words to translate."),
    "empty item": ({"text": [SAMPLE, ""]}, 422, "text[1]", "text[1]: the text is empty; send some words to translate."),
    "no texts": ({"text": []}, 422, "text", "text: give at least one text."),
    "too many texts": ({"text": [SAMPLE] * 9}, 422, "text",
                       "text: 9 texts exceed the limit of 8 per request (--max-texts); send them in several requests."),
    "text over the source limit": ({"text": SAMPLE * 5}, 422, "text", "text: {} source tokens exceed the limit of 24 "
                                   "(--max-source-tokens); split the text."),  # {}: the tokenizer's count
    "num_beams beyond the limit": ({"text": SAMPLE, "num_beams": 7}, 422, "num_beams",
                                   f"num_beams: Input should be less than or equal to 6 (got 7); {BEAMS_1_TO_6}"),
    "num_beams below 1": ({"text": SAMPLE, "num_beams": 0}, 422, "num_beams",
                          f"num_beams: Input should be greater than or equal to 1 (got 0); {BEAMS_1_TO_6}"),
    "n_best beyond the beams": ({"text": SAMPLE, "num_beams": 2, "n_best": 3}, 422, "n_best",
                                "n_best: must be between 1 and the beam size (2), got 3; raise num_beams."),
    "max_new_tokens beyond the positions": ({"text": SAMPLE, "max_new_tokens": 64}, 422, "max_new_tokens",
                                            "max_new_tokens: Input should be less than or equal to 63 (got 64); send "
                                            "a whole number from 1 to 63, or null for the model's default."),
    "oversized body": ({"text": [SAMPLE] * 300}, 413, "body",
                       "body: 7510 bytes exceed the limit of 4000 (--max-body-bytes)."),
    # numbers: finite and within the documented range, of the right type
    "length_penalty overflowing": ({"text": SAMPLE, "num_beams": 2, "length_penalty": 1e308}, 422, "length_penalty",
                                   f"length_penalty: Input should be less than or equal to 10 (got 1e+308); "
                                   f"{PENALTY_HINT}"),
    "length_penalty NaN": (b'{"text": "x", "num_beams": 2, "length_penalty": NaN}', 422, "length_penalty",
                           f"length_penalty: Input should be a finite number (got NaN); {PENALTY_HINT}"),
    "length_penalty infinite": (b'{"text": "x", "num_beams": 2, "length_penalty": -Infinity}', 422,
                                "length_penalty",
                                f"length_penalty: Input should be a finite number (got -Infinity); {PENALTY_HINT}"),
    "length_penalty as a string": ({"text": SAMPLE, "length_penalty": "NaN"}, 422, "length_penalty",
                                   f'length_penalty: Input should be a valid number (got "NaN"); {PENALTY_HINT}'),
    "num_beams a float": ({"text": SAMPLE, "num_beams": 2.0}, 422, "num_beams",
                          f"num_beams: Input should be a valid integer (got 2.0); {BEAMS_1_TO_6}"),
    "num_beams a boolean": ({"text": SAMPLE, "num_beams": True}, 422, "num_beams",
                            f"num_beams: Input should be a valid integer (got true); {BEAMS_1_TO_6}"),
    "num_beams huge": (b'{"text": "x", "num_beams": 1' + b"0" * 400 + b"}", 422, "num_beams",
                       f"num_beams: Input should be less than or equal to 6 (got 1{'0' * 56}...); {BEAMS_1_TO_6}"),
    "return_scores a string": ({"text": SAMPLE, "return_scores": "yes"}, 422, "return_scores",
                               'return_scores: Input should be a valid boolean (got "yes"); send true or false.'),
    # texts that are not Unicode: JSON escapes of half a surrogate pair, and the same as raw (CESU-8) bytes
    "lone surrogate": (b'{"text": "ab\\ud800c"}', 422, "text",
                       f"text: a lone surrogate (U+D800) at character 2 {SURROGATE}"),
    "lone surrogate in a list": (b'{"text": ["x", "\\udfff"]}', 422, "text[1]",
                                 f"text[1]: a lone surrogate (U+DFFF) at character 0 {SURROGATE}"),
    "lone surrogate as bytes": (b'{"text": "a\xed\xa0\x80"}', 422, "text",
                                f"text: a lone surrogate (U+D800) at character 1 {SURROGATE}"),
    "lone surrogate in a key": (b'{"text": "x", "\\ud800": 1}', 422, "body",
                                f'body: the option name "\\ud800" is not valid Unicode (a lone surrogate); the options '
                                f"are {OPTIONS}."),
    # bodies that are not a JSON object
    "empty body": (b"", 400, "body", f"body: the body is empty; {SEND_JSON}"),
    "JSON null": (b"null", 422, "body", f"body: must be a JSON object, not null; {SEND_JSON}"),
    "not UTF-8": ('{"text": "caf\xe9"}'.encode("latin-1"), 400, "body",
                  f"body: is not UTF-8 (byte 0xe9 at offset 13); the body must be UTF-8 JSON: {SEND_JSON}"),
    "nested too deeply": (b"[" * 1_500 + b"]" * 1_500, 400, "body",
                          f"body: JSON nested 1500 deep, over the limit of 32; {SEND_JSON}"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_a_one_line_error_and_the_server_goes_on(case, transformer_server) -> None:
    body, status, field, message = BAD_INPUTS[case]
    if case == "text over the source limit":
        tokenizer = transformer_server.server.config.app.app.state.models.pick().service.tokenizer
        message = message.format(len(tokenizer(SAMPLE * 5)["input_ids"]))
    raw = body if isinstance(body, bytes) else None
    got, error, headers = request(f"{transformer_server.url}/translate", None if raw else body, method="POST",
                                  raw=raw, headers={"Content-Type": "application/json"})
    assert got == status, error
    assert set(error) == {"error", "field", "request_id"}
    assert error["field"] == field and error["error"] == message  # one line that names the field first
    ErrorResponse.model_validate(error, strict=True)
    documented = request(f"{transformer_server.url}/openapi.json")[1]["paths"]["/translate"]["post"]["responses"]
    assert str(status) in documented
    assert headers["x-request-id"] == error["request_id"]
    ok, answer, _ = request(f"{transformer_server.url}/translate", {"text": SAMPLE})
    assert ok == 200 and answer["translations"][0]["text"]


def test_wrong_content_type_chunked_oversize_and_unknown_routes(transformer_server) -> None:
    status, error, _ = request(f"{transformer_server.url}/translate", raw=b'{"text": "a"}', method="POST",
                               headers={"Content-Type": "text/plain"})
    assert (status, error["error"]) == (415, f"body: Content-Type is text/plain; {SEND_JSON}")
    host, port = transformer_server.url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    connection.request("POST", "/translate", body=iter([b'{"text": "', b"x" * 5000, b'"}']),
                       headers={"Content-Type": "application/json"}, encode_chunked=True)  # no Content-Length
    response = connection.getresponse()
    assert response.status == 413 and json.loads(response.read())["field"] == "body"
    connection.close()
    assert request(f"{transformer_server.url}/nowhere")[0] == 404
    assert request(f"{transformer_server.url}/translate")[0] == 405
    assert request(f"{transformer_server.url}/health")[0] == 200


def test_internal_error_is_a_500_with_the_request_id_in_the_log(folders, caplog) -> None:
    service = build_service(str(folders["transformer"]))
    decode = service.decode
    failing = {"on": True}

    def sometimes_broken(jobs):
        if failing["on"]:
            raise RuntimeError("boom in the model")
        return decode(jobs)

    service.decode = sometimes_broken
    with Server(create_app(service)) as server, caplog.at_level("ERROR", logger="encdec.serve"):
        status, error, _ = request(f"{server.url}/translate", {"text": SAMPLE}, timeout=30)
        failing["on"] = False
        ok, answer, _ = request(f"{server.url}/translate", {"text": SAMPLE})
    assert status == 500 and error["request_id"] and "boom" not in error["error"]
    assert any(error["request_id"] in record.getMessage() for record in caplog.records)
    assert any("boom in the model" in (record.exc_text or "") for record in caplog.records)
    assert ok == 200 and answer["translations"][0]["text"]


def test_api_key_guards_every_endpoint(folders) -> None:
    key = "s3cret-key"
    basic = base64.b64encode(f"user:{key}".encode()).decode()
    with serve_app(folders["transformer"], api_key=key) as server:
        for path in ("/", "/health", "/info", "/translate"):
            status, error, headers = request(f"{server.url}{path}", {"text": SAMPLE} if path == "/translate" else None)
            assert (status, error["error"]) == (401, "a valid API key is required: send `Authorization: Bearer KEY` or "
                                                     "`X-API-Key: KEY`.")
            assert headers["www-authenticate"] == 'Basic realm="encdec"'
        assert request(f"{server.url}/info", headers={"Authorization": "Bearer wrong"})[0] == 401
        for header in ({"Authorization": f"Bearer {key}"}, {"X-API-Key": key}, {"Authorization": f"Basic {basic}"}):
            assert request(f"{server.url}/translate", {"text": SAMPLE}, headers=header)[0] == 200
            assert request(f"{server.url}/", headers=header)[0] == 200


def test_binding_beyond_loopback_needs_a_key(folders, capsys, monkeypatch) -> None:
    check_bind("127.0.0.1", None)
    check_bind("localhost", None)
    check_bind("::1", None)
    check_bind("0.0.0.0", "key")
    refusal = ("Binding to {} makes the server reachable from other machines: give an API key with --api-key or the "
               "ENCDEC_API_KEY environment variable, or keys with --api-keys-db (or bind to 127.0.0.1).")
    for host in ("0.0.0.0", "192.168.1.5", "example.org"):
        with pytest.raises(EncdecError, match=f"^{re.escape(refusal.format(host))}$"):
            check_bind(host, None)
    monkeypatch.delenv("ENCDEC_API_KEY", raising=False)
    assert main(["serve", "--model", str(folders["transformer"]), "--host", "0.0.0.0"]) == 2
    assert capsys.readouterr().err == f"encdec serve: error: {refusal.format('0.0.0.0')}\n"


def test_a_port_in_use_is_refused_in_one_line_before_the_models_load(folders, capsys) -> None:
    """`encdec serve --port N` on a port another socket listens on: one line that names the port and suggests
    --port 0, before any model loads (no model line is printed); a malformed --trusted-proxies is refused too."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status = main(["serve", "--model", str(folders["transformer"]), "--port", str(port)])
    out = capsys.readouterr()
    assert (status, out.out) == (2, "")
    assert out.err == (f"encdec serve: error: --port {port}: already in use on 127.0.0.1; stop what listens there, "
                       "or give another port (--port 0 takes a free one).\n")
    with pytest.raises(SystemExit):
        main(["serve", "--model", str(folders["transformer"]), "--trusted-proxies", "10.0.0.0/8,proxy"])
    assert "--trusted-proxies: 'proxy' is not an IP address or network" in capsys.readouterr().err


def test_limits_are_checked(folders) -> None:
    engine, tokenizer = load_engine(folders["transformer"])
    for limits, message in [
        ({"max_batch_size": 0}, "`max_batch_size` (--max-batch-size) must be a whole number >= 1, got 0."),
        ({"max_beams": 2.5}, "`max_beams` (--max-beams) must be a whole number >= 1, got 2.5."),
        ({"max_wait_ms": -1}, "`max_wait_ms` (--max-wait-ms) must be >= 0, got -1."),
    ]:
        with pytest.raises(EncdecError, match=f"^{re.escape(message)}$"):
            ServeLimits(**limits)
    with pytest.raises(EncdecError, match=re.escape(
            "--max-source-tokens 100 exceeds what the model reads (64 tokens, its `max_position_embeddings`); lower "
            "it.")):
        TranslationService(engine, tokenizer, ServeLimits(max_source_tokens=100))
    with pytest.raises(EncdecError, match=re.escape(
            "--max-new-tokens 64 exceeds what the model can generate (63, its `max_position_embeddings` - 1); lower "
            "it.")):
        TranslationService(engine, tokenizer, ServeLimits(max_new_tokens=64))
    service = TranslationService(engine, tokenizer)
    assert service.limits.max_source_tokens == 64 and service.limits.max_new_tokens == 63
    # the service checks what the schema checks, for callers without the HTTP layer, and what it cannot see
    for penalty in (float("nan"), float("inf"), 1e308, -10.5):
        with pytest.raises(RequestError, match="length_penalty: must be a finite number from -10 to 10"):
            service.jobs(SAMPLE, num_beams=2, length_penalty=penalty)
    assert len(service.jobs(SAMPLE, num_beams=2, length_penalty=-10.0)) == 1
    with pytest.raises(RequestError, match=r"lone surrogate \(U\+DC00\) at character 1") as refused:
        service.jobs([SAMPLE, "a\udc00"])
    assert refused.value.field == "text[1]"


def test_ctranslate2_engine_serves_scores_and_refuses_alignments(folders, sources, tmp_path) -> None:
    pytest.importorskip("ctranslate2")
    exported = export_ctranslate2(folders["transformer"], tmp_path / "ct2")
    engine, tokenizer = load_engine(folders["transformer"])
    expected = translate(engine, tokenizer, sources[:6], num_beams=2)
    with Server(create_app(build_service(str(exported), engine="ctranslate2"))) as server:
        status, body, _ = request(f"{server.url}/translate", {"text": sources[:6], "num_beams": 2,
                                                               "return_scores": True})
        refused, error, _ = request(f"{server.url}/translate", {"text": SAMPLE, "return_alignments": True})
        _, info, _ = request(f"{server.url}/info")
    assert status == 200 and [a["text"] for a in body["translations"]] == expected
    for text, answer in zip(sources[:6], body["translations"], strict=True):
        assert answer["score"] == pytest.approx(teacher_forced_log_prob(engine.model, tokenizer, text, 2), abs=1e-3)
    assert (refused, error["field"], error["error"]) == (422, "return_alignments", "return_alignments: alignments "
                                                         "are not available: the ctranslate2 engine returns none; "
                                                         "leave it out.")
    assert info["engine"] == "ctranslate2" and info["alignments"] is False


# -- the real command, in its own process ---------------------------------------------------------------------------

class ServeProcess:
    """``encdec serve --port 0`` as a subprocess. A thread reads its output (stdout and stderr) into a queue, so that
    no read blocks the test; its URL, with the port the system gave, comes from its start-up line. With ``hold``,
    its batchers start held (``HOLD_ENV``) until ``release()``."""

    STARTED = r"^encdec serve: \d+ model\(s\) loaded, [\d,]+ MiB resident; on (http://127\.0\.0\.1:[1-9]\d*) - page " \
              r"at /, API docs at /docs$"

    def __init__(self, *args: str, hold: bool = False) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
        env.pop("ENCDEC_API_KEY", None)
        env.pop(HOLD_ENV, None)
        env.update({HOLD_ENV: "1"} if hold else {})
        self.process = subprocess.Popen([sys.executable, "-m", "encdec", "serve", "--port", "0", "--log-level",
                                         "warning", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        stdin=subprocess.PIPE if hold else subprocess.DEVNULL, text=True)
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []  # every line so far
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def read(self) -> None:
        for line in self.process.stdout:
            self.output.append(line)
            self.lines.put(line)
        self.lines.put(None)  # the end of the output

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match:
        """The next line of output that matches ``pattern``; fails when the output ends or ``timeout`` seconds go
        by without one."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} in {timeout} s:\n{''.join(self.output)}") from None
            assert line is not None, f"encdec serve ended without a line matching {pattern!r}:\n{''.join(self.output)}"
            if found := re.search(pattern, line):
                return found

    def release(self) -> None:
        """Let the held batchers run (a line on the command's stdin: ``encdec.serve.held_batches``)."""
        self.process.stdin.write("\n")
        self.process.stdin.flush()

    def finish(self, timeout: float = 60) -> tuple[int, str]:
        """(exit status, whole output) once the process has ended."""
        status = self.process.wait(timeout=timeout)
        self.reader.join(timeout=timeout)
        assert not self.reader.is_alive()
        return status, "".join(self.output)

    def __enter__(self) -> ServeProcess:
        line = self.wait_for(r"model\(s\) loaded").string  # printed once bound: no polling of /health
        started = re.fullmatch(self.STARTED, line.rstrip("\n"))
        assert started, f"the start-up line names no bound port: {line!r}"
        self.url = started[1]
        return self

    def __exit__(self, *exc) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=30)
        self.reader.join(timeout=30)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


def test_load_32_clients_20_requests_each_equal_offline_translate(folders, sources, tmp_path) -> None:
    """640 requests from 32 concurrent clients: every one answered, each equal to `encdec translate` of its text
    (each request has a timeout; a hang fails there)."""
    rng = random.Random(0)
    texts = [rng.choice(sources) for _ in range(32 * 20)]
    source_file = tmp_path / "sources.txt"
    source_file.write_text("\n".join(sorted(set(texts))) + "\n")
    assert main(["translate", "--model", str(folders["transformer"]), "--input", str(source_file),
                 "--output", str(tmp_path / "out.txt"), "--num-beams", "2"]) == 0
    offline = dict(zip(source_file.read_text().splitlines(), (tmp_path / "out.txt").read_text().splitlines(),
                       strict=True))
    with ServeProcess("--model", str(folders["transformer"]), "--max-wait-ms", "5") as server:
        def client(k: int) -> list[tuple[str, int, str]]:
            got = []
            for text in texts[20 * k:20 * k + 20]:
                status, body, _ = request(f"{server.url}/translate", {"text": text, "num_beams": 2}, timeout=120)
                got.append((text, status, body["translations"][0]["text"] if status == 200 else body))
            return got

        with ThreadPoolExecutor(32) as pool:
            results = [item for chunk in pool.map(client, range(32), timeout=600) for item in chunk]
    assert len(results) == 640
    assert all(status == 200 for _, status, _ in results)
    assert all(answer == offline[text] for text, _, answer in results)


def test_sigterm_finishes_requests_in_flight_and_takes_no_more(folders, sources) -> None:
    """Twelve requests held in the batcher (the test hook), then SIGTERM: the server closes its socket at once (a new
    connection is refused) and says so, waits for the requests in flight (uvicorn's log says it does), which are
    then released and each gets its full answer, and the process ends by the signal once they have (uvicorn
    re-raises it after its graceful stop)."""
    engine, tokenizer = load_engine(folders["transformer"])
    expected = translate(engine, tokenizer, sources[:12], num_beams=3)
    with ServeProcess("--model", str(folders["transformer"]), "--log-level", "info", hold=True) as server:
        with ThreadPoolExecutor(12) as pool:
            futures = [pool.submit(request, f"{server.url}/translate", {"text": text, "num_beams": 3}, timeout=120)
                       for text in sources[:12]]
            server.wait_for(r"^encdec serve: test hold: 12 job\(s\) held by the batcher of transformer$")
            assert not any(future.done() for future in futures)  # all twelve in flight at the signal
            server.process.send_signal(signal.SIGTERM)
            server.wait_for(r"^encdec serve: stopping: no new connections; finishing the requests in flight$")
            with pytest.raises(urllib.error.URLError) as refused:
                request(f"{server.url}/health", timeout=30)
            assert isinstance(refused.value.reason, ConnectionRefusedError)
            server.wait_for(r"Waiting for connections to close")  # the graceful wait has begun: no cut-off
            assert server.process.poll() is None and not any(future.done() for future in futures)
            server.release()
            answers = [future.result(timeout=120) for future in futures]
        status, output = server.finish()
    assert [status for status, _, _ in answers] == [200] * 12, output
    assert [body["translations"][0]["text"] for _, body, _ in answers] == expected
    assert status == -signal.SIGTERM, output
    assert "Traceback" not in output and "ERROR" not in output, output


def test_the_command_serves_int8_models_of_both_engines_on_the_port_it_names(folders, sources, tmp_path) -> None:
    """`encdec serve --port 0 --quantize int8 --model de-en=DIR --model en-de=EXPORT,engine=ctranslate2`: the
    start-up line names the port the system gave (the test reaches the server there); /info says each engine
    computes in int8, and each model answers as its engine does offline in int8."""
    pytest.importorskip("ctranslate2")
    exported = export_ctranslate2(folders["transformer"], tmp_path / "ct2")
    texts = sources[:3]
    offline = {pair: [translate(*load_engine(str(path), engine, quantize="int8"), [text])[0] for text in texts]
               for pair, path, engine in (("de-en", folders["transformer"], "torch"),
                                          ("en-de", exported, "ctranslate2"))}
    with ServeProcess("--quantize", "int8", "--model", f"de-en={folders['transformer']}", "--model",
                      f"en-de={exported},engine=ctranslate2") as server:
        _, info, _ = request(f"{server.url}/info", timeout=60)
        answers = {pair: [request(f"{server.url}/translate", {"text": text, "model": pair}, timeout=60)[1]
                          for text in texts] for pair in offline}
        server.process.terminate()
        server.finish()
    assert [(m["name"], m["engine"], m["compute_type"]) for m in info["models"]] == [
        ("de-en", "torch", "int8_float32"), ("en-de", "ctranslate2", "int8_float32")]
    assert answers == {pair: [{"translations": [{"text": text}]} for text in got] for pair, got in offline.items()}


# -- the page, in a real browser ------------------------------------------------------------------------------------

def chromium_driver():
    """Headless Chromium through Selenium (Debian's `chromium` and `chromium-driver`), or a skip. Host names other
    than 127.0.0.1 resolve to nothing (an air-gapped machine), and the network log is kept (``page_requests``)."""
    webdriver = pytest.importorskip("selenium.webdriver")
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        message = "Chromium is absent: apt-get install chromium chromium-driver (.ci/run installs them)"
        if os.environ.get("CI") == "true":  # CI installs it: a skip there would hide a broken page
            pytest.fail(message)
        pytest.skip(message)
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,1250",
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=driver_path))


def translated_on_page(driver, text: str) -> list[str]:
    """Types ``text`` into the server's page, presses Translate and returns the lines shown, once they or an error
    come; asserts that no error came."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.find_element(By.ID, "source").send_keys(text)
    driver.find_element(By.ID, "translate").click()
    WebDriverWait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#translation .line")
                                    or d.find_element(By.ID, "error").text)
    assert driver.find_element(By.ID, "error").text == ""
    return [line.get_attribute("textContent") for line in driver.find_elements(By.CSS_SELECTOR, "#translation .line")]


def page_requests(driver) -> list[tuple[str, int | None]]:
    """(URL, HTTP status or None) of every request the pages made since the last call (Chrome's network log)."""
    sent, statuses = [], {}
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        if message["method"] == "Network.requestWillBeSent":
            sent.append((params["requestId"], params["request"]["url"]))
        elif message["method"] == "Network.responseReceived":
            statuses[params["requestId"]] = params["response"]["status"]
    return [(url, statuses.get(request_id)) for request_id, url in sent]


def assert_local_and_found(requests: list[tuple[str, int | None]], server_url: str) -> None:
    """Every request went to the server (or was inline data), and none was answered 4xx or 5xx."""
    assert requests
    for url, status in requests:
        assert url.startswith((f"{server_url}/", "data:", "blob:")), url
        assert status is None or status < 400, (url, status)


def cell_weights(driver) -> list[float]:
    from selenium.webdriver.common.by import By

    return [float(c.get_attribute("data-weight")) for c in driver.find_elements(By.CSS_SELECTOR, "#heatmap td.cell")]


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_page_translates_and_draws_the_heatmap_in_chromium(family, folders, sources, tmp_path) -> None:
    """Four lines (one empty) give four output lines; the beam box takes its range and default from /info; the
    heatmap fills most of its card and follows the line clicked; nothing is fetched from elsewhere, nothing 404s."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    folder = shutil.copytree(folders[family], tmp_path / family)
    generation = json.loads((folder / "generation_config.json").read_text())
    (folder / "generation_config.json").write_text(json.dumps({**generation, "num_beams": 3}))
    write_model_card(folder, dataset_name="dates", metrics={"bleu": 98.5, "chrf": 99.1, "split": "test"})
    texts = [SAMPLE, sources[0], sources[1]]  # the page sends them in two requests: max_texts is 2
    driver = chromium_driver()
    try:
        with serve_app(folder, max_beams=5, max_texts=2) as server:
            answers = [request(f"{server.url}/translate", {"text": text, "return_alignments": True})[1][
                "translations"][0] for text in texts]
            driver.get(f"{server.url}/")
            wait = WebDriverWait(driver, 30)
            wait.until(lambda d: family in d.find_element(By.ID, "model").text)
            header = driver.find_element(By.ID, "model").text
            assert header.count("dates") == 1 and "BLEU 98.5, chrF 99.1 on dates" in header, header  # named once
            beams = driver.find_element(By.ID, "beams")
            assert [beams.get_attribute(a) for a in ("min", "max", "value")] == ["1", "5", "3"]
            driver.find_element(By.ID, "source").send_keys(f"{texts[0]}\n\n{texts[1]}\n{texts[2]}")
            beams.clear()
            beams.send_keys("9")  # beyond max_beams: the page says so instead of asking the server
            driver.find_element(By.ID, "translate").click()
            assert driver.find_element(By.ID, "error").text == "Beam size: a whole number from 1 to 5."
            beams.clear()
            beams.send_keys("3")
            driver.find_element(By.ID, "translate").click()
            wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#translation .line")) == 4)
            lines = driver.find_elements(By.CSS_SELECTOR, "#translation .line")
            assert [line.get_attribute("textContent") for line in lines] == [
                answers[0]["text"], "", answers[1]["text"], answers[2]["text"]]
            assert "line 1: log-probability" in driver.find_element(By.ID, "scores").text
            weights = answers[0]["alignment"]["weights"]
            assert cell_weights(driver) == pytest.approx([w for row in weights for w in row], abs=1e-4)
            width = driver.execute_script("return [heatmap.getBoundingClientRect().width, "
                                          "document.getElementById('alignment').getBoundingClientRect().width]")
            assert width[0] >= 0.6 * width[1], width  # scaled to the card
            lines[2].click()  # the second translation's alignment
            second = [w for row in answers[1]["alignment"]["weights"] for w in row]
            wait.until(lambda d: cell_weights(d) == pytest.approx(second, abs=1e-4))
            assert "line 3: log-probability" in driver.find_element(By.ID, "scores").text
            cells = driver.find_elements(By.CSS_SELECTOR, "#heatmap td.cell")
            ActionChains(driver).move_to_element(cells[0]).perform()
            wait.until(lambda d: ":" in d.find_element(By.ID, "readout").text)
            assert f"{second[0]:.3f}" in driver.find_element(By.ID, "readout").text
            assert driver.find_element(By.ID, "error").text == ""
            shot = tmp_path / f"serve-{family}.png"
            assert driver.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
            if os.environ.get("ENCDEC_SCREENSHOT_DIR"):  # how the README's screenshot is made
                shutil.copy(shot, Path(os.environ["ENCDEC_SCREENSHOT_DIR"]) / shot.name)
            assert_local_and_found(page_requests(driver), server.url)
    finally:
        driver.quit()


def test_page_clears_the_last_result_when_a_request_fails_in_chromium(folders, sources) -> None:
    """One translation shows its line, scores and heatmap; the next request, refused by the server (a text over
    --max-source-tokens: 422), shows the server's error and nothing of the last answer; a request that reaches no
    server (fetch rejects) does the same; a good request afterwards shows its answer with no error left."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    def result(driver) -> dict:
        return {"lines": [line.get_attribute("textContent")
                          for line in driver.find_elements(By.CSS_SELECTOR, "#translation .line")],
                "scores": driver.find_element(By.ID, "scores").text, "cells": len(cell_weights(driver)),
                "heatmap rows": len(driver.find_elements(By.CSS_SELECTOR, "#heatmap tr")),
                "readout": driver.find_element(By.ID, "readout").text}

    nothing = {"lines": [], "scores": "", "cells": 0, "heatmap rows": 0, "readout": ""}
    driver = chromium_driver()
    try:
        with serve_app(folders["transformer"], max_source_tokens=24) as server:
            first = request(f"{server.url}/translate", {"text": sources[0]})[1]["translations"][0]["text"]
            too_long, refusal, _ = request(f"{server.url}/translate", {"text": [SAMPLE * 5]})  # as the page sends
            assert too_long == 422 and "(--max-source-tokens)" in refusal["error"]
            driver.get(f"{server.url}/")
            wait = WebDriverWait(driver, 30)
            wait.until(lambda d: "transformer" in d.find_element(By.ID, "model").text)
            source = driver.find_element(By.ID, "source")

            def submit(text: str) -> None:
                source.clear()
                source.send_keys(text)
                driver.find_element(By.ID, "translate").click()
                wait.until(lambda d: d.find_element(By.ID, "translate").is_enabled())  # the request has ended

            submit(sources[0])
            wait.until(lambda d: result(d)["lines"] == [first])
            shown = result(driver)
            assert "log-probability" in shown["scores"] and shown["cells"] > 0, shown
            submit(SAMPLE * 5)  # refused: over the server's source limit
            wait.until(lambda d: d.find_element(By.ID, "error").text)
            assert driver.find_element(By.ID, "error").text == refusal["error"]
            assert result(driver) == nothing
            submit(sources[0])
            wait.until(lambda d: result(d)["lines"] == [first])
            assert driver.find_element(By.ID, "error").text == ""
            # the network fails: fetch rejects, as it does when the server is gone
            driver.execute_script("window.fetch = () => Promise.reject(new TypeError('Failed to fetch'));")
            submit(sources[1])
            wait.until(lambda d: d.find_element(By.ID, "error").text)
            assert driver.find_element(By.ID, "error").text == "Could not reach the server: Failed to fetch"
            assert result(driver) == nothing
    finally:
        driver.quit()


def test_api_docs_render_offline_in_chromium(folders) -> None:
    """/docs (Swagger UI) shows the operations with its script and styles from this server: the browser resolves
    no other host, as on an air-gapped machine. ReDoc, whose page loads a logo from a CDN, is off."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = chromium_driver()
    try:
        with serve_app(folders["transformer"]) as server:
            driver.get(f"{server.url}/docs")
            wait = WebDriverWait(driver, 30)
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, '.opblock-summary-path[data-path="/translate"]'))
            operations = driver.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")
            assert {e.get_attribute("data-path") for e in operations} == {"/translate", "/health", "/info", "/", *(
            f"/libretranslate/{name}" for name in ("translate", "detect", "languages", "frontend/settings", "health",
                                                   "suggest", "spec", "translate_file",
                                                   "download_file/{file_id}/{name}")), *(
            f"/deepl/{name}" for name in ("v2/translate", "v2/languages", "v2/usage", "v2/glossary-language-pairs",
                                          "v2/glossaries", "v2/glossaries/{glossary_id}",
                                          "v2/glossaries/{glossary_id}/entries", "v3/glossaries",
                                          "v3/glossaries/{glossary_id}", "v3/glossaries/{glossary_id}/entries",
                                          "v3/glossaries/{glossary_id}/dictionaries", "v2/document",
                                          "v2/document/{document_id}", "v2/document/{document_id}/result"))}
            docs = page_requests(driver)
            redoc, error, _ = request(f"{server.url}/redoc")
    finally:
        driver.quit()
    assert any(url.endswith("/swagger-ui-bundle.js") for url, _ in docs)
    assert_local_and_found(docs, server.url)
    assert redoc == 404 and error["field"] is None and error["error"] == "no endpoint /redoc; see /docs for the API."


def test_page_says_the_ctranslate2_engine_gives_no_alignment(folders, tmp_path) -> None:
    pytest.importorskip("ctranslate2")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    exported = export_ctranslate2(folders["transformer"], tmp_path / "ct2")
    driver = chromium_driver()
    try:
        with Server(create_app(build_service(str(exported), engine="ctranslate2"))) as server:
            driver.get(f"{server.url}/")
            wait = WebDriverWait(driver, 30)
            wait.until(lambda d: "engine: ctranslate2" in d.find_element(By.ID, "model").text)
            assert "CTranslate2 engine gives no attention" in driver.find_element(By.ID, "readout").text
            driver.find_element(By.ID, "source").send_keys(SAMPLE)
            driver.find_element(By.ID, "translate").click()
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#translation .line"))
            assert "log-probability" in driver.find_element(By.ID, "scores").text
            assert "CTranslate2 engine gives no attention" in driver.find_element(By.ID, "readout").text
            assert not driver.find_elements(By.CSS_SELECTOR, "#heatmap td.cell")
            assert driver.find_element(By.ID, "error").text == ""
            # the other branch, a model without attention, from /info's architecture
            reason = "return noAlignmentReason({engine: 'torch', architecture: {attention: 'none'}})"
            assert "This model has no attention" in driver.execute_script(reason)
    finally:
        driver.quit()
