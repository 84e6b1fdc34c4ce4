"""The gateway's guardrail scores a session's step as the runtime scores a run's
(``rules.scored_branch``): a branch hit when the next request's head was among the targets
the session chose to prefetch (by any ranking after its last request, not only the last one),
or that the policy's own limits would have chosen but the guardrail held back (cautious,
paused: issue 27), else, when nothing was chosen, on its first predictions (issue 15). Each
score comes with the probability the choice promised (``CalibratedGuardrail``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Self

from agentwarm.chat import FALLBACK
from agentwarm.engines.tokenizers import ByteTokenizer
from agentwarm.gateway.learner import Learner
from agentwarm.gateway.prompts import Renderer
from agentwarm.gateway.types import Reply
from agentwarm.runtime.guardrail import CalibratedGuardrail, Level
from agentwarm.runtime.policy import PrefetchPolicy
from agentwarm.warmup.render import ChatRenderer
from tests.gateway.test_learner_context import (
    ANSWER,
    HANDOFF,
    REFUNDS,
    RESULT,
    SUPERVISOR,
    USER,
    StubUpstream,
    _call,
)

BILLING = {"role": "system", "content": "You are the billing desk. Explain invoices and fees."}


class Scripted:
    """Predicts whatever ranking the test set last; learns nothing."""

    kind = "scripted"

    def __init__(self) -> None:
        self.ranking: list[tuple[str, float]] = []

    def predict(
        self,
        path: Sequence[str],
        state: Mapping[str, Any] | None = None,
        *,
        candidates: Sequence[str] | None = None,
    ) -> list[tuple[str, float]]:
        return list(self.ranking)

    def observe(self, path: Sequence[str], next_node: str) -> None:
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls()


class Scores(CalibratedGuardrail):
    """A guardrail that records what it is given to score."""

    def __init__(self) -> None:
        super().__init__()
        self.scored: list[bool] = []
        self.promises: list[float] = []

    def observe(self, hit: bool, policy: PrefetchPolicy, promised: float = 1.0) -> Level:
        self.scored.append(hit)
        self.promises.append(promised)
        return super().observe(hit, policy, promised)


class Prefills(StubUpstream):
    def __init__(self) -> None:
        self.sent = 0

    async def prefill(
        self, worker: str, ids: list[int], *, rid: str, session: str | None, **kw: Any
    ) -> Any:
        self.sent += 1
        return await super().prefill(worker, ids, rid=rid, session=session, **kw)


async def _learner(
    policy: PrefetchPolicy | None = None,
) -> tuple[Learner, Scripted, Scores, Prefills, dict[str, str]]:
    """A learner (one candidate per ranking, unless ``policy`` says otherwise) that knows the
    three heads (one session each, so nothing is scored yet)."""
    upstream = Prefills()
    learner = Learner(
        upstream,  # type: ignore[arg-type]
        Renderer(ChatRenderer(ByteTokenizer().encode, FALLBACK)),
        policy=policy or PrefetchPolicy(top_n=1, spend="top_n"),
        predictor_factory=Scripted,
    )
    scores = learner.guardrail = Scores()
    names: dict[str, str] = {}
    for i, system in enumerate((SUPERVISOR, REFUNDS, BILLING)):
        call = _call(f"w{i}", f"w{i}", system, USER)
        await learner.on_request(call)
        assert call.node is not None
        names[str(system["content"]).split()[3]] = call.node
    assert sorted(names) == ["billing", "refunds", "supervisor."]
    predictor = learner.predictor
    assert isinstance(predictor, Scripted)
    assert scores.scored == []
    return learner, predictor, scores, upstream, names


async def _step(learner: Learner, predictor: Scripted, first: str, rerank: str) -> None:
    """Session s: the supervisor's tool call ranks ``first`` top, its reply ``rerank``."""
    call = _call("r1", "s", SUPERVISOR, USER)
    await learner.on_request(call)
    predictor.ranking = [(first, 0.9), (rerank, 0.1)]
    learner.on_tool_call(call, "to_refunds")
    predictor.ranking = [(rerank, 0.9), (first, 0.1)]
    await learner.on_response(call, Reply(200, HANDOFF))
    await learner.drain()


async def test_a_step_scores_on_every_target_it_prefetched() -> None:
    learner, predictor, scores, upstream, names = await _learner()
    await _step(learner, predictor, names["refunds"], names["billing"])
    assert upstream.sent == 2  # refunds (tool call), then billing (reply)
    await learner.on_request(_call("r2", "s", REFUNDS, USER, HANDOFF, RESULT))
    # A hit: refunds was prefetched, though the last ranking's candidate was billing.
    assert scores.scored == [True]
    # Scored on both targets it prefetched, whose mass under the first ranking is 0.9 + 0.1.
    assert scores.promises == [1.0]
    assert learner.stats()["branch_hits"] == 1
    await learner.aclose()


async def test_a_step_that_prefetched_other_targets_is_a_miss() -> None:
    learner, predictor, scores, _, names = await _learner()
    await _step(learner, predictor, names["refunds"], names["billing"])
    await learner.on_request(_call("r2", "s", SUPERVISOR, USER, HANDOFF, RESULT, ANSWER, USER))
    assert scores.scored == [False]
    await learner.aclose()


async def test_a_paused_step_scores_on_what_the_policy_would_have_chosen() -> None:
    learner, predictor, scores, upstream, names = await _learner()
    learner.guardrail.level = Level.PAUSED
    await _step(learner, predictor, names["refunds"], names["billing"])
    assert upstream.sent == 0
    call = _call("r2", "s", REFUNDS, USER, HANDOFF, RESULT)
    await learner.on_request(call)
    # The tool call's ranking would have sent refunds (held back), the reply's billing.
    assert scores.scored == [True]

    # Its next step, paused again: the first ranking would send billing, the re-ranking (before
    # the next request, as a speculating step's would) supervisor: the next request's node.
    learner.guardrail.level = Level.PAUSED
    predictor.ranking = [(names["billing"], 0.9), (names["supervisor."], 0.1)]
    learner.on_tool_call(call, "to_supervisor")
    predictor.ranking = [(names["supervisor."], 0.9)]
    await learner.on_response(call, Reply(200, ANSWER))
    await learner.on_request(_call("r3", "s", SUPERVISOR, USER, HANDOFF, RESULT, ANSWER, USER))
    assert scores.scored == [True, True]
    assert upstream.sent == 0
    await learner.aclose()


async def test_a_cautious_step_scores_on_what_the_guardrail_held_back() -> None:
    policy = PrefetchPolicy(top_n=2, spend="top_n", cautious_min_p=0.3)
    learner, predictor, scores, upstream, names = await _learner(policy)
    learner.guardrail.level = Level.CAUTIOUS  # one candidate, p >= 0.3
    call = _call("r1", "s", SUPERVISOR, USER)
    await learner.on_request(call)
    predictor.ranking = [(names["refunds"], 0.5), (names["billing"], 0.4)]
    await learner.on_response(call, Reply(200, HANDOFF))
    await learner.drain()
    assert upstream.sent == 1  # refunds only: billing was held back
    await learner.on_request(_call("r2", "s", BILLING, USER, HANDOFF, RESULT))
    # The policy's own limits would have had billing: a branch hit of the predictions (so the
    # guardrail can see them recover), promising 0.5 + 0.4; the step itself still missed.
    assert scores.scored == [True]
    assert scores.promises == [0.9]
    assert learner.stats()["branch_hits"] == 0
    assert learner.stats()["miss_reasons"]["guardrail"] == 1
    await learner.aclose()


async def test_a_step_with_nothing_chosen_scores_on_its_first_predictions() -> None:
    # Everything priced out (p below 0.1 / 1.1): scored on the policy's limits of the first
    # ranking, promising their mass.
    learner, predictor, scores, upstream, names = await _learner(PrefetchPolicy(top_n=2))
    call = _call("r1", "s", SUPERVISOR, USER)
    await learner.on_request(call)
    predictor.ranking = [(names["refunds"], 0.05), (names["billing"], 0.03)]
    await learner.on_response(call, Reply(200, HANDOFF))
    await learner.drain()
    assert upstream.sent == 0
    await learner.on_request(_call("r2", "s", REFUNDS, USER, HANDOFF, RESULT))
    assert scores.scored == [True]
    assert scores.promises == [0.05 + 0.03]
    assert learner.stats()["miss_reasons"]["priced_out"] == 1
    await learner.aclose()
