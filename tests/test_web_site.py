"""``encdec export --format web``: the static site translates in headless Chromium, served by a plain static file
server on 127.0.0.1 with every other host unreachable, as ``encdec translate`` does on the same model folder:
greedy and beam search, both families, through ``window.encdec.translate``; its tokenizer gives the ids of Rust
`tokenizers` for every kind of tokenizer encdec trains; its page refuses empty and over-long input with a message;
the export refuses bad input in one line and overwrites nothing; ``encdec serve --offline-site`` serves it at
``/offline/``.

The models are trained briefly on the built-in date task (trained models end their outputs at varied steps, and
their beams compete). The float32 site is compared with the torch model; the int8 site (the default) with the same
int8 graphs run by ONNX Runtime in Python, on what holds on every CPU: the same integer products (7-bit weights), float
parts that WebAssembly and each CPU's kernels may round differently, so the same greedy choices wherever the best
token leads by a clear margin (``CLEAR_MARGIN``): the same translation up to its first close call.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
import urllib.request
from pathlib import Path

import pytest
import torch

from encdec.errors import EncdecError
from encdec.folders import save_for_pipeline
from encdec.inference import load_engine, translate_lines
from encdec.inference.decoding import auto_max_new_tokens
from encdec.tokenization import language_settings
from encdec_cli import main
from test_serve import Server, assert_local_and_found, chromium_driver, page_requests
from tiny_model_folders import date_data
from toy import EOS, PAD, digit_tokenizer, trained_marian_like

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from encdec.decoding_options import AUTO_BUDGET  # noqa: E402
from encdec.inference.decoding import model_defaults  # noqa: E402
from encdec.ship.web_export import DECODING_RULES, RUNTIME_FILES, export_web, runtime_folder, site_bytes  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FAMILIES = ("transformer", "rnn")
# what the page's library is given to translate: ordinary dates, a blank line, and characters the vocabulary lacks
EXTRA_LINES = ["", "Friday, 1 Jan 1999!!", "«12/31/1999»"]


def require_runtime() -> None:
    """The built browser runtime (`make web`), or a skip (a failure in CI, whose `make test` builds it)."""
    try:
        runtime_folder()
    except Exception as error:
        if os.environ.get("CI") == "true":
            pytest.fail(str(error))
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def dates():
    return date_data()


@pytest.fixture(scope="module")
def folders(pairs):
    """family -> model folder: the session's two trained models (conftest's ``pairs``: 150 steps on dates each)."""
    return {"transformer": pairs["de-en"], "rnn": pairs["en-de"]}


@pytest.fixture(scope="module")
def sites(folders, tmp_path_factory):
    """(family, weights) -> site folder, for float32 and int8 weights."""
    require_runtime()
    root = tmp_path_factory.mktemp("web-sites")
    return {(family, weights): export_web(folder, root / f"{family}-{weights}", quantize=weights)
            for family, folder in folders.items() for weights in ("float32", "int8")}


@pytest.fixture(scope="module")
def lines(dates):
    return [source for source, _ in dates[2][:10]] + EXTRA_LINES


class StaticServer:
    """``python -m http.server`` on 127.0.0.1, a free port, in a thread of this process; stopped on exit."""

    def __init__(self, folder: Path) -> None:
        handler = functools.partial(QuietHandler, directory=str(folder))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> StaticServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=30)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no line per request in the test output
        pass


def page_translate(driver, lines: list[str], **options) -> list[str]:
    """``window.encdec.translate(lines, options)`` in the page, awaited."""
    return driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "encdec.translate(arguments[0], arguments[1]).then(done, (e) => done('error: ' + e.message));",
        lines, options)


def open_site(driver, url: str) -> dict:
    driver.set_script_timeout(120)
    driver.get(url)
    return driver.execute_async_script("const done = arguments[0]; encdec.ready.then(done, (e) => done(String(e)));")


def onnx_translate(site: Path, lines: list[str], num_beams: int) -> list[str]:
    """The site's own graphs run by ONNX Runtime in Python (`encdec translate --engine onnxruntime`)."""
    return translate_lines(str(site / "model"), lines, engine="onnxruntime", num_beams=num_beams, batch_size=1)


# How far apart two CPUs' logits from the same int8 graphs can be, as a share of the range of a step's logits. With
# 7-bit weights the integer products are the same on every CPU; only the float work around them (scales, requantized
# activations, softmax, normalization) may round differently. docs/fast-inference.md ("int8 on every CPU") measured
# the same graphs with VNNI and on AVX2 (under QEMU): their largest differences from torch's logits, as a share of
# the range, were equal to the third decimal, so the two CPUs' logits differ by under 0.001 of the range. Twice that
# is the margin (``CLEAR_MARGIN``) by which a greedy step's best logit must lead the next for every CPU to choose it.
CLEAR_MARGIN = 0.002


def sure_prefixes(site: Path, lines: list[str], source: str | None = None,
                  target: str | None = None) -> list[tuple[str, bool]]:
    """What every CPU's greedy search on the site's int8 graphs begins each line's translation with: the text of the
    tokens that ONNX Runtime in Python chooses (with `encdec translate`'s budget) before its first step whose best
    logit leads the next by no more than ``CLEAR_MARGIN`` of the step's logits' range, and whether that is the whole
    translation (no step that close, the end included). A blank line runs no model: ("", True). A multilingual
    model's ``source`` and ``target``: its target language token is forced at the first step, whatever its logits."""
    engine, tokenizer = load_engine(str(site / "model"), engine="onnxruntime")
    settings = language_settings(tokenizer, source, target)  # {"forced_bos_token_id": id}, or {} (bilingual)
    prefixes = []
    for line in lines:
        if not line.strip():
            prefixes.append(("", True))
            continue
        source_ids = tokenizer([line], return_tensors="pt")
        budget = auto_max_new_tokens(source_ids["input_ids"].size(1), engine.config)
        out = engine.model.generate(**source_ids, **settings, num_beams=1, do_sample=False, max_new_tokens=budget,
                                    output_logits=True, return_dict_in_generate=True)
        forced = len(settings)  # the steps that choose no token (the forced one)
        logits = torch.stack(out.logits)[forced:, 0]  # (steps, V)
        top = logits.topk(2, dim=-1).values
        margin = CLEAR_MARGIN * (logits.max(dim=-1).values - logits.min(dim=-1).values)
        close = ((top[:, 0] - top[:, 1]) <= margin).nonzero()
        sure = forced + (int(close[0, 0]) if len(close) else top.size(0))  # the steps every CPU takes alike
        new = out.sequences[0, 1:]  # the decoder start token left out
        prefixes.append((tokenizer.decode(new[:sure], skip_special_tokens=True).strip(), not len(close)))
    return prefixes


def assert_sure_prefixes(got: list[str], expected: list[str], prefixes: list[tuple[str, bool]]) -> None:
    """Each line begins with its sure prefix, and is the whole expected text where no step was close; the prefixes
    are most of what is expected, or this would check little."""
    for page, python, (prefix, whole) in zip(got, expected, prefixes, strict=True):
        assert page.startswith(prefix) and (page == python or not whole), (page, python, prefix)
    assert sum(len(prefix) for prefix, _ in prefixes) >= 0.5 * sum(map(len, expected)), (prefixes, expected)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("family", FAMILIES)
def test_the_site_translates_as_encdec_translate_in_chromium(family, folders, sites, lines) -> None:
    """Greedy search gives `encdec translate`'s text on every line, beam search (3 beams) on four, with and without
    `no_repeat_ngram_size` (`noRepeatNgramSize`); the int8 site gives what its graphs give in ONNX Runtime up to each
    line's first close call (what holds on every CPU: ``sure_prefixes``); nothing is fetched from anywhere but the
    site, nothing 404s."""
    expected = {1: translate_lines(str(folders[family]), lines, num_beams=1),
                3: translate_lines(str(folders[family]), lines[:4], num_beams=3, batch_size=1)}
    no_repeat = {1: translate_lines(str(folders[family]), lines, num_beams=1, no_repeat_ngram_size=1),
                 3: translate_lines(str(folders[family]), lines[:4], num_beams=3, no_repeat_ngram_size=1,
                                    batch_size=1)}
    assert no_repeat[1] != expected[1]  # a date holds "-" twice: no token twice changes it
    assert len(set(expected[1][:10])) > 3  # the model answers each date differently: a wrong source would show
    int8 = onnx_translate(sites[family, "int8"], lines, num_beams=1)
    prefixes = sure_prefixes(sites[family, "int8"], lines)
    driver = chromium_driver()
    try:
        with StaticServer(sites[family, "float32"]) as server:
            info = open_site(driver, f"{server.url}/")
            assert info["family"] == f"{family}_seq2seq" and info["weights"] == "float32", info
            assert page_translate(driver, lines, numBeams=1) == expected[1]
            assert page_translate(driver, lines[:4], numBeams=3) == expected[3]
            assert page_translate(driver, lines, numBeams=1, noRepeatNgramSize=1) == no_repeat[1]
            assert page_translate(driver, lines[:4], numBeams=3, noRepeatNgramSize=1) == no_repeat[3]
            assert page_translate(driver, ["x"], noRepeatNgramSize=-1) == (
                "error: noRepeatNgramSize must be a whole number from 0 to 64, got -1.")
            assert page_translate(driver, ["x"], glossary={"x": "y"}).startswith(
                "error: glossary: this site cannot put terms in (its graphs give no alignment)")
            assert_local_and_found(page_requests(driver), server.url)
        with StaticServer(sites[family, "int8"]) as server:
            assert open_site(driver, f"{server.url}/")["weights"] == "int8"
            got = page_translate(driver, lines, numBeams=1)
            assert_sure_prefixes(got, int8, prefixes)
            assert_local_and_found(page_requests(driver), server.url)
    finally:
        driver.quit()


TOKENIZER_CHECK = """
import { SubwordTokenizer } from "%s";
import fs from "node:fs";
const cases = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
const found = cases.map(({ folder, texts }) => {
  const read = (name) => JSON.parse(fs.readFileSync(`${folder}/${name}`, "utf8"));
  const tokenizer = new SubwordTokenizer(read("tokenizer.json"), read("tokenizer_config.json"));
  return texts.map((text) => { const ids = tokenizer.encode(text); return [ids, tokenizer.decode(ids)]; });
});
console.log(JSON.stringify(found));
"""


@pytest.mark.timeout(300)
def test_the_browser_tokenizer_gives_the_ids_of_rust_tokenizers(dates, tmp_path) -> None:
    """Each kind of tokenizer encdec trains (BPE or Unigram, Metaspace with or without punctuation split): the site's
    tokenizer module (web/src/tokenizer.js, run by Node.js) encodes and decodes as `tokenizers` does, on runs of
    punctuation, unknown characters, no-break spaces and tabs."""
    from encdec.tokenization import train_tokenizer

    node, modules = shutil.which("node"), REPO / "web" / "node_modules"
    if not node or not modules.is_dir():
        pytest.skip("Node.js and web/node_modules (`make web`) are needed to run the tokenizer module")
    texts = [source for source, _ in dates[1][:20]] + ["Ein Mann\u00a0mit  einem\tHut!!  ", "a.b,c;d:e?f", "   ",
                                                       "\ufb01 café ① ½ — «quoted» 日本語 😀", "It's 12:30."]
    cases, expected = [], []
    for algorithm in ("bpe", "unigram"):
        for pre_tokenizer in ("metaspace", "whitespace_punct"):
            tokenizer = train_tokenizer([text for pair in dates[1][:300] for text in pair] + ["café"] * 3,
                                        vocab_size=150, algorithm=algorithm, pre_tokenizer=pre_tokenizer,
                                        min_frequency=1)
            folder = tmp_path / f"{algorithm}-{pre_tokenizer}"
            tokenizer.save_pretrained(folder)
            cases.append({"folder": str(folder), "texts": texts})
            ids = tokenizer(texts)["input_ids"]
            expected.append([[row, tokenizer.decode(row, skip_special_tokens=True).strip()] for row in ids])
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    script = tmp_path / "check.mjs"
    script.write_text(TOKENIZER_CHECK % (REPO / "web" / "src" / "tokenizer.js").as_uri())
    done = subprocess.run([node, str(script), str(tmp_path / "cases.json")], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "NODE_PATH": str(modules)}, cwd=REPO / "web")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected


@pytest.mark.timeout(300)
def test_the_browser_tokenizer_gives_an_imported_marian_tokenizers_ids(tmp_path) -> None:
    """An imported OPUS-MT tokenizer (encdec import): the site's tokenizer module encodes sources as
    MarianImportTokenizer (and so MarianTokenizer) does, a SentencePiece piece that vocab.json lacks included (it
    is <unk>), and decodes the ids to the same text."""
    pytest.importorskip("sentencepiece")
    from encdec.marian.tokenizer import build_marian_tokenizer
    from marian_fixtures import HELD_OUT_SOURCES, write_marian_tokenizer

    node, modules = shutil.which("node"), REPO / "web" / "node_modules"
    if not node or not modules.is_dir():
        pytest.skip("Node.js and web/node_modules (`make web`) are needed to run the tokenizer module")
    tokenizer, missing = build_marian_tokenizer(write_marian_tokenizer(tmp_path / "marian"))
    tokenizer.save_pretrained(tmp_path / "imported")
    texts = HELD_OUT_SOURCES + ["an unseen 日本 word", "  two  spaces ", ""]
    ids = tokenizer(texts)["input_ids"]
    unk = tokenizer.unk_token_id
    assert missing >= 1 and any(unk in row for row in ids)  # the dropped piece: the case the module must map
    (tmp_path / "cases.json").write_text(json.dumps([{"folder": str(tmp_path / "imported"), "texts": texts}]))
    script = tmp_path / "check.mjs"
    script.write_text(TOKENIZER_CHECK % (REPO / "web" / "src" / "tokenizer.js").as_uri())
    done = subprocess.run([node, str(script), str(tmp_path / "cases.json")], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "NODE_PATH": str(modules)}, cwd=REPO / "web")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[[row, tokenizer.decode(row, skip_special_tokens=True).strip()]
                                        for row in ids]]


MARIAN_CHECK = """
import * as ort from "%s";
import fs from "node:fs";
import { badWordTokens } from "%s";
import { Translator } from "%s";
ort.env.wasm.numThreads = 1;
const [model, cases] = [process.argv[2], JSON.parse(fs.readFileSync(process.argv[3], "utf8"))];
const base = new URL(`file://${model}/`);
const rules = JSON.parse(fs.readFileSync(new URL("encdec_decoding.json", base), "utf8"));
const translator = await Translator.load(ort, base, rules, async (url) => new Uint8Array(fs.readFileSync(url)));
const found = [];
for (const options of cases.asked) found.push(await translator.translate(cases.lines, options));
const banned = [...badWordTokens([0, 5, 6], [[0], [6, 7], [5, 8], [5, 6, 9]])].sort((a, b) => a - b);
console.log(JSON.stringify({ found, banned }));
"""


def run_site_translator(model: Path, lines: list[str], asked: list[dict], work: Path) -> dict:
    """The site's translator (web/src/translator.js over ONNX Runtime Web's WebAssembly backend, run by Node.js) on
    the site's model folder ``model``: ``{"found": [its translations of lines, per options of asked], "banned":
    ...}`` (MARIAN_CHECK). Skips when Node.js or web/node_modules (`make web`) is absent."""
    node, modules = shutil.which("node"), REPO / "web" / "node_modules"
    if not node or not modules.is_dir():
        pytest.skip("Node.js and web/node_modules (`make web`) are needed to run the site's modules")
    (work / "cases.json").write_text(json.dumps({"lines": lines, "asked": asked}))
    script = work / "check.mjs"
    script.write_text(MARIAN_CHECK % tuple(path.as_uri() for path in (
        modules / "onnxruntime-web" / "dist" / "ort.node.min.mjs", REPO / "web" / "src" / "search.js",
        REPO / "web" / "src" / "translator.js")))
    done = subprocess.run([node, str(script), str(model), str(work / "cases.json")], capture_output=True,
                          text=True, timeout=120, cwd=REPO / "web")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.timeout(300)
def test_the_browser_search_decodes_marian_s_switches_as_encdec_translate(tmp_path) -> None:
    """A model with Marian's switches (`encdec import`: swish, a logits bias, no <s>) and generation rules (its pad
    token, which starts the decoder, is never generated; </s> ends a full budget) in a float32 site: the site's
    translator (web/src/translator.js: tokenizer, greedy and beam search over ONNX Runtime Web's WebAssembly
    backend, run by Node.js rather than a browser) translates as `encdec translate` does, a budget of 3 cutting most
    outputs; the rules it reads are the model's."""
    node, modules = shutil.which("node"), REPO / "web" / "node_modules"
    if not node or not modules.is_dir():
        pytest.skip("Node.js and web/node_modules (`make web`) are needed to run the site's modules")
    require_runtime()
    folder = save_for_pipeline(trained_marian_like(), digit_tokenizer(bos=False), tmp_path / "model")
    model = export_web(folder, tmp_path / "site", quantize="float32") / "model"
    rules = json.loads((model / DECODING_RULES).read_text())
    assert (rules["bad_words_ids"], rules["forced_eos_token_ids"]) == ([[PAD]], [EOS])
    assert json.loads((model / "encdec_onnx.json").read_text())["decoder_start_token_id"] == PAD
    lines = [" ".join(str((7 * i + 3 * j) % 10) for j in range(2 + i % 5)) for i in range(12)]
    asked = [{"numBeams": beams, **budget} for beams in (1, 4) for budget in ({"maxNewTokens": 3}, {})]
    found = run_site_translator(model, lines, asked, tmp_path)
    assert found["banned"] == [0, 7, 9]  # a one-token sequence always, a longer one after its prefix
    for options, got in zip(asked, found["found"], strict=True):
        assert got == translate_lines(folder, lines, num_beams=options["numBeams"],
                                      max_new_tokens=options.get("maxNewTokens")), options
    assert len(set(found["found"][1])) > 6  # the outputs depend on the input


@pytest.mark.timeout(300)
def test_the_page_refuses_empty_and_over_long_input(sites, lines) -> None:
    """The page says why it does not translate (nothing typed; a line over the model's source length), stays
    usable, then translates a good line as the library does."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver = chromium_driver()
    try:
        with StaticServer(sites["transformer", "int8"]) as server:
            info = open_site(driver, f"{server.url}/")
            wait = WebDriverWait(driver, 60)
            button, source = driver.find_element(By.ID, "translate"), driver.find_element(By.ID, "source")
            wait.until(lambda d: button.is_enabled())
            source.send_keys("  \n ")
            button.click()
            assert driver.find_element(By.ID, "error").text == "Nothing to translate: type or paste a sentence."
            source.clear()
            source.send_keys(lines[0] + "\n" + " ".join([lines[1]] * 20))
            button.click()
            wait.until(lambda d: d.find_element(By.ID, "error").text)
            error = driver.find_element(By.ID, "error").text
            assert error.startswith("line 2 has ") and f"at most {info['maxSourceTokens']}" in error, error
            assert driver.find_element(By.ID, "translation").get_attribute("value") == ""
            source.clear()
            source.send_keys(lines[0])
            wait.until(lambda d: button.is_enabled())
            button.click()
            expected = page_translate(driver, [lines[0]], numBeams=info["numBeams"])
            wait.until(lambda d: d.find_element(By.ID, "translation").get_attribute("value") == expected[0])
            assert driver.find_element(By.ID, "error").text == ""
    finally:
        driver.quit()


def error_of(argv: list[str], capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    return err


def test_the_export_refuses_bad_input_in_one_line_and_overwrites_nothing(folders, sites, tmp_path, capsys,
                                                                        monkeypatch) -> None:
    """An existing site, a folder that is no model, a missing runtime: one line each, nothing written or changed."""
    site = sites["rnn", "int8"]
    before = {path: path.stat().st_mtime_ns for path in site.rglob("*")}
    err = error_of(["export", "--format", "web", "--model", str(folders["rnn"]), "--output", str(site)], capsys)
    assert "already exists and is not empty" in err and "--overwrite" in err, err
    assert {path: path.stat().st_mtime_ns for path in site.rglob("*")} == before
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("not a model")
    err = error_of(["export", "--format", "web", "--model", str(tmp_path / "notes"), "--output",
                    str(tmp_path / "site")], capsys)
    assert "is not a model folder" in err, err
    monkeypatch.setattr("encdec.ship.web_export.RUNTIME", "no_such_runtime")
    err = error_of(["export", "--format", "web", "--model", str(folders["rnn"]), "--output",
                    str(tmp_path / "site")], capsys)
    assert "run `make web` (Node.js and npm)" in err, err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["notes"]  # no site, no staging folder left


def test_a_generation_config_is_refused_only_for_what_the_browser_cannot_decode(folders, tmp_path) -> None:
    """A trained model's generation_config.json spells out the neutral values (``do_sample: false``,
    ``repetition_penalty: 1.0``, ...): that is greedy or beam search, which the site runs, and so is
    ``no_repeat_ngram_size`` (the runtime implements it); a logits processor the runtime does not implement is
    refused, naming it."""
    from transformers import GenerationConfig

    from encdec.ship.web_export import check_generation_config

    model = tmp_path / "model"
    shutil.copytree(folders["transformer"], model)
    saved = json.loads((model / "generation_config.json").read_text())
    neutral = {"do_sample": False, "num_beam_groups": 1, "diversity_penalty": 0.0, "repetition_penalty": 1.0,
               "encoder_repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0,
               "min_length": 0, "renormalize_logits": False}
    (model / "generation_config.json").write_text(json.dumps({**saved, **neutral}))
    check_generation_config(model)
    GenerationConfig(**{**saved, **neutral, "no_repeat_ngram_size": 3}).save_pretrained(model)
    check_generation_config(model)
    GenerationConfig(**{**saved, **neutral, "repetition_penalty": 1.2}).save_pretrained(model)
    with pytest.raises(EncdecError, match="sets repetition_penalty, which the browser runtime does not implement"):
        check_generation_config(model)


def test_the_site_holds_the_runtime_and_the_model(folders, sites) -> None:
    """The files the page needs, the ONNX export under model/ with the decoding rules the browser reads (the model's
    defaults as encdec resolves them, the budget rule), the pinned packages recorded, and its weight."""
    site = sites["transformer", "int8"]
    assert all((site / name).is_file() for name in RUNTIME_FILES)
    manifest = json.loads((site / "model" / "encdec_onnx.json").read_text())
    assert manifest["weights"] == "int8" and manifest["family"] == "transformer_seq2seq"
    rules = json.loads((site / "model" / DECODING_RULES).read_text())
    assert rules["budget"] == AUTO_BUDGET and rules["max_beams"] == 16
    assert rules["defaults"] == {**model_defaults(folders["transformer"]).describe(), "early_stopping": False}
    pinned = json.loads((site / "web-runtime.json").read_text())["packages"]
    lock = json.loads((REPO / "web" / "package-lock.json").read_text())["packages"]
    assert {name: entry["integrity"] for name, entry in pinned.items()} == {
        name: lock[f"node_modules/{name}"]["integrity"] for name in pinned}
    weight = site_bytes(site)
    assert weight["total"] == weight["runtime"] + weight["model"] and weight["runtime"] < 5_000_000, weight


def content_type(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as response:
        assert response.status == 200, url
        return response.headers["Content-Type"]


@pytest.mark.timeout(300)
def test_encdec_serve_serves_the_site_at_offline(folders, sites, lines) -> None:
    """`encdec serve --offline-site SITE`: /offline redirects to /offline/, whose page translates in the browser
    as the site does anywhere, with the right types for the worker script and the graphs."""
    from encdec.serve.server import build_service, create_app

    site = sites["transformer", "int8"]
    expected = onnx_translate(site, lines[:3], num_beams=1)
    driver = chromium_driver()
    try:
        with Server(create_app(build_service(str(folders["transformer"])), offline_site=site)) as server:
            assert "javascript" in content_type(f"{server.url}/offline/encdec-worker.js")
            assert content_type(f"{server.url}/offline/model/encoder_model.onnx") == "application/octet-stream"
            open_site(driver, f"{server.url}/offline")
            assert driver.current_url == f"{server.url}/offline/"
            assert_sure_prefixes(page_translate(driver, lines[:3], numBeams=1), expected,
                                 sure_prefixes(site, lines[:3]))
            assert_local_and_found(page_requests(driver), server.url)
    finally:
        driver.quit()
