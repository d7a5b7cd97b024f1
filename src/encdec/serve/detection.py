"""The language of a text, among the served source languages: LibreTranslate's ``POST /detect`` and ``source:
"auto"``, DeepL's translation without ``source_lang``.

The identifier is py3langid's, a maintained fork of langid.py (Lui and Baldwin 2012, "langid.py: An Off-the-shelf
Language Identification Tool"): a multinomial Naive Bayes classifier over byte n-grams whose model ships inside its
wheel (nothing is downloaded at run time; docs/serving.md says why this library). Restricted to the served
languages S, its probabilities are renormalised over them: P(l | text) = P(text | l) P(l) / sum_{l' in S}
P(text | l') P(l').

The answer is LibreTranslate's: the 3 most likely languages, ``[{"confidence": 0-100, "language": code}, ...]``, most
likely first. A list of texts is detected as one, as LibreTranslate does: each language's probability is averaged
over the texts, weighted by their lengths. A served code with a script or region is detected by its language
(``zh_Hant`` as ``zh``). One served source language is the answer without a detector.
"""

from __future__ import annotations

import copy
import threading
from functools import lru_cache
from typing import Any

from .pairs import find_route
from .served_models import ServedModels

LIBRARY = "py3langid"
CANDIDATES = 3  # the languages LibreTranslate's /detect lists
_LOADING = threading.Lock()  # the model is read once (about 1 s and 75 MB), whichever request comes first


class DetectionError(ValueError):
    """Texts or served languages whose language cannot be detected: ``{"error": message}`` with ``status``."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@lru_cache(maxsize=1)
def full_identifier() -> Any:
    """py3langid's identifier over all its languages, with probabilities (``norm_probs``)."""
    try:
        from py3langid.langid import MODEL_FILE, LanguageIdentifier
    except ImportError:
        raise DetectionError(f"language detection needs {LIBRARY}: pip install 'encdec[serve]'", 500) from None
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


@lru_cache(maxsize=64)
def restricted_identifier(codes: tuple[str, ...]) -> Any:
    """The identifier over ``codes`` only (its own copy: ``set_languages`` replaces the copy's tables, not the
    model's)."""
    restricted = copy.copy(full_identifier())
    restricted.set_languages(list(codes))
    return restricted


def identifier(codes: tuple[str, ...]) -> Any:
    with _LOADING:
        return restricted_identifier(codes)


def library_codes(served: list[str]) -> dict[str, str]:
    """The library's code of each served language -> the served code; refused where it knows a language not, or
    cannot tell two apart."""
    with _LOADING:
        known = set(full_identifier().labels)
    codes: dict[str, str] = {}
    for code in served:
        language = code.split("_")[0]  # zh_Hant -> zh
        if language not in known:
            raise DetectionError(f"Invalid request: the language of q cannot be detected among the served source "
                                 f"languages: {LIBRARY} does not know {code}")
        if language in codes:
            raise DetectionError(f"Invalid request: the language of q cannot be detected among the served source "
                                 f"languages: {LIBRARY} cannot tell {codes[language]} from {code}")
        codes[language] = code
    return codes


def detect(texts: list[str], among: list[str]) -> list[dict[str, Any]]:
    """LibreTranslate's answer for ``texts`` taken together: up to 3 of the served source languages ``among``, most
    likely first, each with its probability (0 to 100, rounded as LibreTranslate rounds it). A text without letters
    (digits, punctuation), or with no n-gram the model knows, gives no evidence; texts that all give none are
    refused."""
    if not among:
        raise DetectionError("Invalid request: no source language is served, so the language of q cannot be detected")
    if len(among) == 1:
        return [{"confidence": 100.0, "language": among[0]}]
    codes = library_codes(among)
    model = identifier(tuple(sorted(codes)))
    totals = dict.fromkeys(sorted(among), 0.0)  # sum over the texts of len(text) * P(language | text)
    weight = 0
    for text in texts:
        ranked = model.rank(text)
        if not any(c.isalpha() for c in text) or len({probability for _, probability in ranked}) == 1:  # uniform
            continue
        for code, probability in ranked:
            totals[codes[code]] += len(text) * probability
        weight += len(text)
    if not weight:
        raise DetectionError(f"Invalid request: the language of q cannot be detected: it has no letters, or none "
                             f"that {LIBRARY} knows")
    best = sorted(totals.items(), key=lambda item: -item[1])[:CANDIDATES]
    return [{"confidence": float(round(100 * total / weight)), "language": code} for code, total in best]


def served_sources(models: ServedModels, target: str | None = None) -> list[str]:
    """The served source languages, sorted; with ``target``, those with a route into it, directly or through a
    pivot (``encdec.serve.pairs``)."""
    directions = models.directions()
    return sorted(code for code in {hop.source for hop in directions}
                  if target is None or (code != target and find_route(directions, code, target) is not None))


def detect_source(models: ServedModels, texts: list[str], target: str) -> dict[str, Any]:
    """``source: "auto"``: the most likely of the served source languages with a route into ``target`` (so that the
    answer can be translated), as ``{"confidence": ..., "language": ...}``."""
    among = served_sources(models, target)
    if not among:
        raise DetectionError(f"{target} is not supported")  # LibreTranslate's words for a target it does not serve
    return detect(texts, among)[0]


__all__ = ["LIBRARY", "DetectionError", "detect", "detect_source", "served_sources"]
