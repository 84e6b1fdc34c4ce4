"""Mid-decode hints (issue 15): with hints on, a live LLM call streams, and the first successor
its partial output names is prefetched at once, before the call returns; the step records the
hint and the lead it gave (``hint_node``, ``hint_at_s``, ``hint_lead_s``). Streaming returns
exactly the completion ``generate`` returns.

FakeEngine tests synchronise with events (no sleeps): the engine holds its stream's last chunk
until the hinted node's prefill has reached it, so a hint read only after the call returned
would fail the test instead of passing late.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence

import pytest

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm.engines.base import GenerateParams, PrefillParams, PrefillResult, StreamChunk
from agentwarm.engines.cost_model import CostModel
from agentwarm.engines.local.scheduler import Request
from agentwarm.errors import GraphValidationError
from agentwarm.runtime import PrefetchKind, PrefetchOutcome
from agentwarm.runtime.result import RunResult

SYSTEM = {
    "triage": "You sort support requests. " * 10,
    "lookup": "LOOKUP AGENT. You look orders up. " * 10,
    "refunds": "REFUNDS AGENT. You refund orders. " * 10,
}
EOS = 256  # outside the byte range: never text
CALL = '<tool_call>\n{"name": "lookup", "arguments": {"order": 4471}}\n</tool_call>'
#: Text after the call: the stream goes on after the hint.
TAIL = " Checking the order status in our system now, one moment please."


class _Scripted(CostModel):
    """The FakeEngine's cost model with chosen replies: ``reply(prompt text)``, its bytes then
    EOS (``None``: the usual made-up words)."""

    eos_token_id = EOS

    def __init__(self, engine: FakeEngine, reply: Callable[[str], str | None]) -> None:
        super().__init__(engine.max_context, engine.decode)
        self.reply = reply

    def sample(self, req: Request, logits: None) -> int:
        state = req.state
        if state.output is None and (text := self.reply(self.text(req.ids))) is not None:
            state.output = [*text.encode(), EOS]
        return super().sample(req, logits)


class ScriptedEngine(FakeEngine):
    """A FakeEngine whose replies are scripted, streamed token by token; it holds a stream's
    last chunk until a prefill of ``gate_on``'s text has arrived (``sent_before_end`` says
    whether it did, within 10 s), and keeps every stream's ids and completion."""

    def __init__(self, reply: Callable[[str], str | None], gate_on: str | None = None) -> None:
        super().__init__(seconds_per_token=0, seconds_per_output_token=0)
        self.scheduler.steps = _Scripted(self, reply)
        self.scheduler.eos_token_id = EOS
        self.gate_on = gate_on
        self.prefilled = asyncio.Event()
        self.sent_before_end: list[bool] = []
        self.streams: list[tuple[list[int], object]] = []
        self.token_chunks = 0

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        if self.gate_on is not None and self.gate_on in self.decode(ids):
            self.prefilled.set()
        return await super().prefill_with(ids, params)

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        async for chunk in super().stream_with(ids, params):
            if chunk.completion is not None:
                self.streams.append((list(ids), chunk.completion))
                if self.gate_on is not None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.prefilled.wait(), 10)
                    self.sent_before_end.append(self.prefilled.is_set())
            else:
                self.token_chunks += 1
            yield chunk


def reply_for_triage(prompt: str) -> str | None:
    return CALL + TAIL if "You sort support requests" in prompt else None


def make_support(max_tokens: int = 200) -> WorkflowGraph:
    @node(name="triage", entry=True, system=SYSTEM["triage"], next=["lookup", "refunds", END])
    async def triage(ctx: Context) -> str:
        reply = await ctx.llm(ctx.input, max_tokens=max_tokens)
        ctx.state["reply"] = reply
        return "lookup"

    def leaf(name: str):
        @node(name=name, system=SYSTEM[name], next=[END])
        async def fn(ctx: Context) -> str:
            await ctx.llm("go on", max_tokens=4)
            return END

        return fn

    return WorkflowGraph("support").add(triage, leaf("lookup"), leaf("refunds"))


async def run_support(engine: FakeEngine, policy: PrefetchPolicy | None = None) -> RunResult:
    return await make_support().compile().run("where is order 4471?", engine=engine, policy=policy)


async def test_the_hinted_successor_is_sent_before_the_stream_ends():
    # timing after_llm: nothing is prefetched before triage's LLM call returns, but for a hint.
    engine = ScriptedEngine(reply_for_triage, gate_on="LOOKUP AGENT")
    result = await run_support(engine, PrefetchPolicy(timing="after_llm"))
    assert engine.sent_before_end == [True]  # triage's stream (the leaves name no one)
    triage, lookup = result.steps
    assert triage.hint_node == "lookup"
    assert triage.hint_at_s is not None and triage.hint_lead_s is not None
    assert 0 < triage.hint_at_s < triage.hint_at_s + triage.hint_lead_s
    assert triage.hint_lead_s < triage.duration_s
    assert result.hint_leads_s == [triage.hint_lead_s]
    # Gained over reading the finished output: from the hint to the end of triage's LLM call
    # (held open until lookup's prefill arrived), within the lead to the step's end.
    assert triage.hint_gain_s is not None and 0 < triage.hint_gain_s <= triage.hint_lead_s
    # The hinted prefetch is the step's first, issued before the call returned, and a hit.
    first = triage.prefetches[0]
    assert (first.target, first.rank, first.kind) == ("lookup", -1, PrefetchKind.SPECULATIVE)
    assert first.outcome == PrefetchOutcome.HIT and lookup.prefetched
    assert first.issued_after_s <= triage.hint_at_s  # sent by the hint, not after the call
    assert [p.target for p in triage.prefetches if p.speculative].count("lookup") == 1
    assert (lookup.hint_node, lookup.hint_at_s, lookup.hint_lead_s) == (None, None, None)


async def test_streaming_returns_exactly_the_completion_generate_returns():
    engine = ScriptedEngine(reply_for_triage)
    result = await run_support(engine)
    (ids, streamed), *_ = engine.streams
    reply = result.state["reply"]
    assert reply is streamed  # the stream's own completion: text, token ids, ttft as measured
    assert reply.text == CALL + TAIL and reply.finish_reason == "stop"
    assert engine.token_chunks >= len(CALL + TAIL)  # token by token
    generated = await engine.generate(ids, max_tokens=200)
    assert (generated.text, generated.token_ids, generated.prompt_tokens) == (
        reply.text,
        reply.token_ids,
        reply.prompt_tokens,
    )
    assert generated.finish_reason == reply.finish_reason
    # The step's TTFT is measured as before: from the call, through the engine's TTFT.
    assert result.steps[0].ttft_s is not None and result.steps[0].ttft_s >= reply.ttft_s


async def test_a_hint_for_a_target_already_prefetched_sends_nothing_new():
    engine = ScriptedEngine(reply_for_triage)
    result = await run_support(engine, PrefetchPolicy(timing="step_start"))
    triage = result.steps[0]
    assert triage.hint_node == "lookup"  # recorded, though lookup was prefetched at step start
    lookups = [p for p in triage.prefetches if p.target == "lookup" and p.speculative]
    assert len(lookups) == 1 and lookups[0].rank >= 0


async def test_without_output_hints_the_call_is_not_streamed():
    engine = ScriptedEngine(reply_for_triage)
    result = await run_support(engine, PrefetchPolicy(use_output_hints=False))
    assert engine.streams == [] and result.steps[0].hint_node is None
    assert result.state["reply"].text == CALL + TAIL


async def test_speculation_off_is_not_streamed():
    engine = ScriptedEngine(reply_for_triage)
    result = await run_support(engine, PrefetchPolicy.disabled())
    assert engine.streams == [] and result.hint_leads_s == []


async def test_a_route_keyword_hints_its_successor():
    def reply(prompt: str) -> str | None:
        return "The customer wants their money back, so: " if "sort" in prompt else None

    @node(name="triage", entry=True, system=SYSTEM["triage"], next=["lookup", "refunds"])
    async def triage(ctx: Context) -> str:
        await ctx.llm(ctx.input, max_tokens=100)
        return "refunds"

    triage = node(
        name="triage",
        entry=True,
        system=SYSTEM["triage"],
        next=["lookup", "refunds"],
        hints={"money back": "refunds"},
    )(triage.fn)

    def leaf(name: str):
        @node(name=name, system=SYSTEM[name], next=[END])
        async def fn(ctx: Context) -> str:
            return END

        return fn

    engine = ScriptedEngine(reply, gate_on="REFUNDS AGENT")
    wf = WorkflowGraph("kw").add(triage, leaf("lookup"), leaf("refunds")).compile()
    result = await wf.run("hi", engine=engine, policy=PrefetchPolicy(timing="after_llm"))
    assert engine.sent_before_end == [True]
    assert result.steps[0].hint_node == "refunds" and result.steps[1].prefetched


async def test_a_failing_hint_never_breaks_the_workflow(monkeypatch):
    from agentwarm.runtime.prefetch.scanner import HintScanner

    def broken(self, chunk):
        raise RuntimeError("scanner bug")

    monkeypatch.setattr(HintScanner, "feed", broken)
    engine = ScriptedEngine(reply_for_triage)
    result = await run_support(engine)
    assert result.path == ["triage", "lookup"] and result.steps[0].hint_node is None
    assert result.state["reply"].text == CALL + TAIL


@pytest.mark.parametrize(
    ("hints", "message"),
    [
        ({"refund": "billing"}, "hints['refund'] = 'billing' is not one of its declared"),
        ({"refund": END}, "END excluded"),
        ({"": "refunds"}, "a keyword is a non-empty string"),
        (["refund"], "must map a route keyword to a successor"),
    ],
)
def test_hints_are_checked_against_next(hints, message):
    with pytest.raises(GraphValidationError, match=message.replace("[", r"\[")):

        @node(name="triage", next=["refunds", END], hints=hints)
        def triage(ctx):
            return END


class _RefundsLikely:
    """A ContextPredictor stub: after triage, refunds is likely and lookup below min_p."""

    def predict(self, path, state=None, *, candidates=None):
        return self.predict_in(path, None, candidates=candidates)

    def observe(self, path, next_node):
        pass

    def predict_in(self, path, context, *, candidates=None):
        if path[-1] != "triage":
            return [(END, 1.0)]
        return [("refunds", 0.97), (END, 0.02), ("lookup", 0.01)]

    def observe_in(self, path, next_node, context):
        pass

    def to_dict(self):
        return {}

    @classmethod
    def from_dict(cls, data):
        return cls()


async def test_a_mid_decode_hint_the_whole_output_rejects_is_not_kept():
    """ "Not lookup, refunds." names lookup at "lookup," (hinted mid-decode), but the whole
    output names both: no hint. lookup, below min_p, is then fallen like any other candidate:
    not extended with the step's exchange (one request)."""

    def reply(prompt: str) -> str | None:
        return "Not lookup, refunds." if "You sort support requests" in prompt else None

    @node(name="triage", entry=True, system=SYSTEM["triage"], next=["lookup", "refunds", END])
    async def triage(ctx: Context) -> str:
        await ctx.llm(ctx.input, max_tokens=100)
        return "refunds"

    def leaf(name: str):
        @node(name=name, system=SYSTEM[name], next=[END])
        async def fn(ctx: Context) -> str:
            await ctx.llm("go on", max_tokens=4)
            return END

        return fn

    wf = WorkflowGraph("support").add(triage, leaf("lookup"), leaf("refunds")).compile()
    engine = ScriptedEngine(reply)
    policy = PrefetchPolicy(timing="after_llm")
    result = await wf.run("hi", engine=engine, predictor=_RefundsLikely(), policy=policy)
    triage_step = result.steps[0]
    assert triage_step.hint_node == "lookup"  # what was read mid-decode stays recorded
    lookups = [p for p in triage_step.prefetches if p.target == "lookup"]
    assert [(p.rank, p.requests) for p in lookups] == [(-1, 1)]
