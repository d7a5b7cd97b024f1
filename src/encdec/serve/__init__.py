"""Serving: ``service`` (checking a request into jobs and decoding a batch of them), ``batcher`` (dynamic batching),
``served_models`` (the served models, by language pair), ``pairs`` (which of them translate a pair: codes, pivots),
``core`` (the request path every API shares), ``keys`` and ``limits`` (API keys in SQLite; requests a minute,
characters a text, a bounded queue), and the HTTP server (``server``, ``app``; needs ``encdec[serve]``) with the APIs
that ``apis`` lists, each an adapter (``adapter``) in a module or folder of its own."""

from .batcher import RECORD_LENGTH, DynamicBatcher
from .served_models import LANGUAGE_NAMES, ModelSpec, ServedModel, ServedModels, served_as
from .service import LENGTH_PENALTY_RANGE, DecodeOptions, Job, RequestError, ServeLimits, TranslationService, limits_for

__all__ = ["LANGUAGE_NAMES", "LENGTH_PENALTY_RANGE", "RECORD_LENGTH", "DecodeOptions", "DynamicBatcher", "Job",
           "ModelSpec", "RequestError", "ServeLimits", "ServedModel", "ServedModels", "TranslationService",
           "limits_for", "served_as"]
