"""Decoding, once for every front end: the options resolved and checked in one place, and one function that decodes
a batch of sources into their hypotheses.

``encdec translate`` (and corpus translation, ``distill``'s teacher and ``evaluate``), ``encdec serve``'s native API
and its LibreTranslate API each turn what they were asked (flags, JSON fields, a recipe) into a ``DecodeOptions`` with
``resolve_options``, as ``generate()`` resolves its ``GenerationConfig`` once: the model's generation config fills
what was not asked, and every check (beam size, n-best within the beam, length penalty, token budget, a server's
limits) is made there, raising an ``OptionError`` that names the option. ``decode_batch`` then runs an engine
(``encdec.inference.engines``) over a batch of source ids with those options and returns, per source, its hypotheses:

- their ids and text, the ``</s>`` kept in the ids;
- with ``scores``, log P(hypothesis | source), from one teacher-forced pass over that pair alone (not the padded
  batch), so a text scores the same in any batch, on any engine;
- with ``alignments``, the attention of that pass (decoder layers x source x target, averaged over heads) and the
  Pharaoh word links of one layer (``encdec.inference.alignment``);
- an n-best list: the beams as beam search returns them, or (``ranked``, what ``encdec translate --n-best`` prints)
  all the beams ordered by log P, each text once unless ``keep_duplicates``, the ``n_best`` first.

Each source has its own generation budget (``max_new_tokens``, else the model's, else from its source length). Greedy
search decides each token from the tokens before it only, so one greedy batch runs to the largest budget and each
output is cut to its own; beam search ends differently at another budget, so sources of other budgets are decoded
in separate ``generate`` calls.

A new decoding option is a field of ``DecodeOptions``, its default and check in ``resolve_options`` (and, if
``generate()`` takes it, in ``DecodeOptions.settings``), and the front ends that offer it: a flag in
``encdec_cli/parser.py``, a field in ``server.request_schema``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig

from ..errors import EncdecError, OptionError
from .alignment import (
    alignment_weights,
    check_alignment_choice,
    default_layer,
    teacher_forced_attention,
    to_pharaoh,
    word_links,
)
from .engines import Engine, as_engine, engines_that

# length_penalty: beam search divides a hypothesis' log-probability by length ** length_penalty (HF generate). Values
# in use lie within about -2..2; +-10 already makes the length all that counts, and stays finite for any length a
# server accepts (1024 ** 10 ~ 1e30), where 1e308 overflows.
LENGTH_PENALTY_RANGE = (-10.0, 10.0)


@dataclass(frozen=True)
class DecodeLimits:
    """What a server lets a request ask (``serve.ServeLimits.decoding``); None: no limit."""

    max_beams: int | None = None
    max_new_tokens: int | None = None
    length_penalty: tuple[float, float] | None = LENGTH_PENALTY_RANGE


@dataclass(frozen=True)
class DecodeOptions:
    """How to decode, resolved against a model's generation config (``resolve_options``); equal requests give equal
    options, whichever front end they came through."""

    num_beams: int = 1
    length_penalty: float | None = None  # None for one beam (greedy search or sampling), which has no use for it
    n_best: int = 1  # hypotheses per source
    max_new_tokens: int | None = None  # None: from each source's length (``auto_max_new_tokens``)
    do_sample: bool = False
    generate_kwargs: tuple[tuple[str, Any], ...] = ()  # more generate() options (top_k, temperature, ...), sorted
    ranked: bool = False  # n-best: all beams ordered by log P, each text once unless keep_duplicates (n_best > 1)
    keep_duplicates: bool = False  # (ranked only)
    scores: bool = False  # each hypothesis' log P(hypothesis | source)
    alignments: bool = False  # each hypothesis' attention and word links (torch engine)
    alignment_layer: int | str | None = None  # the alignment's layer; None: the model's (``alignment.default_layer``)
    alignment_head: int | None = None  # the alignment's head; None: the mean of the layer's heads

    @property
    def greedy(self) -> bool:
        return self.num_beams == 1 and not self.do_sample

    @property
    def candidates(self) -> int:
        """How many outputs ``generate()`` returns per source: every beam for a ranked n-best list, else ``n_best``."""
        return self.num_beams if self.ranked and not self.do_sample else self.n_best

    @property
    def search(self) -> tuple:
        """What ``generate()`` runs with: sources whose options share it (and, beyond greedy search, their budget)
        decode in one batch."""
        return self.num_beams, self.length_penalty, self.candidates, self.do_sample, self.generate_kwargs

    def settings(self) -> dict[str, Any]:
        """The ``generate()`` keyword arguments (engines take them: ``encdec.inference.engines``), the budget apart."""
        settings = {"do_sample": self.do_sample, **dict(self.generate_kwargs), "num_beams": self.num_beams}
        if self.length_penalty is not None:
            settings["length_penalty"] = self.length_penalty
        if self.candidates > 1:
            settings["num_return_sequences"] = self.candidates
        return settings

    def budget(self, source_length: int, config: Any, limit: int | None = None) -> int:
        """The most tokens to generate for a source of ``source_length`` tokens (``</s>`` included), within
        ``limit``."""
        budget = self.max_new_tokens or auto_max_new_tokens(source_length, config)
        return budget if limit is None else min(budget, limit)


def resolve_options(generation_config: Any = None, *, num_beams: int | None = None, n_best: int | None = None,
                    length_penalty: float | None = None, max_new_tokens: int | None = None, ranked: bool = False,
                    keep_duplicates: bool = False, scores: bool = False, alignments: bool = False,
                    alignment_layer: int | str | None = None, alignment_head: int | None = None,
                    limits: DecodeLimits | None = None, model_config: Any = None,
                    **generate_kwargs: Any) -> DecodeOptions:
    """What was asked, the model's ``generation_config`` filling the rest (``num_beams``, ``length_penalty``,
    ``max_new_tokens``; None asks nothing), checked once: an ``OptionError`` names the option at fault.

    ``limits`` (a server's) bound the beam size (the model's default included) and the budget asked, and the length
    penalty to ``LENGTH_PENALTY_RANGE``. ``n_best`` may exceed the beam size only when sampling (``do_sample``).
    ``generate_kwargs``: more ``generate()`` options (``do_sample``, ``top_k``, ...). With ``model_config``, the
    alignment's layer and head are checked against the model's (``alignment.check_alignment_choice``)."""
    default_beams = getattr(generation_config, "num_beams", None) or 1
    configured_penalty = getattr(generation_config, "length_penalty", None)
    do_sample = bool(generate_kwargs.pop("do_sample", False))
    if "num_return_sequences" in generate_kwargs:
        raise OptionError("num_return_sequences", "is not an option: `translate` gives one translation per source; "
                                                  "for several, call `translate_n_best` with {n_best}.")
    beams = default_beams if num_beams is None else num_beams
    check_beams_and_budget(beams, max_new_tokens, limits)
    if length_penalty is not None:
        low, high = limits.length_penalty if limits is not None and limits.length_penalty else (-math.inf, math.inf)
        if not (math.isfinite(length_penalty) and low <= length_penalty <= high):
            within = f" from {low:g} to {high:g}" if math.isfinite(low) else ""
            raise OptionError("length_penalty", f"must be a finite number{within}, got {length_penalty}.")
    n_best = 1 if n_best is None else n_best
    if n_best < 1 or (n_best > beams and not do_sample):
        raise OptionError("n_best", f"must be between 1 and the beam size ({beams}), got {n_best}; raise "
                                    "{num_beams}.")
    penalty = None if beams == 1 else (length_penalty if length_penalty is not None else
                                       1.0 if configured_penalty is None else configured_penalty)
    ranked = ranked and n_best > 1
    if alignments and model_config is not None:
        check_alignment_choice(model_config, alignment_layer, alignment_head)
    return DecodeOptions(
        num_beams=beams, length_penalty=penalty, n_best=n_best,
        max_new_tokens=max_new_tokens if max_new_tokens is not None else getattr(generation_config, "max_new_tokens",
                                                                                 None),
        do_sample=do_sample, generate_kwargs=tuple(sorted(generate_kwargs.items())), ranked=ranked,
        keep_duplicates=keep_duplicates and ranked, scores=scores, alignments=alignments,
        alignment_layer=alignment_layer if alignments else None, alignment_head=alignment_head if alignments else None)


def check_beams_and_budget(beams: int, max_new_tokens: int | None, limits: DecodeLimits | None) -> None:
    """The beam size and the budget asked, within ``limits`` (a server's) if any."""
    if limits is not None and limits.max_beams is not None:
        if not 1 <= beams <= limits.max_beams:
            raise OptionError("num_beams", f"must be between 1 and {limits.max_beams}, got {beams}.")
    elif beams < 1:
        raise OptionError("num_beams", f"must be >= 1, got {beams}.")
    if max_new_tokens is not None:
        if limits is not None and limits.max_new_tokens is not None:
            if not 1 <= max_new_tokens <= limits.max_new_tokens:
                raise OptionError("max_new_tokens", f"must be between 1 and {limits.max_new_tokens}, got "
                                                    f"{max_new_tokens}.")
        elif max_new_tokens < 1:
            raise OptionError("max_new_tokens", f"must be >= 1 (or None for a budget from the source length), got "
                                                f"{max_new_tokens}.")


def model_defaults(model_dir: str | os.PathLike) -> DecodeOptions:
    """What a model folder (or an exported one) decodes with when nothing is asked: its ``generation_config.json``,
    resolved. An unreadable folder raises ``OSError``."""
    return resolve_options(GenerationConfig.from_pretrained(model_dir))


def auto_max_new_tokens(source_length: int, config: Any) -> int:
    """Default generation budget when none is given: 2 x source length + 10 tokens, within the model's positions."""
    budget = 2 * source_length + 10
    max_positions = getattr(config, "max_position_embeddings", None)
    return min(budget, max_positions - 1) if max_positions else budget


def max_source_length(tokenizer: Any, config: Any) -> int:
    """The longest source the model takes: the tokenizer's ``model_max_length``, and the model's positions."""
    max_positions = getattr(config, "max_position_embeddings", None)
    return min(tokenizer.model_max_length, max_positions) if max_positions else tokenizer.model_max_length


@dataclass
class Hypothesis:
    """One translation with what its options asked for."""

    text: str
    score: float | None = None  # log P(text | source), natural log, the </s> included
    alignment: str | None = None  # Pharaoh word links "i-j ..." (source word i, output word j), see inference.alignment
    ids: list[int] = field(default_factory=list, compare=False, repr=False)  # the output ids, </s> kept
    # with alignments: the alignment weights (S, T) (``alignment.alignment_weights``)
    attention: torch.Tensor | None = field(default=None, compare=False, repr=False)


def require_alignments(engine: Engine) -> None:
    """Alignments read the model's attention: a one-line error, naming the engines that return it, for an engine
    whose registry entry says it does not."""
    if not engine.spec.alignments:
        raise EncdecError(f"Alignments come from the model's attention, which the {engine.name} engine does not "
                          f"return; use --engine {' or --engine '.join(engines_that('alignments'))} with --alignments.")


def output_ids(generated: list[int], eos_token_id: int | None, pad_token_id: int | None) -> list[int]:
    """The tokens of one ``generate()`` output after the start token, to the first ``</s>`` (kept), padding dropped."""
    ids = generated[1:]
    return ids[:ids.index(eos_token_id) + 1] if eos_token_id in ids else [i for i in ids if i != pad_token_id]


def decode_batch(engine: Any, tokenizer: Any, source_ids: Sequence[Sequence[int]],
                 options: DecodeOptions | Sequence[DecodeOptions], budgets: Sequence[int] | None = None
                 ) -> list[list[Hypothesis]]:
    """Each source's hypotheses (see the module docstring), best first.

    :param source_ids: the sources' ids, as the model reads them (``</s>`` included)
    :param options: one for every source, or one each; they must share their ``search`` (what ``generate()`` runs
        with), and may differ in what each source wants back (``n_best`` within the candidates, scores, alignments)
    :param budgets: each source's budget; default: one from the longest source (``DecodeOptions.budget``)
    """
    engine = as_engine(engine)
    each = [options] * len(source_ids) if isinstance(options, DecodeOptions) else list(options)
    if not source_ids:
        return []
    search = each[0]
    if any(option.search != search.search for option in each):
        raise ValueError("decode_batch decodes one search (beams, length penalty, candidates, sampling) at a time.")
    if any(option.alignments for option in each):
        require_alignments(engine)
    if budgets is None:
        budgets = [search.budget(max(len(ids) for ids in source_ids), engine.config)] * len(source_ids)
    groups: dict[int | None, list[int]] = {}  # budget (None: greedy, each cut to its own) -> rows
    for row, budget in enumerate(budgets):
        groups.setdefault(None if search.greedy else budget, []).append(row)
    n, eos, pad = search.candidates, engine.config.eos_token_id, engine.config.pad_token_id
    outputs: list[list[list[int]]] = [[] for _ in source_ids]
    for rows in groups.values():
        input_ids, attention_mask = padded([source_ids[row] for row in rows], tokenizer.pad_token_id)
        generated = engine.generate(input_ids, attention_mask, max(budgets[row] for row in rows), search.settings())
        for k, row in enumerate(rows):  # generate() returns the outputs of a source one after the other
            outputs[row] = [output_ids(ids[:1 + budgets[row]], eos, pad) for ids in generated[k * n:(k + 1) * n]]
    layer = None
    if any(option.alignments and option.alignment_layer is None for option in each):
        layer = default_layer(engine.model)  # the layer alignment.json records, read once a batch
    return [hypotheses(engine, tokenizer, ids, found, option, layer)
            for ids, found, option in zip(source_ids, outputs, each, strict=True)]


def padded(rows: Sequence[Sequence[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, S) ids, right-padded, and their attention mask."""
    width = max(len(ids) for ids in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, ids in enumerate(rows):
        input_ids[row, :len(ids)] = torch.tensor(list(ids), dtype=torch.long)
        attention_mask[row, :len(ids)] = 1
    return input_ids, attention_mask


def hypotheses(engine: Engine, tokenizer: Any, source_ids: Sequence[int], outputs: list[list[int]],
               options: DecodeOptions, layer: int | str | None = None) -> list[Hypothesis]:
    """One source's hypotheses from its candidate outputs (best beam first). Not ranked: the first ``n_best`` as
    they come. Ranked: each text once (its first, better beam) unless ``keep_duplicates``, ordered by log P(text |
    source), best first (a stable sort: ties keep the beams' order), the ``n_best`` first; every candidate is scored
    for the order, scores asked or not. A list is shorter than ``n_best`` when the beams held fewer distinct texts."""
    if not options.ranked:
        return [links(forced(engine, tokenizer, source_ids, ids, options.scores, options.alignments), tokenizer,
                      source_ids, options, layer) for ids in outputs[:options.n_best]]
    seen: set[str] = set()
    ranked = []
    for ids in outputs:
        text = tokenizer.decode(ids, skip_special_tokens=True).strip()
        if text in seen and not options.keep_duplicates:
            continue
        seen.add(text)
        ranked.append(forced(engine, tokenizer, source_ids, ids, True, options.alignments, text))
    ranked.sort(key=lambda hypothesis: -hypothesis.score)
    return [links(hypothesis if options.scores else dataclasses.replace(hypothesis, score=None), tokenizer,
                  source_ids, options, layer) for hypothesis in ranked[:options.n_best]]


def forced(engine: Engine, tokenizer: Any, source_ids: Sequence[int], ids: list[int], score: bool, attention: bool,
           text: str | None = None) -> Hypothesis:
    """The hypothesis ``ids`` of a source, with its score and attention when asked: one teacher-forced pass over
    that pair alone gives both."""
    text = tokenizer.decode(ids, skip_special_tokens=True).strip() if text is None else text
    if attention:
        log_probs, by_head = teacher_forced_attention(engine.model, source_ids, ids)  # (L, H, S, T) until ``links``
        return Hypothesis(text, float(sum(log_probs.tolist())) if score else None, ids=ids, attention=by_head)
    return Hypothesis(text, float(sum(engine.teacher_forced(list(source_ids), ids)[0])) if score else None, ids=ids)


def links(hypothesis: Hypothesis, tokenizer: Any, source_ids: Sequence[int], options: DecodeOptions,
          layer: int | str | None) -> Hypothesis:
    """``hypothesis`` with its alignment, if asked: the weights (S, T) of ``options.alignment_layer`` (else ``layer``,
    the model's) and ``options.alignment_head`` (else the heads' mean), and their Pharaoh word links."""
    if not options.alignments:
        return hypothesis
    chosen = options.alignment_layer if options.alignment_layer is not None else layer
    hypothesis.attention = alignment_weights(hypothesis.attention, chosen, options.alignment_head)
    hypothesis.alignment = to_pharaoh(word_links(hypothesis.attention, tokenizer, source_ids, hypothesis.ids))
    return hypothesis


def align(engine: Any, tokenizer: Any, source_ids: Sequence[int], target_ids: list[int],
          options: DecodeOptions) -> Hypothesis:
    """A given translation (``encdec align``), scored and aligned as ``decode_batch`` scores and aligns its own."""
    engine = as_engine(engine)
    if options.alignments:
        require_alignments(engine)
    layer = default_layer(engine.model) if options.alignments and options.alignment_layer is None else None
    return links(forced(engine, tokenizer, source_ids, target_ids, options.scores, options.alignments), tokenizer,
                 source_ids, options, layer)


def encode(tokenizer: Any, sources: Sequence[str], config: Any, truncate: bool = False) -> list[list[int]]:
    """The sources' ids, cut to ``max_source_length`` tokens with ``truncate``."""
    encoding = {"truncation": True, "max_length": max_source_length(tokenizer, config)} if truncate else {}
    return tokenizer(list(sources), verbose=False, **encoding)["input_ids"]


def decode_sources(engine: Any, tokenizer: Any, source_ids: Sequence[Sequence[int]], options: DecodeOptions,
                   batch_size: int = 32, show_progress: bool = False) -> list[list[Hypothesis]]:
    """``decode_batch`` over many sources: batched longest first (less padding, and an out-of-memory error shows at
    once), each batch with one budget from its longest source, and put back in input order."""
    if batch_size < 1:
        raise EncdecError(f"`batch_size` must be >= 1, got {batch_size}.")
    engine = as_engine(engine)
    order = sorted(range(len(source_ids)), key=lambda i: -len(source_ids[i]))
    found: list[list[Hypothesis]] = [[] for _ in source_ids]
    with tqdm(total=len(source_ids), desc="Translating", unit="sent", disable=not show_progress) as progress:
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            for row, hypotheses_ in zip(rows, decode_batch(engine, tokenizer, [source_ids[i] for i in rows], options),
                                        strict=True):
                found[row] = hypotheses_
            progress.update(len(rows))
    return found


def decode_lines(engine: Any, tokenizer: Any, lines: Sequence[str], options: DecodeOptions, batch_size: int = 32,
                 truncate: bool = False, show_progress: bool = False) -> list[list[Hypothesis]]:
    """The hypotheses of each line (its end dropped); a blank line gets one empty hypothesis without running the
    model, so that outputs stay aligned with the lines."""
    engine = as_engine(engine)
    lines = [line.rstrip("\r\n") for line in lines]
    todo = [i for i, line in enumerate(lines) if line.strip()]
    found = [[Hypothesis("")] for _ in lines]
    source_ids = encode(tokenizer, [lines[i] for i in todo], engine.config, truncate) if todo else []
    for i, hypotheses_ in zip(todo, decode_sources(engine, tokenizer, source_ids, options, batch_size, show_progress),
                              strict=True):
        found[i] = hypotheses_
    return found


__all__ = ["LENGTH_PENALTY_RANGE", "DecodeLimits", "DecodeOptions", "Engine", "Hypothesis", "OptionError", "align",
           "as_engine", "auto_max_new_tokens", "decode_batch", "decode_lines", "decode_sources", "encode",
           "max_source_length", "model_defaults", "output_ids", "require_alignments", "resolve_options"]
