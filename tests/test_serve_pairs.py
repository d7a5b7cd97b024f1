"""Language pairs on `encdec serve` as LibreTranslate answers them (encdec.serve.pairs), through the real routes of
both APIs: codes in any case and LibreTranslate's aliases; `source` equal to `target` gives the text back; a text
with nothing to translate comes back without decoding; a pair no model serves goes through a pivot (Argos Translate's
composite translation), said in the answer and listed by `/languages`; the rule for which model serves a pair; a
served model that names no languages said at start-up; and the page working with the API key in its URL."""

from __future__ import annotations

import pytest

from encdec.errors import EncdecError
from encdec.inference import load_model_and_tokenizer, translate
from encdec.serve import ModelSpec, RequestError, ServedModels, ServeLimits
from encdec.serve.core import nothing_to_translate
from encdec.serve.pairs import Hop, find_route, served_code
from encdec.serve.server import build_service, create_app, load_models
from test_serve import Server, chromium_driver, request, serve_app, translated_on_page
from test_translate_file import download, upload
from test_translate_file import serve as serve_files
from tiny_model_folders import date_data

LT = "/libretranslate"


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [source for source, _ in date_data()[2][:3]]


def alone(folder, texts: list[str]) -> list[str]:
    """``encdec translate``'s translations of ``texts`` by the model in ``folder`` (greedy, as served)."""
    return translate(*load_model_and_tokenizer(str(folder)), texts, num_beams=1)


def serve(*models: str) -> Server:
    return Server(create_app(load_models(list(models), limits=ServeLimits())))


@pytest.mark.parametrize(("requested", "served", "found"), [
    ("DE", ["de", "en"], "de"),  # any case
    ("En", ["de", "en"], "en"),
    ("zh-hant", ["zh_Hant"], "zh_Hant"),  # - and _ alike
    ("zh-Hans", ["zh"], "zh"),  # LibreTranslate's aliases, either way
    ("zh", ["zh_Hans"], "zh_Hans"),
    ("pb", ["pt_BR"], "pt_BR"),
    ("zt", ["zh_Hant", "zh"], "zh_Hant"),
    ("pt-BR", ["pt", "en"], "pt"),  # a region not served: its language
    ("en-US", ["en"], "en"),
    ("pt-BR", ["pt_BR", "pt"], "pt_BR"),  # the region served: itself
    ("zh-Hant", ["zh"], None),  # a script is the text's writing: never dropped
    ("fr", ["de", "en"], None),
])
def test_codes_are_read_in_any_case_with_libretranslate_s_aliases(requested, served, found) -> None:
    assert served_code(requested, served) == found


@pytest.mark.parametrize(("text", "nothing"), [
    ("🙂👍", True), ("42", True), ("-3.5", True), ("99%", True), ("?!...", True), ("  \t", True), ("→ ★", True),
    ("03.03.2021", False), ("3/3/2021", False), ("Mar 3", False), ("A", False), ("März", False), ("🙂 Hallo", False),
])
def test_what_counts_as_nothing_to_translate(text: str, nothing: bool) -> None:
    """No letter and no digit, or one number alone; digits with other punctuation are text (the date task's)."""
    assert nothing_to_translate(text) is nothing


def test_codes_in_any_case_and_aliases_reach_the_model_in_both_apis(pairs, texts) -> None:
    expected = alone(pairs["de-en"], texts[:1])[0]
    with serve(f"de-en={pairs['de-en']}", f"zh-en={pairs['en-de']}") as server:
        for source, target in (("DE", "EN"), ("de", "en-US"), ("De", "en_GB")):
            status, body, _ = request(f"{server.url}{LT}/translate", {"q": texts[0], "source": source,
                                                                      "target": target})
            assert (status, body) == (200, {"translatedText": expected}), (source, target)
            status, body, _ = request(f"{server.url}/translate", {"text": texts[0], "source": source,
                                                                  "target": target})
            assert (status, body) == (200, {"translations": [{"text": expected}]}), (source, target)
        _, by_alias, _ = request(f"{server.url}{LT}/translate", {"q": texts[0], "source": "zh-Hans", "target": "en"})
        _, unknown, _ = request(f"{server.url}{LT}/translate", {"q": texts[0], "source": "XX", "target": "en"})
        _, native, _ = request(f"{server.url}/translate", {"text": texts[0], "source": "xx", "target": "en"})
    assert by_alias == {"translatedText": alone(pairs["en-de"], texts[:1])[0]}
    assert unknown == {"error": "XX is not supported"}  # LibreTranslate's words, the code as sent
    assert native["field"] == "target" and native["error"].startswith("target: no model translates xx into en;")


def test_source_equal_to_target_gives_the_text_back(pairs, texts) -> None:
    with serve(f"de-en={pairs['de-en']}", f"en-de={pairs['en-de']}") as server:
        _, one, _ = request(f"{server.url}{LT}/translate", {"q": texts[0], "source": "en", "target": "EN"})
        _, many, _ = request(f"{server.url}{LT}/translate", {"q": texts, "source": "de", "target": "de"})
        status, native, _ = request(f"{server.url}/translate", {"text": texts, "source": "en", "target": "en"})
        _, unserved, _ = request(f"{server.url}{LT}/translate", {"q": texts[0], "source": "fr", "target": "fr"})
    assert one == {"translatedText": texts[0]} and many == {"translatedText": texts}
    assert status == 200 and native == {"translations": [{"text": text} for text in texts]}
    assert unserved == {"error": "fr is not supported"}


def test_nothing_to_translate_comes_back_without_decoding(pairs, texts) -> None:
    """Texts of emoji, a number, punctuation or spaces come back as sent in both APIs, and the model decodes none
    of them; beside a text to translate, each keeps its place (in a text's lines too)."""
    models = load_models([f"de-en={pairs['de-en']}"], limits=ServeLimits())
    service = models.models["de-en"].service
    decoded: list[int] = []
    decode = service.decode
    service.decode = lambda jobs: decoded.append(len(jobs)) or decode(jobs)  # the batcher's decode, counted
    nothing = ["🙂👍", "42", "?!", "   "]
    expected = alone(pairs["de-en"], texts[:1])[0]
    with Server(create_app(models)) as server:
        _, lt, _ = request(f"{server.url}{LT}/translate", {"q": nothing, "source": "de", "target": "en"})
        _, native, _ = request(f"{server.url}/translate", {"text": nothing[:3], "return_scores": True})
        assert decoded == []
        _, mixed, _ = request(f"{server.url}{LT}/translate", {"q": [nothing[0], texts[0], f"{texts[0]}\n42"],
                                                              "source": "de", "target": "en"})
        _, native_mixed, _ = request(f"{server.url}/translate", {"text": ["42", texts[0]]})
    assert lt == {"translatedText": nothing}
    assert native == {"translations": [{"text": text} for text in nothing[:3]]}
    assert mixed == {"translatedText": [nothing[0], expected, f"{expected}\n42"]}
    assert native_mixed == {"translations": [{"text": "42"}, {"text": expected}]}
    assert sum(decoded) == 3  # the three texts (and lines) that hold something to translate


def test_a_pair_no_model_serves_goes_through_a_pivot(pairs, texts) -> None:
    """de-en and en-fr serve de -> fr through en, as Argos Translate composes de->en->fr: the first model's
    translation is the second's input; both APIs say the pivot, and /languages lists the pivoted target."""
    through_en = alone(pairs["en-de"], alone(pairs["de-en"], texts))
    with serve(f"de-en={pairs['de-en']}", f"en-fr={pairs['en-de']}") as server:
        _, lt, _ = request(f"{server.url}{LT}/translate", {"q": texts, "source": "de", "target": "fr"})
        _, native, _ = request(f"{server.url}/translate", {"text": texts, "source": "de", "target": "fr"})
        _, direct, _ = request(f"{server.url}/translate", {"text": texts, "source": "de", "target": "en"})
        _, listed, _ = request(f"{server.url}{LT}/languages")
        _, back, _ = request(f"{server.url}{LT}/translate", {"q": texts[0], "source": "fr", "target": "de"})
        _, info, _ = request(f"{server.url}/info")
    assert info["pivots"] == [{"source": "de", "target": "fr", "through": ["en"], "models": ["de-en", "en-fr"]}]
    assert lt == {"translatedText": through_en, "pivot": ["en"]}
    assert native == {"translations": [{"text": text} for text in through_en], "pivot": ["en"]}
    assert "pivot" not in direct
    assert [(entry["code"], entry["targets"]) for entry in listed] == [("de", ["en", "fr"]), ("en", ["fr"]),
                                                                      ("fr", [])]
    assert back == {"error": "fr is not supported"}  # no model from fr: as LibreTranslate says of a source it lacks


def test_a_file_goes_through_the_pivot_and_one_language_gives_it_back(pairs, texts) -> None:
    data = "".join(f"{text}\n" for text in texts[:2]).encode()
    through_en = alone(pairs["en-de"], alone(pairs["de-en"], texts[:2]))
    with serve_files({"de-en": pairs["de-en"], "en-fr": pairs["en-de"]}) as server:
        status, pivoted, _ = upload(server, "dates.txt", data, target="fr")
        _, same, _ = upload(server, "same.txt", data, source="DE", target="de")
        files = [download(answer["translatedFileUrl"])[1] for answer in (pivoted, same)]
    assert status == 200 and files == ["".join(f"{text}\n" for text in through_en).encode(), data]


def test_an_empty_translation_on_the_way_comes_back_empty(pairs, texts) -> None:
    """A first model of a route that translates a text to nothing: the next model is given no text to decode and the
    answer is empty (not a refusal of a text the client never sent)."""
    models = load_models([f"de-en={pairs['de-en']}", f"en-fr={pairs['en-de']}"], limits=ServeLimits())
    first = models.models["de-en"].service
    decode = first.decode
    first.decode = lambda jobs: [{**answer, "text": ""} for answer in decode(jobs)]
    with Server(create_app(models)) as server:
        status, native, _ = request(f"{server.url}/translate", {"text": texts[:2], "source": "de", "target": "fr"})
        _, lt, _ = request(f"{server.url}{LT}/translate", {"q": texts[:2], "source": "de", "target": "fr"})
    assert status == 200 and native == {"translations": [{"text": ""}, {"text": ""}], "pivot": ["en"]}
    assert lt == {"translatedText": ["", ""], "pivot": ["en"]}


def test_a_direct_model_comes_before_a_pivot_and_the_first_listed_among_equals(pairs, texts) -> None:
    a, b = pairs["de-en"], pairs["en-de"]
    with serve(f"de-en={a}", f"en-fr={b}", f"de-fr={a}") as server:  # de-fr: direct, listed after the pivot's
        _, direct, _ = request(f"{server.url}{LT}/translate", {"q": texts[0], "source": "de", "target": "fr"})
    assert direct == {"translatedText": alone(a, texts[:1])[0]}
    # two pivots of as many models: the first model listed decides (de-en before de-it)
    hops = [Hop("de-en", "de", "en"), Hop("de-it", "de", "it"), Hop("it-fr", "it", "fr"), Hop("en-fr", "en", "fr")]
    assert [hop.model for hop in find_route(hops, "de", "fr").hops] == ["de-en", "en-fr"]
    assert find_route(hops, "it", "it").hops == () and find_route(hops, "fr", "de") is None
    with serve(f"de-en={a}", f"fr-it={b}") as server:  # from de, to it, but no route between
        _, apart, _ = request(f"{server.url}{LT}/translate", {"q": texts[0], "source": "de", "target": "IT"})
    assert apart == {"error": "Italian (it) is not available as a target language from German (de)"}


def load(*values: str) -> ServedModels:
    return ServedModels.load([ModelSpec.parse(value) for value in values],
                             lambda model_dir, options: build_service(model_dir, **options), {"engine": "torch"})


def test_a_pair_goes_to_the_first_model_listed_a_later_one_answers_by_name(pairs, texts, tmp_path) -> None:
    """Two models of one pair (the demo's two): the first serves the pair, the second is named by its folder and
    answers the requests that name it; the start-up says so, and names a model without languages with the fix."""
    with pytest.raises(EncdecError, match="^Two --model arguments are both named b "):  # folder b: twice
        load(f"de-en={pairs['de-en']}", f"de-en={pairs['en-de']}", str(pairs["en-de"]))
    models = load(f"de-en={pairs['de-en']}", f"de-en={pairs['en-de']}")
    assert list(models.models) == ["de-en", "b"]
    assert models.route("de", "en").hops[0].model.name == "de-en"
    assert models.notices() == [f"{pairs['en-de']} translates de-en, which the model listed first for it serves; it "
                                "answers the requests that name it (model=b)"]
    alone_model = load(str(pairs["en-de"]))
    assert alone_model.notices() == [f"{pairs['en-de']} names no languages (its model card has none): it is served "
                                     "by its name only (model=b), not for a language pair; give its pair: --model "
                                     f"SRC-TGT={pairs['en-de']}"]
    with Server(create_app(models)) as server:
        _, second, _ = request(f"{server.url}/translate", {"text": texts[:1], "model": "b"})
        _, first, _ = request(f"{server.url}/translate", {"text": texts[:1], "source": "de", "target": "en"})
    assert second == {"translations": [{"text": alone(pairs["en-de"], texts[:1])[0]}]}
    assert first == {"translations": [{"text": alone(pairs["de-en"], texts[:1])[0]}]}
    with pytest.raises(RequestError, match="^target: no model translates en into de; "):
        models.route("en", "de")


def test_the_page_works_with_the_key_in_its_url_in_chromium(pairs, texts) -> None:
    """http://any:KEY@host/ (the key as the password of the URL): the page describes the model and translates; its
    requests go to the server's address without the credentials, which a browser refuses to fetch."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    expected = alone(pairs["de-en"], texts[:1])[0]
    driver = chromium_driver()
    try:
        with serve_app(pairs["de-en"], api_key="s3cret-key") as server:
            assert request(f"{server.url}/info")[0] == 401
            driver.get(server.url.replace("http://", "http://user:s3cret-key@") + "/")
            wait = WebDriverWait(driver, 30)
            wait.until(lambda d: "transformer" in d.find_element(By.ID, "model").text)
            assert translated_on_page(driver, texts[0]) == [expected]
    finally:
        driver.quit()


def test_the_page_offers_a_pivoted_pair_in_chromium(pairs, texts) -> None:
    """The page's selector lists the pairs the models serve, then de -> fr through en; chosen, it translates as the
    two models in turn (no model named in the request: the server routes it)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    through_en = alone(pairs["en-de"], alone(pairs["de-en"], texts[:1]))
    driver = chromium_driver()
    try:
        with serve(f"de-en={pairs['de-en']}", f"en-fr={pairs['en-de']}") as server:
            driver.get(f"{server.url}/")
            WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "pair").is_displayed())
            pair = Select(driver.find_element(By.ID, "pair"))
            assert [option.text for option in pair.options] == ["de \u2192 en", "en \u2192 fr",
                                                                "de \u2192 fr (through en)"]
            pair.select_by_visible_text("de \u2192 fr (through en)")
            assert driver.find_element(By.ID, "model").text.startswith("de \u2192 en \u2192 fr, model after model")
            assert translated_on_page(driver, texts[0]) == through_en
    finally:
        driver.quit()
