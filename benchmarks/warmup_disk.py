"""The disk-tier modes of ``benchmarks/warmup_bench.py`` (issue 25): a restart with a warm
``kv_dir`` against a cold start and a static warm-up, and the small cache with the tier on.

* ``disk_restart`` — before the restart an engine with a ``kv_dir`` served the traffic before
  it (the train split's first requests, as many as are measured) and stopped cleanly, spilling
  its cache to the directory; the restarted engine (a fresh cache on the same directory) gets no
  warm-up: its requests load what the directory holds.
* ``disk_warm`` — the same restart, then the static warm-up of the plan, which now loads its
  prefixes from disk instead of computing them (its ``ready_s`` against ``warm``'s).
* ``keepwarm_small_disk`` — ``keepwarm_small`` (the small cache, warm-up, keep-warm) with a tier
  in an empty directory: what the small cache evicts spills to disk and is loaded back.

Goals (issue 25): the hit ratio of ``keepwarm_small_disk`` >= 96 %; the first request of
``disk_restart`` at most 0.15 x ``cold``'s TTFT (the issue states it on a 3,000-token prefix:
``python -m benchmarks.kv_tier`` measures that exactly; here it is the workload's first request).
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentwarm.engines.local.engine import LocalEngine
from agentwarm.engines.local.model import LoadedModel
from agentwarm.warmup.types import Plan
from benchmarks.warmup_workload import run_mode

__all__ = ("DISK_GOALS", "DISK_MODES", "disk_goals", "goal", "run_disk_mode")

DISK_MODES = ("disk_restart", "disk_warm", "keepwarm_small_disk")
DISK_GOALS = {"small_disk_hit_ratio": 0.96, "restart_first_ratio": 0.15}


async def spill(loaded: LoadedModel, kv_dir: Path, prompts: Sequence[list[int]]) -> int:
    """An engine on ``kv_dir`` serves ``prompts`` one after another and stops cleanly; returns
    the bytes the directory then holds."""
    engine = LocalEngine(loaded, kv_dir=kv_dir)
    try:
        for ids in prompts:
            await engine.generate(ids, max_tokens=1)
    finally:
        await engine.aclose()
    return sum(p.stat().st_size for p in kv_dir.rglob("*") if p.is_file())


async def run_disk_mode(
    mode: str,
    loaded: LoadedModel,
    prompts: Sequence[list[int]],
    conversations: Sequence[str],
    plan: Plan,
    *,
    before_restart: Sequence[list[int]],
    small_cache_tokens: int,
    rewarm_every: int,
    concurrency: int = 1,
) -> dict[str, Any]:
    """One disk mode (:data:`DISK_MODES`) in a directory of its own."""
    if mode not in DISK_MODES:
        raise ValueError(f"not a disk mode: {mode!r} (modes: {', '.join(DISK_MODES)})")
    with tempfile.TemporaryDirectory(prefix="warmup-bench-kv-") as tmp:
        kv_dir = Path(tmp)
        spilled = 0
        if mode != "keepwarm_small_disk":
            spilled = await spill(loaded, kv_dir, before_restart)
        out = await run_mode(
            mode,
            loaded,
            prompts,
            conversations,
            plan,
            small_cache_tokens=small_cache_tokens,
            rewarm_every=rewarm_every,
            concurrency=concurrency,
            kv_dir=kv_dir,
        )
    out["spilled_bytes_before_restart"] = spilled
    out["requests_before_restart"] = len(before_restart) if spilled else 0
    return out


def goal(value: float | None, target: float, *, at_least: bool) -> dict[str, Any]:
    """A goal line's figures: the value, the target, which way, and whether it is met."""
    met = None if value is None else (value >= target if at_least else value <= target)
    return {"value": value, "goal": target, "at_least": at_least, "met": met}


def disk_goals(results: dict[str, Any]) -> dict[str, Any]:
    """Issue 25's goals from the modes' results (``None`` values where a mode did not run)."""
    small, cold, restart = (
        results.get("keepwarm_small_disk"),
        results.get("cold"),
        results.get("disk_restart"),
    )
    ratio = None
    if cold and restart and cold["first_ttft_s"]:
        ratio = restart["first_ttft_s"] / cold["first_ttft_s"]
    return {
        "small_disk_hit_ratio": goal(
            small["hit_ratio"] if small else None,
            DISK_GOALS["small_disk_hit_ratio"],
            at_least=True,
        ),
        "restart_first_ratio": goal(ratio, DISK_GOALS["restart_first_ratio"], at_least=False),
    }
