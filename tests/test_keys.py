"""API keys in SQLite (encdec.serve.keys): `encdec keys --db PATH add | remove | list`, a server that takes the keys
of the file while `encdec keys` changes it, the file kept across a restart, a LibreTranslate key database opened as it
is, and every file that cannot be used refused at start in one line that names it."""

from __future__ import annotations

import sqlite3
import uuid

import pytest

from encdec.cli import main
from encdec.errors import EncdecError
from encdec.serve.keys import SCHEMA_VERSION, ApiKey, KeyDatabase
from encdec.serve.server import create_app, load_models
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
    assert sqlite3.connect(db).execute("PRAGMA journal_mode").fetchone() == ("wal",)


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
        (f"encdec serve: error: the API key database {newer} has schema version {SCHEMA_VERSION + 1}, newer than "
         f"this encdec reads ({SCHEMA_VERSION}); upgrade encdec, or give another file.\n")
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
        with pytest.raises(EncdecError, match=f"cannot use the API key database {path}: database is locked"):
            KeyDatabase(path, timeout=0.1)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert KeyDatabase(path).all() == []


def test_encdec_serve_takes_the_flags_of_keys_limits_and_metrics(folder, tmp_path) -> None:
    """The command line hands every flag on: the key database, the limits (in /info and LibreTranslate's settings),
    suggestions and metrics."""
    db = tmp_path / "keys.db"
    key = KeyDatabase(db).add(7, key="mine").key
    flags = ["--api-keys-db", str(db), "--req-limit", "2", "--char-limit", "20", "--max-queue", "5", "--suggestions",
             "--metrics"]
    with ServeProcess("--model", f"de-en={folder}", *flags) as server:
        info = request(f"{server.url}/info", headers={"X-API-Key": key})[1]
        settings = request(f"{server.url}{LT}/frontend/settings")[1]
        metrics = request(f"{server.url}/metrics", headers={"X-API-Key": key})
        suggested = request(f"{server.url}{LT}/suggest", {"q": "a", "s": "b", "source": "de", "target": "en",
                                                          "api_key": key})[:2]
    assert {name: info["limits"][name] for name in ("req_limit", "char_limit", "max_queue")} == \
        {"req_limit": 2, "char_limit": 20, "max_queue": 5}
    assert (settings["charLimit"], settings["keyRequired"], settings["suggestions"]) == (20, True, True)
    assert metrics[0] == 200 and "encdec_http_requests_total" in metrics[1]
    assert suggested == (200, {"success": True})
