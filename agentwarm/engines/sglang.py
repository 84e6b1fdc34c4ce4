"""SGLangEngine: HTTP client of SGLang's native API (DESIGN §4), also spoken by ``agentwarm serve``.

Wire contract (SGLang 0.5.x ``python/sglang/srt/entrypoints/http_server.py``):

* ``POST /generate`` with ``input_ids``, ``sampling_params`` (``max_new_tokens: 0`` is a
  prefill-only pass that inserts the prompt into the radix cache), ``rid``, ``priority`` and the
  namespace in both ``cache_salt`` (native field since SGLang PR #30827) and ``extra_key`` (the
  field 0.5.x releases read, and the only one sglang-router 0.3 forwards). The reply's
  ``meta_info`` has ``prompt_tokens``, ``cached_tokens``, ``completion_tokens``,
  ``finish_reason`` (``{"type": "abort", ...}`` when aborted) and ``e2e_latency``.
* ``stream: true`` answers Server-Sent Events ``data: {json}`` ending in ``data: [DONE]``. By
  default each event repeats the whole output so far (``--stream-output`` or
  ``--incremental-streaming-output`` send deltas); this client accepts both.
* ``POST /abort_request {"rid"}``; ``GET /health``, ``/model_info`` (older: ``/get_model_info``),
  ``/server_info``, ``/metrics`` (``--enable-metrics``); ``POST /flush_cache``.

Rules this client keeps:

* An abort is not an error for ``prefill``: it returns ``status=ABORTED``. ``generate`` raises
  :class:`~agentwarm.errors.RequestAborted`. SGLang versions differ in how an aborted request
  answers (200 with an abort ``finish_reason``, or a 400/500 error); a request whose rid this client
  aborted is reported as aborted whatever the status.
* An abort can overtake its request on the wire (the server does not know the rid yet and ignores
  it); while the request is still pending here, the abort is re-sent a few times.
* Failures raise :mod:`agentwarm.errors` types naming the URL and the HTTP status, ``from`` the
  httpx exception: unreachable or 5xx → :class:`~agentwarm.errors.EngineUnavailable` (503, 502,
  504, connection errors) or :class:`~agentwarm.errors.EngineError`; read timeouts →
  :class:`~agentwarm.errors.EngineTimeout`; 400/413/422 → :class:`~agentwarm.errors.InvalidRequest`.
  The engine never swallows a failure; the runtime decides that a failed speculative prefill is
  only counted.
* ``encode``/``decode`` need a tokenizer identical to the server's. Give ``tokenizer=`` (a local
  Hugging Face tokenizer directory, ``"byte"``, or an object with ``encode``/``decode``), or build
  the engine with :meth:`SGLangEngine.from_url`, which reads ``/model_info``. Without either, the
  first ``encode``/``decode`` reads ``/model_info`` with a blocking call, once.
* Importing this module never imports ``sglang`` (which pulls torch and CUDA kernels).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import httpx
from opentelemetry.trace import SpanKind
from prometheus_client.parser import text_string_to_metric_families

from agentwarm import telemetry as tm
from agentwarm.engines.base import (
    Completion,
    Engine,
    EngineStats,
    PrefillResult,
    PrefillStatus,
    Priority,
    StreamChunk,
    new_rid,
)
from agentwarm.errors import (
    EngineError,
    EngineTimeout,
    EngineUnavailable,
    InvalidRequest,
    RequestAborted,
)
from agentwarm.redact import redact_credentials

__all__ = (
    "ROUTING_KEY_HEADER",
    "RemoteTokenizer",
    "SGLangEngine",
    "TextTokenizer",
    "check_url",
    "parse_metrics",
)

log = logging.getLogger(__name__)

ROUTING_KEY_HEADER = "X-SMG-Routing-Key"
"""Header that sglang-router's ``manual`` and ``consistent_hashing`` policies route on."""

_SALT_FIELDS = ("cache_salt", "extra_key")
_PRIORITY_DISABLED = "Using priority is disabled"
_ABORT_RESEND_S = (0.05, 0.2, 1.0)
_UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
_INVALID_STATUSES = frozenset({400, 413, 422})


class _PriorityDisabled(InvalidRequest):
    """The server refused ``priority`` (SGLang ``--abort-on-priority-when-disabled``)."""


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


@runtime_checkable
class TextTokenizer(Protocol):
    """What :class:`SGLangEngine` needs from a tokenizer: no special tokens added by ``encode``."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class RemoteTokenizer:
    """Tokenizes through the server's ``/tokenize`` and ``/detokenize`` endpoints.

    A last resort when no local tokenizer matches the server's: every call is a blocking HTTP
    round trip (it blocks the event loop for its duration), so use it only against a server in
    another process, preferably on loopback.
    """

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        trust_env: bool = False,
    ) -> None:
        self._base_url = url.rstrip("/")
        self.url = redact_credentials(self._base_url)  # for messages
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=self._base_url, headers=headers, timeout=timeout, trust_env=trust_env
        )

    def encode(self, text: str) -> list[int]:
        body = self._call("/tokenize", {"prompt": text, "add_special_tokens": False})
        tokens = body.get("tokens")
        if not isinstance(tokens, list):
            raise EngineError(f"{self.url}/tokenize: reply has no token list: {body!r:.200}")
        return [int(t) for t in tokens]

    def decode(self, ids: Sequence[int]) -> str:
        body = self._call("/detokenize", {"tokens": [int(i) for i in ids]})
        return str(body.get("text", ""))

    def close(self) -> None:
        self._client.close()

    def _call(self, path: str, payload: dict[str, Any]) -> dict[str, Any]:
        try:
            resp = self._client.post(path, json=payload)
        except httpx.HTTPError as exc:
            raise EngineUnavailable(f"{self.url}{path}: {redact_credentials(str(exc))}") from exc
        if resp.status_code != 200:
            raise EngineError(f"{self.url}{path}: HTTP {resp.status_code}: {resp.text[:200]}")
        data = resp.json()
        if not isinstance(data, dict):
            raise EngineError(f"{self.url}{path}: reply is not a JSON object")
        return data

    def __repr__(self) -> str:
        return f"RemoteTokenizer({self.url!r})"


class SGLangEngine(Engine):
    """Client of one SGLang server (or ``agentwarm serve``, or sglang-router) at ``url``.

    ``timeout`` bounds a whole request (prefill of a long prompt under load can take long);
    ``connect_timeout`` bounds reaching the server. ``routing_header=True`` sends each request's
    ``session`` as ``X-SMG-Routing-Key`` so that sglang-router's ``manual`` or
    ``consistent_hashing`` policy keeps a run on one worker. ``stream_generate=True`` (default)
    makes :meth:`generate` read the SSE stream so that ``ttft_s`` is the client-side time to the
    first token; with ``False`` it posts a plain request and ``ttft_s`` is the server's
    ``prefill_finished_ts - request_received_ts`` when reported (``--enable-metrics``), else the
    client-side end-to-end time (an upper bound). ``send_priority=False`` omits ``priority``
    (SGLang honours it only with ``--enable-priority-scheduling``). ``transport`` replaces the
    network (``httpx.MockTransport`` in tests). ``url`` may carry ``user:password@`` (sent as
    HTTP basic auth); the ``url`` attribute, ``model_name`` and every message show it as
    ``***@`` (:func:`~agentwarm.redact.redact_credentials`).
    """

    supports_promotion = False
    provider_name = tm.PROVIDER_SGLANG
    span_kind = SpanKind.CLIENT

    def __init__(
        self,
        url: str,
        *,
        tokenizer: str | Path | TextTokenizer | None = None,
        model_name: str | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        api_key: str | None = None,
        max_connections: int = 64,
        routing_header: bool = False,
        stream_generate: bool = True,
        send_priority: bool = True,
        salt_fields: Sequence[str] = _SALT_FIELDS,
        trust_env: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._base_url = check_url(url)
        self.url = redact_credentials(self._base_url)  # what messages and reports show
        self.model_name = model_name or self.url
        self.routing_header = routing_header
        self.stream_generate = stream_generate
        self.send_priority = send_priority
        self.salt_fields = tuple(salt_fields)
        self._api_key = api_key
        self._trust_env = trust_env
        self._tokenizer: TextTokenizer | None = _load_tokenizer(tokenizer)
        self._tokenizer_resolved = tokenizer is not None
        self._tokenizer_note = "no tokenizer was given"
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=self._base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=connect_timeout),
            limits=httpx.Limits(
                max_connections=max_connections, max_keepalive_connections=max_connections
            ),
            trust_env=trust_env,
            transport=transport,
        )
        self._pending: dict[str, int] = {}
        self._aborted: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()
        self._abort_supported = True
        self._closed = False
        self._counters = dict.fromkeys(
            ("requests", "prompt_tokens", "hit_tokens", "computed_tokens", "aborted"), 0
        )

    # ------------------------------------------------------------------ construction

    @classmethod
    async def from_url(
        cls,
        url: str,
        *,
        tokenizer: str | Path | TextTokenizer | None = None,
        wait_s: float = 0.0,
        **kwargs: Any,
    ) -> SGLangEngine:
        """Connect to ``url``: wait up to ``wait_s`` for ``/health``, read ``/model_info``.

        The tokenizer is, in order: ``tokenizer``; the built-in byte tokenizer when the server
        (``agentwarm serve``) says it uses one; the server's ``tokenizer_path`` when it loads
        locally (a directory, or a Hugging Face id already in the local cache; nothing is
        downloaded); the server's ``/tokenize`` endpoint (:class:`RemoteTokenizer`). Raises
        :class:`~agentwarm.errors.EngineUnavailable` when the server is not healthy in time.
        """
        engine = cls(url, tokenizer=tokenizer, **kwargs)
        try:
            await engine.wait_ready(wait_s)
            info = await engine.model_info()
            name = info.get("served_model_name") or info.get("model_path")
            if name and "model_name" not in kwargs:
                engine.model_name = str(name)
            ext = info.get("agentwarm")
            if isinstance(ext, Mapping):
                engine.supports_promotion = bool(ext.get("supports_promotion", False))
            if engine._tokenizer is None:
                engine._tokenizer = await asyncio.to_thread(engine._tokenizer_from_info, info)
        except BaseException:
            await engine.aclose()
            raise
        return engine

    def _tokenizer_from_info(self, info: Mapping[str, Any]) -> TextTokenizer | None:
        """Blocking: the tokenizer ``/model_info`` points to (see :meth:`from_url`), or None."""
        self._tokenizer_resolved = True
        tried: list[str] = []
        ext = info.get("agentwarm")
        if isinstance(ext, Mapping) and ext.get("tokenizer") == "byte":
            return _load_tokenizer("byte")
        for key in ("tokenizer_path", "model_path"):
            path = info.get(key)
            if not path:
                continue
            try:
                return _load_tokenizer(str(path))
            except Exception as exc:  # any loader failure means "not usable here"
                tried.append(f"{key}={path!r} ({type(exc).__name__})")
        remote = RemoteTokenizer(self._base_url, api_key=self._api_key, trust_env=self._trust_env)
        try:
            remote.encode("a")
        except EngineError as exc:
            remote.close()
            tried.append(f"{self.url}/tokenize ({exc})")
            self._tokenizer_note = "tried " + "; ".join(tried)
            return None
        log.warning("%s: no local tokenizer matches the server; using its /tokenize", self.url)
        return remote

    def _fetch_model_info_sync(self) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        with httpx.Client(
            base_url=self._base_url, headers=headers, timeout=30.0, trust_env=self._trust_env
        ) as client:
            for path in ("/model_info", "/get_model_info"):
                try:
                    resp = client.get(path)
                except httpx.HTTPError as exc:
                    raise self._translate(exc, path) from exc
                if resp.status_code == 200 and isinstance(resp.json(), dict):
                    return dict(resp.json())
            raise self._status_error(resp, path)

    # ------------------------------------------------------------------ engine protocol

    async def prefill(
        self,
        ids: Sequence[int],
        *,
        priority: int = Priority.SPECULATIVE,
        rid: str | None = None,
        namespace: str = "",
        session: str | None = None,
    ) -> PrefillResult:
        """``POST /generate`` with ``max_new_tokens: 0``. Aborted → ``status=ABORTED``.

        Aborted means: by :meth:`abort`, or by the server (SGLang aborts a queued low-priority
        request for a higher-priority one, answering 503 "aborted by a higher priority request").
        """
        rid = rid or new_rid()
        with self._tracking(rid):
            try:
                out = await self._with_priority_fallback(
                    lambda: self._post_json(
                        "/generate",
                        self._body(ids, 0, 0.0, priority, rid, namespace, False, None),
                        session,
                    )
                )
            except RequestAborted:
                return self._record_prefill(rid, len(ids), 0, 0, PrefillStatus.ABORTED)
            except EngineError:
                if rid in self._aborted:
                    return self._record_prefill(rid, len(ids), 0, 0, PrefillStatus.ABORTED)
                raise
            meta = _meta(out)
            prompt = int(meta.get("prompt_tokens", len(ids)))
            cached = int(meta.get("cached_tokens", 0))
            if _finish_type(meta) == "abort":
                computed = int(meta.get("computed_tokens", 0))
                return self._record_prefill(rid, prompt, cached, computed, PrefillStatus.ABORTED)
            computed = int(meta.get("computed_tokens", prompt - cached))
            return self._record_prefill(rid, prompt, cached, computed, PrefillStatus.DONE)

    async def generate(
        self,
        ids: Sequence[int],
        *,
        max_tokens: int = 16,
        temperature: float = 0.0,
        priority: int = Priority.LIVE,
        rid: str | None = None,
        namespace: str = "",
        session: str | None = None,
        seed: int | None = None,
    ) -> Completion:
        """Prefill ``ids`` and decode up to ``max_tokens``; see the class doc for ``ttft_s``."""
        if self.stream_generate:
            completion: Completion | None = None
            async for chunk in self.generate_stream(
                ids,
                max_tokens=max_tokens,
                temperature=temperature,
                priority=priority,
                rid=rid,
                namespace=namespace,
                session=session,
                seed=seed,
            ):
                completion = chunk.completion or completion
            assert completion is not None  # generate_stream ends with a completion or raises
            return completion
        rid = rid or new_rid()
        start = time.perf_counter()
        with self._tracking(rid):
            try:
                out = await self._with_priority_fallback(
                    lambda: self._post_json(
                        "/generate",
                        self._body(
                            ids, max_tokens, temperature, priority, rid, namespace, False, seed
                        ),
                        session,
                    )
                )
            except EngineError as exc:
                if isinstance(exc, RequestAborted) or rid in self._aborted:
                    self._count_abort()
                self._raise_if_aborted(rid, exc)
                raise
        e2e = time.perf_counter() - start
        meta = _meta(out)
        if _finish_type(meta) == "abort":
            self._count_abort()
            raise RequestAborted(f"{self.url}: request {rid} aborted: {_finish_message(meta)}")
        out_ids = [int(t) for t in out.get("output_ids") or []]
        ttft = _server_ttft(meta)
        return self._record_completion(
            rid, ids, meta, out_ids, str(out.get("text", "")), e2e if ttft is None else ttft, e2e
        )

    async def generate_stream(
        self,
        ids: Sequence[int],
        *,
        max_tokens: int = 16,
        temperature: float = 0.0,
        priority: int = Priority.LIVE,
        rid: str | None = None,
        namespace: str = "",
        session: str | None = None,
        seed: int | None = None,
    ) -> AsyncIterator[StreamChunk]:
        """Stream tokens as SSE events arrive; the last chunk carries the :class:`Completion`.

        Concatenating every chunk's ``token_ids`` gives ``completion.token_ids``. Closing the
        iterator early closes the connection, which makes SGLang abort the request.
        """
        rid = rid or new_rid()
        with self._tracking(rid):
            for attempt in (1, 2):
                body = self._body(
                    ids, max_tokens, temperature, priority, rid, namespace, True, seed
                )
                try:
                    async for chunk in self._stream_once(ids, body, rid, session):
                        yield chunk
                    return
                except _PriorityDisabled:
                    if attempt == 2 or not self._disable_priority():
                        raise
                except RequestAborted:
                    self._count_abort()
                    raise

    async def _stream_once(
        self, ids: Sequence[int], body: dict[str, Any], rid: str, session: str | None
    ) -> AsyncIterator[StreamChunk]:
        self._check_open()
        start = time.perf_counter()
        ttft: float | None = None
        out_ids: list[int] = []
        text = ""
        try:
            async with self._client.stream(
                "POST", "/generate", json=body, headers=self._headers(session)
            ) as resp:
                if resp.status_code >= 400:
                    await resp.aread()
                    exc = self._status_error(resp, "/generate")
                    self._raise_if_aborted(rid, exc)
                    raise exc
                async for event in _sse_events(resp, self.url):
                    if "error" in event:
                        exc = _event_error(event, self.url)
                        self._raise_if_aborted(rid, exc)
                        raise exc
                    meta = _meta(event)
                    new_ids, new_text = _delta(event, meta, out_ids, text)
                    out_ids.extend(new_ids)
                    text += new_text
                    if new_ids and ttft is None:
                        ttft = time.perf_counter() - start
                    if meta.get("finish_reason") is None:
                        if new_ids or new_text:
                            yield StreamChunk(tuple(new_ids), new_text)
                        continue
                    if _finish_type(meta) == "abort":
                        message = _finish_message(meta)
                        if _PRIORITY_DISABLED in message:
                            raise _PriorityDisabled(f"{self.url}/generate: {message}")
                        raise RequestAborted(f"{self.url}: request {rid} aborted: {message}")
                    e2e = time.perf_counter() - start
                    completion = self._record_completion(
                        rid, ids, meta, out_ids, text, e2e if ttft is None else ttft, e2e
                    )
                    yield StreamChunk(tuple(new_ids), new_text, completion)
                    return
        except httpx.HTTPError as exc:
            err = self._translate(exc, "/generate")
            self._raise_if_aborted(rid, err)
            raise err from exc
        raise EngineError(f"{self.url}/generate: stream of {rid} ended without a finish_reason")

    async def _with_priority_fallback(
        self, call: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        try:
            return await call()
        except _PriorityDisabled:
            if not self._disable_priority():
                raise
            return await call()

    def _disable_priority(self) -> bool:
        """Stop sending ``priority`` after the server refused it; False if already stopped."""
        if not self.send_priority:
            return False
        self.send_priority = False
        log.warning(
            "%s refuses request priorities (--abort-on-priority-when-disabled without "
            "--enable-priority-scheduling); sending none from now on, so speculative prefills "
            "compete with live requests",
            self.url,
        )
        return True

    async def abort(self, rid: str) -> None:
        """``POST /abort_request``. Unknown rids are ignored; re-sent while ``rid`` is pending.

        A server without the endpoint (sglang-router has none) is logged once and then skipped.
        """
        self._check_open()
        if rid in self._pending:
            self._aborted.add(rid)
        if not self._abort_supported:
            return
        await self._send_abort(rid)
        if rid in self._pending:
            task = asyncio.get_running_loop().create_task(self._resend_abort(rid))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def encode(self, text: str) -> list[int]:
        return self._require_tokenizer().encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self._require_tokenizer().decode(ids)

    @property
    def tokenizer(self) -> TextTokenizer | None:
        """The tokenizer ``encode``/``decode`` use, or ``None`` when none was found."""
        return self._tokenizer

    async def stats(self) -> EngineStats:
        """Server counters from ``/metrics`` when the server exports them, else this client's.

        Prometheus names read: ``sglang:prompt_tokens_total``, ``sglang:cached_tokens_total``
        (summed over ``cache_source``), ``sglang:num_requests_total``,
        ``sglang:num_aborted_requests_total``, ``sglang:max_total_num_tokens`` (capacity),
        ``sglang:num_used_tokens`` and the ``agentwarm:*`` extras of ``agentwarm serve``.
        """
        metrics = await self.server_metrics()
        if not metrics or "sglang:num_requests_total" not in metrics:
            return self.client_stats()
        prompt = int(metrics.get("sglang:prompt_tokens_total", 0))
        hit = int(metrics.get("sglang:cached_tokens_total", 0))
        capacity = metrics.get("sglang:max_total_num_tokens")
        return EngineStats(
            cached_tokens=int(
                metrics.get("agentwarm:cache_tokens", metrics.get("sglang:num_used_tokens", 0))
            ),
            capacity_tokens=int(capacity) if capacity else None,
            evicted_tokens=int(metrics.get("agentwarm:evicted_tokens_total", 0)),
            hit_tokens=hit,
            prompt_tokens=prompt,
            computed_tokens=int(metrics.get("agentwarm:computed_tokens_total", prompt - hit)),
            requests=int(metrics["sglang:num_requests_total"]),
            aborted=int(metrics.get("sglang:num_aborted_requests_total", 0)),
        )

    def client_stats(self) -> EngineStats:
        """Traffic this client saw (cache size and capacity unknown from here)."""
        c = self._counters
        return EngineStats(
            cached_tokens=0,
            capacity_tokens=None,
            evicted_tokens=0,
            hit_tokens=c["hit_tokens"],
            prompt_tokens=c["prompt_tokens"],
            computed_tokens=c["computed_tokens"],
            requests=c["requests"],
            aborted=c["aborted"],
        )

    async def flush_cache(self) -> None:
        """``POST /flush_cache``; SGLang refuses (400) while requests are running."""
        resp = await self._request("POST", "/flush_cache")
        if resp.status_code != 200:
            raise EngineError(
                f"{self.url}/flush_cache: HTTP {resp.status_code}: {resp.text.strip()[:200]}"
            )

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self._client.aclose()
        if isinstance(self._tokenizer, RemoteTokenizer):
            self._tokenizer.close()

    # ------------------------------------------------------------------ server info

    async def health(self) -> bool:
        """``GET /health`` answered 200."""
        try:
            resp = await self._request("GET", "/health")
        except EngineError:
            return False
        return resp.status_code == 200

    async def wait_ready(self, timeout_s: float = 0.0, *, interval_s: float = 0.2) -> None:
        """Return once ``/health`` answers 200; raise ``EngineUnavailable`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                resp = await self._request("GET", "/health")
                if resp.status_code == 200:
                    return
                reason = f"HTTP {resp.status_code}"
            except EngineError as exc:
                reason = str(exc)
            if time.monotonic() >= deadline:
                raise EngineUnavailable(f"{self.url}/health: server not ready: {reason}")
            await asyncio.sleep(interval_s)

    async def model_info(self) -> dict[str, Any]:
        """``GET /model_info`` (falls back to the pre-0.5.5 ``/get_model_info``)."""
        return await self._get_info("/model_info", "/get_model_info")

    async def server_info(self) -> dict[str, Any]:
        """``GET /server_info`` (falls back to ``/get_server_info``)."""
        return await self._get_info("/server_info", "/get_server_info")

    async def server_metrics(self) -> dict[str, float]:
        """``GET /metrics`` parsed by :func:`parse_metrics`; empty when the server has none (or
        answers something that is not Prometheus text, which is logged)."""
        resp = await self._request("GET", "/metrics")
        if resp.status_code != 200:
            return {}
        try:
            return parse_metrics(resp.text)
        except ValueError as exc:
            log.warning("%s/metrics is not Prometheus text (%s); ignoring it", self.url, exc)
            return {}

    # ------------------------------------------------------------------ internals

    def _body(
        self,
        ids: Sequence[int],
        max_new_tokens: int,
        temperature: float,
        priority: int,
        rid: str,
        namespace: str,
        stream: bool,
        seed: int | None,
    ) -> dict[str, Any]:
        if len(ids) == 0:
            raise InvalidRequest("empty prompt: ids must hold at least one token id")
        if max_new_tokens < 0:
            raise InvalidRequest(f"max_tokens must be >= 0, got {max_new_tokens}")
        sampling: dict[str, Any] = {"max_new_tokens": int(max_new_tokens)}
        if max_new_tokens > 0:
            sampling["temperature"] = float(temperature)
            if seed is not None:
                sampling["sampling_seed"] = int(seed)
        body: dict[str, Any] = {
            "input_ids": [int(i) for i in ids],
            "sampling_params": sampling,
            "rid": rid,
            "stream": stream,
        }
        if self.send_priority:
            body["priority"] = int(priority)
        if namespace:
            for field in self.salt_fields:
                body[field] = namespace
        return body

    def _headers(self, session: str | None) -> dict[str, str]:
        if self.routing_header and session:
            return {ROUTING_KEY_HEADER: session}
        return {}

    @contextlib.contextmanager
    def _tracking(self, rid: str) -> Iterator[None]:
        self._pending[rid] = self._pending.get(rid, 0) + 1
        try:
            yield
        finally:
            left = self._pending.pop(rid) - 1
            if left:
                self._pending[rid] = left
            else:
                self._aborted.discard(rid)

    def _check_open(self) -> None:
        if self._closed:
            raise EngineUnavailable(f"SGLangEngine({self.url}) is closed")

    async def _request(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        session: str | None = None,
    ) -> httpx.Response:
        self._check_open()
        try:
            return await self._client.request(
                method, path, json=json_body, headers=self._headers(session)
            )
        except httpx.HTTPError as exc:
            raise self._translate(exc, path) from exc

    async def _post_json(
        self, path: str, body: dict[str, Any], session: str | None
    ) -> dict[str, Any]:
        resp = await self._request("POST", path, json_body=body, session=session)
        if resp.status_code >= 400:
            raise self._status_error(resp, path)
        try:
            data = resp.json()
        except ValueError as exc:
            raise EngineError(f"{self.url}{path}: reply is not JSON: {resp.text[:200]!r}") from exc
        if not isinstance(data, dict):
            raise EngineError(f"{self.url}{path}: reply is not a JSON object: {data!r:.200}")
        return data

    async def _get_info(self, path: str, legacy: str) -> dict[str, Any]:
        resp = await self._request("GET", path)
        if resp.status_code == 404:
            resp = await self._request("GET", legacy)
            path = legacy
        if resp.status_code != 200:
            raise self._status_error(resp, path)
        data = resp.json()
        if not isinstance(data, dict):
            raise EngineError(f"{self.url}{path}: reply is not a JSON object")
        return data

    async def _send_abort(self, rid: str) -> None:
        resp = await self._request("POST", "/abort_request", json_body={"rid": rid})
        if resp.status_code == 200:
            return
        if resp.status_code == 404:
            if "rid" not in resp.text:
                self._abort_supported = False
                log.warning(
                    "%s has no /abort_request (sglang-router has none); aborts are skipped",
                    self.url,
                )
            return
        raise self._status_error(resp, "/abort_request")

    async def _resend_abort(self, rid: str) -> None:
        for delay in _ABORT_RESEND_S:
            await asyncio.sleep(delay)
            if rid not in self._pending or self._closed:
                return
            with contextlib.suppress(EngineError):
                await self._send_abort(rid)

    def _translate(self, exc: httpx.HTTPError, path: str) -> EngineError:
        where = f"{self.url}{path}"
        if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):
            return EngineTimeout(f"{where}: no answer in time ({type(exc).__name__})")
        if isinstance(exc, httpx.TransportError):
            return EngineUnavailable(
                f"{where}: cannot reach the server "
                f"({type(exc).__name__}: {redact_credentials(str(exc))})"
            )
        return EngineError(f"{where}: {type(exc).__name__}: {redact_credentials(str(exc))}")

    def _status_error(self, resp: httpx.Response, path: str) -> EngineError:
        detail = _error_message(resp)
        message = f"{self.url}{path}: HTTP {resp.status_code}: {detail}"
        if _PRIORITY_DISABLED in detail:
            return _PriorityDisabled(message)
        if path == "/generate" and "abort" in detail.lower():
            return RequestAborted(message)
        if resp.status_code in _UNAVAILABLE_STATUSES:
            return EngineUnavailable(message)
        if resp.status_code in _INVALID_STATUSES:
            return InvalidRequest(message)
        return EngineError(message)

    def _raise_if_aborted(self, rid: str, exc: EngineError) -> None:
        if rid in self._aborted and not isinstance(exc, RequestAborted):
            raise RequestAborted(f"{self.url}: request {rid} aborted ({exc})") from exc

    def _require_tokenizer(self) -> TextTokenizer:
        if self._tokenizer is None and not self._tokenizer_resolved:
            self._tokenizer = self._tokenizer_from_info(self._fetch_model_info_sync())
        if self._tokenizer is None:
            raise EngineError(
                f"SGLangEngine({self.url}) has no tokenizer ({self._tokenizer_note}). Pass "
                "tokenizer=<local Hugging Face tokenizer dir of the served model> or 'byte', or "
                "create the engine with `await SGLangEngine.from_url(url)`."
            )
        return self._tokenizer

    def _count_abort(self) -> None:
        self._counters["requests"] += 1
        self._counters["aborted"] += 1

    def _record_prefill(
        self, rid: str, prompt: int, cached: int, computed: int, status: PrefillStatus
    ) -> PrefillResult:
        c = self._counters
        c["requests"] += 1
        c["prompt_tokens"] += prompt
        c["hit_tokens"] += cached
        c["computed_tokens"] += computed
        c["aborted"] += status is PrefillStatus.ABORTED
        return PrefillResult(rid, prompt, cached, computed, status)

    def _record_completion(
        self,
        rid: str,
        ids: Sequence[int],
        meta: Mapping[str, Any],
        out_ids: Sequence[int],
        text: str,
        ttft: float,
        e2e: float,
    ) -> Completion:
        prompt = int(meta.get("prompt_tokens", len(ids)))
        cached = int(meta.get("cached_tokens", 0))
        c = self._counters
        c["requests"] += 1
        c["prompt_tokens"] += prompt
        c["hit_tokens"] += cached
        c["computed_tokens"] += int(meta.get("computed_tokens", prompt - cached))
        return Completion(
            text=text,
            token_ids=tuple(int(t) for t in out_ids),
            prompt_tokens=prompt,
            cached_tokens=cached,
            ttft_s=ttft,
            finish_reason=_finish_type(meta) or "stop",
            rid=rid,
            e2e_s=e2e,
        )

    def __repr__(self) -> str:
        return f"SGLangEngine({self.url!r}, model={self.model_name!r})"


# ---------------------------------------------------------------------- helpers


class _ByteTokenizer:
    """UTF-8 bytes as ids 0..255: the tokenizer of ``FakeEngine`` and the built-in presets."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(int(i) for i in ids if 0 <= int(i) < 256).decode("utf-8", errors="replace")

    def __repr__(self) -> str:
        return "ByteTokenizer()"


class _HFTokenizer:
    """A local Hugging Face tokenizer: no special tokens added, special/unknown ids skipped."""

    def __init__(self, path: str) -> None:
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self._size = len(self._tok)
        self.path = path

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        valid = [int(i) for i in ids if 0 <= int(i) < self._size]
        return str(self._tok.decode(valid, skip_special_tokens=True))

    def __repr__(self) -> str:
        return f"HFTokenizer({self.path!r})"


def _load_tokenizer(spec: str | Path | TextTokenizer | None) -> TextTokenizer | None:
    """``None``, ``"byte"``, a local tokenizer directory / cached hub id, or a tokenizer object.

    Loading never downloads and never imports torch (the embedded engine's package does).
    """
    if spec is None:
        return None
    if isinstance(spec, TextTokenizer) and not isinstance(spec, str | Path):
        return spec
    if spec == "byte":
        return _ByteTokenizer()
    try:
        return _HFTokenizer(str(spec))
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError, ...
        raise EngineError(
            f"cannot load a tokenizer from {str(spec)!r} without downloading: {exc}"
        ) from exc


def _meta(out: Mapping[str, Any]) -> dict[str, Any]:
    meta = out.get("meta_info")
    return dict(meta) if isinstance(meta, Mapping) else {}


def _finish_type(meta: Mapping[str, Any]) -> str | None:
    reason = meta.get("finish_reason")
    if isinstance(reason, Mapping):
        kind = reason.get("type")
        return str(kind) if kind is not None else None
    return str(reason) if reason is not None else None


def _finish_message(meta: Mapping[str, Any]) -> str:
    reason = meta.get("finish_reason")
    if isinstance(reason, Mapping):
        return str(reason.get("message") or reason)
    return str(reason)


def _server_ttft(meta: Mapping[str, Any]) -> float | None:
    start, first = meta.get("request_received_ts"), meta.get("prefill_finished_ts")
    if isinstance(start, int | float) and isinstance(first, int | float) and first >= start:
        return float(first - start)
    return None


def _delta(
    event: Mapping[str, Any], meta: Mapping[str, Any], seen_ids: Sequence[int], seen_text: str
) -> tuple[list[int], str]:
    """New ids and text of one SSE event, whether the server streams totals or deltas."""
    ids = [int(t) for t in event.get("output_ids") or []]
    total = meta.get("completion_tokens")
    n = len(seen_ids)
    cumulative = (
        len(ids) == total if isinstance(total, int) else list(ids[:n]) == list(seen_ids)
    ) and len(ids) >= n
    new_ids = ids[n:] if cumulative else ids
    text = str(event.get("text") or "")
    if cumulative and text.startswith(seen_text):
        return new_ids, text[len(seen_text) :]
    return new_ids, text


async def _sse_events(resp: httpx.Response, url: str) -> AsyncIterator[dict[str, Any]]:
    """Parsed ``data:`` payloads of an SSE response, up to ``data: [DONE]``."""
    async for line in resp.aiter_lines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return
        try:
            event = json.loads(payload)
        except ValueError as exc:
            raise EngineError(f"{url}/generate: bad SSE event {payload[:200]!r}") from exc
        if isinstance(event, dict):
            yield event


def _event_error(event: Mapping[str, Any], url: str) -> EngineError:
    """The error event of a stream; its ``code`` (``agentwarm serve`` sends the HTTP status it
    would have answered) picks the type, as for an error status."""
    error = event.get("error")
    message = error.get("message") if isinstance(error, Mapping) else error
    code = error.get("code") if isinstance(error, Mapping) else None
    text = f"{url}/generate: stream error: {message}"
    if code in _INVALID_STATUSES:
        return InvalidRequest(text)
    if code in _UNAVAILABLE_STATUSES:
        return EngineUnavailable(text)
    return EngineError(text)


def _error_message(resp: httpx.Response) -> str:
    try:
        data = resp.json()
    except ValueError:
        return resp.text.strip()[:300] or resp.reason_phrase
    if isinstance(data, Mapping):
        error = data.get("error")
        if isinstance(error, Mapping) and "message" in error:
            return str(error["message"])[:300]
        if isinstance(error, str):
            return error[:300]
        if "message" in data:
            return str(data["message"])[:300]
        if "detail" in data:
            return str(data["detail"])[:300]
    return json.dumps(data)[:300]


def parse_metrics(text: str) -> dict[str, float]:
    """Sum each metric's samples over all label sets in Prometheus text exposition format.

    Parsed by ``prometheus_client``'s text parser. Samples keep their series names (a counter's
    ``_total``; a histogram's or summary's ``_bucket``, ``_sum``, ``_count``); ``NaN`` samples
    are skipped. Raises ``ValueError`` when ``text`` is not in the exposition format.
    """
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if not math.isnan(sample.value):
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals
