"""Serving without the web framework: checking a request, dynamic batching, and turning a batch of texts into
answers. ``encdec.server`` puts HTTP (FastAPI) in front of it; this module is plain Python and threads.

Dynamic batching (as in NVIDIA Triton's dynamic batcher or TorchServe's batch aggregation): each text of each request
becomes a ``Job``; one worker thread decodes jobs that share their decoding options together, as soon as as many
of them wait as the largest of the last few batches had (up to ``max_batch_size``), or the oldest has waited
``max_wait_ms``. So a lone client's request runs at once, and a crowd's requests wait for each other. The worker
runs one batch at a time, so the model runs in a single thread of Python (its operators still use torch's
threads), and requests that arrive while it works are batched for the next round.

A batch gives each text what translating it alone gives: the server checks a request's options into a
``decoding.DecodeOptions`` (``decoding.resolve_options``, within its limits) and decodes a batch with
``decoding.decode_batch``, as ``encdec translate`` does. Each text has its own budget (``max_new_tokens``, else the
model's, else 2 x its source + 10); greedy jobs of any budgets share a batch, beam jobs only with the same budget.
"""

from __future__ import annotations

import functools
import itertools
import logging
import queue
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huggingface_hub import ModelCard
from transformers import PreTrainedTokenizerBase

from . import __version__
from .alignment import MEAN, layer_weights
from .cards import LANGUAGE_CODE as CARD_LANGUAGE_CODE
from .decoding import (
    LENGTH_PENALTY_RANGE,
    DecodeLimits,
    DecodeOptions,
    Engine,
    Hypothesis,
    decode_batch,
    max_source_length,
    resolve_options,
)
from .engines import CTranslate2Engine, TorchEngine
from .errors import EncdecError, OptionError

logger = logging.getLogger("encdec.serve")

DEFAULT_MAX_SOURCE_TOKENS = 1024  # for models without a position limit (the RNN) and a tokenizer without one


class RequestError(EncdecError):
    """A request the server refuses (HTTP 422): ``field`` is the request field at fault, e.g. ``text[2]``."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class ServeLimits:
    """What one server accepts and how it batches (``encdec serve`` options of the same names).

    ``max_source_tokens`` and ``max_new_tokens`` of ``None`` take the model's limits (``limits_for``).
    """

    max_batch_size: int = 32
    max_wait_ms: float = 10.0
    max_texts: int = 64
    max_source_tokens: int | None = None
    max_new_tokens: int | None = None
    max_beams: int = 8
    max_body_bytes: int = 1_000_000

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_texts", "max_source_tokens", "max_new_tokens", "max_beams",
                     "max_body_bytes"):
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


@dataclass
class Job:
    """One text to translate, and the future its answer goes to."""

    source_ids: list[int]
    options: DecodeOptions
    budget: int
    n_best_list: bool = False  # the request asked for `n_best`: answer with the list, even of one
    future: Future = field(default_factory=Future)
    arrival: float = field(default_factory=time.monotonic)

    @property
    def key(self) -> tuple:
        """Jobs with equal keys are decoded in one batch (see the module docstring for the budget)."""
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
        generation = engine.generation_config
        self.default_beams = resolve_options(generation).num_beams  # the one default translate and evaluate use too
        self.default_length_penalty = 1.0 if generation.length_penalty is None else generation.length_penalty
        self.default_budget = generation.max_new_tokens
        self.has_alignments = isinstance(engine, TorchEngine) and getattr(self.config, "attention", "") != "none"

    def jobs(self, text: str | list[str], n_best: int | None = None, return_scores: bool = False,
             return_alignments: bool = False, **decoding: Any) -> list[Job]:
        """Check one request (the fields of ``POST /translate``; ``decoding``: its ``num_beams``,
        ``max_new_tokens``, ``length_penalty``) against the limits and turn each of its texts into a job; a
        ``RequestError`` naming the field otherwise."""
        options = self.options(n_best=n_best, return_scores=return_scores, return_alignments=return_alignments,
                               **decoding)
        return self.jobs_for(text, options, n_best_list=n_best is not None)

    def options(self, return_scores: bool = False, return_alignments: bool = False, *, ranked: bool = False,
                **decoding: Any) -> DecodeOptions:
        """A request's decoding options (``decoding``: ``num_beams``, ``n_best``, ...), resolved as ``encdec
        translate`` resolves its flags (``decoding.resolve_options``), within the limits; a ``RequestError`` naming
        the field otherwise."""
        try:
            options = resolve_options(self.engine.generation_config, ranked=ranked, scores=return_scores,
                                      alignments=return_alignments, limits=self.limits.decoding, **decoding)
        except OptionError as error:
            raise RequestError(error.field, error.explain()) from None
        if return_alignments and not self.has_alignments:
            why = ("the ctranslate2 engine returns none" if isinstance(self.engine, CTranslate2Engine)
                   else "this model has no attention (attention='none')")
            raise RequestError("return_alignments", f"alignments are not available: {why}; leave it out.")
        return options

    def jobs_for(self, text: str | list[str], options: DecodeOptions, n_best_list: bool = False) -> list[Job]:
        """A job for each text of ``text`` (checked, as ``texts`` and the source limit say), decoded with
        ``options``, each with its own budget."""
        fields, texts = self.texts(text)
        jobs = []
        for name, ids in zip(fields, self.tokenizer(texts, verbose=False)["input_ids"], strict=True):
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
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as error:
                raise RequestError(name, f"a lone surrogate (U+{ord(item[error.start]):04X}) at character "
                                         f"{error.start} is not text; send valid Unicode (a surrogate pair is fine, "
                                         "half of one is not).") from None
        return fields, texts

    def decode(self, jobs: list[Job]) -> list[dict[str, Any]]:
        """Translate jobs that share a key in one batch: one answer per job, in order."""
        found = decode_batch(self.engine, self.tokenizer, [job.source_ids for job in jobs],
                             [job.options for job in jobs], [job.budget for job in jobs])
        return [self.answer(job, hypotheses) for job, hypotheses in zip(jobs, found, strict=True)]

    def answer(self, job: Job, hypotheses: list[Hypothesis]) -> dict[str, Any]:
        """A job's answer: the best translation, with the scores, the n-best list and the alignment it asked for."""
        best, scores = hypotheses[0], job.options.scores
        answer: dict[str, Any] = {"text": best.text}
        if scores:
            answer["score"] = best.score
        if job.n_best_list:
            answer["n_best"] = [{"text": hypothesis.text, **({"score": hypothesis.score} if scores else {})}
                                for hypothesis in hypotheses]
        if job.options.alignments:  # the (S, T) attention averaged over every layer and head
            weights = layer_weights(best.attention, MEAN)
            answer["alignment"] = {"source_tokens": self.tokenizer.convert_ids_to_tokens(job.source_ids),
                                   "target_tokens": self.tokenizer.convert_ids_to_tokens(best.ids),
                                   "weights": [[round(w, 6) for w in row] for row in weights.tolist()]}
        return answer

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
                "defaults": {"num_beams": self.default_beams, "length_penalty": self.default_length_penalty,
                             "max_new_tokens": self.default_budget},
                "limits": dict(self.limits.__dict__)}

    @functools.cached_property
    def card(self) -> dict[str, Any]:
        """Languages and metrics from the model card's metadata (README.md), if the folder has one."""
        path = self.model_dir / "README.md" if self.model_dir else None
        if path is None or not path.is_file():
            return {}
        try:
            data = ModelCard.load(path).data
        except Exception as error:  # a hand-edited card must not stop the server
            logger.warning("could not read the model card %s: %s", path, error)
            return {}
        languages = data.language if isinstance(data.language, list) else [data.language] if data.language else []
        metrics = [{"dataset": r.dataset_name, "split": r.dataset_split, "metric": r.metric_type,
                    "value": r.metric_value} for r in (data.eval_results or [])]
        return {"languages": languages, "metrics": metrics}


# --- several models, by language pair -------------------------------------------------------------------------

LANGUAGE_CODE = CARD_LANGUAGE_CODE.pattern  # ISO 639-1 or 639-3, optionally a script or region: zh_Hant
MODEL_SPEC = re.compile(rf"^(?:(?P<source>{LANGUAGE_CODE})-(?P<target>{LANGUAGE_CODE})=)?(?P<dir>[^,=]+)"
                        r"(?P<options>(?:,[a-z_]+=[^,]*)*)$")
ENGINE_CHOICES = {"engine": ("torch", "ctranslate2"), "quantize": ("int8",), "dtype": ("float32", "bfloat16")}
# English names of common language codes, for LibreTranslate's /languages; another code is named by itself
LANGUAGE_NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "ca": "Catalan", "cs": "Czech", "da": "Danish", "de": "German",
    "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian", "eu": "Basque", "fa": "Persian",
    "fi": "Finnish", "fr": "French", "ga": "Irish", "he": "Hebrew", "hi": "Hindi", "hr": "Croatian",
    "hu": "Hungarian", "id": "Indonesian", "is": "Icelandic", "it": "Italian", "ja": "Japanese", "ko": "Korean",
    "lt": "Lithuanian", "lv": "Latvian", "mt": "Maltese", "nb": "Norwegian Bokmal", "nl": "Dutch", "pl": "Polish",
    "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian",
    "sr": "Serbian", "sv": "Swedish", "th": "Thai", "tr": "Turkish", "uk": "Ukrainian", "vi": "Vietnamese",
    "zh": "Chinese",
}


@dataclass(frozen=True)
class ModelSpec:
    """One ``--model`` of ``encdec serve``: ``[SRC-TGT=]DIR[,engine=E][,quantize=Q][,dtype=D]``. Without a pair,
    the model card's languages give it; options left out take the command's ``--engine``/``--quantize``/``--dtype``."""

    model_dir: str
    source: str | None = None
    target: str | None = None
    options: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, value: str) -> ModelSpec:
        found = MODEL_SPEC.match(value.strip())
        if not found:
            raise EncdecError(f"--model {value!r} is not DIR or SRC-TGT=DIR (language codes such as de-en=runs/de-en: "
                              "ISO 639 codes of 2 or 3 lowercase letters, optionally _Script or _REGION as in zh_Hant; "
                              "optionally followed by ,engine=ctranslate2 ,quantize=int8 or ,dtype=bfloat16).")
        options = tuple(tuple(item.split("=", 1)) for item in found["options"].split(",") if item)
        for name, choice in options:
            if choice not in ENGINE_CHOICES.get(name, ()):
                known = ", ".join(f"{key}={'|'.join(values)}" for key, values in ENGINE_CHOICES.items())
                raise EncdecError(f"--model {value!r}: {name}={choice} is not an option; the options are {known}.")
        return cls(found["dir"], found["source"], found["target"], options)

    def engine_options(self, defaults: dict[str, str | None]) -> dict[str, str | None]:
        return {**defaults, **dict(self.options)}


@dataclass
class ServedModel:
    """A model one server serves: its name (its pair, ``de-en``, or its folder's name when its languages are not
    known), its pair, and its service."""

    name: str
    source: str | None
    target: str | None
    service: TranslationService


def served_as(service: TranslationService, source: str | None = None, target: str | None = None) -> ServedModel:
    """``service`` under its language pair: the one given, which its model card (if it names one) must agree with,
    else the card's; named by the pair, or by its folder when neither gives one."""
    languages = service.card.get("languages", [])
    card_pair = tuple(languages) if len(languages) == 2 else None
    if source and card_pair and card_pair != (source, target):
        raise EncdecError(f"--model {source}-{target}={service.model_dir}: its model card says "
                          f"{card_pair[0]}-{card_pair[1]}; give the card's pair, or fix the card.")
    source, target = (source, target) if source else card_pair or (None, None)
    folder = service.model_dir.resolve().name if service.model_dir else "model"
    return ServedModel(f"{source}-{target}" if source else folder, source, target, service)


class ServedModels:
    """The models of one server (``--model``, repeatable), found by language pair or by name."""

    def __init__(self, models: list[ServedModel]) -> None:
        names = [model.name for model in models]
        if not models:
            raise EncdecError("Serve at least one model: --model DIR or --model SRC-TGT=DIR.")
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise EncdecError(f"Two --model arguments serve {duplicates[0]}; give each language pair one model.")
        self.models = {model.name: model for model in models}

    @classmethod
    def load(cls, specs: list[ModelSpec], build: Callable[[str, dict[str, str | None]], TranslationService],
             defaults: dict[str, str | None]) -> ServedModels:
        """Each spec's service (``build(model_dir, engine_options)``), its pair checked against its model card."""
        return cls([served_as(build(spec.model_dir, spec.engine_options(defaults)), spec.source, spec.target)
                    for spec in specs])

    def pick(self, source: str | None = None, target: str | None = None, model: str | None = None) -> ServedModel:
        """The model a request asks for: by ``model`` name, by ``source`` and ``target``, or the only one."""
        if model is not None:
            if model not in self.models:
                raise RequestError("model", f"no model {model!r} is served; the served ones are {self.names()}.")
            return self.models[model]
        if source is None and target is None and len(self.models) == 1:
            return next(iter(self.models.values()))
        if source is None or target is None:
            raise RequestError("source" if source is None else "target",
                               f"several models are served: give source and target (or model); the served ones "
                               f"are {self.names()}.")
        for served in self.models.values():
            if (served.source, served.target) == (source, target):
                return served
        raise RequestError("target", f"no model translates {source} into {target}; the served ones are "
                                     f"{self.names()}.")

    def names(self) -> str:
        return ", ".join(self.models)

    def languages(self) -> list[dict[str, Any]]:
        """LibreTranslate's ``GET /languages``: each source language with its name and target codes."""
        targets: dict[str, list[str]] = {}
        for served in self.models.values():
            if served.source:
                targets.setdefault(served.source, []).append(served.target)
        return [{"code": code, "name": LANGUAGE_NAMES.get(code, code), "targets": sorted(codes)}
                for code, codes in sorted(targets.items())]


_STOP = object()
RECENT_BATCHES = 4  # the batches whose sizes say how many jobs to expect
RECORD_LENGTH = 10_000  # batches kept in ``DynamicBatcher.record``: a server that runs for months stays flat


@dataclass(frozen=True)
class BatchRecord:
    """Why the batcher ran a batch when it did: ``why`` is ``expected`` (as many jobs as it expected were queued:
    ``expected`` is that number, 1 for a lone client), ``waited`` (the oldest job had waited ``max_wait_ms``) or
    ``stopping`` (``stop()`` drains the queue). Tests read the decision here instead of timing the answer."""

    size: int
    why: str
    expected: int


class DynamicBatcher:
    """A worker thread that decodes queued jobs in batches of equal keys (see the module docstring).

    ``stop()`` finishes every job already submitted before the thread ends. ``record`` says what ran and why.

    A batcher made with ``held=True`` (a test hook: ``encdec serve`` does so only under ``ENCDEC_TEST_HOLD_BATCHES``,
    see ``encdec.server``) queues jobs without running any until ``release()``: a test can hold requests in flight
    at a known point, see them queued (``held``, ``wait_held``), then let them run as one batch. Otherwise the gate
    is open from the start and costs nothing.
    """

    def __init__(self, run_batch: Callable[[list[Job]], list[Any]], max_batch_size: int, max_wait_ms: float,
                 held: bool = False, name: str = "model") -> None:
        self.run_batch, self.name = run_batch, name
        self.max_batch_size, self.max_wait = max_batch_size, max_wait_ms / 1000
        self.queue: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self.loop, name=f"encdec-batcher-{name}", daemon=True)
        self.record: deque[BatchRecord] = deque(maxlen=RECORD_LENGTH)
        self.lock = threading.Lock()
        self.submitted = threading.Condition(self.lock)  # notified on every submit, for ``wait_held``
        self.gate = threading.Event()  # the worker takes no job while it is clear (held)
        if not held:
            self.gate.set()
        self.closed = False
        self.free_since = 0.0  # when the last batch ended

    @property
    def batches(self) -> list[int]:
        """The sizes of the batches run, oldest first (of the last ``RECORD_LENGTH``)."""
        return [batch.size for batch in tuple(self.record)]  # a copy at once: the worker may append meanwhile

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """Take no more jobs, finish the submitted ones (a held batcher is released), end the thread."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
            self.queue.put(_STOP)  # after every job submitted so far: the queue is first in, first out
        self.release()
        self.thread.join()

    def submit(self, jobs: list[Job]) -> list[Future]:
        with self.submitted:
            if self.closed or not self.thread.is_alive():
                raise RuntimeError("the batcher is not running (the server is shutting down)")
            for job in jobs:
                self.queue.put(job)
            self.submitted.notify_all()
            held = self.held
        if held:  # the test hook's signal to a test that reads the server's output
            print(f"encdec serve: test hold: {held} job(s) held by the batcher of {self.name}", file=sys.stderr,
                  flush=True)
        return [job.future for job in jobs]

    @property
    def held(self) -> int:
        """How many jobs a held batcher holds (0 once released)."""
        return 0 if self.gate.is_set() else self.queue.qsize()

    def wait_held(self, count: int, timeout: float) -> bool:
        """Wait until a held batcher holds ``count`` jobs (or ``timeout`` seconds pass); whether it does."""
        with self.submitted:
            return self.submitted.wait_for(lambda: self.held >= count, timeout)

    def release(self) -> None:
        """Let a held batcher run: it takes every queued job at once, then batches as usual."""
        self.gate.set()

    @property
    def expected(self) -> int:
        """How many jobs a batch waits for: one while requests come one at a time (the last few batches had one
        job each), so a lone client never waits; a full batch once they come together."""
        recent = itertools.islice(reversed(self.record), RECENT_BATCHES)
        return self.max_batch_size if max((batch.size for batch in recent), default=1) > 1 else 1

    def loop(self) -> None:
        self.gate.wait()  # open unless held (a test hook)
        pending: dict[tuple, list[Job]] = {}
        stopping = False
        while pending or not stopping:
            stopping = self.collect(pending, stopping, timeout=0.0)  # whatever is queued
            chosen = self.ready(pending, stopping)
            if chosen is None:  # wait for another job, or until the oldest job's wait is over
                oldest = min((self.deadline(jobs) for jobs in pending.values()), default=None)
                timeout = None if oldest is None else max(0.0, oldest - time.monotonic())
                stopping = self.collect(pending, stopping, timeout)
                continue
            key, why = chosen
            batch, pending[key] = pending[key][:self.max_batch_size], pending[key][self.max_batch_size:]
            if not pending[key]:
                del pending[key]
            self.run(batch, why)

    def ready(self, pending: dict[tuple, list[Job]], stopping: bool) -> tuple[tuple, str] | None:
        """The key of the batch to run now, the oldest first, and why (``BatchRecord.why``): one with the expected
        number of jobs, or whose first job has waited ``max_wait_ms``, or any while stopping; None to wait."""
        now, expected = time.monotonic(), self.expected

        def why(jobs: list[Job]) -> str | None:
            if len(jobs) >= expected:
                return "expected"
            if now >= self.deadline(jobs):
                return "waited"
            return "stopping" if stopping else None

        ready = {key: reason for key, jobs in pending.items() if (reason := why(jobs))}
        if not ready:
            return None
        key = min(ready, key=lambda k: pending[k][0].arrival)
        return key, ready[key]

    def deadline(self, jobs: list[Job]) -> float:
        """When a group stops waiting: ``max_wait_ms`` after its first job came, or after the worker became free
        (jobs that queued while a batch ran wait for the clients that batch answers: they send again at once)."""
        return max(jobs[0].arrival, self.free_since) + self.max_wait

    def collect(self, pending: dict[tuple, list[Job]], stopping: bool, timeout: float | None) -> bool:
        """Move queued jobs into ``pending``: wait up to ``timeout`` (None: for ever) for the first unless stopping,
        then take whatever else is queued. Returns whether ``stop()`` was asked."""
        block = not stopping and timeout != 0.0
        while True:
            try:
                item = self.queue.get(block=block, timeout=timeout if block else None)
            except queue.Empty:
                return stopping
            block = False
            if item is _STOP:
                stopping = True
            else:
                pending.setdefault(item.key, []).append(item)

    def run(self, batch: list[Job], why: str) -> None:
        self.record.append(BatchRecord(len(batch), why, self.expected))
        try:
            answers = self.run_batch(batch)
        except Exception as error:  # every waiting request gets an answer, an error one if need be
            for job in batch:
                job.future.set_exception(error)
            return
        finally:
            self.free_since = time.monotonic()
        for job, answer in zip(batch, answers, strict=True):
            job.future.set_result(answer)


__all__ = ["LANGUAGE_NAMES", "LENGTH_PENALTY_RANGE", "BatchRecord", "DecodeOptions", "DynamicBatcher", "Job",
           "ModelSpec", "RequestError", "ServeLimits", "ServedModel", "ServedModels", "TranslationService",
           "limits_for", "served_as"]
