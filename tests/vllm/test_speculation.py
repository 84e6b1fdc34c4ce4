"""Chunked speculation on a real vLLM server (issue 24 §1, the safety rule).

vLLM never preempts a running prefill for a higher-priority request, so
:class:`~agentwarm.engines.vllm.VLLMEngine` sends a speculative prefill as block-aligned requests
of at most ``prefill_chunk_tokens`` new tokens each, and the next one only while no live request
of the engine waits for its first token. The server runs with vLLM's defaults for splitting long
prefills. Proved by counts (``/metrics``) and by order, not by time.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import pytest

from agentwarm.engines.base import PrefillStatus, new_rid
from agentwarm.engines.vllm import VLLMEngine
from agentwarm.gateway.upstream import Upstream
from tests.vllm.helpers import metric, namespace, prompt
from tests.waiting import until

CHUNK = 256


@pytest.fixture
async def chunked(vllm_url: str) -> AsyncIterator[VLLMEngine]:
    engine = await VLLMEngine.from_url(vllm_url, wait_s=10, prefill_chunk_tokens=CHUNK)
    try:
        yield engine
    finally:
        await engine.aclose()


async def test_a_speculative_prefill_is_sent_as_block_aligned_chunks(
    chunked: VLLMEngine, vllm_url: str
) -> None:
    ns, ids = namespace(), prompt(1_000)
    sent = metric(vllm_url, "vllm:prompt_tokens_total")
    hits = metric(vllm_url, "vllm:prompt_tokens_cached_total")
    result = await chunked.prefill(ids, namespace=ns)
    assert (result.status, result.prompt_tokens, result.cached_tokens, result.computed_tokens) == (
        PrefillStatus.DONE,
        1_000,
        0,
        1_000,
    )
    # Four requests: 2, 4 and 6 blocks + 1 token, then all 1,000 ids, each reusing the whole
    # blocks of the one before (and computing its one extra token again).
    assert metric(vllm_url, "vllm:prompt_tokens_total") - sent == 257 + 513 + 769 + 1_000
    assert metric(vllm_url, "vllm:prompt_tokens_cached_total") - hits == 256 + 512 + 768
    live = await chunked.generate([*ids, *prompt(5)], max_tokens=1, namespace=ns)
    assert live.cached_tokens == 1_000 // 128 * 128


async def test_a_live_request_gets_its_first_token_before_the_last_chunk_is_sent(
    chunked: VLLMEngine, vllm_url: str
) -> None:
    # 1,500 tokens: six chunks, so chunks remain after the live request's reply (the first
    # chunk done, at most one more in flight when it comes).
    ns, ids = namespace(), prompt(1_500)
    sent = metric(vllm_url, "vllm:prompt_tokens_total")
    speculative = asyncio.create_task(chunked.prefill(ids, namespace=ns))

    def first_chunk_done() -> bool:
        return metric(vllm_url, "vllm:prompt_tokens_total") > sent

    await until(first_chunk_done, timeout_s=120, what="the first speculative chunk")
    stream = chunked.generate_stream(prompt(40), max_tokens=3, namespace=namespace())
    first = await anext(stream)
    assert first.token_ids and not speculative.done()  # the prefill is still chunks from its end
    async for _ in stream:
        pass
    assert not speculative.done()
    result = await speculative
    assert (result.status, result.computed_tokens) == (PrefillStatus.DONE, 1_500)
    follow = await chunked.generate([*ids, *prompt(5)], max_tokens=1, namespace=ns)
    assert follow.cached_tokens == 1_500 // 128 * 128


async def test_an_abort_stops_a_chunked_prefill_and_keeps_its_chunks(
    chunked: VLLMEngine, vllm_url: str
) -> None:
    ns, ids, rid = namespace(), prompt(3_000), new_rid()
    finished = metric(vllm_url, "vllm:request_success_total")
    task = asyncio.create_task(chunked.prefill(ids, rid=rid, namespace=ns))

    def two_chunks_done() -> bool:  # so the client has seen the first one's reply
        return metric(vllm_url, "vllm:request_success_total") >= finished + 2

    await until(two_chunks_done, timeout_s=120, what="two speculative chunks")
    await chunked.abort(rid)
    result = await task
    assert result.status is PrefillStatus.ABORTED and result.rid == rid
    kept = result.computed_tokens
    assert 0 < kept < 3_000 and kept % CHUNK == 0 and result.cached_tokens == 0
    stats = await chunked.stats()
    assert (stats.aborted, stats.prompt_tokens, stats.computed_tokens) == (1, kept, kept)
    again = await chunked.prefill(ids[: kept + 10], namespace=ns)
    assert (again.status, again.cached_tokens, again.computed_tokens) == (
        PrefillStatus.DONE,
        kept,
        10,
    )


async def test_a_chat_request_the_gateway_forwards_holds_back_speculative_chunks(
    vllm_url: str,
) -> None:
    """The gateway's live requests count as waiting on its vLLM worker's gate
    (:meth:`~agentwarm.gateway.upstream.Upstream.live`): while one waits for its first token,
    no chunk of a speculative prefill is sent; once it has it, the prefill goes on."""
    up = Upstream([f"vllm:{vllm_url}"])
    (worker,) = up.urls
    try:
        engine = up.engine(worker)
        assert isinstance(engine, VLLMEngine)
        engine.prefill_chunk_tokens = CHUNK
        model = str(httpx.get(f"{vllm_url}/v1/models", timeout=10).json()["data"][0]["id"])
        finished = metric(vllm_url, "vllm:request_success_total")
        leave = up.live(worker)  # what the gateway does as it forwards a chat request
        assert engine.live.waiting == 1
        ns, ids = namespace(), prompt(1_000)
        speculative = asyncio.create_task(
            up.prefill(worker, ids, rid=new_rid(), session=None, namespace=ns)
        )
        body = {
            "model": model,
            "messages": [{"role": "user", "content": f"hello {new_rid()}"}],
            "max_tokens": 3,
        }
        reply = await up.chat(worker, body, session=None)
        await reply.aread()
        await reply.aclose()
        assert reply.status_code == 200, reply.text
        # Only the chat request ran: no chunk was sent (none running, none finished).
        assert metric(vllm_url, "vllm:request_success_total") == finished + 1
        assert metric(vllm_url, "vllm:num_requests_running") == 0
        assert not speculative.done()
        leave()
        leave()  # idempotent: the relay may end the wait twice
        assert engine.live.waiting == 0
        result = await speculative
        assert (result.status, result.computed_tokens) == (PrefillStatus.DONE, 1_000)
        assert metric(vllm_url, "vllm:request_success_total") == finished + 1 + 4
    finally:
        await up.aclose()


async def test_a_live_request_of_a_prefix_being_prefetched_reuses_the_chunks_done(
    chunked: VLLMEngine, vllm_url: str
) -> None:
    """Promotion on vLLM: the live request is sent while the prefetch of its prefix is two
    chunks in; it reuses them, gets its first token before the prefetch ends, and the chunks
    sent after it find its KV cached (the prefix is computed once)."""
    assert chunked.supports_promotion  # the runtime sends the live request at once
    ns, ids = namespace(), prompt(2_000)
    finished = metric(vllm_url, "vllm:request_success_total")
    speculative = asyncio.create_task(chunked.prefill(ids, namespace=ns))

    def two_chunks_done() -> bool:
        return metric(vllm_url, "vllm:request_success_total") >= finished + 2

    await until(two_chunks_done, timeout_s=120, what="two speculative chunks")
    stream = chunked.generate_stream([*ids, *prompt(5)], max_tokens=2, namespace=ns)
    first = await anext(stream)
    assert first.token_ids and not speculative.done()
    async for chunk in stream:
        live = chunk.completion or None
    assert live is not None and live.cached_tokens >= 2 * CHUNK
    result = await speculative
    assert result.status is PrefillStatus.DONE
    assert result.computed_tokens + result.cached_tokens == 2_000
    # what the live request computed, the later chunks found cached
    assert result.cached_tokens >= 2_000 // 128 * 128 - live.cached_tokens - CHUNK
