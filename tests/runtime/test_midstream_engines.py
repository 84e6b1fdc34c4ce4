"""Mid-decode hints through real streaming engines (issue 15): the embedded LocalEngine (tiny
preset) and the SGLang client against a real ``agentwarm serve --engine local --model tiny``
started by the test.

The tiny preset has random weights (seeded): its output is deterministic gibberish that names
no successor and calls no tool. So each test first runs the workflow without speculation to
read the step's reply, takes the first whole word of it (three letters or more, with output
after it) and declares it as a route keyword of the successor ``refunds``
(``@node(hints={word: "refunds"})``; hints do not enter the prompt, so the reply is the same).
Run again with hints on, the step's stream must name ``refunds`` through that keyword while it
is still decoding: the engine holds its stream's last chunk until the prefill of ``refunds``'s
prefix has reached it (``sent_before_end``), so a hint read only after the call would fail.
Streaming must also return the very completion ``generate`` returns for the same ids.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest

from agentwarm import END, Context, PrefetchPolicy, WorkflowGraph, node
from agentwarm.engines.base import (
    Completion,
    Engine,
    GenerateParams,
    PrefillParams,
    PrefillResult,
    StreamChunk,
)
from agentwarm.engines.local import LocalEngine
from agentwarm.engines.local.model import load_model
from agentwarm.engines.sglang import SGLangEngine
from tests.conftest_server import ServeProcess

TRIAGE = "You sort support requests."
REFUNDS = "REFUNDS AGENT: you refund orders."
MAX_TOKENS = 16
WORD = re.compile(r"(?<![\w-])([A-Za-z]{3,})(?=[^\w-])")


class Gate:
    """Mixed into an engine: holds a stream's last chunk until a prefill containing
    ``gate_on`` has been sent (``sent_before_end``); keeps each stream's ids and completion."""

    gate_on: str | None = None

    def gate(self, on: str | None) -> None:
        self.gate_on = on
        self.prefilled = asyncio.Event()
        self.sent_before_end: list[bool] = []
        self.streams: list[tuple[list[int], Completion]] = []

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        engine: Any = self
        if self.gate_on is not None and self.gate_on in engine.decode(ids):
            self.prefilled.set()
        result: PrefillResult = await super().prefill_with(ids, params)  # type: ignore[misc]
        return result

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        async for chunk in super().stream_with(ids, params):  # type: ignore[misc]
            if chunk.completion is not None:
                self.streams.append((list(ids), chunk.completion))
                if self.gate_on is not None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.prefilled.wait(), 30)
                    self.sent_before_end.append(self.prefilled.is_set())
            yield chunk


class GatedLocal(Gate, LocalEngine):
    pass


class GatedSGLang(Gate, SGLangEngine):
    pass


def support(hints: dict[str, str] | None = None) -> WorkflowGraph:
    @node(name="triage", entry=True, system=TRIAGE, next=["lookup", "refunds", END], hints=hints)
    async def triage(ctx: Context) -> str:
        reply = await ctx.llm(ctx.input, max_tokens=MAX_TOKENS)
        ctx.state["reply"] = reply
        return "refunds"

    @node(name="lookup", system="You look orders up.", next=[END])
    async def lookup(ctx: Context) -> str:
        return END

    @node(name="refunds", system=REFUNDS, next=[END])
    async def refunds(ctx: Context) -> str:
        return END

    return WorkflowGraph("support").add(triage, lookup, refunds)


async def hint_through_stream(engine: Gate) -> None:
    """The scenario of the module docstring on ``engine``."""
    eng: Engine = engine  # type: ignore[assignment]
    engine.gate(None)
    wf, policy = support().compile(), PrefetchPolicy.disabled()
    first = await wf.run("where is my order?", engine=eng, policy=policy)
    text = first.state["reply"].text
    keyword = next((m.group(1) for m in WORD.finditer(text)), None)
    assert keyword is not None, f"no whole word in the tiny model's reply {text!r}"

    engine.gate(REFUNDS)
    wf, policy = support({keyword: "refunds"}).compile(), PrefetchPolicy(timing="after_llm")
    result = await wf.run("where is my order?", engine=eng, policy=policy)
    reply = result.state["reply"]
    assert reply.text == text  # the same prompt, the same greedy reply
    assert engine.sent_before_end == [True]
    triage, refunds = result.steps
    assert triage.hint_node == "refunds" and refunds.prefetched
    assert triage.hint_lead_s is not None and triage.hint_lead_s > 0
    # Nothing is prefetched before the call returns (timing after_llm) but for the hint.
    hinted = [p for p in triage.prefetches if p.target == "refunds"]
    assert hinted[0].rank == -1 and hinted[0].issued_after_s <= triage.hint_at_s

    # Streaming returned the stream's own completion, the one generate gives for these ids.
    ((ids, streamed),) = engine.streams
    assert reply is streamed  # no tool call in it: the completion as the engine returned it
    generated = await eng.generate(ids, max_tokens=MAX_TOKENS)
    assert (generated.text, generated.token_ids, generated.prompt_tokens) == (
        streamed.text,
        streamed.token_ids,
        streamed.prompt_tokens,
    )
    assert generated.finish_reason == streamed.finish_reason


async def test_local_engine_streams_and_hints_mid_decode():
    engine = GatedLocal(load_model("tiny", seed=0))
    try:
        await hint_through_stream(engine)
    finally:
        await engine.aclose()


@pytest.fixture(scope="module")
def local_server() -> Iterator[ServeProcess]:
    server = ServeProcess(["--engine", "local", "--model", "tiny"])
    try:
        yield server
    finally:
        server.stop()


async def test_sglang_client_streams_and_hints_mid_decode(local_server: ServeProcess):
    engine = await GatedSGLang.from_url(local_server.url, wait_s=30)
    try:
        await hint_through_stream(engine)
    finally:
        await engine.aclose()
