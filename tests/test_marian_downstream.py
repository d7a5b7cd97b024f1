"""Every encdec tool on a Marian model brought in by ``encdec import`` (docs/import.md), each checked against
transformers' ``MarianMTModel`` with the same settings: corpus translation in chunks, interrupted then resumed;
``encdec evaluate``'s BLEU; ``encdec serve`` with LibreTranslate's and DeepL's APIs on the pair its card names; an
ensemble with an encdec-trained model of its vocabulary (and the refusal of one of another vocabulary); and
``encdec distill`` with it as the teacher (Kim & Rush 2016), the student exported to the browser site.

The Marian model is a folder of ``marian_fixtures.write_marian_model`` (SentencePiece models trained on the built-in
dates, a random logits bias) whose weights are trained for a moment to write English dates in German
(``train_marian``), so that its translations vary with the text; it is built and imported once for the file. Its
default decoding (beam 3, the pad token never generated, ``</s>`` forced at the budget) is what every command and
``MarianMTModel.generate`` run, unless a test says otherwise. The whole file takes seconds: every command runs in this
process (tests/test_corpus.py and tests/test_distill.py kill separate processes)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
import sacrebleu
import torch
from huggingface_hub import ModelCard
from transformers import MarianMTModel

from encdec import EnsembleForSeq2SeqLM
from encdec.data import make_date_pairs
from encdec.data.dates import write_date
from encdec.inference import load_model_and_tokenizer, translate, translate_lines
from encdec.recipes.distill import load_distill_config
from encdec.serve.server import create_app, load_models
from encdec.training import load_run_config
from encdec_cli import main
from marian_fixtures import write_marian_model
from test_corpus import encdec_here, partial_state
from test_distill import encdec_distill, write_recipe
from test_marian_import import encdec_import
from test_serve import Server, request
from tiny_model_folders import REPO_ROOT
from toy import linear_schedule, train_loop

pytest.importorskip("sentencepiece")  # the tiny .spm models and the reference MarianTokenizer need it

# held-out dates (another seed than the SentencePiece models'), a blank line among them
SOURCES = [source for source, _ in make_date_pairs(23, seed=5)]
SOURCES.insert(9, "")
TRAIN = 80  # built-in training dates the teacher translates for the student: two chunks of 40
# a tiny student trained for a moment on them, without languages (the corpus files are .source and .target)
STUDENT = {"training": {"max_steps": 8, "eval_strategy": "no", "logging_steps": 4},
           "data": {"builtin_train": TRAIN, "builtin_validation": 10, "builtin_test": 10, "source_lang": None,
                    "target_lang": None}}


def train_marian(folder: Path, steps: int = 150) -> Path:
    """The Marian model of ``folder`` trained anew for ``steps`` batches of 32 dates (English to German: ``3.
    März 2021``), from transformers' own initialisation, and saved back (its logits bias stays the fixture's):
    random weights translate every text into one string, whereas these outputs vary with the text (about 2 s)."""
    from transformers import MarianTokenizer

    tokenizer, saved = MarianTokenizer.from_pretrained(folder), MarianMTModel.from_pretrained(folder)
    torch.manual_seed(0)
    model = MarianMTModel(saved.config)
    model.generation_config = saved.generation_config
    with torch.no_grad():
        model.final_logits_bias.copy_(saved.final_logits_bias)
    pairs = [(source, write_date(dt.date.fromisoformat(iso), "de")) for source, iso in make_date_pairs(2000, seed=1)]

    def batches():
        generator = torch.Generator().manual_seed(0)
        for _ in range(steps):
            picked = [pairs[i] for i in torch.randint(0, len(pairs), (32,), generator=generator).tolist()]
            batch = tokenizer([source for source, _ in picked], text_target=[target for _, target in picked],
                              padding=True, return_tensors="pt")
            batch["labels"][batch["labels"] == tokenizer.pad_token_id] = -100
            yield batch["input_ids"], batch["attention_mask"], batch["labels"]

    train_loop(model, batches(), lr=1e-2, schedule=linear_schedule(steps, warmup=20))
    model.eval().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory) -> Path:
    return train_marian(write_marian_model(tmp_path_factory.mktemp("marian") / "opus-mt-en-de"))


@pytest.fixture(scope="module")
def imported(marian_dir, tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("imported") / "opus-mt-en-de"
    report = json.loads(encdec_import("--from", str(marian_dir), "--output", str(output)))
    assert report["logits vs MarianMTModel"].startswith("max |difference| 0 on")
    card = ModelCard.load(output / "README.md")  # named after the folder, not the staging one it was written in
    assert card.data.model_name == output.name and f"\n# {output.name}\n" in card.text
    return output


@pytest.fixture(scope="module")
def marian(marian_dir):
    """``marian(texts, **options)``: what ``MarianMTModel.generate`` (its saved defaults, then ``options``) and
    ``MarianTokenizer.batch_decode`` give for ``texts``, one padded batch; a blank text stays blank, as every
    encdec command keeps it."""
    from transformers import MarianTokenizer

    model, tokenizer = MarianMTModel.from_pretrained(marian_dir).eval(), MarianTokenizer.from_pretrained(marian_dir)

    def generate(texts: list[str], **options) -> list[str]:
        written = [text for text in texts if text.strip()]
        with torch.inference_mode():
            ids = model.generate(**tokenizer(written, return_tensors="pt", padding=True), **options)
        outputs = iter(tokenizer.batch_decode(ids, skip_special_tokens=True))
        return [next(outputs).strip() if text.strip() else "" for text in texts]

    return generate


@pytest.fixture(scope="module")
def expected(marian) -> list[str]:
    """MarianMTModel's translations of ``SOURCES``: varied, so that a line out of place would show."""
    outputs = marian(SOURCES)
    assert len(set(outputs)) > len(SOURCES) // 3, outputs
    return outputs


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_a_corpus_translated_in_chunks_and_resumed_is_marians(imported, expected, tmp_path, capsys,
                                                               monkeypatch) -> None:
    """Stopped (Ctrl-C) right after its second chunk of 8 lines is on disk, the run has exactly those 16 lines done,
    MarianMTModel's; the same command is refused without ``--resume`` and with it ends with every line
    MarianMTModel's."""
    source, out = write_lines(tmp_path / "in.txt", SOURCES), tmp_path / "out.txt"
    args = ["translate", "--model", str(imported), "--input", str(source), "--output", str(out), "--chunk-size", "8"]
    chunks = []

    def interrupt(name: str) -> None:
        chunks.append(name)
        if len(chunks) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr("encdec.chunked.output.stop_point", interrupt)
    with pytest.raises(KeyboardInterrupt):
        main(args)
    monkeypatch.undo()
    assert partial_state(out)["lines"] == 16 and not out.exists()
    assert (tmp_path / "out.txt.partial").read_text(encoding="utf-8").splitlines() == expected[:16]
    refused = encdec_here(capsys, *args)  # an interrupted run is not thrown away
    assert refused.returncode == 2 and "pass --resume" in refused.stderr
    done = encdec_here(capsys, *args, "--resume")
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.read_text(encoding="utf-8").splitlines() == expected


def test_evaluate_scores_marians_translations(imported, expected, tmp_path, capsys) -> None:
    """References that are MarianMTModel's translations, every third line another line's: BLEU and chrF are
    sacreBLEU's on MarianMTModel's translations, and below 100."""
    hypotheses = [line for line in expected if line][:12]
    references = [hypotheses[i - 1] if i % 3 == 1 else line for i, line in enumerate(hypotheses)]
    sources = [line for line in SOURCES if line][:12]
    done = encdec_here(capsys, "evaluate", "--model", str(imported), "--source-file",
                       str(write_lines(tmp_path / "src.txt", sources)), "--reference-file",
                       str(write_lines(tmp_path / "ref.txt", references)), "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)
    assert results["num_sentences"] == 12 and results["num_beams"] == 3
    assert results["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, [references]).score, 2) < 100
    assert results["chrf"] == round(sacrebleu.corpus_chrf(hypotheses, [references]).score, 2) < 100


def test_serve_answers_both_apis_with_marians_translations_on_the_cards_pair(imported, expected) -> None:
    """Given the folder alone, the server serves the pair the imported card names (en-de, the source's), and
    LibreTranslate's /translate and DeepL's /v2/translate answer MarianMTModel's translations."""
    texts = [line for line in SOURCES if line][:6]
    wanted = [line for line in expected if line][:6]
    models = load_models([str(imported)])
    assert [(hop.source, hop.target) for hop in models.directions()] == [("en", "de")]
    with Server(create_app(models)) as server:
        libre = request(f"{server.url}/libretranslate/translate", {"q": texts, "source": "en", "target": "de"})
        deepl = request(f"{server.url}/deepl/v2/translate", {"text": texts, "source_lang": "EN", "target_lang": "DE"})
        _, languages, _ = request(f"{server.url}/libretranslate/languages")
    assert libre[:2] == (200, {"translatedText": wanted})
    assert deepl[0] == 200 and [item["text"] for item in deepl[1]["translations"]] == wanted
    assert {item["code"]: item["targets"] for item in languages} == {"en": ["de"], "de": []}


@pytest.fixture(scope="module")
def distilled(imported, tmp_path_factory) -> Path:
    """``encdec distill`` with the imported teacher (beam 2) on ``TRAIN`` built-in dates; the student, a tiny
    Transformer with its own tokenizer, trained 8 steps. The run's output folder."""
    root = tmp_path_factory.mktemp("distill")
    stdout = encdec_distill(write_recipe(root, imported, student_sections=STUDENT))
    assert f"distilled corpus: {TRAIN} of {TRAIN} teacher translations kept" in stdout
    return root / "out"


@pytest.fixture(scope="module")
def shared_vocabulary_student(imported, distilled, tmp_path_factory) -> Path:
    """A second student of the same corpus (not translated again) given the teacher's tokenizer
    (``tokenizer.path``): an encdec-trained model of the imported model's vocabulary."""
    root = tmp_path_factory.mktemp("shared-vocabulary")
    sections = {**STUDENT, "tokenizer": {"path": str(imported)}}
    encdec_distill(write_recipe(root, imported, corpus_dir=str(distilled / "corpus"), student_sections=sections))
    return root / "out" / "student"


def test_the_distilled_corpus_is_the_teachers_translation_and_the_student_translates(imported, marian, distilled,
                                                                                      tmp_path) -> None:
    """The teacher's scored corpus is `encdec translate --scores` of the sources, byte for byte (the recipe's beam
    and chunks), its texts MarianMTModel's with that beam; the student loads and translates."""
    corpus, out = distilled / "corpus", tmp_path / "translated.txt"
    assert main(["translate", "--model", str(imported), "--input", str(corpus / "original.source"), "--output",
                 str(out), "--num-beams", "2", "--scores", "--chunk-size", "40", "--quiet"]) == 0
    assert out.read_bytes() == (corpus / "teacher.scored").read_bytes()
    sources = (corpus / "original.source").read_text(encoding="utf-8").splitlines()
    assert (corpus / "train.target").read_text(encoding="utf-8").splitlines() == marian(sources, num_beams=2)
    manifest = json.loads((corpus / "manifest.json").read_text())
    assert manifest["recipe"]["teacher"][0]["path"] == str(imported.resolve())
    assert f"{imported} (beam 2)" in (distilled / "student" / "README.md").read_text(encoding="utf-8")
    model, tokenizer = load_model_and_tokenizer(distilled / "student")
    outputs = translate(model, tokenizer, sources[:4])
    assert len(outputs) == 4 and all(isinstance(output, str) for output in outputs)


def test_the_student_exports_to_the_browser_site(distilled, tmp_path) -> None:
    """``encdec export --format web`` of the student: the page's files, the int8 ONNX export and the decoding rules
    the browser reads (no browser run: tests/test_web_site.py runs sites in Chromium)."""
    pytest.importorskip("onnxruntime")
    from encdec.inference.decoding import model_defaults
    from encdec.ship.web_export import DECODING_RULES, RUNTIME_FILES
    from test_web_site import require_runtime

    require_runtime()
    site = tmp_path / "site"
    assert main(["export", "--model", str(distilled / "student"), "--format", "web", "--output", str(site)]) == 0
    assert all((site / name).is_file() for name in RUNTIME_FILES)
    assert json.loads((site / "model" / "encdec_onnx.json").read_text())["weights"] == "int8"
    rules = json.loads((site / "model" / DECODING_RULES).read_text())
    assert rules["defaults"] == {**model_defaults(distilled / "student").describe(), "early_stopping": False}
    assert (site / "model" / "tokenizer.json").is_file()


def test_an_ensemble_with_a_model_of_its_vocabulary_is_the_python_ensemble(imported, shared_vocabulary_student,
                                                                          tmp_path, capsys) -> None:
    """`encdec translate --model IMPORTED --model STUDENT` writes what EnsembleForSeq2SeqLM.generate (the first
    member's defaults: beam 3) decodes, and that differs from either member alone."""
    members = [imported, shared_vocabulary_student]
    sources = [line for line in SOURCES if line][:10]
    done = encdec_here(capsys, "translate", *(arg for member in members for arg in ("--model", str(member))),
                       "--input", str(write_lines(tmp_path / "in.txt", sources)), "--quiet")
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = [load_model_and_tokenizer(member) for member in members]
    tokenizer = loaded[0][1]
    ensemble = EnsembleForSeq2SeqLM([model for model, _ in loaded]).eval()
    with torch.inference_mode():
        ids = ensemble.generate(**tokenizer(sources, return_tensors="pt", padding=True))
    together = [text.strip() for text in tokenizer.batch_decode(ids, skip_special_tokens=True)]
    assert done.stdout.splitlines() == together
    alone = [translate(model, tokenizer, sources) for model, _ in loaded]
    assert together != alone[0] and together != alone[1]


def test_an_ensemble_with_a_model_of_another_vocabulary_is_refused_in_one_line(imported, distilled, tmp_path,
                                                                              capsys) -> None:
    student = distilled / "student"
    done = encdec_here(capsys, "translate", "--model", str(imported), "--model", str(student), "--input",
                       str(write_lines(tmp_path / "in.txt", SOURCES[:2])))
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert f"The tokenizer of {student} differs from that of {imported}" in line
    assert "must share one tokenizer" in line


def test_the_opus_mt_recipe_loads_and_names_the_imported_teacher() -> None:
    """configs/distill-opus-mt-de-en.yaml: the teacher is the folder `encdec import --from
    Helsinki-NLP/opus-mt-de-en --output runs/opus-mt-de-en` writes (from the repository root), beam 4; the student
    a Multi30k De->En Transformer with its own tokenizer."""
    config = load_distill_config(REPO_ROOT / "configs" / "distill-opus-mt-de-en.yaml")
    assert [Path(model).resolve() for model in config.teacher.models] == [REPO_ROOT / "runs" / "opus-mt-de-en"]
    assert config.teacher.num_beams == 4 and config.output_dir == "runs/distill-opus-mt-de-en"
    student = load_run_config(config.student, config.student_overrides)
    assert (student.data.source_lang, student.data.target_lang) == ("de", "en")
    assert Path(student.data.data_dir).name == "multi30k" and student.tokenizer.path is None
    assert Path(student.model).is_file()


def export(folder: Path, output: Path, fmt: str, quantization: str) -> Path:
    assert main(["export", "--model", str(folder), "--format", fmt, "--output", str(output), "--quantization",
                 quantization]) == 0
    return output


@pytest.mark.parametrize("engine", ["ctranslate2", "onnxruntime"])
def test_ctranslate2_and_onnx_runtime_translate_the_imported_model_as_marian(imported, marian, tmp_path,
                                                                            engine: str) -> None:
    """Exported in float32, the engine gives MarianMTModel's translations, greedy and beam 3; in int8 (CTranslate2's
    int8 compute, ONNX Runtime's dynamic int8 graphs) it stays close to them (chrF against them): at d_model 16 the
    int8 rounding flips close calls, so whole lines often differ by a character."""
    pytest.importorskip(engine)
    written = [text for text in SOURCES if text]
    fmt = "ctranslate2" if engine == "ctranslate2" else "onnx"
    exact = export(imported, tmp_path / "float32", fmt, "float32")
    for beams in (1, 3):
        assert translate_lines(exact, written, engine=engine, num_beams=beams) == marian(written, num_beams=beams)
    quantized = export(imported, tmp_path / "int8", fmt, "int8")
    greedy = translate_lines(quantized, written, engine=engine, num_beams=1)
    chrf = sacrebleu.corpus_chrf(greedy, [marian(written, num_beams=1)]).score
    assert chrf >= 75, (chrf, greedy)  # measured 92.8 (CTranslate2) and 88.2 (ONNX Runtime) on this tiny model


def test_the_browser_site_of_the_imported_model_translates_as_encdec(imported, marian, tmp_path) -> None:
    """``encdec export --format web`` of the imported model (float32): the site's translator (tokenizer, search,
    ONNX Runtime Web's WebAssembly backend; run by Node.js as tests/test_web_site.py does) gives MarianMTModel's
    translations with greedy and beam search."""
    from test_web_site import require_runtime, run_site_translator

    require_runtime()
    model = export(imported, tmp_path / "site", "web", "float32") / "model"
    lines = [text for text in SOURCES if text][:12]
    asked = [{"numBeams": 1}, {"numBeams": 3}]
    found = run_site_translator(model, lines, asked, tmp_path)
    for options, got in zip(asked, found["found"], strict=True):
        assert got == marian(lines, num_beams=options["numBeams"]), options
