"""Translate a test set with a saved model folder (``inference.translate``) and score it: cased sacreBLEU, chrF and
lowercased BLEU, each with sacreBLEU's signature, plus the decoding settings and the speed, as one JSON-ready dict.

Backs ``encdec evaluate --model DIR --source-file F --reference-file R``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .alignment import align_pair, choose_layer, default_layer, encode_pairs, parse_pharaoh, record_layer, to_pharaoh
from .errors import InputFileError, OverwriteError
from .inference import (
    default_beams,
    effective_length_penalty,
    load_engine,
    load_model_and_tokenizer,
    max_source_length,
    translate,
)
from .io_utils import atomic_write_json, read_aligned_lines, read_lines, refuse_overlap
from .metrics import load_metric

logger = logging.getLogger(__name__)


def read_parallel(source_file: str | os.PathLike, reference_file: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Read a source file and its reference file, which must have the same number of lines."""
    return read_aligned_lines(source_file, reference_file, target_what="reference file")


def warn_over_long(tokenizer, config, sources: list[str]) -> None:
    """Log how many sources exceed the model's source length (they are truncated to fit)."""
    limit = max_source_length(tokenizer, config)
    over = sum(len(ids) > limit for ids in tokenizer(sources, verbose=False)["input_ids"])
    if over:
        logger.warning("%d of %d sources are longer than the model's %d source tokens (max_position_embeddings, or "
                       "the tokenizer's model_max_length) and are truncated to fit.", over, len(sources), limit)


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


def check_output_file(output_file: str | os.PathLike | None, overwrite: bool,
                      inputs: Sequence[str | os.PathLike] = ()) -> Path | None:
    """Refuse, before any work, an output file that is a folder, one of the ``inputs`` (or inside or around one),
    or exists without ``overwrite``."""
    if output_file is None:
        return None
    refuse_overlap(output_file, inputs)
    output_file = Path(output_file)
    if output_file.is_dir():
        raise OverwriteError(f"The output file {output_file} is a folder; give a file path such as "
                             f"{output_file / 'results.json'}.")
    if output_file.exists() and not overwrite:
        raise OverwriteError(f"The output file {output_file} already exists; pass --overwrite to replace it "
                             "or choose another path.")
    return output_file


def evaluate_model(
    model_dir: str | os.PathLike | Sequence[str | os.PathLike], source_file: str | os.PathLike,
    reference_file: str | os.PathLike,
    num_beams: int | None = None, batch_size: int = 32, max_new_tokens: int | None = None,
    output_file: str | os.PathLike | None = None, overwrite: bool = False, device: str = "cpu",
    length_penalty: float | None = None, show_progress: bool = True,
    engine: str = "torch", quantize: str | None = None, dtype: str | None = None,
) -> dict[str, Any]:
    """Translate ``source_file`` with the model folder ``model_dir`` and score the output against
    ``reference_file``; return the scores, their sacreBLEU signatures, the decoding settings and the speed, and
    write them as JSON to ``output_file`` (atomically) when given.

    Prints nothing but a progress bar (on stderr). Input problems raise ``InputFileError``; an existing
    ``output_file`` raises ``OverwriteError`` unless ``overwrite``; both are checked before any translation.

    :param max_new_tokens: ``None``: the model's ``generation_config.max_new_tokens`` if set, else 2 x the longest
        source of each batch + 10 (recorded as null)
    :param num_beams: ``None`` keeps the model's ``generation_config.num_beams`` (recorded)
    :param length_penalty: ``None`` keeps the model's ``generation_config.length_penalty`` (recorded)
    :param engine, quantize, dtype: those of ``inference.load_engine`` (recorded); ``model_dir`` is an exported
        folder for ``engine="ctranslate2"``, or several model folders for an ensemble (``encdec.ensemble``)
    """
    models = [model_dir] if isinstance(model_dir, str | os.PathLike) else list(model_dir)
    output_file = check_output_file(output_file, overwrite, [*models, source_file, reference_file])
    sources, references = read_parallel(source_file, reference_file)
    model, tokenizer = load_engine(model_dir, engine, quantize=quantize, dtype=dtype, device=device)
    warn_over_long(tokenizer, model.config, sources)
    start = time.perf_counter()
    hypotheses = translate(model, tokenizer, sources, num_beams=num_beams, batch_size=batch_size,
                           max_new_tokens=max_new_tokens, length_penalty=length_penalty, truncate=True,
                           show_progress=show_progress)
    seconds = time.perf_counter() - start
    results = {
        **score_translations(hypotheses, references),
        "num_sentences": len(sources),
        "num_beams": default_beams(model) if num_beams is None else num_beams,
        "batch_size": batch_size,
        "max_new_tokens": max_new_tokens if max_new_tokens is not None else model.generation_config.max_new_tokens,
        "length_penalty": effective_length_penalty(model, length_penalty),
        "sentences_per_second": round(len(sources) / seconds, 2) if seconds > 0 else None,
        "translation_seconds": round(seconds, 3),
        "device": device, "engine": engine, "precision": quantize or dtype or "float32",
        "model_dir": (str(Path(model_dir).resolve()) if isinstance(model_dir, str | os.PathLike)
                      else [str(Path(path).resolve()) for path in model_dir]),
        **{name: str(Path(path).resolve()) for name, path in (("source_file", source_file),
                                                              ("reference_file", reference_file))},
    }
    if output_file is not None:
        atomic_write_json(output_file, results)
    return results


def align_file(model_dir: str | os.PathLike, source_file: str | os.PathLike, target_file: str | os.PathLike,
               layer: int | str | None = None) -> str:
    """``encdec align``: the Pharaoh word alignment of each (source, target) line pair, one line per pair, from the
    model's teacher-forced attention on decoder layer ``layer`` (default: ``alignment.default_layer``)."""
    sources, targets = read_aligned_lines(source_file, target_file)
    model, tokenizer = load_model_and_tokenizer(model_dir)
    layer = default_layer(model) if layer is None else layer
    lines = [to_pharaoh(align_pair(model, tokenizer, source_ids, target_ids, layer)) if source.strip() else ""
             for (source_ids, target_ids), source in zip(encode_pairs(tokenizer, sources, targets), sources,
                                                         strict=True)]
    return "".join(line + "\n" for line in lines)


def choose_layer_on_files(model_dir: str | os.PathLike, source_file: str | os.PathLike,
                          target_file: str | os.PathLike, gold_file: str | os.PathLike,
                          record: bool = False) -> dict[str, Any]:
    """``encdec align --gold-file``: the alignment error rate of every decoder layer (and their mean) against gold
    Pharaoh alignments, the best layer, and with ``record`` that layer written to ``MODEL/alignment.json``."""
    sources, targets = read_aligned_lines(source_file, target_file)
    gold_lines = read_lines(gold_file, "gold alignment file")
    if len(gold_lines) != len(sources):
        raise InputFileError(f"The gold alignment file {gold_file} has {len(gold_lines)} lines but the source file "
                             f"{source_file} has {len(sources)}; give one alignment line per sentence pair.")
    gold = [parse_pharaoh(line, f"{gold_file}, line {i + 1}") for i, line in enumerate(gold_lines)]
    model, tokenizer = load_model_and_tokenizer(model_dir)
    best, rates = choose_layer(model, tokenizer, sources, targets, gold)
    report: dict[str, Any] = {"layer": best, "aer": rates, "pairs": len(sources)}
    if record:
        report["recorded"] = str(record_layer(model_dir, best, rates, f"{source_file}, {target_file}, {gold_file}"))
    return report


__all__ = ["align_file", "choose_layer_on_files", "evaluate_model", "read_parallel", "score_translations"]
