"""Checkpoint averaging (``encdec average``): the output holds exactly the mean of the inputs' weights, is a complete
model folder, and checkpoints of different models are refused with the file and field named."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSeq2SeqLM

from encdec.errors import EncdecError, OverwriteError
from encdec.folders import check_model_folder
from encdec.training.averaging import average_checkpoints
from encdec_cli import main
from tiny_model_folders import FAMILIES, date_tokenizer, save_folder
from toy import folder_model


@pytest.fixture(scope="module")
def tokenizer():
    return date_tokenizer()


def perturbed_folder(family: str, tokenizer, path: Path, seed: int, **overrides) -> Path:
    """A tiny model of ``family`` whose floating-point weights got seeded noise, saved to ``path``."""
    model = folder_model(family, tokenizer, **overrides)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.1)
    return save_folder(model, tokenizer, path)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_average_holds_the_mean_of_every_weight(family: str, tokenizer, tmp_path: Path) -> None:
    folders = [perturbed_folder(family, tokenizer, tmp_path / f"ckpt-{seed}", seed) for seed in (1, 2, 3)]
    out = average_checkpoints(folders, tmp_path / "avg")
    inputs = [load_file(str(folder / "model.safetensors")) for folder in folders]
    averaged = load_file(str(out / "model.safetensors"))
    assert averaged.keys() == inputs[0].keys()
    for name, tensor in averaged.items():
        expected = (sum(weights[name].double() for weights in inputs) / 3).float()
        assert tensor.dtype == inputs[0][name].dtype
        torch.testing.assert_close(tensor, expected, rtol=0, atol=0, msg=name)
    assert not torch.equal(averaged[name], inputs[0][name])  # the inputs really differ, so the mean is a new model
    record = json.loads((out / "averaging.json").read_text())
    assert record["checkpoints"] == [str(folder) for folder in folders]


@pytest.mark.parametrize("family", FAMILIES)
def test_averaging_copies_of_one_model_gives_that_model(family: str, tokenizer, tmp_path: Path) -> None:
    """The averaged folder is a complete, shippable model: loaded through the Auto classes it computes exactly what
    the original does (ties, config and generation config carried over)."""
    original = perturbed_folder(family, tokenizer, tmp_path / "a", seed=7)
    shutil.copytree(original, tmp_path / "b")
    out = average_checkpoints([original, tmp_path / "b"], tmp_path / "avg")
    assert "model.safetensors" in check_model_folder(out)
    reference = AutoModelForSeq2SeqLM.from_pretrained(original).eval()
    model = AutoModelForSeq2SeqLM.from_pretrained(out).eval()
    batch = tokenizer(["3rd of March 2021", "1/2/2000"], return_tensors="pt", padding=True)
    labels = tokenizer(["2021-03-03", "2000-01-02"], return_tensors="pt", padding=True).input_ids
    with torch.no_grad():
        torch.testing.assert_close(model(**batch, labels=labels).logits, reference(**batch, labels=labels).logits,
                                   rtol=0, atol=0)
    assert torch.equal(model.generate(**batch, max_new_tokens=8, num_beams=2),
                       reference.generate(**batch, max_new_tokens=8, num_beams=2))
    if family == "transformer":  # tied input/output embeddings stay tied
        assert model.get_output_embeddings().weight.data_ptr() == model.get_input_embeddings().weight.data_ptr()


def test_different_configs_are_refused_by_name(tokenizer, tmp_path: Path) -> None:
    a = perturbed_folder("transformer", tokenizer, tmp_path / "a", seed=1)
    b = perturbed_folder("transformer", tokenizer, tmp_path / "b", seed=2, dropout=0.3)
    with pytest.raises(EncdecError, match=r"b/config\.json differs .*'dropout'"):
        average_checkpoints([a, b], tmp_path / "avg")
    assert not (tmp_path / "avg").exists()


def test_different_tensors_are_refused_by_name(tokenizer, tmp_path: Path) -> None:
    a = perturbed_folder("rnn", tokenizer, tmp_path / "a", seed=1)
    b = perturbed_folder("rnn", tokenizer, tmp_path / "b", seed=2)
    weights = load_file(str(b / "model.safetensors"))
    name = sorted(weights)[0]
    weights[name] = weights[name][:1]
    save_file(weights, str(b / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(EncdecError, match=rf"tensor '{name}' has shape"):
        average_checkpoints([a, b], tmp_path / "avg")


def test_bad_requests_are_refused(tokenizer, tmp_path: Path) -> None:
    a = perturbed_folder("transformer", tokenizer, tmp_path / "a", seed=1)
    b = perturbed_folder("transformer", tokenizer, tmp_path / "b", seed=2)
    with pytest.raises(EncdecError, match="at least 2 checkpoints, got 1"):
        average_checkpoints([a], tmp_path / "avg")
    with pytest.raises(EncdecError, match="given twice"):
        average_checkpoints([a, tmp_path / "." / "a"], tmp_path / "avg")
    for output, relation in ((b, "is"), (b / "avg", "lies inside"), (tmp_path, "contains")):
        with pytest.raises(OverwriteError, match=rf"{re.escape(str(output))} {relation} the input "):
            average_checkpoints([a, b], output, overwrite=True)  # never deletes its own input
    assert (b / "model.safetensors").is_file()
    (tmp_path / "no-tokenizer").mkdir()
    with pytest.raises(EncdecError, match=r"tokenizer\.json is missing.*--tokenizer"):
        average_checkpoints([a, b], tmp_path / "avg", tokenizer_dir=tmp_path / "no-tokenizer")
    keep = tmp_path / "taken"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    with pytest.raises(OverwriteError,
                       match=rf"{re.escape(str(keep))} already exists and is not empty; pass --overwrite"):
        average_checkpoints([a, b], keep)
    assert (keep / "notes.txt").read_text() == "mine"
    average_checkpoints([a, b], keep, overwrite=True)
    assert not (keep / "notes.txt").exists() and (keep / "model.safetensors").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging folders left behind


def test_cli_average(tokenizer, tmp_path: Path, capsys) -> None:
    a = perturbed_folder("rnn", tokenizer, tmp_path / "a", seed=1)
    b = perturbed_folder("rnn", tokenizer, tmp_path / "b", seed=2)
    assert main(["average", str(a), str(b), "--output", str(tmp_path / "avg")]) == 0
    assert "the average of 2 checkpoints" in capsys.readouterr().out
    assert main(["average", str(a), "--output", str(tmp_path / "avg2")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("encdec average: error:") and "\n" not in err and "at least 2" in err
