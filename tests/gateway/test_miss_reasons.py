"""Miss reasons through the gateway (issue 27 §1): the real ``openai`` SDK in front of a real
``agentwarm serve``, as in :mod:`tests.gateway.test_learner`; each test forces one reason on the
specialist's request and reads it on the learner's step, its stats and its trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentwarm._spec import Miss, MissReason
from agentwarm.gateway.records import Step
from agentwarm.runtime.guardrail import Level
from agentwarm.runtime.policy import PrefetchPolicy
from agentwarm.stats.definitions import reasons_add_up
from tests.conftest_server import ServeProcess
from tests.gateway.test_learner import (
    BAG_TOOL,
    BAGGAGE,
    HANDOFF,
    SUPERVISOR,
    FailingPrefills,
    Gateway,
    make_gateway,
    one_run,
    upstream_server,
)

__all__ = ("upstream_server",)  # the module's upstream, shared with test_learner's fixture


def _specialist_steps(gw: Gateway) -> list[Step]:
    learner = gw.hooks.learner
    names = {h.system[0]["content"]: h.name for h in learner.heads}
    steps = list(learner._steps)
    assert reasons_add_up(steps)
    return [s for s in steps if s.node == names[BAGGAGE]]


@pytest.mark.slow
async def test_the_first_runs_specialist_was_not_predicted_later_ones_are_hits(
    upstream_server: ServeProcess, tmp_path: Path
) -> None:
    gw = make_gateway(upstream_server.url, tmp_path)
    try:
        for run in range(3):
            await one_run(gw.client, gw.hooks, run)
        first, *later = _specialist_steps(gw)
        assert not first.prefetched
        assert first.miss == Miss(MissReason.NOT_PREDICTED, cause="unranked")
        assert all(s.prefetched and s.miss is None for s in later)
        stats = gw.hooks.stats()
        assert stats["miss_reasons"]["not_predicted"] == 1
        assert sum(stats["miss_reasons"].values()) == 1 and stats["short_hits"] == 0
    finally:
        await gw.aclose()


async def test_off_without_speculation(upstream_server: ServeProcess, tmp_path: Path) -> None:
    gw = make_gateway(upstream_server.url, tmp_path, policy=PrefetchPolicy(enabled=False))
    try:
        for run in range(2):
            await one_run(gw.client, gw.hooks, run)
        assert [s.miss for s in _specialist_steps(gw)] == [Miss(MissReason.OFF)] * 2
    finally:
        await gw.aclose()


async def test_guardrail_paused(upstream_server: ServeProcess, tmp_path: Path) -> None:
    gw = make_gateway(upstream_server.url, tmp_path)
    try:
        for run in range(2):
            await one_run(gw.client, gw.hooks, run)
        gw.hooks.learner.guardrail.level = Level.PAUSED
        gw.hooks.learner.guardrail.ewma = 0.0  # and it stays paused
        await one_run(gw.client, gw.hooks, 2)
        last = _specialist_steps(gw)[-1]
        assert last.miss is not None
        assert (last.miss.reason, last.miss.cause, last.miss.rank) == (
            MissReason.GUARDRAIL,
            "paused",
            0,
        )
    finally:
        await gw.aclose()


async def test_failed_prefetches(upstream_server: ServeProcess, tmp_path: Path) -> None:
    gw = make_gateway(upstream_server.url, tmp_path, FailingPrefills)
    try:
        for run in range(3):
            await one_run(gw.client, gw.hooks, run)
        last = _specialist_steps(gw)[-1]
        assert last.miss == Miss(MissReason.FAILED, cause="failed")
    finally:
        await gw.aclose()


async def test_prefix_mismatch_names_the_message_the_client_changed(
    upstream_server: ServeProcess, tmp_path: Path
) -> None:
    gw = make_gateway(upstream_server.url, tmp_path)
    try:
        for run in range(2):
            await one_run(gw.client, gw.hooks, run)
        # The client edits the supervisor's reply before sending the conversation on: what was
        # prefetched (user, the reply as it came back) parts from it at message 1.
        user = {"role": "user", "content": "Run 9: how much is a second checked bag?"}
        head = {"role": "system", "content": SUPERVISOR}
        await gw.client.chat.completions.create(
            model="fake",
            messages=[head, user],  # type: ignore[list-item]
            tools=[HANDOFF],  # type: ignore[list-item]
            max_tokens=4,
            extra_headers={"X-Agentwarm-Session": "run-9"},
        )
        await gw.hooks.responded.get()
        edited = {"role": "assistant", "content": "(edited by the client)"}
        handoff = {"role": "user", "content": "Transferred to the baggage desk."}
        second = await gw.client.chat.completions.create(
            model="fake",
            messages=[{"role": "system", "content": BAGGAGE}, user, edited, handoff],  # type: ignore[list-item]
            tools=[BAG_TOOL],  # type: ignore[list-item]
            max_tokens=4,
            extra_headers={"X-Agentwarm-Session": "run-9"},
        )
        await gw.hooks.responded.get()
        last = _specialist_steps(gw)[-1]
        assert last.prefetched
        assert second.usage is not None
        details = second.usage.prompt_tokens_details
        cached = details.cached_tokens if details else 0
        assert last.miss == Miss(
            MissReason.PREFIX_MISMATCH,
            cause="message",
            message=1,
            missing_tokens=max(0, last.prefetched_tokens - (cached or 0)),
        )
        assert gw.hooks.stats()["short_hits"] == 1
    finally:
        await gw.aclose()
