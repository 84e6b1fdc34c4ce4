"""SGLangEngine: the engine protocol over SGLang's native HTTP API (DESIGN §4).

The wire format is :mod:`~agentwarm.engines.sglang.protocol`; HTTP and error translation are
:mod:`~agentwarm.engines.sglang.connection` and :mod:`~agentwarm.engines.sglang.errors`; aborts
:mod:`~agentwarm.engines.sglang.aborts`; streaming :mod:`~agentwarm.engines.sglang.stream`.
Rules this client keeps:

* An abort is not an error for ``prefill``: it returns ``status=ABORTED``. ``generate`` raises
  :class:`~agentwarm.errors.RequestAborted`; a request whose rid this client aborted is reported
  as aborted whatever the server answers.
* Failures raise :mod:`agentwarm.errors` types. The engine never swallows a failure; the runtime
  decides that a failed speculative prefill is only counted.
* ``encode``/``decode`` need a tokenizer identical to the server's. Give ``tokenizer=`` (a local
  Hugging Face tokenizer directory, ``"byte"``, ``"qwen2.5"``, or a
  :class:`~agentwarm.engines.tokenizers.Tokenizer`), or build the engine with
  :meth:`SGLangEngine.from_url`, which reads ``/model_info``. Without either, the first
  ``encode``/``decode`` reads ``/model_info`` with a blocking call, once. A local tokenizer's
  chat template becomes the engine's ``chat_template`` (the server's ``/tokenize`` gives none).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import httpx
from opentelemetry.trace import SpanKind

from agentwarm import telemetry as tm
from agentwarm.engines.base import (
    Completion,
    Engine,
    EngineStats,
    GenerateParams,
    PrefillParams,
    PrefillResult,
    PrefillStatus,
    StreamChunk,
)
from agentwarm.engines.sglang.aborts import AbortTracker
from agentwarm.engines.sglang.connection import Connection
from agentwarm.engines.sglang.errors import PriorityDisabled
from agentwarm.engines.sglang.metrics import ClientCounters, stats_from_metrics
from agentwarm.engines.sglang.protocol import (
    ROUTING_KEY_HEADER,
    SALT_FIELDS,
    GenerateReply,
    finish_message,
    finish_type,
    generate_body,
    meta_info,
    server_ttft,
)
from agentwarm.engines.sglang.stream import stream_generate
from agentwarm.engines.sglang.tokenizers import (
    RemoteTokenizer,
    TextTokenizer,
    load_tokenizer,
    tokenizer_from_info,
)
from agentwarm.engines.tokenizers import chat_template_of
from agentwarm.errors import EngineError, RequestAborted

__all__ = ("SGLangEngine",)

log = logging.getLogger(__name__)


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
    (SGLang honours it only with ``--enable-priority-scheduling``). ``salt_fields`` are the
    request fields that carry the namespace. ``transport`` replaces the network
    (``httpx.MockTransport`` in tests). ``url`` may carry ``user:password@`` (sent as HTTP basic
    auth); the ``url`` attribute, ``model_name`` and every message show it as ``***@``
    (:func:`~agentwarm.redact.redact_credentials`).
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
        salt_fields: Sequence[str] = SALT_FIELDS,
        trust_env: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = Connection(
            url,
            api_key=api_key,
            timeout=timeout,
            connect_timeout=connect_timeout,
            max_connections=max_connections,
            trust_env=trust_env,
            transport=transport,
        )
        self.url = self._http.url
        self.model_name = model_name or self.url
        self.routing_header = routing_header
        self.stream_generate = stream_generate
        self.send_priority = send_priority
        self.salt_fields = tuple(salt_fields)
        if unknown := set(self.salt_fields) - set(SALT_FIELDS):
            raise ValueError(f"salt_fields must be among {SALT_FIELDS}, got {sorted(unknown)}")
        self._tokenizer: TextTokenizer | None = None
        self._set_tokenizer(load_tokenizer(tokenizer))
        self._tokenizer_resolved = tokenizer is not None
        self._tokenizer_note = "no tokenizer was given"
        self._aborts = AbortTracker(self._http)
        self._counters = ClientCounters()

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
                engine.preempts_speculation = bool(ext.get("preempts_speculation", False))
            if engine._tokenizer is None:
                await asyncio.to_thread(engine._resolve_tokenizer, info)
        except BaseException:
            await engine.aclose()
            raise
        return engine

    # ------------------------------------------------------------------ engine protocol

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        """``POST /generate`` with ``max_new_tokens: 0``. Aborted → ``status=ABORTED``.

        Aborted means: by :meth:`abort`, or by the server (SGLang aborts a queued low-priority
        request for a higher-priority one, answering 503 "aborted by a higher priority request").
        """
        rid = params.rid
        request = GenerateParams(
            max_tokens=0,
            priority=params.priority,
            rid=rid,
            namespace=params.namespace,
            session=params.session,
        )
        with self._aborts.tracking(rid):
            try:
                reply = await self._post_generate(ids, request)
            except RequestAborted:
                return self._counters.prefill(rid, len(ids), 0, 0, PrefillStatus.ABORTED)
            except EngineError:
                if self._aborts.aborted(rid):
                    return self._counters.prefill(rid, len(ids), 0, 0, PrefillStatus.ABORTED)
                raise
            return self._counters.prefill_reply(rid, ids, meta_info(reply))

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        """Prefill ``ids`` and decode up to ``max_tokens``; see the class doc for ``ttft_s``."""
        if self.stream_generate:
            completion: Completion | None = None
            async for chunk in self.stream_with(ids, params):
                completion = chunk.completion or completion
            assert completion is not None  # stream_with ends with a completion or raises
            return completion
        rid = params.rid
        start = time.perf_counter()
        with self._aborts.tracking(rid):
            try:
                reply = await self._post_generate(ids, params)
            except EngineError as exc:
                if isinstance(exc, RequestAborted) or self._aborts.aborted(rid):
                    self._counters.abort()
                self._aborts.check(rid, exc)
                raise
        e2e = time.perf_counter() - start
        meta = meta_info(reply)
        if finish_type(meta) == "abort":
            self._counters.abort()
            raise RequestAborted(f"{self.url}: request {rid} aborted: {finish_message(meta)}")
        ttft = server_ttft(meta)
        out_ids, text = reply.get("output_ids") or [], str(reply.get("text", ""))
        return self._counters.completion(
            rid, ids, meta, out_ids, text, e2e if ttft is None else ttft, e2e
        )

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        """Stream tokens as SSE events arrive; the last chunk carries the :class:`Completion`.

        Concatenating every chunk's ``token_ids`` gives ``completion.token_ids``. Closing the
        iterator early closes the connection, which makes SGLang abort the request.
        """
        rid = params.rid
        with self._aborts.tracking(rid):
            for attempt in (1, 2):
                chunks = stream_generate(
                    self._http,
                    self._body(ids, params, stream=True),
                    self._headers(params.session),
                    rid=rid,
                    check=lambda exc: self._aborts.check(rid, exc),
                    finish=lambda last, out_ids, text, ttft, e2e: self._counters.completion(
                        rid, ids, meta_info(last), out_ids, text, ttft, e2e
                    ),
                )
                try:
                    async with contextlib.aclosing(chunks):
                        async for chunk in chunks:
                            yield chunk
                    return
                except PriorityDisabled:
                    if attempt == 2 or not self._disable_priority():
                        raise
                except RequestAborted:
                    self._counters.abort()
                    raise

    async def abort(self, rid: str) -> None:
        """``POST /abort_request``. Unknown rids are ignored; re-sent while ``rid`` is pending.

        A server without the endpoint (sglang-router has none) is logged once and then skipped.
        """
        await self._aborts.abort(rid)

    def encode(self, text: str) -> list[int]:
        return self._require_tokenizer().encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self._require_tokenizer().decode(ids)

    @property
    def tokenizer(self) -> TextTokenizer | None:
        """The tokenizer ``encode``/``decode`` use, or ``None`` when none was found."""
        return self._tokenizer

    async def stats(self) -> EngineStats:
        """Server counters from ``/metrics`` when the server exports them, else this client's
        (see :mod:`agentwarm.engines.sglang.metrics` for the names read)."""
        return stats_from_metrics(await self.server_metrics()) or self.client_stats()

    def client_stats(self) -> EngineStats:
        """Traffic this client saw (cache size and capacity unknown from here)."""
        return self._counters.stats()

    async def flush_cache(self) -> None:
        """``POST /flush_cache``; SGLang refuses (400) while requests are running."""
        await self._http.flush_cache()

    async def aclose(self) -> None:
        if self._http.closed:
            return
        await self._http.aclose()  # first: nothing is sent from here on
        await self._aborts.aclose()
        if isinstance(self._tokenizer, RemoteTokenizer):
            self._tokenizer.close()

    # ------------------------------------------------------------------ server info

    async def health(self) -> bool:
        """``GET /health`` answered 200."""
        return await self._http.health()

    async def wait_ready(self, timeout_s: float = 0.0, *, interval_s: float = 0.2) -> None:
        """Return once ``/health`` answers 200; raise ``EngineUnavailable`` after ``timeout_s``."""
        await self._http.wait_ready(timeout_s, interval_s)

    async def model_info(self) -> dict[str, Any]:
        """``GET /model_info`` (falls back to the pre-0.5.5 ``/get_model_info``)."""
        return await self._http.get_info("/model_info", "/get_model_info")

    async def server_info(self) -> dict[str, Any]:
        """``GET /server_info`` (falls back to ``/get_server_info``)."""
        return await self._http.get_info("/server_info", "/get_server_info")

    async def server_metrics(self) -> dict[str, float]:
        """``GET /metrics`` parsed; empty when the server has none (or answers something that is
        not Prometheus text, which is logged)."""
        return await self._http.metrics()

    # ------------------------------------------------------------------ internals

    def _body(
        self, ids: Sequence[int], params: GenerateParams, *, stream: bool = False
    ) -> dict[str, Any]:
        return generate_body(
            ids,
            max_new_tokens=params.max_tokens,
            temperature=params.temperature,
            seed=params.seed,
            rid=params.rid,
            stream=stream,
            priority=params.priority if self.send_priority else None,
            namespace=params.namespace,
            salt_fields=self.salt_fields,
        )

    def _headers(self, session: str | None) -> dict[str, str]:
        return {ROUTING_KEY_HEADER: session} if self.routing_header and session else {}

    async def _post_generate(self, ids: Sequence[int], params: GenerateParams) -> GenerateReply:
        """A non-streamed ``/generate``, sent again without ``priority`` if the server refuses
        it."""
        for attempt in (1, 2):
            body = self._body(ids, params)
            try:
                reply = await self._http.post_json("/generate", body, self._headers(params.session))
                break
            except PriorityDisabled:
                if attempt == 2 or not self._disable_priority():
                    raise
        return cast(GenerateReply, reply)

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

    def _resolve_tokenizer(self, info: Mapping[str, Any]) -> None:
        """Blocking: take the tokenizer ``/model_info`` points to (see :meth:`from_url`)."""
        self._tokenizer_resolved = True
        tokenizer, note = tokenizer_from_info(
            info, self._http.base_url, api_key=self._http.api_key, trust_env=self._http.trust_env
        )
        self._set_tokenizer(tokenizer)
        self._tokenizer_note = note or self._tokenizer_note

    def _set_tokenizer(self, tokenizer: TextTokenizer | None) -> None:
        """Use ``tokenizer``, and its chat template when it has one (a local tokenizer)."""
        self._tokenizer = tokenizer
        if tokenizer is not None:
            self.chat_template = chat_template_of(tokenizer, name=self.model_name)

    def _require_tokenizer(self) -> TextTokenizer:
        if self._tokenizer is None and not self._tokenizer_resolved:
            self._resolve_tokenizer(self._http.model_info_sync())
        if self._tokenizer is None:
            raise EngineError(
                f"SGLangEngine({self.url}) has no tokenizer ({self._tokenizer_note}). Pass "
                "tokenizer=<local Hugging Face tokenizer dir of the served model> or 'byte', or "
                "create the engine with `await SGLangEngine.from_url(url)`."
            )
        return self._tokenizer

    def __repr__(self) -> str:
        return f"SGLangEngine({self.url!r}, model={self.model_name!r})"
