"""Who may talk to ``agentwarm serve`` (and ``agentwarm gateway``) and how big a request may be.

Rules (each one decided here, used by :mod:`agentwarm.server.app` and :mod:`agentwarm.server.run`,
and by the gateway's :mod:`agentwarm.gateway.app` and :mod:`agentwarm.gateway.run`; the messages
say "this server" so that they hold for both):

* **Exposure** (:func:`check_exposure`): a server bound to anything but loopback needs an API key,
  unless the operator passes ``--insecure-no-api-key``.
* **API key** (:class:`APIKeyGuard`): with one, every path but ``/health*`` and ``/metrics``
  needs ``Authorization: Bearer <key>`` (as SGLang's ``--api-key``), else **401**.
* **Host / Origin** (:class:`HostGuard`, only without an API key): a keyless server trusts anyone
  who can reach it, which a web page can do through the browser: DNS rebinding (a page of
  ``evil.example`` re-points its name at 127.0.0.1; its requests then carry
  ``Host: evil.example``) or a plain cross-site ``POST``. So a request's ``Host`` must be a
  loopback name/address (``localhost``, ``127.0.0.0/8``, ``[::1]``, any port) or the bound host
  (and, on a wildcard bind such as ``0.0.0.0``, any IP literal: rebinding needs a name), else
  **421**; a non-``GET`` request with an ``Origin`` header must come from such a host too, else
  **403**. With an API key neither check applies: a browser cannot attach a key it does not know,
  and gateways in front of the server rewrite ``Host`` freely.
* **JSON bodies** (:func:`is_json_content_type`): ``Content-Type: application/json`` (parameters
  such as ``charset`` allowed), else **415**; no HTML form can send it cross-site.
* **Identifier headers** (:class:`HeaderLimit`): a header that names a session, a node or a
  routing key (``X-SMG-Routing-Key``; the gateway's ``X-Agentwarm-Session`` and
  ``X-Agentwarm-Node`` too) longer than :data:`MAX_ID_HEADER_BYTES` → **431** naming the header
  and the limit (a head over the HTTP parser's limit is refused before, also with 431:
  :mod:`agentwarm.server.wire`).
* **Body size** (:func:`default_max_request_bytes`): by default
  ``BYTES_PER_CONTEXT_TOKEN * max_context + BODY_SLACK_BYTES`` (192 KiB for an 8,192-token
  model), at most ``MAX_DEFAULT_REQUEST_BYTES``: a request for the whole context as JSON
  ``input_ids`` takes at most ~8 bytes per token, as escaped text ~6 (byte tokenizer) to ~16.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = (
    "BODY_SLACK_BYTES",
    "BYTES_PER_CONTEXT_TOKEN",
    "MAX_DEFAULT_REQUEST_BYTES",
    "MAX_ID_HEADER_BYTES",
    "PUBLIC_PATHS",
    "APIKeyGuard",
    "ErrorResponse",
    "HeaderLimit",
    "HostGuard",
    "check_exposure",
    "default_max_request_bytes",
    "is_json_content_type",
    "is_loopback",
)

BYTES_PER_CONTEXT_TOKEN = 16
BODY_SLACK_BYTES = 64 * 1024
MAX_DEFAULT_REQUEST_BYTES = 8 * 1024 * 1024
_WILDCARDS = frozenset({"0.0.0.0", "::", ""})
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
#: Path prefixes a server with an API key answers without it (probes and scrapers).
PUBLIC_PATHS = ("/health", "/metrics")
#: The longest value of a header that names a session, a node or a routing key, in bytes.
MAX_ID_HEADER_BYTES = 4096


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host.lower().rstrip(".") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_exposure(host: str, api_key: str | None, *, insecure_no_api_key: bool) -> str | None:
    """The reason a server on ``host`` must not start (None when it may): a non-loopback
    ``host`` without ``api_key``, unless ``insecure_no_api_key``."""
    if api_key or insecure_no_api_key or is_loopback(host):
        return None
    return (
        f"refusing to serve on {host} without an API key (anyone who can reach it could use "
        "it): pass --api-key KEY or set AGENTWARM_API_KEY, or bind to 127.0.0.1, or accept "
        "the risk with --insecure-no-api-key"
    )


def default_max_request_bytes(max_context: int | None) -> int:
    """The body limit for a model of ``max_context`` tokens (see the module docstring); the
    cap ``MAX_DEFAULT_REQUEST_BYTES`` when the context is unknown."""
    if not max_context or max_context <= 0:
        return MAX_DEFAULT_REQUEST_BYTES
    return min(BYTES_PER_CONTEXT_TOKEN * max_context + BODY_SLACK_BYTES, MAX_DEFAULT_REQUEST_BYTES)


def is_json_content_type(value: str | None) -> bool:
    """``application/json``, with or without parameters (``; charset=utf-8``)."""
    return value is not None and value.split(";", 1)[0].strip().lower() == "application/json"


def _split_host(value: str) -> str:
    """``host`` of a ``Host`` header value ``host[:port]`` / ``[v6][:port]``, lower-cased."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


ErrorResponse = Callable[[int, str, str], Response]
"""``(status, message, kind)`` -> the server's JSON error response."""


class HostGuard:
    """ASGI middleware: the Host and Origin checks of a keyless server bound to ``bound_host``;
    a refusal is answered with ``error(status, message, kind)``."""

    def __init__(self, app: ASGIApp, bound_host: str, error: ErrorResponse) -> None:
        self.app = app
        self.error = error
        self.bound = _split_host(bound_host)
        self.wildcard = self.bound in _WILDCARDS

    def allowed(self, host: str) -> bool:
        """Whether ``host`` (no port, no brackets) names this server safely."""
        if is_loopback(host) or host == self.bound:
            return True
        if self.wildcard:
            try:
                ipaddress.ip_address(host)
            except ValueError:
                return False
            return True
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        raw_host = headers.get(b"host")
        if raw_host is not None:
            host = _split_host(raw_host.decode("latin-1"))
            if not self.allowed(host):
                message = (
                    f"Host header {host!r} does not name this server: without an API key "
                    "this server answers only requests addressed to localhost, 127.0.0.1, "
                    f"[::1] or {self.bound or 'its bound host'} (DNS-rebinding protection); "
                    "use one of those, or start the server with --api-key"
                )
                await self.error(421, message, "MisdirectedRequestError")(scope, receive, send)
                return
        origin = headers.get(b"origin")
        if origin is not None and scope["method"] not in _SAFE_METHODS:
            text = origin.decode("latin-1")
            origin_host = urlsplit(text).hostname if text != "null" else None
            if not origin_host or not self.allowed(origin_host):
                message = (
                    f"cross-site request from Origin {text!r} refused: without an API key "
                    "this server accepts state-changing requests only from local pages; "
                    "start the server with --api-key to use it from elsewhere"
                )
                await self.error(403, message, "ForbiddenError")(scope, receive, send)
                return
        await self.app(scope, receive, send)


class APIKeyGuard:
    """ASGI middleware: ``Authorization: Bearer <api_key>`` on every path but
    :data:`PUBLIC_PATHS`; a refusal is answered with ``error(401, message, kind)``."""

    def __init__(self, app: ASGIApp, api_key: str, error: ErrorResponse) -> None:
        self.app = app
        self.error = error
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(PUBLIC_PATHS):
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization", b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        message = "missing or wrong API key: send Authorization: Bearer <key>"
        await self.error(401, message, "AuthError")(scope, receive, send)


class HeaderLimit:
    """ASGI middleware: each of ``headers`` (names, any case) at most ``limit`` bytes, else
    ``error(431, message, kind)`` naming the header, its size and the limit."""

    def __init__(
        self,
        app: ASGIApp,
        headers: Sequence[str],
        error: ErrorResponse,
        limit: int = MAX_ID_HEADER_BYTES,
    ) -> None:
        self.app = app
        self.error = error
        self.limit = limit
        self.names = {name.lower().encode("latin-1"): name for name in headers}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            for key, value in scope["headers"]:
                name = self.names.get(key.lower())
                if name is not None and len(value) > self.limit:
                    message = (
                        f"header {name} is {len(value)} bytes; this server's limit is "
                        f"{self.limit} bytes: send an id (or a hash of it), not a payload"
                    )
                    await self.error(431, message, "RequestHeaderFieldsTooLargeError")(
                        scope, receive, send
                    )
                    return
        await self.app(scope, receive, send)
