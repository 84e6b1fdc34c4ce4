"""``GET /metrics`` of ``agentwarm serve``: SGLang's series names, types and help, exactly.

The exposition is written by ``prometheus_client`` and read back by ``parse_metrics`` (its
parser); the text is pinned whole so that no series is renamed, retyped or gains a suffix.
"""

from __future__ import annotations

import httpx

from agentwarm.engines.base import EngineStats
from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.sglang import SGLangEngine, parse_metrics
from agentwarm.server import ServerConfig, create_app
from agentwarm.server.metrics import ServerMetrics

EXPECTED = """\
# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m\\"1"} 2.0
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="m\\"1"} 110.0
# HELP sglang:cached_tokens_total Number of cached prompt tokens.
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{model_name="m\\"1"} 33.0
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m\\"1"} 5.0
# HELP sglang:num_aborted_requests_total Number of requests aborted.
# TYPE sglang:num_aborted_requests_total counter
sglang:num_aborted_requests_total{model_name="m\\"1"} 1.0
# HELP agentwarm:prefill_requests_total Number of prefill-only requests processed.
# TYPE agentwarm:prefill_requests_total counter
agentwarm:prefill_requests_total{model_name="m\\"1"} 1.0
# HELP agentwarm:computed_tokens_total Number of prompt tokens computed (not cached).
# TYPE agentwarm:computed_tokens_total counter
agentwarm:computed_tokens_total{model_name="m\\"1"} 77.0
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m\\"1"} 3.0
# HELP sglang:max_total_num_tokens Maximum total number of tokens in the KV cache pool.
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="m\\"1"} 4096.0
# HELP sglang:num_used_tokens The number of used tokens.
# TYPE sglang:num_used_tokens gauge
sglang:num_used_tokens{model_name="m\\"1"} 64.0
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="m\\"1"} 0.25
# HELP agentwarm:cache_tokens Tokens held in the prefix cache.
# TYPE agentwarm:cache_tokens gauge
agentwarm:cache_tokens{model_name="m\\"1"} 64.0
# HELP agentwarm:evicted_tokens_total Tokens evicted from the prefix cache.
# TYPE agentwarm:evicted_tokens_total counter
agentwarm:evicted_tokens_total{model_name="m\\"1"} 9.0
"""

COUNTERS_ONLY_TAIL = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m\\"1"} 0.0
"""


def recorded() -> ServerMetrics:
    metrics = ServerMetrics('m"1')
    metrics.record(
        prompt_tokens=100,
        cached_tokens=30,
        computed_tokens=70,
        generation_tokens=5,
        aborted=False,
        prefill_only=True,
    )
    metrics.record(  # aborted: only the 3 + 7 prompt tokens processed count
        prompt_tokens=100,
        cached_tokens=3,
        computed_tokens=7,
        generation_tokens=0,
        aborted=True,
        prefill_only=False,
    )
    return metrics


def test_exposition_keeps_sglang_names_types_and_help() -> None:
    stats = EngineStats(
        cached_tokens=64,
        capacity_tokens=4096,
        evicted_tokens=9,
        hit_tokens=30,
        prompt_tokens=120,
        computed_tokens=90,
        requests=2,
        aborted=1,
    )
    assert recorded().render(stats, 3).decode() == EXPECTED


def test_without_engine_stats_only_counters_and_running_are_exposed() -> None:
    text = recorded().render(None, 0).decode()
    counters = EXPECTED.split("# HELP sglang:num_running_reqs")[0]
    assert text == counters + COUNTERS_ONLY_TAIL


def test_parse_metrics_reads_the_exposition_back() -> None:
    stats = EngineStats(64, None, 0, 0, 0, 0, 0, 0)
    assert parse_metrics(recorded().render(stats, 1).decode()) == {
        "sglang:num_requests_total": 2.0,
        "sglang:prompt_tokens_total": 110.0,
        "sglang:cached_tokens_total": 33.0,
        "sglang:generation_tokens_total": 5.0,
        "sglang:num_aborted_requests_total": 1.0,
        "agentwarm:prefill_requests_total": 1.0,
        "agentwarm:computed_tokens_total": 77.0,
        "sglang:num_running_reqs": 1.0,
        "sglang:num_used_tokens": 64.0,
        "sglang:cache_hit_rate": 0.0,
        "agentwarm:cache_tokens": 64.0,
        "agentwarm:evicted_tokens_total": 0.0,
    }


async def test_served_metrics_have_the_text_format_content_type() -> None:
    engine = FakeEngine()
    app = create_app(engine, ServerConfig(), close_engine=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        resp = await client.get("/metrics")
    await engine.aclose()
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert parse_metrics(resp.text)["sglang:num_requests_total"] == 0.0


async def test_a_metrics_page_that_is_not_prometheus_text_means_client_stats() -> None:
    def reply(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text="<html>login</html>")
        return httpx.Response(404)

    engine = SGLangEngine(
        "http://127.0.0.1:1", tokenizer="byte", transport=httpx.MockTransport(reply)
    )
    assert await engine.server_metrics() == {}
    assert await engine.stats() == engine.client_stats()
    await engine.aclose()
