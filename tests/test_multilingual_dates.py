"""The built-in multilingual task end to end: one ``encdec train`` run of the multilingual demo recipe
(configs/demo-multilingual.yaml: German, English and French dates and ISO 8601, all twelve directions, with fewer
steps and pairs) learns every direction, and every front end and engine translates each direction alike: ``encdec
translate --source-lang S --target-lang T``, ``pipeline(model=DIR, src_lang=S, tgt_lang=T)`` and ``generate(
forced_bos_token_id=...)`` agree and write the date as the target language does (``encdec.data.dates.write_date``);
``encdec serve`` gives the same through its native API and LibreTranslate's; the CTranslate2 and ONNX Runtime exports
give torch's text; the browser site gives it in headless Chromium; and the folder loads and translates in a process
where encdec is not installed (``trust_remote_code``).

The test dates are the run's own held-out test dates (no language of them seen in training), each written in every
language, so each direction is scored on the same dates.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
from pathlib import Path

import pytest
import torch
import yaml
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from encdec.data import load_builtin_multilingual_dates
from encdec.data.dates import DATE_LANGUAGES, write_date
from encdec.data.directions import every_direction
from encdec.serve import ServeLimits
from encdec.serve.server import create_app, load_models
from encdec_cli import main
from remote_code import load_without_encdec
from test_libretranslate import URL as LIBRETRANSLATE
from test_serve import Server, assert_local_and_found, chromium_driver, page_requests, request
from test_web_site import StaticServer, open_site, page_translate, require_runtime
from tiny_model_folders import DATE_RNN, write_tiny_run_config

LANGUAGES = list(DATE_LANGUAGES)  # de, en, fr, iso
DIRECTIONS = every_direction(LANGUAGES)  # all twelve
REPO = Path(__file__).resolve().parents[1]
# The recipe with fewer steps and pairs (the recipe's 1,600 steps give its 480/480): 600 steps learn every direction,
# as 500 do (each direction's 48 test dates all right, on the newest and the floor transformers), where 400 leave
# some directions at 81%.
DATA = {"builtin_train": 16000, "builtin_validation": 48, "builtin_test": 48, "seed": 0}
TRAINING = {"max_steps": 600, "eval_steps": 600, "save_total_limit": 1, "logging_steps": 300}
EXACT = 0.9  # the share of each direction's test dates written exactly right


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The model folder of one ``encdec train`` run of the recipe (in this process: the interpreter starts once)."""
    root = tmp_path_factory.mktemp("multilingual-dates")
    config = yaml.safe_load((REPO / "configs" / "demo-multilingual.yaml").read_text(encoding="utf-8"))
    config["model"] = str(REPO / "configs" / "models" / "transformer-demo.json")
    config["data"].update(DATA)
    config["training"].update(TRAINING, output_dir=str(root / "dates"))
    (root / "run.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    assert main(["train", str(root / "run.yaml")]) == 0
    return root / "dates"


@functools.cache
def held_out_dates() -> list[dt.date]:
    """The dates of the run's test split (each one held out of training in every language)."""
    rows = load_builtin_multilingual_dates(train=DATA["builtin_train"], validation=DATA["builtin_validation"],
                                           test=DATA["builtin_test"], seed=DATA["seed"])["test"]
    first, last = dt.date(1950, 1, 1).toordinal(), dt.date(2049, 12, 31).toordinal()
    written = {(language, write_date(dt.date.fromordinal(day), language)): dt.date.fromordinal(day)
               for language in LANGUAGES for day in range(first, last + 1)}
    return [written[row["source_lang"], row["source"]] for row in rows]


def sources(language: str) -> list[str]:
    return [write_date(date, language) for date in held_out_dates()]


@functools.cache
def generated(model_dir: Path, source: str, target: str) -> tuple[str, ...]:
    """``generate(forced_bos_token_id=...)``'s text of the test dates from ``source`` into ``target`` (greedy)."""
    tokenizer, model = AutoTokenizer.from_pretrained(model_dir), AutoModelForSeq2SeqLM.from_pretrained(model_dir)
    tokenizer.src_lang = source
    batch = tokenizer(sources(source), padding=True, return_tensors="pt")
    assert (batch["input_ids"][:, 0] == tokenizer.get_lang_id(source)).all()
    with torch.inference_mode():
        out = model.eval().generate(**batch, forced_bos_token_id=tokenizer.get_lang_id(target), num_beams=1)
    assert (out[:, 1] == tokenizer.get_lang_id(target)).all()
    return tuple(text.strip() for text in tokenizer.batch_decode(out, skip_special_tokens=True))


def exact(outputs, target: str) -> float:
    return sum(out == ref for out, ref in zip(outputs, sources(target), strict=True)) / len(held_out_dates())


def test_one_training_run_learns_every_direction(model_dir: Path) -> None:
    """The forced target token decides the output: every direction writes the held-out dates as its target
    language does."""
    assert len(set(held_out_dates())) == DATA["builtin_test"]
    scores = {f"{source}-{target}": exact(generated(model_dir, source, target), target)
              for source, target in DIRECTIONS}
    assert min(scores.values()) >= EXACT, scores


def cli_translate(model_dir: Path, work: Path, source: str, target: str, *flags: str) -> list[str]:
    """``encdec translate`` of the test dates from ``source`` into ``target`` (``flags``: engine and the like)."""
    inputs, output = work / f"{source}.txt", work / f"{source}-{target}.out"
    inputs.write_text("".join(line + "\n" for line in sources(source)), encoding="utf-8")
    assert main(["translate", "--model", str(model_dir), "--input", str(inputs), "--output", str(output), "--quiet",
                 "--source-lang", source, "--target-lang", target, *flags]) == 0
    return output.read_text(encoding="utf-8").splitlines()


def test_the_cli_and_the_pipeline_translate_every_direction_as_generate(model_dir: Path, tmp_path: Path) -> None:
    """``encdec translate --source-lang S --target-lang T`` and ``pipeline(model=DIR, src_lang=S, tgt_lang=T)``
    give ``generate``'s text in every direction (right, as the first test shows)."""
    for source, target in DIRECTIONS:
        expected = list(generated(model_dir, source, target))
        assert cli_translate(model_dir, tmp_path, source, target) == expected, (source, target)
        pipe = pipeline(model=str(model_dir), trust_remote_code=True, src_lang=source, tgt_lang=target, device="cpu")
        found = [row["generated_text"].strip() for row in pipe(sources(source), batch_size=len(held_out_dates()))]
        assert found == expected, (source, target)


@pytest.mark.parametrize("export", ["ctranslate2", "onnx"])
def test_exported_engines_translate_every_direction_as_torch(export: str, model_dir: Path, tmp_path: Path) -> None:
    """``encdec export --format ctranslate2 / onnx``, then ``encdec translate --engine ...`` on the export."""
    engine = {"ctranslate2": "ctranslate2", "onnx": "onnxruntime"}[export]
    pytest.importorskip(engine)
    exported = tmp_path / export
    assert main(["export", "--model", str(model_dir), "--format", export, "--output", str(exported)]) == 0
    for source, target in DIRECTIONS:
        found = cli_translate(exported, tmp_path, source, target, "--engine", engine)
        assert found == list(generated(model_dir, source, target)), (engine, source, target)


def test_the_server_translates_every_direction_as_generate(model_dir: Path) -> None:
    """``encdec serve``'s native API (``source``/``target``) and LibreTranslate's ``/translate`` give ``generate``'s
    text of the held-out dates in every direction, the ISO 8601 "language" included."""
    with Server(create_app(load_models([str(model_dir)], limits=ServeLimits()))) as server:
        status, listed, _ = request(f"{server.url}{LIBRETRANSLATE}/languages")
        assert status == 200 and {row["code"] for row in listed} == set(LANGUAGES), listed
        for source, target in DIRECTIONS:
            expected = list(generated(model_dir, source, target))
            status, native, _ = request(f"{server.url}/translate", {"text": sources(source), "source": source,
                                                                    "target": target})
            assert status == 200 and [row["text"] for row in native["translations"]] == expected, (source, target)
            status, libre, _ = request(f"{server.url}{LIBRETRANSLATE}/translate",
                                       {"q": sources(source), "source": source.upper(), "target": target})
            assert (status, libre["translatedText"]) == (200, expected), (source, target)


@pytest.mark.timeout(600)
def test_the_browser_site_translates_every_direction_as_torch(model_dir: Path, tmp_path: Path) -> None:
    """The float32 site in headless Chromium, greedy, eight dates a direction; nothing fetched from elsewhere."""
    require_runtime()
    site = tmp_path / "site"
    assert main(["export", "--model", str(model_dir), "--format", "web", "--output", str(site)]) == 0
    driver = chromium_driver()
    try:
        with StaticServer(site) as server:
            info = open_site(driver, f"{server.url}/")
            assert info["languages"] == LANGUAGES, info
            for source, target in DIRECTIONS:
                found = page_translate(driver, sources(source)[:8], source=source, target=target)
                assert found == list(generated(model_dir, source, target)[:8]), (source, target)
            assert_local_and_found(page_requests(driver), server.url)
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def rnn_dir(model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An RNN folder of a short ``encdec train`` run (three directions, the Transformer's tokenizer: the same
    language token ids): trained only to be loaded, not to be right."""
    root = tmp_path_factory.mktemp("multilingual-dates-rnn")
    sections = {"data": {"format": "builtin_dates", "languages": LANGUAGES, "directions": ["de-en", "de-fr", "de-iso"],
                         "builtin_train": 600, "builtin_validation": 6, "builtin_test": 6},
                "tokenizer": {"path": str(model_dir / "tokenizer")},
                "training": {"output_dir": str(root / "rnn-dates"), "max_steps": 20, "eval_steps": 20,
                             "save_total_limit": 1, "logging_steps": 20}}
    assert main(["train", str(write_tiny_run_config(root / "rnn.yaml", "rnn", DATE_RNN, sections))]) == 0
    config = json.loads((root / "rnn-dates" / "config.json").read_text(encoding="utf-8"))
    assert (config["model_type"], config["languages"]) == ("rnn_seq2seq", LANGUAGES)
    return root / "rnn-dates"


def test_both_families_translate_where_encdec_is_not_installed(model_dir: Path, rnn_dir: Path,
                                                               tmp_path: Path) -> None:
    """``trust_remote_code`` in a process that cannot import encdec, on folders ``encdec train`` wrote: each
    folder's tokenizer puts the source language token first, ``generate(forced_bos_token_id=...)`` and the
    pipeline's ``src_lang``/``tgt_lang`` give what they give here, and the Transformer's are right."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    forced = {"greedy": {"num_beams": 1, "forced_bos_token_id": tokenizer.get_lang_id("iso")},
              "beam": {"num_beams": 3, "forced_bos_token_id": tokenizer.get_lang_id("fr")}}
    lines = sources("de")[:8]  # the tokenizer's source language until one is set: its first
    remote = load_without_encdec([model_dir, rnn_dir], lines, tmp_path, forced, {"src_lang": "de", "tgt_lang": "en"})
    for folder in (model_dir, rnn_dir):
        record = remote[str(folder)]
        for role, (_, module, *_) in [("tokenizer", record["tokenizer_class"]), *record["classes"].items()]:
            assert module.startswith("transformers_modules."), (role, module)  # the folder's code, not encdec's
        tokenizer = AutoTokenizer.from_pretrained(folder)
        batch = tokenizer(lines, padding=True, return_tensors="pt")
        assert record["input_ids"] == batch["input_ids"].tolist()
        model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
        for name, kwargs in forced.items():
            assert record["generated"][name] == model.generate(**batch, **kwargs).tolist(), (folder.name, name)
        local = pipeline(model=str(folder), trust_remote_code=True, device="cpu")
        assert record["pipeline"] == local(lines, batch_size=len(lines), src_lang="de", tgt_lang="en")
    record = remote[str(model_dir)]
    texts = AutoTokenizer.from_pretrained(model_dir).batch_decode(record["generated"]["greedy"],
                                                                  skip_special_tokens=True)
    assert [text.strip() for text in texts] == list(generated(model_dir, "de", "iso")[:8])
    assert [row["generated_text"].strip() for row in record["pipeline"]] == list(generated(model_dir, "de", "en")[:8])
