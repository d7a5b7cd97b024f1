"""Who may use a server, and how much: API keys (the single ``--api-key``, the key database of ``--api-keys-db``),
requests a minute (``--req-limit``, or a key's own), characters a text (``--char-limit``, or a key's own), and the
refusals that say "not now" (``Overloaded``: 429 over a request limit, 503 when a model's queue is full), each with
the seconds to wait in ``Retry-After``. Plain Python: each API's adapter (``encdec.serve.adapter``) turns these into
its answers.

Requests are counted per key for a key of the database (its ``req_limit``), else per client address (``--req-limit``),
by the generic cell rate algorithm (GCRA, ITU-T I.371; a token bucket that holds one time per client): "N a minute"
lets a client that has been quiet send N requests at once, then one every 60/N seconds. A request of several texts
costs one per text, and at most N, so that any request can pass once the
client has waited a minute.

The client address is the peer's: proxy headers (``X-Forwarded-For``) count only from the proxies of
``--trusted-proxies``, and then as uvicorn's ``ProxyHeadersMiddleware`` reads them (the right-most address that is not
a trusted proxy), which rewrites the ASGI scope's ``client`` before the app sees it.

The key database is used off the event loop, in a thread of its own (``Access.database_call``): a file held by
another process, or one that can no longer be used, is a 503 with ``Retry-After`` (``KeysUnavailable``), logged, and
never stalls the requests that need no lookup.

Keys stay out of the access log: ``RedactKeys`` replaces the values of the query's key parameters (``api_key``,
``apiKey``, ``key``, ``token``, ``secret``, ``password``...) in uvicorn's access log lines.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import logging
import math
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .keys import ApiKey, KeyDatabase, KeyDatabaseError

WINDOW = 60.0  # seconds: limits are requests a minute
SWEEP_EVERY = 1024  # hits between two sweeps of the clients that are back to a full allowance (memory stays flat)
QUEUE_RETRY_AFTER = 1  # seconds a client waits after a full queue (503)
KEYS_RETRY_AFTER = 1  # seconds a client waits when the key database is held by another process (503)
BROKEN_RETRY_AFTER = 30  # seconds a client waits when the key database cannot be used (503, until it is fixed)
KEY_PARAMETERS = {"apikey", "key", "token", "accesstoken", "secret", "password"}  # lower case, without - and _
logger = logging.getLogger("encdec.serve")


class Overloaded(Exception):
    """A request refused for now: ``status`` (429 or 503), ``message`` (what and why, and when to retry) and
    ``retry_after`` seconds for the ``Retry-After`` header."""

    status = 503

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.message, self.retry_after = message, retry_after

    @property
    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)}


class OverLimit(Overloaded):
    """Over a request limit of ``limit`` requests a minute: 429."""

    status = 429

    def __init__(self, limit: int, wait: float, per_key: bool) -> None:
        seconds = max(1, math.ceil(wait))
        whose = "for this API key (its limit in the key database)" if per_key else "per client address (--req-limit)"
        super().__init__(f"more than {limit} requests a minute {whose}; retry after {seconds} s.", seconds)
        self.limit = limit


class QueueFull(Overloaded):
    """A model's batcher holds as many texts as it may (``--max-queue``): 503."""

    status = 503

    def __init__(self, name: str, waiting: int, max_queue: int) -> None:
        message = (f"the server is busy: {waiting} texts wait for the model {name}, the most it queues (--max-queue "
                   f"{max_queue}); retry after {QUEUE_RETRY_AFTER} s.")
        super().__init__(message, QUEUE_RETRY_AFTER)


class KeysUnavailable(Overloaded):
    """The key database cannot answer now: held by another process (``busy``; a moment's wait), or unusable (gone,
    unreadable, unwritable: the operator must fix it): 503."""

    status = 503

    def __init__(self, error: KeyDatabaseError) -> None:
        retry = KEYS_RETRY_AFTER if error.busy else BROKEN_RETRY_AFTER
        what = ("is held by another process" if error.busy else
                f"cannot be used ({error.reason}; the server log says more)")
        message = f"the server's API key database (--api-keys-db) {what}; retry after {retry} s."
        super().__init__(message, retry)


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
    (characters a text). A key is required when either kind is given."""

    def __init__(self, api_key: str | None = None, database: KeyDatabase | None = None,
                 req_limit: int | None = None, char_limit: int | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.api_key, self.database = api_key, database
        self.req_limit, self.char_limit = req_limit, char_limit
        self.rates = RateLimiter(clock)
        self.executor: ThreadPoolExecutor | None = None  # the key database's thread: from its first use until the
        # Access is collected (the executor's worker ends with it)
        self.last_failure: str | None = None  # the key database's last failure logged (each is logged once)

    @property
    def required(self) -> bool:
        return bool(self.api_key) or self.database is not None

    @property
    def limited(self) -> bool:
        """Whether a request may be refused as over a request limit (429)."""
        return self.req_limit is not None or self.database is not None

    async def find(self, presented: str | None) -> ApiKey | None:
        """The key ``presented``, if the server accepts it: the single key (with the server's limits), or a key of
        the database (with its own; ``KeysUnavailable`` when the database cannot say)."""
        if not presented or not isinstance(presented, str):
            return None
        if self.api_key and hmac.compare_digest(presented.encode(), self.api_key.encode()):
            return ApiKey(presented)
        return None if self.database is None else await self.database_call(self.database.lookup, presented)

    async def database_call(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)`` on the key database, in its own thread (never on the event loop, nor in the threads that
        other work shares); a failure logged once and raised as ``KeysUnavailable`` (503)."""
        if self.executor is None:
            self.executor = ThreadPoolExecutor(1, thread_name_prefix="encdec-keys")
        try:
            found = await asyncio.get_running_loop().run_in_executor(self.executor, functools.partial(call, *args))
        except KeyDatabaseError as error:
            if str(error) != self.last_failure:
                (logger.warning if error.busy else logger.error)("--api-keys-db: %s", error)
                self.last_failure = str(error)
            raise KeysUnavailable(error) from None
        self.last_failure = None
        return found

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

    async def suggest(self, q: str, s: str, source: str, target: str) -> None:
        """Store a suggested translation ``s`` of ``q`` in the key database (an API that takes suggestions)."""
        await self.database_call(self.database.add_suggestion, q, s, source, target)


def client_address(scope: dict) -> str:
    """The address an ASGI request came from: the peer's, or behind a proxy of ``--trusted-proxies`` the address
    that uvicorn's ``ProxyHeadersMiddleware`` put in the scope (module docstring)."""
    client = scope.get("client")
    return client[0] if client else "unknown"


def redact_keys(target: str) -> str:
    """A request target (path and query) with the value of every key parameter of its query (``KEY_PARAMETERS``,
    in any case, with or without ``-`` and ``_``) replaced by ``REDACTED``."""
    path, mark, query = target.partition("?")
    if not mark:
        return target

    def redacted(match: re.Match) -> str:
        name = urllib.parse.unquote_plus(match[1]).replace("-", "").replace("_", "").lower()
        return f"{match[1]}=REDACTED" if name in KEY_PARAMETERS else match[0]
    return f"{path}?{re.sub(r'([^&;=]*)=([^&;]*)', redacted, query)}"


class RedactKeys(logging.Filter):
    """Keys out of uvicorn's access log (its record's arguments: client, method, target, HTTP version, status)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) > 2 and isinstance(args[2], str):
            record.args = (*args[:2], redact_keys(args[2]), *args[3:])
        return True


__all__ = ["Access", "KeysUnavailable", "OverLimit", "Overloaded", "QueueFull", "RateLimiter", "RedactKeys",
           "client_address", "redact_keys"]
