"""What differs between the transformers releases encdec supports, in one place.

encdec runs on every release from its floor (5.18) to the newest it was tested on (see the README's install
section). The release differences that touch its models live here, each with what changed and in which release;
the rest of the code uses the names below and never compares versions itself. docs/compatibility.md has the whole
table, the changes that needed nothing included.

This file is copied next to the weights by ``save_pretrained``: it imports only transformers, so a folder saved
with one release loads and generates with another.
"""

from __future__ import annotations

import warnings
from dataclasses import fields
from typing import Any

from transformers.modeling_outputs import Seq2SeqLMOutput
from transformers.utils import is_torchdynamo_compiling

# 5.24 renamed `past_key_values` to `cache`: the model's `forward()` argument, the key `generate()` passes the cache
# under (`model_inputs["cache"]`), `prepare_inputs_for_generation`'s parameter, the `ModelOutput` fields
# (`Seq2SeqLMOutput.cache`, `GenerateBeamEncoderDecoderOutput.cache`), `_prepare_cache_for_generation`'s
# `model_kwargs` key and `masking_utils.create_causal_mask`'s parameter. The old name still works on 5.24 but warns
# (a FutureWarning from `@deprecate_kwarg`, a logged warning from `ModelOutput`) until 5.40; 5.18-5.23 know only
# the old name (`generate(cache=...)` is refused there as an unused model kwarg).
# CACHE_NAME is the running release's name: the models return the cache under it and read it from generate's
# kwargs under it. Detected from the output class itself, not from the version string.
CACHE_NAME = "cache" if "cache" in {field.name for field in fields(Seq2SeqLMOutput)} else "past_key_values"

# The names under which Trainer must not collect the cache as a prediction (`config.keys_to_ignore_at_inference`;
# 5.24's own default became ["cache"]). Both, so that a config saved on one release is right on the other.
CACHE_OUTPUT_NAMES = ["past_key_values", "cache"]


# Where the name changed, transformers' own models take the old one through
# `@deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")`: a FutureWarning, until 5.40 removes it.
OLD_CACHE_NAME_REMOVED_IN = "5.40.0"


def cache_argument(cache: Any = None, past_key_values: Any = None, owner: object | None = None) -> Any:
    """The cache a caller passed to ``forward``, under either name: ``cache`` (5.24's name, which ``generate``
    uses there) or ``past_key_values`` (older releases' name, which ``generate`` uses there).

    Where the running release renamed it (``CACHE_NAME`` is ``cache``), the old name warns as transformers' own
    models do (a ``FutureWarning`` naming ``owner``'s class, whose ``forward`` was called); older releases know only
    the old name and nothing warns.

    Both at once: the new name wins, as transformers' ``deprecate_kwarg`` decides, unless its cache is empty and the
    old one's is not. That is 5.24's ``generate`` under PEFT's prefix tuning (PEFT 0.21 passes the prefix as
    ``past_key_values``): at the first step ``generate``'s fresh, empty cache comes beside the prefix, which must be
    used; at the later steps PEFT passes a fresh prefix again beside the running cache, which already holds it."""
    if past_key_values is not None and CACHE_NAME == "cache" and not is_torchdynamo_compiling():
        where = f"{type(owner).__name__}.forward" if owner is not None else "forward"
        warnings.warn(f"`past_key_values` is deprecated and will be removed in version {OLD_CACHE_NAME_REMOVED_IN} "
                      f"for `{where}`. Use `cache` instead.", FutureWarning, stacklevel=3)
    if cache is None or (past_key_values is not None and _is_empty(cache) and not _is_empty(past_key_values)):
        return past_key_values
    return cache


def _is_empty(cache: Any) -> bool:
    """Whether ``cache`` holds no token yet (a cache that cannot say counts as holding some)."""
    length = getattr(cache, "get_seq_length", None)
    return length is not None and length() == 0


def cache_field(cache: Any) -> dict[str, Any]:
    """``{CACHE_NAME: cache}``: the keyword that puts the cache into a ``ModelOutput`` under the running release's
    field name (the old name would work on 5.24 too, with a deprecation warning)."""
    return {CACHE_NAME: cache}


def cache_of(output: Any) -> Any:
    """The cache in a model or ``generate`` output (a ``ModelOutput``), or None, read under the running release's
    field name without a deprecation warning."""
    return output.get(CACHE_NAME) if output is not None else None


__all__ = ["CACHE_NAME", "CACHE_OUTPUT_NAMES", "OLD_CACHE_NAME_REMOVED_IN", "cache_argument", "cache_field", "cache_of"]
