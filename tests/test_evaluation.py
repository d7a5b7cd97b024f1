"""``evaluate_model``: a model folder and two parallel files in, scores with sacreBLEU signatures out."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sacrebleu

from encdec.data import make_date_pairs
from encdec.errors import EncdecError, InputFileError, OverwriteError
from encdec.inference import load_model_and_tokenizer, translate
from encdec.inference.evaluation import evaluate_model
from encdec.io_utils import read_lines
from encdec_cli import main
from test_io_utils import hold_lock
from tiny_model_folders import FAMILIES, build_model_folders, date_tokenizer, save_folder
from toy import folder_model

DECODING = {"num_beams": 2, "batch_size": 4, "max_new_tokens": 5, "show_progress": False}
RESULT_KEYS = {"bleu", "bleu_signature", "chrf", "chrf_signature", "bleu_lowercase", "num_sentences", "num_beams",
               "batch_size", "max_new_tokens", "length_penalty", "sentences_per_second", "model_dir"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_model_folders(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def test_set(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("test_set")
    pairs = make_date_pairs(10, seed=1)
    (root / "source.txt").write_text("".join(f"{source}\n" for source, _ in pairs), encoding="utf-8")
    (root / "reference.txt").write_text("".join(f"{target}\n" for _, target in pairs), encoding="utf-8")
    return root / "source.txt", root / "reference.txt"


@pytest.mark.parametrize("family", FAMILIES)
def test_writes_scores_signatures_and_settings(folders: dict[str, Path], test_set: tuple[Path, Path], family: str,
                                               tmp_path: Path) -> None:
    output = tmp_path / "results" / "test.json"
    results = evaluate_model(folders[family], *test_set, output_file=output, **DECODING)
    assert set(results) >= RESULT_KEYS
    assert json.loads(output.read_text(encoding="utf-8")) == results
    assert results["num_sentences"] == 10
    assert (results["num_beams"], results["batch_size"], results["max_new_tokens"]) == (2, 4, 5)
    assert results["length_penalty"] == 1.0
    assert results["bleu_signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|")
    assert "|case:lc|" in results["bleu_lowercase_signature"]
    assert results["chrf_signature"].startswith("nrefs:1|case:mixed|")
    # the scores are sacreBLEU's on the translations, made here again with the same settings
    model, tokenizer = load_model_and_tokenizer(folders[family])
    hypotheses = translate(model, tokenizer, read_lines(test_set[0], "source"), num_beams=2, batch_size=4,
                           max_new_tokens=5)
    references = [read_lines(test_set[1], "reference")]
    assert results["bleu"] == round(sacrebleu.corpus_bleu(hypotheses, references).score, 2)
    assert results["bleu_lowercase"] == round(sacrebleu.corpus_bleu(hypotheses, references, lowercase=True).score, 2)
    assert results["chrf"] == round(sacrebleu.corpus_chrf(hypotheses, references).score, 2)


@pytest.mark.parametrize("family", FAMILIES)
def test_batches_translate_as_one_by_one_and_score_as_sacrebleu(folders: dict[str, Path], test_set: tuple[Path, Path],
                                                                family: str) -> None:
    model, tokenizer = load_model_and_tokenizer(folders[family])
    sources, references = read_lines(test_set[0], "source"), read_lines(test_set[1], "reference")
    settings = {"num_beams": 1, "max_new_tokens": 5, "show_progress": False}
    batched = translate(model, tokenizer, sources, batch_size=4, **settings)  # sorted by length, then restored
    one_by_one = [translate(model, tokenizer, [source], batch_size=1, **settings)[0] for source in sources]
    assert batched == one_by_one
    results = evaluate_model(folders[family], *test_set, **{**DECODING, **settings, "batch_size": 4})
    assert results["bleu"] == round(sacrebleu.corpus_bleu(batched, [references]).score, 2)


@pytest.fixture(scope="module")
def distinct_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str], list[str]]:
    """A random RNN whose weights are wide enough (init_range 0.5, against 0.1) that its greedy outputs depend on the
    source, and 10 date sources whose 8-token outputs all differ, taken in turn from a pool of 40: (folder, sources,
    outputs). Random weights at the usual range repeat one or two outputs whatever the source, and no order of
    them can be told apart."""
    tokenizer = date_tokenizer()
    folder = save_folder(folder_model("rnn", tokenizer, init_range=0.5), tokenizer,
                         tmp_path_factory.mktemp("distinct") / "rnn")
    model, _ = load_model_and_tokenizer(folder)
    sources, outputs = [], []
    for source, _ in make_date_pairs(40, seed=3):
        output = translate(model, tokenizer, [source], num_beams=1, max_new_tokens=8)[0]  # alone: no batch order
        if output not in outputs and len(outputs) < 10:
            sources.append(source)
            outputs.append(output)
    assert len(outputs) == 10, outputs
    return folder, sources, outputs


def test_scores_are_those_of_the_translations_in_input_order(distinct_model, tmp_path: Path) -> None:
    """References that are the model's own outputs, line by line, score exactly 100: every hypothesis is scored
    against the reference of its own source. All outputs differ and the sources are not in length order, so
    hypotheses put in another order (sorted by length as batching sorts them, or chunks joined out of order) miss
    their references, and the score drops (as it does here with the references shifted by one line)."""
    folder, sources, outputs = distinct_model
    lengths = [len(source) for source in sources]
    assert sorted(lengths) != lengths and sorted(lengths, reverse=True) != lengths
    source_file = tmp_path / "source.txt"
    source_file.write_text("".join(f"{source}\n" for source in sources), encoding="utf-8")
    own = tmp_path / "own.txt"
    own.write_text("".join(f"{output}\n" for output in outputs), encoding="utf-8")
    results = evaluate_model(folder, source_file, own, num_beams=1, max_new_tokens=8, batch_size=3, chunk_size=4,
                             show_progress=False)
    assert (results["bleu"], results["chrf"], results["bleu_lowercase"]) == (100.0, 100.0, 100.0)
    assert sacrebleu.corpus_bleu(outputs, [outputs[1:] + outputs[:1]]).score < 90  # what a misorder would score


def test_cased_and_lowercased_bleu_differ_by_case_only(distinct_model, tmp_path: Path) -> None:
    """References that are the model's outputs with every other line in capitals: lowercased BLEU is still 100,
    cased BLEU and chrF are sacreBLEU's on these hypotheses (both below 100)."""
    folder, sources, outputs = distinct_model
    references = [output.upper() if i % 2 else output for i, output in enumerate(outputs)]
    assert references != outputs
    source_file = tmp_path / "source.txt"
    source_file.write_text("".join(f"{source}\n" for source in sources), encoding="utf-8")
    reference_file = tmp_path / "capitals.txt"
    reference_file.write_text("".join(f"{reference}\n" for reference in references), encoding="utf-8")
    results = evaluate_model(folder, source_file, reference_file, num_beams=1, max_new_tokens=8, show_progress=False)
    assert results["bleu_lowercase"] == 100.0
    assert results["bleu"] == round(sacrebleu.corpus_bleu(outputs, [references]).score, 2) < 100.0
    assert results["chrf"] == round(sacrebleu.corpus_chrf(outputs, [references]).score, 2) < 100.0


def test_missing_and_empty_files_are_named(folders: dict[str, Path], test_set: tuple[Path, Path],
                                           tmp_path: Path) -> None:
    missing = tmp_path / "missing.txt"
    with pytest.raises(InputFileError, match=re.escape(f"source file {missing} does not exist")):
        evaluate_model(folders["transformer"], missing, test_set[1], **DECODING)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    with pytest.raises(InputFileError, match=re.escape(f"reference file {empty} is empty")):
        evaluate_model(folders["transformer"], test_set[0], empty, **DECODING)
    with pytest.raises(InputFileError, match="model folder .* does not exist"):
        evaluate_model(tmp_path / "no-model", *test_set, **DECODING)


def test_line_count_mismatch_names_both_files_and_counts(folders: dict[str, Path], test_set: tuple[Path, Path],
                                                         tmp_path: Path) -> None:
    short = tmp_path / "short.txt"
    short.write_text("2021-03-03\n2021-03-04\n", encoding="utf-8")
    with pytest.raises(InputFileError) as error:
        evaluate_model(folders["transformer"], test_set[0], short, **DECODING)
    assert f"{test_set[0]} has 10 lines" in str(error.value)
    assert f"{short} has 2" in str(error.value)


def test_lines_keep_blank_ones_and_drop_line_endings(tmp_path: Path) -> None:
    path = tmp_path / "crlf.txt"
    path.write_bytes(b"one\r\n\r\nthree\r\n")
    assert read_lines(path, "file") == ["one", "", "three"]


def test_existing_output_is_kept_unless_overwrite(folders: dict[str, Path], test_set: tuple[Path, Path],
                                                  tmp_path: Path) -> None:
    output = tmp_path / "results.json"
    output.write_text("keep me", encoding="utf-8")
    with pytest.raises(OverwriteError, match=re.escape(f"The output file {output} already exists; pass --overwrite")):
        evaluate_model(folders["transformer"], *test_set, output_file=output, **DECODING)
    assert output.read_text(encoding="utf-8") == "keep me"
    evaluate_model(folders["transformer"], *test_set, output_file=output, overwrite=True, **DECODING)
    assert json.loads(output.read_text(encoding="utf-8"))["num_sentences"] == 10


def test_evaluate_output_holds_the_writer_lock(folders: dict[str, Path], test_set: tuple[Path, Path], tmp_path: Path,
                                               capsys: pytest.CaptureFixture) -> None:
    """While another process holds ``results.json.lock``, ``encdec evaluate --output results.json`` (with
    ``--overwrite`` or not) is refused in one line naming the file and the holder, and writes nothing; once the holder
    is gone it runs, and leaves no lock file behind, nor does a run that fails."""
    output = tmp_path / "results.json"
    argv = ["evaluate", "--model", str(folders["transformer"]), "--source-file", str(test_set[0]), "--reference-file",
            str(test_set[1]), "--num-beams", "1", "--max-new-tokens", "5", "--quiet", "--output", str(output)]
    holder = hold_lock(tmp_path / "results.json.lock")
    try:
        for extra in ([], ["--overwrite"]):
            capsys.readouterr()
            assert main([*argv, *extra]) == 2
            captured = capsys.readouterr()
            assert captured.out == ""
            assert captured.err.splitlines() == [
                f"encdec evaluate: error: {output} is being written by another process (PID {holder.pid}, which holds "
                f"{output}.lock); wait for it to finish, or stop it, then rerun."]
        assert sorted(path.name for path in tmp_path.iterdir()) == ["results.json.lock"]
    finally:
        holder.kill()
        holder.wait(timeout=60)
    assert main([*argv, "--model", str(tmp_path / "no-model")]) == 2  # a failed run lets go of the lock too
    assert list(tmp_path.iterdir()) == []
    assert main(argv) == 0
    assert json.loads(output.read_text(encoding="utf-8"))["num_sentences"] == 10
    assert sorted(path.name for path in tmp_path.iterdir()) == ["results.json"]


def test_tokenizer_that_does_not_match_the_model_is_refused(test_set: tuple[Path, Path], tmp_path: Path) -> None:
    tokenizer = date_tokenizer()
    model = folder_model("transformer", tokenizer, vocab_size=len(tokenizer) - 10)  # ids past the embedding table
    folder = save_folder(model, tokenizer, tmp_path / "mismatch")
    with pytest.raises(EncdecError, match=re.escape(f"disagree on `vocab_size`: tokenizer has {len(tokenizer)}, model "
                                                    f"config has {len(tokenizer) - 10}")):
        evaluate_model(folder, *test_set, **DECODING)
