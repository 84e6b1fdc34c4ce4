"""VLLMEngine against a real vLLM server and a real model (SmolLM2-135M-Instruct, issue 24):
what the conformance suite (``tests/engines/test_conformance.py``, which runs on it too) does
not show — the real model's answers, its tokenizer and template, and what the server itself did
(read from its ``/metrics``, never from elapsed time).
"""

from __future__ import annotations

import dataclasses

import pytest

from agentwarm.engines.base import PrefillStatus, new_rid
from agentwarm.engines.registry import open_engine
from agentwarm.engines.routing import MultiWorkerEngine
from agentwarm.engines.vllm import VLLMEngine
from agentwarm.errors import ConfigError, ContextLengthExceeded, RequestAborted
from tests.vllm.helpers import metric, namespace, prompt
from tests.waiting import until

TEXTS = ["Hello, agent.", "naïve café — ✓ 日本語", "  two spaces\nand a tab\t", "x"]


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
    assert engine.model is not None  # from_url read it
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


async def test_the_engine_option_names_a_vllm_server(vllm_url: str) -> None:
    from agentwarm.engines.registry import open_engine

    engine = await open_engine(f"vllm:{vllm_url}", "tiny")
    try:
        assert isinstance(engine, VLLMEngine) and engine.max_context == 8192
        out = await engine.generate(engine.encode("The capital of France is"), max_tokens=3)
        assert "Paris" in out.text
    finally:
        await engine.aclose()


@pytest.mark.parametrize("spec", ["{url}", "vllm:{url}"])
async def test_a_plain_url_of_a_vllm_server_is_told_apart_from_sglang(
    vllm_url: str, spec: str
) -> None:
    """``--engine http://HOST:PORT`` of a vLLM server opens a VLLMEngine: vLLM has no
    ``/model_info`` (SGLang and agentwarm serve do) but answers ``/version``."""
    from agentwarm.engines.registry import open_engine, server_kind

    assert await server_kind(vllm_url) == "vllm"
    engine = await open_engine(spec.format(url=vllm_url), "tiny")
    try:
        assert isinstance(engine, VLLMEngine)
    finally:
        await engine.aclose()


async def test_several_vllm_servers_are_one_engine_routed_by_session(vllm_url: str) -> None:
    # One server under two names (127.0.0.1 and localhost): two workers to the router.
    alias = vllm_url.replace("127.0.0.1", "localhost")
    engine = await open_engine(f"vllm:{vllm_url},{alias}", "tiny")
    try:
        assert isinstance(engine, MultiWorkerEngine)
        assert engine.provider_name == "vllm" and engine.chat_template is not None
        done = await engine.prefill(prompt(300), session="s-1", namespace=namespace())
        assert done.status is PrefillStatus.DONE and done.computed_tokens == 300
        reply = await engine.generate(engine.encode("The capital of France is"), max_tokens=3)
        assert reply.token_ids and reply.prompt_tokens > 0
    finally:
        await engine.aclose()
    with pytest.raises(ConfigError, match="vllm:URL"):
        await open_engine("vllm:ftp://127.0.0.1:1,http://127.0.0.1:2", "tiny")
