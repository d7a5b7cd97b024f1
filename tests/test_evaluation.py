"""``evaluate_model``: a model folder and two parallel files in, scores with sacreBLEU signatures out."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import sacrebleu

from encdec.data import make_date_pairs
from encdec.errors import EncdecError, InputFileError, OverwriteError
from encdec.evaluation import evaluate_model
from encdec.inference import load_model_and_tokenizer, translate
from encdec.io_utils import read_lines
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
    assert 0.0 <= results["bleu"] <= results["bleu_lowercase"] <= 100.0


@pytest.mark.parametrize("family", FAMILIES)
def test_scores_are_those_of_the_translations_in_input_order(folders: dict[str, Path], test_set: tuple[Path, Path],
                                                             family: str) -> None:
    model, tokenizer = load_model_and_tokenizer(folders[family])
    sources, references = read_lines(test_set[0], "source"), read_lines(test_set[1], "reference")
    settings = {"num_beams": 1, "max_new_tokens": 5, "show_progress": False}
    batched = translate(model, tokenizer, sources, batch_size=4, **settings)  # sorted by length, then restored
    one_by_one = [translate(model, tokenizer, [source], batch_size=1, **settings)[0] for source in sources]
    assert batched == one_by_one
    results = evaluate_model(folders[family], *test_set, **{**DECODING, **settings, "batch_size": 4})
    assert results["bleu"] == round(sacrebleu.corpus_bleu(batched, [references]).score, 2)


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
    with pytest.raises(OverwriteError, match="--overwrite"):
        evaluate_model(folders["transformer"], *test_set, output_file=output, **DECODING)
    assert output.read_text(encoding="utf-8") == "keep me"
    evaluate_model(folders["transformer"], *test_set, output_file=output, overwrite=True, **DECODING)
    assert json.loads(output.read_text(encoding="utf-8"))["num_sentences"] == 10


def test_tokenizer_that_does_not_match_the_model_is_refused(test_set: tuple[Path, Path], tmp_path: Path) -> None:
    tokenizer = date_tokenizer()
    model = folder_model("transformer", tokenizer, vocab_size=len(tokenizer) - 10)  # ids past the embedding table
    folder = save_folder(model, tokenizer, tmp_path / "mismatch")
    with pytest.raises(EncdecError, match="vocab_size"):
        evaluate_model(folder, *test_set, **DECODING)
