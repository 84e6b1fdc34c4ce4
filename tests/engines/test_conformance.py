"""The engine protocol (``agentwarm/engines/base.py``, DESIGN §4), checked on every engine:
``FakeEngine``, ``LocalEngine`` on the ``tiny`` preset (CPU), ``SGLangEngine`` talking HTTP
to an ``agentwarm serve --engine fake`` started on loopback, and ``VLLMEngine`` on the session's
real vLLM server (marked ``vllm``; skipped without ``scripts/setup_vllm.sh``'s venv).

What a real server may differ in is stated by :class:`Case`, not special-cased per test: vLLM
caches whole KV blocks (``block``), has no prefill-only request (a prefill recomputes the last
token of a cached prompt), computes a cached prefill in bf16 kernels that may change a greedy
argmax, and reports no size of its prefix cache. Tests of one engine's own behaviour
(exact logits, promotion, pins, wire format, routing) stay in that engine's test file.

Through public APIs only. Orderings are read from the order in which requests complete, and a
request is known to be running once the cache has grown (``stats().cached_tokens``): nothing
here sleeps for a while or asserts on time.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import httpx
import pytest

from agentwarm.engines.base import (
    DEFAULT_MAX_CONTEXT,
    Engine,
    EngineStats,
    PrefillStatus,
    Priority,
    new_rid,
)
from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.sglang import SGLangEngine, parse_metrics
from agentwarm.errors import (
    ContextLengthExceeded,
    EngineUnavailable,
    InvalidRequest,
    RequestAborted,
)
from tests.conftest_server import serve
from tests.waiting import until


@dataclass(frozen=True)
class Case:
    """One engine under test."""

    name: str
    engine: Engine
    #: A prompt length that takes many prefill chunks (time to see it running and abort it).
    long: int
    #: Cached tokens come in whole blocks of this many.
    block: int = 1
    #: A prefill of an already-cached prompt computes nothing (else: its last token again).
    prefill_only: bool = True
    #: A cached prefix changes no output.
    exact_with_cache: bool = True
    #: ``stats().cached_tokens`` is the size of the prefix cache (vLLM: the KV in use).
    cache_size: bool = True
    #: Prompt tokens the server has processed, where the cache size cannot show progress.
    progress: Callable[[], Awaitable[float]] | None = None

    def hit(self, n: int) -> int:
        """Tokens a longer request reuses of an ``n``-token cached prefix."""
        return n // self.block * self.block

    def again(self, n: int) -> int:
        """Tokens a prefill of the same ``n`` cached ids finds cached."""
        return n if self.prefill_only else self.hit(n - 1)


@cache
def _tiny() -> Any:
    """The ``tiny`` preset's weights, loaded once (torch is imported only when needed)."""
    from agentwarm.engines.local.model import load_model

    return load_model("tiny", seed=0)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """``agentwarm serve --engine fake`` (test costs: a 256-token chunk takes ~50 ms)."""
    with serve() as process:
        yield process.url


@pytest.fixture(
    params=[
        "fake",
        pytest.param("local", marks=pytest.mark.slow),
        pytest.param("serve", marks=pytest.mark.slow),
        pytest.param("vllm", marks=[pytest.mark.vllm, pytest.mark.slow]),
    ]
)
async def case(request: pytest.FixtureRequest) -> AsyncIterator[Case]:
    engine: Engine
    if request.param == "fake":
        # A 256-token chunk takes 25 ms.
        engine = FakeEngine(seconds_per_token=1e-4, seconds_per_output_token=1e-3)
        long = 4_000
    elif request.param == "local":
        from agentwarm.engines.local import LocalEngine

        engine = LocalEngine(_tiny(), chunk_size=16)
        long = 800
    elif request.param == "serve":
        engine = await SGLangEngine.from_url(request.getfixturevalue("server"), wait_s=30)
        long = 4_000
    else:
        from agentwarm.engines.vllm import VLLMEngine

        # 256-token chunks: a 3,000-token prefill is 12 requests.
        url = request.getfixturevalue("vllm_url")
        engine = await VLLMEngine.from_url(url, wait_s=30, prefill_chunk_tokens=256)

        async def progress() -> float:
            async with httpx.AsyncClient(base_url=url) as client:
                metrics = parse_metrics((await client.get("/metrics")).text)
            return metrics.get("vllm:prompt_tokens_total", 0.0)

        async with engine:
            yield Case("vllm", engine, 3_000, 128, False, False, False, progress)
        return
    async with engine:
        yield Case(request.param, engine, long)


def prompt(n: int) -> list[int]:
    """``n`` random token ids every engine's vocabulary has (two prompts share a first token
    by chance only: keep them in namespaces of their own)."""
    rng = random.Random(new_rid())
    return [rng.randrange(1, 250) for _ in range(n)]


def namespace() -> str:
    """A cache namespace of this test alone: the server outlives a test, and its default
    namespace is kept for the one test that shows it shares nothing with the others."""
    return f"conformance-{new_rid()}"


async def running(case: Case, before: EngineStats) -> None:
    """Until a request started since ``before`` has cached its first prefill chunk (where the
    cache size is unknown: until the server has processed more prompt tokens than now)."""
    progress = case.progress
    base = await progress() if progress else 0.0

    async def grew() -> bool:
        if progress is not None:
            return await progress() > base
        return (await case.engine.stats()).cached_tokens > before.cached_tokens

    await until(grew, timeout_s=60, what="the request's first prefill chunk")


def delta(after: EngineStats, before: EngineStats) -> dict[str, int]:
    """How each traffic counter moved."""
    names = ("requests", "prompt_tokens", "hit_tokens", "computed_tokens", "aborted")
    return {name: getattr(after, name) - getattr(before, name) for name in names}


# --- tokens ------------------------------------------------------------------------------------

TEXTS = ["Hello, agent.", "naïve café — ✓ 日本語", "  two spaces\nand a tab\t", "x"]


async def test_encode_decode_round_trip(case: Case) -> None:
    engine = case.engine
    for text in TEXTS:
        ids = engine.encode(text)
        assert ids and all(isinstance(i, int) for i in ids)
        assert engine.decode(ids) == text
    # No special tokens: encodings of segments concatenate to the text of the whole.
    assert engine.decode([i for text in TEXTS for i in engine.encode(text)]) == "".join(TEXTS)
    assert engine.encode("") == []


# --- the prefix cache --------------------------------------------------------------------------


async def test_prefill_then_generate_reports_the_prefix_as_cached(case: Case) -> None:
    engine, ns = case.engine, namespace()
    prefix = prompt(300)
    warm = await engine.prefill(prefix, namespace=ns)
    assert warm.status is PrefillStatus.DONE and warm.done and warm.rid
    assert (warm.prompt_tokens, warm.cached_tokens, warm.computed_tokens) == (300, 0, 300)
    again = await engine.prefill(prefix, namespace=ns)
    assert (again.cached_tokens, again.computed_tokens) == (case.again(300), 300 - case.again(300))

    out = await engine.generate([*prefix, *prompt(20)], max_tokens=4, namespace=ns)
    hit = case.hit(300)
    assert (out.prompt_tokens, out.cached_tokens, out.computed_tokens) == (320, hit, 320 - hit)
    assert 1 <= len(out.token_ids) <= 4 and out.finish_reason in ("length", "stop")
    assert out.text == engine.decode(out.token_ids)
    assert 0 < out.ttft_s <= out.e2e_s
    # The prompt exactly as cached: its last token is computed again (its logits start the
    # output), as in SGLang.
    same = await engine.generate(prefix, max_tokens=1, namespace=ns)
    assert (same.cached_tokens, same.computed_tokens) == (case.hit(299), 300 - case.hit(299))


async def test_namespaces_share_no_cached_tokens(case: Case) -> None:
    engine, tenant_a, tenant_b = case.engine, namespace(), namespace()
    prefix = prompt(200)
    await engine.prefill(prefix, namespace=tenant_a)
    query = [*prefix, *prompt(5)]
    other = await engine.generate(query, max_tokens=3, namespace=tenant_b)
    assert other.cached_tokens == 0
    unsalted = await engine.prefill(prefix)  # the default namespace
    assert unsalted.cached_tokens == 0
    same = await engine.generate(query, max_tokens=3, namespace=tenant_a)
    assert same.cached_tokens == case.hit(200)
    if case.exact_with_cache:
        assert same.token_ids == other.token_ids  # the cache changes no output


# --- decoding ----------------------------------------------------------------------------------


async def test_generate_is_deterministic_for_the_same_prompt_and_seed(case: Case) -> None:
    engine, cold, warm = case.engine, namespace(), namespace()
    ids = prompt(60)
    await engine.prefill(ids[:50], namespace=warm)
    greedy = [
        await engine.generate(ids, max_tokens=8, seed=1, namespace=ns) for ns in (cold, cold, warm)
    ]
    assert greedy[0].cached_tokens == 0 and greedy[2].cached_tokens == case.hit(50)
    assert greedy[0].token_ids == greedy[1].token_ids
    if case.exact_with_cache or not greedy[2].cached_tokens:
        assert greedy[1].token_ids == greedy[2].token_ids
    sampled = [
        await engine.generate(ids, max_tokens=10, temperature=1.5, seed=seed, namespace=cold)
        for seed in (5, 5, 6)
    ]
    assert sampled[0].token_ids == sampled[1].token_ids != sampled[2].token_ids


async def test_streaming_yields_the_tokens_of_generate(case: Case) -> None:
    engine, ns = case.engine, namespace()
    ids = prompt(40)
    chunks = [chunk async for chunk in engine.generate_stream(ids, max_tokens=6, namespace=ns)]
    final = chunks[-1].completion
    assert final is not None and all(chunk.completion is None for chunk in chunks[:-1])
    assert tuple(t for chunk in chunks for t in chunk.token_ids) == final.token_ids
    assert "".join(chunk.text for chunk in chunks) == final.text
    assert final.token_ids == (await engine.generate(ids, max_tokens=6, namespace=ns)).token_ids
    assert 0 < final.ttft_s <= final.e2e_s


# --- priorities and aborts ---------------------------------------------------------------------


async def test_a_live_request_is_not_delayed_behind_queued_speculative_ones(case: Case) -> None:
    engine, ns = case.engine, namespace()
    finished: list[str] = []

    async def request(label: str, work: Awaitable[Any]) -> Any:
        result = await work
        finished.append(label)
        return result

    before = await engine.stats()
    rids = [new_rid() for _ in range(4)]
    speculative = [
        asyncio.create_task(
            request(f"spec{i}", engine.prefill(prompt(case.long), rid=rid, namespace=ns))
        )
        for i, rid in enumerate(rids)
    ]
    await running(case, before)  # one runs, the others wait behind it
    live = await request(
        "live",
        engine.generate(prompt(40), max_tokens=2, priority=Priority.LIVE, namespace=ns),
    )
    assert len(live.token_ids) >= 1
    for rid in rids:  # the test needs them no longer
        await engine.abort(rid)
    await asyncio.gather(*speculative)
    assert finished[0] == "live", finished  # first come first served would finish it last
    assert sorted(finished) == ["live", "spec0", "spec1", "spec2", "spec3"]


async def test_abort_of_a_queued_request_returns_aborted_and_frees_it(case: Case) -> None:
    engine, ns = case.engine, namespace()
    blocker_rid, rid = new_rid(), new_rid()
    before = await engine.stats()
    long_ids = prompt(case.long)
    blocker = asyncio.create_task(engine.prefill(long_ids, rid=blocker_rid, namespace=ns))
    await running(case, before)
    ids = prompt(100)
    ids[0] = 1 + long_ids[0] % 249  # another first token: nothing of it is cached by the blocker
    queued = asyncio.create_task(engine.prefill(ids, rid=rid, namespace=ns))
    await asyncio.sleep(0)  # its task starts: the request is submitted
    await engine.abort(rid)
    result = await queued
    assert result.status is PrefillStatus.ABORTED and not result.done
    assert (result.rid, result.cached_tokens, result.computed_tokens) == (rid, 0, 0)
    await engine.abort(blocker_rid)
    blocked = (await blocker).status is PrefillStatus.ABORTED
    assert delta(await engine.stats(), before)["aborted"] == 1 + blocked
    # Freed: the rid is no longer in flight, and nothing of the prompt was cached.
    again = await engine.prefill(ids, rid=rid, namespace=ns)
    assert (again.status, again.cached_tokens, again.computed_tokens) == (
        PrefillStatus.DONE,
        0,
        100,
    )
    await engine.abort("no-such-request")  # unknown rids are ignored


async def test_abort_of_a_running_prefill_keeps_its_computed_chunks(case: Case) -> None:
    if case.name == "vllm":
        pytest.skip(
            "a vLLM chunk's end shows only in the server's /metrics: "
            "tests/vllm/test_speculation.py::test_an_abort_stops_a_chunked_prefill_and_keeps_its_chunks"
        )
    engine, ns = case.engine, namespace()
    ids, rid = prompt(case.long), new_rid()
    before = await engine.stats()
    task = asyncio.create_task(engine.prefill(ids, rid=rid, namespace=ns))
    await running(case, before)
    await engine.abort(rid)
    result = await task
    assert result.status is PrefillStatus.ABORTED and result.rid == rid
    assert result.cached_tokens == 0 and 0 < result.computed_tokens < len(ids)
    kept = result.computed_tokens
    # An aborted request counts the prompt tokens it processed.
    assert delta(await engine.stats(), before) == {
        "requests": 1,
        "prompt_tokens": kept,
        "hit_tokens": 0,
        "computed_tokens": kept,
        "aborted": 1,
    }
    again = await engine.prefill(ids[: kept + 10], rid=rid, namespace=ns)
    assert (again.status, again.cached_tokens, again.computed_tokens) == (
        PrefillStatus.DONE,
        kept,
        10,
    )


async def test_abort_of_a_running_generate_raises_request_aborted(case: Case) -> None:
    engine, rid, ns = case.engine, new_rid(), namespace()
    before = await engine.stats()
    stream = engine.generate_stream(prompt(40), max_tokens=2_000, rid=rid, namespace=ns)
    received = len((await anext(stream)).token_ids)
    await engine.abort(rid)
    with pytest.raises(RequestAborted):
        async for chunk in stream:
            received += len(chunk.token_ids)
    assert 1 <= received < 2_000
    assert delta(await engine.stats(), before)["aborted"] == 1
    follow_up = await engine.generate(prompt(10), max_tokens=1, rid=rid, namespace=ns)  # freed
    assert follow_up.prompt_tokens == 10


# --- stats -------------------------------------------------------------------------------------


async def test_stats_count_requests_prompts_hits_and_cache(case: Case) -> None:
    engine, ns = case.engine, namespace()
    ids = prompt(150)
    s0 = await engine.stats()
    await engine.prefill(ids[:120], namespace=ns)
    s1 = await engine.stats()
    assert delta(s1, s0) == {
        "requests": 1,
        "prompt_tokens": 120,
        "hit_tokens": 0,
        "computed_tokens": 120,
        "aborted": 0,
    }
    if case.cache_size:
        assert s1.cached_tokens - s0.cached_tokens == 120
    assert s1.evicted_tokens == s0.evicted_tokens
    assert s1.capacity_tokens is None or s1.cached_tokens <= s1.capacity_tokens
    await engine.generate(ids, max_tokens=2, namespace=ns)
    assert delta(await engine.stats(), s1) == {
        "requests": 1,
        "prompt_tokens": 150,
        "hit_tokens": case.hit(120),
        "computed_tokens": 150 - case.hit(120),
        "aborted": 0,
    }


# --- errors and closing ------------------------------------------------------------------------

A = 65  # a byte id every engine's vocabulary has


async def test_a_request_over_the_context_is_refused_before_any_work(case: Case) -> None:
    from agentwarm.engines.local.model import PRESET_CONTEXT

    engine = case.engine
    # The fake engine's context (also behind the server), or the built-in presets'.
    limit = PRESET_CONTEXT if case.name == "local" else DEFAULT_MAX_CONTEXT
    over = (
        f"prompt of {limit + 1} tokens exceeds the model context of {limit} tokens; shorten the "
        "prompt (system, tools, transcript) or use a longer-context model"
    )
    past = (
        f"prompt of {limit - 2} tokens + max_tokens 10 exceeds the model context of {limit} "
        "tokens; lower max_tokens to at most 2 or shorten the prompt"
    )
    before = await engine.stats()
    # An over-long prompt's error states the request's max_tokens; through SGLang's wire the
    # message does not carry it (the client reports 0).
    over_max = 0 if case.name == "serve" else 1
    refused: list[tuple[InvalidRequest, tuple[int, int]]] = []
    for send, message, lengths in [
        (lambda: engine.generate([A] * (limit + 1), max_tokens=1), over, (limit + 1, over_max)),
        (lambda: engine.prefill([A] * (limit + 1)), over, (limit + 1, 0)),
        (lambda: engine.generate([A] * (limit - 2), max_tokens=10), past, (limit - 2, 10)),
    ]:
        with pytest.raises(InvalidRequest) as info:
            await send()
        assert message in str(info.value)
        refused.append((info.value, lengths))
    assert delta(await engine.stats(), before)["requests"] == 0
    for error, (prompt_tokens, max_tokens) in refused:
        assert isinstance(error, ContextLengthExceeded)
        assert (error.prompt_tokens, error.limit) == (prompt_tokens, limit)
        assert error.max_tokens == max_tokens


async def test_aclose_is_idempotent_and_final(case: Case) -> None:
    engine, ns = case.engine, namespace()
    await engine.prefill(prompt(20), namespace=ns)
    await engine.aclose()
    await engine.aclose()
    with pytest.raises(EngineUnavailable):
        await engine.prefill(prompt(20), namespace=ns)
    with pytest.raises(EngineUnavailable):
        await engine.generate(prompt(20), max_tokens=1, namespace=ns)
