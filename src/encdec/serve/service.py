"""The request service: an engine, its tokenizer and the server's limits, which checks a request into jobs and decodes
a batch of them. Plain Python and threads; ``encdec.serve.core`` and the APIs put HTTP (FastAPI) in front of it, and
``encdec.serve.batcher`` groups the jobs into batches.

A batch gives each text what translating it alone gives: the server checks a request's options into a
``decoding.DecodeOptions`` (``decoding.resolve_options``, within its limits) and decodes a batch with
``decoding.decode_batch``, as ``encdec translate`` does. Each text has its own budget (the one asked, else the
model's, else 2 x its source + 10); greedy jobs of any budgets share a batch, beam jobs only with the same budget.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from ..cards import card_languages, read_card
from ..decoding_options import json_name, list_apart, python_name
from ..errors import EncdecError, LanguageError, OptionError
from ..inference.decoding import (
    LENGTH_PENALTY_RANGE,
    DecodeLimits,
    DecodeOptions,
    Engine,
    Hypothesis,
    decode_batch,
    max_source_length,
    resolve_options,
)
from ..inference.sentences import fit
from ..tokenization import language_ids
from ..version import __version__
from .offload import lone_surrogate

logger = logging.getLogger("encdec.serve")

DEFAULT_MAX_SOURCE_TOKENS = 1024  # for models without a position limit (the RNN) and a tokenizer without one


class RequestError(EncdecError):
    """A request the server refuses (the native API's 422): ``field`` is the request field at fault, e.g. ``text[2]``,
    and ``reason`` what is wrong with it and the fix; each API's adapter says it in its own words."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.reason = field, message


@dataclass(frozen=True)
class ServeLimits:
    """What one server accepts and how it batches (``encdec serve`` options of the same names).

    ``max_source_tokens`` and ``max_new_tokens`` of ``None`` take the model's limits (``limits_for``). ``req_limit``
    (requests a minute per client address), ``char_limit`` (characters a text) and ``max_queue`` (texts a model's
    batcher holds) of ``None`` are no limit (``encdec.serve.limits``).
    """

    max_batch_size: int = 32
    max_wait_ms: float = 10.0
    max_texts: int = 64
    max_source_tokens: int | None = None
    max_new_tokens: int | None = None
    max_beams: int = 8
    max_body_bytes: int = 1_000_000
    req_limit: int | None = None
    char_limit: int | None = None
    max_queue: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_texts", "max_source_tokens", "max_new_tokens", "max_beams",
                     "max_body_bytes", "req_limit", "char_limit", "max_queue"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise EncdecError(f"`{name}` (--{name.replace('_', '-')}) must be a whole number >= 1, got {value!r}.")
        if self.max_wait_ms < 0:
            raise EncdecError(f"`max_wait_ms` (--max-wait-ms) must be >= 0, got {self.max_wait_ms}.")

    @property
    def decoding(self) -> DecodeLimits:
        """What these limits let a request ask of decoding (``decoding.resolve_options``)."""
        return DecodeLimits(self.max_beams, self.max_new_tokens, LENGTH_PENALTY_RANGE)


def limits_for(limits: ServeLimits, tokenizer: PreTrainedTokenizerBase, config: Any) -> ServeLimits:
    """``limits`` with the model's limits filled in: sources up to its positions (and the tokenizer's
    ``model_max_length``), budgets up to its positions minus the decoder start token."""
    longest = max_source_length(tokenizer, config)
    longest = longest if longest < 10**6 else DEFAULT_MAX_SOURCE_TOKENS  # "no limit" is a huge sentinel
    positions = getattr(config, "max_position_embeddings", None)
    budget = positions - 1 if positions else DEFAULT_MAX_SOURCE_TOKENS
    if limits.max_source_tokens is not None and limits.max_source_tokens > longest:
        raise EncdecError(f"--max-source-tokens {limits.max_source_tokens} exceeds what the model reads ({longest} "
                          "tokens, its `max_position_embeddings`); lower it.")
    if limits.max_new_tokens is not None and limits.max_new_tokens > budget:
        raise EncdecError(f"--max-new-tokens {limits.max_new_tokens} exceeds what the model can generate ({budget}, "
                          "its `max_position_embeddings` - 1); lower it.")
    return ServeLimits(**{**limits.__dict__, "max_source_tokens": limits.max_source_tokens or longest,
                          "max_new_tokens": limits.max_new_tokens or budget})


# the limits that ``limits_for`` fills from each model
FROM_THE_MODEL = ("max_source_tokens", "max_new_tokens")


def widest(limits: Sequence[ServeLimits]) -> ServeLimits:
    """The first of ``limits`` (each model's, from ``limits_for``) with the largest of those each model fills: what
    any of the models accepts."""
    return dataclasses.replace(limits[0], **{name: max(getattr(each, name) for each in limits)
                                             for name in FROM_THE_MODEL})


@dataclass
class Job:
    """One text to translate, and the future its answer goes to."""

    source_ids: list[int]
    options: DecodeOptions
    budget: int
    n_best_list: bool = False  # the request asked for an n-best list: answer with the list, even of one
    future: Future = field(default_factory=Future)
    arrival: float = field(default_factory=time.monotonic)

    @property
    def key(self) -> tuple:
        """Jobs with equal keys are decoded in one batch (see the module docstring for the budget). A multilingual
        model's target language is part of the search (its forced token), so two targets never share a
        ``generate()`` call; sources of other languages may, each starting with its own language's token."""
        return self.options.search, None if self.options.greedy else self.budget


class TranslationService:
    """An engine, its tokenizer and the server's limits: checks requests into jobs, and decodes a batch of jobs
    (``decoding.decode_batch``, what ``encdec translate`` decodes with)."""

    def __init__(self, engine: Engine, tokenizer: PreTrainedTokenizerBase, limits: ServeLimits | None = None,
                 model_dir: str | Path | None = None) -> None:
        self.engine, self.tokenizer = engine, tokenizer
        self.config = engine.config
        self.limits = limits_for(limits or ServeLimits(), tokenizer, engine.config)
        self.model_dir = Path(model_dir) if model_dir is not None else None
        self.defaults = resolve_options(engine.generation_config).describe()  # what translate and evaluate resolve
        self.has_alignments = engine.spec.alignments and getattr(self.config, "attention", "") != "none"
        self.tokenizing = threading.Lock()  # one thread at a time in the tokenizer (``offload``'s docstring says why)
        self.language_ids = language_ids(tokenizer)  # a multilingual model's code -> token id; {} for a bilingual one

    @property
    def languages(self) -> tuple[str, ...]:
        """A multilingual model's languages (its tokenizer's), in order; none for a bilingual model."""
        return tuple(self.language_ids)

    def jobs(self, text: str | list[str], **asked: Any) -> list[Job]:
        """Check one request (the fields of ``POST /translate``; ``asked``: its decoding options by their JSON names,
        ``decoding_options``) against the limits and turn each of its texts into a job; a ``RequestError`` naming
        the field otherwise. With an n-best list, each text also gets a job for it, after all the translations'
        (``per_text`` puts them together): the list ``encdec translate --n-best`` prints (every beam ordered by
        log P, each text once unless asked to keep duplicates), while the translation stays the one asked without a
        list (``decoding_options.list_apart``)."""
        translation, asked_list = list_apart(asked)
        listed = None if asked_list is None else self.options(**asked_list, ranked=True)
        jobs = self.jobs_for(text, self.options(**translation))
        return jobs + [Job(job.source_ids, listed, job.budget, True) for job in jobs if listed is not None]

    def options(self, *, ranked: bool = False, **asked: Any) -> DecodeOptions:
        """A request's decoding options (``asked``: by their JSON names; a multilingual model's direction as
        ``source`` and ``target``), resolved as ``encdec translate`` resolves its flags (``decoding.resolve_options``,
        the target language's token forced), within the limits; a ``RequestError`` naming the field otherwise."""
        try:
            options = resolve_options(self.engine.generation_config, ranked=ranked, limits=self.limits.decoding,
                                      model_config=self.config, tokenizer=self.tokenizer,
                                      **{python_name(name): value for name, value in asked.items()})
        except OptionError as error:
            raise RequestError(json_name(error.field), error.explain(json_name)) from None
        except LanguageError as error:
            raise RequestError("target", str(error)) from None
        if options.alignments and not self.has_alignments:
            why = (f"the {self.engine.name} engine returns none" if not self.engine.spec.alignments
                   else "this model has no attention (attention='none')")
            raise RequestError(json_name("alignments"), f"alignments are not available: {why}; leave it out.")
        return options

    def jobs_for(self, text: str | list[str], options: DecodeOptions, n_best_list: bool = False,
                 cut: bool = False) -> list[Job]:
        """A job for each text of ``text`` (checked, as ``texts`` and the source limit say), decoded with
        ``options``, each with its own budget. ``cut`` (a sentence of a split text): a text over the source limit
        is cut to it, with a warning in the log (``sentences.fit``), instead of refused. A multilingual model's
        sources start with the token of ``options.source_lang`` (``decoding.encode``). Called from the server's CPU
        threads (``offload``), one at a time in the tokenizer."""
        fields, texts = self.texts(text)
        with self.tokenizing:
            if self.language_ids:
                self.tokenizer.src_lang = options.source_lang or self.tokenizer.src_lang
            found = self.tokenizer(texts, verbose=False)["input_ids"]
            if cut:
                found = fit(self.tokenizer, texts, found, self.limits.max_source_tokens)
        jobs = []
        for name, ids in zip(fields, found, strict=True):
            if len(ids) > self.limits.max_source_tokens:
                raise RequestError(name, f"{len(ids)} source tokens exceed the limit of {self.limits.max_source_tokens}"
                                         " (--max-source-tokens); split the text.")
            jobs.append(Job(ids, options, options.budget(len(ids), self.config, self.limits.max_new_tokens),
                            n_best_list))
        return jobs

    def texts(self, text: str | list[str]) -> tuple[list[str], list[str]]:
        """(field names, texts) of a request's ``text``: at least one and at most ``max_texts``, none empty, each
        Unicode that UTF-8 can encode (JSON's ``\\ud800`` escape gives a lone surrogate, which it cannot)."""
        texts = [text] if isinstance(text, str) else text
        fields = ["text"] if isinstance(text, str) else [f"text[{i}]" for i in range(len(texts))]
        if not texts:
            raise RequestError("text", "give at least one text.")
        if len(texts) > self.limits.max_texts:
            raise RequestError("text", f"{len(texts)} texts exceed the limit of {self.limits.max_texts} per request "
                                       "(--max-texts); send them in several requests.")
        for name, item in zip(fields, texts, strict=True):
            if not item.strip():
                raise RequestError(name, "the text is empty; send some words to translate.")
            if (fault := lone_surrogate(item)) is not None:
                raise RequestError(name, f"{fault} is not text; send valid Unicode (a surrogate pair is fine, half of "
                                         "one is not).")
            self.refuse_language_tokens(name, item)
        return fields, texts

    def refuse_language_tokens(self, name: str, text: str) -> None:
        """A text holding a multilingual model's language token (``__de__``) is refused, as ``encdec translate``
        refuses it (``tokenization.refuse_language_tokens``): the direction is chosen by ``source`` and ``target``."""
        tokens = (getattr(self.tokenizer, "language_tokens", None) or {}).values() if self.language_ids else ()
        typed = next((token for token in tokens if token in text), None)
        if typed is not None:
            raise RequestError(name, f"the text holds the language token {typed!r}; the model's languages are chosen "
                                     "with source and target, not typed in the text: remove it.")

    def decode(self, jobs: list[Job]) -> list[Any]:
        """Translate jobs that share a key in one batch: one answer per job, in order."""
        found = decode_batch(self.engine, self.tokenizer, [job.source_ids for job in jobs],
                             [job.options for job in jobs], [job.budget for job in jobs])
        return [self.answer(job, hypotheses) for job, hypotheses in zip(jobs, found, strict=True)]

    def answer(self, job: Job, hypotheses: list[Hypothesis]) -> Any:
        """A job's answer: a list job's, its n-best list (each ``{text}``, with ``score`` if asked); else the best
        translation, with the score and the alignment it asked for."""
        best, scores = hypotheses[0], job.options.scores
        if job.n_best_list:
            return [{"text": hypothesis.text, **({"score": hypothesis.score} if scores else {})}
                    for hypothesis in hypotheses]
        answer: dict[str, Any] = {"text": best.text}
        if scores:
            answer["score"] = best.score
        if job.options.alignments and best.attention is None:  # a glossary's terms went in: the links carried over
            answer["alignment"] = {"links": best.alignment}
        elif job.options.alignments:  # the alignment (inference.alignment), as `encdec translate --alignments` has it
            answer["alignment"] = {"source_tokens": self.tokenizer.convert_ids_to_tokens(job.source_ids),
                                   "target_tokens": self.tokenizer.convert_ids_to_tokens(best.ids),
                                   "weights": [[round(w, 6) for w in row] for row in best.attention.tolist()],
                                   "links": best.alignment}
        return answer

    @staticmethod
    def per_text(jobs: list[Job], answers: list[Any]) -> list[tuple[dict[str, Any], list[dict[str, Any]] | None]]:
        """Per text, from the answers of ``jobs``' jobs: its translation's answer, and the n-best list of its list
        job when the request asked one (else None); ``schema.Translation.of`` puts them together."""
        found = [answer for job, answer in zip(jobs, answers, strict=True) if not job.n_best_list]
        lists = [answer for job, answer in zip(jobs, answers, strict=True) if job.n_best_list]
        return list(zip(found, lists or [None] * len(found), strict=True))

    def info(self) -> dict[str, Any]:
        """What ``GET /info`` answers: the model, its languages and card metrics, the engine and the limits."""
        config = self.config
        names = ("d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads",
                 "cell_type", "attention", "hidden_size", "embedding_dim", "bidirectional_encoder", "vocab_size",
                 "max_position_embeddings")
        model = getattr(self.engine, "model", None)
        card = self.card
        return {"family": config.model_type, "name": self.model_dir.resolve().name if self.model_dir else None,
                "parameters": model.num_parameters() if model is not None else None,
                "architecture": {name: getattr(config, name) for name in names if hasattr(config, name)},
                "languages": card.get("languages", []), "metrics": card.get("metrics", []),
                "engine": self.engine.name, "compute_type": self.engine.precision,
                "alignments": self.has_alignments, "encdec_version": __version__,
                "defaults": self.defaults,
                "limits": dict(self.limits.__dict__)}

    @functools.cached_property
    def card(self) -> dict[str, Any]:
        """Languages (``encdec.cards.card_languages``) and metrics from the model card's metadata (README.md), if
        the folder has one."""
        data = read_card(self.model_dir)
        if data is None:
            return {}
        languages = list(card_languages(data))
        metrics = [{"dataset": r.dataset_name, "split": r.dataset_split, "metric": r.metric_type,
                    "value": r.metric_value} for r in (data.eval_results or [])]
        return {"languages": languages, "metrics": metrics}


__all__ = ["LENGTH_PENALTY_RANGE", "DecodeOptions", "Job", "RequestError", "ServeLimits", "TranslationService",
           "limits_for", "widest"]
