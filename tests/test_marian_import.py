"""``encdec import``: a MarianMTModel folder built here (random weights, tiny SentencePiece models trained on the
built-in dates) becomes an encdec folder that gives transformers' Marian logits bit for bit, the same greedy and
beam-5 tokens and MarianTokenizer's ids; it loads where encdec is not installed; its bad inputs are one line each and
leave nothing at ``--output``; a Hub id goes through ``snapshot_download`` (the network boundary)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import MarianMTModel

from encdec.errors import EncdecError
from encdec.folders import check_model_folder
from encdec.inference import load_model_and_tokenizer
from encdec.marian import importer
from encdec_cli import main
from marian_fixtures import HELD_OUT_SOURCES, write_marian_model
from remote_code import load_without_encdec

pytest.importorskip("sentencepiece")  # the reference MarianTokenizer and the tiny .spm models need it

@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory) -> Path:
    return write_marian_model(tmp_path_factory.mktemp("marian") / "opus-mt-en-de")


def encdec_import(*args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["import", *args])
    assert status == 0, out.getvalue()[-2000:]
    return out.getvalue()


@pytest.fixture(scope="module")
def imported(marian_dir, tmp_path_factory) -> Path:
    output = tmp_path_factory.mktemp("imported") / "opus-mt-en-de-encdec"
    report = json.loads(encdec_import("--from", str(marian_dir), "--output", str(output)))
    assert report["logits vs MarianMTModel"].startswith("max |difference| 0 on")
    assert report["pieces missing from vocab.json"].startswith("1 ")  # the fixture leaves one source piece out
    return output


@torch.no_grad()
def test_the_imported_folder_is_marians_model_and_tokenizer(marian_dir, imported) -> None:
    from transformers import MarianTokenizer

    model, tokenizer = load_model_and_tokenizer(imported)
    marian, marian_tokenizer = MarianMTModel.from_pretrained(marian_dir).eval(), MarianTokenizer.from_pretrained(
        marian_dir)
    texts = HELD_OUT_SOURCES + ["an unseen ẞ and 日本", ""]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    assert batch["input_ids"].tolist() == marian_tokenizer(texts, return_tensors="pt", padding=True)[
        "input_ids"].tolist()
    starts = model.prepare_decoder_input_ids_from_labels(batch["input_ids"])
    assert torch.equal(model(**batch, decoder_input_ids=starts).logits,
                       marian(**batch, decoder_input_ids=starts).logits)
    for search in (dict(num_beams=1), dict(num_beams=5)):  # the saved defaults otherwise: bad words, forced eos
        ours = model.generate(**batch, **search)
        assert torch.equal(ours, marian.generate(**batch, **search))
        assert tokenizer.batch_decode(ours, skip_special_tokens=True) == marian_tokenizer.batch_decode(
            ours, skip_special_tokens=True)


def test_the_generation_defaults_and_the_card_come_from_the_source(marian_dir, imported) -> None:
    saved = json.loads((imported / "generation_config.json").read_text(encoding="utf-8"))
    pad = json.loads((marian_dir / "vocab.json").read_text(encoding="utf-8"))["<pad>"]
    assert saved["bad_words_ids"] == [[pad]] and saved["num_beams"] == 3 and saved["forced_eos_token_id"] == 0
    assert saved["max_new_tokens"] == 23 and "max_length" not in saved  # Marian's max_length counts the start
    assert saved["decoder_start_token_id"] == pad and saved.get("bos_token_id") is None
    card = ModelCard.load(imported / "README.md")
    assert card.data.license == "cc-by-4.0" and card.data.language == ["en", "de"]
    assert f"from the Marian model **{marian_dir}**" in card.text.replace("\n", " ")
    config = json.loads((imported / "config.json").read_text(encoding="utf-8"))
    assert config["activation_function"] == "swish" and config["final_logits_bias"] is True
    assert config["sinusoid_layout"] == "half_split"
    # `encdec push` uploads the target side's tokenizer and the tokenizer's code with the rest
    assert {"target_tokenizer.json", "tokenization_marian_import.py"} <= set(check_model_folder(imported))


def test_the_imported_folder_translates_where_encdec_is_not_installed(imported, tmp_path) -> None:
    remote = load_without_encdec([imported], HELD_OUT_SOURCES[:3], tmp_path)[str(imported)]
    assert remote["tokenizer_class"][0] == "MarianImportTokenizer"
    assert remote["tokenizer_class"][1].startswith("transformers_modules.")
    model, tokenizer = load_model_and_tokenizer(imported)
    batch = tokenizer(HELD_OUT_SOURCES[:3], return_tensors="pt", padding=True)
    assert remote["input_ids"] == batch["input_ids"].tolist()
    assert remote["generated"]["beam"] == model.generate(**batch, max_new_tokens=8, num_beams=3).tolist()


def test_encdec_translate_runs_on_the_imported_folder(marian_dir, imported, tmp_path) -> None:
    from transformers import MarianTokenizer

    sources = HELD_OUT_SOURCES[:4]
    (tmp_path / "in.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(imported), "--input", str(tmp_path / "in.txt"), "--output",
                 str(tmp_path / "out.txt"), "--quiet"]) == 0
    marian, tokenizer = MarianMTModel.from_pretrained(marian_dir), MarianTokenizer.from_pretrained(marian_dir)
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    expected = tokenizer.batch_decode(marian.generate(**batch), skip_special_tokens=True)  # beam 3: the default
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == [line.strip() for line in expected]


def broken(marian_dir: Path, tmp_path: Path, change) -> Path:
    folder = tmp_path / "broken"
    shutil.copytree(marian_dir, folder)
    change(folder)
    return folder


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def set_config(folder: Path, **values) -> None:
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    (folder / "config.json").write_text(json.dumps({**config, **values}), encoding="utf-8")


@pytest.mark.parametrize(("change", "message"), [
    (lambda f: truncate(f / "model.safetensors"), r"model\.safetensors cannot be read .*truncated or damaged"),
    (lambda f: set_config(f, vocab_size=5000, decoder_vocab_size=5000), r"vocab\.json holds \d+ tokens, but"),
    (lambda f: (f / "target.spm").unlink(), r"target\.spm"),
    (lambda f: (f / "config.json").unlink(), r"has no config\.json: it is not a model folder"),
    (lambda f: set_config(f, model_type="bart"), r"is a 'bart' model, not a Marian one"),
    (lambda f: set_config(f, normalize_embedding=True), r"`normalize_embedding: True`, which encdec's Transformer"),
])
def test_bad_input_is_one_line_naming_the_file_and_nothing_is_written(marian_dir, tmp_path, change, message) -> None:
    folder, output = broken(marian_dir, tmp_path, change), tmp_path / "out"
    with pytest.raises(EncdecError, match=message) as error:
        importer.import_marian(str(folder), output)
    assert "\n" not in str(error.value)
    assert not output.exists() and [p.name for p in tmp_path.iterdir()] == ["broken"]


def test_an_existing_output_needs_overwrite(marian_dir, tmp_path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep")
    with pytest.raises(EncdecError, match="pass --overwrite"):
        importer.import_marian(str(marian_dir), tmp_path / "out")
    assert (tmp_path / "out" / "mine.txt").read_text() == "keep"


def test_a_hub_id_is_downloaded_and_an_unreachable_hub_is_one_line(marian_dir, tmp_path, monkeypatch) -> None:
    with pytest.raises(EncdecError, match=r"Helsinki-NLP/opus-mt-xx-yy: the Hugging Face Hub could not give") as error:
        importer.resolve_source("Helsinki-NLP/opus-mt-xx-yy")  # HF_HUB_OFFLINE=1: the real call, refused offline
    assert "\n" not in str(error.value)
    with pytest.raises(EncdecError, match="not a Hub model id"):
        importer.resolve_source(str(tmp_path / "no-such-folder"))
    asked = {}

    def snapshot_download(repo_id: str, allow_patterns: list[str]) -> str:
        asked.update(repo_id=repo_id, allow_patterns=allow_patterns)
        return str(marian_dir)

    monkeypatch.setattr("huggingface_hub.snapshot_download", snapshot_download)
    assert importer.resolve_source("Helsinki-NLP/opus-mt-en-de") == marian_dir
    assert asked["repo_id"] == "Helsinki-NLP/opus-mt-en-de"
    assert {"config.json", "model.safetensors", "source.spm", "target.spm", "vocab.json"} <= set(
        asked["allow_patterns"])


def test_a_model_of_several_target_languages_reads_the_token_typed_first(tmp_path) -> None:
    """OPUS-MT's multi-target models read ``>>fra<<`` at the start of the source; imported, they do the same through
    encdec's commands (the token is part of the text), and the tokenizer's ``tgt_lang`` puts it there in Python."""
    from transformers import MarianTokenizer

    source = write_marian_model(tmp_path / "opus-mt-en-mul", seed=3, languages=("fra", "deu"))
    encdec_import("--from", str(source), "--output", str(tmp_path / "out"))
    sources = [f">>{code}<< {text}" for code, text in zip(("fra", "deu", "fra"), HELD_OUT_SOURCES[:3], strict=True)]
    (tmp_path / "in.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")
    assert main(["translate", "--model", str(tmp_path / "out"), "--input", str(tmp_path / "in.txt"), "--output",
                 str(tmp_path / "out.txt"), "--quiet"]) == 0
    marian, tokenizer = MarianMTModel.from_pretrained(source), MarianTokenizer.from_pretrained(source)
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    expected = tokenizer.batch_decode(marian.generate(**batch), skip_special_tokens=True)
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines() == [line.strip() for line in expected]
    _, ours = load_model_and_tokenizer(tmp_path / "out")
    ours.tgt_lang = "deu"
    assert ours(HELD_OUT_SOURCES[1]).input_ids == tokenizer(sources[1]).input_ids


def test_an_old_opus_mt_folder_imports_from_its_bin_file_and_config_keys(marian_dir, tmp_path) -> None:
    """The layout of the early OPUS-MT uploads: ``pytorch_model.bin`` (read with ``weights_only=True``), the BART-era
    keys in config.json and the decoding defaults there too (no generation_config.json)."""
    folder = tmp_path / "opus-mt-old"
    shutil.copytree(marian_dir, folder)
    marian = MarianMTModel.from_pretrained(folder)
    (folder / "model.safetensors").unlink()
    torch.save(marian.state_dict(), folder / "pytorch_model.bin")
    generation = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    (folder / "generation_config.json").unlink()
    set_config(folder, normalize_embedding=False, normalize_before=False, static_position_embeddings=True,
               add_bias_logits=False, add_final_layer_norm=False, extra_pos_embeddings=generation["pad_token_id"] + 1,
               max_length=generation["max_length"], num_beams=generation["num_beams"],
               bad_words_ids=generation["bad_words_ids"], forced_eos_token_id=generation["forced_eos_token_id"])
    report = importer.import_marian(str(folder), tmp_path / "out")
    assert report.max_logit_difference == 0.0
    saved = json.loads((tmp_path / "out" / "generation_config.json").read_text(encoding="utf-8"))
    assert saved["bad_words_ids"] == generation["bad_words_ids"] and saved["num_beams"] == generation["num_beams"]
    assert saved["max_new_tokens"] == generation["max_length"] - 1
