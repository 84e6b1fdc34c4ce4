"""``FakeEngine``: a deterministic engine with a real radix cache and a cost model, no torch.

It schedules like the embedded engine (one worker, chunked prefill, LIVE before SPECULATIVE,
aborts honoured between prefill chunks and between output tokens, computed chunks kept) but
computes nothing: a prefill chunk of ``n`` uncached tokens takes ``n * seconds_per_token`` and
each output token ``seconds_per_output_token`` (decodes run side by side, off the prefill worker).
Use it to test workflows and policies fast and exactly.

Text is byte-encoded (one token per UTF-8 byte). Outputs are pseudo-random lowercase words that
depend only on the prompt ids (and ``seed`` when ``temperature > 0``), so a run is reproducible
and outputs are identical with or without prefetching.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import itertools
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from agentwarm.engines.base import (
    DEFAULT_MAX_CONTEXT,
    Completion,
    Engine,
    EngineStats,
    PrefillResult,
    PrefillStatus,
    Priority,
    StreamChunk,
    check_context,
    new_rid,
)
from agentwarm.engines.radix import RadixCache, RadixNode
from agentwarm.errors import EngineUnavailable, InvalidRequest, RequestAborted

__all__ = ("DEFAULT_LOG_LIMIT", "FakeEngine", "RequestLog")

_LETTERS = "abcdefghijklmnopqrstuvwxyz     "
_MAX_PIN_RIDS = 4096

DEFAULT_LOG_LIMIT = 10_000
"""How many finished requests (``FakeEngine.log``) and aborts (``FakeEngine.aborts``) a
FakeEngine keeps by default: plenty for a test, bounded for a long-running ``agentwarm serve
--engine fake`` (each entry holds the request's rid, namespace and session, up to ~1 KB)."""

T = TypeVar("T")


class _History(list[T]):
    """A list that keeps only the last ``limit`` items given to ``append`` (the oldest go
    first); a plain list otherwise, so tests index, slice and compare it as one."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def append(self, item: T) -> None:
        super().append(item)
        if len(self) > self.limit:
            del self[0]


@dataclass(slots=True)
class RequestLog:
    """One finished request as the engine saw it (for tests and debugging)."""

    rid: str
    kind: str
    priority: int
    namespace: str
    session: str | None
    prompt_tokens: int
    cached_tokens: int
    computed_tokens: int
    status: str


@dataclass(eq=False)
class _Item:
    kind: str
    ids: tuple[int, ...]
    priority: int
    rid: str
    namespace: str
    session: str | None
    seq: int
    future: asyncio.Future[tuple[int, int, bool]]
    pos: int = 0
    cached: int | None = None
    computed: int = 0
    aborted: bool = False
    decoding: bool = False  # a generate past its prefill, decoding outside the queue
    node: RadixNode[None] | None = field(default=None, repr=False)


class FakeEngine(Engine):
    """Deterministic engine for tests and simulations (see module docstring).

    ``max_cached_tokens`` bounds the radix cache; speculative prefills pin their prefix for
    ``pin_ttl_s``. ``log`` records the last ``log_limit`` finished requests and ``aborts`` the
    last ``log_limit`` aborts received (see :data:`DEFAULT_LOG_LIMIT`); ``stats()`` counts all.
    ``max_context`` is the model context in tokens (bytes), as the built-in presets' by default:
    a longer prompt, or a prompt plus ``max_tokens`` past it, raises ``ContextLengthExceeded``.
    """

    supports_promotion = True
    provider_name = "agentwarm.fake"

    def __init__(
        self,
        *,
        seconds_per_token: float = 2e-5,
        seconds_per_output_token: float = 2e-4,
        chunk_size: int = 256,
        max_cached_tokens: int | None = None,
        pin_ttl_s: float = 30.0,
        max_context: int = DEFAULT_MAX_CONTEXT,
        model_name: str = "fake",
        log_limit: int = DEFAULT_LOG_LIMIT,
    ) -> None:
        if chunk_size < 1:
            raise ValueError("chunk_size must be >= 1")
        if log_limit < 0:
            raise ValueError("log_limit must be >= 0")
        if max_context < 1:
            raise ValueError("max_context must be >= 1")
        self.seconds_per_token = seconds_per_token
        self.seconds_per_output_token = seconds_per_output_token
        self.chunk_size = chunk_size
        self.pin_ttl_s = pin_ttl_s
        self.max_context = max_context
        self.model_name = model_name
        self.cache: RadixCache[None] = RadixCache(max_cached_tokens)
        self.log: list[RequestLog] = _History(log_limit)
        self.aborts: list[str] = _History(log_limit)
        self.chunks = 0
        # Queued and running items by seq; a heap of (-priority, seq) picks the next one in
        # O(log n) (stale entries of finished items are skipped); aborted items wait in _dead
        # until the worker resolves them, wherever they are in the order.
        self._queue: dict[int, _Item] = {}
        self._heap: list[tuple[int, int]] = []
        self._dead: list[_Item] = []
        self._by_rid: dict[str, _Item] = {}
        self._pinned: dict[str, RadixNode[None]] = {}
        self._seq = itertools.count()
        self._wake: asyncio.Event | None = None
        self._worker: asyncio.Task[None] | None = None
        self._closed = False
        self._hit_tokens = 0
        self._prompt_tokens = 0
        self._computed_tokens = 0
        self._aborted = 0
        self._requests = 0

    # --- protocol ---------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")

    async def prefill(
        self,
        ids: Sequence[int],
        *,
        priority: int = Priority.SPECULATIVE,
        rid: str | None = None,
        namespace: str = "",
        session: str | None = None,
    ) -> PrefillResult:
        item = self._enqueue("prefill", ids, priority, rid, namespace, session)
        cached, computed, aborted = await self._wait(item)
        status = PrefillStatus.ABORTED if aborted else PrefillStatus.DONE
        return PrefillResult(item.rid, len(item.ids), cached, computed, status)

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
        t0 = time.perf_counter()
        item = self._enqueue("generate", ids, priority, rid, namespace, session, max(1, max_tokens))
        async with contextlib.aclosing(self._stream(item, max_tokens, temperature, seed, t0)) as it:
            async for chunk in it:
                if chunk.completion is not None:
                    return chunk.completion
        raise AssertionError("the stream ended without a completion")

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
        """Yield the output tokens as they are decoded, then a chunk carrying the Completion.

        Raises :class:`~agentwarm.errors.RequestAborted` if the request is aborted (the tokens
        yielded before stay yielded); closing the iterator early aborts the request."""
        t0 = time.perf_counter()
        item = self._enqueue("generate", ids, priority, rid, namespace, session, max(1, max_tokens))
        async with contextlib.aclosing(self._stream(item, max_tokens, temperature, seed, t0)) as it:
            async for chunk in it:
                yield chunk

    async def _stream(
        self, item: _Item, max_tokens: int, temperature: float, seed: int | None, t0: float
    ) -> AsyncGenerator[StreamChunk, None]:
        out: list[int] = []
        ttft = 0.0
        async for tokens in self._decode(item, max(1, max_tokens), temperature, seed):
            ttft = ttft or time.perf_counter() - t0
            out.extend(tokens)
            yield StreamChunk(tokens, self.decode(tokens))
        completion = Completion(
            text=self.decode(out),
            token_ids=tuple(out),
            prompt_tokens=len(item.ids),
            cached_tokens=item.cached or 0,
            ttft_s=ttft,
            finish_reason="length",
            rid=item.rid,
            e2e_s=time.perf_counter() - t0,
        )
        yield StreamChunk((), "", completion)

    async def _decode(
        self, item: _Item, n: int, temperature: float, seed: int | None
    ) -> AsyncIterator[tuple[int, ...]]:
        """Await ``item``'s prefill, then yield its ``n`` output tokens as they come due, one per
        ``seconds_per_output_token`` (several at once when the loop wakes up later than that).

        An abort (``abort(rid)``, the caller's cancellation, closing the iterator) takes effect at
        the next token boundary: RequestAborted, counted as an aborted request whose whole prompt
        was processed."""
        aborted = True
        try:
            cached, computed, prefill_aborted = await self._wait(item)
            if prefill_aborted:
                raise RequestAborted(
                    f"request {item.rid} was aborted",
                    cached_tokens=cached,
                    computed_tokens=computed,
                )
            out = self._output(item.ids, n, temperature, seed)
            loop = asyncio.get_running_loop()
            start, step, sent = loop.time(), self.seconds_per_output_token, 0
            while sent < n:
                await asyncio.sleep(max(0.0, start + (sent + 1) * step - loop.time()))
                if item.aborted:
                    raise RequestAborted(
                        f"request {item.rid} was aborted after {sent} of {n} output tokens",
                        cached_tokens=cached,
                        computed_tokens=len(item.ids) - cached,
                    )
                due = n if step <= 0 else min(n, int((loop.time() - start) / step))
                due = max(due, sent + 1)
                yield tuple(out[sent:due])
                sent = due
            aborted = False
        finally:
            self._end_decode(item, aborted=aborted)

    async def abort(self, rid: str) -> None:
        """Abort a queued or running request; for a finished speculative prefill, drop its pin
        (the runtime aborts losing branches, whose prefixes should not crowd out live ones)."""
        self.aborts.append(rid)
        item = self._by_rid.get(rid)
        if item is not None:
            self._mark_aborted(item)
            return
        pinned = self._pinned.pop(rid, None)
        if pinned is not None:
            self.cache.unpin(pinned)

    async def _wait(self, item: _Item) -> tuple[int, int, bool]:
        """Await ``item``; a caller that gives up (cancellation, timeout) aborts it."""
        try:
            return await asyncio.shield(item.future)
        except asyncio.CancelledError:
            self._mark_aborted(item)
            raise

    async def stats(self) -> EngineStats:
        return EngineStats(
            cached_tokens=self.cache.total_tokens,
            capacity_tokens=self.cache.max_tokens,
            evicted_tokens=self.cache.evicted_tokens,
            hit_tokens=self._hit_tokens,
            prompt_tokens=self._prompt_tokens,
            computed_tokens=self._computed_tokens,
            requests=self._requests,
            aborted=self._aborted,
        )

    async def flush_cache(self) -> None:
        self.cache.reset()

    async def aclose(self) -> None:
        self._closed = True
        for item in list(self._queue.values()):
            self._mark_aborted(item)
        self._kick()
        if self._worker is not None:
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None

    # --- scheduling -------------------------------------------------------------------------

    def _enqueue(
        self,
        kind: str,
        ids: Sequence[int],
        priority: int,
        rid: str | None,
        namespace: str,
        session: str | None,
        max_tokens: int = 0,
    ) -> _Item:
        if self._closed:
            raise EngineUnavailable("FakeEngine is closed")
        if not ids:
            raise InvalidRequest("empty prompt: ids must hold at least one token")
        check_context(len(ids), self.max_context, max_tokens=max_tokens)
        loop = asyncio.get_running_loop()
        item = _Item(
            kind=kind,
            ids=tuple(ids),
            priority=int(priority),
            rid=rid or new_rid(),
            namespace=namespace,
            session=session,
            seq=next(self._seq),
            future=loop.create_future(),
        )
        self._queue[item.seq] = item
        heapq.heappush(self._heap, (-item.priority, item.seq))
        self._by_rid[item.rid] = item
        if self._worker is None or self._worker.done():
            self._wake = asyncio.Event()
            self._worker = loop.create_task(self._run())
        self._kick()
        return item

    def _mark_aborted(self, item: _Item) -> None:
        item.aborted = True
        self._dead.append(item)
        self._kick()

    def _next(self) -> _Item | None:
        """The queued item that runs next: highest priority, then first come."""
        while self._heap:
            item = self._queue.get(self._heap[0][1])
            if item is not None:
                return item
            heapq.heappop(self._heap)
        return None

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None
        while not self._closed or self._queue:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            while self._dead:
                dead = self._dead.pop()
                if self._queue.get(dead.seq) is dead:
                    self._finish(dead, aborted=True)
            item = self._next()
            if item is not None:
                await self._advance(item)

    async def _advance(self, item: _Item) -> None:
        """Run one chunk of ``item`` (or finish it): re-match the tree first, so work another
        request inserted meanwhile is reused, never recomputed."""
        if item.aborted:
            self._finish(item, aborted=True)
            return
        match = self.cache.match_prefix(item.namespace, item.ids)
        usable = match.length
        if item.kind == "generate":
            # Like SGLang and the embedded engine: the last prompt token is always computed,
            # because its logits are needed for the first output token.
            usable = min(usable, len(item.ids) - 1)
        if item.cached is None:
            item.cached = usable
        item.pos = max(item.pos, usable)
        self._hold(item, match.node)
        remaining = len(item.ids) - item.pos
        if remaining <= 0:
            self._finish(item, aborted=False)
            return
        n = min(self.chunk_size, remaining)
        await asyncio.sleep(n * self.seconds_per_token)
        self.chunks += 1
        item.pos += n
        item.computed += n
        inserted = self.cache.insert(item.namespace, item.ids[: item.pos])
        self._hold(item, inserted.node)

    def _hold(self, item: _Item, node: RadixNode[None]) -> None:
        if item.node is node:
            return
        if item.node is not None:
            self.cache.unlock(item.node)
        self.cache.lock(node)
        item.node = node

    def _finish(self, item: _Item, *, aborted: bool) -> None:
        """Leave the queue: unlock (pin a speculative prefill), then resolve the future. A
        generate that was not aborted goes on decoding (``item.decoding``) and is counted when
        that ends (:meth:`_end_decode`); anything else is counted now."""
        del self._queue[item.seq]
        item.decoding = item.kind == "generate" and not aborted
        if not item.decoding and self._by_rid.get(item.rid) is item:
            del self._by_rid[item.rid]
        if item.node is not None:
            if item.kind == "prefill" and not aborted and item.priority < Priority.LIVE:
                self.cache.pin(item.node, self.pin_ttl_s)
                self._pinned[item.rid] = item.node
                while len(self._pinned) > _MAX_PIN_RIDS:  # expired pins need no bookkeeping
                    self._pinned.pop(next(iter(self._pinned)))
            self.cache.unlock(item.node)
            item.node = None
        if not item.decoding:
            self._account(item, aborted=aborted)
        if not item.future.done():
            item.future.set_result((item.cached or 0, item.computed, aborted))

    def _end_decode(self, item: _Item, *, aborted: bool) -> None:
        """Count a generate whose decode ended (done or aborted); a no-op for one that never
        reached decode (:meth:`_finish` counted it)."""
        if not item.decoding:
            return
        item.decoding = False
        if self._by_rid.get(item.rid) is item:
            del self._by_rid[item.rid]
        self._account(item, aborted=aborted, prefilled=True)

    def _account(self, item: _Item, *, aborted: bool, prefilled: bool = False) -> None:
        """Add a finished request to the counters and the log; an aborted one adds only the
        prompt tokens processed before the abort (all of them once it was ``prefilled``)."""
        cached = item.cached or 0
        processed = len(item.ids) if prefilled or not aborted else cached + item.computed
        self._prompt_tokens += processed
        self._computed_tokens += item.computed
        self._hit_tokens += cached
        self._aborted += aborted
        self._requests += 1
        self.log.append(
            RequestLog(
                rid=item.rid,
                kind=item.kind,
                priority=item.priority,
                namespace=item.namespace,
                session=item.session,
                prompt_tokens=len(item.ids),
                cached_tokens=cached,
                computed_tokens=item.computed,
                status="aborted" if aborted else "done",
            )
        )

    def _output(
        self, ids: tuple[int, ...], n: int, temperature: float, seed: int | None
    ) -> list[int]:
        digest = hashlib.blake2b(bytes(i & 0xFF for i in ids[-4096:]), digest_size=8).digest()
        rng = random.Random(int.from_bytes(digest, "big") ^ (seed or 0 if temperature > 0 else 0))
        return [ord(rng.choice(_LETTERS)) for _ in range(n)]
