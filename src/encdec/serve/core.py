"""The serving core: the request path that every API of ``encdec serve`` shares, in no API's words. An API's adapter
(``encdec.serve.apis``) reads its request, calls the core once, and writes the answer and the errors in its own
dialect; the core raises only ``service.RequestError`` (a field and what is wrong with it).

- ``answers``: a request of the native kind (texts and decoding options), one answer per text: each text a job
  (``service.TranslationService.jobs``), or when it asks, sentence by sentence (``translate_parts``), a
  sentence over ``--max-source-tokens`` then cut to it, with a warning in the log, where a text over it is refused.
- ``translate_parts``: each text cut into its lines, each line into its sentences (``inference.sentences``, in the
  model's source language), every sentence a job on the model's batcher, and the text put back together around the
  translations; with ``alternatives``, up to that many other versions from the sentences' n-best lists. Text with
  markup (``html``) goes through ``encdec.serve.tagged_text`` instead, which keeps the tags on their words;
  ``plain_texts`` gives its text between the tags (``html_parts``), what a language is detected on.

- ``translate_route`` and ``route_answers``: the same along a route of models (``encdec.serve.pairs``): none when
  the source and target languages are the same (the texts come back as they are), one, or several through pivot
  languages, each model's translations the next one's texts.
- ``nothing_to_translate``: a text (or a line, a sentence, the text between two tags) without a letter or a digit,
  or one number alone, comes back as it is, and is not decoded.

A request crosses into the engine once each way: one pass on the CPU threads (``encdec.serve.offload``) resolves its
options, cuts its texts and tokenizes them into jobs; the batcher decodes them (``decoding.decode_batch``); one pass
puts the texts together.
"""

from __future__ import annotations

import asyncio
import dataclasses
import html
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

from ..decoding_options import alternatives_request, sentence_by_sentence, translation_only
from ..inference.decoding import DecodeOptions
from ..inference.sentences import Parts, join, line_parts, pieces_to_translate, split_parts
from .offload import off_loop
from .pairs import Route
from .served_models import ServedModel
from .service import RequestError, TranslationService

MAX_PIECES = 1024  # sentences one request may hold (a body of 1 MB could hold 500,000)
NO_TRANSLATION = {"script", "style"}  # HTML elements whose content is not text to translate
FORMATS = ("text", "html")
NUMBER = re.compile(r"[+-]?\d+(?:[.,]\d+)?%?")  # one number alone: 42, -3.5, 2,5, 99%


class TooManySentences(RequestError):
    """A request of more sentences than ``MAX_PIECES``: ``count`` and ``limit``."""

    def __init__(self, count: int, limit: int) -> None:
        super().__init__("text", f"{count} sentences exceed the limit of {limit} per request; send them in several "
                                 "requests.")
        self.count, self.limit = count, limit


class Segments(HTMLParser):
    """HTML cut into markup (kept as written), text (between tags, entities decoded: to translate when it is not
    blank) and raw content (of script and style elements, kept as written)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[tuple[str, str]] = []  # (markup | text | raw, the piece)
        self.skipping = 0

    def add(self, kind: str, piece: str) -> None:
        if kind == "text" and self.parts and self.parts[-1][0] == "text":  # "Tom & Jerry <3" comes in three calls
            self.parts[-1] = ("text", self.parts[-1][1] + piece)
        else:
            self.parts.append((kind, piece))

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.add("markup", self.get_starttag_text() or "")
        self.skipping += tag in NO_TRANSLATION

    def handle_startendtag(self, tag: str, attrs: Any) -> None:
        self.add("markup", self.get_starttag_text() or "")

    def handle_endtag(self, tag: str) -> None:
        self.add("markup", f"</{tag}>")
        self.skipping -= tag in NO_TRANSLATION and self.skipping > 0

    def handle_data(self, data: str) -> None:
        self.add("raw" if self.skipping else "text", data)

    def handle_comment(self, data: str) -> None:
        self.add("markup", f"<!--{data}-->")

    def handle_decl(self, decl: str) -> None:
        self.add("markup", f"<!{decl}>")

    def unknown_decl(self, data: str) -> None:  # <![CDATA[x]]> comes as "CDATA[x"; <![if x]> as "if x"
        self.add("markup", f"<![{data}]]>" if data.startswith("CDATA[") else f"<![{data}]>")

    def handle_pi(self, data: str) -> None:
        self.add("markup", f"<?{data}>")


def nothing_to_translate(text: str) -> bool:
    """Whether ``text`` holds nothing a model translates: no letter and no digit (emoji, symbols, punctuation,
    spaces: LibreTranslate's ``detect_translatable`` skips emoji and spaces alone), or one number alone (``42``,
    ``-3.5``, ``99%``). Digits with other punctuation are text: the date task translates ``03.03.2021``."""
    stripped = text.strip()
    return not any(character.isalnum() for character in stripped) or NUMBER.fullmatch(stripped) is not None


def html_parts(text: str) -> list[tuple[bool, str]]:
    """(to translate, piece) of an HTML text: text between tags to translate (entities decoded), everything else
    as it is to be written back (markup and script as written, blank text with its entities)."""
    parser = Segments()
    parser.feed(text)
    parser.close()
    return [(True, piece) if kind == "text" and piece.strip() else
            (False, html.escape(piece, quote=False) if kind == "text" else piece) for kind, piece in parser.parts]


def plain_texts(texts: list[str], text_format: str) -> list[str]:
    """The texts without their markup: in HTML, the pieces of text between tags."""
    if text_format == "text":
        return texts
    return [piece for text in texts for translate, piece in html_parts(text) if translate]


def decode_options(model: ServedModel, alternatives: int) -> tuple[DecodeOptions, DecodeOptions | None]:
    """The options of a request's translation, and of its alternatives if it asks for some, in the model's direction
    (``ServedModel.direction``). The translation is the model's default decoding, whatever ``alternatives`` (what
    ``encdec translate`` and the native API give); the alternatives come from the n-best list that ``encdec translate
    --n-best alternatives+1`` prints: every beam of a search at least that wide (the model's beam, if wider), ordered
    by log P, each text once."""
    service, direction = model.service, model.direction
    if not alternatives:
        return service.options(**direction), None
    return (service.options(**direction),
            service.options(**alternatives_request(alternatives), **direction, ranked=True))


@dataclass(frozen=True)
class Plan:
    """How a request's texts are translated part by part: ``text_format`` (``text``; ``html`` is read by the APIs,
    which call ``tagged_text.translate_markup`` for it), up to ``alternatives`` other versions, ``decoding`` (options
    a caller asked for, else the model's default decoding) and at most ``max_pieces`` sentences (None: no bound)."""

    text_format: str = "text"
    alternatives: int = 0
    decoding: dict[str, Any] | None = None
    max_pieces: int | None = MAX_PIECES


async def translate_parts(model: ServedModel, batcher: Any, texts: list[str], plan: Plan | None = None
                          ) -> list[list[str]]:
    """Each text's translation, then up to ``plan.alternatives`` distinct others (``decode_options``): every
    sentence of a line (``inference.sentences`` in the model's source language) decoded by the model's batcher, the
    rest of the text kept around the translations; a sentence over the source limit is cut to it, with a warning in
    the log. The k-th alternative of a text takes the k-th hypothesis of each sentence (its translation where it has
    fewer); one equal to the translation or to an earlier one is left out."""
    plan = plan or Plan()
    if plan.text_format != "text":
        raise ValueError("text with markup is translated by tagged_text.translate_markup, not by translate_parts")
    cut, jobs, listed = await off_loop(sentence_jobs, model, texts, plan)
    answers = await decoded(batcher, jobs)
    return await off_loop(put_together, cut, answers, plan.alternatives, listed)


async def decoded(batcher: Any, jobs: list[Any]) -> list[dict[str, Any]]:
    """The answers of ``jobs``, submitted to ``batcher`` (a ``DynamicBatcher``, or a ``FairShare`` in front of one)."""
    return await asyncio.gather(*(asyncio.wrap_future(future) for future in batcher.submit(jobs)))


def sentence_jobs(model: ServedModel, texts: list[str], plan: Plan) -> tuple[list[Parts], list[Any], bool]:
    """Each text cut into its parts (lines, sentences), the jobs of its sentences (decoded with the plan's
    options, and for its alternatives with their n-best lists too), and whether those lists were asked; refused over
    ``plan.max_pieces`` sentences."""
    service = model.service
    main, others = decode_options(model, plan.alternatives)
    main = main if plan.decoding is None else service.options(**plan.decoding, **model.direction)
    cut = [[(translate and not nothing_to_translate(piece), piece) for translate, piece in
            split_parts(line_parts(text), model.source)]
           for text in texts]
    todo = [(i, piece) for i, parts in enumerate(cut) for piece in pieces_to_translate([parts])]
    if plan.max_pieces is not None and len(todo) > plan.max_pieces:
        raise TooManySentences(len(todo), plan.max_pieces)
    jobs = []
    for i, piece in todo:
        try:
            jobs += service.jobs_for(piece, main, cut=True)
            if others is not None:
                jobs += service.jobs_for(piece, others, n_best_list=True, cut=True)
        except RequestError as error:
            raise RequestError(f"text[{i}]" if len(texts) > 1 else "text", error.reason) from None
    return cut, jobs, others is not None


def put_together(cut: list[Parts], answers: list[Any], alternatives: int, listed: bool) -> list[list[str]]:
    """Each text's translation and alternatives (``translate_parts``) from its parts and its sentences' answers, in
    the order of ``sentence_jobs``."""
    found_answers, results = iter(answers), []
    for parts in cut:
        found = []  # per piece: its translation, and its n-best list
        for translate, _ in parts:
            if translate:
                best = next(found_answers)["text"]
                found.append((best, [item["text"] for item in next(found_answers)] if listed else []))
        text = join(parts, [best for best, _ in found])
        versions = [join(parts, [listed[k] if k < len(listed) else best for best, listed in found])
                    for k in range(alternatives + 1)]
        results.append([text, *list(dict.fromkeys(v for v in versions if v != text))[:alternatives]])
    return results


async def answers(served: ServedModel, batcher: Any, request: dict[str, Any], checked: bool = False
                  ) -> list[tuple[dict[str, Any], list[dict[str, Any]] | None]]:
    """One answer per text of ``request`` (the text and the decoding fields of ``POST /translate``): its translation,
    with the score and alignment it asked for, and its n-best list if asked (else None;
    ``service.TranslationService.per_text``); translated sentence by sentence if asked
    (``decoding_options.sentence_by_sentence``), its translation put together from its sentences'. A text with
    nothing to translate (``nothing_to_translate``) is its own answer, decoded by no model. ``checked``: the texts
    are what an earlier model of a route translated, not checked again (an empty one is its own answer)."""
    given = request["text"]
    if not checked:
        fields, texts = served.service.texts(given)
    else:  # an earlier model's translations, named as the request named its texts
        texts = [given] if isinstance(given, str) else given
        fields = ["text"] if isinstance(given, str) else [f"text[{i}]" for i in range(len(texts))]
    todo = [i for i, text in enumerate(texts) if not nothing_to_translate(text)]
    found = [({"text": text}, None) for text in texts]
    if todo:
        try:
            decoded_answers = await translated(served, batcher, {**request, "text": [texts[i] for i in todo]})
        except RequestError as error:  # named as the request names the text: text[k] of the texts decoded
            at = re.fullmatch(r"text(?:\[(\d+)\])?", error.field)
            if at is None or isinstance(error, TooManySentences):  # a field of its own, or the request's count
                raise
            raise RequestError(fields[todo[int(at[1] or 0)]], error.reason) from None
        for i, answer in zip(todo, decoded_answers, strict=True):
            found[i] = answer
    return found


async def translated(served: ServedModel, batcher: Any, request: dict[str, Any]
                     ) -> list[tuple[dict[str, Any], list[dict[str, Any]] | None]]:
    """``answers`` of texts to translate, every one decoded."""
    request = dict(request)
    if not sentence_by_sentence(request):
        jobs = await off_loop(served.service.jobs, **request, **served.direction)
        return served.service.per_text(jobs, await decoded(batcher, jobs))
    _, texts = served.service.texts(request.pop("text"))
    # resolve refuses n-best lists, scores and alignments sentence by sentence
    results = await translate_parts(served, batcher, texts, Plan(decoding=request))
    return [({"text": found[0]}, None) for found in results]


async def route_answers(route: Route, batchers: dict[str, Any], request: dict[str, Any],
                        check: TranslationService) -> list[tuple[dict[str, Any], list[dict[str, Any]] | None]]:
    """``answers`` along ``route``: each step decodes with the request's options, and the last gives what the request
    asks (its scores, n-best list and alignment are the last step's, of the text in the pivot language); no step
    (one language): the texts as they are, checked by ``check`` as any text is."""
    if not route.hops:
        return [({"text": text}, None) for text in check.texts(request["text"])[1]]
    for k, hop in enumerate(route.hops[:-1]):
        found = await answers(hop.model, batchers[hop.model.name], translation_only(request), k > 0)
        request = {**request, "text": [answer["text"] for answer, _ in found] if isinstance(request["text"], list)
                   else found[0][0]["text"]}
    last = route.hops[-1].model
    return await answers(last, batchers[last.name], request, len(route.hops) > 1)


async def translate_route(route: Route, batchers: dict[str, Any], texts: list[str], plan: Plan | None = None
                          ) -> list[list[str]]:
    """``translate_parts`` along ``route``: each model's translations are the next one's texts, decoded as ``plan``
    says, the alternatives the last model's; no model (one language): the texts as they are."""
    plan = plan or Plan()
    if not route.hops:
        return [[text] for text in texts]
    for hop in route.hops[:-1]:
        texts = [found[0] for found in await translate_parts(hop.model, batchers[hop.model.name], texts,
                                                             dataclasses.replace(plan, alternatives=0))]
    last = route.hops[-1].model
    return await translate_parts(last, batchers[last.name], texts, plan)


__all__ = ["FORMATS", "MAX_PIECES", "Plan", "TooManySentences", "answers", "decode_options", "html_parts",
           "nothing_to_translate", "plain_texts", "route_answers", "translate_parts", "translate_route"]
