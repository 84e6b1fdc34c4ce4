"""A server's warm-up: the plan warmed once on every worker (static, gating readiness), then kept
warm between bursts.

:class:`KeepWarm` runs, in one asyncio task (:meth:`KeepWarm.start`):

1. the **static** warm-up of every worker concurrently (kind ``static``), its progress reported
   to a :class:`~agentwarm.warmup.readiness.Readiness`, which is marked ready at the end;
2. then, with ``keep_warm_s``, every ``keep_warm_s`` seconds a **keep-warm** round: the plan
   re-sent to every worker (kind ``keep_warm``, speculative priority; cheap where the prefixes
   are still cached: only evicted parts are recomputed), pinned for ``2 * keep_warm_s`` on
   engines with pins (the embedded ones), so a pin is renewed before it expires;
3. and, with ``rewarm_below``, every ``window_s`` seconds each worker's ``engine.stats()`` is
   read, and a worker whose **live** hit rate over the window (hit / prompt tokens of the
   requests other than the warm-ups: :meth:`KeepWarm.live_hit_rate`) is below
   ``rewarm_below`` is re-warmed at once. A window without live traffic re-warms nothing.

Rounds never overlap (one lock); :meth:`KeepWarm.aclose` cancels the task, and the warmer
aborts the prefill in flight. The loop's waits go through ``wait(seconds)`` (default
``asyncio.sleep``), so that tests drive its ticks.

:class:`WarmupSettings` are the ``--warmup PLAN [--ready-file PATH] [--keep-warm S]
[--rewarm-below R]`` options of ``agentwarm serve`` and ``agentwarm gateway``, checked by
:func:`load_warmup` before the server binds.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from agentwarm._spec import PrefetchKind
from agentwarm.engines.base import Engine, EngineStats
from agentwarm.errors import ConfigError, EngineError
from agentwarm.warmup.readiness import Readiness
from agentwarm.warmup.render import ChatRenderer
from agentwarm.warmup.types import Plan, load_plan
from agentwarm.warmup.warmer import Warmer, WarmSummary

__all__ = ("KeepWarm", "WarmupSettings", "load_warmup")

log = logging.getLogger(__name__)

Wait = Callable[[float], Awaitable[None]]


@dataclass(slots=True)
class _Window:
    """One worker's current window: its stats at the start, and the warm-ups' own prompt and
    computed tokens since (to take out of the window's counters)."""

    start: EngineStats | None = None
    warm_tokens: int = 0
    warm_computed: int = 0


class KeepWarm:
    """The warm-up of ``plan`` on ``warmers`` (worker label -> its warmer); see the module
    docstring. ``rounds`` counts the re-warm rounds (not the static one); ``summaries`` holds
    every summary, the static ones first; ``hit_rates`` the last window's live hit rate per
    worker (None: no live traffic)."""

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
    ) -> None:
        if keep_warm_s is not None and not (keep_warm_s > 0 and math.isfinite(keep_warm_s)):
            raise ValueError(f"keep_warm_s must be > 0, got {keep_warm_s!r}")
        if rewarm_below is not None and not (0.0 <= rewarm_below <= 1.0):
            raise ValueError(f"rewarm_below must be in [0, 1], got {rewarm_below!r}")
        if not (window_s > 0 and math.isfinite(window_s)):
            raise ValueError(f"window_s must be > 0, got {window_s!r}")
        self.plan = plan
        self.warmers = dict(warmers)
        self.readiness = readiness
        self.keep_warm_s = keep_warm_s
        self.rewarm_below = rewarm_below
        self.window_s = window_s
        self.budget_fraction = budget_fraction
        #: Pins outlive the period between two rounds (renewed before they expire).
        self.pin_ttl_s = 2 * keep_warm_s if keep_warm_s is not None else None
        self.rounds = 0
        self.ticks = 0  # loop iterations done (for tests driving ``wait``)
        self.summaries: list[WarmSummary] = []
        self.hit_rates: dict[str, float | None] = {}
        #: Set once the static warm-up is done (ready or not).
        self.warmed = asyncio.Event()
        self._wait = wait
        self._lock = asyncio.Lock()
        self._windows: dict[str, _Window] = {name: _Window() for name in self.warmers}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the warm-up task (inside the running loop); a second call does nothing."""
        if self._task is not None:
            return
        if self.readiness is not None:
            self.readiness.begin(list(self.warmers), len(self.plan))
        self._task = asyncio.get_running_loop().create_task(self._run(), name="agentwarm-warmup")

    async def aclose(self) -> None:
        """Cancel the warm-up task and wait for it (the prefill in flight is aborted)."""
        task, self._task = self._task, None
        if task is None or task.done():
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise

    async def rewarm(self, kind: PrefetchKind = PrefetchKind.KEEP_WARM) -> list[WarmSummary]:
        """Re-send the plan to every worker now (one round); one summary per worker."""
        return await self._round(list(self.warmers), kind)

    @staticmethod
    def live_hit_rate(
        before: EngineStats, after: EngineStats, warm_tokens: int, warm_computed: int
    ) -> float | None:
        """Hit / prompt tokens of the live traffic between two stats of one engine, the
        warm-ups' own ``warm_tokens`` prompt tokens (``warm_computed`` of them computed, the
        rest hits) taken out; None when there was no live traffic, or the counters went back
        (a flush or a restart)."""
        prompt = after.prompt_tokens - before.prompt_tokens
        hits = after.hit_tokens - before.hit_tokens
        if prompt < 0 or hits < 0:
            return None
        live_prompt = prompt - warm_tokens
        live_hits = hits - (warm_tokens - warm_computed)
        if live_prompt <= 0:
            return None
        return min(max(live_hits, 0) / live_prompt, 1.0)

    # ------------------------------------------------------------------ the task

    async def _run(self) -> None:
        try:
            summaries = await self._round(list(self.warmers), PrefetchKind.STATIC, progress=True)
        except Exception as exc:  # a bug: serve cold rather than never
            log.exception("the static warm-up failed")
            if self.readiness is not None:
                self.readiness.finish([], error=f"the warm-up failed: {exc!r}")
            self.warmed.set()
            return
        if self.readiness is not None:
            self.readiness.finish(summaries)
        self.warmed.set()
        if self.keep_warm_s is None and self.rewarm_below is None:
            return
        if self.rewarm_below is not None:
            await self._new_windows(list(self.warmers))
        await self._loop()

    async def _loop(self) -> None:
        """Keep-warm rounds every ``keep_warm_s`` and window checks every ``window_s`` (on
        the schedule's own clock: the time a round takes is not counted)."""
        keep = self.keep_warm_s
        window = self.window_s if self.rewarm_below is not None else None
        now = 0.0
        next_keep, next_check = keep, window
        while True:
            due = min(t for t in (next_keep, next_check) if t is not None)
            await self._wait(due - now)
            now = due
            try:
                if window is not None and next_check is not None and now >= next_check:
                    next_check = now + window
                    below = await self._check()
                    if below:
                        await self._round(below, PrefetchKind.KEEP_WARM)
                if keep is not None and next_keep is not None and now >= next_keep:
                    next_keep = now + keep
                    await self._round(list(self.warmers), PrefetchKind.KEEP_WARM)
            except Exception:  # a bug: keep the loop alive, the next tick tries again
                log.exception("keep-warm round failed")
            self.ticks += 1

    async def _round(
        self, names: Sequence[str], kind: PrefetchKind, *, progress: bool = False
    ) -> list[WarmSummary]:
        """Warm ``names`` concurrently (one summary each, in order); the warm-ups' own
        tokens are added to the workers' windows."""
        on_prefix = self.readiness.update if progress and self.readiness is not None else None
        track = self.rewarm_below is not None and kind is not PrefetchKind.STATIC
        async with self._lock:
            summaries = list(
                await asyncio.gather(*(self._warm_one(n, kind, on_prefix, track) for n in names))
            )
            self.summaries.extend(summaries)
            if kind is not PrefetchKind.STATIC:
                self.rounds += 1
        return summaries

    async def _warm_one(
        self,
        name: str,
        kind: PrefetchKind,
        on_prefix: Callable[[WarmSummary], None] | None,
        track: bool,
    ) -> WarmSummary:
        warmer = self.warmers[name]
        before = await self._stats(name) if track else None
        summary = await warmer.warm(
            self.plan,
            kind=kind,
            budget_fraction=self.budget_fraction,
            pin_ttl_s=self.pin_ttl_s,
            on_prefix=on_prefix,
        )
        if before is not None:
            after = await self._stats(name)
            window = self._windows[name]
            prompt = after.prompt_tokens - before.prompt_tokens if after else -1
            hits = after.hit_tokens - before.hit_tokens if after else -1
            if window.start is not None and prompt >= hits >= 0:
                window.warm_tokens += prompt
                window.warm_computed += prompt - hits
        return summary

    async def _check(self) -> list[str]:
        """The workers whose live hit rate over the window ending now is below
        ``rewarm_below``; every worker's next window starts now."""
        assert self.rewarm_below is not None
        names = list(self.warmers)
        starts = [self._windows[n] for n in names]
        ends = await self._new_windows(names)
        below: list[str] = []
        for name, window, end in zip(names, starts, ends, strict=True):
            if window.start is None or end is None:
                continue
            rate = self.live_hit_rate(window.start, end, window.warm_tokens, window.warm_computed)
            self.hit_rates[name] = rate
            if rate is not None and rate < self.rewarm_below:
                below.append(name)
        return below

    async def _new_windows(self, names: Sequence[str]) -> list[EngineStats | None]:
        stats = list(await asyncio.gather(*(self._stats(n) for n in names)))
        for name, now in zip(names, stats, strict=True):
            self._windows[name] = _Window(now)
        return stats

    async def _stats(self, name: str) -> EngineStats | None:
        try:
            return await self.warmers[name].engine.stats()
        except EngineError as exc:
            log.warning("keep-warm: stats of %s failed: %s", name, exc)
            return None


@dataclass(frozen=True, slots=True)
class WarmupSettings:
    """The warm-up options of a server (see :func:`load_warmup`)."""

    plan: Plan
    ready_file: Path | None = None
    keep_warm_s: float | None = None
    rewarm_below: float | None = None
    window_s: float = 60.0
    budget_fraction: float | None = 0.5
    #: Renders the plan's ``messages`` for the workers (None: each engine's own template).
    renderer: ChatRenderer | None = None

    def warmer(self, engine: Engine, worker: str = "local") -> Warmer:
        """The warmer of ``engine`` (labelled ``worker``) with these settings' renderer."""
        return Warmer(engine, renderer=self.renderer, worker=worker)

    def keeper(self, warmers: Mapping[str, Warmer]) -> KeepWarm:
        """The :class:`KeepWarm` of these settings over ``warmers``, with a new
        :class:`~agentwarm.warmup.readiness.Readiness` (``keeper.readiness``)."""
        return KeepWarm(
            self.plan,
            warmers,
            readiness=Readiness(ready_file=self.ready_file),
            keep_warm_s=self.keep_warm_s,
            rewarm_below=self.rewarm_below,
            window_s=self.window_s,
            budget_fraction=self.budget_fraction,
        )


def load_warmup(
    plan: Path | None,
    *,
    ready_file: Path | None = None,
    keep_warm_s: float | None = None,
    rewarm_below: float | None = None,
) -> WarmupSettings | None:
    """The settings of ``--warmup PLAN --ready-file --keep-warm --rewarm-below`` (None without
    ``--warmup``), the plan loaded; :class:`~agentwarm.errors.ConfigError` naming the option
    and the fix for anything wrong (a bad plan names its file and line)."""
    if plan is None:
        given = [
            name
            for name, value in (
                ("--ready-file", ready_file),
                ("--keep-warm", keep_warm_s),
                ("--rewarm-below", rewarm_below),
            )
            if value is not None
        ]
        if given:
            raise ConfigError(
                f"{', '.join(given)} need(s) a plan to warm: add --warmup PLAN (make one with "
                "'agentwarm warmup plan --from TRACES_OR_LOGS... -o PLAN')"
            )
        return None
    if keep_warm_s is not None and not (keep_warm_s > 0 and math.isfinite(keep_warm_s)):
        raise ConfigError(f"--keep-warm {keep_warm_s}: give the period in seconds (> 0)")
    if rewarm_below is not None and not (0.0 <= rewarm_below <= 1.0):
        raise ConfigError(
            f"--rewarm-below {rewarm_below}: give a hit rate between 0 and 1 (e.g. 0.5)"
        )
    if ready_file is not None and not ready_file.parent.is_dir():
        raise ConfigError(
            f"--ready-file {ready_file}: its directory {ready_file.parent} does not exist "
            "(create it, or write the file elsewhere)"
        )
    return WarmupSettings(
        load_plan(plan),
        ready_file=ready_file,
        keep_warm_s=keep_warm_s,
        rewarm_below=rewarm_below,
    )
