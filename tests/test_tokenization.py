"""The joint subword vocabulary: special tokens, normalisation, readable decoding, saving, model checks, and a model
folder's tokenizer loaded where encdec is not installed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from encdec import TransformerSeq2SeqConfig
from encdec.data import make_date_pairs
from encdec.errors import InputFileError, OverwriteError
from encdec.folders import save_for_pipeline
from encdec.tokenization import (
    check_tokenizer_matches_model,
    load_tokenizer,
    special_token_ids,
    train_tokenizer,
    train_tokenizer_from_files,
)
from remote_code import BLOCK_ENCDEC
from tiny_model_folders import FAMILIES, date_tokenizer
from toy import folder_model

DATE_TEXTS = [text for pair in make_date_pairs(400, seed=0) for text in pair]


@pytest.fixture(scope="module", params=["bpe", "unigram"])
def tokenizer(request: pytest.FixtureRequest) -> PreTrainedTokenizerFast:
    return train_tokenizer(DATE_TEXTS, vocab_size=200, algorithm=request.param)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def test_special_tokens_at_ids_0_to_3(tokenizer: PreTrainedTokenizerFast) -> None:
    assert tokenizer.convert_ids_to_tokens([0, 1, 2, 3]) == ["<pad>", "<s>", "</s>", "<unk>"]
    assert (tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id) == (
        0, 1, 2, 3)


def test_eos_appended_once(tokenizer: PreTrainedTokenizerFast) -> None:
    ids = tokenizer("3 March 2021").input_ids
    assert ids[-1] == tokenizer.eos_token_id
    assert ids.count(tokenizer.eos_token_id) == 1
    assert tokenizer.bos_token_id not in ids  # the decoder start token is the model's job, not the tokenizer's


def test_normalisation_nfkc_and_spaces(tokenizer: PreTrainedTokenizerFast) -> None:
    normalize = tokenizer.backend_tokenizer.normalizer.normalize_str
    assert normalize("２０２１") == "2021"  # NFKC: full-width digits
    assert normalize("\ufb01") == "fi"  # NFKC: ligature
    assert normalize(" 3\u00a0March\t2021\u202f ") == "3 March 2021"  # no-break spaces and tab -> space, trimmed
    assert normalize("3  March") == "3 March"  # runs of spaces collapse
    assert tokenizer("3\u00a0March\t2021").input_ids == tokenizer("3 March 2021").input_ids


@pytest.mark.parametrize("text", ["3rd of March 2021", "Mar 3, 21", "03.03.2021", "2021-03-03", "3-Mar-21"])
def test_decode_is_readable_and_exact(tokenizer: PreTrainedTokenizerFast, text: str) -> None:
    assert tokenizer.decode(tokenizer(text).input_ids, skip_special_tokens=True) == text


def test_decode_returns_normalised_text(tokenizer: PreTrainedTokenizerFast) -> None:
    text = "  3\u00a0March\t２０２１ "
    normalised = tokenizer.backend_tokenizer.normalizer.normalize_str(text)
    assert normalised == "3 March 2021"
    assert tokenizer.decode(tokenizer(text).input_ids, skip_special_tokens=True) == normalised


def test_saved_folder_loads_with_auto_tokenizer(tokenizer: PreTrainedTokenizerFast, tmp_path: Path) -> None:
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    texts = ["3rd of March 2021", "Wednesday, 3 Mar 2021 \u00a0"]
    assert reloaded(texts).input_ids == tokenizer(texts).input_ids
    assert special_token_ids(reloaded) == special_token_ids(tokenizer)
    assert load_tokenizer(tmp_path)(texts).input_ids == tokenizer(texts).input_ids


def test_special_token_ids_configure_a_model(tokenizer: PreTrainedTokenizerFast) -> None:
    ids = special_token_ids(tokenizer)
    assert ids == {"vocab_size": len(tokenizer), "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
                   "decoder_start_token_id": 1}
    check_tokenizer_matches_model(tokenizer, TransformerSeq2SeqConfig(**ids))  # no error


def test_check_tokenizer_matches_model_names_the_mismatch(tokenizer: PreTrainedTokenizerFast) -> None:
    too_small = TransformerSeq2SeqConfig(**{**special_token_ids(tokenizer), "vocab_size": len(tokenizer) - 1})
    with pytest.raises(ValueError, match=rf"`vocab_size`: tokenizer has {len(tokenizer)}, model config has "
                                         rf"{len(tokenizer) - 1}"):
        check_tokenizer_matches_model(tokenizer, too_small)
    other_pad = TransformerSeq2SeqConfig(**{**special_token_ids(tokenizer), "pad_token_id": 3})
    with pytest.raises(ValueError, match="`pad_token_id`: tokenizer has 0, model config has 3"):
        check_tokenizer_matches_model(tokenizer, other_pad)


def test_unknown_algorithm_and_empty_data() -> None:
    with pytest.raises(ValueError, match="`algorithm` must be one of"):
        train_tokenizer(DATE_TEXTS, algorithm="wordpiece")
    with pytest.raises(ValueError, match="empty data"):
        train_tokenizer(["", "  "])


def test_train_from_files_saves_and_refuses_overwrite(tmp_path: Path) -> None:
    pairs = make_date_pairs(200, seed=1)
    files = [write_lines(tmp_path / "train.src", [s for s, _ in pairs]),
             write_lines(tmp_path / "train.tgt", [t for _, t in pairs])]
    output = tmp_path / "tok"
    tokenizer = train_tokenizer_from_files(files, output, vocab_size=120, algorithm="unigram")
    reloaded = load_tokenizer(output)
    assert reloaded("3 March 2021").input_ids == tokenizer("3 March 2021").input_ids
    assert len(reloaded) == len(tokenizer)
    before = {p.name: p.read_bytes() for p in output.iterdir()}

    with pytest.raises(OverwriteError, match=rf"{re.escape(str(output))}.*--overwrite"):
        train_tokenizer_from_files(files, output, vocab_size=60)
    assert {p.name: p.read_bytes() for p in output.iterdir()} == before  # untouched

    train_tokenizer_from_files(files, output, vocab_size=60, overwrite=True)
    assert len(load_tokenizer(output)) == 60
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok", "train.src", "train.tgt"]  # no temporary folder


def test_train_from_files_errors_name_the_file(tmp_path: Path) -> None:
    good = write_lines(tmp_path / "good.txt", DATE_TEXTS)
    empty = write_lines(tmp_path / "empty.txt", ["", " "])
    with pytest.raises(InputFileError, match=rf"{re.escape(str(empty))} is empty"):
        train_tokenizer_from_files([good, empty], tmp_path / "tok")
    with pytest.raises(InputFileError, match=rf"{re.escape(str(tmp_path / 'missing.txt'))} does not exist"):
        train_tokenizer_from_files([tmp_path / "missing.txt"], tmp_path / "tok")
    with pytest.raises(InputFileError, match="No text files"):
        train_tokenizer_from_files([], tmp_path / "tok")
    assert not (tmp_path / "tok").exists()


def test_load_tokenizer_without_tokenizer_files(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(InputFileError, match=rf"{re.escape(str(tmp_path))} has no tokenizer files.*config\.json"):
        load_tokenizer(tmp_path)


# --- a model folder's tokenizer where encdec is not installed ---------------------------------------------------------

# Loads each folder's tokenizer three ways in a process that cannot import encdec, with stdin closed. input() is
# replaced: it records the question transformers asks about the folder's code (in a terminal, transformers waits 15 s
# for the answer) and answers as a closed stdin does.
TOKENIZER_WITHOUT_ENCDEC = BLOCK_ENCDEC + textwrap.dedent(
    """
    import builtins
    import json

    questions = []


    def no_terminal(prompt=""):
        questions.append(prompt)
        raise EOFError  # what input() raises where stdin is not a terminal


    builtins.input = no_terminal
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    request = json.loads(sys.argv[1])
    loaders = {
        "AutoTokenizer": lambda folder: AutoTokenizer.from_pretrained(folder),
        "AutoTokenizer untrusted": lambda folder: AutoTokenizer.from_pretrained(folder, trust_remote_code=False),
        "PreTrainedTokenizerFast": lambda folder: PreTrainedTokenizerFast.from_pretrained(folder),
    }
    results = {}
    for family, folder in request["folders"].items():
        for way, load in loaders.items():
            questions.clear()
            tokenizer = load(folder)
            results[f"{family}, {way}"] = {"ids": tokenizer(request["texts"])["input_ids"],
                                           "questions": list(questions)}
    with open(request["result"], "w", encoding="utf-8") as f:
        json.dump(results, f)
    """
)
FOLDER_TEXTS = ["3rd of March 2021", "Wednesday, 3 Mar 2021 \u00a0"]
LOADS = [f"{family}, {way}" for family in FAMILIES
         for way in ("AutoTokenizer", "AutoTokenizer untrusted", "PreTrainedTokenizerFast")]


@pytest.fixture(scope="module")
def tokenizer_folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[PreTrainedTokenizerFast, dict[str, Path]]:
    """A tokenizer and, for each family, a model folder as `encdec train` saves it (``save_for_pipeline``)."""
    root = tmp_path_factory.mktemp("tokenizer-folders")
    tokenizer = date_tokenizer()
    return tokenizer, {family: save_for_pipeline(folder_model(family, tokenizer), tokenizer, root / family)
                       for family in FAMILIES}


@pytest.fixture(scope="module")
def loaded_without_encdec(tokenizer_folders, tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """``{"FAMILY, WAY": {"ids": ..., "questions": [...]}}`` from one process without encdec."""
    _, folders = tokenizer_folders
    work = tmp_path_factory.mktemp("without-encdec")
    request = {"folders": {family: str(folder) for family, folder in folders.items()}, "texts": FOLDER_TEXTS,
               "result": str(work / "result.json")}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(work / "modules"), "PYTHONPATH": "",
           "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run([sys.executable, "-c", TOKENIZER_WITHOUT_ENCDEC, json.dumps(request)], cwd=work, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((work / "result.json").read_text(encoding="utf-8"))


def test_a_model_folder_names_a_plain_tokenizer_class(tokenizer_folders) -> None:
    for folder in tokenizer_folders[1].values():
        tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        assert tokenizer_config["tokenizer_class"] == "TokenizersBackend"  # transformers' own: no code to run
        assert "auto_map" not in tokenizer_config


@pytest.mark.integration  # a fresh Python process, torch and transformers imported anew
@pytest.mark.parametrize("load", LOADS)
def test_without_encdec_a_folder_tokenizer_encodes_as_encdec_does(load: str, tokenizer_folders,
                                                                  loaded_without_encdec) -> None:
    """Every way gives the tokenizer; a bare ``AutoTokenizer`` only after its question fails (stdin closed)."""
    assert loaded_without_encdec[load]["ids"] == tokenizer_folders[0](FOLDER_TEXTS)["input_ids"]


@pytest.mark.integration  # a fresh Python process, torch and transformers imported anew
@pytest.mark.parametrize("load", [load for load in LOADS if not load.endswith(", AutoTokenizer")])
def test_without_encdec_untrusted_or_direct_loading_asks_nothing(load: str, loaded_without_encdec) -> None:
    assert loaded_without_encdec[load]["questions"] == []


@pytest.mark.xfail(strict=True, raises=AssertionError, reason=(
    "transformers 5.18-5.24: AutoTokenizer.from_pretrained(folder) loads config.json through "
    "AutoConfig.from_pretrained(folder, trust_remote_code=None) before it reads tokenizer_config.json; config.json "
    "must name the folder's code in auto_map (trust_remote_code loading needs it) and its model_type is unknown "
    "without encdec, so resolve_trust_remote_code asks, whatever tokenizer_config.json says"))
@pytest.mark.integration  # a fresh Python process, torch and transformers imported anew
@pytest.mark.parametrize("family", FAMILIES)
def test_without_encdec_a_bare_auto_tokenizer_asks_nothing(family: str, loaded_without_encdec) -> None:
    assert loaded_without_encdec[f"{family}, AutoTokenizer"]["questions"] == []
