"""LibreTranslate's API on ``encdec serve``, under ``/libretranslate/``: an adapter (``adapter``) over the serving
core, with its routes and request reading (``api``), its routing (``routes``: repeated slashes, 404 and 405,
preflights), language detection for ``/detect`` and ``source: "auto"`` (``encdec.serve.detection``), and file
translation (``files``, over ``encdec.serve.documents``), and its flags of
``encdec serve`` (``flags``, standard library only)."""

from .adapter import ADAPTER, LibreTranslateAdapter
from .api import CORS_HEADERS, PREFIX, LibreTranslateAPI

__all__ = ["ADAPTER", "CORS_HEADERS", "PREFIX", "LibreTranslateAPI", "LibreTranslateAdapter"]
