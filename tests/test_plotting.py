"""Attention heatmaps for both families: the matrix is the generated tokens x the source tokens, each row a
distribution; by default the model's alignment layer averaged over its heads (the alignment every front end uses), and
the averages are averages of the single heads."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from encdec.decoding_options import DecodeRequest
from encdec.errors import EncdecError, OverwriteError
from encdec.inference import load_model_and_tokenizer
from encdec.inference.plotting import attention_matrix, plot_attention, save_attention_plot
from tiny_model_folders import FAMILIES, build_model_folders
from toy import folder_model

TEXT = "3rd of March 2021"
MAX_NEW_TOKENS = 6
SHORT = DecodeRequest(num_beams=1, max_new_tokens=MAX_NEW_TOKENS)  # greedy, as plot-attention decodes by default
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_model_folders(tmp_path_factory.mktemp("models"))


@pytest.fixture(scope="module")
def loaded(folders: dict[str, Path]) -> dict[str, tuple]:
    return {family: load_model_and_tokenizer(folder) for family, folder in folders.items()}


@pytest.mark.parametrize("family", FAMILIES)
def test_matrix_is_generated_tokens_by_source_tokens(loaded: dict[str, tuple], family: str) -> None:
    model, tokenizer = loaded[family]
    matrix, source_tokens, target_tokens = attention_matrix(model, tokenizer, TEXT, decoding=SHORT)
    batch = tokenizer([TEXT], return_tensors="pt")
    generated = model.generate(**batch, max_new_tokens=MAX_NEW_TOKENS, max_length=None, num_beams=1)  # (1, 1 + T)
    assert matrix.shape == (generated.size(1) - 1, batch["input_ids"].size(1))
    assert (len(target_tokens), len(source_tokens)) == matrix.shape
    assert source_tokens[-1] == "</s>" and not any("▁" in token for token in source_tokens[:-1])
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, atol=1e-5)


def test_means_average_the_single_heads_and_layers(loaded: dict[str, tuple]) -> None:
    model, tokenizer = loaded["transformer"]  # 2 decoder layers x 2 heads

    def matrix(**selection) -> np.ndarray:
        return attention_matrix(model, tokenizer, TEXT, decoding=SHORT, **selection)[0]

    per_layer = [matrix(layer=layer) for layer in range(2)]
    for layer in range(2):
        np.testing.assert_allclose(per_layer[layer], np.mean([matrix(layer=layer, head=h) for h in range(2)], axis=0),
                                   atol=1e-6)
        np.testing.assert_array_equal(per_layer[layer], matrix(layer=layer, mean=True))  # a layer's mean: the default
    assert not np.allclose(per_layer[0], per_layer[1])  # the layer chosen matters
    np.testing.assert_allclose(matrix(mean=True), np.mean(per_layer, axis=0), atol=1e-6)
    np.testing.assert_array_equal(matrix(mean=True), matrix(layer="mean"))
    np.testing.assert_allclose(matrix(mean=True).sum(axis=1), 1.0, atol=1e-5)
    # default: the alignment layer, the penultimate of 2 (no alignment.json), averaged over its heads
    np.testing.assert_array_equal(matrix(), per_layer[0])
    np.testing.assert_array_equal(matrix(layer=-1), per_layer[1])


def test_rnn_alignment_is_its_one_layer_and_head(loaded: dict[str, tuple]) -> None:
    model, tokenizer = loaded["rnn"]
    default = attention_matrix(model, tokenizer, TEXT, decoding=SHORT)[0]
    np.testing.assert_array_equal(default, attention_matrix(model, tokenizer, TEXT, decoding=SHORT,
                                                            mean=True)[0])


@pytest.mark.parametrize(("family", "selection", "message"), [
    ("transformer", {"layer": 2}, "`alignment layer` 2 does not exist: the model has 2 decoder layer(s); use 0 to 1"),
    ("transformer", {"head": 2}, "`alignment head` 2 does not exist: the model has 2 head(s) per layer; use 0 to 1"),
    ("transformer", {"head": 0, "mean": True}, "cannot be combined with `head`"),
    ("rnn", {"layer": 1}, "has 1 decoder layer(s); use 0 to 0"),
    ("rnn", {"head": -1}, "has 1 head(s) per layer; use 0 to 0"),
])
def test_out_of_range_layer_or_head_names_the_valid_range(loaded: dict[str, tuple], family: str, selection: dict,
                                                          message: str) -> None:
    model, tokenizer = loaded[family]
    with pytest.raises(EncdecError, match=re.escape(message)):
        attention_matrix(model, tokenizer, TEXT, decoding=DecodeRequest(num_beams=1, max_new_tokens=2), **selection)


def test_rnn_without_attention_has_nothing_to_plot(loaded: dict[str, tuple]) -> None:
    _, tokenizer = loaded["rnn"]
    model = folder_model("rnn", tokenizer, attention="none")
    with pytest.raises(EncdecError, match="no cross-attention"):
        attention_matrix(model, tokenizer, TEXT, decoding=DecodeRequest(num_beams=1, max_new_tokens=2))


def test_figure_has_labelled_axes_and_a_colorbar() -> None:
    figure = plot_attention(np.full((2, 3), 1 / 3), ["a", "b", "</s>"], ["x", "</s>"], title="demo")
    ax = figure.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("source tokens", "generated target tokens", "demo")
    assert [label.get_text() for label in ax.get_xticklabels()] == ["a", "b", "</s>"]
    assert [label.get_text() for label in ax.get_yticklabels()] == ["x", "</s>"]
    assert len(figure.axes) == 2  # the heatmap and its colorbar
    with pytest.raises(ValueError, match="target and 3 source tokens"):
        plot_attention(np.zeros((3, 3)), ["a", "b", "</s>"], ["x", "</s>"])


@pytest.mark.parametrize("family", FAMILIES)
def test_saves_a_png(folders: dict[str, Path], family: str, tmp_path: Path) -> None:
    out = save_attention_plot(folders[family], TEXT, tmp_path / "plots" / "attention.png", mean=True,
                              decoding=SHORT)
    assert out == tmp_path / "plots" / "attention.png"
    assert out.read_bytes()[:8] == PNG_SIGNATURE
    image = matplotlib.image.imread(out)
    assert image.ndim == 3 and min(image.shape[:2]) > 100
    assert [p.name for p in out.parent.iterdir()] == ["attention.png"]  # no temporary file left behind


def test_existing_plot_is_kept_unless_overwrite(folders: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "attention.png"
    out.write_bytes(b"keep me")
    with pytest.raises(OverwriteError, match="--overwrite"):
        save_attention_plot(folders["rnn"], TEXT, out, decoding=SHORT)
    assert out.read_bytes() == b"keep me"
    save_attention_plot(folders["rnn"], TEXT, out, overwrite=True, decoding=SHORT)
    assert out.read_bytes()[:8] == PNG_SIGNATURE
    with pytest.raises(EncdecError, match=r"use one of the suffixes .*\.png"):
        save_attention_plot(folders["rnn"], TEXT, tmp_path / "attention.txt")


def test_empty_text_is_refused(loaded: dict[str, tuple]) -> None:
    model, tokenizer = loaded["rnn"]
    with pytest.raises(EncdecError, match="empty"):
        attention_matrix(model, tokenizer, "  ")
