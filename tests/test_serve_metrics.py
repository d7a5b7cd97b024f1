"""`encdec serve --metrics` (encdec.serve.metrics): `GET /metrics` in Prometheus' text format, read back with
prometheus_client's own parser; the counters move by what was asked (requests by route and status, latency, batch
sizes against the batcher's record, texts and source tokens against the tokenizer, the queue depth); off by default;
behind the API key; one registry per app. (tests/test_metrics.py is about BLEU and chrF.)"""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from encdec.serve.server import create_app, load_models
from test_serve import Server, only_batcher, request
from tiny_model_folders import build_model_folders

LT = "/libretranslate"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_model_folders(tmp_path_factory.mktemp("metrics"))["transformer"]


def start(folder, api_key: str | None = None, metrics: bool = True) -> Server:
    return Server(create_app(load_models([f"de-en={folder}"]), api_key=api_key, metrics=metrics))


def scrape(url: str, headers: dict | None = None) -> Samples:
    """Every sample of ``GET /metrics``, by (name, labels), as Prometheus would read it."""
    status, text, got = request(f"{url}/metrics", headers=headers)
    assert status == 200 and got["content-type"].startswith("text/plain"), (status, text)
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


def test_the_counters_move_by_what_was_asked(folder) -> None:
    texts = [["3 Mar 2021"], ["4 Mar 2021", "5 April 2020"], ["6 May 2019", "7 June 2018", "8 July 2017"]]
    with start(folder) as server:
        batcher = only_batcher(server)
        tokenizer = server.server.config.app.app.state.models.pick().service.tokenizer
        before, batches_before = scrape(server.url), len(batcher.record)
        answers = [request(f"{server.url}/translate", {"text": batch})[0] for batch in texts]
        bad = request(f"{server.url}/translate", {"text": ""})[0]
        lost = request(f"{server.url}/nowhere")[0]
        libre = [request(f"{server.url}{LT}/translate", {"q": "9 Aug 2016", "source": "de", "target": target})[0]
                 for target in ("en", "xx")]
        after, sizes = scrape(server.url), batcher.batches[batches_before:]
    assert (answers, bad, lost, libre) == ([200] * 3, 422, 404, [200, 400])
    requests = "encdec_http_requests_total"
    assert moved(before, after, requests, route="/translate", method="POST", status="200") == 3
    assert moved(before, after, requests, route="/translate", method="POST", status="422") == 1
    assert moved(before, after, requests, route="other", method="GET", status="404") == 1  # no route: bounded
    assert moved(before, after, requests, route=f"{LT}/translate", method="POST", status="200") == 1
    assert moved(before, after, requests, route=f"{LT}/translate", method="POST", status="400") == 1
    assert moved(before, after, requests, route="/metrics", method="GET", status="200") == 1  # the first scrape
    assert moved(before, after, "encdec_http_request_duration_seconds_count", route="/translate") == 4
    assert moved(before, after, "encdec_batch_size_count", model="de-en") == len(sizes)
    assert moved(before, after, "encdec_batch_size_sum", model="de-en") == sum(sizes) == 7
    assert moved(before, after, "encdec_texts_translated_total", model="de-en") == 7
    translated = [text for batch in texts for text in batch] + ["9 Aug 2016"]
    assert moved(before, after, "encdec_source_tokens_translated_total", model="de-en") == \
        sum(len(ids) for ids in tokenizer(translated)["input_ids"])
    assert after[("encdec_queue_depth", (("model", "de-en"),))] == 0


def test_metrics_are_off_by_default_and_behind_the_key(folder) -> None:
    with start(folder, metrics=False) as server:
        off = request(f"{server.url}/metrics")[0]
    with start(folder, api_key="sesame") as server:
        keyless = request(f"{server.url}/metrics")[0]
        keyed = scrape(server.url, {"X-API-Key": "sesame"})
    assert (off, keyless) == (404, 401)
    assert keyed[("encdec_http_requests_total", (("method", "GET"), ("route", "other"), ("status", "401")))] == 1


def test_each_app_counts_in_a_registry_of_its_own(folder) -> None:
    """Two apps with metrics in one process: no clash of names, and each counts its own requests only."""
    with start(folder) as first, start(folder) as second:
        for _ in range(3):
            assert request(f"{first.url}/health")[0] == 200
        counted = scrape(first.url), scrape(second.url)
    health = ("encdec_http_requests_total", (("method", "GET"), ("route", "/health"), ("status", "200")))
    assert counted[0][health] == 3 and counted[1].get(health, 0.0) == 0


def test_a_path_with_repeated_slashes_counts_under_its_route(folder) -> None:
    """LibreTranslate's routes take repeated slashes as one (encdec.serve.libretranslate_routes): such a request is
    counted under the route that served it, not as ``other``."""
    with start(folder) as server:
        assert request(f"{server.url}{LT}//languages")[0] == 200
        counted = scrape(server.url)
    assert counted[("encdec_http_requests_total", (("method", "GET"), ("route", f"{LT}/languages"),
                                                   ("status", "200")))] == 1
