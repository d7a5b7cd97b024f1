"""API keys in SQLite (encdec.serve.keys): `encdec keys --db PATH add | remove | list`, a server that takes the keys
of the file while `encdec keys` changes it, the file kept across a restart, a LibreTranslate key database opened as it
is, and every file that cannot be used refused at start in one line that names it."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest

from encdec.errors import EncdecError
from encdec.serve.keys import SCHEMA_VERSION, ApiKey, KeyDatabase
from encdec.serve.server import create_app, load_models
from encdec_cli import main
from test_serve import ServeProcess, Server, request
from tiny_model_folders import build_model_folders

LT = "/libretranslate"


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_model_folders(tmp_path_factory.mktemp("keys"))["transformer"]


def keys(database, *argv: str, capsys) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `encdec keys --db DATABASE ARGV`."""
    status = main(["keys", "--db", str(database), *argv])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_encdec_keys_adds_lists_and_removes_keys(tmp_path, capsys) -> None:
    db = tmp_path / "keys.db"
    assert keys(db, "list", capsys=capsys) == (
        2, "", f"encdec keys: error: no key database at {db}; `encdec keys --db {db} add` creates one.\n")
    status, generated, _ = keys(db, "add", capsys=capsys)  # a new random key, alone on its line: KEY=$(...)
    generated = generated.strip()
    assert status == 0 and str(uuid.UUID(generated)) == generated
    assert keys(db, "add", "--key", "weblate", "--req-limit", "30", "--char-limit", "5000", capsys=capsys)[:2] == \
        (0, "weblate\n")
    assert keys(db, "list", capsys=capsys) == (
        0, f"{generated}: 60 requests a minute\nweblate: 30 requests a minute, 5000 characters a text\n",
        f"2 key(s) in {db}\n")
    assert keys(db, "remove", "weblate", capsys=capsys)[:2] == (0, "removed weblate\n")
    assert keys(db, "remove", "weblate", capsys=capsys) == (
        2, "", f"encdec keys: error: no key weblate in {db}; `encdec keys --db {db} list` lists them.\n")
    assert keys(db, "list", capsys=capsys)[1] == f"{generated}: 60 requests a minute\n"
    assert KeyDatabase(db).lookup(generated) == ApiKey(generated, 60, None)
    with pytest.raises(SystemExit):
        main(["keys", "--db", str(db), "add", "--req-limit", "0"])
    assert "is below 1" in capsys.readouterr().err


def lt_status(url: str, key: str | None) -> tuple[int, dict]:
    """LibreTranslate's answer to a request with ``key``: 400 for its unsupported target once the key passed."""
    body = {"q": "3 Mar 2021", "source": "de", "target": "xx", **({"api_key": key} if key else {})}
    return request(f"{url}{LT}/translate", body)[:2]


def test_the_server_takes_the_keys_of_the_file_while_encdec_keys_changes_it_and_after_a_restart(
        folder, tmp_path, capsys) -> None:
    db = tmp_path / "keys.db"
    KeyDatabase(db).add(100, key="first")
    models = load_models([f"de-en={folder}"])
    with Server(create_app(models, keys=KeyDatabase(db))) as server:
        native = request(f"{server.url}/translate", {"text": "3 Mar 2021"}, headers={"X-API-Key": "first"})[0]
        served = request(f"{server.url}{LT}/translate", {"q": "3 Mar 2021", "source": "de", "target": "en",
                                                         "api_key": "first"})[0]
        unknown = (request(f"{server.url}/translate", {"text": "a"}, headers={"X-API-Key": "nope"})[0],
                   lt_status(server.url, "nope"), lt_status(server.url, None))
        assert keys(db, "add", "--key", "second", capsys=capsys)[0] == 0  # while the server holds the file
        assert keys(db, "remove", "first", capsys=capsys)[0] == 0
        changed = lt_status(server.url, "second")[0], lt_status(server.url, "first")
        settings = request(f"{server.url}{LT}/frontend/settings")[1]
    with Server(create_app(models, keys=KeyDatabase(db))) as server:  # a restart on the same file
        restarted = lt_status(server.url, "second")[0], lt_status(server.url, "first")[0]
    assert (native, served) == (200, 200)
    # LibreTranslate's statuses (libretranslate/app.py, access_check): a wrong key 403, a missing one 400
    assert unknown == (401, (403, {"error": "Invalid API key"}),
                       (400, {"error": "Please contact the server operator to get an API key"}))
    assert changed == (400, (403, {"error": "Invalid API key"}))
    assert settings["keyRequired"] is True and settings["apiKeys"] is True
    assert restarted == (400, 403)
    # the rollback journal: no -shm file mapped into the server's memory (encdec.serve.keys says why)
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert not db.with_name("keys.db-shm").exists()


def test_a_libretranslate_key_database_opens_as_it_is(tmp_path) -> None:
    """A file that LibreTranslate wrote (its api_keys table, no schema version): its keys and limits are read, and
    the suggestions table and the version are added."""
    path = tmp_path / "api_keys.db"
    with sqlite3.connect(path) as connection:
        connection.execute('CREATE TABLE IF NOT EXISTS api_keys ("api_key" TEXT NOT NULL, "req_limit" INTEGER NOT '
                           'NULL, "char_limit" INTEGER DEFAULT NULL, PRIMARY KEY("api_key"));')
        connection.execute("INSERT INTO api_keys VALUES ('lt-key', 42, 300)")
    database = KeyDatabase(path)
    assert database.lookup("lt-key") == ApiKey("lt-key", 42, 300) and database.all() == [ApiKey("lt-key", 42, 300)]
    database.close()
    with sqlite3.connect(path) as connection:
        assert connection.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        assert connection.execute("SELECT count(*) FROM suggestions").fetchone() == (0,)


def refused(capsys, *argv: str) -> str:
    """The one line `encdec serve ARGV` is refused with (exit status 2)."""
    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


def test_a_key_database_that_cannot_be_used_is_refused_at_start_in_one_line(tmp_path, capsys) -> None:
    """Before any model loads (the model folder does not even exist): a file that is no database, a folder, a path
    in a missing folder, a file of a newer schema; --suggestions without a database."""
    junk, newer = tmp_path / "junk.db", tmp_path / "newer.db"
    junk.write_text("not a database " * 100)
    with sqlite3.connect(newer) as connection:
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    model = str(tmp_path / "no-model")
    fix = "give a SQLite file that encdec may read and write (a new one is created where its folder exists)."
    assert refused(capsys, "--model", model, "--api-keys-db", str(junk)) == \
        f"encdec serve: error: cannot use the API key database {junk}: file is not a database; {fix}\n"
    assert refused(capsys, "--model", model, "--api-keys-db", str(tmp_path)) == \
        f"encdec serve: error: cannot use the API key database {tmp_path}: unable to open database file; {fix}\n"
    assert f"database {tmp_path / 'no' / 'keys.db'}: unable to open" in \
        refused(capsys, "--model", model, "--api-keys-db", str(tmp_path / "no" / "keys.db"))
    assert refused(capsys, "--model", model, "--api-keys-db", str(newer)) == \
        (f"encdec serve: error: cannot use the API key database {newer}: its schema version {SCHEMA_VERSION + 1} is "
         f"newer than this encdec reads ({SCHEMA_VERSION}); upgrade encdec, or give another file.\n")
    assert refused(capsys, "--model", model, "--suggestions") == ("encdec serve: error: --suggestions stores the "
                                                                  "suggestions in the key database: give "
                                                                  "--api-keys-db PATH too.\n")


def test_a_key_database_that_another_writer_holds_is_refused_naming_it(tmp_path) -> None:
    """A file that cannot be written now (another connection keeps its write lock past the wait): refused, named."""
    path = tmp_path / "keys.db"
    KeyDatabase(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(EncdecError, match=f"cannot use the API key database {path}: locked by another "
                           "connection; retry when it is released."):
            KeyDatabase(path, timeout=0.1)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert KeyDatabase(path).all() == []


def test_encdec_serve_takes_the_flags_of_keys_limits_and_metrics(folder, tmp_path) -> None:
    """The command line hands every flag on: the key database, the limits (in /info and LibreTranslate's settings),
    suggestions, metrics, and the trusted proxies (each forwarded client has its own --req-limit)."""
    db = tmp_path / "keys.db"
    key = KeyDatabase(db).add(7, key="mine").key
    flags = ["--api-keys-db", str(db), "--req-limit", "2", "--char-limit", "20", "--max-queue", "5", "--suggestions",
             "--metrics", "--api-key", "shared", "--trusted-proxies", "127.0.0.1"]
    with ServeProcess("--model", f"de-en={folder}", *flags) as server:
        info = request(f"{server.url}/info", headers={"X-API-Key": key})[1]
        settings = request(f"{server.url}{LT}/frontend/settings")[1]
        metrics = request(f"{server.url}/metrics", headers={"X-API-Key": key})
        suggested = request(f"{server.url}{LT}/suggest", {"q": "a", "s": "b", "source": "de", "target": "en",
                                                          "api_key": key})[:2]
        forwarded = [request(f"{server.url}{LT}/translate", {"q": "a", "source": "de", "target": "xx",
                                                             "api_key": "shared"},
                             headers={"X-Forwarded-For": f"203.0.113.{i}"})[0] for i in range(3)]
    assert {name: info["limits"][name] for name in ("req_limit", "char_limit", "max_queue")} == \
        {"req_limit": 2, "char_limit": 20, "max_queue": 5}
    assert (settings["charLimit"], settings["keyRequired"], settings["suggestions"]) == (20, True, True)
    assert metrics[0] == 200 and "encdec_http_requests_total" in metrics[1]
    assert suggested == (200, {"success": True})
    assert forwarded == [400] * 3  # 2 a minute per client: each address is another client


def keyed(url: str, key: str) -> tuple[tuple[int, dict, str | None], tuple[int, dict, str | None]]:
    """(status, JSON, Retry-After) of a native /translate and of LibreTranslate's (an unsupported target: 400 once
    the key passed, nothing decoded) with ``key``."""
    native = request(f"{url}/translate", {"text": "3 Mar 2021", "target": "xx"}, headers={"X-API-Key": key})
    libre = request(f"{url}{LT}/translate", {"q": "3 Mar 2021", "source": "de", "target": "xx", "api_key": key})
    return tuple((status, body, retry_after(headers)) for status, body, headers in (native, libre))


def retry_after(headers: dict) -> str | None:
    return {name.lower(): value for name, value in headers.items()}.get("retry-after")


def test_a_key_database_held_by_another_process_is_a_503_and_never_stalls_the_server(folder, tmp_path) -> None:
    """The key database is read off the event loop: while a lookup waits, /health answers (the request has a
    timeout; on the loop it would wait behind the lookup). A file that another connection holds exclusively is a
    503 with Retry-After in each API's shape (a keyed request, a suggestion), while requests that need no lookup go
    on; once released, the keys work again."""
    path = tmp_path / "keys.db"
    now = [0.0]  # the database's clock: its busy window passes when the test says
    database = KeyDatabase(path, timeout=0.1, clock=lambda: now[0])
    key = database.add(100).key
    entered, gate, lookup = threading.Event(), threading.Event(), database.lookup

    def held_lookup(presented: str):
        entered.set()
        gate.wait(timeout=60)
        return lookup(presented)
    database.lookup = held_lookup
    models = load_models([f"de-en={folder}"])
    with Server(create_app(models, api_key="shared", keys=database, suggestions=True)) as server:
        with ThreadPoolExecutor(1) as pool:
            waiting = pool.submit(request, f"{server.url}/health", headers={"X-API-Key": key})
            assert entered.wait(timeout=60)
            health = request(f"{server.url}/health", headers={"X-API-Key": "shared"}, timeout=10)[0]
            gate.set()
            waited = waiting.result(timeout=60)[0]
        database.lookup = lookup
        holder = sqlite3.connect(path, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            locked = keyed(server.url, key)
            suggestion = request(f"{server.url}{LT}/suggest", {"q": "a", "s": "b", "source": "de", "target": "en",
                                                               "api_key": key})
            free = (request(f"{server.url}/health", headers={"X-API-Key": "shared"})[0],
                    request(f"{server.url}{LT}/health")[0], keyed(server.url, "shared")[1][0])
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        now[0] += 1  # past the busy window, after which the file is tried again
        released = keyed(server.url, key)
    assert (health, waited) == (200, 200)
    busy = "the server's API key database (--api-keys-db) is held by another process; retry after 1 s."
    assert locked[0] == (503, {"error": busy, "field": None, "request_id": locked[0][1]["request_id"]}, "1")
    assert locked[1] == (503, {"error": busy}, "1")
    assert (suggestion[0], suggestion[1], retry_after(suggestion[2])) == (503, {"error": busy}, "1")
    assert free == (200, 200, 400)
    assert [answer[0] for answer in released] == [422, 400]


def test_a_replaced_or_deleted_key_database_is_followed(folder, tmp_path, capsys) -> None:
    """A file moved onto the path (another inode) is reopened: a key removed with it stops working, a key of the new
    file works, and suggestions go to the new file. A file deleted is a 503 naming --api-keys-db (no key of the
    vanished file passes) until `encdec keys` makes a new one."""
    path, replacement = tmp_path / "keys.db", tmp_path / "new.db"
    database = KeyDatabase(path, recheck_every=0)
    database.add(100, key="old")
    KeyDatabase(replacement).add(100, key="new")
    suggestion = {"q": "a", "s": "b", "source": "de", "target": "en"}
    models = load_models([f"de-en={folder}"])
    with Server(create_app(models, keys=database, suggestions=True)) as server:
        before = lt_status(server.url, "old")[0], lt_status(server.url, "new")[0]
        os.replace(replacement, path)
        after = lt_status(server.url, "old")[0], lt_status(server.url, "new")[0]
        suggested = request(f"{server.url}{LT}/suggest", {**suggestion, "api_key": "new"})[:2]
        stored = sqlite3.connect(path).execute("SELECT q, s FROM suggestions").fetchall()
        path.unlink()
        gone = keyed(server.url, "new")
        assert keys(path, "add", "--key", "newer", capsys=capsys)[0] == 0
        back = lt_status(server.url, "newer")[0], lt_status(server.url, "new")[0]
    assert before == (400, 403) and after == (403, 400) and suggested == (200, {"success": True})
    assert stored == [("a", "b")]
    message = ("the server's API key database (--api-keys-db) cannot be used (the file is gone: deleted or moved; "
               "the server log says more); retry after 30 s.")
    assert gone[0][:2] == (503, {"error": message, "field": None, "request_id": gone[0][1]["request_id"]})
    assert gone[1] == (503, {"error": message}, "30")
    assert back == (400, 403)


def test_a_key_database_that_breaks_under_encdec_serve_is_an_error_never_a_crash(folder, tmp_path) -> None:
    """`encdec serve` in its own process, where the crash was: another process truncating the WAL's -shm file,
    which the server had memory-mapped, killed it with SIGBUS (exit 135, nothing logged). Nothing is mapped now, so
    the same truncation changes nothing. A file that becomes unwritable (not as root, who writes anyway) fails
    suggestions only, and a file that can no longer be read (overwritten in place) every keyed request: each a 503
    naming --api-keys-db, logged once; the server goes on and stops cleanly."""
    path = tmp_path / "keys.db"
    KeyDatabase(path).add(100, key="k")
    suggestion = {"q": "a", "s": "b", "source": "de", "target": "en", "api_key": "k"}
    with ServeProcess("--model", f"de-en={folder}", "--api-keys-db", str(path), "--suggestions") as server:
        first = request(f"{server.url}{LT}/suggest", suggestion)[0]
        path.with_name("keys.db-shm").open("w").close()  # what killed the server: its mapped file truncated
        after_shm = request(f"{server.url}{LT}/suggest", suggestion)[0], keyed(server.url, "k")[1][0]
        if os.geteuid() != 0:
            path.chmod(0o444)
            tmp_path.chmod(0o555)
            try:
                unwritable = request(f"{server.url}{LT}/suggest", suggestion), keyed(server.url, "k")[1][0]
            finally:
                tmp_path.chmod(0o755)
                path.chmod(0o644)
            assert unwritable[0][0] == 503 and "(--api-keys-db) cannot be used" in unwritable[0][1]["error"]
            assert unwritable[1] == 400  # lookups only read
        with path.open("r+b") as file:
            file.write(b"not a database " * 100)
        broken = [keyed(server.url, "k") for _ in range(2)]
        running = server.process.poll()
        server.process.terminate()
        status, output = server.finish()
    assert (first, after_shm) == (200, (200, 400))
    message = ("the server's API key database (--api-keys-db) cannot be used (file is not a database; the server log "
               "says more); retry after 30 s.")
    assert [(status, body["error"], retry) for answers in broken for status, body, retry in answers] == \
        [(503, message, "30")] * 4  # both APIs, twice
    assert running is None and status == -signal.SIGTERM, output
    assert output.count(f"--api-keys-db: cannot use the API key database {path}: file is not a database") == 1, output
    assert "Traceback" not in output, output
