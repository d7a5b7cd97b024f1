"""Translate a test set with a saved model folder and score it: cased sacreBLEU, chrF and lowercased BLEU, each
with sacreBLEU's signature, plus the decoding settings and the speed, as one JSON-ready dict.

Backs ``encdec evaluate --model DIR --source-file F --reference-file R``.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from .errors import EncdecError, InputFileError, OverwriteError
from .hub import read_safetensors_shapes
from .io_utils import atomic_write_json, read_aligned_lines, require_file
from .metrics import load_metric
from .tokenization import check_tokenizer_matches_model

logger = logging.getLogger(__name__)


def load_model_and_tokenizer(model_dir: str | os.PathLike, device: str = "cpu"
                             ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a model folder (weights, config, tokenizer) through the Auto classes, in eval mode on ``device``,
    and check that the tokenizer matches the model's vocabulary.

    Importing ``encdec`` (this module's package) registered the local classes, which take precedence over the
    folder's code files; ``trust_remote_code=True`` only avoids the interactive question on such folders.
    """
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise InputFileError(f"The model folder {model_dir} does not exist or is not a folder.")
    require_file(model_dir / "config.json", "model config")
    read_safetensors_shapes(model_dir / "model.safetensors")  # one clear error for missing or corrupt weights
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    except (OSError, ValueError) as error:
        raise InputFileError(f"Could not load a tokenizer from {model_dir}: {error}") from error
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, trust_remote_code=True)
    try:
        check_tokenizer_matches_model(tokenizer, model.config)
    except ValueError as error:
        raise EncdecError(f"{model_dir}: {error}") from error
    return model.to(device).eval(), tokenizer


def read_parallel(source_file: str | os.PathLike, reference_file: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Read a source file and its reference file, which must have the same number of lines."""
    return read_aligned_lines(source_file, reference_file, target_what="reference file")


def max_source_length(tokenizer: PreTrainedTokenizerBase, config: Any) -> int:
    """The longest source the model takes: the tokenizer's ``model_max_length``, and the model's positions."""
    max_positions = getattr(config, "max_position_embeddings", None)
    return min(tokenizer.model_max_length, max_positions) if max_positions else tokenizer.model_max_length


def auto_max_new_tokens(source_length: int, config: Any) -> int:
    """Default generation budget when none is given: 2 x source length + 10 tokens, within the model's positions."""
    budget = 2 * source_length + 10
    max_positions = getattr(config, "max_position_embeddings", None)
    return min(budget, max_positions - 1) if max_positions else budget


def effective_length_penalty(model: PreTrainedModel, length_penalty: float | None) -> float:
    """The length penalty beam search uses: the given one, else the model's generation config's, else 1.0."""
    if length_penalty is not None:
        return length_penalty
    configured = model.generation_config.length_penalty
    return 1.0 if configured is None else configured


def translate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sources: list[str],
    num_beams: int = 5,
    batch_size: int = 32,
    max_new_tokens: int | None = None,
    length_penalty: float | None = None,
    show_progress: bool = True,
) -> list[str]:
    """Translate ``sources`` with ``model.generate`` (no sampling) and return the detokenised outputs in order.

    Sentences are batched longest first (less padding, and an out-of-memory error shows at once) and put back in
    their input order. Sources longer than ``max_source_length`` are truncated.

    :param max_new_tokens: ``None`` takes the model's ``generation_config.max_new_tokens`` if set, else
        2 x the longest source of the batch + 10 (see ``auto_max_new_tokens``)
    :param length_penalty: exponent of the beam-score length normalisation; ``None`` keeps the model's
    """
    if num_beams < 1 or batch_size < 1:
        raise EncdecError(f"`num_beams` and `batch_size` must be >= 1, got {num_beams} and {batch_size}.")
    if max_new_tokens is not None and max_new_tokens < 1:
        raise EncdecError(f"`max_new_tokens` must be >= 1 (or None for a budget from the source length), got "
                          f"{max_new_tokens}.")
    if max_new_tokens is None:
        max_new_tokens = model.generation_config.max_new_tokens
    settings: dict[str, Any] = {"num_beams": num_beams, "do_sample": False}
    if num_beams > 1 and length_penalty is not None:  # greedy search ignores it (and would warn)
        settings["length_penalty"] = length_penalty
    limit = max_source_length(tokenizer, model.config)
    truncation = {"truncation": True, "max_length": limit}
    lengths = [len(ids) for ids in tokenizer(sources, verbose=False)["input_ids"]]
    if any(length > limit for length in lengths):
        logger.warning("%d of %d sources are longer than the model's %d source tokens (max_position_embeddings, or the "
                       "tokenizer's model_max_length) and are truncated to fit.",
                       sum(length > limit for length in lengths), len(sources), limit)
    lengths = [min(length, limit) for length in lengths]
    order = sorted(range(len(sources)), key=lambda i: -lengths[i])
    outputs = [""] * len(sources)
    with tqdm(total=len(sources), desc="Translating", unit="sent", disable=not show_progress) as progress:
        for start in range(0, len(order), batch_size):
            indices = order[start:start + batch_size]
            batch = tokenizer([sources[i] for i in indices], padding=True, return_tensors="pt", **truncation)
            input_ids = batch["input_ids"].to(model.device)  # (B, S)
            budget = max_new_tokens or auto_max_new_tokens(input_ids.size(1), model.config)  # validated >= 1 above
            with torch.inference_mode():
                generated = model.generate(  # (B, 1 + T)
                    input_ids=input_ids, attention_mask=batch["attention_mask"].to(model.device),
                    max_new_tokens=budget, **settings,
                )
            for i, text in zip(indices, tokenizer.batch_decode(generated, skip_special_tokens=True), strict=True):
                outputs[i] = text.strip()
            progress.update(len(indices))
    return outputs


def score_translations(hypotheses: list[str], references: list[str]) -> dict[str, Any]:
    """Cased detokenised BLEU and chrF with their signatures, and lowercased BLEU, rounded to 2 decimals as
    sacreBLEU reports them."""
    bleu, chrf = load_metric("bleu"), load_metric("chrf")
    cased = bleu.compute(predictions=hypotheses, references=references)
    lowercased = bleu.compute(predictions=hypotheses, references=references, lowercase=True)
    chrf_result = chrf.compute(predictions=hypotheses, references=references)
    return {
        "bleu": round(cased["score"], 2),
        "bleu_signature": cased["signature"],
        "chrf": round(chrf_result["score"], 2),
        "chrf_signature": chrf_result["signature"],
        "bleu_lowercase": round(lowercased["score"], 2),
        "bleu_lowercase_signature": lowercased["signature"],
    }


def evaluate_model(
    model_dir: str | os.PathLike,
    source_file: str | os.PathLike,
    reference_file: str | os.PathLike,
    num_beams: int = 5,
    batch_size: int = 32,
    max_new_tokens: int | None = None,
    output_file: str | os.PathLike | None = None,
    overwrite: bool = False,
    device: str = "cpu",
    length_penalty: float | None = None,
    show_progress: bool = True,
) -> dict[str, Any]:
    """Translate ``source_file`` with the model folder ``model_dir`` and score the output against
    ``reference_file``; return the scores, their sacreBLEU signatures, the decoding settings and the speed, and
    write them as JSON to ``output_file`` (atomically) when given.

    Prints nothing but a progress bar (on stderr). Input problems raise ``InputFileError``; an existing
    ``output_file`` raises ``OverwriteError`` unless ``overwrite``; both are checked before any translation.

    :param max_new_tokens: ``None``: the model's ``generation_config.max_new_tokens`` if set, else 2 x the longest
        source of each batch + 10 (recorded as null)
    :param length_penalty: ``None`` keeps the model's ``generation_config.length_penalty`` (recorded)
    """
    if output_file is not None:
        output_file = Path(output_file)
        if output_file.is_dir():
            raise OverwriteError(f"The output file {output_file} is a folder; give a file path such as "
                                 f"{output_file / 'results.json'}.")
        if output_file.exists() and not overwrite:
            raise OverwriteError(f"The output file {output_file} already exists; pass --overwrite to replace it "
                                 "or choose another path.")
    sources, references = read_parallel(source_file, reference_file)
    model, tokenizer = load_model_and_tokenizer(model_dir, device)
    start = time.perf_counter()
    hypotheses = translate(model, tokenizer, sources, num_beams=num_beams, batch_size=batch_size,
                           max_new_tokens=max_new_tokens, length_penalty=length_penalty, show_progress=show_progress)
    seconds = time.perf_counter() - start
    results = {
        **score_translations(hypotheses, references),
        "num_sentences": len(sources),
        "num_beams": num_beams,
        "batch_size": batch_size,
        "max_new_tokens": max_new_tokens if max_new_tokens is not None else model.generation_config.max_new_tokens,
        "length_penalty": effective_length_penalty(model, length_penalty),
        "sentences_per_second": round(len(sources) / seconds, 2) if seconds > 0 else None,
        "translation_seconds": round(seconds, 3),
        "device": device,
        "model_dir": str(Path(model_dir).resolve()),
        "source_file": str(Path(source_file).resolve()),
        "reference_file": str(Path(reference_file).resolve()),
    }
    if output_file is not None:
        atomic_write_json(output_file, results)
    return results


__all__ = ["evaluate_model", "load_model_and_tokenizer", "read_parallel", "score_translations",
           "translate"]
