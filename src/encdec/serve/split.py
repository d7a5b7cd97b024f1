"""The native API's ``split_sentences``: each text translated sentence by sentence, as the LibreTranslate API
translates (``libretranslate.translate_parts``: lines and sentences cut by ``inference.sentences``, decoded on the
model's batcher, the text put back together around them), with the request's decoding options. A sentence over
``--max-source-tokens`` is cut to it, with a warning in the log, where a text over it without ``split_sentences``
is refused."""

from __future__ import annotations

from typing import Any

from .libretranslate import Refusal, translate_parts
from .registry import ServedModel
from .service import RequestError

ONE_TRANSLATION = ("n_best", "return_scores", "return_alignments")  # what a text put together from sentences lacks


async def translate_split(served: ServedModel, batcher: Any, request: dict[str, Any]) -> list[dict[str, str]]:
    """One answer per text of ``request`` (``POST /translate``'s fields, less the model's choice): its translation,
    put together from its sentences'."""
    service = served.service
    _, texts = service.texts(request.pop("text"))
    for name in ONE_TRANSLATION:
        if request.get(name):
            raise RequestError(name, "split_sentences gives one translation per text, put together from its "
                                     f"sentences', without scores, alignments or n-best lists; leave out {name} or "
                                     "split_sentences.")
    options = service.options(**request)
    try:
        results = await translate_parts(served, batcher, texts, "text", 0, options)
    except Refusal as error:  # too many sentences
        raise RequestError("text", str(error).removeprefix("Invalid request: ") + ".") from None
    return [{"text": found[0]} for found in results]


__all__ = ["translate_split"]
