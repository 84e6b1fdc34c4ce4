"""Warm-up and keep-warm on the embedded engine with its disk tier (issue 25 §2): a worker with
a lower tier is warmed up to its whole cache (not ``budget_fraction`` of it), and a working set
larger than its cache, whose evicted prefixes come back from disk, keeps the live hit rate up
(no re-warm; ``tier_shares`` says how much came from disk). The vLLM side of the same rules:
``tests/vllm/test_tiers.py``.

It needs ``LocalEngine(kv_dir=...)`` (the disk tier's engine side, brief ``tierengine``) and
skips, saying so, on a checkout without it. The spilled blocks are written asynchronously: the
test waits for them with the tier's ``flush()``, never with a sleep."""

from __future__ import annotations

import asyncio
import inspect
import random
from pathlib import Path
from typing import Any

import pytest

from agentwarm.engines.local import LocalEngine
from agentwarm.warmup.keepwarm import KeepWarm
from agentwarm.warmup.types import Plan, WarmPrefix
from agentwarm.warmup.warmer import Warmer
from tests.engines.test_local_engine import prompt, tiny
from tests.waiting import until
from tests.warmup.helpers import Ticks

pytestmark = [
    pytest.mark.skipif(
        "kv_dir" not in inspect.signature(LocalEngine).parameters,
        reason="LocalEngine has no disk tier (kv_dir) on this checkout: it comes with issue 25 §1",
    ),
    pytest.mark.slow,  # ~1 min on 2 cores
]

CAPACITY = 1024


async def test_a_tiered_local_engine_is_warmed_to_its_cache_and_stays_warm(
    tmp_path: Path,
) -> None:
    rng = random.Random(25)
    kwargs: dict[str, Any] = {"kv_dir": tmp_path}  # no pins: the live traffic evicts freely
    engine = LocalEngine(tiny(), max_cached_tokens=CAPACITY, pin_ttl_s=0.0, **kwargs)
    heads = [prompt(rng, 400) for _ in range(3)]  # 1,200 tokens: more than the cache holds
    plan = Plan(
        tuple(WarmPrefix(input_ids=tuple(h), node=f"head-{i}") for i, h in enumerate(heads))
    )
    ticks = Ticks()
    keep = KeepWarm(
        plan,
        {"local": Warmer(engine)},
        rewarm_below=0.5,
        window_s=5.0,
        wait=ticks.wait,
        clock=ticks.clock,
    )
    flush = engine.disk.tier.flush  # type: ignore[attr-defined]
    try:
        keep.start()
        await until(lambda: ticks.waits == [5.0], timeout_s=600, what="the first window")
        (static,) = keep.summaries
        # The whole cache (half of it, 512 tokens, would warm only one head): two heads fit.
        assert (static.budget_tokens, static.prefixes, static.skipped) == (CAPACITY, 2, 1)
        before = await engine.stats()
        assert before.tier_enabled is True
        for _ in range(2):  # the three heads, twice: they evict each other, and spill
            for head in heads:
                await engine.generate([*head, *prompt(rng, 20)], max_tokens=1)
                await asyncio.to_thread(flush)  # what was evicted is on disk for the next one
        after = await engine.stats()
        await ticks.tick(keep)
        prompt_tokens = after.prompt_tokens - before.prompt_tokens
        hits = after.hit_tokens - before.hit_tokens
        lower = after.disk_hit_tokens - before.disk_hit_tokens
        assert prompt_tokens == 6 * 420
        assert keep.hit_rates == {"local": hits / prompt_tokens}
        assert keep.tier_shares == {"local": lower / hits}
        # Disk served part of the hits (measured: 1,152 of 1,952), and with them the worker is
        # warm (0.77); its device cache alone would have been cold (0.32): not re-warmed.
        assert (hits - lower) / prompt_tokens < 0.5 <= hits / prompt_tokens
        assert keep.rounds == 0
    finally:
        await keep.aclose()
        await engine.aclose()
