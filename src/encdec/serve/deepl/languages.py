"""DeepL's language codes over the served languages.

DeepL names languages in upper case (``DE``, ``EN``), and a target language by its variant where it has them
(``EN-GB``, ``EN-US``, ``PT-BR``, ``PT-PT``, ``ZH-HANS``, ``ZH-HANT``, ``ES-419``). A served language is listed under
its DeepL code, a target language with DeepL's variants as well (a model of ``en`` serves ``EN-GB`` and ``EN-US``
alike: it has one English); a code asked for is read by ``encdec.serve.pairs.served_code`` (any case, a region
dropped when it is not served), so ``EN-US`` reaches ``en``. Glossaries name languages by their base code in lower
case (``de``, ``en``), as DeepL's glossary endpoints do.
"""

from __future__ import annotations

from typing import Any

from ..pairs import served_code
from ..served_models import LANGUAGE_NAMES

VARIANTS = {  # DeepL's target variants of a language, and their names in its /v2/languages
    "en": {"EN-GB": "English (British)", "EN-US": "English (American)"},
    "pt": {"PT-BR": "Portuguese (Brazilian)", "PT-PT": "Portuguese (European)"},
    "zh": {"ZH-HANS": "Chinese (simplified)", "ZH-HANT": "Chinese (traditional)"},
    "es": {"ES-419": "Spanish (Latin American)"},
}


def deepl_code(served: str) -> str:
    """A served code as DeepL writes it: ``de`` -> ``DE``, ``pt_BR`` -> ``PT-BR``."""
    return served.replace("_", "-").upper()


def base_code(code: str) -> str:
    """A code's language alone, lower case, as glossaries name it: ``EN-US`` -> ``en``."""
    return code.replace("_", "-").split("-")[0].lower()


def name_of(served: str) -> str:
    return LANGUAGE_NAMES.get(served, LANGUAGE_NAMES.get(base_code(served), served))


def source_languages(sources: list[str]) -> list[dict[str, Any]]:
    """``GET /v2/languages`` (``type=source``): each served source language."""
    return [{"language": deepl_code(code), "name": name_of(code)} for code in sorted(sources)]


def target_languages(targets: list[str]) -> list[dict[str, Any]]:
    """``GET /v2/languages?type=target``: each served target language, with DeepL's variants of it; none supports
    ``formality`` (a model has one register)."""
    found: dict[str, str] = {}
    for code in sorted(targets):
        variants = VARIANTS.get(code.lower(), {})
        found.update(variants or {deepl_code(code): name_of(code)})
    return [{"language": code, "name": name, "supports_formality": False} for code, name in sorted(found.items())]


def read_code(requested: Any, served: list[str]) -> str | None:
    """The served language a DeepL code names (``EN-US`` -> ``en``), or None."""
    return served_code(requested, served) if isinstance(requested, str) and requested.strip() else None


__all__ = ["VARIANTS", "base_code", "deepl_code", "read_code", "source_languages", "target_languages"]
