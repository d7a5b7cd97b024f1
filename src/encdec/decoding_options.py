"""What a caller may ask of decoding, declared once, and the rules that resolve it.

``DecodeRequest`` declares each option a caller may ask: its name, type, default, bounds and the words each front end
shows (``help``: the command line's; ``description``: the JSON schema's), and which front ends offer it (``fronts``).
Every front end is derived from it, as fairseq's ``GenerationConfig`` dataclass feeds its command line and
transformers' one ``GenerationConfig`` is validated once: ``encdec translate``'s and ``evaluate``'s flags
(``encdec_cli.parser``), the native API's JSON schema (``serve.schema``), distillation's ``teacher`` settings
(``recipes.distill``), a run config's ``generation`` section, the defaults a trained model saves in its
``generation_config.json`` (``training.config``), ``evaluate_model``'s and the Python API's keyword arguments
(``encdec.inference``).

``resolve`` holds every rule: the model's generation config fills what was not asked; an n-best list widens a beam
that was not asked; split sentences give one translation (no n-best list, scores or alignments); every bound is
checked, a server's ``DecodeLimits`` too, raising an ``OptionError`` that names the option; a multilingual model's
source and target language are checked against its languages (``check_languages``, a ``LanguageError`` naming them)
and the target becomes the token forced first (``DecodeOptions.forced_bos_token_id``); and the result says what it
resolved (``DecodeOptions.describe``, ``DecodeOptions.notes``).

A new option is one field of ``DecodeRequest`` (and of ``DecodeOptions`` with its ``generate()`` name in
``DecodeOptions.settings``, if ``generate()`` takes it), its default and check in ``resolve``, and a line in each
engine that maps it otherwise than ``generate()`` or refuses it.

Standard library only: ``encdec --help`` reads this file without importing encdec (``encdec_cli.parser``), where the
relative import of ``OptionError`` gives way to ``ValueError`` (the command line only reads the declaration there).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

try:
    from .errors import LanguageError, OptionError
    from .glossary import as_glossary, read_glossary
except ImportError:  # read alone by ``encdec --help`` (see the module docstring)
    OptionError = LanguageError = ValueError  # type: ignore[assignment,misc]
    as_glossary = read_glossary = None  # type: ignore[assignment]

# length_penalty: beam search divides a hypothesis' log-probability by length ** length_penalty (HF generate). Values
# in use lie within about -2..2; +-10 already makes the length all that counts, and stays finite for any length a
# server accepts (1024 ** 10 ~ 1e30), where 1e308 overflows.
LENGTH_PENALTY_RANGE = (-10.0, 10.0)
DECODING, TRANSLATE, JSON, TEACHER = "decoding", "translate", "json", "teacher"  # front ends (``fronts``)
EXTENSION = "extension"  # encdec's own fields in the requests of the APIs it speaks besides its own (their adapters)
SAVED = "generation"  # a run config's ``generation`` section: a trained model's saved defaults (``saved``)


def option(default: Any, kind: type, help: str, description: str | None = None, fronts: tuple[str, ...] = (),
           minimum: float | None = None, maximum: float | None = None, limit: str | None = None,
           json_name: str | None = None, short: str | None = None, saved: tuple[Any, str] | None = None,
           read: str | None = None) -> Any:
    """A declared option: ``kind`` (int, float, bool or str, None allowed when ``default`` is None), its bounds
    (``limit``: the ``DecodeLimits`` field a server bounds it by), its command-line ``help`` and JSON ``description``
    (``help`` if None), the ``fronts`` that offer it, its JSON name (``json_name``: the field's name if None), its
    name in a sentence (``short``, as a model card names the teacher's decoding: its name in words if None) and,
    for the ``SAVED`` front, the run config's default and the words of its YAML comment (``saved``). A ``dict``
    option comes from a file on the command line: ``read`` names the function of this module that reads it."""
    return field(default=default, metadata={
        "kind": kind, "help": help, "description": description or help, "fronts": fronts, "minimum": minimum,
        "maximum": maximum, "limit": limit, "json_name": json_name, "short": short, "saved": saved, "read": read})


ALL = (DECODING, JSON, TEACHER)  # the options of every front end, evaluate's and the teacher's included


@dataclass(frozen=True)
class DecodeRequest:
    """What a caller may ask of decoding (None: the model's default). See the module docstring."""

    num_beams: int | None = option(
        None, int, "beam size; 1 = greedy; default: the model's generation_config.json (what `encdec train` saved "
        "from the recipe's generation.num_beams; 1 if unset), as `encdec serve` uses",
        "Beam size; 1 is greedy search. Default: the model's.", (*ALL, SAVED), minimum=1, limit="max_beams",
        short="beam", saved=(5, "beam size for evaluation and the saved generation_config.json; 1 = greedy"))
    max_new_tokens: int | None = option(
        None, int, "longest output; default: the model's generation_config.json, else 2 x source + 10",
        "Most tokens to generate, `</s>` included. Default: the model's, else 2 x the source length + 10.",
        (*ALL, SAVED), minimum=1, limit="max_new_tokens", saved=(128, "longest generated output"))
    length_penalty: float | None = option(
        None, float, "beam search's length normalisation exponent: scores are log p / length**this; default: the "
        "model's generation_config (greedy search ignores it)",
        "Beam search: the exponent of the length normalisation of hypothesis scores (score / length ** "
        "length_penalty): above 0 favours longer translations, below 0 shorter ones; a finite number from "
        f"{LENGTH_PENALTY_RANGE[0]:g} to {LENGTH_PENALTY_RANGE[1]:g}. Default: the model's.", (*ALL, SAVED),
        minimum=LENGTH_PENALTY_RANGE[0], maximum=LENGTH_PENALTY_RANGE[1], limit="length_penalty",
        saved=(1.0, "beam search: exponent of the length normalisation"))
    no_repeat_ngram_size: int | None = option(
        None, int, "no n-gram of this many tokens occurs twice in an output (generate()'s no_repeat_ngram_size, "
        "CTranslate2's too); 0 = off; default: the model's generation_config (off if unset)",
        "No n-gram of this many tokens occurs twice in a translation; 0 is off. Default: the model's (off if "
        "unset).", ALL, minimum=0, maximum=64)
    n_best: int | None = option(
        None, int, "up to K hypotheses per input, as lines `ID ||| HYPOTHESIS` (ID: the 0-based input line; Moses "
        "n-best format), ordered by log P(hypothesis | input) (the SCORE), best first, each text once; it needs K "
        "beams: without --num-beams, a model that decodes with fewer by default is decoded with K. Fewer than K "
        "lines: the beams held fewer distinct texts (raise --num-beams)",
        "Also return the n best translations (n <= num_beams; without num_beams a narrower default beam is widened "
        "to n), ordered by log P, each text once (see `n_best` in the answer).", (TRANSLATE, JSON), minimum=1,
        limit="max_beams")
    keep_duplicates: bool = option(
        False, bool, "with --n-best: keep hypotheses whose text an earlier one already has (different token "
        "sequences that decode to the same text); by default each text is listed once",
        "With `n_best`: keep translations whose text a better one already has (different token sequences that "
        "decode to the same text), as `encdec translate --keep-duplicates`.", (TRANSLATE, JSON))
    scores: bool = option(
        False, bool, "add ` ||| SCORE` to each line: log P(hypothesis | input), natural log, </s> included",
        "Add each translation's log-probability.", (TRANSLATE, JSON), json_name="return_scores")
    alignments: bool = option(
        False, bool, "add ` ||| i-j ...` to each line: word alignments in Pharaoh format (source word i, output word "
        "j, 0-based) from the attention (torch engine)",
        "Add the alignment: the source x target cross-attention matrix and its word links.", (TRANSLATE, JSON),
        json_name="return_alignments")
    alignment_layer: int | str | None = option(
        None, str, "Transformer decoder layer for --alignments (0-based, negative from the top, or `mean` for all); "
        "default: the layer `encdec align --gold-file ... --record` chose, else the penultimate",
        "With `return_alignments`: the decoder layer of the alignment (0-based, negative from the top, or `mean` for "
        "all layers; the model's own range is checked). Default: the model's alignment layer.", (TRANSLATE, JSON))
    alignment_head: int | None = option(
        None, int, "one head of that layer for --alignments; default: the mean of its heads",
        "With `return_alignments`: one head of that layer (the model's own range is checked). Default: the mean of "
        "its heads.", (TRANSLATE, JSON), minimum=0, maximum=255)
    split_sentences: bool = option(
        False, bool, "translate each text sentence by sentence; one translation per text",
        "Translate each text sentence by sentence (its lines cut into sentences by the source language's rules) and "
        "put it back together with its spacing and line breaks; a sentence over the source limit is cut to it "
        "instead of refused. One translation per text: not with `n_best`, `return_scores` or `return_alignments`.",
        (JSON,))
    glossary: Any = option(
        None, dict, "a glossary file (TSV, or CSV if named .csv, as DeepL's entries: `source term<TAB>target term` a "
        "line): each source term found (whole words, case for case; a lower-case term also capitalised) comes out as "
        "its target term, put in place of the target words aligned to it (torch engine); one translation per line: "
        "not with --n-best, --scores or --alignments",
        "Terms to translate as given: {source term: target term}. Each source term found (whole words, case for case; "
        "a lower-case term also capitalised) comes out as its target term, in place of the target words aligned to "
        "it. One translation: not with `n_best`, `return_scores` or `return_alignments`.", (DECODING, JSON,
                                                                                           EXTENSION),
        read="read_glossary")
    source_lang: str | None = option(
        None, str, "a multilingual model's source language (a code of its `languages`, e.g. de): its token is put "
        "before each source; refused for a bilingual model",
        "A multilingual model's source language (a code of its languages).", (DECODING, TEACHER),
        json_name="source", short="source language")
    target_lang: str | None = option(
        None, str, "a multilingual model's target language (a code of its `languages`, e.g. en): its token is "
        "forced as the first generated token (generate()'s forced_bos_token_id); refused for a bilingual model",
        "A multilingual model's target language (a code of its languages).", (DECODING, TEACHER),
        json_name="target", short="target language")


# one translation looked at (``encdec plot-attention``): greedy search, at most 64 tokens
GLANCE = DecodeRequest(num_beams=1, max_new_tokens=64)
LANGUAGE_OPTIONS = ("source_lang", "target_lang")  # a multilingual model's direction (``resolve``'s ``languages``)
ONE_TRANSLATION = ("n_best", "scores", "alignments")  # what a text put together from its sentences cannot have
# ONE_TRANSLATION and the options that shape it: what a translation comes with, which a step that feeds another
# (a pivot's first model) does not ask (``translation_only``)
COMES_WITH = (*ONE_TRANSLATION, "keep_duplicates", "alignment_layer", "alignment_head")


def declared(front: str | None = None) -> list[dataclasses.Field]:
    """The declared options (``DecodeRequest``'s fields), those a front end offers if ``front`` is given."""
    return [item for item in dataclasses.fields(DecodeRequest) if front is None or front in item.metadata["fronts"]]


def json_name(name: str) -> str:
    """An option's name in the native API's JSON (``scores`` -> ``return_scores``); others keep their own."""
    found = [item.metadata["json_name"] for item in declared() if item.name == name]
    return found[0] or name if found else name


def python_name(name: str) -> str:
    """The inverse of ``json_name``."""
    return next((item.name for item in declared() if item.metadata["json_name"] == name), name)


def asks_list(asked: dict[str, Any]) -> bool:
    """Whether ``asked`` (options by name, as ``asked_of`` gives them, or a request's by their JSON names) asks an
    n-best list."""
    return asked.get("n_best") is not None


def sentence_by_sentence(asked: dict[str, Any]) -> bool:
    """Whether ``asked`` (options by name) asks each text translated sentence by sentence, one translation a text."""
    return bool(asked.get("split_sentences"))


def translation_only(asked: Mapping[str, Any]) -> dict[str, Any]:
    """A request (options by their JSON names) without what a translation comes with (``COMES_WITH``: its n-best
    list, scores and alignment, and their settings): what a step whose translations feed another step asks."""
    dropped = {json_name(name) for name in COMES_WITH}
    return {name: value for name, value in asked.items() if name not in dropped}


def list_apart(asked: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """A request (options by their JSON names) as the requests of its translation, the one asked without an n-best
    list, and of its n-best list (None if it asks none), which has no alignment."""
    listed = {**asked, json_name("alignments"): False} if asks_list(asked) else None
    return {**asked, "n_best": None}, listed


def alternatives_request(alternatives: int) -> dict[str, Any]:
    """LibreTranslate's ``alternatives`` as an n-best request: the list of the translation and its alternatives."""
    return {"n_best": alternatives + 1}


def in_words(asked: dict[str, Any]) -> list[str]:
    """Options asked as a sentence names them (``beam 4``, ``length penalty 0.6``)."""
    shorts = {item.name: item.metadata["short"] or item.name.replace("_", " ") for item in declared()}
    return [f"{shorts[name]} {value}" for name, value in asked.items()]


def asked_of(values: Any, front: str) -> dict[str, Any]:
    """The options ``values`` (an object with them as attributes: parsed flags, a recipe section) asks: the set ones
    (not None, not False) that ``front`` offers, by their names."""
    found = {item.name: getattr(values, item.name, None) for item in declared(front)}
    return {name: value for name, value in found.items() if value is not None and value is not False}


def recorded(asked: dict[str, Any]) -> dict[str, Any]:
    """``asked`` as a JSON record keeps it (a resumable output's): a value read from a file (a glossary) by what
    identifies it."""
    return {name: getattr(value, "identity", value) for name, value in asked.items()}


def check_offered(asked: dict[str, Any], front: str, where: str) -> None:
    """A one-line error for an option ``asked`` of ``where`` that ``front`` does not offer."""
    offered = [item.name for item in declared(front)]
    for name in asked:
        if name not in offered:
            raise OptionError(name, f"is not an option of {where}; it takes {', '.join(offered)}.")


@dataclass(frozen=True)
class DecodeLimits:
    """What a server lets a request ask (``serve.ServeLimits.decoding``); None: no limit."""

    max_beams: int | None = None
    max_new_tokens: int | None = None
    length_penalty: tuple[float, float] | None = LENGTH_PENALTY_RANGE


@dataclass(frozen=True)
class DecodeOptions:
    """How to decode, resolved against a model's generation config (``resolve``); equal requests give equal options,
    whichever front end they came through."""

    num_beams: int = 1
    length_penalty: float | None = None  # None for one beam (greedy search or sampling), which has no use for it
    n_best: int = 1  # hypotheses per source
    max_new_tokens: int | None = None  # None: from each source's length (``auto_max_new_tokens``)
    do_sample: bool = False
    no_repeat_ngram_size: int | None = None  # None (or 0): off
    generate_kwargs: tuple[tuple[str, Any], ...] = ()  # more generate() options (top_k, temperature, ...), sorted
    ranked: bool = False  # n-best: all beams ordered by log P, each text once unless keep_duplicates (n_best > 1)
    keep_duplicates: bool = False  # (ranked only)
    scores: bool = False  # each hypothesis' log P(hypothesis | source)
    alignments: bool = False  # each hypothesis' attention and word links (torch engine)
    alignment_layer: int | str | None = None  # the alignment's layer; None: the model's (``alignment.default_layer``)
    alignment_head: int | None = None  # the alignment's head; None: the mean of the layer's heads
    source_lang: str | None = None  # a multilingual model's source language (its token starts each source)
    target_lang: str | None = None  # a multilingual model's target language (its token forced first)
    forced_bos_token_id: int | None = None  # the target language's token id, forced as the first generated token
    glossary: Any = None  # an ``encdec.glossary.Glossary``: its terms put into each translation (``Glossary.apply``)
    # what beam search would divide by (the asked, else the model's, else 1.0), recorded for one beam too
    beam_length_penalty: float = field(default=1.0, compare=False)
    # what resolving decided beyond the request, naming options as ``{name}`` (``OptionError``'s style)
    notes: tuple[str, ...] = field(default=(), compare=False)

    @property
    def greedy(self) -> bool:
        return self.num_beams == 1 and not self.do_sample

    @property
    def candidates(self) -> int:
        """How many outputs ``generate()`` returns per source: every beam for a ranked n-best list, else ``n_best``."""
        return self.num_beams if self.ranked and not self.do_sample else self.n_best

    @property
    def alignment_choice(self) -> tuple[int | str | None, int | None]:
        """The alignment's layer and head asked (None: the model's alignment layer, the mean of its heads)."""
        return self.alignment_layer, self.alignment_head

    @property
    def model_layer(self) -> bool:
        """Whether an alignment on the model's own layer was asked (``alignment.default_layer``)."""
        return self.alignments and self.alignment_layer is None

    @property
    def search(self) -> tuple:
        """What ``generate()`` runs with: sources whose options share it (and, beyond greedy search, their budget)
        decode in one batch."""
        return (self.num_beams, self.length_penalty, self.candidates, self.do_sample, self.no_repeat_ngram_size,
                self.generate_kwargs, self.forced_bos_token_id)

    def settings(self) -> dict[str, Any]:
        """The ``generate()`` keyword arguments (engines take them: ``encdec.inference.engines``), the budget apart."""
        settings = {"do_sample": self.do_sample, **dict(self.generate_kwargs), "num_beams": self.num_beams}
        if self.length_penalty is not None:
            settings["length_penalty"] = self.length_penalty
        if self.no_repeat_ngram_size:
            settings["no_repeat_ngram_size"] = self.no_repeat_ngram_size
        if self.candidates > 1:
            settings["num_return_sequences"] = self.candidates
        if self.forced_bos_token_id is not None:
            settings["forced_bos_token_id"] = self.forced_bos_token_id
        return settings

    def describe(self) -> dict[str, Any]:
        """What was resolved, as a record (``evaluate``'s results, the server's ``/info`` defaults): the beam size,
        budget (None: from each source's length), the length penalty beam search divides by and the n-gram size."""
        languages = {"source_lang": self.source_lang, "target_lang": self.target_lang} if self.target_lang else {}
        terms = {"glossary": self.glossary.identity} if self.glossary else {}
        return {"num_beams": self.num_beams, "length_penalty": self.beam_length_penalty,
                "max_new_tokens": self.max_new_tokens, "no_repeat_ngram_size": self.no_repeat_ngram_size or 0,
                **languages, **terms}

    def kept(self, hypotheses: list[Any]) -> list[Any]:
        """The first of ``hypotheses`` (best first) that a source asked for: its n-best list's length."""
        return hypotheses[:self.n_best]

    def said(self, name: Any = str) -> list[str]:
        """The ``notes``, each option they name written by ``name`` (``--num-beams`` on the command line)."""
        return [re.sub(r"\{(\w+)\}", lambda found: name(found.group(1)), note) for note in self.notes]

    def budget(self, source_length: int, config: Any, limit: int | None = None) -> int:
        """The most tokens to generate for a source of ``source_length`` tokens (``</s>`` included), within
        ``limit``."""
        budget = self.max_new_tokens or auto_max_new_tokens(source_length, config)
        return budget if limit is None else min(budget, limit)


GREEDY = DecodeOptions()  # greedy search, one output per source (``GREEDY.settings()``: as ``generate()`` takes it)


def with_budget(settings: dict[str, Any], budget: int) -> dict[str, Any]:
    """``settings`` (``DecodeOptions.settings``) with ``budget``, the most tokens to generate, as ``generate()`` takes
    them (the engines that hand them to it: ``encdec.inference.engines``)."""
    return {**settings, "max_new_tokens": budget}


def shipped_search(generation: Any) -> dict[str, Any]:
    """The decoding a run scores its final weights with on validation (``training.average_last``), as ``generate()``
    and ``Seq2SeqTrainer.evaluate`` take it: the beam size of its ``generation`` section (``SAVED``), the decoding
    the model ships with."""
    return {"num_beams": generation.num_beams}


def positions_needed(generation: Any) -> dict[str, int]:
    """The decoder positions a run's ``generation`` section (``SAVED``) needs, by the setting that needs them: its
    budget and the start token."""
    return {f"{SAVED}.max_new_tokens={generation.max_new_tokens} (+1 start token)": generation.max_new_tokens + 1}


# the budget of a source when none is asked: per_source_token x its length + extra, within the model's positions
AUTO_BUDGET = {"per_source_token": 2, "extra": 10}


def auto_max_new_tokens(source_length: int, config: Any) -> int:
    """Default generation budget when none is given: 2 x source length + 10 tokens (``AUTO_BUDGET``), within the
    model's positions."""
    budget = AUTO_BUDGET["per_source_token"] * source_length + AUTO_BUDGET["extra"]
    max_positions = getattr(config, "max_position_embeddings", None)
    return min(budget, max_positions - 1) if max_positions else budget


def resolve(generation_config: Any = None, *, limits: DecodeLimits | None = None, ranked: bool = False,
            languages: Mapping[str, int] | None = None, **asked: Any) -> DecodeOptions:
    """What was asked (``DecodeRequest``'s options by name; any other is a ``generate()`` option, such as
    ``do_sample`` or ``top_k``), the model's ``generation_config`` filling the rest, checked once: an ``OptionError``
    names the option at fault.

    ``limits`` (a server's) bound the beam size (the model's default included), the budget and the length penalty.
    ``n_best`` may exceed the beam size only when sampling (``do_sample``); a beam size left to the model's default
    is widened to ``n_best`` (said in ``notes``). ``split_sentences`` refuses ``ONE_TRANSLATION``. ``ranked``: an
    n-best list of every beam, ordered by log P (``encdec translate --n-best``). ``languages``: the model's, each
    code with the id of its token (``tokenization.language_ids``; empty: a bilingual model), against which
    ``source_lang`` and ``target_lang`` are checked (``check_languages``); None: not known, not checked."""
    names = {item.name for item in declared()}
    request = DecodeRequest(**{key: value for key, value in asked.items() if key in names})
    generate_kwargs = {key: value for key, value in asked.items() if key not in names}
    do_sample = bool(generate_kwargs.pop("do_sample", False))
    if "num_return_sequences" in generate_kwargs:
        raise OptionError("num_return_sequences", "is not an option: `translate` gives one translation per source; "
                                                  "for several, call `translate_n_best` with {n_best}.")
    check_one_translation(request)
    n_best = 1 if request.n_best is None else request.n_best
    default_beams = getattr(generation_config, "num_beams", None) or 1
    beams, notes = beam_size(request.num_beams, default_beams, n_best, do_sample)
    check_beams_and_budget(beams, request.max_new_tokens, limits)
    check_length_penalty(request.length_penalty, limits)
    if n_best < 1 or (n_best > beams and not do_sample):
        raise OptionError("n_best", f"must be between 1 and the beam size ({beams}), got {n_best}; raise "
                                    "{num_beams}.")
    check_bounds(request)
    forced = None if languages is None else check_languages(request.source_lang, request.target_lang, languages)
    configured = getattr(generation_config, "length_penalty", None)
    penalty = request.length_penalty if request.length_penalty is not None else (
        1.0 if configured is None else configured)
    ranked = ranked and n_best > 1
    no_repeat = (request.no_repeat_ngram_size if request.no_repeat_ngram_size is not None
                 else getattr(generation_config, "no_repeat_ngram_size", None))
    return DecodeOptions(
        num_beams=beams, length_penalty=None if beams == 1 else penalty, n_best=n_best,
        max_new_tokens=request.max_new_tokens if request.max_new_tokens is not None else getattr(
            generation_config, "max_new_tokens", None),
        do_sample=do_sample, no_repeat_ngram_size=no_repeat or None,
        generate_kwargs=tuple(sorted(generate_kwargs.items())), ranked=ranked,
        keep_duplicates=request.keep_duplicates and ranked, scores=request.scores, alignments=request.alignments,
        alignment_layer=request.alignment_layer if request.alignments else None,
        alignment_head=request.alignment_head if request.alignments else None, source_lang=request.source_lang,
        target_lang=request.target_lang, forced_bos_token_id=forced, glossary=terms(request),
        beam_length_penalty=penalty, notes=notes)


def terms(request: DecodeRequest) -> Any:
    """The ``glossary`` asked as an ``encdec.glossary.Glossary`` (a mapping of terms is checked and turned into
    one), or None; one that names its language pair (a CSV's) must be the request's, where the request names one."""
    try:
        glossary = as_glossary(request.glossary, "the glossary")
    except ValueError as err:  # braces in a term are not option names (``OptionError.explain``)
        raise OptionError("glossary", "is refused: " + str(err).replace("{", "(").replace("}", ")")) from err
    pairs = zip((glossary.source_lang, glossary.target_lang), (request.source_lang, request.target_lang),
                strict=True) if glossary else ()
    if any(named and asked and named.lower() != asked.lower() for named, asked in pairs):
        raise OptionError("glossary", f"is for {glossary.source_lang}-{glossary.target_lang}, and this translation "
                                      f"is {request.source_lang}-{request.target_lang}; give the glossary of its pair.")
    return glossary


def check_one_translation(request: DecodeRequest) -> None:
    """An ``OptionError`` for ``ONE_TRANSLATION`` asked with an option that gives one translation a source: split
    sentences (a text put together from its sentences) and a glossary (its terms put into the translation)."""
    for name in ONE_TRANSLATION if request.split_sentences else ():
        if getattr(request, name):
            raise OptionError(name, "is not given with {split_sentences}, which gives one translation per text, put "
                                    "together from its sentences'; leave out {" + name + "} or {split_sentences}.")
    for name in ("n_best", "scores") if request.glossary is not None else ():  # its alignment is carried over
        if (request.n_best or 1) > 1 if name == "n_best" else getattr(request, name):  # a list of one is one
            raise OptionError(name, "is not given with {glossary}, which puts its terms into the one translation of "
                                    "each source; leave out {" + name + "} or {glossary}.")


def check_languages(source_lang: str | None, target_lang: str | None, languages: Mapping[str, int]) -> int | None:
    """The id of the token forced first (``forced_bos_token_id``) to translate from ``source_lang`` into
    ``target_lang`` with a model of ``languages`` (code -> token id); None for a bilingual model (no languages),
    which takes no language. A ``LanguageError`` names the model's languages: a code it lacks, a language given to
    a bilingual model, or a multilingual one without both languages."""
    asked = [code for code in (source_lang, target_lang) if code is not None]
    if not languages:
        if asked:
            raise LanguageError(f"This model is bilingual (it has no language tokens) and takes no language; drop "
                                f"the source and target language ({' and '.join(map(repr, asked))}).")
        return None
    named = ", ".join(languages)
    for code in asked:
        if code not in languages:
            raise LanguageError(f"This model has no language {code!r}; its languages are {named}.")
    if source_lang is None or target_lang is None:
        raise LanguageError(f"This model is multilingual ({named}): name its source and target language "
                            "(--source-lang and --target-lang; source_lang and target_lang in Python).")
    return languages[target_lang]


def beam_size(asked: int | None, default: int, n_best: int, do_sample: bool) -> tuple[int, tuple[str, ...]]:
    """The beam size: the one asked, else the model's ``default``, widened to ``n_best`` (an n-best list of K needs
    K beams; sampling draws them from one) and said in a note."""
    if asked is not None or n_best <= default or do_sample:
        return (default if asked is None else asked), ()
    return n_best, (f"{{n_best}} {n_best} needs {n_best} beams; the model decodes with {default} by default, so this "
                    f"run uses {{num_beams}} {n_best}.",)


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


def check_length_penalty(length_penalty: float | None, limits: DecodeLimits | None) -> None:
    """A finite length penalty, within a server's range if any."""
    if length_penalty is not None:
        low, high = limits.length_penalty if limits is not None and limits.length_penalty else (-math.inf, math.inf)
        if not (math.isfinite(length_penalty) and low <= length_penalty <= high):
            within = f" from {low:g} to {high:g}" if math.isfinite(low) else ""
            raise OptionError("length_penalty", f"must be a finite number{within}, got {length_penalty}.")


def check_bounds(request: DecodeRequest) -> None:
    """Each whole-number option of every front end asked within its declared bounds (those checked above have
    their own words; the alignment's layer and head are checked against the model's)."""
    for item in declared(DECODING):
        value, low, high = getattr(request, item.name), item.metadata["minimum"], item.metadata["maximum"]
        if item.metadata["kind"] is not int or value is None or item.name in ("num_beams", "max_new_tokens"):
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= (high or math.inf):
            within = f"from {low:g} to {high:g}" if high is not None else f">= {low:g}"
            raise OptionError(item.name, f"must be a whole number {within}, got {value!r}.")


__all__ = ["AUTO_BUDGET", "COMES_WITH", "GLANCE", "GREEDY", "LANGUAGE_OPTIONS", "LENGTH_PENALTY_RANGE",
           "ONE_TRANSLATION", "DecodeLimits", "DecodeOptions", "DecodeRequest", "alternatives_request", "asked_of",
           "asks_list", "auto_max_new_tokens", "check_languages", "check_offered", "declared", "in_words", "json_name",
           "list_apart", "positions_needed", "python_name", "resolve", "sentence_by_sentence", "shipped_search",
           "translation_only", "with_budget"]
