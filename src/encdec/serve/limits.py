"""Who may use a server, and how much: API keys (the single ``--api-key``, the key database of ``--api-keys-db``),
requests a minute (``--req-limit``, or a key's own), characters a text (``--char-limit``, or a key's own), and the
refusals that say "not now" (``Overloaded``: 429 over a request limit, 503 when a model's queue is full), each with
the seconds to wait in ``Retry-After``. Plain Python: ``encdec.serve.server`` and ``encdec.serve.libretranslate``
turn these into their APIs' answers.

Requests are counted per key for a key of the database (its ``req_limit``), else per client address (``--req-limit``),
by the generic cell rate algorithm (GCRA, ITU-T I.371; a token bucket that holds one time per client): "N a minute"
lets a client that has been quiet send N requests at once, then one every 60/N seconds. A request of several texts
costs one per text (as LibreTranslate counts a list ``q``), and at most N, so that any request can pass once the
client has waited a minute.
"""

from __future__ import annotations

import hmac
import math
import threading
import time
from collections.abc import Callable

from ..errors import EncdecError
from .keys import ApiKey, KeyDatabase

WINDOW = 60.0  # seconds: limits are requests a minute
SWEEP_EVERY = 1024  # hits between two sweeps of the clients that are back to a full allowance (memory stays flat)
QUEUE_RETRY_AFTER = 1  # seconds a client waits after a full queue (503)


class Overloaded(Exception):
    """A request refused for now: ``status`` (429 or 503), ``message`` (the native API's words), ``lt_message``
    (LibreTranslate's), and ``retry_after`` seconds for the ``Retry-After`` header."""

    status = 503

    def __init__(self, message: str, lt_message: str, retry_after: int) -> None:
        super().__init__(message)
        self.message, self.lt_message, self.retry_after = message, lt_message, retry_after

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class OverLimit(Overloaded):
    """Over a request limit: 429, and LibreTranslate's "Slowdown: N per 1 minute" (``libretranslate/app.py``'s 429
    handler, around flask-limiter's description of the limit)."""

    status = 429

    def __init__(self, limit: int, wait: float, per_key: bool) -> None:
        seconds = max(1, math.ceil(wait))
        whose = "for this API key (its limit in the key database)" if per_key else "per client address (--req-limit)"
        super().__init__(f"more than {limit} requests a minute {whose}; retry after {seconds} s.",
                         f"Slowdown: {limit} per 1 minute", seconds)


class QueueFull(Overloaded):
    """A model's batcher holds as many texts as it may (``--max-queue``): 503."""

    status = 503

    def __init__(self, name: str, waiting: int, max_queue: int) -> None:
        message = (f"the server is busy: {waiting} texts wait for the model {name}, the most it queues (--max-queue "
                   f"{max_queue}); retry after {QUEUE_RETRY_AFTER} s.")
        super().__init__(message, message, QUEUE_RETRY_AFTER)


class RateLimiter:
    """At most ``limit`` requests a minute per client, by GCRA: each client has a theoretical arrival time ``tat``; a
    request of ``cost`` moves it on by ``cost`` x 60/limit seconds, and passes if the new ``tat`` is at most a minute
    ahead of now. Clients whose ``tat`` has passed are forgotten every ``SWEEP_EVERY`` hits."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.tats: dict[object, float] = {}
        self.hits = 0
        self.lock = threading.Lock()

    def hit(self, client: object, limit: int, cost: int = 1) -> float | None:
        """Count a request of ``client``: None if it passes, else the seconds until it would."""
        with self.lock:
            now = self.clock()
            self.hits += 1
            if self.hits % SWEEP_EVERY == 0:  # a new dict: a dict never shrinks when its keys are deleted
                self.tats = {key: tat for key, tat in self.tats.items() if tat > now}
            tat = max(self.tats.get(client, now), now) + min(cost, limit) * WINDOW / limit
            if tat - WINDOW > now:
                return tat - WINDOW - now
            self.tats[client] = tat
            return None


class Access:
    """A server's keys and limits: ``api_key`` (one key for everyone), ``database`` (keys with limits of their own),
    ``req_limit`` (requests a minute per client address, for requests without a key of the database), ``char_limit``
    (characters a text), ``suggestions`` (LibreTranslate's ``POST /suggest`` stores them in ``database``). A key is
    required when either kind is given."""

    def __init__(self, api_key: str | None = None, database: KeyDatabase | None = None,
                 req_limit: int | None = None, char_limit: int | None = None, suggestions: bool = False,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if suggestions and database is None:
            raise EncdecError("--suggestions stores the suggestions in the key database: give --api-keys-db PATH "
                              "too.")
        self.api_key, self.database, self.suggestions = api_key, database, suggestions
        self.req_limit, self.char_limit = req_limit, char_limit
        self.rates = RateLimiter(clock)

    @property
    def required(self) -> bool:
        return bool(self.api_key) or self.database is not None

    @property
    def limited(self) -> bool:
        """Whether a request may be refused as over a request limit (429)."""
        return self.req_limit is not None or self.database is not None

    def find(self, presented: str | None) -> ApiKey | None:
        """The key ``presented``, if the server accepts it: the single key (with the server's limits), or a key of
        the database (with its own)."""
        if not presented or not isinstance(presented, str):
            return None
        if self.api_key and hmac.compare_digest(presented.encode(), self.api_key.encode()):
            return ApiKey(presented)
        return self.database.lookup(presented) if self.database is not None else None

    def admit(self, key: ApiKey | None, address: str, cost: int = 1) -> None:
        """Count a request of ``cost`` texts from ``address`` with ``key`` (None: without a key of the database);
        ``OverLimit`` over its limit."""
        per_key = key is not None and key.req_limit is not None
        limit = key.req_limit if per_key else self.req_limit
        if limit is None:
            return
        wait = self.rates.hit(("key", key.key) if per_key else ("address", address), limit, max(1, cost))
        if wait is not None:
            raise OverLimit(limit, wait, per_key)

    def char_limit_for(self, key: ApiKey | None) -> int | None:
        """The character limit of a request with ``key``: the key's own, else the server's (None: no limit)."""
        return key.char_limit if key is not None and key.char_limit is not None else self.char_limit

    def too_long(self, texts: list[str], key: ApiKey | None) -> tuple[int, int, int] | None:
        """(index, characters, limit) of the first text over the character limit (the key's, else the server's),
        or None."""
        limit = self.char_limit_for(key)
        if limit is None:
            return None
        return next(((i, len(text), limit) for i, text in enumerate(texts) if len(text) > limit), None)

    def file_cost(self, texts: list[str], key: ApiKey | None) -> int:
        """What a file of ``texts`` costs in requests, as LibreTranslate charges ``/translate_file``: its size over
        the character limit (LibreTranslate's bytes; here the characters of its texts, not of its markup or
        packaging), at least 1; 1 without a character limit."""
        limit = self.char_limit_for(key)
        return 1 if limit is None else max(1, sum(len(text) for text in texts) // limit)

    def suggest(self, q: str, s: str, source: str, target: str) -> None:
        self.database.add_suggestion(q, s, source, target)


def client_address(scope: dict) -> str:
    """The address an ASGI request came from (the peer: an ``X-Forwarded-For`` header is not trusted)."""
    client = scope.get("client")
    return client[0] if client else "unknown"


__all__ = ["Access", "OverLimit", "Overloaded", "QueueFull", "RateLimiter", "client_address"]
