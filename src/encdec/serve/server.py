"""``encdec serve``: a translation server (FastAPI on uvicorn, the optional extra ``encdec[serve]``).

One server serves one model or several (``ServedModels``, by language pair), each with its own dynamic batcher, and
speaks every API of ``encdec.serve.apis`` over them: the native API (``POST /translate``, ``GET /health``, ``GET
/info``, a page at ``/`` that translates and shows the alignment as a heatmap) and the others there, each under its
own prefix, with the API page ``/docs`` (Swagger UI, served offline). The app is ``encdec.serve.app``'s;
this module checks the address and the port before the models load, configures uvicorn (proxies trusted, keys out of
the access log, requests in flight finished on a stop), and runs it.

With ``--offline-site SITE`` it also serves, at ``/offline/``, the static site that ``encdec export --format web``
wrote: a page that translates in the browser, with no request to this server once loaded.

``encdec serve`` says where it listens once it does, with the port the system gave for ``--port 0``, and says when
a SIGTERM has closed the listening socket (``EncdecServer``). Under the test hook ``ENCDEC_TEST_HOLD_BATCHES``
(``encdec.serve.held_batches``) a line on its stdin releases the held batchers.
"""

import contextlib
import errno
import ipaddress
import logging
import os
import socket
import sys
from collections.abc import Callable
from typing import Any

import psutil

from ..errors import EncdecError
from .keys import SERVER_TIMEOUT, KeyDatabase
from .limits import RedactKeys
from .served_models import build_service, load_models
from .service import ServeLimits

SERVE_INSTALL = "pip install 'encdec[serve]'"
try:
    import fastapi  # noqa: F401 (the app's, checked here)
    import fastapi_offline  # noqa: F401
    import uvicorn
except ImportError as missing:  # the CLI prints this as one line
    raise EncdecError(f"`encdec serve` needs FastAPI and uvicorn; install the extra with `{SERVE_INSTALL}`.") \
        from missing
from .app import configured, create_app  # noqa: E402 (needs FastAPI, checked above)
from .held_batches import release_on_stdin  # noqa: E402
from .schema import ErrorResponse, TranslateResponse, request_schema  # noqa: E402

API_KEY_ENV = "ENCDEC_API_KEY"
STARTUP_FAILURE = 3  # the exit status of uvicorn.run when the server could not start (a port taken)


def check_bind(host: str, api_key: str | None) -> None:
    """Refuse to serve beyond this machine without an API key (``api_key``: the key, or the key database's path)."""
    try:
        local = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = False
    if not local and not api_key:
        raise EncdecError(f"Binding to {host} makes the server reachable from other machines: give an API key with "
                          f"--api-key or the {API_KEY_ENV} environment variable, or keys with --api-keys-db (or bind "
                          "to 127.0.0.1).")


def check_port(host: str, port: int) -> None:
    """Refuse, before the models load, a port that another socket listens on: a probe binds each address of
    ``host`` as uvicorn will (``SO_REUSEADDR``, IPv6 only on IPv6), then lets go (port 0 always binds)."""
    try:
        addresses = {info[:1] + info[4:] for info in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                                        flags=socket.AI_PASSIVE)}
    except socket.gaierror as error:
        raise EncdecError(f"--host {host}: not an address to listen on ({error.strerror}).") from None
    for family, address in sorted(addresses, key=str):
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                probe.bind(address)
            except OSError as error:
                taken = error.errno == errno.EADDRINUSE
                raise EncdecError(f"--port {port}: {'already in use' if taken else error.strerror} on {host}; "
                                  f"{'stop what listens there, or ' if taken else ''}give another port (--port 0 takes "
                                  "a free one).") from None


def server_config(app: Any, host: str, port: int, log_level: str = "info",
                  trusted_proxies: list[str] | None = None) -> Any:
    """uvicorn's configuration of ``encdec serve``: proxy headers read only from ``trusted_proxies`` (uvicorn's
    ``forwarded_allow_ips``; none: never, whatever ``FORWARDED_ALLOW_IPS`` says), requests in flight always finished
    on a stop, and keys redacted from the access log (``limits.RedactKeys``)."""
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, proxy_headers=bool(trusted_proxies),
                            forwarded_allow_ips=list(trusted_proxies or []), timeout_graceful_shutdown=None)
    access_log = logging.getLogger("uvicorn.access")  # configured by uvicorn.Config: the filter comes after
    if not any(isinstance(found, RedactKeys) for found in access_log.filters):
        access_log.addFilter(RedactKeys())
    return config


class EncdecServer(uvicorn.Server):
    """uvicorn's server, saying where it listens once it does (``announce``: the bound address, so ``--port 0``
    gives the port the system chose) and, on SIGTERM or SIGINT, once it takes no more connections."""

    def __init__(self, config: Any, announce: Callable[[list[str]], None]) -> None:
        super().__init__(config)
        self.announce = announce

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self.announce(self.urls())

    def urls(self) -> list[str]:
        """``http://HOST:PORT`` of each listening socket (``localhost`` may bind IPv4 and IPv6 alike)."""
        found = []
        for server in self.servers:
            for sock in server.sockets:
                host, port = sock.getsockname()[:2]
                url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
                found += [url] if url not in found else []
        return found

    async def shutdown(self, sockets: Any = None) -> None:
        for server in self.servers:  # uvicorn's first step too: closed here so that the line below is true
            server.close()
        print("encdec serve: stopping: no new connections; finishing the requests in flight", flush=True)
        await super().shutdown(sockets=sockets)


def serve(models: str | list[str], engine: str = "torch", quantize: str | None = None, dtype: str | None = None,
          host: str = "127.0.0.1", port: int = 8000, api_key: str | None = None, limits: ServeLimits | None = None,
          log_level: str = "info", api_keys_db: str | None = None, metrics: bool = False,
          offline_site: str | None = None, trusted_proxies: list[str] | None = None,
          api_settings: dict[str, dict[str, Any]] | None = None, **settings: Any) -> None:
    """Load the models and serve them until SIGINT or SIGTERM (``encdec serve``); ``port`` 0 takes a free port,
    which the start-up line names. A port in use, a key database that cannot be used and an API's wrong settings
    (``api_settings`` and ``settings``, as ``create_app`` takes them) are refused before the models load;
    ``trusted_proxies``: the proxies whose ``X-Forwarded-For`` names the client (``server_config``)."""
    api_key = api_key or os.environ.get(API_KEY_ENV) or None
    check_bind(host, api_key or api_keys_db)
    check_port(host, port)
    keys = KeyDatabase(api_keys_db, timeout=SERVER_TIMEOUT) if api_keys_db else None
    configured(api_settings, settings, keys)  # the APIs' refusals, before the models load
    served = load_models(models, engine, quantize, dtype, limits)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name, model in served.models.items():
        info = model.service.info()
        print(f"encdec serve: {info['family']} model {model.service.model_dir} ({info['engine']} engine) as {name}",
              flush=True)
    for line in served.notices():
        print(f"encdec serve: {line}", flush=True)
    resident = psutil.Process().memory_info().rss / 2**20

    def announce(urls: list[str]) -> None:  # once bound: the port is the real one, also for --port 0
        print(f"encdec serve: {len(served.models)} model(s) loaded, {resident:,.0f} MiB resident; on "
              f"{' and '.join(urls)} - page at /, API docs at /docs", flush=True)

    app = create_app(served, api_key, keys=keys, metrics=metrics, offline_site=offline_site,
                     api_settings=api_settings, **settings)
    release_on_stdin(app.app.state.batchers)  # the test hook (encdec.serve.held_batches); inert in real runs
    server = EncdecServer(server_config(app, host, port, log_level, trusted_proxies), announce)
    with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run: Ctrl-C ends the command quietly
        server.run()
    if not server.started:  # as uvicorn.run
        sys.exit(STARTUP_FAILURE)


__all__ = ["API_KEY_ENV", "SERVE_INSTALL", "EncdecServer", "ErrorResponse", "TranslateResponse",
           "build_service", "check_bind", "check_port", "create_app", "load_models", "request_schema", "serve",
           "server_config"]
