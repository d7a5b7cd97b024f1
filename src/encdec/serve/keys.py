"""API keys, each with its own request limit, and LibreTranslate's translation suggestions, kept in one SQLite file:
``encdec serve --api-keys-db PATH`` reads it, ``encdec keys --db PATH add | remove | list`` manages it, and both may
use it at once.

The tables are those of LibreTranslate's own databases (``libretranslate/api_keys.py``: ``api_keys(api_key,
req_limit, char_limit)``; ``libretranslate/suggestions.py``: ``suggestions(q, s, source, target)``), kept in one file
here, so a LibreTranslate key database opens as it is. Two tables are encdec's own: ``char_quotas`` (a key's
characters a month, and those used in the current month: DeepL's ``/v2/usage``) and ``glossaries`` (DeepL's stored
glossaries, each owned by the key that made it, its dictionaries as JSON); a file of schema version 1 gains them when
opened. The schema version is SQLite's ``user_version``; a file of a newer version is refused rather than misread.
Opening checks that the file can be written too (the server writes suggestions), and any failure is one line naming
the file. The file keeps SQLite's rollback journal (``journal_mode=DELETE``, LibreTranslate's too) and nothing of it
is memory-mapped (``mmap_size=0``): WAL mode maps its ``-shm`` file into the server's memory, and another process
that truncates or recreates that file (deleting the database and making a new one beside a server) kills the server
with SIGBUS. A write holds the file for a few milliseconds, and every connection waits up to ``timeout`` seconds for
another's lock: the server waits briefly (``SERVER_TIMEOUT``; a file held longer is a ``KeyDatabaseError`` with
``busy``, which the server answers with 503 and ``Retry-After``), ``encdec keys`` 5 s. Lookups are not cached: a key
added or removed counts from the next request. A file replaced under the server (a new file moved onto the path:
another inode) is reopened, checked at most once every ``recheck_every`` seconds on use; a file that is gone, or that
can no longer be read or written, is a ``KeyDatabaseError`` naming it, on each use until it is back.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import EncdecError

SCHEMA_VERSION = 2  # SQLite's user_version of a database this module wrote (0: a new file, or LibreTranslate's)
SCHEMA = (
    'CREATE TABLE IF NOT EXISTS api_keys ("api_key" TEXT NOT NULL, "req_limit" INTEGER NOT NULL, '
    '"char_limit" INTEGER DEFAULT NULL, PRIMARY KEY("api_key"))',
    'CREATE TABLE IF NOT EXISTS suggestions ("q" TEXT NOT NULL, "s" TEXT NOT NULL, "source" TEXT NOT NULL, '
    '"target" TEXT NOT NULL)',
    'CREATE TABLE IF NOT EXISTS char_quotas ("api_key" TEXT NOT NULL, "char_quota" INTEGER DEFAULT NULL, '
    '"used" INTEGER NOT NULL DEFAULT 0, "period" TEXT NOT NULL DEFAULT \'\', PRIMARY KEY("api_key"))',
    'CREATE TABLE IF NOT EXISTS glossaries ("glossary_id" TEXT NOT NULL, "api_key" TEXT NOT NULL, "name" TEXT '
    'NOT NULL, "creation_time" TEXT NOT NULL, "dictionaries" TEXT NOT NULL, PRIMARY KEY("glossary_id"))',
)
SERVER_TIMEOUT = 0.5  # seconds a server's use of the file waits for another connection's lock
RECHECK_EVERY = 1.0  # seconds between two checks that the file at the path is still the one open
BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


class KeyDatabaseError(EncdecError):
    """The key database cannot be used: ``reason`` (SQLite's words, or what happened to the file), and ``busy``
    when another connection holds it (it may pass in a moment)."""

    def __init__(self, path: Path, reason: str, busy: bool = False, fix: str | None = None) -> None:
        fix = fix or ("retry when it is released." if busy else "give a SQLite file that encdec may read and write (a "
                      "new one is created where its folder exists).")
        super().__init__(f"cannot use the API key database {path}: {reason}; {fix}")
        self.reason, self.busy = reason, busy


@dataclass(frozen=True)
class ApiKey:
    """A key that the server accepts, and its own limits: ``req_limit`` requests a minute (None: the server's
    ``--req-limit``, counted per client address), ``char_limit`` characters a text of the native API, or a request of
    LibreTranslate's (None: the server's ``--char-limit``)."""

    key: str
    req_limit: int | None = None
    char_limit: int | None = None


def failure(path: Path, error: Exception) -> KeyDatabaseError:
    """``error`` (SQLite's, or the file system's) as the ``KeyDatabaseError`` of the file ``path``."""
    busy = isinstance(error, sqlite3.OperationalError) and (getattr(error, "sqlite_errorcode", 0) & 0xFF) in BUSY
    reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return KeyDatabaseError(path, "locked by another connection" if busy else reason, busy)


@contextlib.contextmanager
def transaction(connection: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction (``BEGIN IMMEDIATE``: it waits for another writer up to the timeout, then fails rather
    than deadlock), committed at the end, rolled back on an error."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield connection
        connection.execute("COMMIT")
    except BaseException:
        if connection.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                connection.execute("ROLLBACK")
        raise


class KeyDatabase:
    """The key database at ``path``, created if missing (its folder must exist); a ``KeyDatabaseError`` naming the
    file when it cannot be opened, read or written. One connection, shared by the server's threads under a lock; it
    waits ``timeout`` seconds for another connection's lock, and once that wait has failed, uses within the next
    ``timeout`` seconds fail at once (busy) rather than each wait in turn."""

    def __init__(self, path: str | Path, timeout: float = 5.0, recheck_every: float = RECHECK_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path, self.timeout, self.recheck_every, self.clock = Path(path), timeout, recheck_every, clock
        self.lock = threading.Lock()
        self.connection, self.identity = self.open()
        self.checked, self.busy_until = clock(), float("-inf")

    def open(self) -> tuple[sqlite3.Connection, tuple[int, int]]:
        """A connection to the file at the path, prepared, and the file's identity (device, inode)."""
        try:
            connection = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None,
                                         check_same_thread=False)
        except sqlite3.Error as error:
            raise failure(self.path, error) from None
        try:
            self.prepare(connection)
            found = os.stat(self.path)
        except (sqlite3.Error, OSError, KeyDatabaseError) as error:
            connection.close()
            raise error if isinstance(error, KeyDatabaseError) else failure(self.path, error) from None
        return connection, (found.st_dev, found.st_ino)

    def prepare(self, connection: sqlite3.Connection) -> None:
        """The rollback journal and no memory map (the module docstring says why), the tables, and the schema
        version written: a file that cannot be written fails here."""
        connection.execute("PRAGMA mmap_size=0")
        mode = connection.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
        if mode != "delete":  # a WAL file that another connection has open cannot leave WAL mode
            raise KeyDatabaseError(self.path, f"it is in {mode} mode and open elsewhere", busy=True)
        with transaction(connection):
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise KeyDatabaseError(self.path, f"its schema version {version} is newer than this encdec reads "
                                       f"({SCHEMA_VERSION})", fix="upgrade encdec, or give another file.")
            for statement in SCHEMA:
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")  # a write even when nothing else is

    @contextlib.contextmanager
    def using(self, write: bool = False) -> Iterator[sqlite3.Connection]:
        """The connection to the file now at the path (``follow``), under the lock, in a write transaction with
        ``write``; SQLite's errors as ``KeyDatabaseError``."""
        with self.lock:
            if self.clock() < self.busy_until:
                raise KeyDatabaseError(self.path, "locked by another connection", busy=True)
            try:
                self.follow()
                with transaction(self.connection) if write else contextlib.nullcontext(self.connection) as connection:
                    yield connection
            except (sqlite3.Error, OSError) as error:
                raise self.failed(failure(self.path, error)) from None
            except KeyDatabaseError as error:
                raise self.failed(error) from None

    def failed(self, error: KeyDatabaseError) -> KeyDatabaseError:
        """``error``, noted: a busy file is not tried again for ``timeout`` seconds; any failure has the next use
        look at the path again."""
        self.busy_until = self.clock() + self.timeout if error.busy else self.busy_until
        self.checked = float("-inf")
        return error

    def follow(self) -> None:
        """At most once every ``recheck_every`` seconds: the file at the path still the one open, or the new one
        opened in its place; a file that is gone is a ``KeyDatabaseError``."""
        now = self.clock()
        if now - self.checked < self.recheck_every:
            return
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            raise KeyDatabaseError(self.path, "the file is gone: deleted or moved") from None
        if (found.st_dev, found.st_ino) != self.identity:
            connection, self.identity = self.open()
            self.connection.close()
            self.connection = connection
        self.checked = now

    def lookup(self, key: str) -> ApiKey | None:
        with self.using() as connection:
            row = connection.execute("SELECT api_key, req_limit, char_limit FROM api_keys WHERE api_key = ?",
                                     (key,)).fetchone()
        return None if row is None else ApiKey(*row)

    def add(self, req_limit: int, key: str | None = None, char_limit: int | None = None) -> ApiKey:
        """Add a key (a new random one unless ``key`` is given), or change the limits of one that exists."""
        added = ApiKey(key or str(uuid.uuid4()), req_limit, char_limit)
        with self.using(write=True) as connection:
            connection.execute("INSERT OR REPLACE INTO api_keys (api_key, req_limit, char_limit) VALUES (?, ?, ?)",
                               (added.key, added.req_limit, added.char_limit))
        return added

    def remove(self, key: str) -> bool:
        """Remove a key; whether there was one."""
        with self.using(write=True) as connection:
            return connection.execute("DELETE FROM api_keys WHERE api_key = ?", (key,)).rowcount > 0

    def all(self) -> list[ApiKey]:
        with self.using() as connection:
            rows = connection.execute("SELECT api_key, req_limit, char_limit FROM api_keys ORDER BY rowid")
            return [ApiKey(*row) for row in rows.fetchall()]

    def add_suggestion(self, q: str, s: str, source: str, target: str) -> None:
        """A suggested translation ``s`` of ``q`` (LibreTranslate's ``POST /suggest``)."""
        with self.using(write=True) as connection:
            connection.execute("INSERT INTO suggestions (q, s, source, target) VALUES (?, ?, ?, ?)",
                               (q, s, source, target))

    def set_quota(self, key: str, char_quota: int | None) -> None:
        """``key`` may translate ``char_quota`` characters a month through DeepL's API (None: no quota)."""
        with self.using(write=True) as connection:
            connection.execute("INSERT INTO char_quotas (api_key, char_quota) VALUES (?, ?) ON CONFLICT(api_key) DO "
                               "UPDATE SET char_quota = excluded.char_quota", (key, char_quota))

    def usage(self, key: str, period: str) -> tuple[int, int | None]:
        """(characters used in ``period``, the quota: None without one) of ``key``."""
        with self.using() as connection:
            row = connection.execute("SELECT used, period, char_quota FROM char_quotas WHERE api_key = ?",
                                     (key,)).fetchone()
        return (0, None) if row is None else (row[0] if row[1] == period else 0, row[2])

    def charge(self, key: str, characters: int, period: str) -> tuple[bool, int, int | None]:
        """Count ``characters`` (negative: give them back) against ``key``'s quota in ``period`` (a new period starts
        from 0), unless they would go over it: (counted, used, quota), in one transaction."""
        with self.using(write=True) as connection:
            row = connection.execute("SELECT used, period, char_quota FROM char_quotas WHERE api_key = ?",
                                     (key,)).fetchone()
            used, quota = (row[0] if row[1] == period else 0, row[2]) if row else (0, None)
            if characters > 0 and quota is not None and used + characters > quota:
                return False, used, quota
            used = max(0, used + characters)
            connection.execute("INSERT INTO char_quotas (api_key, used, period) VALUES (?, ?, ?) ON CONFLICT(api_key) "
                               "DO UPDATE SET used = excluded.used, period = excluded.period", (key, used, period))
        return True, used, quota

    def save_glossary(self, record: dict) -> None:
        """Store a glossary (``glossary_id``, ``api_key``, ``name``, ``creation_time``, ``dictionaries``: JSON text),
        replacing the one of the same id."""
        with self.using(write=True) as connection:
            connection.execute("INSERT OR REPLACE INTO glossaries (glossary_id, api_key, name, creation_time, "
                               "dictionaries) VALUES (:glossary_id, :api_key, :name, :creation_time, :dictionaries)",
                               record)

    def glossaries(self, key: str, glossary_id: str | None = None) -> list[dict]:
        """The glossaries ``key`` owns (the one of ``glossary_id`` only, if given), oldest first."""
        query, args = "SELECT * FROM glossaries WHERE api_key = ?", [key]
        if glossary_id is not None:
            query, args = query + " AND glossary_id = ?", [key, glossary_id]
        with self.using() as connection:
            cursor = connection.execute(query + " ORDER BY rowid", args)
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]

    def update_glossary(self, record: dict) -> bool:
        """Change a stored glossary's name and dictionaries, if ``record["api_key"]`` still owns it; whether it did."""
        with self.using(write=True) as connection:
            return connection.execute("UPDATE glossaries SET name = :name, dictionaries = :dictionaries WHERE "
                                      "api_key = :api_key AND glossary_id = :glossary_id", record).rowcount > 0

    def count_glossaries(self, key: str) -> int:
        with self.using() as connection:
            return connection.execute("SELECT COUNT(*) FROM glossaries WHERE api_key = ?", (key,)).fetchone()[0]

    def delete_glossary(self, key: str, glossary_id: str) -> bool:
        """Delete a glossary ``key`` owns; whether there was one."""
        with self.using(write=True) as connection:
            return connection.execute("DELETE FROM glossaries WHERE api_key = ? AND glossary_id = ?",
                                      (key, glossary_id)).rowcount > 0

    def close(self) -> None:
        with self.lock:
            self.connection.close()


__all__ = ["RECHECK_EVERY", "SCHEMA_VERSION", "SERVER_TIMEOUT", "ApiKey", "KeyDatabase", "KeyDatabaseError"]
