"""VLLMEngine: the engine protocol over vLLM's OpenAI-compatible HTTP server (DESIGN §4).

The wire format is :mod:`~agentwarm.engines.vllm.protocol`; errors
:mod:`~agentwarm.engines.vllm.errors`; streaming :mod:`~agentwarm.engines.vllm.stream`; aborts
and the live gate :mod:`~agentwarm.engines.vllm.flights`. HTTP is the SGLang client's
:class:`~agentwarm.engines.sglang.connection.Connection`. Rules this client keeps:

* Every request is a streamed token-id ``/v1/completions``; ``ttft_s`` is client-side. The
  text is this client's decoding of the token ids (vLLM's own may differ where an id ends
  mid-character), so that ``Completion.text == decode(token_ids)``.
* vLLM has no prefill-only request (``max_tokens: 0`` is a 400): a prefill is a ``max_tokens:
  1`` request whose token is discarded. A speculative prefill longer than
  ``prefill_chunk_tokens`` is sent **in chunks** (prompts of whole KV blocks + 1 token, each
  extending the cached prefix by at most that many tokens:
  :func:`~agentwarm.engines.vllm.flights.next_chunk_end`), the next one only when no live
  request of this engine is waiting for its first token: vLLM never preempts a running
  prefill, so a live request waits behind at most one chunk. A live-priority prefill is one request.
* An abort cancels the request's HTTP stream (vLLM aborts a request whose client disconnects)
  and stops a chunked prefill between chunks. An aborted prefill returns ``status=ABORTED`` with
  the chunks already computed counted; an aborted ``generate`` raises
  :class:`~agentwarm.errors.RequestAborted`.
* ``cached_tokens`` come from ``usage.prompt_tokens_details`` (in whole KV blocks); a server
  started without ``--enable-prompt-tokens-details`` reports none: one warning names the flag
  and they count as 0. A request over ``max_model_len`` raises
  :class:`~agentwarm.errors.ContextLengthExceeded` before anything is sent.
* ``priority`` is sent negated (vLLM serves lower values first); a server started without
  ``--scheduling-policy priority`` refuses it, and from then on none is sent (one warning).
* ``stats()``: this client's traffic, with the KV capacity, usage and tier from ``/metrics``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.trace import SpanKind

from agentwarm import telemetry as tm
from agentwarm.chat import ChatTemplate
from agentwarm.engines.base import (
    Completion,
    Engine,
    EngineStats,
    GenerateParams,
    PrefillParams,
    PrefillResult,
    PrefillStatus,
    Priority,
    StreamChunk,
    check_context,
)
from agentwarm.engines.sglang.connection import Connection
from agentwarm.engines.sglang.metrics import ClientCounters
from agentwarm.engines.tokenizers import Tokenizer, chat_template_of, load_tokenizer
from agentwarm.engines.vllm.errors import PriorityRefused
from agentwarm.engines.vllm.flags import ServerFlags
from agentwarm.engines.vllm.flights import Flight, Flights, LiveGate, next_chunk_end
from agentwarm.engines.vllm.metrics import CacheConfig, read_server_metrics, with_server
from agentwarm.engines.vllm.protocol import completions_body
from agentwarm.engines.vllm.server import ServedModel, read_server
from agentwarm.engines.vllm.stream import Final, new_text, start_stream
from agentwarm.errors import EngineError, RequestAborted

__all__ = ("DEFAULT_PREFILL_CHUNK_TOKENS", "VLLMEngine")

log = logging.getLogger(__name__)

#: Tokens a speculative chunk adds at most (whole KV blocks): a live request waits behind one.
#: benchmarks/vllm_ttft.py (docs/benchmarks.md): behind 128/512/1024-token chunks of a 3k prefill
#: a live TTFT of 0.05/0.17/0.37 x that prefill alone (goal <= 0.35); 256 halves 512's wait
#: (~8 s vs ~16 s on 1 CPU core) for half the chunks of 128 (which cost +32% total prefill time).
DEFAULT_PREFILL_CHUNK_TOKENS = 256


class VLLMEngine(Engine):
    """Client of one vLLM OpenAI-compatible server at ``url`` (see the module docstring).

    Build it with :meth:`from_url`, which reads the served model, its context length, its
    tokenizer and the KV block size. ``prefill_chunk_tokens=None`` sends every prefill whole.
    Built with ``model=None`` (:meth:`connecting`: the gateway's, which starts whether or not
    its upstream is up yet), it reads them before its first request instead.
    """

    #: A live request whose prefix is being prefetched is sent at once, not after the prefetch:
    #: vLLM's prefix cache gives it every chunk already computed (the one running, too, once
    #: it ends: vLLM caches a block when its step ends, and the live request is scheduled
    #: after that step), the gate sends no further chunk until it has its first token, and
    #: the chunks sent after it find its KV cached (one token each recomputed). So a prefix is
    #: computed once, and the live request never waits for the rest of a speculative prefill.
    supports_promotion = True
    provider_name = tm.PROVIDER_VLLM
    span_kind = SpanKind.CLIENT

    def __init__(
        self,
        url: str,
        *,
        model: ServedModel | None,
        tokenizer: Tokenizer | None,
        cache: CacheConfig | None = None,
        prefill_chunk_tokens: int | None = DEFAULT_PREFILL_CHUNK_TOKENS,
        send_priority: bool = True,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        api_key: str | None = None,
        max_connections: int = 64,
        trust_env: bool = False,
    ) -> None:
        if prefill_chunk_tokens is not None and prefill_chunk_tokens < 1:
            raise ValueError(f"prefill_chunk_tokens must be >= 1, got {prefill_chunk_tokens}")
        self._http = Connection(
            url,
            api_key=api_key,
            timeout=timeout,
            connect_timeout=connect_timeout,
            max_connections=max_connections,
            trust_env=trust_env,
            transport=None,
        )
        self.url = self._http.url
        self.api_key = api_key
        self.model: ServedModel | None = None
        self.model_name = ""
        self.max_context: int | None = None
        self.cache: CacheConfig | None = None
        self.block_size = 16
        self.prefill_chunk_tokens = prefill_chunk_tokens
        self._tokenizer = tokenizer
        self.chat_template: ChatTemplate | None = None
        self._connected = asyncio.Lock()
        if model is not None:
            self._connect(model, cache, tokenizer)
        self._flights = Flights()
        self._live = LiveGate()
        self._counters = ClientCounters()
        #: What the server was started without, as its answers tell.
        self.flags = ServerFlags(self.url, send_priority=send_priority)

    @classmethod
    async def from_url(
        cls,
        url: str,
        *,
        tokenizer: str | Path | Tokenizer | None = None,
        wait_s: float = 0.0,
        api_key: str | None = None,
        **kwargs: Any,
    ) -> VLLMEngine:
        """Connect to ``url``: wait up to ``wait_s`` for ``/health``, read ``/v1/models`` (the
        served model and its ``max_model_len``) and ``/metrics`` (KV block size, capacity).

        The tokenizer is ``tokenizer``, else the served model's directory when it is on this
        machine, else the server's ``/tokenize`` (a blocking round trip per call). Raises
        :class:`~agentwarm.errors.EngineUnavailable` when the server is not healthy in time."""
        http = Connection(
            url,
            api_key=api_key,
            timeout=30.0,
            connect_timeout=10.0,
            max_connections=4,
            trust_env=bool(kwargs.get("trust_env", False)),
            transport=None,
        )
        try:
            await http.wait_ready(wait_s, 0.5)
            model, cache, tok = await read_server(
                http, tokenizer=load_tokenizer(tokenizer), api_key=api_key
            )
        finally:
            await http.aclose()
        return cls(url, model=model, tokenizer=tok, cache=cache, api_key=api_key, **kwargs)

    @classmethod
    def connecting(
        cls, url: str, *, tokenizer: Tokenizer | None = None, **kwargs: Any
    ) -> VLLMEngine:
        """An engine of ``url`` that reads the served model, the KV block size and (without
        ``tokenizer``) the tokenizer before its first request, not now (see :meth:`ready`)."""
        return cls(url, model=None, tokenizer=tokenizer, **kwargs)

    async def ready(self) -> None:
        """Read what :meth:`from_url` reads, once (an engine built with a model: nothing);
        an unreachable server raises its :class:`~agentwarm.errors.EngineError` and is asked
        again next time."""
        if self.model is not None:
            return
        async with self._connected:
            if self.model is not None:
                return
            model, cache, tok = await read_server(
                self._http, tokenizer=self._tokenizer, api_key=self.api_key
            )
            self._connect(model, cache, tok)

    def _connect(
        self, model: ServedModel, cache: CacheConfig | None, tokenizer: Tokenizer | None
    ) -> None:
        if tokenizer is None:
            raise ValueError("a VLLMEngine built with its model needs its tokenizer too")
        self.model = model
        self.model_name = model.name
        self.max_context = model.max_model_len
        self.cache = cache
        self.block_size = cache.block_size if cache else 16
        self._tokenizer = tokenizer
        self.chat_template = chat_template_of(tokenizer, name=model.name)

    # ------------------------------------------------------------------ engine protocol

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        """Cache the KV of ``ids`` (see the module docstring for chunks); aborted →
        ``status=ABORTED`` with the tokens of the chunks already done as computed."""
        context = await self._context()
        check_context(len(ids), context)
        wire = list(ids[: context - 1])  # room for the one discarded token
        chunked = self.prefill_chunk_tokens is not None and params.priority < Priority.LIVE
        cached = done = 0  # served from the cache beyond our own chunks; cached whole so far
        request = GenerateParams(
            max_tokens=1, priority=params.priority, rid=params.rid, namespace=params.namespace
        )
        with self._flights.tracking(params.rid) as flight:
            while done < len(wire):
                end = len(wire)
                if chunked:
                    chunk = self.prefill_chunk_tokens or 0
                    end = next_chunk_end(done, end, block=self.block_size, chunk=chunk)
                    await self._live.idle()
                if flight.aborted:
                    break
                try:
                    final = await self._run(wire[:end], request, flight, live=False)
                except RequestAborted:
                    break
                cached += max(0, self.flags.count(final.usage, prefill=True) - done)
                done = end if end == len(wire) else end - 1
        status = PrefillStatus.DONE if done == len(wire) else PrefillStatus.ABORTED
        reached = len(ids) if status is PrefillStatus.DONE else done
        computed = max(0, reached - cached)
        self._counters.finished(
            cached + computed, cached, computed, aborted=status is PrefillStatus.ABORTED
        )
        return PrefillResult(params.rid, len(ids), cached, computed, status)

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        completion: Completion | None = None
        async for chunk in self.stream_with(ids, params):
            completion = chunk.completion or completion
        assert completion is not None  # stream_with ends with a completion or raises
        return completion

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        """Tokens as they arrive; the last chunk carries the :class:`Completion`. Closing the
        iterator early closes the connection, which makes vLLM abort the request."""
        check_context(len(ids), await self._context(), max_tokens=params.max_tokens)
        out: list[int] = []
        shown = ""  # the text yielded so far: a prefix of decode(out) (see new_text)
        with self._flights.tracking(params.rid) as flight:
            async for piece in self._pieces(list(ids), params, flight, live=True):
                if isinstance(piece, Final):
                    text = self.decode(piece.token_ids)
                    completion = self._completion(ids, params, piece, text)
                    yield StreamChunk((), text[len(shown) :], completion)
                else:
                    out.extend(piece[0])
                    new = new_text(self.decode(out), shown)
                    shown += new
                    yield StreamChunk(tuple(piece[0]), new)

    async def abort(self, rid: str) -> None:
        """Cancel the request(s) of ``rid`` (vLLM aborts on disconnect); unknown rids are
        ignored."""
        self._flights.abort(rid)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(ids)

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tokenizer is None:
            raise EngineError(f"{self.url}: not connected yet (await ready() first)")
        return self._tokenizer

    @property
    def live(self) -> LiveGate:
        """This engine's live requests waiting for their first token (the gate of chunked
        speculation); the gateway enters the chat requests it forwards to this server."""
        return self._live

    async def stats(self) -> EngineStats:
        """This client's traffic, with the server's cache and tier from ``/metrics``
        (:func:`~agentwarm.engines.vllm.metrics.with_server`)."""
        cache, server = await read_server_metrics(self._http)
        self.cache = cache or self.cache
        return with_server(self._counters.stats(), cache, server)

    async def server_stats(self) -> EngineStats | None:
        """The server's counters (every client's traffic, the lower tiers' hits split out:
        :func:`~agentwarm.engines.vllm.metrics.parse_server_stats`); ``None``: it has none."""
        return (await read_server_metrics(self._http))[1]

    async def aclose(self) -> None:
        if self._http.closed:
            return
        self._flights.abort_all()
        await self._http.aclose()
        close = getattr(self._tokenizer, "close", None) if self._tokenizer else None
        if callable(close):
            close()

    # ------------------------------------------------------------------ internals

    async def _context(self) -> int:
        """The served model's context, once :meth:`ready`."""
        await self.ready()
        assert self.max_context is not None  # set with the model
        return self.max_context

    async def _run(
        self, ids: list[int], params: GenerateParams, flight: Flight, *, live: bool
    ) -> Final:
        async for piece in self._pieces(ids, params, flight, live=live):
            if isinstance(piece, Final):
                return piece
        raise EngineError(f"{self.url}: request {params.rid} ended without a result")

    async def _pieces(
        self, ids: list[int], params: GenerateParams, flight: Flight, *, live: bool
    ) -> AsyncIterator[tuple[list[int], str] | Final]:
        """The pieces of one request, sent again without ``priority`` if the server refuses
        it; a live one counts as waiting until its first token."""
        for attempt in (1, 2):
            waiting = live
            if waiting:
                self._live.enter()

            def first_token() -> None:
                nonlocal waiting
                if waiting:
                    waiting = False
                    self._live.leave()

            body = self._body(ids, params)
            task, pieces = start_stream(
                self._http, body, len(ids), rid=params.rid, on_first_token=first_token
            )
            flight.task = task
            if flight.aborted:
                task.cancel()
            try:
                async for piece in pieces:
                    yield piece
                return
            except PriorityRefused:
                if attempt == 2 or not self.flags.refuse_priority():
                    raise
            except RequestAborted:
                if live:
                    self._counters.abort()
                raise
            finally:
                first_token()
                flight.task = None

    def _body(self, ids: list[int], params: GenerateParams) -> dict[str, Any]:
        return completions_body(
            ids,
            model=self.model_name,
            max_tokens=params.max_tokens,
            temperature=params.temperature,
            seed=params.seed,
            priority=params.priority if self.flags.send_priority else None,
            namespace=params.namespace,
        )

    def _completion(
        self, ids: Sequence[int], params: GenerateParams, final: Final, text: str
    ) -> Completion:
        prompt, cached = final.usage.prompt_tokens, self.flags.count(final.usage)
        self._counters.finished(prompt, cached, prompt - cached)
        return Completion(
            text=text,
            token_ids=final.token_ids,
            prompt_tokens=prompt,
            cached_tokens=cached,
            ttft_s=final.ttft_s,
            finish_reason=final.finish_reason,
            rid=params.rid,
            e2e_s=final.e2e_s,
        )

    def __repr__(self) -> str:
        return f"VLLMEngine({self.url!r}, model={self.model_name!r})"
