"""Config checks shared by both model families: each raises a ``ValueError`` naming the field and the fix."""

from __future__ import annotations

from transformers import PretrainedConfig


def check_dropout(name: str, value: float) -> None:
    """Raise a ``ValueError`` naming ``name`` unless ``0 <= value < 1``."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value < 1.0:
        raise ValueError(f"`{name}` must be a probability in [0, 1), got {value!r}; use e.g. 0.1, or 0.0 to disable.")


def check_positive_int(name: str, value: int) -> None:
    """Raise a ``ValueError`` naming ``name`` unless ``value`` is an int >= 1."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}.")


def check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    """Raise a ``ValueError`` naming ``name`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {list(choices)}, got {value!r}.")


def check_special_tokens(config: PretrainedConfig) -> None:
    """Every special-token id must index into the vocabulary (or be None where the field is optional)."""
    for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
        token_id = getattr(config, name, None)
        if token_id is None:
            if name in ("pad_token_id", "decoder_start_token_id"):
                raise ValueError(f"`{name}` is required for an encoder-decoder model; set it to a vocabulary id.")
            continue
        ids = token_id if isinstance(token_id, (list, tuple)) else [token_id]
        for i in ids:
            if not isinstance(i, int) or not 0 <= i < config.vocab_size:
                raise ValueError(
                    f"`{name}`={token_id!r} is outside the vocabulary (vocab_size={config.vocab_size}); "
                    f"use an id in [0, {config.vocab_size}) or enlarge `vocab_size`."
                )


def check_languages(value, name: str = "languages", error: type[Exception] = ValueError) -> list[str] | None:
    """``value`` as a list of language codes, or None for a bilingual model (None or empty); ``error`` naming
    ``name`` unless it is a list of distinct non-empty codes without spaces (``["de", "en", "fr"]``)."""
    if value is None or (isinstance(value, (list, tuple)) and not value):
        return None
    codes = list(value) if isinstance(value, (list, tuple)) else None
    if codes is None or not all(isinstance(code, str) and code and code.split() == [code] for code in codes):
        raise error(f"`{name}` must be a list of language codes such as ['de', 'en', 'fr'] (or None for a "
                    f"bilingual model), got {value!r}.")
    repeated = sorted({code for code in codes if codes.count(code) > 1})
    if repeated:
        raise error(f"`{name}` names {repeated} more than once; list each language once.")
    return codes
