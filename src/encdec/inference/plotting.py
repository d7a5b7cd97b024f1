"""Cross-attention heatmaps: which source tokens each generated token attended to.

The figures are drawn on matplotlib's Agg canvas directly (``Figure`` + ``FigureCanvasAgg``): no display, no
pyplot global state. The matrix is the translation's alignment as ``inference.alignment`` defines it for every front
end (the server's page, ``translate --alignments``, ``align``): the model's alignment layer averaged over its heads.
Choosing other weights (layer and head are 0-based):

- ``layer``: another decoder layer (negative counts from the top), or ``"mean"`` for all of them;
- ``head``: one head of that layer instead of their mean;
- ``mean=True`` without a layer: all layers and heads (``layer="mean"``); with a layer, its heads' mean (the default).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..decoding_options import DECODING, GLANCE, DecodeRequest, asked_of
from ..errors import EncdecError
from ..io_utils import atomic_output, refuse_existing
from . import load_model_and_tokenizer, max_source_length
from .alignment import MEAN, alignment_request
from .decoding import decode_batch, resolve_options


def readable_tokens(tokenizer: PreTrainedTokenizerBase, ids: list[int]) -> list[str]:
    """Subword tokens without the ``▁`` word-start marker (a lone ``▁``, a space, stays visible)."""
    return [token.replace("▁", " ").strip() or token for token in tokenizer.convert_ids_to_tokens(ids)]


def attention_matrix(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    text: str,
    layer: int | str | None = None,
    head: int | None = None,
    mean: bool = False,
    decoding: DecodeRequest = GLANCE,
) -> tuple[np.ndarray, list[str], list[str]]:
    """Translate ``text`` as ``decoding`` asks (default ``GLANCE``: greedy search, at most 64 tokens) and return its
    alignment, row t = the weights over the source when generating target token t (see the module docstring for
    ``layer``, ``head`` and ``mean``). The matrix is the best hypothesis' ``attention`` from ``decode_batch``, the one
    the native API's answer carries (``alignment``'s ``weights``) transposed, so ``DecodeRequest()`` (the model's
    defaults, as the server fills them) plots what the server's page draws for ``text``.

    :return: matrix (T, S) whose rows sum to 1, the S source tokens (with ``</s>``) and the T generated tokens
    """
    if not text.strip():
        raise EncdecError("The text to translate is empty.")
    if head is not None and mean:
        raise EncdecError("`mean` averages over the heads, so it cannot be combined with `head`; give one of them.")
    source_ids = tokenizer([text], truncation=True, max_length=max_source_length(tokenizer, model.config)
                           )["input_ids"][0]
    model.eval()
    options = resolve_options(model.generation_config, **asked_of(decoding, DECODING),
                              **alignment_request(MEAN if mean and layer is None else layer, head))
    max_positions = getattr(model.config, "max_position_embeddings", None)
    # the start token and the generated tokens must fit (learned positions cannot extrapolate); the budget every
    # front end gives by default is within the positions already
    budget = options.budget(len(source_ids), model.config, max_positions - 1 if max_positions else None)
    try:
        best = decode_batch(model, tokenizer, [source_ids], options, [budget])[0][0]
    except EncdecError as error:
        if getattr(model.config, "attention", None) == "none":
            raise EncdecError("This model returns no cross-attention weights (an RNN with attention='none'); there "
                              "is nothing to plot.") from error
        raise
    return best.attention.T.cpu().numpy(), readable_tokens(tokenizer, source_ids), readable_tokens(tokenizer, best.ids)


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


def describe_selection(layer: int | str | None, head: int | None, mean: bool) -> str:
    if (mean and layer is None) or layer == MEAN:
        return "mean over all layers" + (f", head {head}" if head is not None else " and heads")
    chosen = "the alignment layer" if layer is None else f"layer {layer}"
    return f"{chosen}, {'mean over heads' if head is None else f'head {head}'}"


def save_attention_plot(
    model_dir: str | os.PathLike,
    text: str,
    out_path: str | os.PathLike,
    layer: int | str | None = None,
    head: int | None = None,
    mean: bool = False,
    overwrite: bool = False,
    decoding: DecodeRequest = GLANCE,
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
    matrix, source_tokens, target_tokens = attention_matrix(model, tokenizer, text, layer, head, mean, decoding)
    figure = plot_attention(matrix, source_tokens, target_tokens,
                            title=f"{Path(model_dir).name}: {describe_selection(layer, head, mean)}")
    with atomic_output(out_path) as tmp:
        figure.savefig(tmp, format=file_format, dpi=150)
    return out_path


__all__ = ["attention_matrix", "plot_attention", "save_attention_plot"]
