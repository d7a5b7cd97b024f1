"""Cross-attention heatmaps: which source tokens each generated token attended to.

The figures are drawn on matplotlib's Agg canvas directly (``Figure`` + ``FigureCanvasAgg``): no display, no
pyplot global state. Both families work through ``generate(output_attentions=True)``: the Transformer returns
per decoder layer (B, H, 1, S) per step, the RNN its alignment as one "layer" with one "head", (B, 1, 1, S).

Choosing the weights (layer and head are 0-based):

- default: head ``head`` (default 0) of decoder layer ``layer`` (default the last);
- ``mean=True``: the average over all heads of ``layer``, or over all layers and heads if no layer is given.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..errors import EncdecError
from ..io_utils import atomic_output, refuse_existing
from . import load_model_and_tokenizer, max_source_length


def readable_tokens(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> list[str]:
    """Subword tokens without the ``▁`` word-start marker (a lone ``▁``, a space, stays visible)."""
    return [token.replace("▁", " ").strip() or token for token in tokenizer.convert_ids_to_tokens(ids)]


def select_attention(cross_attentions: tuple[tuple[torch.Tensor, ...], ...], layer: int | None = None,
                     head: int | None = None, mean: bool = False) -> torch.Tensor:
    """Per-step cross-attentions from ``generate`` -> one (T, S) matrix for the first sequence of the batch.

    :param cross_attentions: one entry per generated step, each a tuple over decoder layers of (B, H, 1, S)
    """
    weights = torch.stack([torch.stack(step, dim=1)[0] for step in cross_attentions], dim=2)  # (L, H, T, 1, S)
    weights = weights.squeeze(3).float()  # (L, H, T, S)
    num_layers, num_heads = weights.shape[:2]
    if layer is not None and not 0 <= layer < num_layers:
        raise EncdecError(f"Layer {layer} is out of range: this model returns cross-attention for layers "
                          f"0..{num_layers - 1} ({num_layers} in all).")
    if head is not None and mean:
        raise EncdecError("`mean` averages over the heads, so it cannot be combined with `head`; give one of them.")
    if head is not None and not 0 <= head < num_heads:
        raise EncdecError(f"Head {head} is out of range: this model has heads 0..{num_heads - 1} ({num_heads} in all).")
    if mean:
        chosen = weights if layer is None else weights[layer:layer + 1]  # (L or 1, H, T, S)
        return chosen.mean(dim=(0, 1))  # (T, S)
    return weights[num_layers - 1 if layer is None else layer, head or 0]  # (T, S)


def attention_matrix(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    text: str,
    layer: int | None = None,
    head: int | None = None,
    mean: bool = False,
    max_new_tokens: int = 64,
) -> tuple[np.ndarray, list[str], list[str]]:
    """Greedy-translate ``text`` and return its cross-attention, row t = the weights over the source when
    generating target token t (see the module docstring for ``layer``, ``head`` and ``mean``).

    :return: matrix (T, S) whose rows sum to 1, the S source tokens (with ``</s>``) and the T generated tokens
    """
    if not text.strip():
        raise EncdecError("The text to translate is empty.")
    batch = tokenizer([text], truncation=True, max_length=max_source_length(tokenizer, model.config),
                      return_tensors="pt")
    max_positions = getattr(model.config, "max_position_embeddings", None)
    if max_positions:  # the start token and the generated tokens must fit (learned positions cannot extrapolate)
        max_new_tokens = min(max_new_tokens, max_positions - 1)
    model.eval()
    with torch.inference_mode():
        out = model.generate(
            input_ids=batch["input_ids"].to(model.device), attention_mask=batch["attention_mask"].to(model.device),
            num_beams=1, do_sample=False, max_new_tokens=max_new_tokens,
            return_dict_in_generate=True, output_attentions=True,
        )
    if not out.cross_attentions or not out.cross_attentions[0]:
        raise EncdecError("This model returns no cross-attention weights (e.g. an RNN with attention='none'); "
                          "there is nothing to plot.")
    matrix = select_attention(out.cross_attentions, layer, head, mean)  # (T, S)
    generated = out.sequences[0, 1:1 + matrix.size(0)].tolist()  # the decoder start token has no attention row
    return matrix.cpu().numpy(), readable_tokens(tokenizer, batch["input_ids"][0].tolist()), \
        readable_tokens(tokenizer, generated)


def plot_attention(matrix: np.ndarray, source_tokens: list[str], target_tokens: list[str],
                   title: str = "Cross-attention") -> Figure:
    """A heatmap of ``matrix`` (T, S): source tokens along x, generated target tokens along y, weights in [0, 1]."""
    num_target, num_source = matrix.shape
    if (num_target, num_source) != (len(target_tokens), len(source_tokens)):
        raise ValueError(f"The matrix is {matrix.shape} but there are {len(target_tokens)} target and "
                         f"{len(source_tokens)} source tokens.")
    figure = Figure(figsize=(min(2.5 + 0.4 * num_source, 30), min(1.5 + 0.35 * num_target, 30)), layout="constrained")
    FigureCanvasAgg(figure)  # attaches itself as figure.canvas
    ax = figure.add_subplot()
    image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
    ax.set_xticks(range(num_source), labels=source_tokens, rotation=90)
    ax.set_yticks(range(num_target), labels=target_tokens)
    ax.set_xlabel("source tokens")
    ax.set_ylabel("generated target tokens")
    ax.set_title(title)
    figure.colorbar(image, ax=ax, label="attention weight")
    return figure


def describe_selection(layer: int | None, head: int | None, mean: bool) -> str:
    if mean:
        return "mean over all layers and heads" if layer is None else f"layer {layer}, mean over heads"
    return f"{'last layer' if layer is None else f'layer {layer}'}, head {head or 0}"


def save_attention_plot(
    model_dir: str | os.PathLike,
    text: str,
    out_path: str | os.PathLike,
    layer: int | None = None,
    head: int | None = None,
    mean: bool = False,
    overwrite: bool = False,
    max_new_tokens: int = 64,
    device: str = "cpu",
) -> Path:
    """Translate ``text`` with the model folder ``model_dir`` and save its cross-attention heatmap to ``out_path``
    (format from the suffix: .png, .pdf, .svg, ...), atomically. Refuses to replace a file unless ``overwrite``."""
    out_path = refuse_existing(out_path, overwrite, "plot file", "--out", example="attention.png")
    file_format = out_path.suffix.lstrip(".").lower()
    supported = FigureCanvasAgg(Figure()).get_supported_filetypes()
    if file_format not in supported:
        raise EncdecError(f"Cannot save a plot as {out_path.name!r}: use one of the suffixes "
                          f"{', '.join('.' + f for f in sorted(supported))}.")
    model, tokenizer = load_model_and_tokenizer(model_dir, device)
    matrix, source_tokens, target_tokens = attention_matrix(model, tokenizer, text, layer, head, mean, max_new_tokens)
    figure = plot_attention(matrix, source_tokens, target_tokens,
                            title=f"{Path(model_dir).name}: {describe_selection(layer, head, mean)}")
    with atomic_output(out_path) as tmp:
        figure.savefig(tmp, format=file_format, dpi=150)
    return out_path


__all__ = ["attention_matrix", "plot_attention", "save_attention_plot", "select_attention"]
