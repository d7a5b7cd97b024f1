"""LibreTranslate's API on `encdec serve` (encdec.serve.libretranslate): the answers `encdec translate` gives for the
pair, in JSON and form bodies, with `q` a string or a list, alternatives and HTML; its languages, settings and health;
CORS; its error shapes and statuses; the API key in the body; and the two APIs batched together under load."""

from __future__ import annotations

import html
import json
import re
import signal
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

import pytest

from encdec.inference import load_engine, load_model_and_tokenizer, translate, translate_detailed
from encdec.inference.decoding import resolve_options
from encdec.serve import ServeLimits
from encdec.serve.core import html_parts
from encdec.serve.held_batches import HOLD_ENV, BatchRecord
from encdec.serve.libretranslate import CORS_HEADERS
from encdec.serve.server import create_app, load_models
from test_serve import ServeProcess, Server, assert_local_and_found, chromium_driver, page_requests, request
from tiny_model_folders import date_data

URL = "/libretranslate"


@pytest.fixture(scope="module")
def texts():
    return [source for source, _ in date_data()[2][:4]]


def serve(pairs, api_key: str | None = None, **limits) -> Server:
    models = load_models([f"{pair}={path}" for pair, path in pairs.items()], limits=ServeLimits(**limits))
    return Server(create_app(models, api_key=api_key))


def alone(pairs, pair: str, texts: list[str], **options) -> list[str]:
    return translate(*load_model_and_tokenizer(str(pairs[pair])), texts, **options)


def form(url: str, fields: list[tuple[str, str]], headers: dict | None = None) -> tuple[int, dict, dict]:
    raw = urllib.parse.urlencode(fields).encode()
    return request(url, raw=raw, headers={"Content-Type": "application/x-www-form-urlencoded", **(headers or {})})


def test_translate_answers_as_encdec_translate_in_json_and_form_bodies(pairs, texts) -> None:
    with serve(pairs) as server:
        status, one, headers = request(f"{server.url}{URL}/translate", {"q": texts[0], "source": "de",
                                                                         "target": "en"})
        _, many, _ = request(f"{server.url}{URL}/translate", {"q": texts, "source": "en", "target": "de",
                                                               "format": "text"})
        _, by_form, _ = form(f"{server.url}{URL}/translate", [("q", texts[1]), ("source", "de"), ("target", "en")])
    assert status == 200 and one == {"translatedText": alone(pairs, "de-en", texts[:1])[0]}
    assert many == {"translatedText": alone(pairs, "en-de", texts)}
    assert by_form == {"translatedText": alone(pairs, "de-en", texts[1:2])[0]}
    got = {name.lower(): value for name, value in headers.items()}
    assert all(got.get(name.lower()) == value for name, value in CORS_HEADERS.items())


def with_alternatives(pairs, pair: str, texts: list[str], alternatives: int) -> tuple[list[str], list[list[str]]]:
    """What LibreTranslate answers: each text's translation as `encdec translate` gives it, and its alternatives: the
    list of `encdec translate --n-best K+1` (a beam of K+1 on these greedy models), without that translation, at
    most K."""
    model, tokenizer = load_model_and_tokenizer(str(pairs[pair]))
    assert resolve_options(model.generation_config).num_beams == 1  # greedy by default
    main = translate(model, tokenizer, texts)
    listed = translate_detailed(model, tokenizer, texts, n_best=alternatives + 1, num_beams=alternatives + 1)
    return main, [[h.text for h in hypotheses if h.text != text][:alternatives]
                  for text, hypotheses in zip(main, listed, strict=True)]


def test_alternatives_are_the_n_best_list_apart_from_the_translation(pairs, texts) -> None:
    with serve(pairs) as server:
        _, single, _ = request(f"{server.url}{URL}/translate", {"q": texts[0], "source": "de", "target": "en",
                                                                "alternatives": 2})
        _, batch, _ = request(f"{server.url}{URL}/translate", {"q": texts[:2], "source": "de", "target": "en",
                                                               "alternatives": 2})
    main, others = with_alternatives(pairs, "de-en", texts[:2], 2)
    assert single == {"translatedText": main[0], "alternatives": others[0]}
    assert batch == {"translatedText": main, "alternatives": others}


def test_the_translation_is_the_same_with_and_without_alternatives(pairs) -> None:
    """Issue 39: the translation used to come from the beam the alternatives needed, so on a model that decodes
    greedily a client asking for 3 alternatives (SearXNG does) got another text than one asking for none (Weblate).
    Now both get `encdec translate`'s; the alternatives are distinct, and none is the translation."""
    sources = [source for source, _ in date_data()[2][:64]]
    model, tokenizer = load_model_and_tokenizer(str(pairs["de-en"]))
    expected = translate(model, tokenizer, sources)
    assert expected != translate(model, tokenizer, sources, num_beams=4)  # a wider beam changes some: the old bug
    with serve(pairs) as server:
        _, plain, _ = request(f"{server.url}{URL}/translate", {"q": sources, "source": "de", "target": "en"})
        _, asked, _ = request(f"{server.url}{URL}/translate", {"q": sources, "source": "de", "target": "en",
                                                               "alternatives": 3})
    assert plain == {"translatedText": expected}
    assert asked["translatedText"] == expected
    assert len(asked["alternatives"]) == len(sources) and any(asked["alternatives"])
    for text, others in zip(expected, asked["alternatives"], strict=True):
        assert len(others) <= 3 and len(set(others)) == len(others) and text not in others
    assert asked["alternatives"] == with_alternatives(pairs, "de-en", sources, 3)[1]


def test_lines_blank_texts_and_the_alternatives_key(pairs, texts) -> None:
    """Each line of a text is translated on its own (a sentence-level model would drop the others); a blank text
    stays blank; `alternatives` is answered only when asked, distinct and apart from the translation."""
    with serve(pairs) as server:
        _, lines, _ = request(f"{server.url}{URL}/translate", {"q": f"{texts[0]}\n\n{texts[1]}", "source": "de",
                                                               "target": "en"})
        _, blank, _ = request(f"{server.url}{URL}/translate", {"q": [texts[0], " "], "source": "de", "target": "en",
                                                               "alternatives": 0})
        _, three, _ = request(f"{server.url}{URL}/translate?source=de&target=en", raw=urllib.parse.urlencode(
            {"q": texts[2], "alternatives": 3}).encode(), headers={"Content-Type": "application/x-www-form-urlencoded"})
    t = alone(pairs, "de-en", texts[:3])
    assert lines == {"translatedText": f"{t[0]}\n\n{t[1]}"}
    assert blank == {"translatedText": [t[0], " "]}  # no alternatives key: none asked
    main, others = with_alternatives(pairs, "de-en", texts[2:3], 3)
    assert three == {"translatedText": main[0], "alternatives": others[0]}


def test_html_keeps_the_markup_and_translates_the_text_between_tags(pairs, texts) -> None:
    document = (f'<p class="x">{texts[0]}</p>\n<ul><li> {texts[1]} </li><li><b>{texts[2]}</b></li></ul>'
                f'<script>if (a < b && c) {{ var a = "{texts[3]}"; }}</script><!-- {texts[3]} --><br/>'
                f'<![CDATA[{texts[3]}]]>')
    assert "".join(piece for _, piece in html_parts(document)) == document  # nothing lost in the cut
    with serve(pairs) as server:
        _, answer, _ = request(f"{server.url}{URL}/translate", {"q": document, "source": "de", "target": "en",
                                                                "format": "html"})
    t = alone(pairs, "de-en", texts[:3])
    assert answer["translatedText"] == (f'<p class="x">{t[0]}</p>\n<ul><li> {t[1]} </li><li><b>{t[2]}</b></li></ul>'
                                        f'<script>if (a < b && c) {{ var a = "{texts[3]}"; }}</script>'
                                        f'<!-- {texts[3]} --><br/><![CDATA[{texts[3]}]]>')
    with serve(pairs) as server:  # a "<" that opens no tag is refused (HTML writes it &lt;); escaped, it is text
        stray = request(f"{server.url}{URL}/translate", {"q": f"<b>{texts[0]} & {texts[1]} <3</b>", "source": "de",
                                                         "target": "en", "format": "html"})
        _, hearts, _ = request(f"{server.url}{URL}/translate", {"q": f"<b>{texts[0]} &amp; {texts[1]} &lt;3</b>",
                                                                "source": "de", "target": "en", "format": "html"})
    assert stray[:2] == (400, {"error": "Invalid request: q: a '<' at line 1 starts no tag; write it as &lt;."})
    whole = alone(pairs, "de-en", [f"{texts[0]} & {texts[1]} <3"])[0]
    assert hearts["translatedText"] == f"<b>{html.escape(whole, quote=False)}</b>"


def test_languages_settings_health_and_cors_preflight(pairs) -> None:
    with serve(pairs) as server:
        _, languages, _ = request(f"{server.url}{URL}/languages")
        _, settings, _ = request(f"{server.url}{URL}/frontend/settings")
        health = request(f"{server.url}{URL}/health")
        preflight = request(f"{server.url}{URL}/translate", method="OPTIONS",
                            headers={"Origin": "http://example.org", "Access-Control-Request-Method": "POST"})
    assert languages == [{"code": "de", "name": "German", "targets": ["en"]},
                         {"code": "en", "name": "English", "targets": ["de"]}]
    assert settings["language"] == {"source": {"code": "de", "name": "German"},
                                    "target": {"code": "en", "name": "English"}}
    assert settings["apiKeys"] is False and settings["charLimit"] == -1
    assert health[:2] == (200, {"status": "ok"})
    assert preflight[0] == 200 and {k.lower(): v for k, v in preflight[2].items()}["access-control-allow-origin"] == "*"


def test_source_auto_takes_the_only_pair_into_the_target(pairs, texts) -> None:
    with serve(pairs) as server:
        status, answer, _ = request(f"{server.url}{URL}/translate", {"q": texts[0], "source": "auto",
                                                                     "target": "de"})
    assert status == 200 and answer == {"translatedText": alone(pairs, "en-de", texts[:1])[0],
                                        "detectedLanguage": {"confidence": 100.0, "language": "en"}}


@pytest.mark.parametrize(("body", "status", "message"), [
    ({"source": "de", "target": "en"}, 400, "Invalid request: missing q parameter"),
    ({"q": "", "source": "de", "target": "en"}, 400, "Invalid request: missing q parameter"),
    ({"q": "x", "target": "en"}, 400, "Invalid request: missing source parameter"),
    ({"q": "x", "source": "de"}, 400, "Invalid request: missing target parameter"),
    ({"q": ["a", "b", "c"], "source": "de", "target": "en"}, 400,
     "Invalid request: request (3) exceeds text limit (2)"),
    ({"q": "x", "source": "de", "target": "en", "alternatives": 1e400}, 400,
     "Invalid request: alternatives parameter is not a number"),
    ({"q": "x", "source": "de", "target": "en", "format": "pdf"}, 400, "pdf format is not supported"),
    ({"q": "x", "source": "de", "target": "en", "alternatives": 9}, 400,
     "Invalid request: alternatives parameter must be <= 3"),
    ({"q": "x", "source": "de", "target": "en", "alternatives": "many"}, 400,
     "Invalid request: alternatives parameter is not a number"),
    ({"q": "x", "source": "fr", "target": "en"}, 400, "fr is not supported"),
    ({"q": "x", "source": "de", "target": "fr"}, 400, "fr is not supported"),
    ({"q": "x", "source": "auto", "target": "fr"}, 400, "fr is not supported"),
    ([1, 2], 400, "Invalid JSON format"),
])
def test_bad_requests_get_libretranslates_error_and_the_server_goes_on(pairs, texts, body, status: int,
                                                                       message: str) -> None:
    with serve(pairs, max_texts=2, max_beams=4) as server:
        raw = json.dumps(body).replace("Infinity", "1e400").encode()  # JSON has no infinity: a number too large
        got, answer, _ = request(f"{server.url}{URL}/translate", raw=raw)
        after, _, _ = request(f"{server.url}{URL}/translate", {"q": texts[0], "source": "de", "target": "en"})
    assert (got, answer) == (status, {"error": message})
    assert after == 200


def test_the_api_key_goes_in_the_body_or_a_header(pairs, texts) -> None:
    body = {"q": texts[0], "source": "de", "target": "en"}
    with serve(pairs, api_key="sesame") as server:
        given = request(f"{server.url}{URL}/translate", {**body, "api_key": "sesame"})
        by_form = form(f"{server.url}{URL}/translate", [*body.items(), ("api_key", "sesame")])
        by_header = request(f"{server.url}{URL}/translate", body, headers={"Authorization": "Bearer sesame"})
        wrong = request(f"{server.url}{URL}/translate", {**body, "api_key": "open"})
        missing = request(f"{server.url}{URL}/translate", body)
        native = request(f"{server.url}/translate", {"text": texts[0], "model": "de-en", "api_key": "sesame"})
        _, settings, _ = request(f"{server.url}{URL}/frontend/settings")
    assert given[0] == by_form[0] == by_header[0] == 200
    assert wrong[:2] == (403, {"error": "Invalid API key"})
    assert missing[:2] == (400, {"error": "Please contact the server operator to get an API key"})
    assert native[0] == 401  # the native API keeps its header key
    assert settings["keyRequired"] is True


def test_both_apis_under_concurrent_clients_batch_as_translating_alone(pairs, texts, monkeypatch) -> None:
    """Clients of the native API and of LibreTranslate's at once, held in the batchers' queues (the test hook) until
    all 48 requests are in: each pair's 24 texts, from both APIs, run as one batch, and each answer is what
    translating alone gives."""
    expected = {pair: alone(pairs, pair, texts) for pair in pairs}
    calls = [(api, pair, i) for api in ("native", "libre") for pair in pairs for i in range(len(texts))] * 3

    def call(item):
        api, pair, i = item
        source, target = pair.split("-")
        if api == "native":
            _, body, _ = request(f"{server.url}/translate", {"text": texts[i], "source": source, "target": target},
                                 timeout=60)
            return body["translations"][0]["text"]
        _, body, _ = request(f"{server.url}{URL}/translate", {"q": texts[i], "source": source, "target": target},
                             timeout=60)
        return body["translatedText"]

    monkeypatch.setenv(HOLD_ENV, "1")
    with serve(pairs, max_wait_ms=50) as server:
        batchers = server.server.config.app.app.state.batchers
        with ThreadPoolExecutor(len(calls)) as pool:
            asked = [pool.submit(call, item) for item in calls]
            for batcher in batchers.values():
                assert batcher.wait_held(24, timeout=60), batcher.held
            assert {name: batcher.held for name, batcher in batchers.items()} == {"de-en": 24, "en-de": 24}
            for batcher in batchers.values():
                batcher.release()
            answers = [future.result(timeout=60) for future in asked]
    assert answers == [expected[pair][i] for _, pair, i in calls]
    assert {name: list(batcher.decisions) for name, batcher in batchers.items()} == {
        "de-en": [BatchRecord(24, "expected", 1)], "en-de": [BatchRecord(24, "expected", 1)]}
    assert json.dumps(answers)  # plain strings


def test_a_libretranslate_client_library_works_unchanged(pairs, texts) -> None:
    """libretranslatepy, pointed at `encdec serve`'s LibreTranslate base URL: form bodies, its key, /languages."""
    from libretranslatepy import LibreTranslateAPI

    with serve(pairs, api_key="sesame") as server:
        client = LibreTranslateAPI(f"{server.url}{URL}/", api_key="sesame")
        translated = client.translate(texts[0], "en", "de")
        languages = client.languages()
    assert translated == alone(pairs, "en-de", texts[:1])[0]
    assert [language["code"] for language in languages] == ["de", "en"]


def test_the_page_has_a_language_pair_selector_in_chromium(pairs, texts) -> None:
    """Several models: the page lists their pairs, and translates with the chosen one (as /translate would)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    driver = chromium_driver()
    try:
        with serve(pairs) as server:
            expected = {pair: request(f"{server.url}/translate", {"text": texts[0], "model": pair})[1][
                "translations"][0]["text"] for pair in pairs}
            assert len(set(expected.values())) == 2  # the pairs' models answer differently: the choice shows
            driver.get(f"{server.url}/")
            wait = WebDriverWait(driver, 30)
            wait.until(lambda d: d.find_element(By.ID, "pair").is_displayed())
            pair = Select(driver.find_element(By.ID, "pair"))
            assert [option.text for option in pair.options] == ["de \u2192 en", "en \u2192 de"]
            driver.find_element(By.ID, "source").send_keys(texts[0])
            for index, name in enumerate(pairs):
                pair.select_by_index(index)
                driver.find_element(By.ID, "translate").click()
                wait.until(lambda d, n=name: d.execute_script(  # read at once: the lines are redrawn
                    "return [...document.querySelectorAll('#translation .line')].map(l => l.textContent)")
                    == [expected[n]])
            assert driver.find_element(By.ID, "error").text == ""
            assert_local_and_found(page_requests(driver), server.url)
    finally:
        driver.quit()


def test_the_command_serves_several_models_and_says_what_they_take(pairs, texts) -> None:
    """`encdec serve --dtype bfloat16 --model de-en=A --model en-de=B,dtype=float32`: each model named at start,
    their memory said once they are loaded, both pairs served, de-en in bfloat16 (the command's --dtype, as /info
    reads it from the loaded model) answering as it does offline in bfloat16, en-de in its own float32."""
    offline = translate(*load_engine(str(pairs["de-en"]), dtype="bfloat16"), texts[:1])
    with ServeProcess("--dtype", "bfloat16", "--model", f"de-en={pairs['de-en']}", "--model",
                      f"en-de={pairs['en-de']},dtype=float32") as server:
        _, languages, _ = request(f"{server.url}{URL}/languages", timeout=60)
        _, info, _ = request(f"{server.url}/info", timeout=60)
        _, answer, _ = request(f"{server.url}{URL}/translate", {"q": texts[0], "source": "de", "target": "en"},
                               timeout=60)
        server.process.terminate()  # SIGTERM: a graceful stop
        status, log = server.finish()
    assert [language["code"] for language in languages] == ["de", "en"]
    assert [(m["name"], m["compute_type"]) for m in info["models"]] == [("de-en", "bfloat16"), ("en-de", "float32")]
    assert answer == {"translatedText": offline[0]}
    said = [line for line in log.splitlines() if line.startswith("encdec serve: ")]  # not a library's warnings
    assert said[:2] == [f"encdec serve: transformer_seq2seq model {pairs['de-en']} (torch engine) as de-en",
                        f"encdec serve: rnn_seq2seq model {pairs['en-de']} (torch engine) as en-de"], log
    assert re.fullmatch(r"encdec serve: 2 model\(s\) loaded, [\d,]+ MiB resident; on http://127\.0\.0\.1:\d+ - "
                        r"page at /, API docs at /docs", said[2]), log
    assert said[3:] == ["encdec serve: stopping: no new connections; finishing the requests in flight"], log
    assert status == -signal.SIGTERM
