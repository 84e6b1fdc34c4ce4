"""Every miss has a reason (issue 27 §1): each test forces one :class:`MissReason` in a run on
:class:`FakeEngine` and checks the reason and its details where the decision was made, on the
step's record, its span attributes and the run's summary; the reasons add up to the misses plus
the short hits."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm._spec import MISS_REASONS, Miss, MissReason
from agentwarm.chat import ChatTemplate
from agentwarm.engines.base import PrefillParams, PrefillResult, Priority
from agentwarm.runtime.guardrail import Guardrail, Level
from agentwarm.runtime.prefetch.misses import judged_choice
from agentwarm.runtime.result import RunResult
from agentwarm.runtime.session import WorkflowSession
from agentwarm.stats.definitions import reasons_add_up
from agentwarm.telemetry import miss_attributes
from tests.runtime.spend_workflow import LEAVES, PREDICTED, FixedPredictor, leaf
from tests.waiting import step_prefetches_done

_Fixed = FixedPredictor


def _workflow(*, a_calls_llm: bool = True, wait: bool = True) -> Any:
    """a (its LLM call, then, with ``wait``, a tool call that outlasts its prefetches) goes to
    the leaf its input names; each leaf has a long system prompt and one LLM call."""

    @node(name="a", entry=True, system="A" * 200, next=list(LEAVES))
    async def a(ctx: Context) -> str:
        if a_calls_llm:
            await ctx.llm("route: " + ctx.input, max_tokens=4)
        if wait:
            await step_prefetches_done(ctx)
        return ctx.input

    return WorkflowGraph("misses").add(a, *(leaf(n) for n in LEAVES)).compile()


async def _run(
    to: str,
    *,
    session: WorkflowSession | None = None,
    engine: FakeEngine | None = None,
    **policy: Any,
) -> RunResult:
    session = session or _workflow().session(predictor=_Fixed())
    engine = engine or FakeEngine(seconds_per_token=1e-6, seconds_per_output_token=1e-5)
    try:
        result = await session.run(to, engine=engine, policy=PrefetchPolicy(**policy))
    finally:
        await engine.aclose()
    assert [s.node for s in result.steps] == ["a", to]
    assert reasons_add_up(result.steps)
    return result


def _miss(result: RunResult) -> Miss | None:
    first, second = result.steps
    assert first.miss is None  # a run's first step has no reason
    return second.miss


async def test_not_predicted_below_the_candidates_considered() -> None:
    result = await _run("c", top_n=1)  # b takes the only slot: c is not considered
    assert _miss(result) == Miss(MissReason.NOT_PREDICTED, cause="below", p=0.3, rank=1)
    summary = result.summary()
    assert summary["miss_reasons"]["not_predicted"] == 1
    assert summary["short_hits"] == 0


async def test_not_predicted_when_the_predictor_never_ranked_it() -> None:
    session = _workflow().session(predictor=_Fixed([("b", 0.7), ("c", 0.3)]))
    result = await _run("e", session=session)
    assert _miss(result) == Miss(MissReason.NOT_PREDICTED, cause="unranked")


async def test_priced_out_records_its_probability_and_price() -> None:
    # Nothing observed yet: every token idle at 0.1, so d (p 0.05 < 0.1 / 1.1) is refused.
    result = await _run("d")
    assert _miss(result) == Miss(MissReason.PRICED_OUT, p=0.05, price=0.1, rank=2)
    assert miss_attributes(_miss(result)) == {
        "agentwarm.step.miss.reason": "priced_out",
        "agentwarm.step.miss.p": 0.05,
        "agentwarm.step.miss.price": 0.1,
        "agentwarm.step.miss.rank": 2,
    }


async def test_dropped_by_the_admission_rate() -> None:
    result = await _run("c", max_prefills_per_s=1.0)  # a burst of one: b takes it
    assert _miss(result) == Miss(MissReason.DROPPED, cause="rate", p=0.3, rank=1)
    c = next(p for p in result.steps[0].prefetches if p.target == "c")
    assert (c.outcome, c.refused) == ("dropped", "rate")


async def test_dropped_by_the_in_flight_budget() -> None:
    result = await _run("c", max_speculative_in_flight=1)  # b holds the slot, worth more
    assert _miss(result) == Miss(MissReason.DROPPED, cause="in_flight", p=0.3, rank=1)


async def test_dropped_by_the_step_budget() -> None:
    result = await _run("b", max_prefetch_tokens=500)  # b's prefix is over 2000 tokens
    assert _miss(result) == Miss(MissReason.DROPPED, cause="step_budget", p=0.6, rank=0)


async def test_guardrail_paused() -> None:
    session = _workflow().session(predictor=_Fixed())
    session.guardrail.level = Level.PAUSED
    result = await _run("b", session=session)
    assert _miss(result) == Miss(MissReason.GUARDRAIL, cause="paused", p=0.6, rank=0)
    assert not any(p.speculative for p in result.steps[0].prefetches)  # nothing speculated


async def test_a_paused_step_still_says_what_the_normal_limits_would_have_refused() -> None:
    session = _workflow().session(predictor=_Fixed())
    session.guardrail.level = Level.PAUSED
    result = await _run("d", session=session)
    assert _miss(result) == Miss(MissReason.PRICED_OUT, p=0.05, price=0.1, rank=2)


async def test_guardrail_cautious() -> None:
    session = _workflow().session(predictor=_Fixed())
    session.guardrail.level = Level.CAUTIOUS  # one candidate: b; the normal limits send c too
    result = await _run("c", session=session)
    assert _miss(result) == Miss(MissReason.GUARDRAIL, cause="cautious", p=0.3, rank=1)


class _FailingPrefills(FakeEngine):
    """A FakeEngine whose speculative prefills fail (the engine's error, not admission's)."""

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        if params.priority < Priority.LIVE:
            raise RuntimeError("the engine failed this prefill")
        return await super().prefill_with(ids, params)


async def test_failed_by_the_engine() -> None:
    engine = _FailingPrefills(seconds_per_token=1e-6, seconds_per_output_token=1e-5)
    result = await _run("b", engine=engine)
    assert _miss(result) == Miss(MissReason.FAILED, p=0.6, rank=0)


async def test_overtaken_when_speculation_waits_for_an_llm_call_that_never_comes() -> None:
    # a has never been seen: its speculation waits for its first LLM call, which it never makes.
    session = _workflow(a_calls_llm=False, wait=False).session(predictor=_Fixed())
    result = await _run("b", session=session)
    assert _miss(result) == Miss(MissReason.OVERTAKEN)


async def test_off_when_speculation_is_off() -> None:
    result = await _run("b", enabled=False, warm_confirmed=False)
    assert _miss(result) == Miss(MissReason.OFF)
    assert result.summary()["miss_reasons"]["off"] == 1


async def test_a_hit_that_paid_in_full_has_no_reason() -> None:
    result = await _run("b")
    assert result.steps[1].prefetched
    assert _miss(result) is None
    assert result.summary()["short_hits"] == 0


async def test_late_a_hit_still_running_when_its_live_request_came() -> None:
    # 0.2 ms a token: b's 2000-token prefix takes 0.4 s; a returns as soon as it is sent.
    engine = FakeEngine(seconds_per_token=2e-4, seconds_per_output_token=1e-5)
    session = _workflow(wait=False).session(predictor=_Fixed())
    result = await _run("b", session=session, engine=engine)
    b = result.steps[1]
    assert b.prefetched
    miss = b.miss
    assert miss is not None and (miss.reason, miss.cause) == (MissReason.LATE, "running")
    sent = next(p.tokens for p in result.steps[0].prefetches if p.target == "b")
    assert miss.missing_tokens == sent - b.cached_tokens > 0
    summary = result.summary()
    assert (summary["short_hits"], summary["miss_reasons"]["late"]) == (1, 1)


async def test_late_a_hit_that_admission_stopped_for_a_likelier_prefetch() -> None:
    # One slot: c (ranked first) takes it, then b (likelier) preempts it before it is sent. The
    # step counts as a branch hit (c was prefetched), but none of c's prefix reached the cache.
    session = _workflow().session(predictor=_Fixed([("c", 0.3), ("b", 0.6)]))
    result = await _run("c", session=session, max_speculative_in_flight=1)
    c_step = result.steps[1]
    c = next(p for p in result.steps[0].prefetches if p.target == "c")
    assert c_step.prefetched and c.outcome == "cancelled"
    assert c_step.miss == Miss(
        MissReason.LATE, cause="stopped", missing_tokens=c.tokens - c_step.cached_tokens
    )


#: Renders the final assistant message with a marker the next prompt does not have (as a
#: template that shows the last turn's reasoning and strips earlier turns'): not prefix-stable.
UNSTABLE = ChatTemplate(
    "{%- for m in messages -%}<|{{ m.role }}|>{{ m.content }}"
    "{%- if m.role == 'assistant' and loop.last %}\u2603last{% endif %}\n{% endfor -%}"
    "{%- if add_generation_prompt %}<|assistant|>{% endif -%}",
    name="unstable-last-turn",
)


@pytest.mark.filterwarnings("ignore::agentwarm.chat.PrefixUnstableWarning")
async def test_prefix_mismatch_names_the_token_and_the_message_that_diverged() -> None:
    engine = FakeEngine(seconds_per_token=1e-6, seconds_per_output_token=1e-5)
    engine.chat_template = UNSTABLE
    result = await _run("b", engine=engine)
    b = result.steps[1]
    assert b.prefetched
    sent = next(p for p in result.steps[0].prefetches if p.target == "b" and p.speculative)
    # b's prefix: system, a's user text, a's reply marked as the last; the live prompt has the
    # reply unmarked, then b's text: they part where the marker starts, in a's reply.
    token = sent.tokens - len("\u2603last".encode())
    assert b.miss == Miss(
        MissReason.PREFIX_MISMATCH,
        cause="message",
        token=token,
        message=2,  # system 0, a's text 1, a's reply 2
        missing_tokens=sent.tokens - b.cached_tokens,
    )


names = st.sampled_from(["b", "c", "d", "e", END])


@given(
    ranking=st.lists(st.tuples(names, st.floats(0.0, 1.0)), unique_by=lambda t: t[0], max_size=5),
    top_n=st.integers(0, 4),
    min_p=st.floats(0.0, 1.0),
    level=st.sampled_from(list(Level)),
    spend=st.sampled_from(["value", "top_n"]),
    free=st.sampled_from([0.0, 500.0, math.inf]),
)
def test_every_ranked_target_is_chosen_or_has_one_verdict(
    ranking: list[tuple[str, float]],
    top_n: int,
    min_p: float,
    level: Level,
    spend: str,
    free: float,
) -> None:
    policy = PrefetchPolicy(top_n=max(1, top_n), min_p=min_p, spend=spend)
    guardrail = Guardrail()
    guardrail.level = level
    limits = guardrail.limits(policy)
    chosen, judged = judged_choice(
        ranking, policy=policy, limits=limits, new_tokens=lambda _: 300, free_tokens=free
    )
    taken = {name for _, name, _ in chosen}
    assert taken.isdisjoint(judged)
    assert taken | set(judged) == {name for name, _ in ranking if name != END}
    if limits.paused:
        assert not taken
    for miss in judged.values():
        assert miss.reason in MISS_REASONS
        if miss.reason is MissReason.PRICED_OUT:
            assert miss.price is not None and miss.p is not None
            assert miss.p < miss.price / (1 + miss.price)
        if miss.reason is MissReason.GUARDRAIL:
            assert level is not Level.NORMAL and miss.cause == str(level)


@pytest.mark.slow
@settings(max_examples=20, deadline=None)
@given(
    to=st.sampled_from(["b", "c", "d", "e"]),
    ranking=st.permutations(PREDICTED),
    top_n=st.integers(1, 4),
    rate=st.sampled_from([1.0, 64.0]),
    in_flight=st.sampled_from([1, 64]),
    level=st.sampled_from(list(Level)),
)
def test_in_any_run_the_reasons_add_up(
    to: str,
    ranking: list[tuple[str, float]],
    top_n: int,
    rate: float,
    in_flight: int,
    level: Level,
) -> None:
    session = _workflow().session(predictor=_Fixed(ranking))
    session.guardrail.level = level
    policy = dict(top_n=top_n, max_prefills_per_s=rate, max_speculative_in_flight=in_flight)
    result = asyncio.run(_run(to, session=session, **policy))  # asserts reasons_add_up
    second = result.steps[1]
    if second.prefetched:  # a hit pays in full, unless admission stopped it for a likelier one
        assert second.miss is None or (second.miss.reason, second.miss.cause) == (
            MissReason.LATE,
            "stopped",
        )
    else:
        assert second.miss is not None and second.miss.reason in MISS_REASONS
    s = result.summary()
    misses = s["branch_steps"] - s["branch_hits"]
    assert sum(s["miss_reasons"].values()) == misses + s["short_hits"]
