"""Running ``agentwarm gateway``: bind the socket, build the upstream and the hooks, serve with
uvicorn until SIGINT/SIGTERM.

As ``agentwarm serve`` (:mod:`agentwarm.server.run`): a non-loopback host needs an API key
(:func:`~agentwarm.server.security.check_exposure`); the socket is bound before uvicorn starts
(``port=0`` picks a free one) and, once it accepts connections, ``on_ready(url)`` is called (the
CLI prints ``agentwarm gateway: listening on http://HOST:PORT`` then). At shutdown the gateway
drains (:class:`~agentwarm.server.drain.Drain`: in-flight requests get ``shutdown_grace_s``
seconds, then end with a proper error), then the app's lifespan closes the hooks (which saves
the learned state) and the upstream.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from agentwarm.errors import ConfigError
from agentwarm.gateway.app import GatewayConfig, create_gateway_app
from agentwarm.gateway.types import Hooks
from agentwarm.gateway.upstream import Upstream
from agentwarm.server.run import bind_socket, serve_app, socket_url
from agentwarm.server.security import check_exposure, is_loopback
from agentwarm.warmup.options import WarmupSettings

__all__ = ("serve_gateway",)

log = logging.getLogger(__name__)


async def serve_gateway(
    upstream: Upstream,
    hooks_factory: Callable[[Upstream], Hooks],
    *,
    config: GatewayConfig,
    log_level: str = "warning",
    on_ready: Callable[[str], None] | None = None,
    insecure_no_api_key: bool = False,
    warmup: WarmupSettings | None = None,
) -> None:
    """Serve the gateway on ``config.host``/``config.port`` until SIGINT/SIGTERM; the hooks are
    built inside this loop by ``hooks_factory(upstream)``. Raises
    :class:`~agentwarm.errors.ConfigError` before binding when the host is exposed without an
    API key (unless ``insecure_no_api_key``) or cannot be bound. Closes ``upstream`` in every
    case."""
    try:
        host = config.host
        refusal = check_exposure(host, config.api_key, insecure_no_api_key=insecure_no_api_key)
        if refusal is not None:
            raise ConfigError(refusal.replace("serve on", "run the gateway on"))
        if not is_loopback(host) and not config.api_key:
            log.warning(
                "gateway on %s without an API key: anyone who can reach it can use it", host
            )
        sock = bind_socket(host, config.port)
    except BaseException:
        await upstream.aclose()
        raise
    bound = sock.getsockname()[1]
    url = socket_url(host, bound)
    try:
        hooks = hooks_factory(upstream)
        app = create_gateway_app(upstream, hooks, replace(config, port=bound), warmup=warmup)
        drain = app.state.gateway.drain
        await serve_app(app, sock, url, log_level=log_level, on_ready=on_ready, drain=drain)
    finally:
        sock.close()
        await upstream.aclose()  # a second close (after the lifespan's) does nothing
