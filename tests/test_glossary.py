"""Glossaries (``encdec.glossary``): DeepL's entry formats and their refusals, where a term matches, how its target
term is put in through the alignment, and a trained model of the date task whose glossary's terms come out in
place of the words they replace, through the Python API and ``encdec translate --glossary``; a glossary that matches
nothing changes nothing; what a glossary cannot be given with is refused in one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from encdec.decoding_options import resolve
from encdec.errors import EncdecError, OptionError
from encdec.folders import save_for_pipeline
from encdec.glossary import MAX_GLOSSARY_BYTES, Glossary, parse_glossary, read_glossary
from encdec.inference import load_engine, translate, translate_detailed
from encdec.serve import ServeLimits
from encdec.serve.server import create_app, load_models
from encdec_cli import main
from test_corpus import ENV
from test_distributed import run_until_stopped
from test_serve import Server, request, serve_app

# --- entries -------------------------------------------------------------------------------------------------------

def test_tsv_and_csv_entries_as_deepl_writes_them(tmp_path: Path) -> None:
    tsv = tmp_path / "terms.tsv"
    tsv.write_text("\ufeffHund\thound\n\n  rote Auto \t crimson car\r\n", encoding="utf-8")  # a BOM, CRLF, spaces
    assert read_glossary(tsv).entries == (("Hund", "hound"), ("rote Auto", "crimson car"))
    csv = tmp_path / "terms.csv"
    csv.write_text('Hund,hound,de,en\n"Haus, groß","big house",DE,EN\n"sagt ""ja""",says yes,de,en\n', "utf-8")
    glossary = read_glossary(csv)
    assert glossary.entries == (("Hund", "hound"), ("Haus, groß", "big house"), ('sagt "ja"', "says yes"))
    assert (glossary.source_lang, glossary.target_lang) == ("de", "en")
    assert Glossary.of({"a": "b"}).identity != Glossary.of({"a": "c"}).identity


@pytest.mark.parametrize(("text", "form", "message"), [
    ("Hund hound\n", "tsv", r"line 1 has no tab between its terms: write `source term<TAB>target term`"),
    ("a\tb\tc\n", "tsv", "line 1 has more than one tab"),
    ("Hund\thound\nKatze\tcat\nHund\tdog\n", "tsv", r"line 3: the source term 'Hund' is already on line 1"),
    ("Hund\t \n", "tsv", "line 1: a term is empty"),
    ("Hund\tho\x07und\n", "tsv", "line 1: the term 'ho\\\\x07und' holds a control character"),
    ("Hund\t" + "x" * 1025 + "\n", "tsv", "line 1: a term is over 1024 bytes"),
    ("\n \n", "tsv", "has no entries"),
    ("Hund;hound\n", "csv", "line 1 has 1 fields: write `source,target`"),
    ("Hund,hound,de,en\nKatze,cat,fr,en\n", "csv", "different language pairs"),
    ("a\tb\n", "xml", "entries come as tsv or csv, not 'xml'"),
])
def test_a_bad_glossary_is_refused_naming_its_line(text: str, form: str, message: str) -> None:
    with pytest.raises(EncdecError, match=message):
        parse_glossary(text, form, "terms.tsv")


def test_a_glossary_file_that_is_too_big_missing_or_not_utf8_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.tsv"
    with open(big, "wb") as f:
        f.truncate(MAX_GLOSSARY_BYTES + 1)  # sparse: nothing of it is read
    with pytest.raises(EncdecError, match="is over 10 MiB"):
        read_glossary(big)
    with pytest.raises(EncdecError, match="does not exist"):
        read_glossary(tmp_path / "none.tsv")
    (tmp_path / "latin1.tsv").write_bytes("Stra\xdfe\tstreet\n".encode("latin-1"))
    with pytest.raises(EncdecError, match="is not UTF-8 text"):
        read_glossary(tmp_path / "latin1.tsv")


def test_a_glossary_of_another_language_pair_is_refused() -> None:
    glossary = parse_glossary("Hund,dog,de,en\n", "csv")
    assert resolve(None, glossary=glossary, source_lang="de", target_lang="en").glossary == glossary
    assert resolve(None, glossary=glossary).glossary == glossary  # a bilingual model names no pair
    with pytest.raises(OptionError, match=r"`glossary` is for de-en, and this translation is fr-en; give the glossary"):
        resolve(None, glossary=glossary, source_lang="fr", target_lang="en")


# --- matching and putting terms in ---------------------------------------------------------------------------------

def test_terms_match_whole_words_case_for_case_the_longer_first() -> None:
    glossary = Glossary.of({"rot": "red", "rote Auto": "crimson car", "auto": "car", "Bank": "bench"})
    found = [(m.start, m.end, m.target) for m in glossary.matches("Rot, das rote Auto und Autos; auto bank.")]
    # "Rot" (a lower-case term capitalised), "rote Auto" (not "Auto" alone, nor "rot" inside "rote"), "auto";
    # not "Autos" (another word) nor "bank" (an upper-case term matches as written only)
    assert found == [(0, 3, "Red"), (9, 18, "crimson car"), (30, 34, "car")]


@pytest.mark.parametrize(("source", "translation", "links", "expected"), [
    # the aligned words replaced, the punctuation around them kept
    ("Der Hund schläft.", "The dog sleeps.", {(0, 0), (1, 1), (2, 2)}, "The hound sleeps."),
    ("Ein rote Auto.", "A red car.", {(0, 0), (1, 1), (2, 2)}, "A crimson car."),
    ("„Hund“, sagt er.", "“Dog,” he says.", {(0, 0), (1, 2), (2, 1)}, "“Hound,” he says."),  # capital at the start
    # aligned to nothing: put in after the word aligned to the closest source word before the term
    ("Der Hund schläft.", "The sleeps.", {(0, 0), (2, 1)}, "The hound sleeps."),
    ("Hund schläft.", "Sleeps.", {(1, 0)}, "hound Sleeps."),
    ("Er sieht den Hund.", "He sees.", {(0, 0), (1, 1), (2, 1)}, "He sees hound."),  # before the full stop
    # already there (case and punctuation aside): unchanged
    ("Der Hund schläft.", "The Hound sleeps.", {(0, 0), (1, 1), (2, 2)}, "The Hound sleeps."),
    # the longest unbroken run of aligned words, not everything between stray links
    ("Der Hund schläft.", "The big dog sleeps now.", {(0, 0), (1, 1), (1, 2), (1, 4), (2, 3)},
     "The hound sleeps now."),
])
def test_a_term_replaces_the_words_aligned_to_it(source: str, translation: str, links: set, expected: str) -> None:
    glossary = Glossary.of({"Hund": "hound", "rote Auto": "crimson car"})
    assert glossary.apply(source, translation, links) == expected


def test_a_term_already_there_is_not_replaced_by_another() -> None:
    """"Hund" is aligned to "dog" and, wrongly, to "black"; "schwarze" -> "black" is there already and stays."""
    glossary = Glossary.of({"Hund": "hound", "schwarze": "black"})
    links = {(0, 0), (1, 1), (2, 1), (2, 2)}
    assert glossary.apply("Der schwarze Hund", "The black dog", links) == "The black hound"


def test_the_alignment_is_carried_over_to_the_terms_words() -> None:
    """A replaced word's links go to the term's words, the words after it move along, and a term put in is linked
    to its source word (what markup is put back by after a glossary)."""
    glossary = Glossary.of({"Hund": "big hound", "Katze": "cat"})
    assert glossary.apply_aligned("Der Hund bellt", "The dog barks", {(0, 0), (1, 1), (2, 2)}) == (
        "The big hound barks", {(0, 0), (1, 1), (1, 2), (2, 3)})
    assert glossary.apply_aligned("Die Katze schläft.", "The sleeps.", {(0, 0), (2, 1)}) == (
        "The cat sleeps.", {(0, 0), (1, 1), (2, 2)})
    assert glossary.apply_aligned("Nichts", "Nothing", {(0, 0)}) == ("Nothing", {(0, 0)})


def test_two_terms_aligned_to_one_word_both_come_out() -> None:
    glossary = Glossary.of({"Hund": "hound", "Katze": "cat"})
    assert glossary.apply("Hund Katze", "pets", {(0, 0), (1, 0)}) == "hound cat"


def test_a_glossary_that_matches_nothing_changes_nothing() -> None:
    glossary = Glossary.of({"Zebra": "zebra"})
    assert glossary.apply("Der Hund schläft.", "The dog  sleeps.", {(0, 0)}) == "The dog  sleeps."


# --- through a trained model ---------------------------------------------------------------------------------------

def year_sources(held_out) -> list[str]:
    """Held-out dates whose year is a word of its own ("March 3, 2021", not "03.03.2021")."""
    return [source for source, target, _ in held_out if target.split()[0] in source.split()]


@pytest.mark.parametrize("family", ["transformer", "rnn"])
def test_a_trained_models_year_comes_out_as_the_glossary_says(aligned_models, aligned_dates, family) -> None:
    """The date task writes "YYYY MM DD"; with the year of each date mapped to a word, that word takes the year's
    place (the word aligned to the source's year), and the month and day are the model's own."""
    model, (tokenizer, _, held_out) = aligned_models[family], aligned_dates
    sources = year_sources(held_out)[:40]
    assert len(sources) == 40
    plain = translate(model, tokenizer, sources)
    years = {target.split()[0] for _, target, _ in held_out}
    glossary = {year: f"year{year}" for year in years}
    with_terms = translate(model, tokenizer, sources, glossary=glossary)
    expected = [" ".join([f"year{year}", *text.split()[1:]]) for text, year in
                zip(plain, [next(w for w in s.replace(",", " ").split() if w in years) for s in sources], strict=True)]
    right = sum(got == want for got, want in zip(with_terms, expected, strict=True))
    assert all(any(word.startswith("year") for word in text.split()) for text in with_terms)  # every term is in
    assert right >= 38, list(zip(sources, with_terms, expected, strict=True))
    assert translate(model, tokenizer, sources, glossary={"Zebra": "zebra"}) == plain


def test_encdec_translate_takes_a_glossary_file(aligned_models, aligned_dates, tmp_path: Path, capsys) -> None:
    tokenizer, _, held_out = aligned_dates
    folder = save_for_pipeline(aligned_models["transformer"], tokenizer, tmp_path / "model")
    sources = year_sources(held_out)[:5]
    (tmp_path / "in.txt").write_text("".join(source + "\n" for source in sources), encoding="utf-8")
    (tmp_path / "terms.tsv").write_text("".join(f"{y}\tY{y}\n" for y in {t.split()[0] for _, t, _ in held_out}))
    args = ["translate", "--model", str(folder), "--input", str(tmp_path / "in.txt")]
    assert main([*args, "--glossary", str(tmp_path / "terms.tsv")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == translate(aligned_models["transformer"], tokenizer, sources,
                              glossary=read_glossary(tmp_path / "terms.tsv"))
    assert all(line.split()[0].startswith("Y") for line in lines)
    with pytest.raises(SystemExit) as stopped:  # argparse's refusal of a flag's value
        main([*args, "--glossary", str(tmp_path / "none.tsv")])
    assert stopped.value.code == 2 and "argument --glossary: The glossary" in capsys.readouterr().err
    assert main([*args, "--glossary", str(tmp_path / "terms.tsv"), "--scores"]) == 2
    assert "--scores is not given with --glossary" in capsys.readouterr().err


@pytest.mark.parametrize(("n_best", "options", "message"), [
    (2, {"num_beams": 2}, "`n_best` is not given with `glossary`"),
    (1, {"scores": True}, "`scores` is not given with `glossary`"),
])
def test_a_glossary_gives_one_translation(aligned_models, aligned_dates, n_best: int, options: dict,
                                          message: str) -> None:
    with pytest.raises(OptionError, match=message):
        translate_detailed(aligned_models["transformer"], aligned_dates[0], ["March 3, 2021"], n_best,
                           glossary={"a": "b"}, **options)


def test_an_alignment_asked_with_a_glossary_is_carried_over_to_its_terms(aligned_models, aligned_dates) -> None:
    """With a glossary, ``alignments`` gives the links of the final words: the term's words are aligned to the
    source word they translate, the others keep theirs; without a term in the source, the model's own alignment."""
    model, tokenizer = aligned_models["transformer"], aligned_dates[0]
    plain = translate_detailed(model, tokenizer, ["March 3, 2021"], alignments=True)[0][0]
    termed = translate_detailed(model, tokenizer, ["March 3, 2021"], alignments=True,
                                glossary={"2021": "the year MMXXI"})[0][0]
    assert plain.text.split()[0] == "2021" and termed.text.split()[:3] == ["the", "year", "MMXXI"]
    links = {tuple(map(int, link.split("-"))) for link in termed.alignment.split()}
    assert {(2, 0), (2, 1), (2, 2)} <= links and not {(i, j) for i, j in links if j < 3 and i != 2}
    assert termed.attention is None  # the attention was the translation's before its term went in
    untouched = translate_detailed(model, tokenizer, ["March 3, 2021"], alignments=True, glossary={"Zebra": "z"})
    assert (untouched[0][0].text, untouched[0][0].alignment) == (plain.text, plain.alignment)


def test_a_bad_glossary_given_in_python_is_an_option_error(aligned_models, aligned_dates) -> None:
    with pytest.raises(OptionError, match=r"`glossary` is refused: the glossary, entry 1: a term is empty"):
        translate(aligned_models["transformer"], aligned_dates[0], ["March 3, 2021"], glossary={"a": " "})
    with pytest.raises(OptionError, match="takes a mapping of source term -> target term"):
        translate(aligned_models["transformer"], aligned_dates[0], ["March 3, 2021"], glossary="terms.tsv")


def test_the_native_api_takes_a_glossary(aligned_models, aligned_dates, tmp_path: Path) -> None:
    """``glossary`` in a request gives ``translate``'s text with the same glossary; a bad one is a 400 naming the
    field, and the server goes on."""
    tokenizer, _, held_out = aligned_dates
    folder = save_for_pipeline(aligned_models["transformer"], tokenizer, tmp_path / "model")
    sources = year_sources(held_out)[:6]
    glossary = {year: f"Y{year}" for year in {t.split()[0] for _, t, _ in held_out}}
    expected = translate(aligned_models["transformer"], tokenizer, sources, glossary=glossary)
    with serve_app(folder) as server:
        status, body, _ = request(f"{server.url}/translate", {"text": sources, "glossary": glossary})
        bad = [request(f"{server.url}/translate", {"text": sources[0], **fields}) for fields in (
            {"glossary": {"2021": ""}}, {"glossary": {"2021": "x"}, "n_best": 2, "num_beams": 2},
            {"glossary": ["2021", "x"]})]
        again, _, _ = request(f"{server.url}/translate", {"text": sources[0]})
    assert status == 200 and [answer["text"] for answer in body["translations"]] == expected
    assert [code for code, _, _ in bad] == [422, 422, 422] and again == 200, bad
    assert [error["field"] for _, error, _ in bad] == ["glossary", "n_best", "glossary"]
    assert bad[0][1]["error"].startswith("glossary: is refused: the glossary, entry 1: a term is empty")
    assert "not given with glossary" in bad[1][1]["error"]
    assert 'an object of strings, {"source term": "target term", ...}' in bad[2][1]["error"]


def test_libretranslate_takes_a_glossary_as_encdec_s_own_field(aligned_models, aligned_dates, tmp_path: Path) -> None:
    """``glossary`` in LibreTranslate's ``/translate`` (encdec's extension) gives ``translate``'s text with it;
    in HTML too (the tags on the words the terms took the place of); refused with ``alternatives``, through a pivot
    and when malformed, in LibreTranslate's words."""
    tokenizer, _, held_out = aligned_dates
    folder = save_for_pipeline(aligned_models["transformer"], tokenizer, tmp_path / "model")
    sources = year_sources(held_out)[:3]
    glossary = {year: f"Y{year}" for year in {t.split()[0] for _, t, _ in held_out}}
    expected = translate(aligned_models["transformer"], tokenizer, sources, glossary=glossary)
    url = "/libretranslate/translate"
    with Server(create_app(load_models([f"de-en={folder}", f"en-fr={folder}"], limits=ServeLimits()))) as server:
        status, body, _ = request(server.url + url, {"q": sources, "source": "de", "target": "en",
                                                     "glossary": glossary})
        html = request(server.url + url, {"q": f"<p><b>{sources[0]}</b></p>", "source": "de", "target": "en",
                                          "format": "html", "glossary": glossary})
        refused = [request(server.url + url, {"q": sources[0], "source": "de", **fields}) for fields in (
            {"target": "en", "glossary": glossary, "alternatives": 2}, {"target": "fr", "glossary": glossary},
            {"target": "en", "glossary": {"2021": ""}}, {"target": "en", "glossary": "2021\tY"})]
    assert (status, body) == (200, {"translatedText": expected})
    assert html[:2] == (200, {"translatedText": f"<p><b>{expected[0]}</b></p>"})
    assert [code for code, _, _ in refused] == [400] * 4
    errors = [error["error"] for _, error, _ in refused]
    assert errors[0] == "Invalid request: alternatives are not given with glossary; leave one of them out"
    assert errors[1] == ("Invalid request: glossary needs a model that translates de into fr directly, and this "
                         "pair goes through en")
    assert errors[2].startswith("Invalid request: glossary: is refused: the glossary, entry 1: a term is empty")
    assert errors[3].startswith("Invalid request: glossary: is refused: the glossary takes a mapping")


def test_a_corpus_run_resumes_only_with_the_same_glossary(aligned_models, aligned_dates, tmp_path: Path,
                                                           capsys) -> None:
    """Killed after its first chunk, a corpus translation with a glossary goes on with the same glossary file (to
    the uninterrupted run's output) and is refused with another, naming the glossary."""
    tokenizer, _, held_out = aligned_dates
    folder = save_for_pipeline(aligned_models["transformer"], tokenizer, tmp_path / "model")
    sources = year_sources(held_out)[:30]
    (tmp_path / "in.txt").write_text("".join(source + "\n" for source in sources), encoding="utf-8")
    years = sorted({t.split()[0] for _, t, _ in held_out})
    (tmp_path / "terms.tsv").write_text("".join(f"{y}\tY{y}\n" for y in years), encoding="utf-8")
    (tmp_path / "other.tsv").write_text("".join(f"{y}\tZ{y}\n" for y in years), encoding="utf-8")
    common = ["translate", "--model", str(folder), "--input", str(tmp_path / "in.txt"), "--output",
              str(tmp_path / "out.txt"), "--quiet", "--chunk-size", "10"]
    run_until_stopped([sys.executable, "-m", "encdec", *common, "--glossary", str(tmp_path / "terms.tsv")], ENV,
                      "chunk:1", tmp_path / "killed.log")
    assert main([*common, "--glossary", str(tmp_path / "other.tsv"), "--resume"]) == 2
    assert "options glossary:" in capsys.readouterr().err
    assert main([*common, "--glossary", str(tmp_path / "terms.tsv"), "--resume"]) == 0
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == translate(
        aligned_models["transformer"], tokenizer, sources, glossary=read_glossary(tmp_path / "terms.tsv"))


def test_evaluate_records_the_glossary(aligned_models, aligned_dates, tmp_path: Path, capsys) -> None:
    tokenizer, _, held_out = aligned_dates
    folder = save_for_pipeline(aligned_models["transformer"], tokenizer, tmp_path / "model")
    (tmp_path / "src.txt").write_text("".join(s + "\n" for s, _, _ in held_out[:20]), encoding="utf-8")
    (tmp_path / "ref.txt").write_text("".join(t + "\n" for _, t, _ in held_out[:20]), encoding="utf-8")
    (tmp_path / "terms.tsv").write_text("Zebra\tzebra\n", encoding="utf-8")
    assert main(["evaluate", "--model", str(folder), "--source-file", str(tmp_path / "src.txt"), "--reference-file",
                 str(tmp_path / "ref.txt"), "--glossary", str(tmp_path / "terms.tsv"), "--output",
                 str(tmp_path / "scores.json")]) == 0
    recorded = json.loads((tmp_path / "scores.json").read_text(encoding="utf-8"))
    assert recorded["glossary"] == read_glossary(tmp_path / "terms.tsv").identity
    assert recorded["glossary"].startswith("1 entries, ?-?, sha256 ")


def test_an_ensemble_of_one_model_twice_puts_the_terms_in_as_the_model(aligned_models, aligned_dates,
                                                                        tmp_path: Path) -> None:
    tokenizer, _, held_out = aligned_dates
    folder = save_for_pipeline(aligned_models["transformer"], tokenizer, tmp_path / "model")
    engine, loaded = load_engine([folder, folder])
    sources = year_sources(held_out)[:8]
    glossary = {year: f"Y{year}" for year in {t.split()[0] for _, t, _ in held_out}}
    assert translate(engine, loaded, sources, glossary=glossary) == translate(
        aligned_models["transformer"], tokenizer, sources, glossary=glossary)
