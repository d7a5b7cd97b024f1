"""One multilingual model on `encdec serve` serves every direction between its languages: through the native API
(``source``/``target`` choose the direction), LibreTranslate's API (``/translate``, ``/translate_file``,
``/languages``, ``source: "auto"``) and its clients (libretranslatepy, deep-translator, the npm client's requests),
each answer equal to ``encdec.inference.translate(..., source_lang=, target_lang=)``; served beside a model of one
pair, that model serves the pair unless a request names the multilingual one; the page offers every direction; a
language token typed in a text is refused.

The model is the toy task of ``test_multilingual_model`` (digits; the target "language" decides the output: copy,
reverse, sort), trained once for this module, its languages renamed to real codes (de, en, fr) so that LibreTranslate's
names and detection apply: only ``language_tokens`` and ``languages`` change, the tokens stay as trained.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from encdec.folders import save_for_pipeline
from encdec.inference import load_model_and_tokenizer, translate
from encdec.serve import ServeLimits
from encdec.serve.detection import served_sources
from encdec.serve.server import create_app, load_models
from encdec_cli import main
from test_libretranslate import URL
from test_multilingual_model import LANGUAGES, SOURCES, trained_model
from test_serve import Server, chromium_driver, request, translated_on_page
from test_translate_file import download, upload

CODES = dict(zip(("de", "en", "fr"), LANGUAGES, strict=True))  # served code -> the toy's token's language
DIRECTIONS = [(source, target) for source in CODES for target in CODES if source != target]
TEXTS = SOURCES[:4]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trained toy Transformer, saved as ``encdec train`` saves a model, its languages named de, en and fr."""
    model, tokenizer = trained_model("transformer")
    tokenizer.src_lang, tokenizer.tgt_lang = LANGUAGES[0], None
    folder = save_for_pipeline(model, tokenizer, tmp_path_factory.mktemp("serve-multilingual") / "multi")
    for name, key, value in (("config.json", "languages", list(CODES)),
                             ("tokenizer_config.json", "language_tokens",
                              {code: f"__{language}__" for code, language in CODES.items()})):
        data = json.loads((folder / name).read_text(encoding="utf-8"))
        (folder / name).write_text(json.dumps({**data, key: value, **({"src_lang": "de"} if "src_lang" in data
                                                                      else {})}), encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def expected(model_dir: Path) -> dict[tuple[str, str], list[str]]:
    """``encdec.inference.translate``'s translations of ``TEXTS`` in every direction (the model's default decoding,
    as served)."""
    model, tokenizer = load_model_and_tokenizer(str(model_dir))
    return {(s, t): translate(model, tokenizer, TEXTS, source_lang=s, target_lang=t) for s, t in DIRECTIONS}


def serve(*models: str, **options) -> Server:
    return Server(create_app(load_models(list(models), limits=ServeLimits()), **options))


def test_the_model_learnt_its_directions(expected) -> None:
    """The toy model does what each target language says, so a wrong direction would show in the answers."""
    assert expected[("de", "en")] == [" ".join(text.split()[::-1]) for text in TEXTS]
    assert expected[("en", "fr")] == [" ".join(sorted(text.split())) for text in TEXTS]


def test_every_direction_through_both_apis_equals_translate(model_dir, expected) -> None:
    with serve(str(model_dir)) as server:
        for source, target in DIRECTIONS:
            status, native, _ = request(f"{server.url}/translate", {"text": TEXTS, "source": source,
                                                                    "target": target})
            assert status == 200, native
            assert [t["text"] for t in native["translations"]] == expected[(source, target)]
            assert "pivot" not in native
            status, libre, _ = request(f"{server.url}{URL}/translate", {"q": TEXTS, "source": source.upper(),
                                                                        "target": target})
            assert (status, libre["translatedText"]) == (200, expected[(source, target)])
            status, one, _ = request(f"{server.url}/translate", {"text": TEXTS[0], "source": source, "target": target,
                                                                 "split_sentences": True, "num_beams": 2})
            assert (status, one["translations"][0]["text"]) == (200, expected[(source, target)][0])


def test_requests_of_every_direction_at_once_are_batched_by_direction(model_dir, expected) -> None:
    """Six directions sent together, while the batcher waits 300 ms to fill a batch: each batch holds one target
    language (its forced token), so every answer is its own direction's."""
    app = create_app(load_models([str(model_dir)], limits=ServeLimits(max_wait_ms=300)))
    with Server(app) as server, ThreadPoolExecutor(len(DIRECTIONS)) as pool:
        found = list(pool.map(lambda d: request(f"{server.url}/translate", {"text": TEXTS, "source": d[0],
                                                                            "target": d[1]}), DIRECTIONS))
    assert [[t["text"] for t in answer["translations"]] for _, answer, _ in found] == [expected[d] for d in DIRECTIONS]


def test_encdec_translate_gives_the_same_line(model_dir, expected, tmp_path) -> None:
    source_file, output = tmp_path / "in.txt", tmp_path / "out.txt"
    source_file.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(model_dir), "--input", str(source_file), "--output", str(output),
                 "--source-lang", "fr", "--target-lang", "en"]) == 0
    assert output.read_text(encoding="utf-8").splitlines() == expected[("fr", "en")]


def test_languages_info_and_the_page_list_every_direction(model_dir) -> None:
    with serve(str(model_dir)) as server:
        _, languages, _ = request(f"{server.url}{URL}/languages")
        _, info, _ = request(f"{server.url}/info")
        _, settings, _ = request(f"{server.url}{URL}/frontend/settings")
    assert languages == [{"code": "de", "name": "German", "targets": ["en", "fr"]},
                         {"code": "en", "name": "English", "targets": ["de", "fr"]},
                         {"code": "fr", "name": "French", "targets": ["de", "en"]}]
    assert info["models"][0]["name"] == "multi" and info["models"][0]["source"] is None
    assert info["models"][0]["directions"] == [list(d) for d in DIRECTIONS]
    assert (settings["language"]["source"]["code"], settings["language"]["target"]["code"]) == ("de", "en")


def test_the_page_offers_every_direction_in_chromium(model_dir, expected, pairs) -> None:
    """The page's selector: the model of one pair, then each direction of the multilingual model; a direction
    chosen there translates as ``translate`` does."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = chromium_driver()
    try:
        with serve(f"de-en={pairs['de-en']}", str(model_dir)) as server:
            driver.get(f"{server.url}/")
            wait = WebDriverWait(driver, 30)
            wait.until(lambda d: d.find_element(By.ID, "pair").is_displayed())
            pair = Select(driver.find_element(By.ID, "pair"))
            assert [option.text for option in pair.options] == ["de \u2192 en"] + [
                f"{s} \u2192 {t} (multi)" for s, t in DIRECTIONS]
            pair.select_by_visible_text("en \u2192 fr (multi)")
            assert translated_on_page(driver, TEXTS[0]) == [expected[("en", "fr")][0]]
    finally:
        driver.quit()


def test_a_model_of_one_pair_serves_it_unless_the_multilingual_one_is_named(model_dir, expected, pairs) -> None:
    """The documented rule: ``--model de-en=BILINGUAL --model MULTILINGUAL``: de-en goes to the bilingual model
    (listed either way round), the multilingual one serves its other directions and de-en when named."""
    model, tokenizer = load_model_and_tokenizer(str(pairs["de-en"]))
    bilingual = translate(model, tokenizer, TEXTS)
    assert bilingual != expected[("de", "en")]
    for order in ((f"de-en={pairs['de-en']}", str(model_dir)), (str(model_dir), f"de-en={pairs['de-en']}")):
        with serve(*order) as server:
            found = {}
            for name, body in (("pair", {}), ("named", {"model": "multi"}), ("other", {})):
                direction = ("fr", "en") if name == "other" else ("de", "en")
                status, answer, _ = request(f"{server.url}/translate", {"text": TEXTS, "source": direction[0],
                                                                        "target": direction[1], **body})
                assert status == 200, answer
                found[name] = [t["text"] for t in answer["translations"]]
            _, libre, _ = request(f"{server.url}{URL}/translate", {"q": TEXTS, "source": "de", "target": "en"})
        assert found == {"pair": bilingual, "named": expected[("de", "en")], "other": expected[("fr", "en")]}
        assert libre["translatedText"] == bilingual


def test_a_named_multilingual_model_and_a_pivot(model_dir, expected, pairs) -> None:
    """A pair the multilingual model reaches only through another model pivots; a request naming it needs both
    languages, in any case."""
    with serve(str(model_dir), f"en-de={pairs['en-de']}") as server:
        named = request(f"{server.url}/translate", {"text": TEXTS, "model": "multi", "source": "FR", "target": "de"})
        missing = request(f"{server.url}/translate", {"text": TEXTS, "model": "multi", "source": "fr"})
        _, languages, _ = request(f"{server.url}{URL}/languages")
    assert [t["text"] for t in named[1]["translations"]] == expected[("fr", "de")]
    assert missing[0] == 422 and "multi is multilingual (de, en, fr): give source and target" in missing[1]["error"]
    assert [language["targets"] for language in languages] == [["en", "fr"], ["de", "fr"], ["de", "en"]]


def test_source_auto_detects_among_the_languages_that_reach_the_target(model_dir, pairs) -> None:
    models = load_models([str(model_dir), f"en-de={pairs['en-de']}"], limits=ServeLimits())
    assert served_sources(models, "fr") == ["de", "en"]
    assert served_sources(models, "de") == ["en", "fr"]
    with serve(str(model_dir)) as server:  # digits carry no language: the detector is asked among de, en, fr
        status, answer, _ = request(f"{server.url}{URL}/translate", {"q": TEXTS[0], "source": "auto", "target": "fr"})
        _, detected, _ = request(f"{server.url}{URL}/detect", {"q": "the cat sat on the mat"})
    assert status == 400 and "cannot be detected" in answer["error"]
    assert detected[0]["language"] == "en"


def test_a_file_is_translated_in_every_direction(model_dir, expected) -> None:
    with serve(str(model_dir)) as server:
        for source, target in DIRECTIONS[:3]:
            status, answer, _ = upload(server, "digits.txt", ("\n".join(TEXTS) + "\n").encode(), source=source,
                                       target=target)
            assert status == 200, answer
            got, data, _ = download(answer["translatedFileUrl"])
            assert got == 200 and data.decode("utf-8").splitlines() == expected[(source, target)]


@pytest.mark.parametrize(("body", "status", "words"), [
    ({"text": "__copy__ 1 2", "source": "de", "target": "en"}, 422, "language token '__copy__'"),
    ({"text": ["1 2", "3 __rev__"], "source": "de", "target": "en"}, 422, "text[1]: the text holds the language"),
    ({"text": "1 2", "source": "de", "target": "xx"}, 422, "no model translates de into xx"),
    ({"text": "1 2"}, 422, "multi is multilingual (de, en, fr): give source and target"),
    ({"text": "1 2", "model": "multi", "source": "de", "target": "it"}, 422, "multi has no language 'it'"),
])
def test_refusals_are_one_line(model_dir, body, status: int, words: str) -> None:
    with serve(str(model_dir)) as server:
        got, answer, _ = request(f"{server.url}/translate", body)
        libre = request(f"{server.url}{URL}/translate", {"q": "__sort__ 1", "source": "de", "target": "en"})
    assert got == status and words in answer["error"] and "\n" not in answer["error"]
    assert libre[0] == 400 and "language token" in libre[1]["error"]


def test_libretranslate_s_clients_translate_every_direction(model_dir, expected) -> None:
    """libretranslatepy, deep-translator (its URL ends with a slash; it needs a key even where none is asked) and the
    npm client's requests (``GET /languages``, both codes looked up there, then ``POST /translate`` with ``apiKey``)."""
    from deep_translator import LibreTranslator
    from libretranslatepy import LibreTranslateAPI

    with serve(str(model_dir)) as server:
        base = f"{server.url}{URL}"
        client = LibreTranslateAPI(base)
        codes = [language["code"] for language in request(f"{base}/languages")[1]]
        assert sorted(language["code"] for language in client.languages()) == codes == ["de", "en", "fr"]
        for source, target in DIRECTIONS:
            assert client.translate(TEXTS[0], source, target) == expected[(source, target)][0]
            deep = LibreTranslator(source=source, target=target, api_key="any", custom_url=f"{base}/")
            assert deep.translate_batch(TEXTS[1:3]) == expected[(source, target)][1:3]
            status, answer, _ = request(f"{base}/translate", {"q": TEXTS[3], "source": source, "target": target,
                                                              "format": "text", "apiKey": ""})
            assert status == 200 and answer["translatedText"] == expected[(source, target)][3]


@pytest.mark.parametrize(("engine", "export"), [("ctranslate2", "ctranslate2"), ("onnxruntime", "onnx")])
def test_exported_engines_serve_every_direction_as_torch(model_dir, expected, engine: str, export: str,
                                                         tmp_path) -> None:
    """An export of the multilingual model (``encdec export``), served by its engine: every direction equals torch's
    translation (CTranslate2 takes the target token as its target prefix; ONNX Runtime forces it)."""
    exported = tmp_path / engine
    assert main(["export", "--model", str(model_dir), "--format", export, "--output", str(exported)]) == 0
    with serve(f"{exported},engine={engine}") as server:
        for source, target in DIRECTIONS:
            status, answer, _ = request(f"{server.url}/translate", {"text": TEXTS, "source": source,
                                                                    "target": target})
            assert status == 200, answer
            assert [t["text"] for t in answer["translations"]] == expected[(source, target)]


def test_the_start_up_names_the_directions_a_model_of_one_pair_takes(model_dir, pairs) -> None:
    alone = load_models([str(model_dir)], limits=ServeLimits())
    mixed = load_models([str(model_dir), f"de-en={pairs['de-en']}"], limits=ServeLimits())
    assert alone.notices() == []
    assert mixed.notices() == [f"{model_dir} serves de-en only to the requests that name it (model=multi); otherwise "
                               "the model of each of these pairs does"]
    assert [mixed.route("de", "en").hops[0].model.name, mixed.route("de", "en", "multi").hops[0].model.name,
            mixed.route("fr", "en").hops[0].model.name] == ["de-en", "multi", "multi"]
