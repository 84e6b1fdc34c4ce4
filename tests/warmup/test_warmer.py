"""The static warm-up (:mod:`agentwarm.warmup.warmer`) on real engines: the embedded engine on
the ``tiny`` preset (a warmed prefix is what the next live request finds cached, token for
token), the budget rule, a failing worker next to a healthy one, cancellation and spans."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from functools import cache
from typing import Any

import pytest
from opentelemetry.trace import StatusCode

import agentwarm
from agentwarm import telemetry as tm
from agentwarm._spec import PrefetchKind
from agentwarm.engines.base import EngineStats
from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.sglang import SGLangEngine
from agentwarm.errors import ConfigError, EngineUnavailable
from agentwarm.warmup import Plan, WarmPrefix
from agentwarm.warmup.warmer import Warmer, WarmSummary, budget_for, warm_workers
from tests.conftest_server import free_port
from tests.waiting import until
from tests.warmup.gate_engine import GateEngine

MESSAGES = (
    {"role": "system", "content": "You are the airline's booking agent. Be brief and exact."},
    {"role": "user", "content": "I need to change my flight to Boston."},
)


@cache
def _tiny() -> Any:
    """The ``tiny`` preset's weights, loaded once (torch is imported only when needed)."""
    from agentwarm.engines.local.model import load_model

    return load_model("tiny", seed=0)


def _local(**kwargs: Any) -> Any:
    from agentwarm.engines.local import LocalEngine

    return LocalEngine(_tiny(), chunk_size=64, **kwargs)


@pytest.fixture
async def local() -> AsyncIterator[Any]:
    async with _local() as engine:
        yield engine


def ids(start: int, n: int) -> tuple[int, ...]:
    return tuple(range(start, start + n))


async def test_a_warmed_prefix_is_cached_for_the_first_live_request(local: Any) -> None:
    plan = Plan((WarmPrefix(messages=MESSAGES, node="book"), WarmPrefix(input_ids=ids(1000, 90))))
    warmer = Warmer(local)
    chat = warmer.ids_of(plan.prefixes[0])
    assert chat and chat == warmer.ids_of(plan.prefixes[0])  # rendered once, memoized

    summary = await warmer.warm(plan)

    assert summary.to_dict() | {"seconds": 0} == {
        "worker": "local",
        "kind": "static",
        "prefixes": 2,
        "skipped": 0,
        "tokens": len(chat) + 90,
        "computed_tokens": len(chat) + 90,
        "prompt_tokens": len(chat) + 90,
        "cached_tokens": 0,
        "seconds": 0,
        "budget_tokens": (await local.stats()).capacity_tokens // 2,
        "error": None,
    }
    live = await local.generate([*chat, 7, 8, 9], max_tokens=1)
    assert live.cached_tokens == len(chat)
    live = await local.generate([*ids(1000, 90), 7, 8, 9], max_tokens=1)
    assert live.cached_tokens == 90

    again = await warmer.warm(plan)  # still cached: nothing to compute
    assert (again.prefixes, again.tokens, again.computed_tokens) == (2, len(chat) + 90, 0)


async def test_the_budget_skips_the_prefix_that_does_not_fit() -> None:
    a = ids(1000, 60)
    b = a[:40] + ids(2000, 30)  # shares 40 tokens with a: costs 30
    c = ids(3000, 20)  # 60 + 30 + 20 > 100: skipped
    d = ids(4000, 10)  # 60 + 30 + 10 = 100: fits
    plan = Plan(tuple(WarmPrefix(input_ids=x) for x in (a, b, c, d)))
    async with _local(max_cached_tokens=200) as engine:
        summary = await Warmer(engine).warm(plan, budget_fraction=0.5)
        assert (summary.budget_tokens, summary.prefixes, summary.skipped) == (100, 3, 1)
        assert (summary.tokens, summary.computed_tokens) == (100, 100)
        assert (await engine.generate([*c, 7], max_tokens=1)).cached_tokens == 0
        assert (await engine.generate([*d, 7], max_tokens=1)).cached_tokens == 10
        assert (await engine.generate([*b, 7], max_tokens=1)).cached_tokens == 70

        # An explicit budget wins over the fraction; a first prefix over it is skipped too.
        small = await Warmer(engine).warm(plan, budget_tokens=15, budget_fraction=0.5)
        assert (small.budget_tokens, small.prefixes, small.skipped, small.tokens) == (15, 1, 3, 10)


async def test_a_prefix_is_warmed_in_its_own_namespace() -> None:
    """A plan line's ``namespace`` (a tenant's cache salt) is where it is warmed; tokens of two
    namespaces are two caches, so the budget counts them twice."""
    a = ids(1000, 40)
    plan = Plan((WarmPrefix(input_ids=a, namespace="tenant-a"), WarmPrefix(input_ids=a[:30])))
    assert WarmPrefix.from_json(plan.prefixes[0].to_json()) == plan.prefixes[0]
    async with _local() as engine:
        summary = await Warmer(engine, namespace="default").warm(plan, budget_tokens=70)
        assert (summary.prefixes, summary.tokens, summary.computed_tokens) == (2, 70, 70)
        live = await engine.generate([*a, 7], max_tokens=1, namespace="tenant-a")
        assert live.cached_tokens == 40
        other = await engine.generate([*a, 7], max_tokens=1, namespace="default")
        assert other.cached_tokens == 30
    with pytest.raises(ValueError, match="'namespace' must be a string"):
        WarmPrefix.from_json({"input_ids": [1], "namespace": 3})


async def test_warmed_prefixes_are_pinned_for_pin_ttl_s() -> None:
    older, newer = ids(1000, 30), ids(2000, 30)
    async with _local(max_cached_tokens=100) as engine:
        warmer = Warmer(engine)
        pinned = await warmer.warm(Plan((WarmPrefix(input_ids=older),)), pin_ttl_s=600.0)
        unpinned = await warmer.warm(Plan((WarmPrefix(input_ids=newer),)), pin_ttl_s=0.0)
        assert (pinned.prefixes, unpinned.prefixes) == (1, 1)
        # 60 cached + 51 more: 11 must go; the older prefix is pinned, so the newer one goes
        await engine.generate(list(ids(3000, 50)), max_tokens=1)
        assert (await engine.stats()).evicted_tokens > 0
        assert (await engine.generate([*older, 7], max_tokens=1)).cached_tokens == 30
        assert (await engine.generate([*newer, 7], max_tokens=1)).cached_tokens < 30


def test_budget_for_is_a_fraction_of_the_capacity() -> None:
    stats = EngineStats(
        cached_tokens=0,
        capacity_tokens=1001,
        evicted_tokens=0,
        hit_tokens=0,
        prompt_tokens=0,
        computed_tokens=0,
        requests=0,
        aborted=0,
    )
    assert budget_for(stats, 0.5) == 500
    assert budget_for(stats, 1.0) == 1001
    assert budget_for(dataclasses.replace(stats, capacity_tokens=None), 0.5) is None
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ConfigError, match="--budget-fraction"):
            budget_for(stats, bad)
    # A lower tier takes what the warm-up evicts: the whole device cache; a tier that turned
    # itself off (False) or none (None): the fraction again.
    assert budget_for(dataclasses.replace(stats, tier_enabled=True), 0.5) == 1001
    assert budget_for(dataclasses.replace(stats, tier_enabled=False), 0.5) == 500


async def test_a_failing_worker_is_reported_and_the_others_are_warmed(local: Any) -> None:
    dead_url = f"http://127.0.0.1:{free_port()}"
    plan = Plan((WarmPrefix(input_ids=ids(1000, 50)),))
    seen: list[tuple[str, int]] = []
    async with SGLangEngine(dead_url, tokenizer="byte", connect_timeout=2.0) as dead:
        summaries = await warm_workers(
            plan,
            {dead_url: dead, "local": local},
            on_prefix=lambda s: seen.append((s.worker, s.prefixes)),
        )
    assert [s.worker for s in summaries] == [dead_url, "local"]
    failed, warmed = summaries
    assert failed.error is not None and failed.error.startswith("EngineUnavailable")
    assert (failed.prefixes, failed.tokens) == (0, 0)
    assert (warmed.error, warmed.prefixes, warmed.tokens) == (None, 1, 50)
    assert seen == [("local", 1)]
    assert (await local.generate([*ids(1000, 50), 7], max_tokens=1)).cached_tokens == 50


async def test_cancelling_a_warm_up_aborts_the_prefill_in_flight() -> None:
    # 4,000 tokens at 1 ms each: running for seconds, in 64-token chunks.
    engine = FakeEngine(seconds_per_token=1e-3, chunk_size=64)
    async with engine:
        plan = Plan((WarmPrefix(input_ids=ids(1, 4000)), WarmPrefix(input_ids=ids(5000, 10))))
        with tm.capture_spans() as exporter:
            task = asyncio.create_task(Warmer(engine).warm(plan))

            async def running() -> bool:
                return (await engine.stats()).cached_tokens > 0

            await until(running, what="the warm-up prefill to start")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

            async def aborted() -> bool:
                return (await engine.stats()).aborted == 1

            await until(aborted, what="the prefill to be aborted")
        assert [entry.status for entry in engine.log] == ["aborted"]
        assert list(engine.aborts) == [engine.log[0].rid]
        assert engine.log[0].computed_tokens < 4000  # stopped part-way; the second never sent
        spans = [s for s in exporter.get_finished_spans() if s.name == tm.SPAN_PREFILL]
        assert [(s.attributes or {}).get(tm.AW_PREFILL_OUTCOME) for s in spans] == ["cancelled"]


async def test_every_prefix_is_one_prefill_span_of_its_kind(local: Any) -> None:
    plan = Plan(
        (
            WarmPrefix(messages=MESSAGES, node="book"),
            WarmPrefix(input_ids=ids(1000, 500)),  # over the budget: dropped
            WarmPrefix(input_ids=ids(2000, 30)),
        )
    )
    with tm.capture_spans() as exporter:
        warmer = Warmer(local)
        chat = len(warmer.ids_of(plan.prefixes[0]))
        summary = await warmer.warm(plan, kind=PrefetchKind.KEEP_WARM, budget_tokens=chat + 30)
    assert isinstance(summary, WarmSummary) and summary.kind is PrefetchKind.KEEP_WARM
    spans = [s for s in exporter.get_finished_spans() if s.name == tm.SPAN_PREFILL]
    got = [{k: v for k, v in (s.attributes or {}).items() if k != tm.AW_RUN_ID} for s in spans]
    common = {
        tm.AW_WORKFLOW: "warmup",
        tm.AW_PREFILL_SOURCE: "warmup",
        tm.AW_PREFILL_KIND: "keep_warm",
    }
    assert got == [
        common
        | {
            tm.AW_PREFILL_TARGET: "book",
            tm.AW_PREFILL_TOKENS: chat,
            tm.AW_PREFILL_OUTCOME: "hit",
            tm.AW_PREFILL_COMPUTED_TOKENS: chat,
        },
        common
        | {
            tm.AW_PREFILL_TARGET: "prefix-1",
            tm.AW_PREFILL_TOKENS: 500,
            tm.AW_PREFILL_OUTCOME: "dropped",
            tm.AW_PREFILL_COMPUTED_TOKENS: 0,
        },
        common
        | {
            tm.AW_PREFILL_TARGET: "prefix-2",
            tm.AW_PREFILL_TOKENS: 30,
            tm.AW_PREFILL_OUTCOME: "hit",
            tm.AW_PREFILL_COMPUTED_TOKENS: 30,
        },
    ]
    run_ids = {(s.attributes or {})[tm.AW_RUN_ID] for s in spans}
    assert len(run_ids) == 1 and str(next(iter(run_ids))).startswith("warmup.")


async def test_a_warm_up_span_is_ended_as_an_explicit_warms_is() -> None:
    """One way to end a warm-up prefill span (``traced_prefill``): a failed prefill's span says
    ``failed``, with the error recorded, as an explicit warm's does."""
    plan = Plan((WarmPrefix(input_ids=(1, 2, 3)),))
    with tm.capture_spans() as exporter:
        summary = await Warmer(GateEngine(fail=True)).warm(plan, budget_fraction=None)
        with pytest.raises(EngineUnavailable):
            await agentwarm.warm(GateEngine(fail=True), ids=[1, 2, 3])
    assert summary.error == "EngineUnavailable: the test engine is down"
    warm_up, explicit = exporter.get_finished_spans()
    for span in (warm_up, explicit):
        attrs = span.attributes or {}
        assert (attrs[tm.AW_PREFILL_OUTCOME], attrs[tm.AW_PREFILL_COMPUTED_TOKENS]) == ("failed", 0)
        assert span.status.status_code is StatusCode.ERROR
        assert [e.name for e in span.events] == ["exception"]
    assert set(warm_up.attributes or {}) == set(explicit.attributes or {})
    assert (warm_up.attributes or {})[tm.AW_PREFILL_SOURCE] == "warmup"
