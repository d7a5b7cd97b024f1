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


async def translate_split(served: ServedModel, batcher: Any, request: dict[str, Any]) -> list[dict[str, str]]:
    """One answer per text of ``request`` (``POST /translate``'s fields, less the model's choice): its translation,
    put together from its sentences'."""
    service = served.service
    _, texts = service.texts(request.pop("text"))
    options = service.options(**request, split_sentences=True)  # which refuses n-best lists, scores and alignments
    try:
        results = await translate_parts(served, batcher, texts, "text", 0, options)
    except Refusal as error:  # too many sentences
        raise RequestError("text", str(error).removeprefix("Invalid request: ") + ".") from None
    return [{"text": found[0]} for found in results]


__all__ = ["translate_split"]
