"""``GET /metrics`` of ``encdec serve --metrics``: the server's counters in Prometheus' text format, through the
``prometheus_client`` package (in the ``serve`` extra).

What is counted: the requests answered, by route, method and status (every answer, the API key's and the body
limit's refusals included); their latency, by route (a histogram); the size of each batch decoded, the texts and the
source tokens translated, by model; and the texts each model's batcher holds (waiting or being decoded) when scraped.
Each app has a registry of its own (not prometheus_client's global one), so several servers in one process never
share or collide. Labels take bounded values only (a route is named by its template, as the router matched it; a
path that is no route is ``other``, so is an unusual method): a server that runs for months keeps a fixed number of
series.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..errors import EncdecError

try:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
except ImportError as missing:  # the CLI prints this as one line
    raise EncdecError("`encdec serve` needs prometheus_client; install the extra with "
                      "`pip install 'encdec[serve]'`.") from missing

OTHER = "other"  # the label of a path that is no route, and of an unusual method
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)  # seconds
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)  # texts


class ServerMetrics:
    """The metrics of one app, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry()
        self.requests = Counter("encdec_http_requests", "HTTP requests answered, by route, method and status",
                                ["route", "method", "status"], registry=registry)
        self.latency = Histogram("encdec_http_request_duration_seconds", "Seconds from a request to the end of its "
                                 "answer, by route", ["route"], buckets=LATENCY_BUCKETS, registry=registry)
        self.batch_size = Histogram("encdec_batch_size", "Texts in each batch a model decoded", ["model"],
                                    buckets=BATCH_BUCKETS, registry=registry)
        self.texts = Counter("encdec_texts_translated", "Texts translated (sentences, where a text is cut into them: "
                             "asked of the native API, or an API that cuts its texts)", ["model"], registry=registry)
        self.source_tokens = Counter("encdec_source_tokens_translated", "Source tokens translated, </s> included",
                                     ["model"], registry=registry)
        self.queue_depth = Gauge("encdec_queue_depth", "Texts a model's batcher holds: waiting or being decoded",
                                 ["model"], registry=registry)

    def watch_queue(self, name: str, depth: Callable[[], int]) -> None:
        """Report ``depth()`` as the queue depth of the model ``name``, read at each scrape."""
        self.queue_depth.labels(name).set_function(depth)

    def observed(self, run_batch: Callable[[list[Any]], list[Any]], name: str) -> Callable[[list[Any]], list[Any]]:
        """``run_batch`` (a service's ``decode``), counting each batch it decodes for the model ``name``."""
        size, texts, tokens = self.batch_size.labels(name), self.texts.labels(name), self.source_tokens.labels(name)

        def run(jobs: list[Any]) -> list[Any]:
            answers = run_batch(jobs)
            size.observe(len(jobs))
            texts.inc(len(jobs))
            tokens.inc(sum(len(job.source_ids) for job in jobs))
            return answers
        return run

    async def observe(self, scope: dict, receive: Any, send: Any, app: Any) -> None:
        """Run the ASGI ``app`` on one HTTP request, counting its answer and timing it."""
        started, status = time.perf_counter(), 500  # an app that fails before it answers: the server answers 500

        async def send_watched(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)
        try:
            await app(scope, receive, send_watched)
        finally:
            route = getattr(scope.get("route"), "path", None) or OTHER  # the router's match (Starlette sets it)
            method = scope.get("method", "")
            self.requests.labels(route, method if method in METHODS else OTHER, str(status)).inc()
            self.latency.labels(route).observe(time.perf_counter() - started)

    def exposition(self) -> tuple[bytes, str]:
        """The text of ``GET /metrics``, and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


__all__ = ["ServerMetrics"]
