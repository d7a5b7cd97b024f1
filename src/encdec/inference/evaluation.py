"""Translate a test set with a saved model folder (``inference.translate``) and score it: cased sacreBLEU, chrF and
lowercased BLEU, each with sacreBLEU's signature, plus the decoding settings and the speed, as one JSON-ready dict.

Backs ``encdec evaluate --model DIR --source-file F --reference-file R``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..chunked import Chunk, Progress, file_identity, open_chunks, paired_chunks, run_chunks
from ..data.directions import direction_name, parse_directions
from ..decoding_options import DECODING, LANGUAGE_OPTIONS, check_offered
from ..errors import EncdecError, InputFileError
from ..folders import refuse_model_overwrite
from ..io_utils import (
    WriterLock,
    atomic_write_json,
    count_lines,
    read_aligned_lines,
    read_lines,
    refuse_existing,
    refuse_overlap,
    require_file,
)
from ..metrics import load_metric
from ..processes import Shard, on_main
from . import CHUNK_SIZE, load_engine, load_model_and_tokenizer, max_source_length
from .alignment import alignment_request, choose_layer, default_layer, encode_pairs, parse_pharaoh, record_layer
from .corpus import open_output
from .decoding import DecodeOptions, align, decode_lines, resolve_options

logger = logging.getLogger(__name__)


def count_over_long(tokenizer, config, sources: Sequence[str]) -> int:
    """How many of ``sources`` exceed the model's source length (they are truncated to fit)."""
    limit = max_source_length(tokenizer, config)
    return sum(len(ids) > limit for ids in tokenizer(list(sources), verbose=False)["input_ids"])


def warn_over_long(over: int, total: int, limit: int) -> None:
    """Log how many sources exceeded the model's source length (they were truncated to fit)."""
    if over:
        logger.warning("%d of %d sources are longer than the model's %d source tokens (max_position_embeddings, or "
                       "the tokenizer's model_max_length) and are truncated to fit.", over, total, limit)


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
                      inputs: Sequence[str | os.PathLike] = (), models: Sequence[str | os.PathLike] = ()
                      ) -> Path | None:
    """Refuse, before any work, an output file that is a folder, one of the ``inputs`` (or inside or around one),
    one of the files of the ``models`` (a new file beside them is fine), or exists without ``overwrite``."""
    if output_file is None:
        return None
    refuse_overlap(output_file, inputs)
    refuse_model_overwrite(output_file, models)
    return refuse_existing(output_file, overwrite, "output file")


def evaluate_model(
    model_dir: str | os.PathLike | Sequence[str | os.PathLike], source_file: str | os.PathLike,
    reference_file: str | os.PathLike, batch_size: int = 32,
    output_file: str | os.PathLike | None = None, overwrite: bool = False, device: str = "cpu",
    show_progress: bool = True, engine: str = "torch", quantize: str | None = None, dtype: str | None = None,
    chunk_size: int = CHUNK_SIZE, **options: Any,
) -> dict[str, Any]:
    """Translate ``source_file`` with the model folder ``model_dir`` and score the output against
    ``reference_file``; return the scores, their sacreBLEU signatures, the decoding settings and the speed, and
    write them as JSON to ``output_file`` (atomically) when given, holding its writer lock for the whole run
    (``output_lock``: a second run into the same file is refused).

    Prints nothing but the progress (on stderr; the source is streamed in chunks, ``encdec.chunked``). Input
    problems raise ``InputFileError``; an existing ``output_file`` raises ``OverwriteError`` unless ``overwrite``; both
    are checked before any translation. ``options``: the decoding options every command takes
    (those ``encdec.decoding_options.DecodeRequest`` offers every front end: the beam size, the budget, ...); left
    out or ``None``, the model's generation config (the budget: else 2 x the longest source of a batch + 10); all
    recorded as resolved (``DecodeOptions.describe``).
    :param engine, quantize, dtype: those of ``inference.load_engine`` (recorded); ``model_dir`` is an exported
        folder for an engine that reads one, or several model folders for an ensemble (``encdec.inference.ensemble``)
    """
    models = [model_dir] if isinstance(model_dir, str | os.PathLike) else list(model_dir)
    check_offered(options, DECODING, "evaluate_model")
    output_file = check_output_file(output_file, overwrite, [source_file, reference_file], models)
    references = read_lines(reference_file, "reference file")
    check_line_counts(source_file, references, reference_file)
    shard = Shard()
    with output_lock(shard, output_file):
        model, tokenizer = load_engine(model_dir, engine, quantize=quantize, dtype=dtype,
                                       device=shard.device if device == "cpu" else device)
        resolved = resolve_options(model.generation_config, tokenizer=tokenizer, **options)
        start = time.perf_counter()
        hypotheses = translate_test_set(model, tokenizer, source_file, resolved, batch_size, chunk_size,
                                        show_progress, shard)
        seconds = time.perf_counter() - start
        if not shard.is_main:  # several processes: the main one scores and writes
            return {}
        results = {
            **score_translations(hypotheses, references),
            "num_sentences": len(hypotheses),
            **resolved.describe(), "batch_size": batch_size,
            "sentences_per_second": round(len(hypotheses) / seconds, 2) if seconds > 0 else None,
            "translation_seconds": round(seconds, 3),
            "device": device, "engine": engine, "precision": model.precision,
            **input_paths(models, source_file, reference_file),
        }
        if output_file is not None:
            atomic_write_json(output_file, results)
        return results


def test_directions(test_dir: str | os.PathLike, split: str = "test") -> dict[tuple[str, str], tuple[Path, Path]]:
    """The directions of a folder ``encdec data`` wrote for a multilingual model: each ``SPLIT.SRC-TGT.SRC`` beside
    its ``SPLIT.SRC-TGT.TGT`` (fairseq's naming), as (source, target) -> (source file, reference file)."""
    found = {}
    for path in sorted(Path(test_dir).glob(f"{split}.*-*.*")):
        pair, source = path.name[len(split) + 1:].rsplit(".", 1)
        target = pair[len(source) + 1:] if pair.startswith(f"{source}-") else ""
        reference = path.with_name(f"{split}.{pair}.{target}")
        if target and reference.is_file():
            found[(source, target)] = (path, reference)
    return found


def evaluate_directions(model_dir: str | os.PathLike | Sequence[str | os.PathLike], test_dir: str | os.PathLike,
                        directions: str | Sequence[str] | None = None, split: str = "test",
                        output_file: str | os.PathLike | None = None, overwrite: bool = False,
                        **kwargs: Any) -> dict[str, Any]:
    """``encdec evaluate --test-dir DIR``: a multilingual model scored in each direction of ``test_dir``
    (``test_directions``; ``directions``: those named, ``"de-en,fr-en"``, else every one found), each as
    ``evaluate_model`` scores one, with its source and target language; the results per direction (``directions``)
    and their mean BLEU and chrF (``average``), written as JSON to ``output_file`` when given. ``kwargs``:
    ``evaluate_model``'s."""
    found = test_directions(test_dir, split)
    if not found:
        raise InputFileError(f"{test_dir} holds no {split}.SRC-TGT.SRC and {split}.SRC-TGT.TGT files (as `encdec "
                             "data` writes for several languages); give --source-file and --reference-file instead.")
    chosen = list(found) if directions is None else parse_directions(
        directions, list(dict.fromkeys(code for pair in found for code in pair)), where="--directions")
    for source, target in chosen:
        if (source, target) not in found:
            raise InputFileError(f"{test_dir} has no {split}.{source}-{target}.{source} and "
                                 f"{split}.{source}-{target}.{target}; its directions are "
                                 f"{', '.join(map(direction_name, found))}.")
    asked = [name for name in LANGUAGE_OPTIONS if kwargs.get(name) is not None]
    if asked:
        raise EncdecError(f"The directions of {test_dir} give each test its languages; drop {asked[0]}.")
    models = [model_dir] if isinstance(model_dir, str | os.PathLike) else list(model_dir)
    output_file = check_output_file(output_file, overwrite, [path for pair in chosen for path in found[pair]], models)
    results = {direction_name(pair): evaluate_model(model_dir, *found[pair], source_lang=pair[0],
                                                    target_lang=pair[1], **kwargs) for pair in chosen}
    if not all(results.values()):  # several processes: the main one scores and writes
        return {}
    average = {metric: round(sum(scores[metric] for scores in results.values()) / len(results), 2)
               for metric in ("bleu", "chrf")}
    summary = {"directions": results, "average": average}
    if output_file is not None:
        atomic_write_json(output_file, summary)
    return summary


@contextmanager
def output_lock(shard: Shard, output_file: Path | None) -> Iterator[None]:
    """Hold the writer lock of ``output_file`` (``OUTPUT.lock``, as ``encdec translate`` holds its output's) for the
    block, in the main process, which writes it: a second run into the same file is refused, in one line, before
    it loads a model. The lock file goes at the end of the block, however it ends."""
    lock = on_main(shard, lambda: None if output_file is None else WriterLock(
        output_file.with_name(output_file.name + ".lock"), str(output_file)).acquire())
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


def input_paths(models: Sequence[str | os.PathLike], source_file: str | os.PathLike,
                reference_file: str | os.PathLike) -> dict[str, Any]:
    """The absolute paths an evaluation read, as its results record them (a list of model folders for an ensemble)."""
    return {
        "model_dir": str(Path(models[0]).resolve()) if len(models) == 1 else [str(Path(m).resolve()) for m in models],
        "source_file": str(Path(source_file).resolve()), "reference_file": str(Path(reference_file).resolve()),
    }


def translate_test_set(model: Any, tokenizer: Any, source_file: str | os.PathLike, options: DecodeOptions,
                       batch_size: int, chunk_size: int, show_progress: bool, shard: Shard) -> list[str]:
    """The translations of a test set, streamed in chunks with progress (``encdec.chunked``, shared out over
    the processes of a launch); the main process gets them all, in order. Over-long sources are cut, and counted."""
    over, chunks_out = [0], []

    def work(chunk: Chunk) -> list[str]:
        over[0] += count_over_long(tokenizer, model.config, chunk.lines)
        return [hypotheses[0].text for hypotheses in decode_lines(model, tokenizer, chunk.lines, options, batch_size,
                                                                  truncate=True)]

    chunks, total = open_chunks(source_file, chunk_size)
    progress = Progress("encdec evaluate", total, quiet=not show_progress or not shard.is_main)
    run_chunks(chunks, work, None, progress, shard, collect=chunks_out)
    warn_over_long(sum(shard.gather(over[0])), total, max_source_length(tokenizer, model.config))
    return [hypothesis for chunk in chunks_out for hypothesis in chunk]


def check_line_counts(source_file: str | os.PathLike, targets: list[str], target_file: str | os.PathLike,
                      target_what: str = "reference file") -> int:
    """The source file's line count, once it is a readable, non-empty file as long as ``targets``."""
    source_file = require_file(source_file, "source file")
    count = count_lines(source_file)
    if not count:
        raise InputFileError(f"The source file {source_file} is empty.")
    if count != len(targets):
        raise InputFileError(
            f"The parallel files are not aligned: the source file {source_file} has {count} lines but the "
            f"{target_what} {target_file} has {len(targets)}. Line i of one must be the translation of line i of "
            "the other.")
    return count


def align_file(model_dir: str | os.PathLike, source_file: str | os.PathLike, target_file: str | os.PathLike,
               layer: int | str | None = None, output_file: str | os.PathLike | None = None, resume: bool = False,
               overwrite: bool = False, quiet: bool = True, chunk_size: int = CHUNK_SIZE, stdout: Any = None,
               head: int | None = None, source_lang: str | None = None, target_lang: str | None = None
               ) -> str | None:
    """``encdec align``: the Pharaoh word alignment of each (source, target) line pair, one line per pair, from the
    model's teacher-forced attention on decoder layer ``layer`` (default: ``alignment.default_layer``), averaged over
    its heads unless ``head`` names one (the alignment ``encdec translate --alignments`` gives); a multilingual
    model's pairs are read in ``source_lang`` and ``target_lang`` (``alignment.encode_pairs``). Streamed in
    chunks as ``encdec translate`` is (``encdec.chunked``): into ``output_file`` (resumable), to ``stdout``,
    or, with neither, returned as one string."""
    source_file = require_file(source_file, "source file")
    check_line_counts(source_file, read_lines(target_file, "target file"), target_file, "target file")
    shard, collected = Shard(), []
    asked = {"layer": layer, "chunk_size": chunk_size, **({"head": head} if head is not None else {}),
             **({"source_lang": source_lang, "target_lang": target_lang} if source_lang or target_lang else {})}
    record = {"options": asked, "target": file_identity(target_file)}
    output = None
    if output_file is not None or stdout is not None:
        output = on_main(shard, lambda: open_output(None if output_file is None else str(output_file),
                                                    str(source_file), [str(model_dir)], record, resume, overwrite,
                                                    stdout))
    skip = shard.broadcast(output.done_lines if output is not None else 0)
    model, tokenizer = load_model_and_tokenizer(model_dir, shard.device)
    options = resolve_options(model.generation_config, model_config=model.config,
                              **alignment_request(default_layer(model) if layer is None else layer, head))

    def work(chunk: Chunk) -> str:
        sources, targets = zip(*chunk.lines, strict=True)
        pairs = encode_pairs(tokenizer, list(sources), list(targets), source_lang, target_lang)
        return "".join((align(model, tokenizer, source_ids, target_ids, options).alignment if source.strip() else "")
                       + "\n" for (source_ids, target_ids), source in zip(pairs, sources, strict=True))

    chunks = paired_chunks(source_file, target_file, chunk_size, skip)
    progress = Progress("encdec align", count_lines(source_file), initial=skip, quiet=quiet or not shard.is_main)
    run_chunks(chunks, work, output, progress, shard, collect=None if output is not None else collected)
    return None if output is not None else "".join(collected)


def choose_layer_on_files(model_dir: str | os.PathLike, source_file: str | os.PathLike,
                          target_file: str | os.PathLike, gold_file: str | os.PathLike,
                          record: bool = False, source_lang: str | None = None, target_lang: str | None = None
                          ) -> dict[str, Any]:
    """``encdec align --gold-file``: the alignment error rate of every decoder layer (and their mean) against gold
    Pharaoh alignments, the best layer, and with ``record`` that layer written to ``MODEL/alignment.json``; a
    multilingual model's pairs are read in ``source_lang`` and ``target_lang``."""
    sources, targets = read_aligned_lines(source_file, target_file)
    gold_lines = read_lines(gold_file, "gold alignment file")
    if len(gold_lines) != len(sources):
        raise InputFileError(f"The gold alignment file {gold_file} has {len(gold_lines)} lines but the source file "
                             f"{source_file} has {len(sources)}; give one alignment line per sentence pair.")
    gold = [parse_pharaoh(line, f"{gold_file}, line {i + 1}") for i, line in enumerate(gold_lines)]
    model, tokenizer = load_model_and_tokenizer(model_dir)
    best, rates = choose_layer(model, tokenizer, sources, targets, gold, source_lang=source_lang,
                               target_lang=target_lang)
    report: dict[str, Any] = {"layer": best, "aer": rates, "pairs": len(sources)}
    if record:
        report["recorded"] = str(record_layer(model_dir, best, rates, f"{source_file}, {target_file}, {gold_file}"))
    return report


__all__ = ["align_file", "choose_layer_on_files", "evaluate_directions", "evaluate_model", "score_translations",
           "test_directions"]
