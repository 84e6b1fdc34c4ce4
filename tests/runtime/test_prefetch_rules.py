"""The prefetcher's decisions (agentwarm.runtime.prefetch.rules) as pure functions: no engine,
no event loop, only plain request and prefetch data."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from opentelemetry import trace

from agentwarm import END
from agentwarm.engines.base import PrefillResult, PrefillStatus
from agentwarm.runtime import PrefetchKind, PrefetchOutcome
from agentwarm.runtime.policy import PrefetchPolicy
from agentwarm.runtime.prefetch.hints import named_successor
from agentwarm.runtime.prefetch.rules import (
    computed_tokens,
    hit_targets,
    outcome,
    plan_warm_up,
    predicted_branch,
    shared_request,
    within_budget,
)
from agentwarm.runtime.prefetch.state import Prefetch, Request
from agentwarm.runtime.records import PrefetchRecord


def _result(computed: int, status: PrefillStatus = PrefillStatus.DONE) -> PrefillResult:
    return PrefillResult(
        rid="r", prompt_tokens=computed, cached_tokens=0, computed_tokens=computed, status=status
    )


def _prefetch(kind: PrefetchKind = PrefetchKind.SPECULATIVE, *requests: Request) -> Prefetch:
    record = PrefetchRecord(target="t", probability=0.5, rank=0, kind=kind, tokens=10)
    pf = Prefetch(record=record, span=trace.INVALID_SPAN, requests=list(requests))
    for r in requests:
        r.credit = r.credit or pf
    return pf


def _req(**kw: Any) -> Request:
    return Request(rid="r", ids_len=kw.pop("ids_len", 10), **kw)


FINISHED = {"result": _result(10)}


@pytest.mark.parametrize(
    ("kind", "hit", "request_kw", "expected"),
    [
        # A loser: wasted when computed, cancelled when stopped, failed, or dropped when no
        # request reached the engine.
        (PrefetchKind.SPECULATIVE, False, FINISHED, PrefetchOutcome.WASTED),
        (PrefetchKind.SPECULATIVE, False, {"dropped": True}, PrefetchOutcome.CANCELLED),
        (
            PrefetchKind.SPECULATIVE,
            False,
            {"result": _result(3, PrefillStatus.ABORTED)},
            PrefetchOutcome.CANCELLED,
        ),
        (PrefetchKind.SPECULATIVE, False, {"failed": True}, PrefetchOutcome.FAILED),
        (PrefetchKind.SPECULATIVE, False, None, PrefetchOutcome.DROPPED),
        # A hit: a hit if any request finished, else failed / cancelled.
        (PrefetchKind.SPECULATIVE, True, FINISHED, PrefetchOutcome.HIT),
        (PrefetchKind.SPECULATIVE, True, {"dropped": True}, PrefetchOutcome.CANCELLED),
        (PrefetchKind.SPECULATIVE, True, {"failed": True}, PrefetchOutcome.FAILED),
        # A confirmed warm-up: a hit unless failed or stopped.
        (PrefetchKind.CONFIRMED, True, FINISHED, PrefetchOutcome.HIT),
        (PrefetchKind.CONFIRMED, True, {"dropped": True}, PrefetchOutcome.CANCELLED),
        (PrefetchKind.CONFIRMED, True, {"failed": True}, PrefetchOutcome.FAILED),
    ],
)
def test_outcome(
    kind: PrefetchKind, hit: bool, request_kw: dict[str, Any] | None, expected: PrefetchOutcome
) -> None:
    pf = _prefetch(kind) if request_kw is None else _prefetch(kind, _req(**request_kw))
    assert outcome(pf, hit=hit) is expected


def test_computed_tokens_count_only_requests_credited_to_the_prefetch() -> None:
    mine, shared = _req(result=_result(7)), _req(result=_result(5))
    pf = _prefetch(PrefetchKind.SPECULATIVE, mine, shared, _req(failed=True))
    shared.credit = _prefetch()  # the winner that shares it takes its tokens
    assert computed_tokens(pf) == 7


def test_hits_are_chosen_targets_whose_prefetch_reached_the_engine_and_did_not_fail() -> None:
    prefetches = {
        "a": _prefetch(PrefetchKind.SPECULATIVE, _req(**FINISHED)),
        "b": _prefetch(PrefetchKind.SPECULATIVE, _req(failed=True)),
        "c": _prefetch(),  # dropped by admission: no request
        "d": _prefetch(PrefetchKind.SPECULATIVE, _req(**FINISHED)),
    }
    assert hit_targets(prefetches, ["a", "b", "c"]) == {"a"}


def test_a_candidate_shares_a_usable_request_for_the_very_same_tokens() -> None:
    same = _req(key=42, ids_len=10)
    other = _prefetch(PrefetchKind.SPECULATIVE, same)
    mine = _prefetch()
    assert shared_request({"o": other, "m": mine}, mine, 42, 10) is same
    assert shared_request({"o": other, "m": mine}, mine, 42, 11) is None  # other length
    assert shared_request({"o": other, "m": mine}, mine, 41, 10) is None  # other tokens
    same.stopping = True
    assert shared_request({"o": other, "m": mine}, mine, 42, 10) is None  # being stopped


def test_within_budget_skips_empty_prefixes_stops_at_the_budget_and_renders_no_refused() -> None:
    prefixes = {"a": [1] * 4, "empty": [], "refused": [9] * 99, "b": [2] * 5, "c": [3] * 2}
    rendered: list[str] = []

    def prefix_ids(t: str) -> list[int]:
        rendered.append(t)
        return prefixes[t]

    out = list(
        within_budget(
            ["a", "empty", "refused", "b", "c"],
            prefix_ids,
            budget=10,
            admissible=lambda t: t != "refused",
        )
    )
    assert out == [("a", [1] * 4), ("refused", None), ("b", [2] * 5)]  # c would pass 10
    assert "refused" not in rendered


async def test_warm_up_plan() -> None:
    loop = asyncio.get_running_loop()
    never: asyncio.Future[None] = loop.create_future()
    running = loop.create_task(asyncio.wait_for(never, None))
    try:
        same_running = _req(ids_len=10, task=running)
        # A running hit with the same tokens: no warm-up; a non-promoting engine's live
        # request waits for the hit instead.
        assert plan_warm_up(same_running, 10, supports_promotion=True).send is False
        plan = plan_warm_up(same_running, 10, supports_promotion=False)
        assert (plan.send, plan.covered_by) == (False, running)
        # A running hit of a shorter prefix: warm now (promoting) or once it ends.
        assert plan_warm_up(same_running, 12, supports_promotion=True).after is None
        plan = plan_warm_up(same_running, 12, supports_promotion=False)
        assert (plan.send, plan.after) == (True, running)
    finally:
        running.cancel()
    # A finished hit with the same tokens: cached already. Otherwise warm.
    assert plan_warm_up(_req(**FINISHED), 10, supports_promotion=False).send is False
    assert plan_warm_up(_req(**FINISHED), 12, supports_promotion=False).send is True
    assert plan_warm_up(None, 10, supports_promotion=False).send is True


def test_the_guardrail_scores_whether_a_chosen_node_was_a_candidate() -> None:
    policy = PrefetchPolicy(top_n=1, min_p=0.0)
    predictions = [("a", 0.7), ("b", 0.3)]
    assert predicted_branch(predictions, ["a"], policy) is True
    assert predicted_branch(predictions, ["b"], policy) is False
    assert predicted_branch(predictions, [END], policy) is None  # nothing to score
    assert predicted_branch([], ["a"], policy) is None  # no prediction was made


def test_an_output_hint_names_exactly_one_successor_as_a_word() -> None:
    succ = ["search", "refund", "go", END]

    def reads(n: str) -> bool:
        return n != "refund"

    assert named_successor("call search now", succ, reads_prompt=reads) == "search"
    assert named_successor("research it", succ, reads_prompt=reads) is None  # not a word
    assert named_successor("go", succ, reads_prompt=reads) is None  # too short to trust
    assert named_successor("refund", succ, reads_prompt=reads) is None  # reads no prompt
    assert named_successor("", succ, reads_prompt=reads) is None
