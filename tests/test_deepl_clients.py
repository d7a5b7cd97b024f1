"""DeepL's official Python client (`deepl`, from PyPI), unchanged, against `encdec serve`'s DeepL API (`/deepl`): a
live server of two pairs (de-en, en-de) behind a key database. Every translation must be the line `encdec translate`
writes for the same sentence (greedy, as served); a glossary's term must be in the translation; glossaries, keys and
quotas must survive a restart of the server on the same database; a wrong key, an exhausted quota and a rate limit
must raise the client's own exceptions, without hanging."""

from __future__ import annotations

import io
import json
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from encdec.folders import save_for_pipeline
from encdec.inference import load_engine, translate
from encdec.serve import ServeLimits
from encdec.serve.keys import KeyDatabase
from encdec.serve.server import create_app, load_models
from test_glossary import year_sources
from test_libretranslate_routes import ENGLISH, GERMAN
from test_serve import Server

deepl = pytest.importorskip("deepl")
from deepl.api_data import MultilingualGlossaryDictionaryEntries  # noqa: E402


class Instance:
    """A running server's DeepL URL, a key of its database, one with a small quota, the served folders and the
    held-out dates whose year is a word (the glossary's terms)."""

    def __init__(self, url: str, keys: dict[str, str], folders: dict, years: list[str]) -> None:
        self.url, self.folders, self.years = url, folders, years
        self.key, self.quota_key, self.limited_key = keys["key"], keys["quota"], keys["limited"]

    def client(self, key: str | None = None) -> deepl.DeepLClient:
        return deepl.DeepLClient(key or self.key, server_url=self.url)

    def translate(self, pair: str, sentences: list[str], glossary: dict | None = None) -> list[str]:
        """What the Python API gives (greedy, as served)."""
        engine, tokenizer = load_engine(self.folders[pair])
        return translate(engine, tokenizer, sentences, glossary=glossary)


@pytest.fixture(scope="module")
def instance(pairs, aligned_models, aligned_dates, tmp_path_factory):
    """de-en: the date-alignment Transformer (its years take a glossary's terms); en-de: the RNN of ``pairs``."""
    root = tmp_path_factory.mktemp("deepl")
    folders = {"de-en": save_for_pipeline(aligned_models["transformer"], aligned_dates[0], root / "de-en"),
               "en-de": pairs["en-de"]}
    keys = KeyDatabase(root / "keys.db")
    made = {"key": keys.add(10_000).key, "quota": keys.add(10_000).key, "limited": keys.add(1).key}
    keys.set_quota(made["quota"], 80)
    models = load_models([f"{pair}={folder}" for pair, folder in folders.items()], limits=ServeLimits())
    with Server(create_app(models, keys=keys)) as server:
        yield Instance(f"{server.url}/deepl", made, folders, year_sources(aligned_dates[2])[:3])


def test_translate_text_one_a_list_auto_source_and_a_variant(instance) -> None:
    client = instance.client()
    german = GERMAN[:3]
    expected = instance.translate("de-en", german)
    one = client.translate_text(german[0], source_lang="DE", target_lang="EN-US")
    assert (one.text, one.detected_source_lang, one.billed_characters) == (expected[0], "DE", len(german[0]))
    many = client.translate_text(german, target_lang="EN-GB")  # no source: each text's language detected
    assert [result.text for result in many] == expected
    assert {result.detected_source_lang for result in many} == {"DE"}
    mixed = client.translate_text([GERMAN[1], ENGLISH[1]], target_lang="DE")
    assert [result.detected_source_lang for result in mixed] == ["DE", "EN"]
    assert [result.text for result in mixed] == [GERMAN[1], *instance.translate("en-de", [ENGLISH[1]])]


def test_languages_and_glossary_pairs(instance) -> None:
    client = instance.client()
    assert [language.code for language in client.get_source_languages()] == ["DE", "EN"]
    targets = client.get_target_languages()
    assert [language.code for language in targets] == ["DE", "EN-GB", "EN-US"]
    assert not any(language.supports_formality for language in targets)
    assert sorted((pair.source_lang, pair.target_lang) for pair in client.get_glossary_languages()) == \
        [("de", "en"), ("en", "de")]  # lower case, as DeepL's own answer


def year_glossary(instance) -> dict[str, str]:
    """Each test date's year as a word of its own (the model writes the year first)."""
    return {source.split(", ")[-1]: f"Y{source.split(', ')[-1]}" for source in instance.years}


def test_glossary_create_list_entries_translate_delete(instance) -> None:
    """A v2 glossary made from entries gives the Python API's translation with the same glossary; listed, read
    back, deleted."""
    client = instance.client()
    entries = year_glossary(instance)
    expected = instance.translate("de-en", instance.years, glossary=entries)
    assert expected != instance.translate("de-en", instance.years)
    glossary = client.create_glossary("years", "DE", "EN", entries)
    assert (glossary.source_lang, glossary.target_lang, glossary.entry_count, glossary.ready) == \
        ("DE", "EN", len(entries), True)
    assert glossary.glossary_id in [g.glossary_id for g in client.list_glossaries()]
    assert client.get_glossary_entries(glossary) == entries
    found = client.translate_text(instance.years, source_lang="DE", target_lang="EN-US", glossary=glossary)
    assert [result.text for result in found] == expected
    client.delete_glossary(glossary)
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.get_glossary(glossary.glossary_id)


def test_multilingual_glossary_v3(instance) -> None:
    """v3: made with a dictionary per pair, listed, read, used; a dictionary updated (merged), replaced and deleted,
    the glossary renamed and deleted."""
    client = instance.client()
    entries = year_glossary(instance)
    made = client.create_multilingual_glossary("both ways", [
        MultilingualGlossaryDictionaryEntries("DE", "EN", entries),
        MultilingualGlossaryDictionaryEntries("EN", "DE", {"train": "Bahn"})])
    assert sorted((d.source_lang, d.target_lang, d.entry_count) for d in made.dictionaries) == \
        [("DE", "EN", len(entries)), ("EN", "DE", 1)]
    assert made.glossary_id in [g.glossary_id for g in client.list_multilingual_glossaries()]
    assert client.get_multilingual_glossary_entries(made, "EN", "DE").dictionaries[0].entries == "train\tBahn"
    found = client.translate_text(instance.years, source_lang="DE", target_lang="EN-GB", glossary=made)
    assert [result.text for result in found] == instance.translate("de-en", instance.years, glossary=entries)
    updated = client.update_multilingual_glossary_dictionary(  # merged into the pair's entries, the new term wins
        made, MultilingualGlossaryDictionaryEntries("EN", "DE", {"plane": "Flugzeug", "train": "Zug"}))
    assert sorted((d.source_lang, d.entry_count) for d in updated.dictionaries) == [("DE", len(entries)), ("EN", 2)]
    assert client.get_multilingual_glossary_entries(made, "EN", "DE").dictionaries[0].entries == \
        "train\tZug\nplane\tFlugzeug"
    replaced = client.replace_multilingual_glossary_dictionary(
        made, MultilingualGlossaryDictionaryEntries("EN", "DE", {"car": "Auto"}))
    assert (replaced.source_lang, replaced.target_lang, replaced.entry_count) == ("EN", "DE", 1)
    assert client.update_multilingual_glossary_name(made, "renamed").name == "renamed"
    client.delete_multilingual_glossary_dictionary(made, source_lang="EN", target_lang="DE")
    assert client.get_glossary(made.glossary_id).entry_count == len(entries)  # one pair left: v2 reads it
    client.delete_multilingual_glossary(made)
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.get_multilingual_glossary(made.glossary_id)


def test_bad_requests_are_the_clients_errors(instance) -> None:
    """A glossary with a duplicate term, of a pair not served directly, an unknown id, a formality the models do
    not have: each the client's exception carrying the server's reason."""
    client = instance.client()
    with pytest.raises(deepl.DeepLException, match="line 2"):
        client.create_glossary_from_csv("dup", "DE", "EN", "Zug,train\nZug,railcar\n")
    with pytest.raises(deepl.DeepLException, match="not supported"):
        client.create_glossary("pair", "DE", "FR", {"Zug": "train"})
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.get_glossary_entries("no-such-glossary")
    with pytest.raises(deepl.DeepLException, match="no glossary no-such-glossary"):
        client.translate_text(GERMAN[0], source_lang="DE", target_lang="EN-US", glossary="no-such-glossary")
    with pytest.raises(deepl.DeepLException, match="formality"):
        client.translate_text(GERMAN[0], target_lang="EN-US", formality="more")
    assert client.translate_text(GERMAN[0], target_lang="EN-US", formality="prefer_more").text == \
        instance.translate("de-en", [GERMAN[0]])[0]


def test_usage_and_quota(instance) -> None:
    client = instance.client(instance.quota_key)
    assert (client.get_usage().character.count, client.get_usage().character.limit) == (0, 80)
    client.translate_text(GERMAN[1], source_lang="DE", target_lang="EN-US")
    assert client.get_usage().character.count == len(GERMAN[1])
    with pytest.raises(deepl.QuotaExceededException):
        client.translate_text(GERMAN[3], source_lang="DE", target_lang="EN-US")
    assert client.get_usage().character.count == len(GERMAN[1])  # a refused request is not charged


def test_a_wrong_key_is_the_clients_authorization_error(instance) -> None:
    with pytest.raises(deepl.AuthorizationException):
        instance.client("not-a-key").translate_text(GERMAN[0], target_lang="EN-US")


def test_translate_document_txt_docx_and_html(instance, tmp_path) -> None:
    import docx

    client = instance.client()
    expected = instance.translate("de-en", GERMAN[:2])
    out = io.BytesIO()
    client.translate_document(GERMAN[0].encode(), out, source_lang="DE", target_lang="EN-US", filename="a.txt")
    assert out.getvalue().decode() == expected[0]
    document = docx.Document()
    for sentence in GERMAN[:2]:
        document.add_paragraph(sentence)
    source, target = tmp_path / "a.docx", tmp_path / "a.en.docx"
    document.save(source)
    client.translate_document_from_filepath(source, target, source_lang="DE", target_lang="EN-US")
    assert [p.text for p in docx.Document(target).paragraphs] == expected
    page = io.BytesIO()
    client.translate_document(f"<html><body><p>{GERMAN[0]}</p></body></html>".encode(), page, source_lang="DE",
                              target_lang="EN-US", filename="a.html")
    assert page.getvalue().decode() == f"<html><body><p>{expected[0]}</p></body></html>"
    with zipfile.ZipFile(target) as archive:
        assert archive.testzip() is None


NODE_CLIENTS = Path(__file__).parent / "node_clients"


def test_deepl_node(instance) -> None:
    """deepl-node (npm, pinned by tests/node_clients/package-lock.json; `make test` installs it): translate (one text,
    a list with the source detected, a glossary), glossary create / list / entries / delete, usage, and a wrong key,
    an exhausted quota, an unknown glossary and a rate limit as its own errors (no retry: it fails at once)."""
    if not (NODE_CLIENTS / "node_modules" / "deepl-node").is_dir() and not os.environ.get("CI"):
        pytest.skip("deepl-node is not installed: `make test` installs it (cd tests/node_clients && npm ci)")
    german, entries = GERMAN[:2], year_glossary(instance)
    given = {"url": instance.url, "key": instance.key, "wrongKey": "not-a-key", "quotaKey": instance.quota_key,
             "limitedKey": instance.limited_key,
             "texts": german, "glossary": entries, "glossaryTexts": instance.years}
    done = subprocess.run(["node", "deepl_client.mjs"], cwd=NODE_CLIENTS, input=json.dumps(given), text=True,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    expected = instance.translate("de-en", german)
    assert found["one"] == {"text": expected[0], "detected": "de"}
    assert found["many"] == [{"text": text, "detected": "de"} for text in expected]
    assert found["glossary"]["entryCount"] == len(entries) and found["glossary"]["entries"] == entries
    assert found["glossary"]["id"] in found["glossary"]["listed"]
    assert found["glossary"]["pairs"] == [f"de-en:{len(entries)}", "en-de:1"]  # v3, from deepl-node's form body
    assert found["withGlossary"] == instance.translate("de-en", instance.years, glossary=entries)
    assert found["usage"]["limit"] == 80
    assert found["errors"] == {"overQuota": "QuotaExceededError", "wrongKey": "AuthorizationError",
                               "gone": "GlossaryNotFoundError", "overLimit": "TooManyRequestsError"}


def test_tag_handling_puts_the_tags_on_the_aligned_words(instance) -> None:
    """``tag_handling`` html and xml: the date model writes "25 March 1965" as "1965 03 25"; each tag goes around
    the word aligned to its own (tests/test_markup_serving.py has the same model through LibreTranslate's API), an
    ignored tag's content stays as written; with a glossary, around the words its term put in."""
    client = instance.client()
    html = client.translate_text('<p class="x"><b>25</b> March <i>1965</i></p>', source_lang="DE",
                                 target_lang="EN-US", tag_handling="html")
    assert html.text == '<p class="x"><i>1965</i> 03 <b>25</b></p>'
    xml = client.translate_text("<doc><b>25</b> March 1965 <k>25 &amp; March</k></doc>", source_lang="DE",
                                target_lang="EN-US", tag_handling="xml", ignore_tags=["k"])
    assert xml.text == "<doc>1965 03 <b>25</b><k>25 &amp; March</k></doc>"
    glossary = client.create_glossary("year", "DE", "EN", {"1965": "the year MCMLXV"})
    termed = client.translate_text("<b>25</b> March <i>1965</i>", source_lang="DE", target_lang="EN-US",
                                   tag_handling="html", glossary=glossary)
    assert termed.text == "<i>the year MCMLXV</i> 03 <b>25</b>"  # the tag on the words the term took the place of
    client.delete_glossary(glossary)


def test_a_docx_and_an_odt_keep_their_formatting_on_the_aligned_words(instance) -> None:
    """``translate_document`` of the dates .docx and .odt of tests/test_markup_serving.py (the same model): the
    translated files hold what LibreTranslate's ``/translate_file`` gives there, run by run."""
    import docx
    import odfdo

    from test_markup_serving import a_docx, an_odt

    client = instance.client()
    translated = {}
    for name, data in (("dates.docx", a_docx()), ("dates.odt", an_odt())):
        out = io.BytesIO()
        client.translate_document(data, out, source_lang="DE", target_lang="EN-GB", filename=name)
        translated[name] = out.getvalue()
    plain, linked = docx.Document(io.BytesIO(translated["dates.docx"])).paragraphs
    assert [(run.text, bool(run.bold), bool(run.italic)) for run in plain.runs] == [
        ("1965", False, True), (" ", False, False), ("03", True, False), (" 25", False, False)]
    assert [(type(item).__name__, item.text) for item in linked.iter_inner_content()] == [
        ("Run", "1954 "), ("Hyperlink", "12"), ("Run", " 04")]
    plain, linked = odfdo.Document(io.BytesIO(translated["dates.odt"])).body.children
    assert plain.serialize() == ('<text:p><text:span text:style-name="Emphasis">1965</text:span><text:s/>'
                                 '<text:span text:style-name="Strong">03</text:span><text:s/>25</text:p>')
