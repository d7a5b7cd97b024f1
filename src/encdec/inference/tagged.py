"""Translating text with inline markup: each text translated without its tags, the tags then put back around the
target words aligned to the words they enclosed (``encdec.markup``; Hanneman and Dinu 2020).

The alignment is the one ``encdec translate --alignments`` gives (``encdec.inference.alignment``: a teacher-forced
pass over the source and the model's translation, on the model's alignment layer). Where terms asked for were put
into the translation, it is that alignment carried over to the final words (``Glossary.apply_aligned``), so that the
tags go around the words the translation ends with. The model's attention is needed: an engine without it
(``ctranslate2``, ``onnxruntime``) is refused in one line.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch

from ..errors import EncdecError
from ..markup import IGNORED, read_markup, restore_markup
from .alignment import (
    alignment_weights,
    default_layer,
    encode_pairs,
    parse_pharaoh,
    teacher_forced_attention,
    word_links,
)
from .decoding import decode_lines, resolve_options
from .engines import as_engine, engines_that


def translate_tagged(model: Any, tokenizer: Any, texts: Sequence[str], ignored: Iterable[str] = IGNORED,
                     batch_size: int = 32, **options: Any) -> list[str]:
    """The translation of each text with its markup kept (see the module docstring). Markup that cannot be put back
    well-formed is refused (``encdec.markup.MarkupError``) before the model runs.

    :param ignored: elements whose content is not translated and goes back as written (``code``, ``pre``, ...)
    :param options: ``encdec.inference.translate``'s decoding options (terms, a multilingual model's languages)
    """
    engine = as_engine(model)
    if not engine.spec.alignments:
        raise EncdecError(f"Markup is put back through the model's attention, which the {engine.name} engine does "
                          f"not return; use --engine {' or --engine '.join(engines_that('alignments'))}.")
    marked = [read_markup(text, ignored) for text in texts]
    resolved = resolve_options(engine.generation_config, model_config=engine.config, tokenizer=tokenizer, **options)
    found = [hypotheses[0] for hypotheses in decode_lines(engine, tokenizer, [item.text for item in marked],
                                                          resolved, batch_size)]
    translations = [hypothesis.text for hypothesis in found]
    # the model's own translation is aligned here; one with terms put in comes with its alignment carried over
    tagged = [k for k, item in enumerate(marked) if item.has_markup and translations[k].strip()]
    todo = [k for k in tagged if found[k].alignment is None]
    links = dict(zip(todo, final_links(engine.model, tokenizer, [marked[k].text for k in todo],
                                       [translations[k] for k in todo], resolved.source_lang, resolved.target_lang),
                     strict=True))
    out = list(translations)
    for k in tagged:
        out[k] = restore_markup(marked[k], translations[k], links.get(k) or parse_pharaoh(found[k].alignment))
    for k, item in enumerate(marked):
        if item.has_markup and k not in tagged:  # nothing translated: the tags alone, in their order
            out[k] = restore_markup(item, "", ())
    return out


def final_links(model: Any, tokenizer: Any, sources: list[str], translations: list[str], source_lang: str | None,
                target_lang: str | None) -> list[set[tuple[int, int]]]:
    """The word links of each source and its final translation, on the model's alignment layer."""
    if not sources:
        return []
    layer, found = default_layer(model), []
    with torch.inference_mode():
        for source_ids, target_ids in encode_pairs(tokenizer, sources, translations, source_lang, target_lang):
            _, by_head = teacher_forced_attention(model, source_ids, target_ids)
            found.append(word_links(alignment_weights(by_head, layer), tokenizer, source_ids, target_ids))
    return found


__all__ = ["translate_tagged"]
