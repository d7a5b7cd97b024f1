"""``encdec export --format web`` of a multilingual model: the site translates every direction in headless Chromium as
``generate(forced_bos_token_id=...)`` does (the source language token first, the target language token forced and
dropped from the text), refuses a missing or unknown language naming the model's languages, and its page has a
language selector, names the model's languages, shows the download's size and offers the card's example. A
bilingual site names the pair its card names and keeps its API.

The model is test_multilingual_model.py's tiny Transformer (its toy task: the target "language" copy, rev or sort
decides what becomes of the source's digits). The float32 site is compared with torch, the int8 one with its own
graphs in ONNX Runtime on what holds on every CPU (test_web_site.py's ``sure_prefixes``).
"""

from __future__ import annotations

import functools
import itertools
import json
import shutil
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import AutoModelForSeq2SeqLM

from encdec.cards import write_model_card
from encdec.errors import EncdecError
from encdec.folders import save_for_pipeline
from encdec.inference import load_engine
from encdec.tokenization import language_settings
from test_multilingual_model import LANGUAGES, SOURCES, trained_model
from test_serve import assert_local_and_found, chromium_driver, page_requests
from test_web_site import (
    StaticServer,
    assert_sure_prefixes,
    open_site,
    page_translate,
    require_runtime,
    sure_prefixes,
)

pytest.importorskip("onnx")
from encdec.ship.web_export import DECODING_RULES, SOURCE_TEMPLATE, export_web  # noqa: E402

DIRECTIONS = list(itertools.product(LANGUAGES, LANGUAGES))  # all nine, copy -> copy included
LINES = SOURCES[:8] + [""]
EXAMPLE = {"text": "3 1 2", "src_lang": "rev", "tgt_lang": "sort"}  # a card's widget entry


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The trained multilingual Transformer saved as `encdec train` saves one, with a card that names its languages,
    its data and an example (the Hub's ``widget``)."""
    model, tokenizer = trained_model("transformer")
    tokenizer.src_lang, tokenizer.tgt_lang = LANGUAGES[0], None
    saved = save_for_pipeline(model, tokenizer, tmp_path_factory.mktemp("web-multilingual") / "digits")
    add_card(saved, LANGUAGES, "toy digits", EXAMPLE)
    return saved


def add_card(folder: Path, languages: list[str], data: str, example: dict) -> None:
    """A card as `encdec train` writes one (the scores on ``data`` name it), with ``example`` as its widget."""
    scores = {"bleu": 50.0, "chrf": 70.0, "split": "test"}
    card = ModelCard.load(write_model_card(folder, dataset_name=data, languages=languages, metrics=scores))
    card.data.widget = [example]
    card.save(folder / "README.md")


@pytest.fixture(scope="module")
def sites(folder, tmp_path_factory) -> dict[str, Path]:
    require_runtime()
    root = tmp_path_factory.mktemp("web-multilingual-sites")
    return {weights: export_web(folder, root / weights, quantize=weights) for weights in ("float32", "int8")}


def torch_translate(folder: Path, lines: list[str], source: str, target: str, num_beams: int) -> list[str]:
    """Each line by the saved model's ``generate(forced_bos_token_id=...)``, one at a time (its generation config's
    budget, as the site's)."""
    model, tokenizer = AutoModelForSeq2SeqLM.from_pretrained(folder).eval(), trained_model("transformer")[1]
    tokenizer.src_lang = source
    outputs = []
    for line in lines:
        if not line.strip():
            outputs.append("")
            continue
        with torch.no_grad():
            ids = model.generate(**tokenizer([line], return_tensors="pt"), num_beams=num_beams,
                                 forced_bos_token_id=tokenizer.get_lang_id(target))
        outputs.append(tokenizer.decode(ids[0], skip_special_tokens=True).strip())
    return outputs


def test_the_export_records_the_languages_the_page_and_the_download(folder, sites) -> None:
    """The decoding rules hold each language's token id and the source convention, what the page says (the card's
    languages, data and example) and the files a browser downloads with their bytes."""
    tokenizer = trained_model("transformer")[1]
    rules = json.loads((sites["int8"] / "model" / DECODING_RULES).read_text())
    assert rules["languages"] == {"codes": LANGUAGES, "token_ids": {code: tokenizer.get_lang_id(code)
                                                                     for code in LANGUAGES},
                                  "source_template": list(SOURCE_TEMPLATE)}
    assert rules["page"] == {"name": "digits", "data": "toy digits", "languages": LANGUAGES,
                             "example": {"text": "3 1 2", "source": "rev", "target": "sort"}}
    files = rules["download"]["files"]
    assert set(files) == {"model/encoder_model.onnx", "model/decoder_model_merged.onnx", "model/tokenizer.json",
                          "ort-wasm.wasm.gz"}
    assert files == {name: (sites["int8"] / name).stat().st_size for name in files}
    assert rules["download"]["bytes"] == sum(files.values())


def test_an_example_in_a_language_the_model_lacks_is_refused(folder, tmp_path) -> None:
    require_runtime()
    with pytest.raises(EncdecError, match=r"names the language 'de', which the model lacks \(its languages: copy, "
                                          r"rev, sort\)"):
        export_web(folder, tmp_path / "site", example={"text": "1 2", "source": "de"})
    assert not any(tmp_path.iterdir())


def test_a_date_task_model_offers_a_date_as_its_example(pairs, tmp_path) -> None:
    """Without an example on its card, a model that the built-in date task trained (its eval_results.json records
    the run's data) offers a date: a bilingual one a source of the task, a multilingual one a date in its first
    language, into its second; another model offers none."""
    from encdec.data import make_date_pairs
    from encdec.ship.web_export import page_about

    model = shutil.copytree(pairs["de-en"], tmp_path / "dates")
    (model / "eval_results.json").write_text(json.dumps({"config": {"data": {"format": "builtin_dates", "seed": 3}}}))
    assert page_about(model, None)["example"] == {"text": make_date_pairs(1, seed=3)[0][0], "source": None,
                                                  "target": None}
    assert page_about(model, {"codes": ["de", "iso"]})["example"] == {"text": "3. März 2021", "source": "de",
                                                                       "target": "iso"}
    (model / "eval_results.json").write_text(json.dumps({"config": {"data": {"format": "text"}}}))
    assert page_about(model, None)["example"] is None


def test_a_fixed_first_token_in_the_generation_config_is_refused(folder, tmp_path) -> None:
    """The site forces the target language each call names: a generation config's own ``forced_bos_token_id`` is
    refused, saying so."""
    from transformers import GenerationConfig

    from encdec.ship.web_export import check_generation_config

    model = shutil.copytree(folder, tmp_path / "model")
    config = GenerationConfig.from_pretrained(model)
    config.forced_bos_token_id = trained_model("transformer")[1].get_lang_id("sort")
    config.save_pretrained(model)
    with pytest.raises(EncdecError, match="sets forced_bos_token_id, a fixed first token; the site forces the token "
                                          "of the target language each translation names"):
        check_generation_config(model)


@pytest.mark.timeout(600)
def test_every_direction_translates_as_generate_in_chromium(folder, sites) -> None:
    """Greedy search on every direction and beam search (3 beams) on three, equal to torch's ``generate(
    forced_bos_token_id=...)``; the source ids start with the source language token; the int8 site gives what its
    graphs give in ONNX Runtime up to each line's first close call; a missing or unknown language is refused naming
    the model's languages, and so is a language token typed in a line; nothing is fetched from anywhere but the
    site."""
    tokenizer = trained_model("transformer")[1]
    greedy = {pair: torch_translate(folder, LINES, *pair, num_beams=1) for pair in DIRECTIONS}
    beams = {pair: torch_translate(folder, LINES[:3], *pair, num_beams=3) for pair in DIRECTIONS[1::4]}
    assert len({tuple(texts) for texts in greedy.values()}) == 3  # the target decides the output, not the source
    tokenizer.src_lang = "rev"
    driver = chromium_driver()
    try:
        with StaticServer(sites["float32"]) as server:
            info = open_site(driver, f"{server.url}/")
            assert info["languages"] == LANGUAGES and info["weights"] == "float32", info
            assert driver.execute_async_script(
                "const done = arguments[1];"
                "encdec.encode(arguments[0], {source: 'rev'}).then(done, (e) => done('error: ' + e.message));",
                SOURCES[:2]) == tokenizer(SOURCES[:2])["input_ids"]
            for (source, target), expected in greedy.items():
                assert page_translate(driver, LINES, source=source, target=target) == expected, (source, target)
            for (source, target), expected in beams.items():
                assert page_translate(driver, LINES[:3], source=source, target=target, numBeams=3) == expected
            assert page_translate(driver, ["1 2"], target="sort") == (
                "error: source is missing: this model translates between copy, rev, sort; pass {source, target}, "
                "each one of them.")
            assert page_translate(driver, ["1 2"], source="copy", target="de") == (
                'error: unknown target language "de": this model\'s languages are copy, rev, sort.')
            assert page_translate(driver, ["1 2", "__rev__ 1 2"], source="copy", target="sort") == (
                "error: line 2 holds the language token of rev: the languages are chosen with source and target, not "
                "typed in the text; remove it.")
            assert_local_and_found(page_requests(driver), server.url)
        with StaticServer(sites["int8"]) as server:
            assert open_site(driver, f"{server.url}/")["weights"] == "int8"
            for source, target in DIRECTIONS[::4]:
                expected = onnx_translate_direction(sites["int8"], source, target)
                assert_sure_prefixes(page_translate(driver, LINES, source=source, target=target), expected,
                                     sure_prefixes(sites["int8"], LINES, source, target))
    finally:
        driver.quit()


def onnx_translate_direction(site: Path, source: str, target: str) -> list[str]:
    """``LINES`` by the site's own graphs in ONNX Runtime (Python), greedy, one at a time."""
    engine, tokenizer = load_engine(str(site / "model"), engine="onnxruntime")
    settings = language_settings(tokenizer, source, target)
    outputs = []
    for line in LINES:
        ids = engine.model.generate(**tokenizer([line], return_tensors="pt"), **settings) if line.strip() else None
        outputs.append(tokenizer.decode(ids[0], skip_special_tokens=True).strip() if line.strip() else "")
    return outputs


# run before the page's scripts: every "progress" event of window.encdec, kept in window.progressSeen
RECORD_PROGRESS = """
window.progressSeen = [];
Object.defineProperty(window, "encdec", {configurable: true, get() { return this.recorded; }, set(api) {
  this.recorded = api;
  api.addEventListener("progress", ({detail}) => window.progressSeen.push({...detail}));
}});
"""


@pytest.mark.timeout(300)
def test_the_page_has_a_language_selector_the_download_size_and_an_example(sites) -> None:
    """The page names the model's languages and data, selects among them, says what it downloaded (the bytes the
    export recorded; progress events as the bytes arrive, up to that total), fills in the card's example with its
    languages and translates it as the library does; an error then clears that translation."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    rules = json.loads((sites["int8"] / "model" / DECODING_RULES).read_text())
    total = rules["download"]["bytes"]
    driver = chromium_driver()
    try:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": RECORD_PROGRESS})
        with StaticServer(sites["int8"]) as server:
            open_site(driver, f"{server.url}/")
            progress = driver.execute_script("return window.progressSeen")
            assert len(progress) > 2 and progress[-1] == {"loaded": total, "total": total}, progress
            loaded = [event["loaded"] for event in progress]
            assert loaded == sorted(loaded) and {event["total"] for event in progress} == {total}, progress
            find = functools.partial(driver.find_element, By.ID)
            wait = WebDriverWait(driver, 60)
            wait.until(lambda d: find("translate").is_enabled())
            assert find("about").text == (
                "digits translates between copy, rev and sort (every direction). Trained on toy digits.")
            assert f"{total / 1e6:.1f} MB downloaded" in find("status").text, find("status").text
            assert driver.execute_script("return encdec.download") == {"loaded": total, "total": total}
            source, target = Select(find("source-lang")), Select(find("target-lang"))
            assert [option.get_attribute("value") for option in source.options] == LANGUAGES
            assert [option.get_attribute("value") for option in target.options] == LANGUAGES
            assert (source.first_selected_option.get_attribute("value"),
                    target.first_selected_option.get_attribute("value")) == ("copy", "rev")
            find("example").click()
            assert find("source").get_attribute("value") == EXAMPLE["text"]
            assert (source.first_selected_option.get_attribute("value"),
                    target.first_selected_option.get_attribute("value")) == ("rev", "sort")
            expected = page_translate(driver, [EXAMPLE["text"]], source="rev", target="sort")[0]
            assert expected == "1 2 3"
            find("translate").click()
            wait.until(lambda d: find("translation").get_attribute("value") == expected)
            find("source").clear()
            find("translate").click()
            assert find("error").text == "Nothing to translate: type or paste a sentence."
            assert find("translation").get_attribute("value") == ""
    finally:
        driver.quit()


@pytest.mark.timeout(300)
def test_a_bilingual_site_names_its_pair_and_keeps_its_api(pairs, tmp_path) -> None:
    """A bilingual model whose card names its pair: the page says it, the example is offered, `translate` without
    languages or with that pair gives the same text, another language is refused naming the pair, and the rules
    record no languages."""
    from selenium.webdriver.common.by import By

    require_runtime()
    model = shutil.copytree(pairs["de-en"], tmp_path / "dates")
    add_card(model, ["de", "en"], "encdec built-in dates", {"text": "3 March 2021"})
    site = export_web(model, tmp_path / "site", quantize="float32")
    rules = json.loads((site / "model" / DECODING_RULES).read_text())
    assert rules["languages"] is None and rules["page"]["languages"] == ["de", "en"]
    driver = chromium_driver()
    try:
        with StaticServer(site) as server:
            info = open_site(driver, f"{server.url}/")
            assert info["languages"] is None and info["page"]["example"]["text"] == "3 March 2021"
            about = driver.find_element(By.ID, "about").text
            assert about.startswith("dates translates ") and "(de) into " in about and about.endswith(
                "(en). Trained on encdec built-in dates."), about
            assert not driver.find_element(By.ID, "languages").is_displayed()
            assert driver.find_element(By.ID, "example").is_displayed()
            lines = ["3 March 2021", "", "Friday, 1 Jan 1999"]
            plain = page_translate(driver, lines)
            assert plain[0] and page_translate(driver, lines, source="de", target="en") == plain
            assert page_translate(driver, lines, target="fr") == (
                "error: this model translates de into en alone: leave out source and target, or give those.")
    finally:
        driver.quit()
