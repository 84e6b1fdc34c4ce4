"""The HTTP connection of :class:`~agentwarm.engines.sglang.SGLangEngine` to one server.

It owns the ``httpx`` client, turns every failure into an :mod:`agentwarm.errors` type
(:mod:`agentwarm.engines.sglang.errors`), and speaks the endpoints that are not requests for the
model: ``/health``, ``/model_info``, ``/server_info``, ``/metrics``, ``/flush_cache`` and
``/abort_request``. The URL may carry ``user:password@`` (sent as HTTP basic auth); ``url`` and
every message show it as ``***@`` (:func:`~agentwarm.redact.redact_credentials`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx

from agentwarm.engines.sglang.errors import status_error, transport_error
from agentwarm.engines.sglang.metrics import parse_metrics
from agentwarm.engines.sglang.protocol import AbortRequest
from agentwarm.errors import EngineError, EngineUnavailable
from agentwarm.redact import redact_credentials

__all__ = ("Connection", "check_url")

log = logging.getLogger(__name__)


def check_url(url: str) -> str:
    """``url`` without trailing ``/`` if it can name an SGLang server (``http``/``https``, a
    host, a port in 1-65535 when given, no query or fragment), else ValueError saying why; the
    message shows the URL without its credentials, and nothing of the parser's own message (which
    may quote a password)."""
    shown = redact_credentials(url)
    problem = ""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError):
        problem = "it cannot be parsed"
    else:
        if parsed.scheme not in ("http", "https"):
            problem = "the scheme must be http or https"
        elif not parsed.host:
            problem = "it has no host"
        elif parsed.port is not None and not 1 <= parsed.port <= 65535:
            problem = f"port {parsed.port} is outside 1-65535"
        elif parsed.query or parsed.fragment or "#" in url:
            problem = "it has a query or fragment"
    if problem:
        raise ValueError(
            f"engine URL {shown!r} is not valid: {problem}. Use http://host:port (or https), with "
            "any '#', '?', '/' or '@' in a user:password percent-encoded (e.g. %23 for '#')"
        )
    return url.rstrip("/")


class Connection:
    """HTTP to the server at ``url`` (see the module docstring); ``transport`` replaces the
    network (``httpx.MockTransport`` in tests). Closed by :meth:`aclose`, after which every
    request raises :class:`~agentwarm.errors.EngineUnavailable`."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None,
        timeout: float,
        connect_timeout: float,
        max_connections: int,
        trust_env: bool,
        transport: httpx.AsyncBaseTransport | None,
    ) -> None:
        self.base_url = check_url(url)
        self.url = redact_credentials(self.base_url)  # what messages and reports show
        self.api_key = api_key
        self.trust_env = trust_env
        self.closed = False
        #: False once the server answered that it has no ``/abort_request`` (sglang-router).
        self.abort_supported = True
        self._client = httpx.AsyncClient(
            base_url=self.base_url,
            headers=self._auth(),
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            trust_env=trust_env,
            transport=transport,
        )

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def check_open(self) -> None:
        if self.closed:
            raise EngineUnavailable(f"SGLangEngine({self.url}) is closed")

    def transport_error(self, exc: httpx.HTTPError, path: str) -> EngineError:
        return transport_error(exc, f"{self.url}{path}")

    def status_error(self, resp: httpx.Response, path: str) -> EngineError:
        return status_error(resp, self.url, path)

    async def request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        self.check_open()
        try:
            return await self._client.request(method, path, json=json_body, headers=headers)
        except httpx.HTTPError as exc:
            raise self.transport_error(exc, path) from exc

    def stream(
        self, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> AbstractAsyncContextManager[httpx.Response]:
        """``POST path`` read as a stream (httpx errors are the caller's to translate)."""
        self.check_open()
        return self._client.stream("POST", path, json=body, headers=headers)

    async def post_json(
        self, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> dict[str, Any]:
        """``POST path``; the reply's JSON object, or the error of its status."""
        resp = await self.request("POST", path, json_body=body, headers=headers)
        if resp.status_code >= 400:
            raise self.status_error(resp, path)
        try:
            data = resp.json()
        except ValueError as exc:
            raise EngineError(f"{self.url}{path}: reply is not JSON: {resp.text[:200]!r}") from exc
        if not isinstance(data, dict):
            raise EngineError(f"{self.url}{path}: reply is not a JSON object: {data!r:.200}")
        return data

    async def get_info(self, path: str, legacy: str) -> dict[str, Any]:
        """``GET path``, or ``GET legacy`` when the server has no ``path`` (404)."""
        resp = await self.request("GET", path)
        if resp.status_code == 404:
            resp = await self.request("GET", legacy)
            path = legacy
        if resp.status_code != 200:
            raise self.status_error(resp, path)
        data = resp.json()
        if not isinstance(data, dict):
            raise EngineError(f"{self.url}{path}: reply is not a JSON object")
        return data

    def model_info_sync(self) -> dict[str, Any]:
        """Blocking ``GET /model_info`` (or ``/get_model_info``) on a client of its own."""
        with httpx.Client(
            base_url=self.base_url, headers=self._auth(), timeout=30.0, trust_env=self.trust_env
        ) as client:
            for path in ("/model_info", "/get_model_info"):
                try:
                    resp = client.get(path)
                except httpx.HTTPError as exc:
                    raise self.transport_error(exc, path) from exc
                if resp.status_code == 200 and isinstance(resp.json(), dict):
                    return dict(resp.json())
            raise self.status_error(resp, path)

    async def abort_request(self, rid: str) -> None:
        """``POST /abort_request``. A 404 that does not mention the rid means the server has no
        such endpoint: logged once, and :attr:`abort_supported` becomes False."""
        body = AbortRequest.model_construct(rid=rid).model_dump(exclude_unset=True)
        resp = await self.request("POST", "/abort_request", json_body=body)
        if resp.status_code == 200:
            return
        if resp.status_code == 404:
            if "rid" not in resp.text and self.abort_supported:
                self.abort_supported = False
                log.warning(
                    "%s has no /abort_request (sglang-router has none); aborts are skipped",
                    self.url,
                )
            return
        raise self.status_error(resp, "/abort_request")

    async def health(self) -> bool:
        """``GET /health`` answered 200."""
        try:
            resp = await self.request("GET", "/health")
        except EngineError:
            return False
        return resp.status_code == 200

    async def wait_ready(self, timeout_s: float, interval_s: float) -> None:
        """Return once ``/health`` answers 200; raise ``EngineUnavailable`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                resp = await self.request("GET", "/health")
                if resp.status_code == 200:
                    return
                reason = f"HTTP {resp.status_code}"
            except EngineError as exc:
                reason = str(exc)
            if time.monotonic() >= deadline:
                raise EngineUnavailable(f"{self.url}/health: server not ready: {reason}")
            await asyncio.sleep(interval_s)

    async def metrics(self) -> dict[str, float]:
        """``GET /metrics`` parsed by :func:`parse_metrics`; empty when the server has none (or
        answers something that is not Prometheus text, which is logged)."""
        resp = await self.request("GET", "/metrics")
        if resp.status_code != 200:
            return {}
        try:
            return parse_metrics(resp.text)
        except ValueError as exc:
            log.warning("%s/metrics is not Prometheus text (%s); ignoring it", self.url, exc)
            return {}

    async def flush_cache(self) -> None:
        """``POST /flush_cache``; SGLang refuses (400) while requests are running."""
        resp = await self.request("POST", "/flush_cache")
        if resp.status_code != 200:
            raise EngineError(
                f"{self.url}/flush_cache: HTTP {resp.status_code}: {resp.text.strip()[:200]}"
            )

    async def aclose(self) -> None:
        self.closed = True
        await self._client.aclose()
