"""Which served models translate a pair of languages, as LibreTranslate and Argos Translate answer it; every API of
``encdec serve`` asks here (``ServedModels.route``).

- ``served_code``: the served language a request's code names. Codes are compared in any case and with ``-`` or
  ``_`` alike (``DE``, ``zh-hant`` for ``zh_Hant``), as LibreTranslate lowercases them (its ``language.iso2model``);
  LibreTranslate's aliases (``ALIASES``: ``pb`` is ``pt-BR``, ``zh`` is ``zh-Hans``, ``zt`` is ``zh-Hant``) name a
  language served under the other spelling; and a code with a region names its language when that region is not
  served (``pt-BR`` and ``en-US`` reach ``pt`` and ``en``: the lookup of BCP 47 tags, RFC 4647 section 3.4; a script
  such as ``Hant`` is never dropped, since the script is what the text is written in).
- ``find_route``: the models a text goes through from ``source`` to ``target``: none when they are the same language
  (the text comes back as it is: Argos' ``IdentityTranslation``), else the fewest models, a direct one before a
  pivot, as Argos Translate composes a ``CompositeTranslation`` (``argostranslate.translate``: de->en->fr from a de-en
  and an en-fr package) where no package translates a pair. Among routes of as many models the first listed wins,
  model by model (``--model`` order), so the rule is one: the first model listed that serves a direction serves it.

A served direction is a ``Hop``: a model and the pair it translates. A bilingual model serves one direction; a model
of several languages serves each of its directions, and joins the same search.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

# LibreTranslate's aliases (libretranslate/language.py: ``aliases``): its model codes -> the ISO codes it answers with
ALIASES = {"pb": "pt-BR", "zh": "zh-Hans", "zt": "zh-Hant"}
REGION = re.compile(r"_(?:[a-z]{2}|\d{3})$")  # a BCP 47 region subtag at the end: _br, _us, _419


def spelling(code: str) -> str:
    """A code as codes are compared: lowercase, ``_`` between its subtags (``zh-Hant`` -> ``zh_hant``)."""
    return code.strip().lower().replace("-", "_")


SAME = {spelling(a): spelling(b) for a, b in ALIASES.items()} | {spelling(b): spelling(a) for a, b in ALIASES.items()}


def served_code(requested: str, served: Iterable[str]) -> str | None:
    """The served language (as served: ``zh_Hant``) that the code ``requested`` names, or None (module docstring):
    the same code in any case, its LibreTranslate alias, or the code without its region, in that order."""
    by_spelling = {spelling(code): code for code in served}
    key = spelling(requested)
    shorter = REGION.sub("", key)
    for candidate in (key, SAME.get(key), shorter, SAME.get(shorter)):
        if candidate in by_spelling:
            return by_spelling[candidate]
    return None


class Hop(NamedTuple):
    """One served direction: ``model`` (a ``ServedModel``) translating ``source`` into ``target``."""

    model: Any
    source: str
    target: str


@dataclass(frozen=True)
class Route:
    """How a text goes from ``source`` to ``target``: through the models of ``hops`` in turn; none when the two are
    the same language."""

    source: str
    target: str
    hops: tuple[Hop, ...]

    @property
    def pivots(self) -> list[str]:
        """The languages the text passes through on its way (``["en"]`` for de->en->fr), none for a direct route."""
        return [hop.target for hop in self.hops[:-1]]


def find_route(directions: Sequence[Hop], source: str, target: str) -> Route | None:
    """The route from ``source`` to ``target`` through the served ``directions`` (in ``--model`` order), or None:
    a breadth-first search, so the fewest models, the first listed first at every step (module docstring)."""
    if source == target:
        return Route(source, target, ())
    paths: dict[str, tuple[Hop, ...]] = {source: ()}
    frontier = [source]
    while frontier and target not in paths:
        reached = []
        for language in frontier:
            for hop in directions:
                if hop.source == language and hop.target not in paths:
                    paths[hop.target] = (*paths[language], hop)
                    reached.append(hop.target)
        frontier = reached
    return Route(source, target, paths[target]) if target in paths else None


def reachable(directions: Sequence[Hop], source: str) -> list[str]:
    """Every language a route leads to from ``source`` (directly or through a pivot), sorted; not ``source``."""
    targets = {hop.target for hop in directions} - {source}
    return sorted(target for target in targets if find_route(directions, source, target) is not None)


__all__ = ["ALIASES", "Hop", "Route", "find_route", "reachable", "served_code", "spelling"]
