"""API keys, each with its own request limit, and LibreTranslate's translation suggestions, kept in one SQLite file:
``encdec serve --api-keys-db PATH`` reads it, ``encdec keys --db PATH add | remove | list`` manages it, and both may
use it at once.

The tables are those of LibreTranslate's own databases (``libretranslate/api_keys.py``: ``api_keys(api_key,
req_limit, char_limit)``; ``libretranslate/suggestions.py``: ``suggestions(q, s, source, target)``), kept in one file
here, so a LibreTranslate key database opens as it is. The schema version is SQLite's ``user_version``; a file of a
newer version is refused rather than misread. The file is in WAL mode (readers never wait for a writer) and every
connection waits up to ``timeout`` seconds for another's write, so the server and ``encdec keys`` share it. Lookups are
not cached: a key added or removed counts from the next request. Opening checks that the file can be written too (the
server writes suggestions), and any failure is one line naming the file.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import EncdecError

SCHEMA_VERSION = 1  # SQLite's user_version of a database this module wrote (0: a new file, or LibreTranslate's)
SCHEMA = (
    'CREATE TABLE IF NOT EXISTS api_keys ("api_key" TEXT NOT NULL, "req_limit" INTEGER NOT NULL, '
    '"char_limit" INTEGER DEFAULT NULL, PRIMARY KEY("api_key"))',
    'CREATE TABLE IF NOT EXISTS suggestions ("q" TEXT NOT NULL, "s" TEXT NOT NULL, "source" TEXT NOT NULL, '
    '"target" TEXT NOT NULL)',
)


@dataclass(frozen=True)
class ApiKey:
    """A key that the server accepts, and its own limits: ``req_limit`` requests a minute (None: the server's
    ``--req-limit``, counted per client address), ``char_limit`` characters a text (None: the server's
    ``--char-limit``)."""

    key: str
    req_limit: int | None = None
    char_limit: int | None = None


class KeyDatabase:
    """The key database at ``path``, created if missing (its folder must exist); an ``EncdecError`` naming the file
    when it cannot be opened, read or written."""

    def __init__(self, path: str | Path, timeout: float = 5.0) -> None:
        self.path = Path(path)
        self.lock = threading.Lock()  # one connection, shared by the server's threads
        try:
            self.connection = sqlite3.connect(self.path, timeout=timeout, isolation_level=None,
                                              check_same_thread=False)
        except sqlite3.Error as error:
            raise self.failure(error) from None
        try:
            self.prepare()
        except (sqlite3.Error, EncdecError) as error:
            self.connection.close()
            raise error if isinstance(error, EncdecError) else self.failure(error) from None

    def failure(self, error: Exception) -> EncdecError:
        return EncdecError(f"cannot use the API key database {self.path}: {error}; give a SQLite file that encdec may "
                           "read and write (a new one is created where its folder exists).")

    def prepare(self) -> None:
        """WAL mode, the tables, and the schema version written: a file that cannot be written fails here."""
        self.connection.execute("PRAGMA journal_mode=WAL")
        with self.transaction() as connection:
            version = connection.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise EncdecError(f"the API key database {self.path} has schema version {version}, newer than this "
                                  f"encdec reads ({SCHEMA_VERSION}); upgrade encdec, or give another file.")
            for statement in SCHEMA:
                connection.execute(statement)
            connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")  # a write even when nothing else is

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``: it waits for another writer up to the timeout, then fails
        rather than deadlock), committed at the end, rolled back on an error."""
        with self.lock:
            self.connection.execute("BEGIN IMMEDIATE")
            try:
                yield self.connection
            except BaseException:
                self.connection.execute("ROLLBACK")
                raise
            self.connection.execute("COMMIT")

    def lookup(self, key: str) -> ApiKey | None:
        with self.lock:
            row = self.connection.execute("SELECT api_key, req_limit, char_limit FROM api_keys WHERE api_key = ?",
                                          (key,)).fetchone()
        return None if row is None else ApiKey(*row)

    def add(self, req_limit: int, key: str | None = None, char_limit: int | None = None) -> ApiKey:
        """Add a key (a new random one unless ``key`` is given), or change the limits of one that exists."""
        added = ApiKey(key or str(uuid.uuid4()), req_limit, char_limit)
        with self.transaction() as connection:
            connection.execute("INSERT OR REPLACE INTO api_keys (api_key, req_limit, char_limit) VALUES (?, ?, ?)",
                               (added.key, added.req_limit, added.char_limit))
        return added

    def remove(self, key: str) -> bool:
        """Remove a key; whether there was one."""
        with self.transaction() as connection:
            return connection.execute("DELETE FROM api_keys WHERE api_key = ?", (key,)).rowcount > 0

    def all(self) -> list[ApiKey]:
        with self.lock:
            rows = self.connection.execute("SELECT api_key, req_limit, char_limit FROM api_keys ORDER BY rowid")
            return [ApiKey(*row) for row in rows.fetchall()]

    def add_suggestion(self, q: str, s: str, source: str, target: str) -> None:
        """A suggested translation ``s`` of ``q`` (LibreTranslate's ``POST /suggest``)."""
        with self.transaction() as connection:
            connection.execute("INSERT INTO suggestions (q, s, source, target) VALUES (?, ?, ?, ?)",
                               (q, s, source, target))

    def close(self) -> None:
        with self.lock:
            self.connection.close()


__all__ = ["SCHEMA_VERSION", "ApiKey", "KeyDatabase"]
