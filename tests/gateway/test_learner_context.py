"""The gateway's learner reads the conversation: each prediction is given the session's request
and its reply (or the tool call decoded so far) as a :class:`StepContext`, and each transition
is observed with the context of the prediction that preceded it (issue 15)."""

from __future__ import annotations

from typing import Any

from agentwarm.chat import FALLBACK
from agentwarm.engines.tokenizers import ByteTokenizer
from agentwarm.engines.types import PrefillResult, PrefillStatus
from agentwarm.gateway.learner import Learner
from agentwarm.gateway.prompts import Renderer
from agentwarm.gateway.types import ChatCall, Reply
from agentwarm.predictors import END, StepContext
from agentwarm.warmup.render import ChatRenderer
from tests.predictors.test_fit import Recording

SUPERVISOR = {"role": "system", "content": "You are the supervisor. Hand the customer over."}
REFUNDS = {"role": "system", "content": "You are the refunds desk. Decide refunds for flights."}
USER = {"role": "user", "content": "I want to cancel my reservation and get my money back."}
HANDOFF = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "to_refunds", "arguments": "{}"}}
    ],
}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "transferred"}
ANSWER = {"role": "assistant", "content": "Your refund of 120 EUR is on its way."}


class StubUpstream:
    """One worker; every prefill computes its whole prompt at once."""

    def worker_for(self, session: str | None, rid: str) -> str:
        return "http://w1"

    async def prefill(
        self, worker: str, ids: list[int], *, rid: str, session: str | None, namespace: str = ""
    ) -> PrefillResult:
        return PrefillResult(rid, len(ids), 0, len(ids), PrefillStatus.DONE)

    async def abort(self, worker: str, rid: str) -> None:
        return None


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _call(rid: str, session: str, *messages: dict[str, Any]) -> ChatCall:
    return ChatCall(body={"model": "m", "messages": list(messages)}, rid=rid, session_hint=session)


async def test_predictions_read_the_conversation_and_transitions_learn_with_it() -> None:
    clock = Clock()
    learner = Learner(
        StubUpstream(),  # type: ignore[arg-type]
        Renderer(ChatRenderer(ByteTokenizer().encode, FALLBACK)),
        predictor_factory=Recording,
        session_idle_s=10.0,
        clock=clock,
    )
    predictor = learner.predictor
    assert isinstance(predictor, Recording)

    first = _call("r1", "s1", SUPERVISOR, USER)
    await learner.on_request(first)
    supervisor = first.node
    assert supervisor is not None
    learner.on_tool_call(first, "to_refunds")  # streamed: the call is known before the reply
    text = USER["content"]
    after_call = StepContext(first_user=text, last_user=text, last_tool="to_refunds")
    assert predictor.predicted == [((supervisor,), after_call)]
    await learner.on_response(first, Reply(200, HANDOFF))
    after_reply = StepContext.from_messages([SUPERVISOR, USER, HANDOFF])
    assert after_reply.last_tool_args == "{}"
    assert predictor.predicted[-1] == ((supervisor,), after_reply)
    # The session's first request had no prediction before it: learned on the path alone.
    assert predictor.observed == [((), supervisor, None)]

    second = _call("r2", "s1", REFUNDS, USER, HANDOFF, RESULT)
    await learner.on_request(second)
    refunds = second.node
    assert refunds is not None and refunds != supervisor
    assert predictor.observed[-1] == ((supervisor,), refunds, after_reply)
    await learner.on_response(second, Reply(200, ANSWER))
    end_context = StepContext.from_messages([USER, HANDOFF, RESULT, ANSWER])
    assert end_context.last_tool_result == "transferred"
    assert end_context.last_assistant == ANSWER["content"]
    assert predictor.predicted[-1] == ((supervisor, refunds), end_context)

    # The session goes idle and ends: END is learned with the last prediction's context.
    clock.now = 60.0
    await learner.on_request(_call("r3", "s2", SUPERVISOR, USER))
    assert ((supervisor, refunds), END, end_context) in predictor.observed
    await learner.drain()
    await learner.aclose()
