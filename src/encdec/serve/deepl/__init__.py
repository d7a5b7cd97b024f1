"""DeepL's API on ``encdec serve``, under ``/deepl``: an adapter (``adapter``) over the serving core, with its
translation and languages and usage (``api``, ``translation``, ``languages``), its stored glossaries
(``glossaries``), document translation (``documents``), and its request reading and errors (``fields``). The
official clients work unchanged with ``server_url="http://HOST:PORT/deepl"`` (docs/serving.md)."""

from .adapter import ADAPTER, DeepLAdapter
from .api import CORS_HEADERS, PREFIX, DeepLAPI

__all__ = ["ADAPTER", "CORS_HEADERS", "PREFIX", "DeepLAPI", "DeepLAdapter"]
