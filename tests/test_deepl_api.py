"""encdec serve's DeepL API (`/deepl`) over raw HTTP: keys, quotas and glossaries survive a restart on the same key
database; bad input (a glossary with a duplicate term or no tab, a pair not served, an unknown glossary, malformed
HTML, tags nested 1,000 deep, a zip bomb) is a 4xx in DeepL's shape, nothing stored, the server unharmed; a rate
limit is the Python client's `TooManyRequestsException`; `encdec keys add --char-quota` sets the quota."""

from __future__ import annotations

import io
import zipfile

import pytest

from encdec.serve import ServeLimits
from encdec.serve.keys import KeyDatabase
from encdec.serve.server import create_app, load_models
from encdec_cli import main
from test_libretranslate_routes import GERMAN
from test_serve import Server, request

URL = "/deepl/v2"


def serving(pairs, database, **options) -> Server:
    models = load_models([f"de-en={pairs['de-en']}", f"en-de={pairs['en-de']}"], limits=ServeLimits())
    return Server(create_app(models, keys=KeyDatabase(database), **options))


def call(server: Server, path: str, key: str, body: object = None, method: str | None = None, **headers):
    return request(f"{server.url}{URL}{path}", body, method, {"Authorization": f"DeepL-Auth-Key {key}", **headers})


@pytest.fixture(scope="module")
def database(tmp_path_factory):
    path = tmp_path_factory.mktemp("deepl-keys") / "keys.db"
    assert main(["keys", "--db", str(path), "add", "--key", "alice", "--char-quota", "100"]) == 0
    assert main(["keys", "--db", str(path), "add", "--key", "carol"]) == 0  # no quota
    return path


def test_keys_quota_and_glossaries_survive_a_restart(pairs, database, capsys) -> None:
    with serving(pairs, database) as server:
        status, made, _ = call(server, "/glossaries", "alice", {"name": "g", "source_lang": "de", "target_lang": "en",
                                                                "entries": "Zug\ttrain", "entries_format": "tsv"})
        assert status == 201, made
        assert call(server, "/translate", "alice", {"text": [GERMAN[0]], "target_lang": "EN-US"})[0] == 200
    with serving(pairs, database) as server:  # a new server on the same file
        _, usage, _ = call(server, "/usage", "alice", method="GET")
        assert usage == {"character_count": len(GERMAN[0]), "character_limit": 100}
        _, listed, _ = call(server, "/glossaries", "alice", method="GET")
        assert [g["glossary_id"] for g in listed["glossaries"]] == [made["glossary_id"]]
        status, entries, _ = call(server, f"/glossaries/{made['glossary_id']}/entries", "alice", method="GET")
        assert (status, entries) == (200, "Zug\ttrain")
        status, over, _ = call(server, "/translate", "alice", {"text": [GERMAN[1] * 3], "target_lang": "EN-US"})
        assert status == 456 and over["message"] == "Quota exceeded", over
        assert call(server, "/translate", "nobody", {"text": ["x"], "target_lang": "EN-US"})[0] == 403
    main(["keys", "--db", str(database), "list"])
    assert "alice: 60 requests a minute, 100 characters a month through DeepL's API" in capsys.readouterr().out


def a_docx_bomb() -> bytes:
    """A .docx whose document part unpacks to 200 MB of nothing: refused from the archive's directory."""
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", b"\0" * 200_000_000)
    return data.getvalue()


def a_docx_with_an_external_entity() -> bytes:
    """A real .docx whose document part declares an entity that reads /etc/passwd (XXE)."""
    import docx

    made = io.BytesIO()
    document = docx.Document()
    document.add_paragraph("Hallo")
    document.save(made)
    source, out = zipfile.ZipFile(made), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for entry in source.infolist():
            data = source.read(entry)
            if entry.filename == "word/document.xml":
                declaration = b'<!DOCTYPE w:document [<!ENTITY secret SYSTEM "file:///etc/passwd">]>'
                data = data.replace(b"?>", b"?>" + declaration, 1).replace(b"Hallo", b"&secret;")
            archive.writestr(entry, data)
    return out.getvalue()


def multipart(fields: dict[str, str], name: str, data: bytes) -> tuple[bytes, str]:
    boundary = "encdecboundary"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                 "Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


BAD = {  # a request -> the status and a piece of its detail
    "a duplicate term": ("/glossaries", {"name": "g", "source_lang": "de", "target_lang": "en",
                                         "entries": "Zug\ttrain\nZug\trailcar"}, 400, "line 2"),
    "no tab": ("/glossaries", {"name": "g", "source_lang": "de", "target_lang": "en", "entries": "Zug,train"}, 400,
               "no tab"),
    "an empty term": ("/glossaries", {"name": "g", "source_lang": "de", "target_lang": "en", "entries": "Zug\t "},
                      400, "empty"),
    "a pair not served": ("/glossaries", {"name": "g", "source_lang": "de", "target_lang": "fr",
                                          "entries": "Zug\ttrain"}, 400, "not supported"),
    "an unknown glossary": ("/translate", {"text": ["Zug"], "source_lang": "DE", "target_lang": "EN-US",
                                           "glossary_id": "nope"}, 404, "no glossary nope"),
    "an unknown target": ("/translate", {"text": ["Zug"], "target_lang": "JA"}, 400, "target_lang"),
    "no text": ("/translate", {"target_lang": "EN-US"}, 400, "'text' not specified"),
    "unclosed markup": ("/translate", {"text": ["<b>Zug"], "source_lang": "DE", "target_lang": "EN-US",
                                       "tag_handling": "html"}, 400, "text"),
    "a stray <": ("/translate", {"text": ["a < b"], "source_lang": "DE", "target_lang": "EN-US",
                                 "tag_handling": "xml"}, 400, "text"),
    "tags 1,000 deep": ("/translate", {"text": ["<b>" * 1000 + "Zug" + "</b>" * 1000], "source_lang": "DE",
                                       "target_lang": "EN-US", "tag_handling": "html"}, 400, "deep"),
    "a bad tag_handling": ("/translate", {"text": ["Zug"], "target_lang": "EN-US", "tag_handling": "pdf"}, 400,
                           "tag_handling"),
}


def test_bad_input_is_refused_in_deepls_shape_and_nothing_is_stored(pairs, database) -> None:
    with serving(pairs, database) as server:
        before = call(server, "/glossaries", "carol", method="GET")[1]
        for what, (path, body, status, piece) in BAD.items():
            got, answer, _ = call(server, path, "carol", body)
            assert got == status and piece in answer["detail"], (what, got, answer)
            assert set(answer) == {"message", "detail"}, what
        for name, data, status, piece in (("bomb.docx", a_docx_bomb(), 413, "unpack"),
                                          ("entities.docx", a_docx_with_an_external_entity(), 400, "DTD")):
            raw, kind = multipart({"target_lang": "EN-US", "source_lang": "DE"}, name, data)
            got, answer, _ = request(f"{server.url}{URL}/document", raw=raw,
                                     headers={"Authorization": "DeepL-Auth-Key carol", "Content-Type": kind})
            assert got == status and piece in answer["detail"], answer
        deep = request(f"{server.url}{URL}/translate", raw=b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                       headers={"Authorization": "DeepL-Auth-Key carol", "Content-Type": "application/json"})
        assert deep[0] == 400 and "deep" in deep[1]["detail"], deep[1]
        assert call(server, "/glossaries", "carol", method="GET")[1] == before  # nothing stored
        assert call(server, "/translate", "carol", {"text": [GERMAN[0]], "source_lang": "DE",
                                                    "target_lang": "EN-US"})[0] == 200  # unharmed


def test_a_rate_limit_is_the_clients_too_many_requests(pairs, tmp_path, monkeypatch) -> None:
    deepl = pytest.importorskip("deepl")
    database = tmp_path / "keys.db"
    KeyDatabase(database).add(2, "bob")
    monkeypatch.setattr(deepl.http_client, "max_network_retries", 1)  # one retry, then the client's exception
    with serving(pairs, database) as server:
        client = deepl.DeepLClient("bob", server_url=f"{server.url}/deepl")  # no trailing slash: the root paths
        client.translate_text(GERMAN[0], source_lang="DE", target_lang="EN-US")
        client.translate_text(GERMAN[0], source_lang="DE", target_lang="EN-US")
        with pytest.raises(deepl.TooManyRequestsException):
            client.translate_text(GERMAN[0], source_lang="DE", target_lang="EN-US")
        status, answer, headers = call(server, "/translate", "bob", {"text": ["x"], "target_lang": "EN-US"})
    assert status == 429 and answer["message"] == "Too many requests" and int(headers["retry-after"]) > 0


def test_split_sentences_and_preserve_formatting(pairs, database) -> None:
    """``split_sentences=0`` decodes a text whole, as the native API decodes one text; ``nonewlines`` reads a
    newline as a space; ``1`` cuts lines and sentences, as LibreTranslate's API; ``context`` changes nothing."""
    first, second = GERMAN[1], "Danke sehr."
    two = f"{first} {second}"
    with serving(pairs, database) as server:
        def deepl(text: str, **fields) -> str:
            status, answer, _ = call(server, "/translate", "carol", {"text": [text], "source_lang": "DE",
                                                                     "target_lang": "EN-US", **fields})
            assert status == 200, answer
            return answer["translations"][0]["text"]

        native = request(f"{server.url}/translate", {"text": two, "source": "de", "target": "en"},
                         headers={"Authorization": "Bearer carol"})[1]
        native = native["translations"][0]["text"] if "translations" in native else native
        split = request(f"{server.url}/libretranslate/translate", {"q": f"{first}\n{second}", "source": "de",
                                                                   "target": "en", "api_key": "carol"})[1]
        assert deepl(two, split_sentences="0") == native
        assert deepl(f"{first}\n{second}", split_sentences="1") == split["translatedText"]
        assert deepl(f"{first}\n{second}", split_sentences="nonewlines") == deepl(two)
        assert deepl(two, context="Ein Satz davor.") == deepl(two)


@pytest.mark.parametrize(("source", "translation", "kept"), [
    ("hallo welt", "Hello world.", "hello world"),  # lower case at the start, no final stop: as the source
    ("Hallo Welt!", "hello world", "Hello world!"),
    ("  Hallo.\n", "Hello.", "  Hello.\n"),  # the whitespace around it
    ("123 Euro", "123 euros.", "123 euros"),
])
def test_preserve_formatting_keeps_the_sources_case_punctuation_and_spaces(source, translation, kept) -> None:
    from encdec.serve.deepl.translation import keep_formatting

    assert keep_formatting(source, translation) == kept
