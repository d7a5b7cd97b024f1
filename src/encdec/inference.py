"""Inference: load a model folder once, translate lines in batches. Every command that translates goes through here
(``encdec translate``, ``encdec evaluate``, the attention plot), and so will other engines and a server.

Loading checks the folder first (a missing or corrupt file is named) and the tokenizer against the model. Importing
encdec registered its classes, which take precedence over the code files in the folder; ``trust_remote_code=True``
only spares the question transformers would otherwise ask about those files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, Pipeline, PreTrainedModel, PreTrainedTokenizerBase

from .alignment import default_layer, teacher_forced_attention, to_pharaoh, word_links
from .engines import ENGINES, CTranslate2Engine, TorchEngine
from .ensemble import EnsembleForSeq2SeqLM, check_same_tokenizer
from .errors import EncdecError, InputFileError
from .folders import PIPELINE_TASK, WEIGHTS_NAME, read_json, read_safetensors_shapes, require_model_folder
from .io_utils import batched
from .models.pipeline_seq2seq import Seq2SeqGenerationPipeline
from .progress import quiet_transformers_bars
from .tokenization import check_tokenizer_matches_model


def load_model_and_tokenizer(model_dir: str | os.PathLike, device: str | torch.device = "cpu"
                             ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A model folder's model (eval mode, on ``device``) and tokenizer, checked against each other."""
    model_dir = require_model_folder(model_dir)
    read_json(model_dir / "config.json", "the model config")
    read_safetensors_shapes(model_dir / WEIGHTS_NAME)  # one clear error for missing or corrupt weights
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_dir, trust_remote_code=True)
    except (OSError, ValueError) as error:
        raise InputFileError(f"Could not load a tokenizer from {model_dir}: {error}") from error
    with quiet_transformers_bars():
        model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, trust_remote_code=True)
    try:
        check_tokenizer_matches_model(tokenizer, model.config)
    except ValueError as error:
        raise EncdecError(f"{model_dir}: {error}") from error
    return model.to(device).eval(), tokenizer


def load_ensemble(model_dirs: list[str | os.PathLike], device: str | torch.device = "cpu"
                  ) -> tuple[EnsembleForSeq2SeqLM, PreTrainedTokenizerBase]:
    """The ensemble (``encdec.ensemble``) of the model folders ``model_dirs``, each loaded and checked as by
    ``load_model_and_tokenizer``, and their shared tokenizer; a one-line error names a member whose tokenizer
    differs."""
    loaded = [load_model_and_tokenizer(model_dir, device) for model_dir in model_dirs]
    check_same_tokenizer([tokenizer for _, tokenizer in loaded], [str(model_dir) for model_dir in model_dirs])
    return EnsembleForSeq2SeqLM([model for model, _ in loaded]).eval(), loaded[0][1]


Engine = TorchEngine | CTranslate2Engine


def load_engine(model_dir: str | os.PathLike | Sequence[str | os.PathLike], engine: str = "torch",
                quantize: str | None = None, dtype: str | None = None, device: str = "cpu"
                ) -> tuple[Engine, PreTrainedTokenizerBase]:
    """An engine over ``model_dir`` and its tokenizer: a model folder for ``torch`` (in float32, ``dtype="bfloat16"``
    or ``quantize="int8"``), a folder from ``encdec export --format ctranslate2`` for ``ctranslate2``. Several model
    folders make an ensemble (``load_ensemble``), decoded by the torch engine."""
    model_dirs = [model_dir] if isinstance(model_dir, str | os.PathLike) else list(model_dir)
    if engine not in ENGINES:
        raise EncdecError(f"`engine` must be one of {list(ENGINES)}, got {engine!r}.")
    if not model_dirs:
        raise EncdecError("No model folder given; pass at least one --model.")
    if len(model_dirs) > 1:
        if engine != "torch":
            raise EncdecError(f"An ensemble ({len(model_dirs)} --model folders) decodes with --engine torch only; "
                              f"--engine {engine} takes one model.")
        ensemble, tokenizer = load_ensemble(model_dirs, device)
        return TorchEngine(ensemble, quantize=quantize, dtype=dtype), tokenizer
    if engine == "ctranslate2":
        translator = CTranslate2Engine(model_dirs[0], quantize=quantize, dtype=dtype, device=device)
        return translator, translator.tokenizer
    model, tokenizer = load_model_and_tokenizer(model_dirs[0], device)
    return TorchEngine(model, quantize=quantize, dtype=dtype), tokenizer


def load_pipeline(model_dir: str | os.PathLike, device: int | str | torch.device | None = None
                  ) -> Seq2SeqGenerationPipeline:
    """The encdec ``seq2seq-generation`` pipeline over a saved folder."""
    model, tokenizer = load_model_and_tokenizer(model_dir)
    return Seq2SeqGenerationPipeline(model=model, tokenizer=tokenizer, device=device, task=PIPELINE_TASK)


def max_source_length(tokenizer: PreTrainedTokenizerBase, config: Any) -> int:
    """The longest source the model takes: the tokenizer's ``model_max_length``, and the model's positions."""
    max_positions = getattr(config, "max_position_embeddings", None)
    return min(tokenizer.model_max_length, max_positions) if max_positions else tokenizer.model_max_length


def auto_max_new_tokens(source_length: int, config: Any) -> int:
    """Default generation budget when none is given: 2 x source length + 10 tokens, within the model's positions."""
    budget = 2 * source_length + 10
    max_positions = getattr(config, "max_position_embeddings", None)
    return min(budget, max_positions - 1) if max_positions else budget


def default_beams(model: PreTrainedModel | Engine) -> int:
    """The beam size a model (or engine) decodes with when none is asked: its ``generation_config.num_beams`` (what
    ``encdec train`` saved from the recipe's ``generation.num_beams``), else 1 (greedy)."""
    return model.generation_config.num_beams or 1


def effective_length_penalty(model: PreTrainedModel, length_penalty: float | None) -> float:
    """The length penalty beam search uses: the given one, else the model's generation config's, else 1.0."""
    if length_penalty is not None:
        return length_penalty
    configured = model.generation_config.length_penalty
    return 1.0 if configured is None else configured


def generation_settings(num_beams: int | None, max_new_tokens: int | None, length_penalty: float | None,
                        generate_kwargs: dict[str, Any], default_beams: int = 1) -> dict[str, Any]:
    """Check the decoding options and return the ``generate`` keyword arguments shared by every batch (no sampling
    unless asked; a length penalty only for beam search, where it means something). ``num_beams`` None keeps the
    model's generation config, whose beam size is ``default_beams``."""
    if num_beams is not None and num_beams < 1:
        raise EncdecError(f"`num_beams` must be >= 1, got {num_beams}.")
    if max_new_tokens is not None and max_new_tokens < 1:
        raise EncdecError(f"`max_new_tokens` must be >= 1 (or None for a budget from the source length), got "
                          f"{max_new_tokens}.")
    if "num_return_sequences" in generate_kwargs:
        raise EncdecError("`translate` gives one translation per source; for several, call `translate_n_best` "
                          "with `n_best` instead of `num_return_sequences`.")
    settings = {"do_sample": False, **generate_kwargs}
    if num_beams is not None:
        settings["num_beams"] = num_beams
    beams = num_beams if num_beams is not None else default_beams
    if length_penalty is not None and beams > 1:  # greedy search ignores it (and would warn)
        settings["length_penalty"] = length_penalty
    return settings


def translate(model: PreTrainedModel | Engine, tokenizer: PreTrainedTokenizerBase, sources: list[str],
              num_beams: int | None = None, batch_size: int = 32, max_new_tokens: int | None = None,
              length_penalty: float | None = None, truncate: bool = False, show_progress: bool = False,
              **generate_kwargs: Any) -> list[str]:
    """Translate ``sources`` and return the detokenised outputs in input order.

    ``model`` is a model (its ``generate()``) or an engine from ``load_engine``: every engine gets the same source
    ids and batches. Sentences are batched longest first (less padding, and an out-of-memory error shows at once)
    and put back in their input order.

    :param num_beams: ``None`` keeps the model's generation config
    :param max_new_tokens: ``None`` takes the model's ``generation_config.max_new_tokens`` if set, else
        2 x the longest source of the batch + 10 (see ``auto_max_new_tokens``)
    :param length_penalty: exponent of the beam-score length normalisation; ``None`` keeps the model's
    :param truncate: cut sources to ``max_source_length`` tokens; otherwise an over-long source reaches the model,
        whose error names the limit (learned positions) or which reads it whole
    :param generate_kwargs: more ``generate`` options (``do_sample``, ``top_k``, ...)
    """
    hypotheses = translate_n_best(model, tokenizer, sources, 1, num_beams=num_beams, batch_size=batch_size,
                                  max_new_tokens=max_new_tokens, length_penalty=length_penalty, truncate=truncate,
                                  show_progress=show_progress, **generate_kwargs)
    return [best for best, in hypotheses]


def translate_n_best(model: PreTrainedModel | Engine, tokenizer: PreTrainedTokenizerBase, sources: list[str],
                     n_best: int, num_beams: int | None = None, batch_size: int = 32,
                     max_new_tokens: int | None = None, length_penalty: float | None = None, truncate: bool = False,
                     show_progress: bool = False, **generate_kwargs: Any) -> list[list[str]]:
    """The ``n_best`` best translations of each source, best first (``num_return_sequences`` of ``generate()``,
    ``num_hypotheses`` of CTranslate2); beam search needs ``num_beams >= n_best``. Options as ``translate``'s."""
    _, outputs = translate_n_best_ids(model, tokenizer, sources, n_best, num_beams=num_beams, batch_size=batch_size,
                                      max_new_tokens=max_new_tokens, length_penalty=length_penalty,
                                      truncate=truncate, show_progress=show_progress, **generate_kwargs)
    return [[tokenizer.decode(ids, skip_special_tokens=True).strip() for ids in hypotheses] for hypotheses in outputs]


def output_ids(generated: list[int], eos_token_id: int | None, pad_token_id: int | None) -> list[int]:
    """The tokens of one ``generate()`` output after the start token, to the first ``</s>`` (kept), padding dropped."""
    ids = generated[1:]
    return ids[:ids.index(eos_token_id) + 1] if eos_token_id in ids else [i for i in ids if i != pad_token_id]


def translate_n_best_ids(model: PreTrainedModel | Engine, tokenizer: PreTrainedTokenizerBase, sources: list[str],
                         n_best: int, num_beams: int | None = None, batch_size: int = 32,
                         max_new_tokens: int | None = None, length_penalty: float | None = None,
                         truncate: bool = False, show_progress: bool = False, **generate_kwargs: Any
                         ) -> tuple[list[list[int]], list[list[list[int]]]]:
    """``translate_n_best`` in token ids: each source's ids (as the model read them) and the ids of its ``n_best``
    outputs (``output_ids``: no start token, ``</s>`` kept)."""
    if batch_size < 1:
        raise EncdecError(f"`batch_size` must be >= 1, got {batch_size}.")
    engine = model if isinstance(model, (TorchEngine, CTranslate2Engine)) else TorchEngine(model)
    beams = default_beams(engine) if num_beams is None else num_beams
    settings = generation_settings(num_beams, max_new_tokens, length_penalty, generate_kwargs, default_beams=beams)
    if n_best < 1 or (n_best > beams and not settings["do_sample"]):
        raise EncdecError(f"`n_best` must be between 1 and the beam size ({beams}), got {n_best}; raise "
                          "`num_beams` or sample.")
    if n_best > 1:
        settings["num_return_sequences"] = n_best
    if not sources:
        return [], []
    encoding = {"truncation": True, "max_length": max_source_length(tokenizer, engine.config)} if truncate else {}
    source_ids = tokenizer(sources, verbose=False, **encoding)["input_ids"]
    order = sorted(range(len(sources)), key=lambda i: -len(source_ids[i]))
    outputs: list[list[list[int]]] = [[] for _ in sources]
    eos, pad = engine.config.eos_token_id, engine.config.pad_token_id
    with tqdm(total=len(sources), desc="Translating", unit="sent", disable=not show_progress) as progress:
        for start in range(0, len(order), batch_size):
            indices = order[start:start + batch_size]
            batch = tokenizer([sources[i] for i in indices], padding=True, return_tensors="pt", **encoding)
            budget = (max_new_tokens or engine.generation_config.max_new_tokens
                      or auto_max_new_tokens(batch["input_ids"].size(1), engine.config))
            generated = engine.generate(batch["input_ids"], batch["attention_mask"], budget, settings)
            for k, i in enumerate(indices):  # generate() returns the n_best of a source one after the other
                outputs[i] = [output_ids(ids, eos, pad) for ids in generated[k * n_best:(k + 1) * n_best]]
            progress.update(len(indices))
    return source_ids, outputs


@dataclass
class Hypothesis:
    """One translation with what ``translate_detailed`` was asked for."""

    text: str
    score: float | None = None  # log P(text | source), natural log, the </s> included
    alignment: str | None = None  # Pharaoh word links "i-j ..." (source word i, output word j), see encdec.alignment


def translate_detailed(model: PreTrainedModel | Engine, tokenizer: PreTrainedTokenizerBase, sources: list[str],
                       n_best: int = 1, scores: bool = False, alignments: bool = False,
                       alignment_layer: int | str | None = None, keep_duplicates: bool = False,
                       **options: Any) -> list[list[Hypothesis]]:
    """The ``n_best`` translations of each source, each with its score (``scores``: one teacher-forced pass over that
    pair alone, the same log-probability ``encdec serve`` answers) and its word alignment (``alignments``:
    ``encdec.alignment`` on decoder layer ``alignment_layer``, by default the one the model folder's
    ``alignment.json`` records, else the penultimate). ``options`` are ``translate``'s.

    With ``n_best`` 1 the one hypothesis is ``translate``'s. With more, beam search returns all its beams (sampling:
    ``n_best`` samples), which are ordered by that score, log P(hypothesis | source), best first (beam search chose
    them by its length-normalised score, so the order can differ from the beams'; ties keep the beams' order), after
    dropping each text met before (two token sequences can decode to the same text) unless ``keep_duplicates``; the
    ``n_best`` first are kept. A list is shorter than ``n_best`` when the beams held fewer distinct texts: more beams
    (``num_beams``) give more candidates."""
    engine = model if isinstance(model, (TorchEngine, CTranslate2Engine)) else TorchEngine(model)
    if alignments and not isinstance(engine, TorchEngine):
        raise EncdecError("Alignments come from the model's attention, which the ctranslate2 engine does not return; "
                          "use --engine torch with --alignments.")
    beams = default_beams(engine) if options.get("num_beams") is None else options["num_beams"]
    candidates = beams if 1 < n_best <= beams and not options.get("do_sample") else n_best  # else: refused below
    source_ids, outputs = translate_n_best_ids(engine, tokenizer, sources, candidates, **options)
    layer = alignment_layer if alignment_layer is not None else default_layer(engine.model) if alignments else None
    if n_best == 1:
        return [[_hypothesis(engine, tokenizer, ids, hypothesis, scores, alignments, layer)
                 for hypothesis in hypotheses] for ids, hypotheses in zip(source_ids, outputs, strict=True)]
    return [_n_best_list(engine, tokenizer, ids, hypotheses, n_best, scores, alignments, layer, keep_duplicates)
            for ids, hypotheses in zip(source_ids, outputs, strict=True)]


def _hypothesis(engine: Engine, tokenizer: PreTrainedTokenizerBase, source_ids: list[int], output: list[int],
                scores: bool, alignments: bool, layer: int | str | None) -> Hypothesis:
    """One output with its score and alignment; when both are asked, one teacher-forced pass gives both."""
    text = tokenizer.decode(output, skip_special_tokens=True).strip()
    if not alignments:
        return Hypothesis(text, float(sum(engine.teacher_forced(source_ids, output)[0])) if scores else None)
    log_probs, by_layer = teacher_forced_attention(engine.model, source_ids, output)
    return Hypothesis(text, float(log_probs.sum()) if scores else None,
                      to_pharaoh(word_links(by_layer, tokenizer, source_ids, output, layer)))


def _n_best_list(engine: Engine, tokenizer: PreTrainedTokenizerBase, source_ids: list[int],
                 outputs: list[list[int]], n_best: int, scores: bool, alignments: bool, layer: int | str | None,
                 keep_duplicates: bool) -> list[Hypothesis]:
    """One source's n-best list from its candidate outputs (best beam first): each text once (its first, better
    beam) unless ``keep_duplicates``, ordered by log P(text | source), best first (a stable sort: ties keep the beams'
    order), the ``n_best`` first. Each candidate gets one teacher-forced pass, which with ``alignments`` also gives
    the attention that aligns the kept ones; the score is computed for the order even when ``scores`` is not asked."""
    seen: set[str] = set()
    ranked = []
    for output in outputs:
        text = tokenizer.decode(output, skip_special_tokens=True).strip()
        if text in seen and not keep_duplicates:
            continue
        seen.add(text)
        if alignments:
            log_probs, by_layer = teacher_forced_attention(engine.model, source_ids, output)
            ranked.append((float(log_probs.sum()), text, output, by_layer))
        else:
            ranked.append((float(sum(engine.teacher_forced(source_ids, output)[0])), text, output, None))
    ranked.sort(key=lambda candidate: -candidate[0])
    return [Hypothesis(text, score if scores else None,
                       to_pharaoh(word_links(by_layer, tokenizer, source_ids, output, layer)) if alignments else None)
            for score, text, output, by_layer in ranked[:n_best]]


CHUNK_SIZE = 1000  # lines read, translated and handed on at a time (encdec.corpus streams files in such chunks)


def translate_lines(model_dir_or_pipeline: str | os.PathLike | Sequence[str | os.PathLike] | Pipeline,
                    lines: Iterable[str], batch_size: int = 32, engine: str = "torch", quantize: str | None = None,
                    dtype: str | None = None, chunk_size: int = CHUNK_SIZE, **options: Any) -> list[str]:
    """Translate each line of a text (``encdec translate``); returns one string per line, in order.

    ``lines`` (a list, an open file, any iterable) is read ``chunk_size`` lines at a time, so a large file is never
    held whole; ``iter_translated_lines`` also hands the outputs on chunk by chunk. A blank line gives an empty output
    without running the model, so the output stays aligned with the input. ``model_dir_or_pipeline``: a model folder
    (an exported folder for ``engine="ctranslate2"``), several model folders (an ensemble), or a loaded pipeline
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
    return _skip_blank(lines, lambda todo: translate(model, tokenizer, todo, **options), "")


def translate_lines_detailed(model_dir_or_pipeline: str | os.PathLike | Sequence[str | os.PathLike] | Pipeline,
                             lines: Iterable[str], n_best: int = 1, scores: bool = False, alignments: bool = False,
                             alignment_layer: int | str | None = None, batch_size: int = 32, engine: str = "torch",
                             quantize: str | None = None, dtype: str | None = None, chunk_size: int = CHUNK_SIZE,
                             **options: Any) -> list[list[Hypothesis]]:
    """``translate_lines`` with ``translate_detailed``'s n-best lists, scores and alignments: one list of
    hypotheses per line (a blank line: one empty hypothesis, without score or alignment)."""
    model, tokenizer = open_engine(model_dir_or_pipeline, engine, quantize, dtype)
    return [hypotheses for chunk in batched(lines, chunk_size) for hypotheses in translate_chunk_detailed(
        model, tokenizer, chunk, n_best=n_best, scores=scores, alignments=alignments,
        alignment_layer=alignment_layer, batch_size=batch_size, **options)]


def translate_chunk_detailed(model: PreTrainedModel | Engine, tokenizer: PreTrainedTokenizerBase,
                             lines: Sequence[str], **options: Any) -> list[list[Hypothesis]]:
    """``translate_detailed`` of a list of lines in which a blank line gives one empty hypothesis."""
    return _skip_blank(lines, lambda todo: translate_detailed(model, tokenizer, todo, **options), [Hypothesis("")])


def open_engine(model_dir_or_pipeline: str | os.PathLike | Sequence[str | os.PathLike] | Pipeline,
                engine: str = "torch", quantize: str | None = None, dtype: str | None = None, device: str = "cpu"
                ) -> tuple[Engine, PreTrainedTokenizerBase]:
    """An engine and tokenizer over model folders (``load_engine``) or over a loaded pipeline's model."""
    if isinstance(model_dir_or_pipeline, Pipeline):
        return (TorchEngine(model_dir_or_pipeline.model, quantize=quantize, dtype=dtype),
                model_dir_or_pipeline.tokenizer)
    return load_engine(model_dir_or_pipeline, engine, quantize=quantize, dtype=dtype, device=device)


def _skip_blank(lines: Iterable[str], run, blank: Any) -> list[Any]:
    """``run`` on the non-blank lines (line ends stripped); each blank line gets ``blank``, in place."""
    lines = [line.rstrip("\r\n") for line in lines]
    todo = [i for i, line in enumerate(lines) if line.strip()]
    outputs = [blank] * len(lines)
    for i, result in zip(todo, run([lines[i] for i in todo]), strict=True):
        outputs[i] = result
    return outputs


__all__ = ["CHUNK_SIZE", "Engine", "Hypothesis", "auto_max_new_tokens", "default_beams", "effective_length_penalty",
           "iter_translated_lines", "load_engine", "load_ensemble", "load_model_and_tokenizer", "load_pipeline",
           "max_source_length", "open_engine", "translate", "translate_chunk", "translate_chunk_detailed",
           "translate_detailed", "translate_lines", "translate_lines_detailed", "translate_n_best",
           "translate_n_best_ids"]
