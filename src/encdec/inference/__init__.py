"""Inference: load a model folder (or an exported one, or an ensemble) once as an engine, and the Python API that
translates with it: ``translate``, ``translate_n_best``, ``translate_detailed``, ``translate_lines``... Each resolves
its options and decodes through ``encdec.inference.decoding``, as every command and the server do.

Loading (``encdec.inference.model_loading``) checks the folder first (a missing or corrupt file is named) and the
tokenizer against the model; ``load_engine`` builds the engine a name asks for from its backend (``encdec.backends``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch
from transformers import Pipeline, PreTrainedModel, PreTrainedTokenizerBase

from ..errors import EncdecError
from ..folders import PIPELINE_TASK
from ..io_utils import batched
from ..models.pipeline_seq2seq import Seq2SeqGenerationPipeline
from .decoding import (
    Engine,
    Hypothesis,
    as_engine,
    auto_max_new_tokens,
    decode_lines,
    decode_sources,
    encode,
    max_source_length,
    require_alignments,
    resolve_options,
)
from .engines import TorchEngine, engine_spec, engines_that
from .model_loading import load_ensemble, load_model_and_tokenizer


def load_engine(model_dir: str | os.PathLike | Sequence[str | os.PathLike], engine: str = "torch",
                quantize: str | None = None, dtype: str | None = None, device: str = "cpu"
                ) -> tuple[Engine, PreTrainedTokenizerBase]:
    """An engine over ``model_dir`` and its tokenizer: a model folder for ``torch`` (in float32, ``dtype="bfloat16"``
    or ``quantize="int8"``), for an engine with an export of its own the folder its ``encdec export --format`` wrote.
    Several model folders make an ensemble (``load_ensemble``), decoded by an engine whose backend takes ensembles
    (torch). ``engine`` is any engine of ``encdec.backends``, whose backend gives the class that loads it."""
    model_dirs = [model_dir] if isinstance(model_dir, str | os.PathLike) else list(model_dir)
    spec = engine_spec(engine)
    if not model_dirs:
        raise EncdecError("No model folder given; pass at least one --model.")
    if len(model_dirs) > 1 and not spec.ensembles:
        raise EncdecError(f"An ensemble ({len(model_dirs)} --model folders) decodes with --engine "
                          f"{' or --engine '.join(engines_that('ensembles'))} only; --engine {engine} takes one model.")
    built, tokenizer = spec.engine_class().load(model_dirs, quantize=quantize, dtype=dtype, device=device)
    family = built.config.model_type
    if spec.families is not None and family not in spec.families:
        raise EncdecError(f"The {engine} engine decodes {', '.join(spec.families)} models; {model_dirs[0]} holds a "
                          f"{family} model.")
    return built, tokenizer


def load_pipeline(model_dir: str | os.PathLike, device: int | str | torch.device | None = None
                  ) -> Seq2SeqGenerationPipeline:
    """The encdec ``seq2seq-generation`` pipeline over a saved folder."""
    model, tokenizer = load_model_and_tokenizer(model_dir)
    return Seq2SeqGenerationPipeline(model=model, tokenizer=tokenizer, device=device, task=PIPELINE_TASK)


def translate(model: PreTrainedModel | Engine, tokenizer: PreTrainedTokenizerBase, sources: list[str],
              batch_size: int = 32, truncate: bool = False, show_progress: bool = False,
              **options: Any) -> list[str]:
    """Translate ``sources`` and return the detokenised outputs in input order.

    ``model`` is a model (its ``generate()``) or an engine from ``load_engine``: every engine gets the same source
    ids and batches. Sentences are batched longest first (less padding, and an out-of-memory error shows at once)
    and put back in their input order (``encdec.inference.decoding``, which every command and the server decode with).

    :param options: the decoding options declared in ``encdec.decoding_options.DecodeRequest`` (the beam size, the
        budget, the length penalty, ...; ``None`` or left out: the model's generation config; the budget: else 2 x
        the longest source of the batch + 10, see ``auto_max_new_tokens``), and any other ``generate()`` option
        (sampling and its settings, ...), which ``generate()`` checks
    :param truncate: cut sources to ``max_source_length`` tokens; otherwise an over-long source reaches the model,
        whose error names the limit (learned positions) or which reads it whole
    """
    hypotheses = translate_n_best(model, tokenizer, sources, 1, batch_size=batch_size, truncate=truncate,
                                  show_progress=show_progress, **options)
    return [best for best, in hypotheses]


def translate_n_best(model: PreTrainedModel | Engine, tokenizer: PreTrainedTokenizerBase, sources: list[str],
                     n_best: int, batch_size: int = 32, truncate: bool = False, show_progress: bool = False,
                     **options: Any) -> list[list[str]]:
    """The ``n_best`` best translations of each source, best first, as beam search returns them
    (``num_return_sequences`` of ``generate()``, or an engine's own equivalent); beam search needs as many beams
    (a narrower default beam is widened, ``decoding_options.resolve``). Options as ``translate``'s."""
    return [[hypothesis.text for hypothesis in hypotheses] for hypotheses in _decode(
        model, tokenizer, sources, dict(options, n_best=n_best), batch_size, truncate, show_progress)[1]]


def translate_n_best_ids(model: PreTrainedModel | Engine, tokenizer: PreTrainedTokenizerBase, sources: list[str],
                         n_best: int, batch_size: int = 32, truncate: bool = False, show_progress: bool = False,
                         **options: Any) -> tuple[list[list[int]], list[list[list[int]]]]:
    """``translate_n_best`` in token ids: each source's ids (as the model read them) and the ids of its ``n_best``
    outputs (``output_ids``: no start token, ``</s>`` kept)."""
    source_ids, found = _decode(model, tokenizer, sources, dict(options, n_best=n_best), batch_size, truncate,
                                show_progress)
    return source_ids, [[hypothesis.ids for hypothesis in hypotheses] for hypotheses in found]


def translate_detailed(model: PreTrainedModel | Engine, tokenizer: PreTrainedTokenizerBase, sources: list[str],
                       n_best: int = 1, batch_size: int = 32, truncate: bool = False, show_progress: bool = False,
                       **options: Any) -> list[list[Hypothesis]]:
    """The ``n_best`` translations of each source, each with its score (``scores``: one teacher-forced
    pass over that pair alone, the same log-probability ``encdec serve`` answers) and its word alignment
    (``alignments``: ``encdec.inference.alignment``: by default the decoder layer the model folder's
    ``alignment.json`` records, else the penultimate, averaged over its heads; the options declared in
    ``decoding_options`` choose others). Other ``options`` are ``translate``'s.

    With ``n_best`` 1 the one hypothesis is ``translate``'s. With more, beam search returns all its beams (sampling:
    ``n_best`` samples), which are ordered by that score, log P(hypothesis | source), best first (beam search chose
    them by its length-normalised score, so the order can differ from the beams'; ties keep the beams' order), after
    dropping each text met before (two token sequences can decode to the same text) unless asked to keep them; the
    ``n_best`` first are kept. A list is shorter than ``n_best`` when the beams held fewer distinct texts: more beams
    give more candidates."""
    return _decode(model, tokenizer, sources, dict(options, n_best=n_best, ranked=True), batch_size, truncate,
                   show_progress)[1]


def _decode(model: PreTrainedModel | Engine, tokenizer: PreTrainedTokenizerBase, sources: list[str],
            asked: dict[str, Any], batch_size: int, truncate: bool, show_progress: bool
            ) -> tuple[list[list[int]], list[list[Hypothesis]]]:
    """The sources' ids and hypotheses, decoded with the options ``asked`` (``resolve_options``)."""
    engine = as_engine(model)
    options = resolve_options(engine.generation_config, model_config=engine.config, tokenizer=tokenizer, **asked)
    if options.alignments:
        require_alignments(engine)
    if batch_size < 1:
        raise EncdecError(f"`batch_size` must be >= 1, got {batch_size}.")
    if not sources:
        return [], []
    source_ids = encode(tokenizer, sources, engine.config, truncate, options.source_lang)
    return source_ids, decode_sources(engine, tokenizer, source_ids, options, batch_size, show_progress)


CHUNK_SIZE = 1000  # lines read, translated and handed on at a time (encdec.chunked streams files in such chunks)


def translate_lines(model_dir_or_pipeline: str | os.PathLike | Sequence[str | os.PathLike] | Pipeline,
                    lines: Iterable[str], batch_size: int = 32, engine: str = "torch", quantize: str | None = None,
                    dtype: str | None = None, chunk_size: int = CHUNK_SIZE, **options: Any) -> list[str]:
    """Translate each line of a text (``encdec translate``); returns one string per line, in order.

    ``lines`` (a list, an open file, any iterable) is read ``chunk_size`` lines at a time, so a large file is never
    held whole; ``iter_translated_lines`` also hands the outputs on chunk by chunk. A blank line gives an empty output
    without running the model, so the output stays aligned with the input. ``model_dir_or_pipeline``: a model folder
    (the export of an engine that reads one), several model folders (an ensemble), or a loaded pipeline
    (this package's, or the copy that ``pipeline(model=..., trust_remote_code=True)`` loads), whose model and
    tokenizer are used. ``engine``, ``quantize`` and ``dtype`` are those of ``load_engine``; ``options`` those of
    ``translate``.
    """
    return list(iter_translated_lines(model_dir_or_pipeline, lines, batch_size, engine, quantize, dtype, chunk_size,
                                      **options))


def iter_translated_lines(model_dir_or_pipeline: str | os.PathLike | Sequence[str | os.PathLike] | Pipeline,
                          lines: Iterable[str], batch_size: int = 32, engine: str = "torch",
                          quantize: str | None = None, dtype: str | None = None, chunk_size: int = CHUNK_SIZE,
                          **options: Any) -> Iterator[str]:
    """``translate_lines``, one output at a time, each chunk's as soon as it is translated."""
    model, tokenizer = open_engine(model_dir_or_pipeline, engine, quantize, dtype)
    for chunk in batched(lines, chunk_size):
        yield from translate_chunk(model, tokenizer, chunk, batch_size=batch_size, **options)


def translate_chunk(model: PreTrainedModel | Engine, tokenizer: PreTrainedTokenizerBase, lines: Sequence[str],
                    **options: Any) -> list[str]:
    """``translate`` of a list of lines in which a blank line gives an empty output (line ends are dropped)."""
    return [hypotheses[0].text for hypotheses in translate_chunk_detailed(model, tokenizer, lines, **options)]


def translate_chunk_detailed(model: PreTrainedModel | Engine, tokenizer: PreTrainedTokenizerBase,
                             lines: Sequence[str], batch_size: int = 32, truncate: bool = False,
                             show_progress: bool = False, **options: Any) -> list[list[Hypothesis]]:
    """``translate_detailed`` of a list of lines in which a blank line gives one empty hypothesis."""
    engine = as_engine(model)
    resolved = resolve_options(engine.generation_config, ranked=True, tokenizer=tokenizer, **options)
    return decode_lines(engine, tokenizer, lines, resolved, batch_size, truncate, show_progress)


def open_engine(model_dir_or_pipeline: str | os.PathLike | Sequence[str | os.PathLike] | Pipeline,
                engine: str = "torch", quantize: str | None = None, dtype: str | None = None, device: str = "cpu"
                ) -> tuple[Engine, PreTrainedTokenizerBase]:
    """An engine and tokenizer over model folders (``load_engine``) or over a loaded pipeline's model."""
    if isinstance(model_dir_or_pipeline, Pipeline):
        return (TorchEngine(model_dir_or_pipeline.model, quantize=quantize, dtype=dtype),
                model_dir_or_pipeline.tokenizer)
    return load_engine(model_dir_or_pipeline, engine, quantize=quantize, dtype=dtype, device=device)


__all__ = ["CHUNK_SIZE", "Engine", "Hypothesis", "auto_max_new_tokens",
           "iter_translated_lines", "load_engine", "load_ensemble", "load_model_and_tokenizer", "load_pipeline",
           "max_source_length", "open_engine", "translate", "translate_chunk", "translate_chunk_detailed",
           "translate_detailed", "translate_lines", "translate_n_best", "translate_n_best_ids"]
