"""A multilingual model through every front end and engine: the Python API, ``encdec translate`` (n-best lists,
scores, alignments, resume), ``encdec evaluate`` (a table per direction), ``encdec align``, an ensemble, and the
torch (float32 and int8), CTranslate2 and ONNX Runtime engines, each in every direction equal to
``generate(forced_bos_token_id=...)``; and the refusals: a language the model lacks, a bilingual model given a
language, a multilingual one given none, a language token typed in the text.

The model is the toy task of ``test_multilingual_model`` (digits; the target "language" decides the output), trained
once for this module.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

import pytest
import torch
import yaml

from encdec.decoding_options import check_languages
from encdec.errors import EncdecError, LanguageError
from encdec.folders import save_for_pipeline
from encdec.inference import load_engine, translate, translate_detailed, translate_n_best_ids
from encdec.inference.decoding import output_ids
from encdec.inference.engines import quantize_int8
from encdec.recipes.distill import distill, load_distill_config
from encdec_cli import main
from test_corpus import ENV
from test_distill import encdec_distill, write_recipe
from test_distributed import run_until_stopped
from test_multilingual_model import LANGUAGES, SOURCES, TASKS, TEST, accuracy, examples, trained_model
from toy import digit_tokenizer, tiny_model

DIRECTIONS = [(source, target) for source in LANGUAGES for target in LANGUAGES]
BUDGET = {"max_new_tokens": 8}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trained Transformer, saved as ``encdec train`` saves a model."""
    model, tokenizer = trained_model("transformer")
    tokenizer.src_lang, tokenizer.tgt_lang = LANGUAGES[0], None
    return save_for_pipeline(model, tokenizer, tmp_path_factory.mktemp("multilingual-cli") / "model")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("inputs") / "input.txt"
    path.write_text("".join(source + "\n" for source in SOURCES), encoding="utf-8")
    return path


def generated_ids(model, tokenizer, source: str, target: str, **kwargs) -> list[list[int]]:
    """``generate(forced_bos_token_id=...)``'s output ids for ``SOURCES`` (after the start token, to ``</s>``)."""
    tokenizer.src_lang = source
    batch = tokenizer(SOURCES, padding=True, return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**batch, forced_bos_token_id=tokenizer.get_lang_id(target), **BUDGET, **kwargs)
    return [output_ids(row, model.config.eos_token_id, model.config.pad_token_id) for row in out.tolist()]


def generated_texts(source: str, target: str, **kwargs) -> list[str]:
    model, tokenizer = trained_model("transformer")
    return [tokenizer.decode(ids, skip_special_tokens=True).strip()
            for ids in generated_ids(model, tokenizer, source, target, **kwargs)]


def api_ids(engine, tokenizer, source: str, target: str, **kwargs) -> list[list[int]]:
    _, found = translate_n_best_ids(engine, tokenizer, SOURCES, 1, source_lang=source, target_lang=target, **BUDGET,
                                    **kwargs)
    return [best for best, in found]


# --- the Python API and the engines -----------------------------------------------------------------------------------

@pytest.mark.parametrize("num_beams", [1, 3])
def test_the_python_api_translates_every_direction_as_generate_does(num_beams: int) -> None:
    model, tokenizer = trained_model("transformer")
    for source, target in DIRECTIONS:
        found = api_ids(model, tokenizer, source, target, num_beams=num_beams)
        assert found == generated_ids(model, tokenizer, source, target, num_beams=num_beams), (source, target)
        assert all(ids[0] == tokenizer.get_lang_id(target) for ids in found)  # as generate(): the language first
        texts = translate(model, tokenizer, SOURCES, source_lang=source, target_lang=target, num_beams=num_beams,
                          **BUDGET)
        assert accuracy(texts, target) >= 0.9 and not any("__" in text for text in texts)


def test_the_int8_engine_forces_the_target_token_as_its_model_generate_does(model_dir: Path) -> None:
    engine, tokenizer = load_engine(model_dir, "torch", quantize="int8")
    quantized = quantize_int8(trained_model("transformer")[0])
    for source, target in DIRECTIONS:  # one batch, as generate()'s (int8 activations are scaled per batch)
        assert api_ids(engine, tokenizer, source, target, batch_size=len(SOURCES)) \
            == generated_ids(quantized, tokenizer, source, target)


@pytest.mark.parametrize(("engine", "export"), [("ctranslate2", "ctranslate2"), ("onnxruntime", "onnx")])
def test_exported_engines_give_torchs_ids_in_every_direction(engine: str, export: str, model_dir: Path,
                                                             tmp_path: Path) -> None:
    pytest.importorskip(engine)
    exported = tmp_path / engine
    assert main(["export", "--model", str(model_dir), "--format", export, "--output", str(exported)]) == 0
    loaded, tokenizer = load_engine(exported, engine)
    torch_engine, torch_tokenizer = load_engine(model_dir)
    for num_beams in (1, 3):
        for source, target in DIRECTIONS:
            expected = api_ids(torch_engine, torch_tokenizer, source, target, num_beams=num_beams)
            assert api_ids(loaded, tokenizer, source, target, num_beams=num_beams) == expected, (source, target)
        cut = {"num_beams": num_beams, "max_new_tokens": 3}  # the language token counts in the budget, as in generate()
        _, short = translate_n_best_ids(loaded, tokenizer, SOURCES, 1, source_lang="copy", target_lang="rev", **cut)
        assert short == translate_n_best_ids(torch_engine, torch_tokenizer, SOURCES, 1, source_lang="copy",
                                             target_lang="rev", **cut)[1]
        assert {len(ids) for ids, in short} == {3}
    scored = translate_detailed(loaded, tokenizer, SOURCES[:4], source_lang="rev", target_lang="sort", scores=True,
                                **BUDGET)
    reference = translate_detailed(torch_engine, torch_tokenizer, SOURCES[:4], source_lang="rev",
                                   target_lang="sort", scores=True, **BUDGET)
    for (found,), (wanted,) in zip(scored, reference, strict=True):
        assert found.text == wanted.text and found.score == pytest.approx(wanted.score, abs=1e-3)


def test_an_ensemble_of_one_multilingual_model_twice_translates_every_direction(model_dir: Path) -> None:
    engine, tokenizer = load_engine([model_dir, model_dir])
    for source, target in DIRECTIONS[::4]:
        assert translate(engine, tokenizer, SOURCES, source_lang=source, target_lang=target, **BUDGET) \
            == generated_texts(source, target)


def test_ensemble_members_with_other_languages_are_refused(model_dir: Path, tmp_path: Path) -> None:
    other = shutil.copytree(model_dir, tmp_path / "other")
    settings = json.loads((other / "tokenizer_config.json").read_text(encoding="utf-8"))
    settings["language_tokens"] = {"copy": "__rev__", "rev": "__copy__", "sort": "__sort__"}  # same codes, tokens
    (other / "tokenizer_config.json").write_text(json.dumps(settings), encoding="utf-8")
    config = json.loads((other / "config.json").read_text(encoding="utf-8"))  # its languages in its tokens' order
    (other / "config.json").write_text(json.dumps({**config, "languages": ["rev", "copy", "sort"]}), encoding="utf-8")
    with pytest.raises(EncdecError, match=r"The tokenizer of .*other differs from that of .* in its languages"):
        load_engine([model_dir, other])


# --- the command line -------------------------------------------------------------------------------------------------

def cli(*argv: str) -> None:
    assert main(list(argv)) == 0, argv


@pytest.mark.parametrize(("source", "target"), DIRECTIONS)
def test_encdec_translate_translates_every_direction(source: str, target: str, model_dir: Path, inputs: Path,
                                                     tmp_path: Path) -> None:
    output = tmp_path / "out.txt"
    cli("translate", "--model", str(model_dir), "--input", str(inputs), "--output", str(output), "--quiet",
        "--source-lang", source, "--target-lang", target, "--max-new-tokens", "8")
    assert output.read_text(encoding="utf-8").splitlines() == generated_texts(source, target)


def test_n_best_scores_and_alignments_leave_out_the_language_tokens(model_dir: Path, inputs: Path,
                                                                    tmp_path: Path) -> None:
    output = tmp_path / "out.txt"
    cli("translate", "--model", str(model_dir), "--input", str(inputs), "--output", str(output), "--quiet",
        "--source-lang", "copy", "--target-lang", "rev", "--max-new-tokens", "8", "--n-best", "2", "--scores",
        "--alignments")
    lines = [line.split(" ||| ") for line in output.read_text(encoding="utf-8").splitlines()]
    best = {int(index): text for index, text, _, _ in reversed(lines)}  # each source's first line is its best
    assert [best[i] for i in range(len(SOURCES))] == generated_texts("copy", "rev", num_beams=2)
    for index, text, score, links in lines:
        assert "__" not in text and float(score) < 0
        words = len(SOURCES[int(index)].split())
        pairs = [tuple(map(int, link.split("-"))) for link in links.split()]
        assert pairs and all(0 <= i < words and 0 <= j < len(text.split()) for i, j in pairs)  # words, no tokens


def test_a_resumed_run_must_ask_the_same_languages(model_dir: Path, inputs: Path, tmp_path: Path, capsys) -> None:
    output = tmp_path / "out.txt"
    common = ["translate", "--model", str(model_dir), "--input", str(inputs), "--output", str(output), "--quiet",
              "--max-new-tokens", "8", "--source-lang", "copy", "--chunk-size", "20"]
    run_until_stopped([sys.executable, "-m", "encdec", *common, "--target-lang", "sort"], ENV, "chunk:1",
                      tmp_path / "killed.log")
    assert main([*common, "--target-lang", "rev", "--resume"]) == 2  # another direction: not the same run
    assert "options target_lang: \"sort\" before, \"rev\" now" in capsys.readouterr().err
    cli(*common, "--target-lang", "sort", "--resume")
    assert output.read_text(encoding="utf-8").splitlines() == generated_texts("copy", "sort")


def write_direction(folder: Path, source: str, target: str, count: int = 20) -> None:
    """A test split of one direction as ``encdec data`` writes it: ``test.SRC-TGT.SRC`` and ``test.SRC-TGT.TGT``."""
    pair = f"{source}-{target}"
    (folder / f"test.{pair}.{source}").write_text("".join(s + "\n" for s in SOURCES[:count]), encoding="utf-8")
    (folder / f"test.{pair}.{target}").write_text(
        "".join(" ".join(TASKS[target](digits)) + "\n" for digits in TEST[:count]), encoding="utf-8")


def test_encdec_evaluate_scores_every_direction_of_a_test_folder(model_dir: Path, tmp_path: Path, capsys) -> None:
    for source, target in (("copy", "rev"), ("rev", "sort"), ("sort", "copy")):
        write_direction(tmp_path, source, target)
    cli("evaluate", "--model", str(model_dir), "--test-dir", str(tmp_path), "--directions", "copy-rev,sort-copy",
        "--max-new-tokens", "8", "--quiet", "--output", str(tmp_path / "results.json"))
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert list(results["directions"]) == ["copy-rev", "sort-copy"]
    for pair, scores in results["directions"].items():
        assert scores["bleu"] > 80 and scores["source_lang"] + "-" + scores["target_lang"] == pair
    assert "copy-rev" in capsys.readouterr().out


@pytest.mark.parametrize(("flags", "message"), [
    (["--directions", "rev-copy"], r"has no test\.rev-copy\.rev and test\.rev-copy\.copy; its directions are copy-rev"),
    (["--directions", "copy-de"], r"the direction 'copy-de' names the language 'de', which is not among"),
    (["--source-file", "x"], r"--test-dir gives each direction its files and languages; drop --source-file"),
    (["--target-lang", "rev"], r"give each test its languages; drop target_lang"),
])
def test_encdec_evaluate_refuses_a_direction_it_cannot_score(flags: list[str], message: str, model_dir: Path,
                                                             tmp_path: Path, capsys) -> None:
    write_direction(tmp_path, "copy", "rev")
    assert main(["evaluate", "--model", str(model_dir), "--test-dir", str(tmp_path), "--quiet", *flags]) != 0
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and re.search(message, error[0]), error


def test_encdec_evaluate_takes_one_direction_with_its_files(model_dir: Path, tmp_path: Path, capsys) -> None:
    write_direction(tmp_path, "rev", "sort")
    cli("evaluate", "--model", str(model_dir), "--source-file", str(tmp_path / "test.rev-sort.rev"),
        "--reference-file", str(tmp_path / "test.rev-sort.sort"), "--source-lang", "rev", "--target-lang", "sort",
        "--max-new-tokens", "8", "--quiet")
    results = json.loads(capsys.readouterr().out)
    assert results["bleu"] > 80 and (results["source_lang"], results["target_lang"]) == ("rev", "sort")


def test_encdec_align_reads_the_languages(model_dir: Path, tmp_path: Path, capsys) -> None:
    write_direction(tmp_path, "copy", "rev", 5)
    cli("align", "--model", str(model_dir), "--source-file", str(tmp_path / "test.copy-rev.copy"), "--target-file",
        str(tmp_path / "test.copy-rev.rev"), "--source-lang", "copy", "--target-lang", "rev", "--quiet")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5
    for line, digits in zip(lines, TEST, strict=False):
        pairs = [tuple(map(int, link.split("-"))) for link in line.split()]
        assert pairs and all(0 <= i < len(digits) and 0 <= j < len(digits) for i, j in pairs)


# --- refusals ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("flags", "message"), [
    (["--source-lang", "copy", "--target-lang", "de"], r"no language 'de'; its languages are copy, rev, sort"),
    (["--source-lang", "xx", "--target-lang", "rev"], r"no language 'xx'; its languages are copy, rev, sort"),
    (["--target-lang", "rev"], r"multilingual \(copy, rev, sort\): name its source and target language"),
    ([], r"multilingual \(copy, rev, sort\): name its source and target language"),
])
def test_a_language_the_model_lacks_is_refused_in_one_line(flags: list[str], message: str, model_dir: Path,
                                                           inputs: Path, tmp_path: Path, capsys) -> None:
    output = tmp_path / "out.txt"
    assert main(["translate", "--model", str(model_dir), "--input", str(inputs), "--output", str(output), *flags]) \
        != 0
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and re.search(message, error[0]), error
    assert not output.exists()


def test_a_language_token_in_the_text_is_refused(model_dir: Path, tmp_path: Path, capsys) -> None:
    typed = tmp_path / "typed.txt"
    typed.write_text("1 2\n__rev__ 3 4\n", encoding="utf-8")
    assert main(["translate", "--model", str(model_dir), "--input", str(typed), "--source-lang", "copy",
                 "--target-lang", "rev"]) != 0
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "language token '__rev__'" in error[0], error
    model, tokenizer = trained_model("transformer")
    with pytest.raises(LanguageError, match="__sort__"):
        translate(model, tokenizer, ["__sort__ 1"], source_lang="copy", target_lang="rev")


def test_a_bilingual_model_is_refused_a_language() -> None:
    with pytest.raises(LanguageError, match=r"bilingual .* drop the source and target language \('de'\)"):
        check_languages(None, "de", {})
    assert check_languages(None, None, {}) is None
    assert check_languages("copy", "sort", {"copy": 14, "sort": 16}) == 16


# --- distillation -----------------------------------------------------------------------------------------------------

def test_a_multilingual_teacher_distils_its_direction_into_a_student(model_dir: Path, tmp_path: Path) -> None:
    """The teacher's direction is asked in its section (``teacher.source_lang``/``target_lang``), refused before
    anything is written when missing, and the distilled targets are the Python API's translations in it."""
    recipe = write_recipe(tmp_path, model_dir, student_sections={"training": {"max_steps": 2,
                                                                              "eval_strategy": "no"}})
    with pytest.raises(LanguageError, match=r"multilingual \(copy, rev, sort\): name its source and target"):
        distill(load_distill_config(recipe))
    assert not (tmp_path / "out").exists()
    settings = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    settings["teacher"].update(source_lang="rev", target_lang="sort")
    recipe.write_text(yaml.safe_dump(settings), encoding="utf-8")
    distill(load_distill_config(recipe))
    corpus = tmp_path / "out" / "corpus"
    sources = (corpus / "original.source").read_text(encoding="utf-8").splitlines()
    scored = [line.split(" ||| ")[0] for line in (corpus / "teacher.scored").read_text(encoding="utf-8").splitlines()]
    model, tokenizer = trained_model("transformer")
    chunk = settings["chunk_size"]  # the teacher's batches: each chunk's, longest first
    assert scored == [text for start in range(0, len(sources), chunk) for text in translate(
        model, tokenizer, sources[start:start + chunk], source_lang="rev", target_lang="sort", num_beams=2)]
    assert json.loads((corpus / "manifest.json").read_text(encoding="utf-8"))["recipe"]["decoding"]["target_lang"] \
        == "sort"


def multiway_folder(root: Path, count: int, seed: int) -> Path:
    """A multi-way folder of the toy task, as Multi30k's: line i of ``{prefix}.copy``, ``.rev`` and ``.sort`` is one
    row of digits as each "language" writes it."""
    root.mkdir(parents=True)
    for prefix, n in (("train", count), ("val", 6)):
        rows = [digits for _, _, digits in examples(n, seed + len(prefix))]
        for language, task in TASKS.items():
            (root / f"{prefix}.{language}").write_text("".join(" ".join(task(d)) + "\n" for d in rows), "utf-8")
    return root


def multilingual_recipe(tmp_path: Path, teacher: Path, directions: list[str], extra: str | None = None,
                        **teacher_settings) -> Path:
    """A recipe whose student learns ``directions`` of a multi-way toy folder from ``teacher`` (beam 2); ``extra``
    is one more language there, a copy of ``copy``."""
    folder = multiway_folder(tmp_path / "data", 80, 5)
    for prefix in ("train", "val") if extra else ():
        shutil.copy(folder / f"{prefix}.copy", folder / f"{prefix}.{extra}")
    data = {"format": "text", "data_dir": str(folder), "languages": LANGUAGES + ([extra] if extra else []),
            "directions": directions, "splits": {"train": "train", "validation": "val"}}
    recipe = write_recipe(tmp_path, teacher, student_sections={
        "data": data, "training": {"max_steps": 2, "eval_strategy": "no"}})
    settings = yaml.safe_load(recipe.read_text(encoding="utf-8"))
    settings["teacher"].update(teacher_settings)
    recipe.write_text(yaml.safe_dump(settings), encoding="utf-8")
    return recipe


def test_a_multilingual_teacher_distils_every_direction_into_a_multilingual_student(model_dir: Path,
                                                                                     tmp_path: Path) -> None:
    """Each training direction of the student's data is translated by the teacher in that direction (the Python
    API's translations, chunk by chunk), filtered into its own direction files, and the student learns them all as
    one multilingual model. Killed with kill -9 in the second direction's translation, the same command keeps the
    first direction, goes on from the second one's last chunk, and ends with the uninterrupted run's files."""
    recipe = multilingual_recipe(tmp_path / "whole", model_dir, ["rev-sort", "sort-copy"])
    stdout = encdec_distill(recipe)
    assert "distilled corpus: 160 of 160 teacher translations kept" in stdout
    assert "  rev-sort: 80 of 80 kept\n  sort-copy: 80 of 80 kept\n" in stdout
    corpus, model, tokenizer = tmp_path / "whole" / "out" / "corpus", *trained_model("transformer")
    manifest = json.loads((corpus / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["stages"]["sources"] == {"train": {"rev-sort": 80, "sort-copy": 80},
                                             "validation": {"rev-sort": 6, "sort-copy": 6}}
    assert set(manifest["stages"]["translation"]) == {"rev-sort", "sort-copy"}
    assert manifest["stages"]["corpus"]["translated"] == 160
    assert manifest["stages"]["corpus"]["directions"]["sort-copy"]["translated"] == 80
    for source, target in (("rev", "sort"), ("sort", "copy")):
        name = f"{source}-{target}"
        sources = (corpus / f"original.{name}.{source}").read_text(encoding="utf-8").splitlines()
        distilled = (corpus / f"train.{name}.{target}").read_text(encoding="utf-8").splitlines()
        assert distilled == [text for start in range(0, 80, 40) for text in translate(
            model, tokenizer, sources[start:start + 40], source_lang=source, target_lang=target, num_beams=2)]
        assert (corpus / f"train.{name}.{source}").read_text(encoding="utf-8").splitlines() == sources
    student = json.loads((tmp_path / "whole" / "out" / "student" / "config.json").read_text(encoding="utf-8"))
    assert set(student["languages"]) == set(LANGUAGES)

    killed = multilingual_recipe(tmp_path / "killed", model_dir, ["rev-sort", "sort-copy"])
    run_until_stopped([sys.executable, "-m", "encdec", "distill", str(killed)], ENV, "chunk:3", tmp_path / "log")
    again = tmp_path / "killed" / "out" / "corpus"
    assert json.loads((again / "manifest.json").read_text(encoding="utf-8"))["stages"]["translation"].keys() == {
        "rev-sort"}
    assert json.loads((again / "teacher.sort-copy.scored.partial.json").read_text(encoding="utf-8"))["lines"] == 40
    encdec_distill(killed)
    for name in ("corpus/teacher.rev-sort.scored", "corpus/teacher.sort-copy.scored", "corpus/train.sort-copy.copy",
                 "student/model.safetensors"):
        assert (again.parent / name).read_bytes() == (corpus.parent / name).read_bytes(), name
    assert json.loads((again / "manifest.json").read_text(encoding="utf-8"))["stages"]["translation"]["sort-copy"][
        "resumed"]


@pytest.mark.parametrize(("case", "message"), [
    ("direction", r"teacher\.source_lang and teacher\.target_lang choose the one direction of a bilingual student"),
    ("bilingual", r"teacher \(.*\) is bilingual \(it has no language tokens\)"),
    ("language", r"the direction copy-xx, which the teacher cannot translate: This model has no language 'xx'"),
])
def test_a_multilingual_student_is_refused_a_teacher_that_cannot_teach_it(case: str, message: str, model_dir: Path,
                                                                           tmp_path: Path) -> None:
    teacher, settings = model_dir, {}
    if case == "direction":
        settings = {"source_lang": "copy", "target_lang": "rev"}
    elif case == "bilingual":
        tokenizer = digit_tokenizer()
        teacher = save_for_pipeline(tiny_model("transformer", vocab_size=len(tokenizer)), tokenizer,
                                    tmp_path / "bilingual")
    recipe = multilingual_recipe(tmp_path, teacher, ["copy-xx"] if case == "language" else ["copy-rev"],
                                 "xx" if case == "language" else None, **settings)
    with pytest.raises(EncdecError, match=message):
        distill(load_distill_config(recipe))
    assert not (tmp_path / "out" / "corpus" / "manifest.json").exists()
    assert not list((tmp_path / "out").rglob("original*"))
