"""The quick profile on the embedded engine (tiny preset): the accounting adds up."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from agentwarm.bench import MODES, profile, run_bench
from agentwarm.engines.local import LocalEngine
from agentwarm.engines.local.scheduler import StepEvent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


async def test_quick_profile_on_the_tiny_local_engine() -> None:
    chunks: list[defaultdict[str, int]] = []
    engines: list[LocalEngine] = []

    def factory() -> LocalEngine:
        logged: defaultdict[str, int] = defaultdict(int)

        def hook(event: StepEvent) -> None:
            if event.kind == "prefill":
                logged[event.rid] += event.stop - event.start
            elif event.kind == "interrupted":  # that chunk yielded to live work: not computed
                logged[event.rid] -= event.stop - event.start

        chunks.append(logged)
        engine = LocalEngine("tiny", step_hook=hook)
        engines.append(engine)
        return engine

    config = profile("quick").config
    report = await run_bench(config, factory)
    assert list(report.modes) == list(MODES)
    steps = {f["steps"] for f in report.modes.values()}
    assert len(steps) == 1
    for mode, f in report.modes.items():
        assert f["episodes"] == config.episodes
        assert f["accounting_mismatched_requests"] == 0, mode
        assert f["engine_computed_tokens"] == f["computed_tokens"], mode
        assert f["useful_tokens"] + f["wasted_tokens"] == f["computed_tokens"]
    assert report.modes["cold"]["cached_tokens"] == 0
    assert report.modes["cold"]["computed_tokens"] == report.modes["cold"]["prompt_tokens"]
    assert report.modes["oracle"]["wasted_tokens"] == 0
    assert report.modes["oracle"]["branch_hit_rate"] == 1.0
    assert report.modes["reactive"]["cached_tokens"] > 0
    assert report.modes["agentwarm"]["prefetches_issued"] > 0
    assert len(chunks) == len(MODES) == 5
    nt = report.modes["next_turn"]  # one warm per reply, every step replied
    assert nt["next_turn_warms"] == nt["steps"] and nt["next_turn_computed_tokens"] > 0
    for mode, logged in zip(MODES, chunks, strict=True):
        records = report.runs[mode].requests
        assert records
        for r in records:
            # What the engine answered equals the prefill chunks its scheduler ran.
            assert r.computed_tokens == logged.get(r.rid, 0), (mode, r)
            if r.status == "done":
                assert r.cached_tokens + r.computed_tokens == r.prompt_tokens, (mode, r)
    # Timing ratios are noise in a test on shared cores (a benchmark measures them): only
    # check that each headline figure is a number when defined.
    for h in report.headline.values():
        assert h is None or math.isfinite(h)
    assert report.modes["reactive"]["prefetches_issued"] == 0
