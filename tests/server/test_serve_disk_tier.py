"""The restart check of issue 25, end to end: ``agentwarm serve --model tiny --kv-dir D`` (a real
process on loopback) answers a ~600-token request, stops cleanly on SIGTERM (writing what it
cached to D), starts again on D and answers the same request from disk: ``cached_tokens`` covers
the stored blocks, SGLang's ``cached_tokens_details`` and ``/metrics`` say they came from the disk
tier, and the greedy text is the first answer's, token for token."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agentwarm.engines.base import EngineStats
from agentwarm.engines.sglang import SGLangEngine
from tests.conftest_server import ServeProcess

#: 600 prompt ids inside the tiny preset's vocabulary (Qwen's), no run repeating.
PROMPT = [(i * 7919) % 50_000 + 100 for i in range(600)]
#: The tier's blocks: a generate computes its last prompt token, so 599 tokens may come from
#: disk, of which the whole 64-token blocks: 9 of them.
BLOCK_TOKENS = 64
FROM_DISK = (len(PROMPT) - 1) // BLOCK_TOKENS * BLOCK_TOKENS


def generate(server: ServeProcess) -> dict[str, Any]:
    body = {"input_ids": PROMPT, "sampling_params": {"max_new_tokens": 16, "temperature": 0}}
    reply = httpx.post(f"{server.url}/generate", json=body, timeout=120)
    assert reply.status_code == 200, reply.text
    answer: dict[str, Any] = reply.json()
    return answer


def stop_cleanly(server: ServeProcess) -> None:
    server.stop()
    # uvicorn shuts down gracefully, then re-raises the signal: the status says SIGTERM.
    assert server.proc.returncode in (0, -signal.SIGTERM), "".join(server.output)


@pytest.mark.slow
def test_a_restarted_server_answers_from_disk_what_it_stored(tmp_path: Path) -> None:
    kv = tmp_path / "kv"
    args = ["--model", "tiny", "--kv-dir", str(kv), "--kv-disk-gb", "1"]
    first = ServeProcess(args)
    try:
        cold = generate(first)
        assert cold["meta_info"]["cached_tokens"] == 0
        assert "cached_tokens_details" not in cold["meta_info"]  # nothing cached: none, as SGLang
        assert first.metrics()["agentwarm:tier_enabled"] == 1
    finally:
        stop_cleanly(first)
    assert any(kv.rglob("*.kv")), f"nothing stored under {kv}: {''.join(first.output)}"

    second = ServeProcess(args)
    try:
        warm = generate(second)
        metrics = second.metrics()
        exposition = httpx.get(f"{second.url}/metrics", timeout=10).text
        client = SGLangEngine(second.url, tokenizer="byte")
        stats = asyncio.run(client_stats(client))
    finally:
        stop_cleanly(second)
    meta = warm["meta_info"]
    assert (meta["prompt_tokens"], meta["cached_tokens"]) == (len(PROMPT), FROM_DISK)
    assert meta["computed_tokens"] == len(PROMPT) - FROM_DISK
    details = meta["cached_tokens_details"]
    assert (details["device"], details["host"], details["storage"]) == (0, 0, FROM_DISK)
    assert warm["output_ids"] == cold["output_ids"] and warm["text"] == cold["text"]
    assert len(warm["output_ids"]) == 16
    assert metrics["agentwarm:disk_hit_tokens_total"] == FROM_DISK
    assert metrics["agentwarm:tier_bytes_read_total"] > 0
    assert metrics["agentwarm:tier_loads_refused_total"] == 0
    assert metrics["agentwarm:tier_enabled"] == 1
    assert by_source(exposition) == {"device": 0, "disk": FROM_DISK}
    # The SGLang client (agentwarm run --engine URL, the gateway) reads the tier back.
    assert (stats.disk_hit_tokens, stats.tier_enabled, stats.tier_loads_refused) == (
        FROM_DISK,
        True,
        0,
    )
    assert stats.tier_stored_bytes > 0 and stats.tier_bytes_read > 0


async def client_stats(client: SGLangEngine) -> EngineStats:
    try:
        return await client.stats()
    finally:
        await client.aclose()


def by_source(exposition: str) -> dict[str, float]:
    """``agentwarm:prompt_tokens_cached_by_source_total`` of a ``/metrics`` text, by source."""
    return {
        sample.labels["source"]: sample.value
        for family in text_string_to_metric_families(exposition)
        for sample in family.samples
        if sample.name == "agentwarm:prompt_tokens_cached_by_source_total"
    }
