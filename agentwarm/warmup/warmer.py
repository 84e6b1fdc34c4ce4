"""Static warm-up: send a plan's prefixes to workers at speculative priority, within a budget.

Each prefix of the plan (in plan order, most valuable first) is rendered to the token ids the
worker will see (:meth:`Warmer.ids_of`) and sent as a prefill-only request at
:attr:`~agentwarm.engines.base.Priority.SPECULATIVE`, one at a time, so live traffic arriving
meanwhile goes first and a worker is never flooded.

**The budget.** A warm-up never writes more than ``budget_fraction`` (default 0.5) of a worker's
cache capacity (``EngineStats.capacity_tokens``; unknown capacity: no limit unless
``budget_tokens`` is given). So it evicts at most as much as it warms, and never the whole cache
while the fraction is below 1. A worker with a tier below its device cache
(``EngineStats.tier_enabled``: SGLang HiCache, vLLM KV offloading or a KV connector,
``LocalEngine(kv_dir=...)``) loses nothing it evicts — the evicted KV spills to the tier and
comes back cheaper than it is recomputed — so there the fraction is lifted and the budget is the
whole device capacity (:func:`budget_for`). Tokens shared by two prefixes count once: a prefix
costs its length minus its longest common prefix with the prefixes already sent (the engine's
radix cache stores the shared part once). A prefix that would pass the remaining budget is
skipped; later, smaller ones may still fit.

**Failures.** A worker that fails (unreachable, HTTP error, no answer within its client's
timeout) ends its warm-up with :attr:`WarmSummary.error` set; nothing is raised, so
:func:`warm_workers` warms the others. A prefix the worker refuses as invalid (say, longer than
its context), or that its chat template cannot render, is skipped and logged once. On
cancellation the request in flight is aborted, then the cancellation goes on.

**Telemetry.** Every prefix is one ``agentwarm.prefill`` span (workflow ``warmup``, source
``warmup``, target the prefix's ``node`` or ``prefix-{i}``, ``kind`` static / keep_warm /
explicit), ending with outcome ``hit`` (warmed), ``dropped`` (skipped: over the budget or
nothing to send), ``cancelled`` (aborted) or ``failed``, and the tokens the engine computed:
the explicit warms' spans (:func:`~agentwarm.warmup.explicit.traced_prefill`,
:func:`~agentwarm.warmup.explicit.record_dropped`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace

from agentwarm import telemetry as tm
from agentwarm._spec import PrefetchKind
from agentwarm.engines.base import (
    Engine,
    EngineStats,
    PrefillParams,
    PrefillResult,
    Priority,
    new_rid,
)
from agentwarm.engines.radix.node import common_len
from agentwarm.errors import ConfigError, EngineError, InvalidRequest
from agentwarm.warmup.explicit import record_dropped, traced_prefill
from agentwarm.warmup.render import ChatRenderer
from agentwarm.warmup.types import Plan, WarmPrefix

__all__ = ("WarmSummary", "Warmer", "budget_for", "warm_workers")

log = logging.getLogger(__name__)


@dataclass(slots=True)
class WarmSummary:
    """What one worker's warm-up did (the running totals while it goes on)."""

    #: A label of the worker: its URL, or ``"local"``.
    worker: str
    kind: PrefetchKind
    #: Prefixes sent.
    prefixes: int = 0
    #: Prefixes not sent: over the budget, rendered to no ids, or refused by the worker.
    skipped: int = 0
    #: Tokens of the prefixes sent (a token shared by two prefixes counted once).
    tokens: int = 0
    #: Tokens the engine computed (``tokens - computed_tokens`` were cached already).
    computed_tokens: int = 0
    #: As the engine counts them: the prompt tokens of the prefills sent (every prefix whole)
    #: and, of those, the tokens found cached — what the warm-up adds to the engine's prompt
    #: and hit counters (keep-warm takes them out of the live hit rate).
    prompt_tokens: int = 0
    cached_tokens: int = 0
    seconds: float = 0.0
    budget_tokens: int | None = None
    #: Why the worker failed (unreachable, ...): reported here, never raised.
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As JSON (``kind`` as its string)."""
        return {
            "worker": self.worker,
            "kind": str(self.kind),
            "prefixes": self.prefixes,
            "skipped": self.skipped,
            "tokens": self.tokens,
            "computed_tokens": self.computed_tokens,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "seconds": round(self.seconds, 6),
            "budget_tokens": self.budget_tokens,
            "error": self.error,
        }


def budget_for(stats: EngineStats, fraction: float) -> int | None:
    """The warm-up budget of a worker: ``fraction`` of its cache capacity, in tokens (``None``
    when the capacity is unknown); its whole capacity when it has a lower tier
    (``stats.tier_enabled``), to which what the warm-up evicts spills. ``fraction`` must be in
    (0, 1]."""
    check_fraction(fraction)
    if stats.capacity_tokens is None:
        return None
    return int(stats.capacity_tokens * (1.0 if stats.tier_enabled else fraction))


def check_fraction(fraction: float) -> float:
    """``fraction`` when it is in (0, 1]; else :class:`~agentwarm.errors.ConfigError`."""
    if not 0.0 < fraction <= 1.0:
        raise ConfigError(
            f"--budget-fraction {fraction!r} must be in (0, 1]: the share of each worker's cache "
            "a warm-up may fill (0.5 by default; below 1 it never evicts the whole cache)"
        )
    return fraction


class Warmer:
    """Warms one engine with plans (see the module docstring): ``worker`` labels its summaries,
    ``namespace`` is the cache namespace of its prefills (the live requests' namespace; a
    prefix's own ``namespace`` wins), and
    ``renderer`` renders ``messages`` prefixes (default: :meth:`ChatRenderer.for_engine`)."""

    def __init__(
        self,
        engine: Engine,
        *,
        renderer: ChatRenderer | None = None,
        worker: str = "local",
        namespace: str = "",
        tracer: trace.Tracer | None = None,
    ) -> None:
        self.engine = engine
        self.worker = worker
        self.namespace = namespace
        self._renderer = renderer
        self._tracer = tracer or tm.get_tracer()
        self._ids: dict[int, tuple[WarmPrefix, list[int]]] = {}

    @property
    def renderer(self) -> ChatRenderer:
        if self._renderer is None:
            self._renderer = ChatRenderer.for_engine(self.engine)
        return self._renderer

    def ids_of(self, prefix: WarmPrefix) -> list[int]:
        """The token ids of ``prefix`` (memoized): its ``input_ids``, or its messages and tools
        rendered (``[]`` when nothing renders stably)."""
        hit = self._ids.get(id(prefix))
        if hit is not None and hit[0] is prefix:
            return hit[1]
        if prefix.input_ids is not None:
            ids = list(prefix.input_ids)
        else:
            try:
                ids = self.renderer.prefix_ids(prefix.messages or (), prefix.tools)
            except Exception as exc:  # the chat template is the model's code: any error
                # One line, once (memoized below): the prefix is skipped, the others warmed.
                log.warning(
                    "warm-up of %s: a prefix cannot be rendered, skipped (%s: %s)",
                    self.worker,
                    type(exc).__name__,
                    exc,
                )
                ids = []
        self._ids[id(prefix)] = (prefix, ids)
        return ids

    async def warm(
        self,
        plan: Plan,
        *,
        kind: PrefetchKind = PrefetchKind.STATIC,
        budget_tokens: int | None = None,
        budget_fraction: float | None = 0.5,
        pin_ttl_s: float | None = None,
        on_prefix: Callable[[WarmSummary], None] | None = None,
    ) -> WarmSummary:
        """Warm ``plan``'s prefixes in order; the budget is ``budget_tokens``, else
        ``budget_fraction`` of the capacity, else unlimited. ``pin_ttl_s``: how long the engine
        keeps each warmed prefix pinned (``None``: its default). ``on_prefix`` is called with
        the running summary after each prefix. Never raises for the worker's failures (see
        :attr:`WarmSummary.error`); cancelling aborts the request in flight."""
        summary = WarmSummary(worker=self.worker, kind=kind)
        started = time.perf_counter()
        run_id = f"warmup.{secrets.token_hex(4)}"
        sent: list[tuple[str, tuple[int, ...]]] = []  # (namespace, ids): caches are per namespace
        try:
            if budget_tokens is None and budget_fraction is not None:
                budget_tokens = budget_for(await self.engine.stats(), budget_fraction)
            summary.budget_tokens = budget_tokens
            for i, prefix in enumerate(plan.prefixes):
                if prefix.input_ids is None and prefix.messages is not None:
                    ids = await asyncio.to_thread(self.ids_of, prefix)
                else:
                    ids = self.ids_of(prefix)
                namespace = self.namespace if prefix.namespace is None else prefix.namespace
                shared = (common_len(s, ids, 0) for n, s in sent if n == namespace)
                new = len(ids) - max(shared, default=0)
                target = prefix.node or f"prefix-{i}"
                if not ids or (budget_tokens is not None and summary.tokens + new > budget_tokens):
                    summary.skipped += 1
                    record_dropped(
                        len(ids), kind=kind, run_id=run_id, target=target, tracer=self._tracer
                    )
                else:
                    result = await self._send(
                        ids, pin_ttl_s, kind=kind, run_id=run_id, target=target, namespace=namespace
                    )
                    if result is None:
                        summary.skipped += 1
                    else:
                        sent.append((namespace, tuple(ids)))
                        summary.prefixes += 1
                        summary.tokens += new
                        summary.computed_tokens += result.computed_tokens
                        summary.prompt_tokens += result.cached_tokens + result.computed_tokens
                        summary.cached_tokens += result.cached_tokens
                summary.seconds = time.perf_counter() - started
                if on_prefix is not None:
                    on_prefix(summary)
        except EngineError as exc:
            summary.error = f"{type(exc).__name__}: {exc}"
            log.warning("warm-up of %s failed: %s", self.worker, summary.error)
        summary.seconds = time.perf_counter() - started
        return summary

    async def _send(
        self,
        ids: list[int],
        pin_ttl_s: float | None,
        *,
        kind: PrefetchKind,
        run_id: str,
        target: str,
        namespace: str,
    ) -> PrefillResult | None:
        """Prefill ``ids`` in its span (:func:`traced_prefill`); ``None``: the worker refused them
        as invalid. Re-raises the worker's other failures and cancellation (after aborting)."""
        params = PrefillParams(
            priority=Priority.SPECULATIVE,
            rid=new_rid(),
            namespace=namespace,
            pin_ttl_s=pin_ttl_s,  # None: the engine's default
        )

        def send() -> Awaitable[PrefillResult]:
            return self.engine.prefill_with(ids, params)

        try:
            return await traced_prefill(
                len(ids),
                send,
                abort=lambda: self._abort(params.rid),
                kind=kind,
                run_id=run_id,
                source="warmup",
                target=target,
                tracer=self._tracer,
            )
        except InvalidRequest as exc:
            log.warning(
                "warm-up of %s: a prefix of %d tokens refused (%s)", self.worker, len(ids), exc
            )
            return None

    async def _abort(self, rid: str) -> None:
        try:
            await self.engine.abort(rid)
        except EngineError as exc:  # the worker is gone: nothing left to abort
            log.debug("abort of warm-up prefill %s on %s failed: %s", rid, self.worker, exc)


async def warm_workers(
    plan: Plan,
    engines: Mapping[str, Engine],
    *,
    renderer: ChatRenderer | None = None,
    kind: PrefetchKind = PrefetchKind.STATIC,
    budget_fraction: float | None = 0.5,
    pin_ttl_s: float | None = None,
    on_prefix: Callable[[WarmSummary], None] | None = None,
) -> list[WarmSummary]:
    """Warm ``plan`` on every engine of ``engines`` (label → engine) concurrently; one summary
    per worker, in the mapping's order. A failing worker has its ``error`` set; the others go
    on."""
    if budget_fraction is not None:
        check_fraction(budget_fraction)
    warmers = [Warmer(e, renderer=renderer, worker=label) for label, e in engines.items()]
    async with asyncio.TaskGroup() as group:
        tasks = [
            group.create_task(
                w.warm(
                    plan,
                    kind=kind,
                    budget_fraction=budget_fraction,
                    pin_ttl_s=pin_ttl_s,
                    on_prefix=on_prefix,
                )
            )
            for w in warmers
        ]
    return [t.result() for t in tasks]
