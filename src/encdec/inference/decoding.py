"""Decoding, once for every front end: the options resolved and checked in one place, and one function that decodes
a batch of sources into their hypotheses.

``encdec translate`` (and corpus translation, ``distill``'s teacher and ``evaluate``), ``encdec serve``'s native API
and its LibreTranslate API each turn what they were asked (flags, JSON fields, a recipe) into a ``DecodeOptions`` with
``resolve_options`` (``encdec.decoding_options``), as ``generate()`` resolves its ``GenerationConfig`` once: the
model's generation config fills what was not asked, and every rule and check (beam size, n-best within the beam,
length penalty, token budget, a server's limits) is made there, raising an ``OptionError`` that names the option.
``decode_batch`` then runs an engine (``encdec.inference.engines``) over a batch of source ids with those options and
returns, per source, its hypotheses:

- their ids and text, the ``</s>`` kept in the ids;
- with ``scores``, log P(hypothesis | source), from one teacher-forced pass over that pair alone (not the padded
  batch), so a text scores the same in any batch, on any engine;
- with ``alignments``, the attention of that pass (decoder layers x source x target, averaged over heads) and the
  Pharaoh word links of one layer (``encdec.inference.alignment``);
- an n-best list: the beams as beam search returns them, or (``ranked``, what ``encdec translate --n-best`` prints)
  all the beams ordered by log P, each text once unless ``keep_duplicates``; as many as asked
  (``DecodeOptions.kept``).

A multilingual model's sources start with the source language's token (``encode``'s ``source_lang``) and every
engine forces the target language's token first (``forced_bos_token_id`` in the settings; CTranslate2 makes it its
target prefix), so the hypotheses' ids start with it, as ``generate()``'s do, and their text leaves it out.

Each source has its own generation budget (the one asked, else the model's, else from its source length). Greedy
search decides each token from the tokens before it only, so one greedy batch runs to the largest budget and each
output is cut to its own; beam search ends differently at another budget, so sources of other budgets are decoded
in separate ``generate`` calls.

What a caller may ask, and the rules that resolve it, are declared once in ``encdec.decoding_options``: a new
decoding option is a field there, and every front end offers it from that declaration.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import GenerationConfig

from ..decoding_options import (
    LENGTH_PENALTY_RANGE,
    DecodeLimits,
    DecodeOptions,
    auto_max_new_tokens,
    check_languages,
    resolve,
)
from ..errors import EncdecError, OptionError
from ..tokenization import language_ids, refuse_language_tokens
from .alignment import (
    alignment_weights,
    check_alignment_choice,
    default_layer,
    teacher_forced_attention,
    to_pharaoh,
    word_links,
)
from .engines import Engine, as_engine, engines_that


def resolve_options(generation_config: Any = None, *, limits: DecodeLimits | None = None, model_config: Any = None,
                    ranked: bool = False, tokenizer: Any = None, **asked: Any) -> DecodeOptions:
    """``options.resolve`` (every rule and check of what was asked, the model's ``generation_config`` filling the
    rest), with ``tokenizer`` the source and target language checked against its languages (and the target's token
    id to force), and with ``model_config`` the alignment's layer and head checked against the model's
    (``alignment.check_alignment_choice``)."""
    languages = None if tokenizer is None else language_ids(tokenizer)
    options = resolve(generation_config, limits=limits, ranked=ranked, languages=languages, **asked)
    if options.alignments and model_config is not None:
        check_alignment_choice(model_config, *options.alignment_choice)
    return options


def model_defaults(model_dir: str | os.PathLike, **asked: Any) -> DecodeOptions:
    """What a model folder (or an exported one) decodes with: its ``generation_config.json`` and ``asked``, resolved.
    An unreadable folder raises ``OSError``."""
    return resolve_options(GenerationConfig.from_pretrained(model_dir), **asked)


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
        with), and may differ in what each source wants back (a list within the candidates, scores, alignments)
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
    if any(option.glossary for option in each) and not engine.spec.alignments:
        raise EncdecError(f"A glossary puts its terms in through the model's attention, which the {engine.name} "
                          f"engine does not return; use --engine {' or --engine '.join(engines_that('alignments'))}.")
    if budgets is None:
        budgets = [search.budget(max(len(ids) for ids in source_ids), engine.config)] * len(source_ids)
    groups: dict[int | None, list[int]] = {}  # budget (None: greedy, each cut to its own) -> rows
    for row, budget in enumerate(budgets):
        groups.setdefault(None if search.greedy else budget, []).append(row)
    n, eos, pad = search.candidates, engine.config.eos_token_id, engine.config.pad_token_id
    settings = language_forced(search, tokenizer)
    outputs: list[list[list[int]]] = [[] for _ in source_ids]
    for rows in groups.values():
        input_ids, attention_mask = padded([source_ids[row] for row in rows], tokenizer.pad_token_id)
        generated = engine.generate(input_ids, attention_mask, max(budgets[row] for row in rows), settings)
        for k, row in enumerate(rows):  # generate() returns the outputs of a source one after the other
            outputs[row] = [output_ids(ids[:1 + budgets[row]], eos, pad) for ids in generated[k * n:(k + 1) * n]]
    layer = None
    if any(option.model_layer or option.glossary for option in each):
        layer = default_layer(engine.model)  # the layer alignment.json records, read once a batch
    return [hypotheses(engine, tokenizer, ids, found, option, layer)
            for ids, found, option in zip(source_ids, outputs, each, strict=True)]


def language_forced(options: DecodeOptions, tokenizer: Any) -> dict[str, Any]:
    """``options.settings()``, with the target language's token forced first for a multilingual ``tokenizer`` when
    ``options`` were resolved without it (``check_languages`` refuses a model's missing language)."""
    settings, languages = options.settings(), language_ids(tokenizer)
    if options.forced_bos_token_id is None and (languages or options.target_lang or options.source_lang):
        forced = check_languages(options.source_lang, options.target_lang, languages)
        settings.update({} if forced is None else {"forced_bos_token_id": forced})
    return settings


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
    """One source's hypotheses from its candidate outputs (best beam first). Not ranked: the first the list asks
    (``DecodeOptions.kept``) as they come. Ranked: each text once (its first, better beam) unless
    ``keep_duplicates``, ordered by log P(text | source), best first (a stable sort: ties keep the beams' order), the
    first the list asks; every candidate is scored for the order, scores asked or not. A list is shorter than asked
    when the beams held fewer distinct texts."""
    if options.glossary:  # one translation, no scores (``resolve``); its alignment carried over to the terms
        found = forced(engine, tokenizer, source_ids, outputs[0], False, options.alignments)
        termed = with_terms(found, engine, tokenizer, source_ids, options.glossary, layer)
        return [termed if termed is not found or not options.alignments else links(found, tokenizer, source_ids,
                                                                                   options, layer)]
    if not options.ranked:
        return [links(forced(engine, tokenizer, source_ids, ids, options.scores, options.alignments), tokenizer,
                      source_ids, options, layer) for ids in options.kept(outputs)]
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
                  source_ids, options, layer) for hypothesis in options.kept(ranked)]


def with_terms(hypothesis: Hypothesis, engine: Engine, tokenizer: Any, source_ids: Sequence[int], glossary: Any,
               layer: int | str | None) -> Hypothesis:
    """``hypothesis`` with the terms of ``glossary`` (an ``encdec.glossary.Glossary``) that its source holds put in
    through its alignment on the model's alignment ``layer`` (``Glossary.apply_aligned``), and that alignment
    carried over to its words (``alignment``: what ``encdec.inference.tagged`` and the server put markup back by,
    and what an alignment asked with a glossary gives, its links alone). The source is read as the model read it
    (its ids decoded), whose words the alignment counts."""
    source = tokenizer.decode(source_ids, skip_special_tokens=True).strip()
    if not hypothesis.ids or not glossary.matches(source):
        return hypothesis
    _, by_head = teacher_forced_attention(engine.model, source_ids, hypothesis.ids)
    found = word_links(alignment_weights(by_head, layer, None), tokenizer, source_ids, hypothesis.ids)
    text, carried = glossary.apply_aligned(source, hypothesis.text, found)
    # the attention (and ids) are the translation's before its terms went in: an alignment asked is its links alone
    return dataclasses.replace(hypothesis, text=text, alignment=to_pharaoh(carried), attention=None)


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
    """``hypothesis`` with its alignment, if asked: the weights (S, T) of the layer and head asked
    (``DecodeOptions.alignment_choice``; else ``layer``, the model's, and the heads' mean), and their Pharaoh word
    links."""
    if not options.alignments:
        return hypothesis
    chosen, head = options.alignment_choice
    hypothesis.attention = alignment_weights(hypothesis.attention, layer if chosen is None else chosen, head)
    hypothesis.alignment = to_pharaoh(word_links(hypothesis.attention, tokenizer, source_ids, hypothesis.ids))
    return hypothesis


def align(engine: Any, tokenizer: Any, source_ids: Sequence[int], target_ids: list[int],
          options: DecodeOptions) -> Hypothesis:
    """A given translation (``encdec align``), scored and aligned as ``decode_batch`` scores and aligns its own."""
    engine = as_engine(engine)
    if options.alignments:
        require_alignments(engine)
    layer = default_layer(engine.model) if options.model_layer else None
    return links(forced(engine, tokenizer, source_ids, target_ids, options.scores, options.alignments), tokenizer,
                 source_ids, options, layer)


def encode(tokenizer: Any, sources: Sequence[str], config: Any, truncate: bool = False,
           source_lang: str | None = None) -> list[list[int]]:
    """The sources' ids, cut to ``max_source_length`` tokens with ``truncate``; for a multilingual tokenizer, each
    starts with the token of ``source_lang`` (its ``src_lang``, else the one it has), and a language token typed in
    a source is refused (``tokenization.refuse_language_tokens``)."""
    encoding = {"truncation": True, "max_length": max_source_length(tokenizer, config)} if truncate else {}
    if language_ids(tokenizer):
        refuse_language_tokens(tokenizer, sources)
        if source_lang is not None:
            tokenizer.src_lang = source_lang
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
    source_ids = encode(tokenizer, [lines[i] for i in todo], engine.config, truncate,
                        options.source_lang) if todo else []
    for i, hypotheses_ in zip(todo, decode_sources(engine, tokenizer, source_ids, options, batch_size, show_progress),
                              strict=True):
        found[i] = hypotheses_
    return found


__all__ = ["LENGTH_PENALTY_RANGE", "DecodeLimits", "DecodeOptions", "Engine", "Hypothesis", "OptionError", "align",
           "as_engine", "auto_max_new_tokens", "decode_batch", "decode_lines", "decode_sources", "encode",
           "max_source_length", "model_defaults", "output_ids", "require_alignments", "resolve_options"]
