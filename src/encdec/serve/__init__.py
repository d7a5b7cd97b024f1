"""Serving: ``service`` (checking a request into jobs and decoding a batch of them), ``batcher`` (dynamic batching),
``registry`` (the served models, by language pair), ``keys`` and ``limits`` (API keys in SQLite; requests a minute,
characters a text, a bounded queue), ``server`` (HTTP: the native API, the page and ``metrics``; needs
``encdec[serve]``) and ``libretranslate`` (LibreTranslate's API over the same services)."""

from .batcher import RECORD_LENGTH, BatchRecord, DynamicBatcher
from .registry import LANGUAGE_NAMES, ModelSpec, ServedModel, ServedModels, served_as
from .service import LENGTH_PENALTY_RANGE, DecodeOptions, Job, RequestError, ServeLimits, TranslationService, limits_for

__all__ = ["LANGUAGE_NAMES", "LENGTH_PENALTY_RANGE", "RECORD_LENGTH", "BatchRecord", "DecodeOptions", "DynamicBatcher",
           "Job", "ModelSpec", "RequestError", "ServeLimits", "ServedModel", "ServedModels", "TranslationService",
           "limits_for", "served_as"]
