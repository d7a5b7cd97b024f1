"""What an API is to ``encdec serve``: an adapter, in a module or folder of its own and named once in
``encdec.serve.apis``, that maps its requests onto the serving core (``encdec.serve.core``) and the core's errors
into its answers. The app (``encdec.serve.app``) makes each listed adapter over the same ``Serving`` (models,
batchers, keys and limits) and loops over them: each mounts its routes, and for a request under its ``prefix`` says
which CORS headers go on every answer, whether it reads the API key itself, and how a refusal (the core's
``RequestError``; a request limit, a full queue, a path that is no route) is written. Where an adapter says nothing,
the server's own answer stands: the native API's ``ErrorResponse`` (``encdec.serve.http_errors``).

An API may have settings of its own (its ``Settings``, a dataclass): ``encdec serve``'s flags that its flags module
adds (``encdec.serve.apis``), or the keyword arguments of ``create_app`` and ``serve`` named as its fields. Each
adapter checks its own (``configure``, before the models load) and is made with them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .keys import KeyDatabase
from .limits import Access, Overloaded
from .served_models import ServedModels
from .service import RequestError


@dataclass
class Serving:
    """What every API serves over: the ``models``, each one's dynamic batcher (``batchers``, by model name), the keys
    and limits (``access``) and ``presented_key(headers)`` (the API key of a request's headers, or None)."""

    models: ServedModels
    batchers: dict[str, Any]
    access: Access
    presented_key: Callable[[dict[bytes, bytes]], str | None]


class Adapter:
    """An API: its routes under ``prefix`` (``""``: the paths no other adapter claims), ``cors`` (headers on every
    answer under the prefix, for browser clients) and ``reads_key`` (whether it checks the API key itself: the
    server's guard then leaves the key of its requests to it). Subclasses mount their routes and write the server's
    refusals in their own words; the defaults keep the server's. ``Settings``: its settings (a dataclass; None: it
    has none), which ``configure`` makes and the adapter gets as ``settings``."""

    prefix = ""
    cors: dict[str, str] = {}
    reads_key = False
    Settings: Any = None

    def __init__(self, serving: Serving, settings: Any = None) -> None:
        self.serving = serving
        self.settings = settings

    @classmethod
    def configure(cls, given: dict[str, Any], keys: KeyDatabase | None) -> Any:
        """Its settings from ``given``, the keyword arguments of its ``Settings`` (what its flags module made of
        ``encdec serve``'s arguments, or a caller's), checked before the models load (a wrong one refused in one
        line naming the flag); ``keys``: the server's key database, if any."""
        return None if cls.Settings is None else cls.Settings(**given)

    def owns(self, path: str) -> bool:
        """Whether ``path`` is under the prefix (every path is under ``""``)."""
        return path.startswith(self.prefix)

    def mount(self, app: Any) -> None:
        """Add the API's routes (and its own exception handlers) to ``app``, a FastAPI app."""
        raise NotImplementedError

    def body_limits(self) -> dict[str, tuple[int, str]]:
        """Paths whose body has its own limit, and the flag that sets it (a file upload); the others take
        ``--max-body-bytes``."""
        return {}

    def start(self) -> None:
        """Called as the server starts (after the batchers)."""

    def close(self) -> None:
        """Called as the server stops (after the batchers drained)."""

    def refused(self, request: Any, error: RequestError) -> Any:
        """The answer to a request that the serving core refused (``RequestError``: a field and what is wrong) in
        this API's words; None: the server's (422 naming the field)."""
        return None

    def overloaded(self, request: Any, error: Overloaded) -> Any:
        """The answer to a request refused for now (429, 503) in this API's words; None: the server's."""
        return None

    def not_routed(self, request: Any, error: Any) -> Any:
        """The answer to a path under the prefix that is no route (404) or a method it does not take (405, in
        ``error.status_code``); None: the server's."""
        return None


def adapter_for(adapters: list[Adapter], path: str) -> Adapter:
    """The API that ``path`` belongs to: the adapter of the longest prefix that the path starts with."""
    return max((adapter for adapter in adapters if adapter.owns(path)), key=lambda adapter: len(adapter.prefix))


__all__ = ["Adapter", "Serving", "adapter_for"]
