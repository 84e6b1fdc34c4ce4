"""The runtime's guardrail scores a run's step as the gateway's scores a session's (issue 27):
on what the step sent speculatively and what the policy's own limits would have chosen but a
cautious or paused guardrail held back (so a tightened guardrail is not judged by its own
narrower choice), with the probability that choice promised (``CalibratedGuardrail``: the
choice by value refuses unlikely candidates on purpose, so its hits are compared with the
mass it took, not with 1). Real runs on :class:`FakeEngine`; the scores are read where the
prefetcher hands them to the guardrail."""

from __future__ import annotations

from typing import Any

import pytest

from agentwarm import END, FakeEngine, PrefetchPolicy
from agentwarm.runtime.guardrail import CalibratedGuardrail, Guardrail, Level
from agentwarm.runtime.session import WorkflowSession
from tests.runtime import spend_workflow as sw
from tests.runtime.spend_workflow import FixedPredictor
from tests.runtime.test_midstream_hints import ScriptedEngine, make_support, reply_for_triage
from tests.runtime.test_miss_reasons import _run, _workflow
from tests.runtime.test_spend_fill import settled

#: b and c each worth a prefetch at the idle price; the run goes to c.
RANKING = [("b", 0.5), ("c", 0.35), ("d", 0.05), ("e", 0.05)]


def _recording(session: WorkflowSession) -> list[tuple[bool, float]]:
    """The ``(hit, promised)`` of every step the session's guardrail is asked to score."""
    scored: list[tuple[bool, float]] = []
    observe = session.guardrail.observe

    def record(hit: bool, policy: PrefetchPolicy, promised: float = 1.0) -> Any:
        scored.append((hit, round(promised, 6)))
        return observe(hit, policy, promised=promised)

    session.guardrail.observe = record  # type: ignore[method-assign]
    return scored


def _session(level: Level = Level.NORMAL, ranking: Any = RANKING) -> WorkflowSession:
    session = _workflow().session(predictor=FixedPredictor(ranking))
    session.guardrail.level = level
    return session


def test_the_session_guardrail_is_calibrated() -> None:
    assert isinstance(_session().guardrail, CalibratedGuardrail)


async def test_normal_scores_what_was_sent_against_its_mass() -> None:
    session = _session()
    scored = _recording(session)
    result = await _run("c", session=session)
    sent = [p.target for p in result.steps[0].prefetches if p.speculative]
    assert sent == ["b", "c"]  # d and e priced out (p 0.05 < 0.1 / 1.1)
    assert scored == [(True, 0.85)]


@pytest.mark.parametrize("level", [Level.CAUTIOUS, Level.PAUSED])
async def test_what_a_tightened_guardrail_held_back_is_scored_as_chosen(level: Level) -> None:
    session = _session(level)
    scored = _recording(session)
    result = await _run("c", session=session)
    sent = [p.target for p in result.steps[0].prefetches if p.speculative]
    assert sent == (["b"] if level is Level.CAUTIOUS else [])  # cautious: top-1 with p >= 0.3
    assert result.steps[1].miss is not None and result.steps[1].miss.reason == "guardrail"
    # c was held back, not refused by the policy: the step is a branch hit of b and c's mass.
    assert scored == [(True, 0.85)]


async def test_a_miss_of_everything_the_policy_would_send_is_scored_a_miss() -> None:
    session = _session(Level.CAUTIOUS)
    scored = _recording(session)
    await _run("d", session=session)  # priced out at any level: no credit for it
    assert scored == [(False, 0.85)]


async def test_a_cautious_guardrail_whose_second_candidate_keeps_hitting_recovers() -> None:
    """Scored on its own top-1 alone (b, never the next), a cautious guardrail could only fall
    to paused; scored on what the policy would have sent, it climbs back to normal."""
    session = _session(Level.CAUTIOUS)
    session.guardrail.ewma = 0.6  # just under the 0.7 threshold
    levels = []
    engine = FakeEngine(seconds_per_token=1e-6, seconds_per_output_token=1e-5)
    try:
        for _ in range(6):
            result = await session.run("c", engine=engine, policy=PrefetchPolicy())
            assert [s.node for s in result.steps] == ["a", "c"]
            levels.append(session.guardrail.level)
    finally:
        await engine.aclose()
    assert Level.PAUSED not in levels
    assert levels[-1] is Level.NORMAL
    # Back at normal, c is sent again: the step is a hit of its own prefetch.
    assert [p.target for p in result.steps[0].prefetches if p.speculative] == ["b", "c"]
    assert result.steps[1].miss is None


async def test_a_target_the_step_budget_stopped_is_scored_as_chosen() -> None:
    session = _session()
    scored = _recording(session)
    result = await _run("c", session=session, max_prefetch_tokens=2500)  # b's ~2,000 fit
    assert [p.target for p in result.steps[0].prefetches if p.speculative] == ["b"]
    miss = result.steps[1].miss
    assert miss is not None and (miss.reason, miss.cause) == ("dropped", "step_budget")
    assert scored == [(True, 0.85)]  # the prediction is judged, not the step's room


async def test_the_promised_mass_is_that_of_a_step_that_goes_somewhere() -> None:
    # Steps that go only to END are not scored: b and c's 0.5 is out of the 0.55 left by END.
    ranking = [("b", 0.3), ("c", 0.2), ("d", 0.05), (END, 0.45)]
    session = _session(ranking=ranking)
    scored = _recording(session)
    await _run("c", session=session)
    assert scored == [(True, round(0.5 / 0.55, 6))]


async def test_what_a_fill_sent_is_in_the_promised_mass() -> None:
    second = [("c", 0.6), ("b", 0.3), ("d", 0.05), ("e", 0.05)]  # b past the window
    session = sw.session(settled, second)
    sw.teach_window(session, 1000.0)
    scored = _recording(session)
    result = await sw.run(session)
    filled = {p.target: p.filled for p in result.steps[0].prefetches if p.speculative}
    assert filled == {"c": False, "b": True}
    assert scored == [(True, 0.9)]  # c's 0.6 and the filled b's 0.3


async def test_a_plain_guardrail_set_on_a_session_still_learns() -> None:
    session = _session()
    session.guardrail = Guardrail()
    await _run("d", session=session)  # priced out: a miss of what the policy chose
    assert session.guardrail.observations == 1
    assert session.guardrail.ewma == 0.9  # 1 - 0.1 * (1 - 0)


class _FromTriage(FixedPredictor):
    def predict(self, path: Any, state: Any, *, candidates: Any) -> list[tuple[str, float]]:
        return list(self.ranking) if path[-1] == "triage" else [(END, 1.0)]


async def test_a_target_a_mid_decode_hint_sent_counts_in_the_promised_mass() -> None:
    # refunds is sent at the step's start; lookup (p 0.05) is priced out, then named by the
    # reply's tool call as it streams and sent (rank -1): both are scored, 0.65 of the 0.65
    # left by END (without the hint's: 0.6 / 0.65).
    ranking = [("refunds", 0.6), ("lookup", 0.05), (END, 0.35)]
    session = make_support().compile().session(predictor=_FromTriage(ranking))
    scored = _recording(session)
    engine = ScriptedEngine(reply_for_triage)
    try:
        result = await session.run("where is order 4471?", engine=engine)
    finally:
        await engine.aclose()
    sent = {p.target: p.rank for p in result.steps[0].prefetches if p.speculative}
    assert sent == {"refunds": 0, "lookup": -1}
    assert result.steps[1].node == "lookup"
    assert scored == [(True, 1.0)]
