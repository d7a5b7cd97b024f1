"""LibreTranslate's routes and language detection on `encdec serve` (encdec.serve.libretranslate_routes and
encdec.serve.detection): a base URL that ends with a slash (`//translate`), a path that is no endpoint, CORS
preflights, `/languages` with the languages served only as targets, and `/detect` and `source: "auto"` on sentences
written for these tests, with raw requests and the libretranslatepy client."""

from __future__ import annotations

import pytest

from encdec.serve.detection import DetectionError, detect
from encdec.serve.server import create_app, load_models
from test_libretranslate import URL, alone, form, serve
from test_serve import Server, request

GERMAN = [
    "Der Zug nach Hamburg fährt heute eine halbe Stunde später ab.",
    "Kannst du mir bitte das Salz reichen?",
    "Wir haben am Wochenende einen langen Spaziergang im Wald gemacht.",
    "Meine Schwester arbeitet seit drei Jahren in einer kleinen Buchhandlung.",
    "Das Wetter ist viel zu schön, um den ganzen Tag drinnen zu bleiben.",
    "Ich habe vergessen, die Fenster zu schließen, bevor es geregnet hat.",
    "Der Bäcker an der Ecke verkauft die besten Brötchen der Stadt.",
    "Wie lange dauert die Fahrt mit dem Fahrrad bis zum See?",
    "Gestern Abend haben wir zusammen gekocht und danach Karten gespielt.",
    "Die Besprechung wurde auf nächsten Donnerstag verschoben.",
]
ENGLISH = [
    "The train to Hamburg leaves half an hour later today.",
    "Could you please pass me the salt?",
    "We went for a long walk in the woods at the weekend.",
    "My sister has been working in a small bookshop for three years.",
    "The weather is far too nice to stay indoors all day.",
    "I forgot to close the windows before it started raining.",
    "The baker on the corner sells the best bread rolls in town.",
    "How long does it take to cycle to the lake?",
    "Last night we cooked together and played cards afterwards.",
    "The meeting has been moved to next Thursday.",
]
FRENCH = [
    "Le train pour Hambourg part une demi-heure plus tard aujourd'hui.",
    "Pourrais-tu me passer le sel, s'il te plaît ?",
    "Nous avons fait une longue promenade en forêt ce week-end.",
    "Ma sœur travaille depuis trois ans dans une petite librairie.",
    "Il fait beaucoup trop beau pour rester enfermé toute la journée.",
    "J'ai oublié de fermer les fenêtres avant qu'il ne pleuve.",
    "Le boulanger du coin vend les meilleurs croissants de la ville.",
    "Combien de temps faut-il pour aller au lac à vélo ?",
    "Hier soir, nous avons cuisiné ensemble puis joué aux cartes.",
    "La réunion a été repoussée à jeudi prochain.",
]
SENTENCES = {"de": GERMAN, "en": ENGLISH, "fr": FRENCH}
CORS_ORIGIN = "access-control-allow-origin"


def lower(headers: dict) -> dict:
    return {name.lower(): value for name, value in headers.items()}


def assert_detections(answer: list, among: set[str]) -> None:
    """LibreTranslate's shape: at most 3 candidates of the served languages, confidences 0-100, most likely first."""
    assert 1 <= len(answer) <= 3 and {item["language"] for item in answer} <= among
    assert all(set(item) == {"confidence", "language"} and isinstance(item["confidence"], float)
               and 0 <= item["confidence"] <= 100 for item in answer)
    assert [item["confidence"] for item in answer] == sorted((item["confidence"] for item in answer), reverse=True)


@pytest.mark.parametrize("among", [["de", "en"], ["de", "en", "fr"]])
def test_detection_picks_the_served_language_of_each_sentence(among: list[str]) -> None:
    for language in among:
        for sentence in SENTENCES[language]:
            answer = detect([sentence], among)
            assert_detections(answer, set(among))
            assert answer[0]["language"] == language, (sentence, answer)
    assert detect(GERMAN[:3] + ENGLISH[:1], among)[0]["language"] == "de"  # a list: one answer for all its texts


def test_detection_keeps_to_the_served_languages() -> None:
    """German among English and French is one of them; one served language is the answer without a detector."""
    assert {detect([sentence], ["en", "fr"])[0]["language"] for sentence in GERMAN} <= {"en", "fr"}
    assert detect([GERMAN[0]], ["tlh"]) == [{"confidence": 100.0, "language": "tlh"}]


@pytest.mark.parametrize(("texts", "among", "message"), [
    (["1234, 5678!", "ab"], ["de", "en"], "the language of q cannot be detected: it has no letters, or none that "
                                          "py3langid knows"),
    ([GERMAN[0]], [], "no source language is served, so the language of q cannot be detected"),
    ([GERMAN[0]], ["de", "tlh"], "the language of q cannot be detected among the served source languages: "
                                 "py3langid does not know tlh"),
    ([GERMAN[0]], ["zh_Hans", "zh_Hant"], "the language of q cannot be detected among the served source languages: "
                                          "py3langid cannot tell zh_Hans from zh_Hant"),
])
def test_detection_refuses_what_it_cannot_answer(texts: list[str], among: list[str], message: str) -> None:
    with pytest.raises(DetectionError) as refused:
        detect(texts, among)
    assert str(refused.value) == f"Invalid request: {message}" and refused.value.status == 400


def test_a_base_url_that_ends_with_a_slash_routes_as_one(pairs) -> None:
    """SearXNG and LibreTranslate's JavaScript client ask for `//translate` when their base URL ends with a slash."""
    from libretranslatepy import LibreTranslateAPI

    body = {"q": ENGLISH[1], "source": "en", "target": "de"}
    with serve(pairs) as server:
        _, single, _ = request(f"{server.url}{URL}/translate", body)
        status, double, headers = request(f"{server.url}{URL}//translate", body)
        _, languages, _ = request(f"{server.url}{URL}/languages")
        doubled = [request(f"{server.url}{URL}{slashes}languages")[:2] for slashes in ("//", "///")]
        detected = request(f"{server.url}{URL}//detect", {"q": GERMAN[0]})
        client = LibreTranslateAPI(f"{server.url}{URL}//")
        by_client = client.translate(ENGLISH[1], "en", "de"), client.languages(), client.detect(GERMAN[0])
    assert status == 200 and single == double == {"translatedText": alone(pairs, "en-de", [ENGLISH[1]])[0]}
    assert lower(headers)[CORS_ORIGIN] == "*"
    assert doubled == [(200, languages)] * 2
    assert detected[0] == 200 and detected[1][0]["language"] == "de"
    assert by_client == (single["translatedText"], languages, detected[1])


def test_a_path_that_is_no_endpoint_is_a_404_in_libretranslates_shape(pairs) -> None:
    """Not a 405 (a catch-all preflight route used to match every path); the native API keeps its own shape."""
    with serve(pairs) as server:
        answers = {method: request(f"{server.url}{URL}/nothing", {} if method == "POST" else None, method=method)
                   for method in ("GET", "POST", "OPTIONS")}
        deeper = request(f"{server.url}{URL}//translate/more", {"q": "x"})
        wrong_method = request(f"{server.url}{URL}/translate")
        native = request(f"{server.url}/nothing")
    for method, (status, answer, headers) in answers.items():
        assert (status, answer) == (404, {"error": f"Not Found: {method} {URL}/nothing"})
        assert lower(headers)[CORS_ORIGIN] == "*"
    assert deeper[:2] == (404, {"error": f"Not Found: POST {URL}/translate/more"})
    assert wrong_method[:2] == (405, {"error": f"Method Not Allowed: GET {URL}/translate"})
    assert "POST" in lower(wrong_method[2])["allow"]
    assert native[0] == 404 and set(native[1]) == {"error", "field", "request_id"}


def test_preflights_are_answered_without_a_key(pairs) -> None:
    asked = {"Origin": "http://example.org", "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "Content-Type"}
    with serve(pairs, api_key="sesame") as server:
        answers = [request(f"{server.url}{URL}{path}", method="OPTIONS", headers=asked)
                   for path in ("/translate", "//translate", "/detect", "/languages", "/frontend/settings", "/health")]
    for status, _, headers in answers:
        assert status == 200 and lower(headers)[CORS_ORIGIN] == "*"
        assert lower(headers)["access-control-allow-methods"] == "GET, POST"


def test_languages_lists_every_served_language_with_its_targets(pairs) -> None:
    """A language served only as a target is listed too, with no targets of its own."""
    with serve({"de-en": pairs["de-en"]}) as server:
        _, one, _ = request(f"{server.url}{URL}/languages")
    with serve({"de-en": pairs["de-en"], "fr-en": pairs["en-de"]}) as server:
        _, two, _ = request(f"{server.url}{URL}/languages")
    assert one == [{"code": "de", "name": "German", "targets": ["en"]},
                   {"code": "en", "name": "English", "targets": []}]
    assert two == [{"code": "de", "name": "German", "targets": ["en"]},
                   {"code": "en", "name": "English", "targets": []},
                   {"code": "fr", "name": "French", "targets": ["en"]}]


def test_detect_answers_a_string_and_a_list(pairs) -> None:
    """JSON and form bodies, and libretranslatepy's `detect()` with its key; a list is one answer for all its texts,
    as LibreTranslate gives."""
    from libretranslatepy import LibreTranslateAPI

    served = {"de-en": pairs["de-en"], "en-de": pairs["en-de"], "fr-en": pairs["en-de"]}
    with serve(served, api_key="sesame") as server:
        one = request(f"{server.url}{URL}/detect", {"q": GERMAN[2], "api_key": "sesame"})
        many = request(f"{server.url}{URL}/detect", {"q": FRENCH[:3], "api_key": "sesame"})
        by_form = form(f"{server.url}{URL}/detect", [("q", ENGLISH[4]), ("api_key", "sesame")])
        keyless = request(f"{server.url}{URL}/detect", {"q": GERMAN[2]})
        by_client = LibreTranslateAPI(f"{server.url}{URL}/", api_key="sesame").detect(ENGLISH[5])
    for (status, answer, _), language in [(one, "de"), (many, "fr"), (by_form, "en")]:
        assert status == 200 and answer[0]["language"] == language, answer
        assert_detections(answer, {"de", "en", "fr"})
    assert one[1] == detect([GERMAN[2]], ["de", "en", "fr"]) and many[1] == detect(FRENCH[:3], ["de", "en", "fr"])
    assert keyless[:2] == (400, {"error": "Please contact the server operator to get an API key"})
    assert by_client == detect([ENGLISH[5]], ["de", "en", "fr"]) and by_client[0]["language"] == "en"


def test_source_auto_translates_as_encdec_translate_with_the_detected_pair(pairs) -> None:
    """de-en and fr-en served (other models): a German text is translated by de-en's model, a French one by
    fr-en's, each as `encdec translate` does with that model; a list takes one language for all, as
    LibreTranslate does."""
    served = {"de-en": pairs["de-en"], "fr-en": pairs["en-de"]}
    german, french = [GERMAN[1], GERMAN[7], GERMAN[9]], [FRENCH[9]]  # within the models' 64 positions
    by_german_model, by_french_model = alone(pairs, "de-en", german), alone(pairs, "en-de", german + french)
    assert by_german_model != by_french_model[:3]  # the models differ: the choice shows
    with serve(served) as server:
        one = request(f"{server.url}{URL}/translate", {"q": german[0], "source": "auto", "target": "en"})
        many = request(f"{server.url}{URL}/translate", {"q": german, "source": "auto", "target": "en"})
        other = request(f"{server.url}{URL}/translate", {"q": french[0], "source": "auto", "target": "en"})
        unserved = request(f"{server.url}{URL}/translate", {"q": german[0], "source": "auto", "target": "de"})
    detected = detect([german[0]], ["de", "fr"])[0]
    assert detected["language"] == "de"
    assert one[:2] == (200, {"translatedText": by_german_model[0], "detectedLanguage": detected})
    assert many[1] == {"translatedText": by_german_model, "detectedLanguage": [detect(german, ["de", "fr"])[0]] * 3}
    assert other[1]["translatedText"] == by_french_model[3] and other[1]["detectedLanguage"]["language"] == "fr"
    assert unserved[:2] == (400, {"error": "de is not supported"})


def test_requests_detection_cannot_answer_get_libretranslates_400(pairs) -> None:
    bad = {"missing": ({}, "Invalid request: missing q parameter"),
           "empty": ({"q": ""}, "Invalid request: missing q parameter"),
           "empty list": ({"q": []}, "Invalid request: missing q parameter"),
           "not text": ({"q": [1]}, "Invalid request: q must be a string or a list of strings"),
           "too many": ({"q": ["a", "b", "c"]}, "Invalid request: request (3) exceeds text limit (2)"),
           "no letters": ({"q": "1234, 5678!"}, "Invalid request: the language of q cannot be detected: it has no "
                                                "letters, or none that py3langid knows")}
    with serve({**pairs, "fr-en": pairs["en-de"]}, max_texts=2) as server:  # auto into en: de or fr
        answers = {name: request(f"{server.url}{URL}/detect", body)[:2] for name, (body, _) in bad.items()}
        auto = request(f"{server.url}{URL}/translate", {"q": "1234, 5678!", "source": "auto", "target": "en"})
        after = request(f"{server.url}{URL}/detect", {"q": GERMAN[0]})
    assert answers == {name: (400, {"error": message}) for name, (_, message) in bad.items()}
    assert auto[:2] == (400, {"error": bad["no letters"][1]}) and after[0] == 200
    with serve({"de-en": pairs["de-en"], "tlh-en": pairs["en-de"]}) as server:
        unknown = request(f"{server.url}{URL}/detect", {"q": GERMAN[0]})
    with Server(create_app(load_models([str(pairs["de-en"])]))) as server:  # a model without a language pair
        none = request(f"{server.url}{URL}/detect", {"q": GERMAN[0]})
    assert unknown[:2] == (400, {"error": "Invalid request: the language of q cannot be detected among the served "
                                          "source languages: py3langid does not know tlh"})
    assert none[:2] == (400, {"error": "Invalid request: no source language is served, so the language of q cannot "
                                       "be detected"})
