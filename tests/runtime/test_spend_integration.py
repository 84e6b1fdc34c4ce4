"""The prefetcher chooses its candidates by expected value (``PrefetchPolicy.spend="value"``,
the default; :mod:`agentwarm.runtime.prefetch.spend`): inside the idle window a candidate is sent
when ``p >= 0.1 / 1.1``, past it when ``p >= 0.5``; what a candidate costs is the tokens past
what was sent for it before (issue 15). These tests are of the first choice alone
(``fill_idle=False``); filling idle time past the window is ``test_spend_fill.py``'s."""

from __future__ import annotations

import math
from typing import Any

from agentwarm import FakeEngine, PrefetchPolicy
from agentwarm.runtime.admission import Limits, admission_for
from agentwarm.runtime.guardrail import Guardrail
from agentwarm.runtime.prefetch.spend import choose
from agentwarm.runtime.result import RunResult
from agentwarm.runtime.session import WorkflowSession
from tests.runtime import spend_workflow as sw
from tests.runtime.spend_workflow import LEAVES, PREDICTED, SYSTEM_CHARS

_session = sw.session
_sent = sw.sent
_window = sw.teach_window


async def _run(session: WorkflowSession, text: str = "x", **policy: Any) -> RunResult:
    return await sw.run(session, text, **{"fill_idle": False, **policy})


async def test_value_sends_what_is_worth_it_in_an_infinite_idle_window_top_n_sends_all() -> None:
    value = await _run(_session())
    # Nothing observed yet: every token idle, sent iff p >= 0.1 / 1.1 (0.0909).
    assert _sent(value) == ["b", "c"]
    assert [p.target for p in value.steps[0].prefetches] == ["b", "c"]  # d, e not even started
    top_n = await _run(_session(), spend="top_n")
    assert _sent(top_n) == ["b", "c", "d", "e"]


async def test_a_candidate_that_does_not_fit_the_window_is_sent_only_when_likely() -> None:
    session = _session()
    _window(session, 1000.0)  # about half of b's prefix
    result = await _run(session)
    b = next(p for p in result.steps[0].prefetches if p.target == "b")
    assert b.tokens > SYSTEM_CHARS > 1000
    # b: 1000 idle + the rest busy (price ~0.55, threshold ~0.355 <= 0.6): sent. c: past the
    # window (price 1, threshold 0.5 > 0.3): not sent.
    assert _sent(result) == ["b"]
    # A window holding both b and c: both sent.
    roomy = _session()
    _window(roomy, 3 * b.tokens)
    assert _sent(await _run(roomy)) == ["b", "c"]


async def test_a_prefix_sent_before_costs_only_its_new_tokens() -> None:
    session = _session()
    first = await _run(session, "first question")
    assert _sent(first) == ["b", "c"]
    _window(session, 1000.0)
    # Another run: b's and c's prefixes share their system prompts with what was sent for them
    # (the session's SentPrefixes, namespace "" + node), only the new conversation is new: c
    # fits in the window too.
    second = await _run(session, "second question, a little longer")
    assert _sent(second) == ["b", "c"]
    tokens = {p.target: p.tokens for p in second.steps[0].prefetches}
    assert tokens["c"] > SYSTEM_CHARS > 1000  # its whole prefix would not have fitted
    # A session that sent nothing before, same window: c does not fit.
    fresh = _session()
    _window(fresh, 1000.0)
    assert _sent(await _run(fresh, "second question, a little longer")) == ["b"]
    # Another namespace keeps its own: there, c's prefix was never sent.
    engine = FakeEngine(seconds_per_token=1e-6, seconds_per_output_token=1e-5)
    policy = PrefetchPolicy(warm_confirmed=False, fill_idle=False)
    tenant = await session.run("second question", engine=engine, policy=policy, namespace="t2")
    assert _sent(tenant) == ["b"]


async def test_a_run_teaches_the_session_its_throughput_and_idle_time() -> None:
    session = _session()
    assert session.spend.throughput_tok_s == math.inf
    assert session.spend.idle_s("a") == math.inf
    result = await _run(session)
    # b's and c's prefills (computed on FakeEngine) gave a throughput; a's speculation was
    # followed by b's live call: a finite idle time.
    assert 0 < session.spend.throughput_tok_s < math.inf
    assert 0 <= session.spend.idle_s("a") < math.inf
    assert session.spend.idle_s("b") == math.inf  # b's step chose END: nothing speculated
    assert result.path == ["a", "b"]


async def test_speculative_tokens_in_flight_on_the_engine_shrink_the_window() -> None:
    roomy = _session()
    _window(roomy, 5000.0)  # b and c (about 2000 tokens each) fit
    assert _sent(await _run(roomy)) == ["b", "c"]
    session = _session()  # nothing sent before
    engine = FakeEngine(seconds_per_token=1e-6, seconds_per_output_token=1e-5)
    admission = admission_for(engine)
    held = admission.try_acquire(value=1.0, tokens=4000, limits=Limits())  # another run's
    assert held is not None and admission.tokens_in_flight == 4000
    _window(session, 5000.0)
    policy = PrefetchPolicy(warm_confirmed=False, fill_idle=False)
    result = await session.run("x", engine=engine, policy=policy)
    assert _sent(result) == ["b"]  # 1000 tokens left: as in a window of 1000
    admission.release(held)
    assert admission.tokens_in_flight == 0


def test_without_throughput_or_idle_time_the_choice_prices_every_token_idle() -> None:
    # The gateway's call: no token counts, no window known.
    policy = PrefetchPolicy()
    limits = Guardrail().limits(policy)
    assert [n for _, n, _ in choose(PREDICTED, policy=policy, limits=limits)] == ["b", "c"]
    top_n = policy.model_copy(update={"spend": "top_n"})
    assert [n for _, n, _ in choose(PREDICTED, policy=top_n, limits=limits)] == list(LEAVES)
