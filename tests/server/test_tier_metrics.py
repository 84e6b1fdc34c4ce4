"""``GET /metrics`` of ``agentwarm serve --kv-dir``: the disk tier's series (names, types, help
pinned), absent without a tier; the SGLang client reads them back into ``EngineStats``, and a
routing engine sums its workers'."""

from __future__ import annotations

import pytest

from agentwarm.engines.base import EngineStats
from agentwarm.engines.routing import _any_tier
from agentwarm.engines.sglang import parse_metrics
from agentwarm.engines.sglang.metrics import stats_from_metrics
from agentwarm.server.metrics import ServerMetrics

TIER_TAIL = """\
# HELP agentwarm:disk_hit_tokens_total Prompt tokens loaded from the disk tier.
# TYPE agentwarm:disk_hit_tokens_total counter
agentwarm:disk_hit_tokens_total{model_name="m"} 576.0
# HELP agentwarm:tier_bytes_written_total Bytes written to the disk tier.
# TYPE agentwarm:tier_bytes_written_total counter
agentwarm:tier_bytes_written_total{model_name="m"} 1.048576e+06
# HELP agentwarm:tier_bytes_read_total Bytes read from the disk tier.
# TYPE agentwarm:tier_bytes_read_total counter
agentwarm:tier_bytes_read_total{model_name="m"} 65536.0
# HELP agentwarm:tier_loads_refused_total Disk-tier loads refused as slower than recomputing.
# TYPE agentwarm:tier_loads_refused_total counter
agentwarm:tier_loads_refused_total{model_name="m"} 2.0
# HELP agentwarm:tier_stored_bytes Bytes stored in the disk tier.
# TYPE agentwarm:tier_stored_bytes gauge
agentwarm:tier_stored_bytes{model_name="m"} 983040.0
# HELP agentwarm:tier_enabled 1 while the disk tier is on, 0 once it turned itself off.
# TYPE agentwarm:tier_enabled gauge
agentwarm:tier_enabled{model_name="m"} 1.0
"""

TIERED = EngineStats(
    cached_tokens=640,
    capacity_tokens=None,
    evicted_tokens=64,
    hit_tokens=600,
    prompt_tokens=1200,
    computed_tokens=600,
    requests=2,
    aborted=0,
    disk_hit_tokens=576,
    tier_bytes_written=1 << 20,
    tier_bytes_read=65536,
    tier_loads_refused=2,
    tier_stored_bytes=983040,
    tier_enabled=True,
)
PLAIN = EngineStats(640, None, 64, 600, 1200, 600, 2, 0)


def test_the_tier_series_follow_the_engine_series() -> None:
    text = ServerMetrics("m").render(TIERED, 0).decode()
    plain = ServerMetrics("m").render(PLAIN, 0).decode()
    assert text == plain + TIER_TAIL


def test_without_a_tier_no_tier_series_and_a_tier_turned_off_reads_0() -> None:
    assert "tier" not in ServerMetrics("m").render(PLAIN, 0).decode()
    off = EngineStats(640, None, 64, 600, 1200, 600, 2, 0, tier_enabled=False)
    assert parse_metrics(ServerMetrics("m").render(off, 0).decode())["agentwarm:tier_enabled"] == 0


@pytest.mark.parametrize("stats", [TIERED, PLAIN])
def test_the_sglang_client_reads_the_tier_back(stats: EngineStats) -> None:
    metrics = ServerMetrics("m")
    for _ in range(2):
        metrics.record(
            prompt_tokens=600,
            cached_tokens=300,
            computed_tokens=300,
            generation_tokens=0,
            aborted=False,
            prefill_only=True,
        )
    assert stats_from_metrics(parse_metrics(metrics.render(stats, 0).decode())) == stats


def test_workers_tiers_add_up() -> None:
    assert (_any_tier([None, None]), _any_tier([None, False]), _any_tier([False, True])) == (
        None,
        False,
        True,
    )


BY_SOURCE = """\
# HELP agentwarm:prompt_tokens_cached_by_source_total Number of cached prompt tokens by source.
# TYPE agentwarm:prompt_tokens_cached_by_source_total counter
agentwarm:prompt_tokens_cached_by_source_total{model_name="m",source="device"} 64.0
agentwarm:prompt_tokens_cached_by_source_total{model_name="m",source="disk"} 576.0
"""


def test_cached_tokens_by_source_are_counted_as_vllm_counts_them() -> None:
    metrics = ServerMetrics("m")
    metrics.record(  # a cold request: nothing cached, no split counted yet
        prompt_tokens=600,
        cached_tokens=0,
        computed_tokens=600,
        generation_tokens=1,
        aborted=False,
        prefill_only=False,
    )
    assert "by_source" not in metrics.render(PLAIN, 0).decode()
    for device, disk in ((0, 576), (64, 0)):  # after a restart, then from the radix cache
        metrics.record(
            prompt_tokens=600,
            cached_tokens=device + disk,
            computed_tokens=600 - device - disk,
            generation_tokens=1,
            aborted=False,
            prefill_only=False,
            cached_by_source={"device": device, "disk": disk},
        )
    text = metrics.render(PLAIN, 0).decode()
    counters = text.split("# HELP sglang:num_running_reqs")[0]
    assert counters.endswith(BY_SOURCE)
    assert parse_metrics(text)["sglang:cached_tokens_total"] == 640
