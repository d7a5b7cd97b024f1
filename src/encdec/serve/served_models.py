"""The models one server serves, by language pair: ``--model [SRC-TGT=]DIR[,engine=E]...`` parsed (``ModelSpec``),
each loaded once (``load_models``), each model's pair checked against its model card (``served_as``), and the
request's model found (``ServedModels``), or the route of models between two languages (``ServedModels.route``:
``encdec.serve.pairs``). A multilingual model (its tokenizer's language tokens) serves every direction between its
languages, or the one pair given; where a model of one pair and a multilingual one serve the same direction, the
model of one pair serves it unless a request names the multilingual one. ``LANGUAGE_NAMES``: the English names of
common language codes."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..cards import LANGUAGE_CODE as CARD_LANGUAGE_CODE
from ..errors import EncdecError
from ..inference import load_engine
from ..inference.engines import option_choices
from .pairs import Hop, Route, find_route, served_code
from .service import RequestError, ServeLimits, TranslationService

LANGUAGE_CODE = CARD_LANGUAGE_CODE.pattern  # ISO 639-1 or 639-3, optionally a script or region: zh_Hant
MODEL_SPEC = re.compile(rf"^(?:(?P<source>{LANGUAGE_CODE})-(?P<target>{LANGUAGE_CODE})=)?(?P<dir>[^,=]+)"
                        r"(?P<options>(?:,[a-z_]+=[^,]*)*)$")
# English names of common language codes, for the APIs that list languages by name; another code is named by itself
LANGUAGE_NAMES = {
    "ar": "Arabic", "bg": "Bulgarian", "ca": "Catalan", "cs": "Czech", "da": "Danish", "de": "German",
    "el": "Greek", "en": "English", "es": "Spanish", "et": "Estonian", "eu": "Basque", "fa": "Persian",
    "fi": "Finnish", "fr": "French", "ga": "Irish", "he": "Hebrew", "hi": "Hindi", "hr": "Croatian",
    "hu": "Hungarian", "id": "Indonesian", "is": "Icelandic", "it": "Italian", "ja": "Japanese", "ko": "Korean",
    "lt": "Lithuanian", "lv": "Latvian", "mt": "Maltese", "nb": "Norwegian Bokmal", "nl": "Dutch", "pl": "Polish",
    "pt": "Portuguese", "ro": "Romanian", "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian",
    "sr": "Serbian", "sv": "Swedish", "th": "Thai", "tr": "Turkish", "uk": "Ukrainian", "vi": "Vietnamese",
    "zh": "Chinese",
    "iso": "ISO 8601",  # the built-in date task's code for its dates written as ISO 8601 (2021-03-03)
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
        choices = option_choices()  # the backends' registry: engine, quantize and dtype
        known = ", ".join(f"{key}={'|'.join(values)}" for key, values in choices.items())
        if not found:
            raise EncdecError(f"--model {value!r} is not DIR or SRC-TGT=DIR (language codes such as de-en=runs/de-en: "
                              "ISO 639 codes of 2 or 3 lowercase letters, optionally _Script or _REGION as in zh_Hant; "
                              f"optionally followed by ,engine=E ,quantize=Q or ,dtype=D: {known}).")
        options = tuple(tuple(item.split("=", 1)) for item in found["options"].split(",") if item)
        for name, choice in options:
            if choice not in choices.get(name, ()):
                raise EncdecError(f"--model {value!r}: {name}={choice} is not an option; the options are {known}.")
        return cls(found["dir"], found["source"], found["target"], options)

    def engine_options(self, defaults: dict[str, str | None]) -> dict[str, str | None]:
        return {**defaults, **dict(self.options)}


@dataclass
class ServedModel:
    """A model one server serves: its name (its pair, ``de-en``, or its folder's name when it serves no single pair),
    its pair, its service, and a multilingual model's ``languages`` (its tokenizer's; empty for a bilingual one). A
    multilingual model without a pair serves every direction between its languages; ``toward`` gives it for one."""

    name: str
    source: str | None
    target: str | None
    service: TranslationService
    languages: tuple[str, ...] = ()

    @property
    def directions(self) -> tuple[Hop, ...]:
        """The directions it serves: its pair (none when its languages are not known), or every ordered pair of a
        multilingual model's languages."""
        if self.source:
            return (Hop(self, self.source, self.target),)
        return tuple(Hop(self.toward(source, target), source, target) for source in self.languages
                     for target in self.languages if source != target)

    def toward(self, source: str, target: str) -> ServedModel:
        """This model translating ``source`` into ``target`` (its batcher is the same: it keeps its name)."""
        return dataclasses.replace(self, source=source, target=target)

    @property
    def direction(self) -> dict[str, str]:
        """The decoding fields of a multilingual model's direction (``source``, ``target``: ``decoding_options``'s
        JSON names of ``source_lang`` and ``target_lang``); none for a bilingual one."""
        return {"source": self.source, "target": self.target} if self.languages and self.source else {}

    def route(self, source: str | None, target: str | None) -> Route:
        """A request's route through this multilingual model, which it names: from ``source`` into ``target``
        (codes as ``pairs.served_code`` reads them), none for one language; refused naming its languages."""
        named = ", ".join(self.languages)
        found = []
        for field, code in (("source", source), ("target", target)):
            if code is None:
                raise RequestError(field, f"{self.name} is multilingual ({named}): give source and target.")
            if (served := served_code(code, self.languages)) is None:
                raise RequestError(field, f"{self.name} has no language {code!r}; its languages are {named}.")
            found.append(served)
        source, target = found
        return Route(source, target, () if source == target else (Hop(self.toward(source, target), source, target),))

    @property
    def folder(self) -> str:
        return self.service.model_dir.resolve().name if self.service.model_dir else "model"


def served_as(service: TranslationService, source: str | None = None, target: str | None = None) -> ServedModel:
    """``service`` under its language pair: the one given, which its model card must agree with (the card's pair, or
    two of the languages of a card that names more), else the card's pair; named by the pair, or by its folder when
    neither gives one."""
    if service.languages:
        return multilingual(service, source, target)
    languages = tuple(service.card.get("languages", []))  # encdec.cards.card_languages: any number of them
    card_pair = languages if len(languages) == 2 else None
    if source and card_pair and card_pair != (source, target):
        raise EncdecError(f"--model {source}-{target}={service.model_dir}: its model card says "
                          f"{card_pair[0]}-{card_pair[1]}; give the card's pair, or fix the card.")
    if source and len(languages) > 2 and not {source, target} <= set(languages):
        raise EncdecError(f"--model {source}-{target}={service.model_dir}: its model card names the languages "
                          f"{', '.join(languages)}; give two of them, or fix the card.")
    source, target = (source, target) if source else card_pair or (None, None)
    served = ServedModel("", source, target, service)
    return dataclasses.replace(served, name=f"{source}-{target}" if source else served.folder)


def multilingual(service: TranslationService, source: str | None, target: str | None) -> ServedModel:
    """A multilingual ``service`` served in every direction between its languages, named by its folder, or in the
    one pair given (two of its languages), named by the pair."""
    languages = service.languages
    if source and (not {source, target} <= set(languages) or source == target):
        raise EncdecError(f"--model {source}-{target}={service.model_dir}: the model is multilingual; its languages "
                          f"are {', '.join(languages)}: give two of them, or --model DIR for every direction.")
    served = ServedModel("", source, target, service, languages)
    return dataclasses.replace(served, name=f"{source}-{target}" if source else served.folder)


class ServedModels:
    """The models of one server (``--model``, repeatable), found by language pair or by name. A pair is served by the
    first model listed for it (``encdec.serve.pairs``), named by the pair; a later model of the same pair is named by
    its folder, and answers the requests that name it (``model``). A multilingual model serving every direction of
    its languages (named by its folder) comes after the models of one pair: they serve a pair both serve, and it
    serves that pair to the requests that name it."""

    def __init__(self, models: list[ServedModel]) -> None:
        if not models:
            raise EncdecError("Serve at least one model: --model DIR or --model SRC-TGT=DIR.")
        self.models: dict[str, ServedModel] = {}
        for model in models:
            if model.name in self.models and model.source:  # the pair is served already: this one by its folder
                model = dataclasses.replace(model, name=model.folder)
            if model.name in self.models:
                raise EncdecError(f"Two --model arguments are both named {model.name} (a pair is served by the first "
                                  "model listed for it, a later one by its folder's name); give each folder a name "
                                  "of its own.")
            self.models[model.name] = model

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
        only = next(iter(self.models.values())) if len(self.models) == 1 else None
        if only is not None and (source is None and target is None or only.languages):
            return only  # a multilingual one's route refuses a missing language in its words
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

    def notices(self) -> list[str]:
        """A line for each model that a language pair does not reach, for the start-up: one whose languages are not
        known (and what to pass), one whose pair a model listed before it serves, and the directions of a
        multilingual model that a model of one pair serves."""
        lines = []
        pairs = {(model.source, model.target) for model in self.models.values() if model.source}
        for model in self.models.values():
            where = model.service.model_dir or model.name
            if model.languages and not model.source:
                taken = [f"{hop.source}-{hop.target}" for hop in model.directions if (hop.source, hop.target) in pairs]
                if taken:
                    lines.append(f"{where} serves {', '.join(taken)} only to the requests that name it "
                                 f"(model={model.name}); otherwise the model of each of these pairs does")
            elif not model.source:
                lines.append(f"{where} names no languages (its model card has none): it is served by its name only "
                             f"(model={model.name}), not for a language pair; give its pair: --model SRC-TGT={where}")
            elif model.name != f"{model.source}-{model.target}":
                lines.append(f"{where} translates {model.source}-{model.target}, which the model listed first for it "
                             f"serves; it answers the requests that name it (model={model.name})")
        return lines

    def directions(self) -> list[Hop]:
        """Every served direction, in ``--model`` order: the models of one pair first, then those serving every
        direction of their languages (the rule of the class docstring)."""
        ordered = sorted(self.models.values(), key=lambda model: not model.source)  # a stable sort
        return [hop for model in ordered for hop in model.directions]

    def languages(self) -> list[str]:
        """Every served language, source or target, in the order the models name them."""
        return list(dict.fromkeys(code for hop in self.directions() for code in (hop.source, hop.target)))

    def pivoted(self) -> list[Route]:
        """The routes of every pair that no served model translates directly but a pivot reaches (de->en->fr with a
        de-en and an en-fr model), each source's in ``languages`` order, its targets sorted."""
        directions, languages = self.directions(), self.languages()
        routes = (find_route(directions, source, target) for source in languages for target in sorted(languages))
        return [route for route in routes if route is not None and len(route.hops) > 1]  # fewest models: direct is 1

    def code(self, requested: str) -> str:
        """The served language that ``requested`` names (``pairs.served_code``: any case, LibreTranslate's
        aliases, a region dropped), else ``requested`` as it is."""
        return served_code(requested, self.languages()) or requested

    def route(self, source: str | None = None, target: str | None = None, model: str | None = None) -> Route:
        """The native API's route of a request: the model it names, else the route from ``source`` to ``target``
        (``pairs.find_route``: none for one language, a direct model before a pivot), else the only model."""
        if model is not None or source is None or target is None:
            found = self.pick(source, target, model)  # by name, or the only model; else refused in its words
            if found.languages and not found.source:  # a multilingual model, in the direction asked
                return found.route(source, target)
            return Route(found.source or "", found.target or "", (Hop(found, found.source, found.target),))
        source, target = self.code(source), self.code(target)
        found = find_route(self.directions(), source, target) if {source, target} <= {*self.languages()} else None
        if found is None:
            raise RequestError("target", f"no model translates {source} into {target}; the served ones are "
                                         f"{self.names()}.")
        return found


def build_service(model_dir: str, engine: str | None = "torch", quantize: str | None = None,
                  dtype: str | None = None, limits: ServeLimits | None = None) -> TranslationService:
    translator, tokenizer = load_engine(model_dir, engine or "torch", quantize=quantize, dtype=dtype)
    return TranslationService(translator, tokenizer, limits, model_dir=model_dir)


def load_models(models: str | list[str], engine: str = "torch", quantize: str | None = None,
                dtype: str | None = None, limits: ServeLimits | None = None) -> ServedModels:
    """The ``--model`` arguments (``[SRC-TGT=]DIR[,engine=E,quantize=Q,dtype=D]``), each loaded once, with the
    command's engine options as defaults; every refusal (a malformed value, two models of one name, a pair that the
    card contradicts) comes before the server starts."""
    specs = [ModelSpec.parse(value) for value in ([models] if isinstance(models, str) else models)]
    defaults = {"engine": engine, "quantize": quantize, "dtype": dtype}
    return ServedModels.load(specs, lambda model_dir, options: build_service(model_dir, limits=limits, **options),
                             defaults)


__all__ = ["LANGUAGE_NAMES", "ModelSpec", "ServedModel", "ServedModels", "build_service", "load_models",
           "served_as"]
