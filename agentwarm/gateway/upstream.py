"""The gateway's side of the wire: the workers it forwards to (SGLang, sglang-router,
``agentwarm serve`` or vLLM), one :class:`Upstream` for all of them.

Rules it keeps:

* A worker given as ``vllm:URL`` is a vLLM server: its prefetches and warm-ups go through
  :class:`~agentwarm.engines.vllm.VLLMEngine` (token-id ``/v1/completions``, chunked
  speculation; vLLM has no ``/generate``), and the chat requests forwarded to it count as
  waiting live requests of that engine until their first event (:meth:`Upstream.live`), so
  that no speculative chunk is sent while one waits (vLLM never preempts a running prefill).
  Every other URL is spoken to as SGLang (``/generate``).
* A worker is named by its URL without credentials (:attr:`Upstream.urls`, what messages,
  :attr:`ChatCall.worker <agentwarm.gateway.types.ChatCall.worker>` and the metrics show);
  ``user:password@`` in a URL is sent as HTTP basic auth, ``api_key`` as ``Authorization:
  Bearer``. Both at once are refused (ValueError naming the URL): a request carries one
  ``Authorization``, and the URL's would silently replace the key.
* Routing (:meth:`Upstream.worker_for`): one session, one worker (a
  :class:`~agentwarm.engines.routing.HashRing`), so that its prefetches and its live requests
  meet the same prefix cache; a request without a session is hashed by its rid. A worker that
  stopped answering (:attr:`Upstream.liveness`, :mod:`~agentwarm.gateway.liveness`) is skipped
  while another is up: only its sessions move, and they come back once it answers.
* A session travels as ``X-SMG-Routing-Key`` (sglang-router's ``manual`` policy) on live and
  prefill requests alike, as :func:`routing_key` spells it (a header must be plain ASCII).
* Failures to reach a worker become :mod:`agentwarm.errors` types with the sglang client's rule
  (:mod:`agentwarm.engines.sglang.errors`): unreachable → ``EngineUnavailable``, no answer in
  time → ``EngineTimeout``. An HTTP status of the chat endpoint is not an error here: the
  gateway passes the worker's answer to its client unchanged.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from agentwarm.engines.base import Engine, PrefillResult, Priority
from agentwarm.engines.namespace import namespace_of
from agentwarm.engines.registry import VLLM_PREFIX
from agentwarm.engines.routing import HashRing
from agentwarm.engines.sglang import ROUTING_KEY_HEADER, SGLangEngine, check_url
from agentwarm.engines.sglang.errors import error_message, transport_error
from agentwarm.engines.tokenizers import Tokenizer
from agentwarm.engines.vllm import VLLMEngine
from agentwarm.errors import EngineError, EngineUnavailable, InvalidRequest
from agentwarm.gateway.liveness import HEALTH_INTERVAL_S, UNRESPONSIVE_AFTER_S, Liveness
from agentwarm.redact import redact_credentials

__all__ = ("CHAT_PATH", "Upstream", "routing_key", "vllm_chat_body")

log = logging.getLogger(__name__)

CHAT_PATH = "/v1/chat/completions"
#: Longest session sent as it is in a header; a longer (or non-ASCII) one is sent hashed.
_MAX_KEY_CHARS = 200
#: ``GET /health`` of a worker must answer within this, so that the gateway's own stays quick.
HEALTH_TIMEOUT_S = 3.0


def routing_key(session: str) -> str:
    """``session`` as a header value: itself when it is printable ASCII of at most 200
    characters, else ``h-`` and a hash of it (the same session always gives the same key)."""
    if len(session) <= _MAX_KEY_CHARS and session.isascii() and session.isprintable():
        return session
    return (
        "h-" + hashlib.blake2b(session.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
    )


class Upstream:
    """The workers at ``urls`` (see the module docstring). ``timeout`` bounds each read of a
    reply (a stream may run longer, as long as it keeps sending); reaching a worker must take
    under ``connect_timeout``. A worker is probed every ``health_interval`` s while requests
    wait on it and answers nothing, and declared unresponsive after ``unresponsive_after`` s
    (:class:`~agentwarm.gateway.liveness.Liveness`). ``transport`` replaces the network
    (``httpx.ASGITransport`` of an app in tests). ``tokenizer`` is the served model's, for
    the ``vllm:`` workers' clients (else each reads the server's). Raises ValueError naming a
    URL that cannot be a worker's, a duplicate, or one with ``user:password@`` when
    ``api_key`` is given too."""

    def __init__(
        self,
        urls: Sequence[str],
        *,
        api_key: str | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        health_interval: float = HEALTH_INTERVAL_S,
        unresponsive_after: float = UNRESPONSIVE_AFTER_S,
        transport: httpx.AsyncBaseTransport | None = None,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        if isinstance(urls, str) or not urls:
            raise ValueError("the gateway needs at least one upstream URL (http://host:port)")
        self._base: dict[str, str] = {}
        self._vllm: set[str] = set()
        for url in urls:
            is_vllm = url.startswith(VLLM_PREFIX)
            base = check_url(url.removeprefix(VLLM_PREFIX))
            name = redact_credentials(base)
            if name in self._base:
                raise ValueError(f"upstream URL {name!r} is given twice")
            if api_key and httpx.URL(base).userinfo:
                raise ValueError(
                    f"upstream URL {name!r} has user:password credentials (HTTP basic auth) and "
                    "an upstream API key is given too (--upstream-api-key or "
                    "AGENTWARM_UPSTREAM_API_KEY, sent as Bearer): a request carries only one "
                    "Authorization header. Remove the credentials from the URL to send the "
                    "key, or drop the key to use basic auth"
                )
            self._base[name] = base
            if is_vllm:
                self._vllm.add(name)
        #: The workers' URLs without credentials, in the order given.
        self.urls: tuple[str, ...] = tuple(self._base)
        self.api_key = api_key
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self._transport = transport
        self._tokenizer = tokenizer
        self._ring = HashRing(self.urls)
        self._engines: dict[str, Engine] = {}
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
            trust_env=False,
            transport=transport,
        )
        #: Which workers stopped answering (their requests fail instead of hanging).
        self.liveness = Liveness(
            self._answers, interval_s=health_interval, after_s=unresponsive_after
        )

    def worker_for(self, session: str | None, rid: str) -> str:
        """The URL that serves ``session`` (by ``rid`` when there is none): its owner on the
        ring, skipping unresponsive workers unless all are."""
        if len(self.urls) == 1:
            return self.urls[0]
        key = session or rid
        owner = self._ring.lookup(key, skip=self.liveness.down) or self._ring.lookup(key)
        assert owner is not None  # the ring has every worker
        return owner

    def is_vllm(self, worker: str) -> bool:
        """Whether ``worker`` was given as ``vllm:URL``."""
        return worker in self._vllm

    def live(self, worker: str) -> Callable[[], None]:
        """Count a live request forwarded to ``worker`` as waiting for its first token (a vLLM
        worker's: its engine's :attr:`~agentwarm.engines.vllm.VLLMEngine.live` gate; SGLang
        preempts prefills itself, so nothing there). Returns the call that ends the wait
        (idempotent): at the reply's first event, or however the request ends."""
        engine = self.engine(worker) if worker in self._vllm else None
        if not isinstance(engine, VLLMEngine):
            return _nothing
        gate = engine.live
        gate.enter()
        waiting = True

        def leave() -> None:
            nonlocal waiting
            if waiting:
                waiting = False
                gate.leave()

        return leave

    def base_url(self, worker: str) -> str:
        """The URL (with its credentials) of ``worker``; ValueError for one not in :attr:`urls`."""
        try:
            return self._base[worker]
        except KeyError:
            raise ValueError(
                f"{worker!r} is not an upstream of this gateway: {self.urls}"
            ) from None

    async def chat(
        self, worker: str, body: dict[str, Any], *, session: str | None
    ) -> httpx.Response:
        """``POST /v1/chat/completions`` of ``body`` to ``worker``, opened as a stream: the
        caller reads the reply and closes it (``await response.aclose()``), whatever its status.
        Raises ``EngineUnavailable`` when the worker cannot be reached, ``EngineTimeout`` when it
        does not answer in time, ``InvalidRequest`` for a body that is not plain JSON (NaN)."""
        headers = {ROUTING_KEY_HEADER: routing_key(session)} if session else {}
        if worker in self._vllm:
            body = vllm_chat_body(body)
        try:
            request = self._client.build_request(
                "POST", self.base_url(worker) + CHAT_PATH, json=body, headers=headers
            )
        except ValueError as exc:  # NaN or Infinity, which JSON has no words for
            raise InvalidRequest(f"the body cannot be sent as JSON: {exc}") from None
        try:
            return await self._client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise transport_error(exc, worker + CHAT_PATH) from exc

    async def prefill(
        self,
        worker: str,
        ids: Sequence[int],
        *,
        rid: str,
        session: str | None,
        namespace: str = "",
    ) -> PrefillResult:
        """Prefill ``ids`` into ``worker``'s prefix cache at speculative priority (SGLang's
        native ``/generate`` with ``input_ids`` and ``max_new_tokens: 0``; vLLM's token-id
        ``/v1/completions`` with ``max_tokens: 1``, in chunks) in ``namespace`` (the
        tenant's: sent as its ``cache_salt`` / ``extra_key``); an aborted prefill returns
        ``status=ABORTED``, a failure raises an :class:`~agentwarm.errors.EngineError`."""
        engine = self.engine(worker)
        key = routing_key(session) if session else None
        return await engine.prefill(
            ids, priority=Priority.SPECULATIVE, rid=rid, namespace=namespace, session=key
        )

    async def abort(self, worker: str, rid: str) -> None:
        """Abort the prefill ``rid`` on ``worker``; never raises (a failure is logged)."""
        engine = self._engines.get(worker)
        if engine is None:
            return  # nothing was prefilled there
        try:
            await engine.abort(rid)
        except Exception as exc:  # an abort is best effort: the prefill ends anyway
            log.warning("abort of %s on %s failed: %s", rid, worker, exc)

    async def models(self) -> dict[str, Any] | None:
        """``GET /v1/models`` of the first worker that answers it; ``None`` when the reachable
        ones have no such endpoint (or answer an error); ``EngineUnavailable`` naming each
        worker when none can be reached."""
        unreachable: list[str] = []
        for worker in self.urls:
            try:
                resp = await self._client.get(
                    self.base_url(worker) + "/v1/models", timeout=HEALTH_TIMEOUT_S
                )
            except httpx.HTTPError as exc:
                unreachable.append(str(transport_error(exc, worker + "/v1/models")))
                continue
            if resp.status_code == 200:
                try:
                    data = resp.json()
                except ValueError:
                    data = None
                if isinstance(data, dict):
                    return data
            log.warning("%s/v1/models: HTTP %s: %s", worker, resp.status_code, error_message(resp))
        if len(unreachable) == len(self.urls):
            raise EngineUnavailable("no upstream answers: " + "; ".join(unreachable))
        return None

    async def health(self) -> dict[str, bool]:
        """Whether each worker's ``GET /health`` answers 200 (within a few seconds)."""

        async def one(worker: str) -> bool:
            try:
                resp = await self._client.get(
                    self.base_url(worker) + "/health", timeout=HEALTH_TIMEOUT_S
                )
            except httpx.HTTPError:
                return False
            return resp.status_code == 200

        answers = await asyncio.gather(*(one(w) for w in self.urls))
        return dict(zip(self.urls, answers, strict=True))

    async def _answers(self, worker: str, timeout_s: float) -> bool:
        """Whether ``worker`` answers ``GET /health`` within ``timeout_s`` (any status: its
        server is not frozen)."""
        try:
            await self._client.get(self.base_url(worker) + "/health", timeout=timeout_s)
        except httpx.HTTPError:
            return False
        return True

    async def aclose(self) -> None:
        """Stop the liveness probes, close the connections (and the prefill clients)."""
        await self.liveness.aclose()
        engines, self._engines = dict(self._engines), {}
        for worker, engine in engines.items():
            try:
                await engine.aclose()
            except EngineError as exc:
                log.warning("closing the prefill client of %s: %s", worker, exc)
        await self._client.aclose()

    def engine(self, worker: str) -> Engine:
        """The prefill client of ``worker`` (the prefetches' and the warm-ups'), created on
        first use (SGLang's without a tokenizer: ids are given; vLLM's reads its server before
        its first request); closed by :meth:`aclose`."""
        engine = self._engines.get(worker)
        if engine is None and worker in self._vllm:
            engine = VLLMEngine.connecting(
                self.base_url(worker),
                tokenizer=self._tokenizer,
                api_key=self.api_key,
                timeout=self.timeout,
                connect_timeout=self.connect_timeout,
            )
            self._engines[worker] = engine
        elif engine is None:
            engine = SGLangEngine(
                self.base_url(worker),
                api_key=self.api_key,
                timeout=self.timeout,
                connect_timeout=self.connect_timeout,
                routing_header=True,
                transport=self._transport,
            )
            self._engines[worker] = engine
        return engine

    def __repr__(self) -> str:
        return f"Upstream({list(self.urls)})"


def vllm_chat_body(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as it goes to a vLLM worker: in its tenant's namespace (the one the gateway
    prefetches it in), sent as ``cache_salt`` — vLLM reads no ``extra_key``, so a tenant named
    by ``extra_key`` (or by both, different) would otherwise share vLLM's unsalted cache and
    never meet its prefetches. A body already salted so, or unsalted, is sent as it is."""
    namespace = namespace_of(body)
    if not namespace or body.get("cache_salt") == namespace:
        return body
    return {**body, "cache_salt": namespace}


def _nothing() -> None:
    """Nothing to end (:meth:`Upstream.live` of a worker that needs no gate)."""
