"""VLLMEngine against a real vLLM server and a real model (SmolLM2-135M-Instruct, issue 24).

The engine protocol's rules as vLLM can keep them: cached tokens come in whole KV blocks
(``block_size``, 128 on CPU), a prefill is a ``max_tokens: 1`` request, an abort closes the
connection. Orderings and counts are read from results and the server's ``/metrics``, never from
elapsed time.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from agentwarm.engines.base import PrefillStatus, new_rid
from agentwarm.engines.vllm import VLLMEngine
from agentwarm.errors import ContextLengthExceeded, EngineUnavailable, RequestAborted
from tests.vllm.helpers import metric, namespace, prompt
from tests.waiting import until

TEXTS = ["Hello, agent.", "naïve café — ✓ 日本語", "  two spaces\nand a tab\t", "x"]


def blocks(engine: VLLMEngine, n: int) -> int:
    """``n`` rounded down to whole KV blocks: what vLLM's prefix cache can serve of it."""
    return n // engine.block_size * engine.block_size


async def test_the_real_model_answers_greedily(engine: VLLMEngine) -> None:
    ids = engine.encode("The capital of France is")
    out = await engine.generate(ids, max_tokens=8, namespace=namespace())
    assert "Paris" in out.text
    assert out.prompt_tokens == len(ids) and len(out.token_ids) == 8
    assert out.finish_reason == "length" and out.text == engine.decode(out.token_ids)
    assert 0 < out.ttft_s <= out.e2e_s


async def test_the_served_model_is_read_with_its_tokenizer_and_chat_template(
    engine: VLLMEngine,
) -> None:
    assert engine.max_context == 8192 and engine.block_size == 128  # SmolLM2, vLLM on CPU
    assert engine.chat_template is not None
    assert "<|im_start|>" in (engine.tokenizer.chat_template or "")
    for text in TEXTS:
        ids = engine.encode(text)
        assert ids and engine.decode(ids) == text
    assert engine.decode([i for text in TEXTS for i in engine.encode(text)]) == "".join(TEXTS)


async def test_prefill_then_generate_reports_the_prefix_as_cached_in_whole_blocks(
    engine: VLLMEngine,
) -> None:
    ns, prefix = namespace(), prompt(300)
    warm = await engine.prefill(prefix, namespace=ns)
    assert (warm.status, warm.prompt_tokens, warm.cached_tokens, warm.computed_tokens) == (
        PrefillStatus.DONE,
        300,
        0,
        300,
    )
    out = await engine.generate([*prefix, *prompt(20)], max_tokens=2, namespace=ns)
    assert (out.prompt_tokens, out.cached_tokens) == (320, blocks(engine, 300))
    again = await engine.prefill(prefix, namespace=ns)
    assert (again.cached_tokens, again.computed_tokens) == (256, 44)


async def test_tenants_share_no_cached_tokens(engine: VLLMEngine) -> None:
    tenant_a, tenant_b, prefix = namespace(), namespace(), prompt(400)
    await engine.prefill(prefix, namespace=tenant_a)
    query = [*prefix, *prompt(5)]
    other = await engine.generate(query, max_tokens=4, namespace=tenant_b)
    unsalted = await engine.generate(query, max_tokens=4)  # the default namespace: no salt
    same = await engine.generate(query, max_tokens=4, namespace=tenant_a)
    assert (other.cached_tokens, unsalted.cached_tokens) == (0, 0)
    assert same.cached_tokens == blocks(engine, 400)
    # (No claim on equal outputs: vLLM's bf16 CPU kernels differ between a cached and a cold
    # prefill, and the argmax of random-id prompts is close to a tie.)


async def test_streaming_yields_the_tokens_of_generate(engine: VLLMEngine) -> None:
    ids, ns = prompt(40), namespace()
    chunks = [chunk async for chunk in engine.generate_stream(ids, max_tokens=6, namespace=ns)]
    final = chunks[-1].completion
    assert final is not None and all(chunk.completion is None for chunk in chunks[:-1])
    assert tuple(t for chunk in chunks for t in chunk.token_ids) == final.token_ids
    assert "".join(chunk.text for chunk in chunks) == final.text
    assert final.token_ids == (await engine.generate(ids, max_tokens=6, namespace=ns)).token_ids
    sampled = [
        await engine.generate(ids, max_tokens=10, temperature=1.5, seed=seed, namespace=ns)
        for seed in (5, 5, 6)
    ]
    assert sampled[0].token_ids == sampled[1].token_ids != sampled[2].token_ids


async def test_abort_of_a_running_generate_raises_and_vllm_aborts_it(
    engine: VLLMEngine, vllm_url: str
) -> None:
    generated_before = metric(vllm_url, "vllm:generation_tokens_total")
    rid = new_rid()
    stream = engine.generate_stream(prompt(40), max_tokens=2_000, rid=rid, namespace=namespace())
    received = len((await anext(stream)).token_ids)
    await engine.abort(rid)
    with pytest.raises(RequestAborted):
        async for chunk in stream:
            received += len(chunk.token_ids)
    assert 1 <= received < 2_000
    assert (await engine.stats()).aborted == 1

    def stopped() -> bool:
        return metric(vllm_url, "vllm:num_requests_running") == 0

    await until(stopped, what="vLLM stopping the request")
    # vLLM stopped it (a client disconnect aborts): it did not decode its 2,000 tokens.
    assert metric(vllm_url, "vllm:generation_tokens_total") - generated_before < 1_000
    follow_up = await engine.generate(prompt(10), max_tokens=1, rid=rid)  # the rid is free
    assert follow_up.prompt_tokens == 10


async def test_a_request_over_the_context_is_refused_before_it_is_sent(
    engine: VLLMEngine, vllm_url: str
) -> None:
    sent = metric(vllm_url, "vllm:prompt_tokens_total")
    with pytest.raises(ContextLengthExceeded) as over:
        await engine.generate([65] * 8193, max_tokens=1)
    with pytest.raises(ContextLengthExceeded) as past:
        await engine.generate([65] * 8190, max_tokens=10)
    with pytest.raises(ContextLengthExceeded):
        await engine.prefill([65] * 8193)
    assert (over.value.prompt_tokens, over.value.limit) == (8193, 8192)
    assert (past.value.prompt_tokens, past.value.max_tokens, past.value.limit) == (8190, 10, 8192)
    assert metric(vllm_url, "vllm:prompt_tokens_total") == sent
    assert (await engine.stats()).requests == 0


async def test_vllms_own_refusal_over_the_context_is_context_length_exceeded(
    engine: VLLMEngine, vllm_url: str
) -> None:
    # A client that believes the context is longer sends the request: vLLM's 400 is mapped.
    believer = VLLMEngine(
        vllm_url,
        model=dataclasses.replace(engine.model, max_model_len=100_000),
        tokenizer=engine.tokenizer,
        cache=engine.cache,
    )
    try:
        with pytest.raises(ContextLengthExceeded) as refused:
            await believer.generate([65] * 8193, max_tokens=1)
    finally:
        await believer.aclose()
    assert (refused.value.prompt_tokens, refused.value.limit) == (8193, 8192)
    assert "maximum context length is 8192 tokens" in str(refused.value)


async def test_stats_count_this_clients_traffic_and_the_servers_kv_capacity(
    engine: VLLMEngine,
) -> None:
    ns, ids = namespace(), prompt(300)
    await engine.prefill(ids[:260], namespace=ns)
    await engine.generate(ids, max_tokens=2, namespace=ns)
    stats = await engine.stats()
    assert (stats.requests, stats.prompt_tokens, stats.hit_tokens, stats.computed_tokens) == (
        2,
        560,
        256,
        304,
    )
    assert stats.aborted == 0
    assert stats.capacity_tokens is not None and stats.capacity_tokens % engine.block_size == 0
    assert stats.capacity_tokens >= 8192  # 1 GiB of KV holds more than one full context


async def test_aclose_is_idempotent_and_final(engine: VLLMEngine) -> None:
    await engine.prefill(prompt(20))
    await engine.aclose()
    await engine.aclose()
    with pytest.raises(EngineUnavailable):
        await engine.prefill(prompt(20))
    with pytest.raises(EngineUnavailable):
        await engine.generate(prompt(20), max_tokens=1)
    await asyncio.sleep(0)


async def test_the_engine_option_names_a_vllm_server(vllm_url: str) -> None:
    from agentwarm.engines.registry import open_engine

    engine = await open_engine(f"vllm:{vllm_url}", "tiny")
    try:
        assert isinstance(engine, VLLMEngine) and engine.max_context == 8192
        out = await engine.generate(engine.encode("The capital of France is"), max_tokens=3)
        assert "Paris" in out.text
    finally:
        await engine.aclose()
