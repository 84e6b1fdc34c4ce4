"""Several workers behind one engine: consistent hashing on the workflow run.

A workflow run's prefetches and its real requests must reach the worker that holds their prefix
in its radix cache, so :class:`MultiWorkerEngine` routes every request by its ``session`` (the run
key) on a :class:`HashRing`. Rules it keeps:

* Same session → same worker, as long as that worker is up. Requests without a session are
  hashed by their rid (spread, no affinity).
* ``abort(rid)`` goes to the worker that got ``rid``; unknown rids are ignored.
* A worker that fails with :class:`~agentwarm.errors.EngineUnavailable` (connection refused,
  reset, 502/503/504) is marked down and skipped for ``retry_down_s``; the sessions it owned move
  to the next worker clockwise on the ring (the others stay where they are). After
  ``retry_down_s`` it is probed (``health()`` when the engine has one) before it gets traffic
  again.
* A live request (``generate``, or a ``prefill`` with ``priority >= Priority.LIVE``) that hits a
  dead worker is retried once on the next worker; a stream is retried only if it had not yielded
  anything yet. A speculative prefill is not retried: the error propagates so that the runtime
  counts and drops it.

The alternative is sglang-router in front of the workers (one URL for :class:`SGLangEngine`):
its ``consistent_hashing`` policy (Python ``RouterArgs``) or ``manual`` policy (CLI) with
``SGLangEngine(routing_header=True)``, which sends ``X-SMG-Routing-Key: <session>``. The router
has no ``/abort_request``, so aborts do not reach the workers that way.
"""

from __future__ import annotations

import bisect
import hashlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from opentelemetry.trace import SpanKind

from agentwarm.engines.base import (
    Completion,
    Engine,
    EngineStats,
    GenerateParams,
    PrefillParams,
    PrefillResult,
    Priority,
    StreamChunk,
)
from agentwarm.engines.sglang import SGLangEngine
from agentwarm.errors import EngineError, EngineUnavailable

__all__ = ("HashRing", "MultiWorkerEngine")

T = TypeVar("T")


def _position(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest(), "big")


class HashRing:
    """A consistent-hash ring: each node sits at ``vnodes`` pseudo-random points.

    ``owners(key)`` lists the distinct nodes clockwise from the key's point; the first one is the
    key's owner, the next ones take over when it is down. Removing a node moves only its keys.
    """

    def __init__(self, nodes: Iterable[str], *, vnodes: int = 160) -> None:
        self.nodes = tuple(dict.fromkeys(nodes))
        if not self.nodes:
            raise ValueError("a hash ring needs at least one node")
        if vnodes < 1:
            raise ValueError(f"vnodes must be >= 1, got {vnodes}")
        points = sorted(
            (_position(f"{node}#{i}"), node) for node in self.nodes for i in range(vnodes)
        )
        self._keys = [p for p, _ in points]
        self._owners = [n for _, n in points]

    def owners(self, key: str) -> list[str]:
        """Distinct nodes in ring order starting at ``key``'s owner."""
        start = bisect.bisect(self._keys, _position(key)) % len(self._keys)
        seen: dict[str, None] = {}
        for i in range(len(self._owners)):
            seen.setdefault(self._owners[(start + i) % len(self._owners)], None)
            if len(seen) == len(self.nodes):
                break
        return list(seen)

    def lookup(self, key: str, *, skip: Iterable[str] = ()) -> str | None:
        """The first owner of ``key`` not in ``skip``, or ``None`` when all are skipped."""
        skipped = set(skip)
        return next((n for n in self.owners(key) if n not in skipped), None)


@dataclass
class _Worker:
    name: str
    engine: Engine
    down_until: float = 0.0
    down_reason: str = ""
    requests: int = 0
    failures: int = 0


class MultiWorkerEngine(Engine):
    """Routes each session to one of several workers; see the module docstring for the rules.

    ``workers`` are URLs (each becomes ``SGLangEngine(url, **engine_kwargs)``), engines, or a
    mapping of names to engines. ``encode``/``decode`` use the first worker whose tokenizer is
    reachable (all workers must serve one model). ``provider_name`` and ``span_kind`` are the
    workers' (ValueError when they differ).
    """

    def __init__(
        self,
        workers: Sequence[str | Engine] | Mapping[str, Engine],
        *,
        vnodes: int = 160,
        retry_down_s: float = 5.0,
        **engine_kwargs: Any,
    ) -> None:
        named: list[tuple[str, Engine]] = []
        if isinstance(workers, Mapping):
            named = list(workers.items())
        else:
            for i, worker in enumerate(workers):
                if isinstance(worker, str):
                    client = SGLangEngine(worker, **engine_kwargs)
                    named.append((client.url, client))  # the URL without its credentials
                else:
                    named.append((getattr(worker, "url", None) or f"worker{i}", worker))
        if not named:
            raise ValueError("MultiWorkerEngine needs at least one worker")
        self._workers = {name: _Worker(name, engine) for name, engine in named}
        if len(self._workers) != len(named):
            raise ValueError(f"duplicate worker names: {[n for n, _ in named]}")
        self._ring = HashRing(self._workers, vnodes=vnodes)
        self.retry_down_s = retry_down_s
        self._rid_worker: dict[str, _Worker] = {}
        self._aborted: set[str] = set()
        first = named[0][1]
        self.model_name = first.model_name
        self.chat_template = first.chat_template  # all workers serve one model
        self.supports_promotion = all(e.supports_promotion for _, e in named)
        self.preempts_speculation = all(e.preempts_speculation for _, e in named)
        kinds = {(e.provider_name, e.span_kind) for _, e in named}
        if len(kinds) > 1:
            raise ValueError(
                "MultiWorkerEngine workers must be engines of one kind (one provider name and "
                f"span kind), got {sorted((p, k.name) for p, k in kinds)}"
            )
        # The spans of a routed request are those of the worker that serves it.
        self._provider_name, self._span_kind = kinds.pop()

    @property
    def provider_name(self) -> str:
        """The workers' provider name (they are engines of one kind)."""
        return self._provider_name

    @property
    def span_kind(self) -> SpanKind:
        """The workers' span kind."""
        return self._span_kind

    @classmethod
    async def from_urls(cls, urls: Sequence[str], **kwargs: Any) -> MultiWorkerEngine:
        """Connect to every URL with :meth:`SGLangEngine.from_url` (one tokenizer for all)."""
        options = {k: kwargs.pop(k) for k in ("vnodes", "retry_down_s") if k in kwargs}
        engines: list[Engine] = []
        try:
            for url in urls:
                engine = await SGLangEngine.from_url(url, **kwargs)
                kwargs.setdefault("tokenizer", engine.tokenizer)
                engines.append(engine)
        except BaseException:
            for opened in engines:
                await opened.aclose()
            raise
        return cls(engines, **options)

    # ------------------------------------------------------------------ routing

    @property
    def workers(self) -> dict[str, Engine]:
        """Worker name → engine, in ring-construction order."""
        return {w.name: w.engine for w in self._workers.values()}

    def route(self, key: str) -> str:
        """Name of the worker that ``key`` (a session) goes to now."""
        return self._pick(key, ()).name

    def down_workers(self) -> dict[str, str]:
        """Workers currently marked down, with the error that marked them."""
        now = time.monotonic()
        return {w.name: w.down_reason for w in self._workers.values() if w.down_until > now}

    def worker_requests(self) -> dict[str, int]:
        """Requests sent to each worker so far (including failed ones)."""
        return {w.name: w.requests for w in self._workers.values()}

    def _pick(self, key: str, skip: Iterable[str]) -> _Worker:
        skipped = set(skip)
        now = time.monotonic()
        for name in self._ring.owners(key):
            worker = self._workers[name]
            if name not in skipped and worker.down_until <= now:
                return worker
        reasons = "; ".join(f"{w.name}: {w.down_reason}" for w in self._workers.values())
        raise EngineUnavailable(f"no worker is up for {key!r} ({reasons})")

    async def _probe(self, worker: _Worker) -> bool:
        health = getattr(worker.engine, "health", None)
        if health is None or not worker.failures:
            return True
        ok = bool(await health())
        if not ok:
            self._mark_down(worker, worker.down_reason or "health check failed")
        return ok

    def _mark_down(self, worker: _Worker, reason: str) -> None:
        worker.failures += 1
        worker.down_until = time.monotonic() + self.retry_down_s
        worker.down_reason = reason

    async def _choose(self, key: str, skip: set[str]) -> _Worker:
        while True:
            worker = self._pick(key, skip)
            if worker.down_until == 0.0 or await self._probe(worker):
                return worker
            skip.add(worker.name)

    async def _dispatch(
        self, key: str, rid: str, live: bool, call: Callable[[Engine], Awaitable[T]]
    ) -> T:
        skip: set[str] = set()
        try:
            for attempt in (1, 2):
                worker = await self._choose(key, skip)
                self._rid_worker[rid] = worker
                worker.requests += 1
                try:
                    result = await call(worker.engine)
                except EngineUnavailable as exc:
                    self._mark_down(worker, str(exc))
                    if not live or attempt == 2 or rid in self._aborted:
                        raise
                    skip.add(worker.name)
                    continue
                worker.down_until, worker.failures = 0.0, 0
                return result
            raise AssertionError("unreachable")
        finally:
            self._rid_worker.pop(rid, None)
            self._aborted.discard(rid)

    # ------------------------------------------------------------------ engine protocol

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        def call(engine: Engine) -> Awaitable[PrefillResult]:
            return engine.prefill_with(ids, params)

        live = params.priority >= Priority.LIVE
        return await self._dispatch(params.session or params.rid, params.rid, live, call)

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        def call(engine: Engine) -> Awaitable[Completion]:
            return engine.generate_with(ids, params)

        return await self._dispatch(params.session or params.rid, params.rid, True, call)

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        rid = params.rid
        key = params.session or rid
        skip: set[str] = set()
        try:
            for attempt in (1, 2):
                worker = await self._choose(key, skip)
                self._rid_worker[rid] = worker
                worker.requests += 1
                yielded = False
                try:
                    async for chunk in worker.engine.stream_with(ids, params):
                        yielded = True
                        yield chunk
                except EngineUnavailable as exc:
                    self._mark_down(worker, str(exc))
                    if yielded or attempt == 2 or rid in self._aborted:
                        raise
                    skip.add(worker.name)
                    continue
                worker.down_until, worker.failures = 0.0, 0
                return
        finally:
            self._rid_worker.pop(rid, None)
            self._aborted.discard(rid)

    async def abort(self, rid: str) -> None:
        """Abort ``rid`` on its worker; a dead worker is marked down and the error swallowed."""
        worker = self._rid_worker.get(rid)
        if worker is None:
            return
        self._aborted.add(rid)
        try:
            await worker.engine.abort(rid)
        except EngineUnavailable as exc:
            self._mark_down(worker, str(exc))

    def encode(self, text: str) -> list[int]:
        return self._tokenize(lambda engine: engine.encode(text))

    def decode(self, ids: Sequence[int]) -> str:
        return self._tokenize(lambda engine: engine.decode(ids))

    def _tokenize(self, op: Callable[[Engine], T]) -> T:
        """``op`` on the first worker whose tokenizer is reachable (all serve one model)."""
        error: EngineUnavailable | None = None
        for worker in self._workers.values():
            try:
                return op(worker.engine)
            except EngineUnavailable as exc:  # a lazy tokenizer lookup hit a dead worker
                error = exc
        assert error is not None
        raise error

    async def stats(self) -> EngineStats:
        """Sum of the reachable workers' stats; unreachable ones are marked down and skipped."""
        parts: list[EngineStats] = []
        for worker in self._workers.values():
            try:
                parts.append(await worker.engine.stats())
            except EngineUnavailable as exc:
                self._mark_down(worker, str(exc))
        if not parts:
            raise EngineUnavailable(f"no worker answered stats: {self.down_workers()}")
        capacities = [p.capacity_tokens for p in parts]
        tiers = [p.tier_enabled for p in parts if p.tier_enabled is not None]
        return EngineStats(
            cached_tokens=sum(p.cached_tokens for p in parts),
            capacity_tokens=None if None in capacities else sum(c or 0 for c in capacities),
            evicted_tokens=sum(p.evicted_tokens for p in parts),
            hit_tokens=sum(p.hit_tokens for p in parts),
            prompt_tokens=sum(p.prompt_tokens for p in parts),
            computed_tokens=sum(p.computed_tokens for p in parts),
            requests=sum(p.requests for p in parts),
            aborted=sum(p.aborted for p in parts),
            disk_hit_tokens=sum(p.disk_hit_tokens for p in parts),
            tier_bytes_written=sum(p.tier_bytes_written for p in parts),
            tier_bytes_read=sum(p.tier_bytes_read for p in parts),
            tier_loads_refused=sum(p.tier_loads_refused for p in parts),
            tier_stored_bytes=sum(p.tier_stored_bytes for p in parts),
            host_tier_stored_bytes=sum(p.host_tier_stored_bytes for p in parts),
            host_tier_max_bytes=sum(p.host_tier_max_bytes for p in parts),
            tier_enabled=all(tiers) if tiers else None,  # None: no worker has a tier
        )

    async def flush_cache(self) -> None:
        """Flush every worker that is up; raise the first error after trying all."""
        errors: list[EngineError] = []
        for worker in self._workers.values():
            try:
                await worker.engine.flush_cache()
            except EngineError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    async def aclose(self) -> None:
        for worker in self._workers.values():
            await worker.engine.aclose()

    def __repr__(self) -> str:
        return f"MultiWorkerEngine({list(self._workers)})"
