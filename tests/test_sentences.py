"""Long texts translated sentence by sentence (encdec.inference.sentences): a 2,000-character paragraph gives what
translating its sentences one by one gives, through LibreTranslate's API (always), the native API
(`split_sentences`) and `encdec translate --split-sentences`; spacing, line breaks and HTML are kept; a sentence over
the source limit is cut with a warning in the log instead of failing the texts beside it."""

from __future__ import annotations

import html
import logging

import pytest

from encdec.cards import model_languages
from encdec.inference.sentences import card_source_language, join, sentences, split_text
from encdec_cli import main
from test_libretranslate import URL, alone, serve
from test_serve import request

# German, with what a naive splitter cuts wrongly: ordinals ("am 3. März"), "Dr.", "z. B."
SENTENCES = [
    "Am Mittwoch, dem 3. März 2021, kam der Zug pünktlich an.", "Die Reise hatte am 1. März begonnen.",
    "Sie dauerte also zwei volle Tage.", "Dr. Weber wartete schon am Bahnsteig.",
    "Er trug einen grauen Mantel und einen Hut.", "Wir gingen zusammen in ein kleines Café.",
    "Dort tranken wir Tee, z. B. mit Zitrone.", "Das Wetter war kalt, aber sonnig.",
    "Am Nachmittag besuchten wir das Museum.", "Es wurde im Jahr 1885 eröffnet.",
    "Die Sammlung zeigt Bilder aus vier Jahrhunderten.", "Besonders schön war ein Bild vom 12. Mai 1901.",
    "Es zeigt einen Markt in der Altstadt.", "Danach spazierten wir am Fluss entlang.",
    "Die Brücke dort ist über 300 Jahre alt.", "Am Abend aßen wir in einem Gasthaus.",
    "Die Suppe war heiß und sehr gut.", "Herr Weber erzählte von seiner Arbeit.",
    "Er schreibt ein Buch über alte Kalender.", "Manche Kalender beginnen das Jahr im März.",
    "Andere zählen die Tage vom 1. Januar an.", "Wann beginnt eigentlich ein neues Jahr?",
    "Darauf gibt es viele Antworten!", "Am Donnerstag, dem 4. März 2021, regnete es.",
    "Wir blieben deshalb lange im Hotel.", "Ich las die Zeitung vom Vortag.",
    "Sie berichtete über ein Konzert am 6. März.", "Die Karten kosteten nur 15 Euro.",
    "Wir kauften zwei Karten für den Abend.", "Das Konzert begann um 20 Uhr.",
    "Ein Chor sang Lieder aus dem Mittelalter.", "Die Musik war ruhig und sehr alt.",
    "Nach dem Konzert war es schon spät.", "Am Freitag, dem 5. März 2021, fuhr ich nach Hause.",
    "Der Zug war voll, aber ich fand einen Platz.", "Die Fahrt dauerte wieder zwei Tage.",
    "Zu Hause schrieb ich alles in mein Tagebuch.", "Meine Schwester fragte nach den Bildern.",
    "Ich zeigte ihr die Fotos vom Museum.", "Sie wollte im Sommer selbst hinfahren.",
    "Wir planten die Reise für den 10. Juli.", "Die Züge im Sommer sind oft sehr voll.",
    "Deshalb kauften wir die Karten früh.", "Sie kosteten zusammen 120 Euro.", "Das Hotel am Fluss war noch frei.",
    "Wir nahmen zwei Zimmer mit Blick aufs Wasser.", "Nun freuen wir uns auf den Sommer.",
    "Vielleicht kommt auch Dr. Weber mit.", "Er kennt die Stadt seit dem 2. Juni 1990.",
    "Niemand kennt die alten Gassen besser.", "So endete eine schöne Reise im März.",
]
PARAGRAPH = " ".join(SENTENCES)
OVER_LONG = "x" * 3000  # no sentence ends in it: 3,002 tokens, the de-en model reads 64


@pytest.fixture(scope="module")
def one_by_one(pairs):
    """Each sentence translated alone, as `encdec translate` translates a line."""
    return dict(zip(SENTENCES, alone(pairs, "de-en", SENTENCES), strict=True))


def test_the_splitter_keeps_every_character_and_cuts_where_sentences_end() -> None:
    assert len(PARAGRAPH) >= 2000
    assert sentences(PARAGRAPH, "de") == [sentence + " " for sentence in SENTENCES[:-1]] + SENTENCES[-1:]
    for text in ("  Ein Satz.  Noch einer!\n\n\tUnd z. B. dieser?  \r\nEnde", "", "\n\n", "ohne Punkt", " . . "):
        parts = split_text(text, "de")
        assert "".join(piece for _, piece in parts) == text
        assert join(parts, [piece.strip() for translate, piece in parts if translate]) == text


def test_a_2000_character_paragraph_translates_as_its_sentences_one_by_one(pairs, one_by_one) -> None:
    """LibreTranslate's API always splits; the native API when asked: both give each sentence's own translation,
    where the paragraph whole is over the model's 64 source tokens (the native API refuses it without splitting)."""
    expected = " ".join(one_by_one[sentence] for sentence in SENTENCES)
    with serve(pairs) as server:
        _, libre, _ = request(f"{server.url}{URL}/translate", {"q": PARAGRAPH, "source": "de", "target": "en"})
        _, native, _ = request(f"{server.url}/translate", {"text": [PARAGRAPH, SENTENCES[0]], "model": "de-en",
                                                           "split_sentences": True})
        whole, refused, _ = request(f"{server.url}/translate", {"text": PARAGRAPH, "model": "de-en"})
    assert libre == {"translatedText": expected}
    assert native == {"translations": [{"text": expected}, {"text": one_by_one[SENTENCES[0]]}]}
    assert whole == 422 and "exceed the limit of 64" in refused["error"]


def test_spacing_line_breaks_and_html_are_kept(pairs, one_by_one) -> None:
    s, t = SENTENCES, [one_by_one[sentence] for sentence in SENTENCES]
    text = f"  {s[0]}  {s[1]}\n\n\t{s[2]} {s[3]}  \r\n{s[4]}\n"
    page = f'<p class="a">{s[0]} {s[1]}</p>\n<ul><li> {s[2]} <b>{s[3]}</b>  {s[4]}</li></ul><br/>'
    with serve(pairs) as server:
        _, plain, _ = request(f"{server.url}{URL}/translate", {"q": text, "source": "de", "target": "en"})
        _, marked, _ = request(f"{server.url}{URL}/translate", {"q": page, "source": "de", "target": "en",
                                                                "format": "html"})
        _, native, _ = request(f"{server.url}/translate", {"text": text, "model": "de-en", "split_sentences": True})
    assert plain == {"translatedText": f"  {t[0]}  {t[1]}\n\n\t{t[2]} {t[3]}  \r\n{t[4]}\n"}
    assert native == {"translations": [{"text": plain["translatedText"]}]}
    e = [html.escape(translation, quote=False) for translation in t]
    assert marked == {"translatedText": f'<p class="a">{e[0]} {e[1]}</p>\n<ul><li> {e[2]} <b>{e[3]}</b>  {e[4]}'
                                        f'</li></ul><br/>'}


def test_an_over_long_sentence_is_cut_with_a_warning_and_the_batch_translates(pairs, caplog) -> None:
    """One text of 20 over --max-source-tokens: it is cut to the limit (what `translate(..., truncate=True)`
    gives), the log says so, and the 19 others translate as alone."""
    texts = [SENTENCES[i] for i in range(19)]
    texts.insert(7, OVER_LONG)
    with caplog.at_level(logging.WARNING, logger="encdec.inference"), serve(pairs, max_texts=20) as server:
        status, answer, _ = request(f"{server.url}{URL}/translate", {"q": texts, "source": "de", "target": "en"})
    assert status == 200
    assert answer == {"translatedText": alone(pairs, "de-en", texts, truncate=True)}
    assert answer["translatedText"][:7] + answer["translatedText"][8:] == alone(pairs, "de-en", SENTENCES[:19])
    cut = [record.getMessage() for record in caplog.records if "is cut to the limit" in record.getMessage()]
    assert cut == ["a sentence of 3002 source tokens is cut to the limit of 64 tokens (its start is translated): "
                   f"{OVER_LONG!r:.60}"]


def test_the_native_api_refuses_what_a_split_text_cannot_answer(pairs) -> None:
    with serve(pairs) as server:
        status, answer, _ = request(f"{server.url}/translate", {"text": PARAGRAPH, "model": "de-en",
                                                                "split_sentences": True, "return_scores": True})
    assert status == 422 and answer["field"] == "return_scores"
    assert "leave out return_scores or split_sentences" in answer["error"]


def test_encdec_translate_split_sentences(pairs, one_by_one, tmp_path, caplog, capsys) -> None:
    """Each line translated sentence by sentence, blank lines kept, an over-long sentence cut with a warning; the
    n-best, score and alignment outputs are refused with it."""
    t = [one_by_one[sentence] for sentence in SENTENCES]
    source = tmp_path / "in.de"
    source.write_text(f"{PARAGRAPH}\n\n  {SENTENCES[0]}  {SENTENCES[1]}\n{OVER_LONG}. {SENTENCES[2]}\n",
                      encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="encdec.inference"):
        assert main(["translate", "--model", str(pairs["de-en"]), "--input", str(source), "--output",
                     str(tmp_path / "out"), "--split-sentences", "de"]) == 0
    first = alone(pairs, "de-en", [OVER_LONG + "."], truncate=True)[0]
    assert (tmp_path / "out").read_text(encoding="utf-8").split("\n") == [
        " ".join(t), "", f"  {t[0]}  {t[1]}", f"{first} {t[2]}", ""]
    assert sum("is cut to the limit" in record.getMessage() for record in caplog.records) == 1
    assert main(["translate", "--model", str(pairs["de-en"]), "--input", str(source), "--split-sentences",
                 "--scores"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "encdec translate: error: --scores is not given with --split-sentences, which gives one translation per text, "
        "put together from its sentences'; leave out --scores or --split-sentences.")


def test_the_language_comes_from_the_model_card(tmp_path) -> None:
    (tmp_path / "README.md").write_text("---\nlanguage:\n- de\n- en\n---\n# a model\n", encoding="utf-8")
    assert card_source_language(tmp_path) == "de"
    assert card_source_language(tmp_path / "missing") is None


@pytest.mark.parametrize(("metadata", "languages"), [
    ("language:\n- de\n- en\n", ("de", "en")),
    ("language:\n- de\n- en\n- fr\n- uk\n", ("de", "en", "fr", "uk")),
    ("language: de\n", ("de",)),
    ("license: mit\n", ()),
    ("language: [de, en\n", ()),  # unreadable: logged, and no languages
], ids=["pair", "four", "one", "none", "broken"])
def test_a_model_s_languages_are_read_in_one_place_any_number_of_them(tmp_path, caplog, metadata: str,
                                                                      languages: tuple) -> None:
    """``encdec.cards.model_languages`` reads them from the card in its order; ``--split-sentences`` takes a pair's
    first as the source language, and a card of any other number names no source."""
    (tmp_path / "README.md").write_text(f"---\n{metadata}---\n# a model\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="encdec.cards"):
        assert model_languages(tmp_path) == languages
    assert card_source_language(tmp_path) == (languages[0] if len(languages) == 2 else None)
    broken = "[" in metadata
    assert any("could not read the model card" in r.getMessage() for r in caplog.records) == broken
    assert model_languages(tmp_path / "missing") == model_languages(None) == ()
