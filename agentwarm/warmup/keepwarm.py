"""A server's warm-up: the plan warmed once on every worker (static, gating readiness), then kept
warm between bursts.

:class:`KeepWarm` runs, in one asyncio task (:meth:`KeepWarm.start`):

1. the **static** warm-up of every worker concurrently (kind ``static``), its progress reported
   to a :class:`~agentwarm.warmup.readiness.Readiness`, which is finished at the end (ready
   unless every worker failed before warming anything);
2. then, with ``keep_warm_s`` (S), a **keep-warm** round every S seconds of ``clock`` (rounds
   start at fixed times: a slow round does not push the next one back; one that overran its
   period is followed at once by the next): the plan re-sent to every worker (kind
   ``keep_warm``, speculative priority; cheap where the prefixes are still cached: only evicted
   parts are recomputed), pinned on engines with pins (the embedded ones) for
   :attr:`KeepWarm.pin_ttl_s` = max(2 S, S + 2 x the last round's duration), so a pin is renewed
   before it expires even when rounds are slow;
3. and, with ``rewarm_below``, every ``window_s`` seconds each worker's ``engine.stats()`` is
   read, and a worker whose **live** hit rate over the window (hit / prompt tokens of the
   requests other than the warm-ups, whose own prompt and cached tokens — the
   :class:`~agentwarm.warmup.warmer.WarmSummary` counts — are taken out:
   :meth:`KeepWarm.live_hit_rate`) is below ``rewarm_below`` is re-warmed at once. A window
   without live traffic re-warms nothing. A worker whose server exports no counters
   (``/metrics`` off: its client could only count the warm-ups' own requests) is left out of
   the check, with one warning. The counters are the server's own where it has them (SGLang's
   ``/metrics``; vLLM's through :meth:`~agentwarm.engines.vllm.VLLMEngine.server_stats`, so
   that the live requests a gateway relays count, less every prefill of the worker's own
   client as vLLM counted it: a chunked prefill is several requests there), and their hits
   include the tokens a tier
   below the device cache supplied (SGLang HiCache's host and storage, vLLM's KV offloading and
   connectors, ``LocalEngine``'s disk: ``EngineStats.disk_hit_tokens`` is a part of
   ``hit_tokens``): a prefix evicted to a lower tier is cheap to bring back, so a worker
   serving its live requests from there is warm, not re-warmed. :attr:`KeepWarm.tier_shares`
   holds the part of each window's live hits that came from a lower tier.

Rounds never overlap (one lock; a round's workers run in one task group, so a round ends only
once all of them did). A worker's unexpected error is its summary's ``error``, as a failure
the warmer reports (logged with its traceback once, then one line a round); if the static
warm-up left the server not ready, the next keep-warm round that warms something makes it
ready. :meth:`KeepWarm.aclose` cancels the task (the warmer
aborts the prefill in flight) and removes the ready file. The loop's waits go through
``wait(seconds)`` (default ``asyncio.sleep``) and its times through ``clock`` (default
``time.monotonic``), so that tests drive its ticks.

The ``--warmup``/``--ready-file``/``--keep-warm``/``--rewarm-below`` options that build one are
in :mod:`agentwarm.warmup.options`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass

from agentwarm._spec import PrefetchKind
from agentwarm.engines.base import EngineStats
from agentwarm.engines.sglang.client import SGLangEngine
from agentwarm.engines.sglang.metrics import stats_from_metrics
from agentwarm.engines.vllm import VLLMEngine
from agentwarm.errors import ConfigError, EngineError
from agentwarm.warmup.readiness import Readiness
from agentwarm.warmup.types import Plan
from agentwarm.warmup.warmer import Warmer, WarmSummary

__all__ = ("KeepWarm", "check_schedule")

log = logging.getLogger(__name__)

Wait = Callable[[float], Awaitable[None]]

#: How many summaries :attr:`KeepWarm.summaries` keeps (the latest).
KEEP_SUMMARIES = 64


def check_schedule(
    keep_warm_s: float | None, rewarm_below: float | None, window_s: float = 60.0
) -> None:
    """:class:`~agentwarm.errors.ConfigError` naming the option and the fix when the keep-warm
    period (``--keep-warm``), the re-warm threshold (``--rewarm-below``) or the window is
    unusable."""
    if keep_warm_s is not None and not (keep_warm_s > 0 and math.isfinite(keep_warm_s)):
        raise ConfigError(f"--keep-warm {keep_warm_s}: give the period in seconds (> 0)")
    if rewarm_below is not None and not (0.0 <= rewarm_below <= 1.0):
        raise ConfigError(
            f"--rewarm-below {rewarm_below}: give a hit rate between 0 and 1 (e.g. 0.5)"
        )
    if not (window_s > 0 and math.isfinite(window_s)):
        raise ConfigError(f"the re-warm window {window_s}: give it in seconds (> 0)")


@dataclass(slots=True)
class _Window:
    """One worker's current window: its stats at the start, and the warm-ups' own prompt and
    cached tokens since (to take out of the window's counters); for a vLLM worker, whose
    server counts each chunk of a prefill, its client's prefill totals at the start instead
    (``ServerFlags.prefill_*``: every prefill it sent is taken out)."""

    start: EngineStats | None = None
    warm_prompt: int = 0
    warm_cached: int = 0
    wire: tuple[int, int] | None = None


class KeepWarm:
    """The warm-up of ``plan`` on ``warmers`` (worker label -> its warmer); see the module
    docstring. ``rounds`` counts the re-warm rounds (not the static one); ``summaries`` holds
    the latest summaries (at most :data:`KEEP_SUMMARIES`, oldest first); ``hit_rates`` the last
    window's live hit rate per checked worker (None: no live traffic); ``tier_shares`` the part
    of that window's hits (the warm-ups' included) a tier below the device cache supplied
    (None: no hits)."""

    def __init__(
        self,
        plan: Plan,
        warmers: Mapping[str, Warmer],
        *,
        readiness: Readiness | None = None,
        keep_warm_s: float | None = None,
        rewarm_below: float | None = None,
        window_s: float = 60.0,
        budget_fraction: float | None = 0.5,
        wait: Wait = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_schedule(keep_warm_s, rewarm_below, window_s)
        self.plan = plan
        self.warmers = dict(warmers)
        self.readiness = readiness
        self.keep_warm_s = keep_warm_s
        self.rewarm_below = rewarm_below
        self.window_s = window_s
        self.budget_fraction = budget_fraction
        self.rounds = 0
        self.ticks = 0  # loop iterations done (for tests driving ``wait``)
        self.summaries: collections.deque[WarmSummary] = collections.deque(maxlen=KEEP_SUMMARIES)
        self.hit_rates: dict[str, float | None] = {}
        self.tier_shares: dict[str, float | None] = {}
        #: The last round's duration in seconds (of ``clock``).
        self.last_round_s = 0.0
        #: Set once the static warm-up is done (ready or not).
        self.warmed = asyncio.Event()
        self._wait = wait
        self._clock = clock
        self._lock = asyncio.Lock()
        self._windows: dict[str, _Window] = {name: _Window() for name in self.warmers}
        # The unexpected errors already logged with their traceback (what, error type): a bug
        # that recurs every round is one line after the first (no log flood).
        self._logged: set[tuple[str, str]] = set()
        self._unwatched: set[str] = set()  # workers without server counters
        self._task: asyncio.Task[None] | None = None

    @property
    def pin_ttl_s(self) -> float | None:
        """How long a keep-warm round pins what it warms: max(2 S, S + 2 x the last round's
        duration), so the next round renews it in time; None without ``keep_warm_s``."""
        keep = self.keep_warm_s
        return None if keep is None else max(2 * keep, keep + 2 * self.last_round_s)

    def start(self) -> None:
        """Start the warm-up task (inside the running loop); a second call does nothing."""
        if self._task is not None:
            return
        if self.readiness is not None:
            self.readiness.begin(list(self.warmers), len(self.plan))
        self._task = asyncio.get_running_loop().create_task(self._run(), name="agentwarm-warmup")

    async def aclose(self) -> None:
        """Cancel the warm-up task and wait for it (the prefill in flight is aborted); remove
        the ready file (a stopped server is not ready)."""
        task, self._task = self._task, None
        try:
            if task is not None and not task.done():
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise
        finally:
            if self.readiness is not None:
                self.readiness.withdraw()

    async def rewarm(self, kind: PrefetchKind = PrefetchKind.KEEP_WARM) -> list[WarmSummary]:
        """Re-send the plan to every worker now (one round); one summary per worker."""
        return await self._round(list(self.warmers), kind)

    @staticmethod
    def live_hit_rate(
        before: EngineStats, after: EngineStats, warm_prompt: int, warm_cached: int
    ) -> float | None:
        """Hit / prompt tokens of the live traffic between two stats of one engine, the
        warm-ups' own ``warm_prompt`` prompt tokens (``warm_cached`` of them hits) taken out;
        None when there was no live traffic, or the counters went back (a flush or a
        restart)."""
        prompt = after.prompt_tokens - before.prompt_tokens
        hits = after.hit_tokens - before.hit_tokens
        if prompt < 0 or hits < 0:
            return None
        live_prompt = prompt - warm_prompt
        live_hits = hits - warm_cached
        if live_prompt <= 0:
            return None
        return min(max(live_hits, 0) / live_prompt, 1.0)

    # ------------------------------------------------------------------ the task

    async def _run(self) -> None:
        summaries = await self._round(list(self.warmers), PrefetchKind.STATIC, progress=True)
        if self.readiness is not None:
            await self.readiness.finish(summaries)
        self.warmed.set()
        if self.keep_warm_s is None and self.rewarm_below is None:
            return
        if self.rewarm_below is not None:
            await self._watch()
            await self._new_windows(self._watched())
        await self._loop()

    async def _loop(self) -> None:
        """Keep-warm rounds every ``keep_warm_s`` and window checks every ``window_s``, both
        at fixed times of ``clock`` from the loop's start (a round's duration does not delay
        the next one; periods a long round overran are not made up)."""
        keep = self.keep_warm_s
        window = self.window_s if self.rewarm_below is not None else None
        start = self._clock()
        next_keep = start + keep if keep is not None else None
        next_check = start + window if window is not None else None
        while True:
            due = min(t for t in (next_keep, next_check) if t is not None)
            await self._wait(max(due - self._clock(), 0.0))
            now = self._clock()
            try:
                if window is not None and next_check is not None and now >= next_check:
                    next_check = _next_due(next_check, window, now)
                    below = await self._check()
                    if below:
                        await self._round(below, PrefetchKind.KEEP_WARM)
                if keep is not None and next_keep is not None and now >= next_keep:
                    next_keep = _next_due(next_keep, keep, now)
                    await self._round(list(self.warmers), PrefetchKind.KEEP_WARM)
            except Exception as exc:  # a bug: keep the loop alive, the next tick tries again
                self._log_unexpected("keep-warm round failed", "", exc)
            self.ticks += 1

    def _log_unexpected(self, message: str, where: str, exc: Exception) -> None:
        """``message`` with the traceback the first time ``where`` fails with this type of
        error, one line (no traceback) the next times."""
        key = (where, type(exc).__name__)
        if key in self._logged:
            log.error("%s (again): %s: %s", message, type(exc).__name__, exc)
            return
        self._logged.add(key)
        log.error("%s", message, exc_info=exc)

    async def _round(
        self, names: Sequence[str], kind: PrefetchKind, *, progress: bool = False
    ) -> list[WarmSummary]:
        """Warm ``names`` concurrently (one summary each, in order; all of them done when it
        returns); the warm-ups' own tokens are added to the workers' windows."""
        on_prefix = self.readiness.update if progress and self.readiness is not None else None
        pin_ttl_s = self.pin_ttl_s
        async with self._lock:
            started = self._clock()
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(self._warm_one(name, kind, pin_ttl_s, on_prefix))
                    for name in names
                ]
            self.last_round_s = max(self._clock() - started, 0.0)
            summaries = [task.result() for task in tasks]
            self.summaries.extend(summaries)
            if kind is not PrefetchKind.STATIC:
                self.rounds += 1
        readiness = self.readiness
        if readiness is not None and self.warmed.is_set() and not readiness.ready:
            await readiness.finish(summaries)  # the static warm-up failed on every worker
        return summaries

    async def _warm_one(
        self,
        name: str,
        kind: PrefetchKind,
        pin_ttl_s: float | None,
        on_prefix: Callable[[WarmSummary], None] | None,
    ) -> WarmSummary:
        """One worker's warm-up; an unexpected error is its summary's ``error`` (logged)."""
        try:
            summary = await self.warmers[name].warm(
                self.plan,
                kind=kind,
                budget_fraction=self.budget_fraction,
                pin_ttl_s=pin_ttl_s,
                on_prefix=on_prefix,
            )
        except Exception as exc:  # a bug: report it as the worker's failure, warm the others
            self._log_unexpected(f"the {kind} warm-up of {name} failed", name, exc)
            summary = WarmSummary(worker=name, kind=kind, error=f"{type(exc).__name__}: {exc}")
        window = self._windows.get(name)
        if window is not None and window.start is not None:
            window.warm_prompt += summary.prompt_tokens
            window.warm_cached += summary.cached_tokens
        return summary

    async def _watch(self) -> None:
        """Leave out of the hit-rate checks, with one warning each, the workers whose server
        exports no counters (their client's own counts are not the live traffic)."""
        for name, warmer in self.warmers.items():
            engine = warmer.engine
            try:
                if isinstance(engine, SGLangEngine):
                    counted = stats_from_metrics(await engine.server_metrics()) is not None
                    fix = "start SGLang with --enable-metrics"
                elif isinstance(engine, VLLMEngine):
                    counted = await engine.server_stats() is not None
                    fix = "start vLLM without --disable-log-stats"
                else:
                    continue
            except EngineError:
                continue  # unreachable now: its stats fail and are skipped window by window
            if not counted:
                self._unwatched.add(name)
                log.warning(
                    "--rewarm-below cannot work for %s: its /metrics has no request counters "
                    "(%s); it is kept warm but never re-warmed on a low hit rate",
                    name,
                    fix,
                )

    def _watched(self) -> list[str]:
        return [name for name in self.warmers if name not in self._unwatched]

    async def _check(self) -> list[str]:
        """The workers whose live hit rate over the window ending now is below
        ``rewarm_below``; every checked worker's next window starts now."""
        assert self.rewarm_below is not None
        names = self._watched()
        starts = [self._windows[n] for n in names]
        ends = await self._new_windows(names)
        below: list[str] = []
        for name, window, end in zip(names, starts, ends, strict=True):
            if window.start is None or end is None:
                continue
            own = window.warm_prompt, window.warm_cached
            wire = self._windows[name].wire
            if window.wire is not None and wire is not None:
                own = wire[0] - window.wire[0], wire[1] - window.wire[1]
            rate = self.live_hit_rate(window.start, end, *own)
            self.hit_rates[name] = rate
            self.tier_shares[name] = _tier_share(window.start, end)
            if rate is not None and rate < self.rewarm_below:
                below.append(name)
        return below

    async def _new_windows(self, names: Sequence[str]) -> list[EngineStats | None]:
        stats = list(await asyncio.gather(*(self._stats(n) for n in names)))
        for name, now in zip(names, stats, strict=True):
            engine = self.warmers[name].engine
            wire = None
            if isinstance(engine, VLLMEngine):
                wire = engine.flags.prefill_prompt_tokens, engine.flags.prefill_cached_tokens
            self._windows[name] = _Window(now, wire=wire)
        return stats

    async def _stats(self, name: str) -> EngineStats | None:
        """``name``'s counters: its server's own where its client reads them apart (vLLM)."""
        engine = self.warmers[name].engine
        try:
            if isinstance(engine, VLLMEngine):
                return await engine.server_stats() or await engine.stats()
            return await engine.stats()
        except EngineError as exc:
            log.warning("keep-warm: stats of %s failed: %s", name, exc)
            return None


def _tier_share(before: EngineStats, after: EngineStats) -> float | None:
    """The part of the hits between two stats that a lower tier supplied; None: no hits."""
    hits = after.hit_tokens - before.hit_tokens
    lower = after.disk_hit_tokens - before.disk_hit_tokens
    if hits <= 0 or lower < 0:
        return None
    return min(lower / hits, 1.0)


def _next_due(due: float, period: float, now: float) -> float:
    """The first time ``due + k * period`` (k >= 1) after ``now``."""
    return due + period * (math.floor((now - due) / period) + 1)
