"""The clients people point at a LibreTranslate server, unchanged, against `encdec serve`: libretranslatepy,
deep-translator and the async client libretranslate-aio (installed from PyPI), and replicas of the requests Weblate's
LibreTranslate machinery and SearXNG's engine send (their code is not installable on its own; the requests are copied
from their sources, cited in each test). Each is run with the base URL as people write it, with and without the
trailing slash, against a server of one pair (de-en) and of two (de-en, en-de), behind a key database with
suggestions on; every translation must be the line `encdec translate` writes for the same sentence, `source: auto`
included (the detected pair's), and a translated file must hold those lines."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

from encdec.serve import ServeLimits
from encdec.serve.keys import KeyDatabase
from encdec.serve.server import create_app, load_models
from encdec_cli import main
from test_libretranslate import URL
from test_libretranslate_routes import ENGLISH, GERMAN
from test_serve import Server, request

SERVED = {"one pair": ("de-en",), "two pairs": ("de-en", "en-de")}
SOURCES = {"de-en": GERMAN[:4], "en-de": ENGLISH[:4]}


@pytest.fixture(scope="module")
def expected(pairs, tmp_path_factory) -> dict[str, dict[str, str]]:
    """``encdec translate``'s line for each test sentence, by pair (the command itself, greedy as served)."""
    root = tmp_path_factory.mktemp("expected")
    lines = {}
    for pair, sentences in SOURCES.items():
        source, output = root / f"{pair}.in", root / f"{pair}.out"
        source.write_text("\n".join(sentences) + "\n", encoding="utf-8")
        assert main(["translate", "--model", str(pairs[pair]), "--input", str(source), "--output", str(output)]) == 0
        lines[pair] = dict(zip(sentences, output.read_text(encoding="utf-8").splitlines(), strict=True))
    return lines


class Instance:
    """A running server: its root URL, the pairs it serves, a key of its database and the database's path."""

    def __init__(self, server: Server, served: tuple[str, ...], key: str, database) -> None:
        self.root, self.served, self.key, self.database = server.url, served, key, database

    def bases(self) -> list[str]:
        """The LibreTranslate base URL, as written without and with the trailing slash."""
        return [f"{self.root}{URL}", f"{self.root}{URL}/"]


@pytest.fixture(scope="module", params=list(SERVED))
def instance(request, pairs, tmp_path_factory):
    served = SERVED[request.param]
    database = tmp_path_factory.mktemp("keys") / "keys.db"
    keys = KeyDatabase(database)
    key = keys.add(10_000).key
    models = load_models([f"{pair}={pairs[pair]}" for pair in served], limits=ServeLimits())
    with Server(create_app(models, keys=keys, suggestions=True)) as server:
        yield Instance(server, served, key, database)


def test_libretranslatepy(instance, expected) -> None:
    from libretranslatepy import LibreTranslateAPI

    for base in instance.bases():
        client = LibreTranslateAPI(base, api_key=instance.key)
        for pair in instance.served:
            source, target = pair.split("-")
            for sentence in SOURCES[pair][:2]:
                assert client.translate(sentence, source, target) == expected[pair][sentence]
                assert client.translate(sentence, "auto", target) == expected[pair][sentence]
                assert client.detect(sentence)[0]["language"] == source
        assert sorted(language["code"] for language in client.languages()) == ["de", "en"]


def test_deep_translator(instance, expected) -> None:
    """deep-translator's ``LibreTranslator``: it appends ``translate`` to ``custom_url`` with nothing between (so the
    URL must end with a slash), sends the fields as a query string of an empty POST, and needs an ``api_key`` even
    where the server asks none."""
    from deep_translator import LibreTranslator

    base = instance.bases()[1]
    for pair in instance.served:
        source, target = pair.split("-")
        sentences = SOURCES[pair]
        client = LibreTranslator(source=source, target=target, api_key=instance.key, custom_url=base)
        assert client.translate(sentences[0]) == expected[pair][sentences[0]]
        assert client.translate_batch(sentences[1:3]) == [expected[pair][s] for s in sentences[1:3]]
        auto = LibreTranslator(source="auto", target=target, api_key=instance.key, custom_url=base)
        assert auto.translate(sentences[3]) == expected[pair][sentences[3]]


def test_the_async_client(instance, expected, tmp_path) -> None:
    """libretranslate-aio's ``AsyncLibreTranslate``: translate (a text, a list, ``auto``), detect, languages,
    settings, translate_file (the file's lines each translated as ``encdec translate`` does) and suggest (stored in
    the key database)."""
    from libretranslate_aio import AsyncLibreTranslate

    async def session(base: str, pair: str) -> dict:
        source, target = pair.split("-")
        sentences = SOURCES[pair]
        document = tmp_path / f"{pair}.txt"
        document.write_text("\n".join(sentences[:2]) + "\n", encoding="utf-8")
        async with AsyncLibreTranslate(base, api_key=instance.key) as client:
            return {"one": (await client.translate(sentences[0], source, target)).translated_text,
                    "list": (await client.translate(sentences[1:3], source, target)).translated_text,
                    "auto": await client.translate(sentences[3], "auto", target),
                    "detect": await client.detect(sentences[0]),
                    "languages": await client.languages(),
                    "settings": await client.frontend_settings(),
                    "file": (await client.translate_file(document, source, target)).translated_file_url,
                    "suggest": await client.suggest(sentences[0], "a better one", source, target)}

    suggested = []
    for base in instance.bases():
        for pair in instance.served:
            answers = asyncio.run(session(base, pair))
            lines = expected[pair]
            sentences = SOURCES[pair]
            assert answers["one"] == lines[sentences[0]]
            assert answers["list"] == [lines[s] for s in sentences[1:3]]
            assert answers["auto"].translated_text == lines[sentences[3]]
            assert answers["auto"].detected_language.language == pair[:2]
            assert answers["detect"][0].language == pair[:2] and answers["detect"][0].confidence > 50
            assert {language.code for language in answers["languages"]} == {"de", "en"}
            assert answers["settings"].key_required and answers["settings"].suggestions
            assert {".txt", ".docx", ".odt", ".html"} <= set(answers["settings"].supported_files_format)
            with urllib.request.urlopen(answers["file"], timeout=60) as response:
                assert response.read().decode("utf-8") == f"{lines[sentences[0]]}\n{lines[sentences[1]]}\n"
            assert answers["suggest"] is True
            suggested.append((sentences[0], "a better one", *pair.split("-")))
    import sqlite3

    with sqlite3.connect(instance.database) as database:
        rows = database.execute("SELECT q, s, source, target FROM suggestions").fetchall()
    assert rows[-len(suggested):] == suggested


def test_weblate_s_requests(instance, expected) -> None:
    """Weblate's ``LibreTranslateTranslation`` (weblate/machinery/libretranslate.py): ``GET languages`` for the codes
    it offers, then one ``POST translate`` of a JSON list of up to 20 strings with the key in the body. Its settings
    form checks the service by translating "test" from English to German: that works only where en-de is served."""
    for base in instance.bases():
        status, languages, _ = request(f"{base}/languages")
        assert status == 200 and sorted(language["code"] for language in languages) == ["de", "en"]
        for pair in instance.served:
            source, target = pair.split("-")
            sentences = SOURCES[pair]
            status, answer, _ = request(f"{base}/translate", {"api_key": instance.key, "q": sentences,
                                                              "source": source, "target": target})
            assert status == 200 and answer["translatedText"] == [expected[pair][s] for s in sentences]
        status, answer, _ = request(f"{base}/translate", {"api_key": instance.key, "q": ["test"], "source": "en",
                                                          "target": "de"})
        if "en-de" in instance.served:
            assert status == 200 and len(answer["translatedText"]) == 1
        else:
            assert (status, answer) == (400, {"error": "en is not supported"})  # LibreTranslate's words


def test_searxng_s_requests(instance, expected) -> None:
    """SearXNG's ``libretranslate`` engine (searx/engines/libretranslate.py) appends ``/translate`` to its
    ``base_url`` (so a base URL with a slash asks for ``//translate``) and posts JSON with ``alternatives: 3``; it
    shows ``translatedText`` and the ``alternatives``."""
    for base in instance.bases():
        for pair in instance.served:
            source, target = pair.split("-")
            sentence = SOURCES[pair][0]
            body = json.dumps({"q": sentence, "source": source, "target": target, "alternatives": 3,
                               "api_key": instance.key}).encode()
            status, answer, _ = request(f"{base}/translate", raw=body, headers={"Content-Type": "application/json"})
            assert status == 200 and answer["translatedText"] == expected[pair][sentence]
            assert isinstance(answer["alternatives"], list) and len(answer["alternatives"]) <= 3
            assert expected[pair][sentence] not in answer["alternatives"]


def test_the_spec_describes_the_routes_relative_to_the_base_url(instance) -> None:
    for base in instance.bases():
        status, spec, _ = request(f"{base}/spec")
        assert status == 200 and spec["servers"] == [{"url": URL}]
        assert {"/translate", "/detect", "/languages", "/translate_file", "/suggest", "/frontend/settings",
                "/spec"} <= set(spec["paths"])
        assert "post" in spec["paths"]["/translate"] and "get" in spec["paths"]["/languages"]


def test_the_npm_client_s_requests(instance, expected) -> None:
    """The npm package ``libretranslate`` (src/translate.ts): ``GET {apiurl}/languages``, both codes looked up among
    them (a language served only as a target must be there), then ``POST {apiurl}/translate`` of JSON with the key as
    ``apiKey``."""
    for base in instance.bases():
        codes = [language["code"] for language in request(f"{base}/languages")[1]]
        for pair in instance.served:
            source, target = pair.split("-")
            assert source in codes and target in codes
            sentence = SOURCES[pair][1]
            status, answer, _ = request(f"{base}/translate", {"q": sentence, "source": source, "target": target,
                                                              "format": "text", "apiKey": instance.key})
            assert status == 200 and answer["translatedText"] == expected[pair][sentence]
