"""Running ``agentwarm serve``: bind the socket, build the engine, serve with uvicorn.

The engine comes from a factory called inside the server's event loop (``agentwarm serve`` uses
:func:`agentwarm.engines.registry.build_engine`).

The server binds its socket before uvicorn starts (``port=0`` picks a free port) and, once it
accepts connections, calls ``on_ready(url)``; the CLI prints
``agentwarm serve: listening on http://HOST:PORT`` then, which scripts and tests wait for.
SIGINT/SIGTERM shut it down gracefully: it stops accepting connections, in-flight requests get
5 s (with a :class:`~agentwarm.server.drain.Drain`: its grace, after which the app ends them
with a proper error, then :data:`~agentwarm.server.drain.MARGIN_S` more before uvicorn cancels
them), and the engine is closed last. Requests the HTTP parser refuses (a head over
:data:`~agentwarm.server.wire.MAX_HEAD_BYTES`: 431) are answered by
:class:`~agentwarm.server.wire.LimitedH11Protocol`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
from collections.abc import Callable
from dataclasses import replace

import uvicorn
from starlette.types import ASGIApp

from agentwarm.engines.base import Engine
from agentwarm.errors import ConfigError
from agentwarm.server.app import ServerConfig, create_app
from agentwarm.server.drain import MARGIN_S, Drain
from agentwarm.server.security import check_exposure, is_loopback
from agentwarm.server.wire import MAX_HEAD_BYTES, LimitedH11Protocol
from agentwarm.warmup.options import WarmupSettings

__all__ = ("bind_socket", "is_loopback", "run_server", "serve_app", "serve_engine", "socket_url")

log = logging.getLogger(__name__)


def bind_socket(host: str, port: int) -> socket.socket:
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise ConfigError(f"cannot resolve host {host!r}: {exc}") from exc
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    sock.set_inheritable(True)
    return sock


async def serve_engine(
    engine_factory: Callable[[], Engine],
    *,
    host: str = "127.0.0.1",
    port: int = 30000,
    config: ServerConfig | None = None,
    log_level: str = "warning",
    on_ready: Callable[[str], None] | None = None,
    insecure_no_api_key: bool = False,
    warmup: WarmupSettings | None = None,
) -> None:
    """Serve the engine ``engine_factory()`` builds (inside this loop) until SIGINT/SIGTERM;
    with ``warmup``, its plan is warmed once the server starts.

    Raises :class:`~agentwarm.errors.ConfigError` before binding when ``host`` is not loopback
    and ``config`` has no API key, unless ``insecure_no_api_key``."""
    config = config or ServerConfig()
    refusal = check_exposure(host, config.api_key, insecure_no_api_key=insecure_no_api_key)
    if refusal is not None:
        raise ConfigError(refusal)
    if not is_loopback(host) and not config.api_key:
        log.warning("serving on %s without an API key: anyone who can reach it can use it", host)
    sock = bind_socket(host, port)
    bound = sock.getsockname()[1]
    url = socket_url(host, bound)
    try:
        engine = engine_factory()
        app = create_app(engine, replace(config, host=host, port=bound), warmup=warmup)
        await serve_app(app, sock, url, log_level=log_level, on_ready=on_ready)
    finally:
        sock.close()


def run_server(
    engine_factory: Callable[[], Engine],
    *,
    host: str = "127.0.0.1",
    port: int = 30000,
    config: ServerConfig | None = None,
    log_level: str = "warning",
    on_ready: Callable[[str], None] | None = None,
    insecure_no_api_key: bool = False,
    warmup: WarmupSettings | None = None,
) -> None:
    """Blocking :func:`serve_engine` (its own event loop)."""
    asyncio.run(
        serve_engine(
            engine_factory,
            host=host,
            port=port,
            config=config,
            log_level=log_level,
            on_ready=on_ready,
            insecure_no_api_key=insecure_no_api_key,
            warmup=warmup,
        )
    )


def socket_url(host: str, port: int) -> str:
    """``http://host:port`` (an IPv6 host in brackets)."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


async def serve_app(
    app: ASGIApp,
    sock: socket.socket,
    url: str,
    *,
    log_level: str = "warning",
    on_ready: Callable[[str], None] | None = None,
    drain: Drain | None = None,
) -> None:
    """Serve ``app`` on the bound ``sock`` with uvicorn until SIGINT/SIGTERM (graceful shutdown
    of 5 s, or ``drain``'s grace: :meth:`Drain.begin` is called as the server stops accepting);
    call ``on_ready(url)`` once it accepts connections."""
    server = _DrainingServer(
        uvicorn.Config(
            app,
            log_level=log_level,
            access_log=log_level in ("debug", "trace"),
            lifespan="on",
            timeout_graceful_shutdown=5 if drain is None else math.ceil(drain.grace_s + MARGIN_S),
            http=LimitedH11Protocol,
            h11_max_incomplete_event_size=MAX_HEAD_BYTES,
        ),
        drain,
    )

    async def announce() -> None:
        while not server.started:
            await asyncio.sleep(0.02)
        if on_ready is not None:
            on_ready(url)

    ready = asyncio.ensure_future(announce())
    try:
        await server.serve(sockets=[sock])
    finally:
        ready.cancel()


class _DrainingServer(uvicorn.Server):
    """uvicorn's server, telling ``drain`` when its shutdown begins."""

    def __init__(self, config: uvicorn.Config, drain: Drain | None) -> None:
        super().__init__(config)
        self.drain = drain

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.drain is not None:
            self.drain.begin()
        await super().shutdown(sockets)
