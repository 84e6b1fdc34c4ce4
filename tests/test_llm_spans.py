"""The ``text_completion`` spans of a run carry the engine's span kind and provider (DESIGN §6).

A workflow runs through the runtime on each engine and the spans are read from the in-memory
exporter: against a real ``agentwarm serve`` through :class:`SGLangEngine` (alone and behind
:class:`MultiWorkerEngine`) they are ``CLIENT`` spans of provider ``sglang``; on the embedded
:class:`LocalEngine` they are ``INTERNAL`` spans of provider ``agentwarm.local``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind

from agentwarm import END, Context, FakeEngine, WorkflowGraph, node
from agentwarm import telemetry as tm
from agentwarm.engines import Engine
from agentwarm.engines.local import LocalEngine
from agentwarm.engines.routing import MultiWorkerEngine
from agentwarm.engines.sglang import SGLangEngine
from tests.conftest_server import ServeProcess, serve


@pytest.fixture(scope="module")
def server() -> Iterator[ServeProcess]:
    with serve() as proc:
        yield proc


def two_steps():  # type: ignore[no-untyped-def]
    """ask -> answer -> END, one LLM call per step."""

    @node(name="ask", entry=True, system="You triage questions.", next=["answer"])
    async def ask(ctx: Context) -> str:
        await ctx.llm(ctx.input, max_tokens=4)
        return "answer"

    @node(name="answer", system="You answer questions.", next=[END])
    async def answer(ctx: Context) -> str:
        await ctx.llm("go on", max_tokens=4)
        return END

    return WorkflowGraph("spans").add(ask, answer).compile()


async def llm_spans(engine: Engine) -> list[ReadableSpan]:
    """The ``text_completion`` spans of one run of :func:`two_steps` on ``engine``."""
    with tm.capture_spans() as exporter:
        result = await two_steps().run("where is my parcel?", engine=engine)
    assert result.path == ["ask", "answer"]
    spans = [s for s in exporter.get_finished_spans() if s.name.startswith("text_completion ")]
    assert [s.name for s in spans] == [f"text_completion {engine.model_name}"] * 2
    return spans


def kinds(spans: list[ReadableSpan]) -> list[tuple[SpanKind, object]]:
    return [(s.kind, (s.attributes or {}).get(tm.GEN_AI_PROVIDER_NAME)) for s in spans]


async def test_sglang_engine_spans_are_client_spans_of_sglang(server: ServeProcess) -> None:
    engine = await SGLangEngine.from_url(server.url)
    try:
        spans = await llm_spans(engine)
    finally:
        await engine.aclose()
    assert kinds(spans) == [(SpanKind.CLIENT, "sglang")] * 2


async def test_routed_sglang_spans_are_client_spans_of_sglang(server: ServeProcess) -> None:
    engine = await MultiWorkerEngine.from_urls([server.url])
    try:
        spans = await llm_spans(engine)
    finally:
        await engine.aclose()
    assert kinds(spans) == [(SpanKind.CLIENT, "sglang")] * 2


async def test_local_engine_spans_are_internal_spans_of_agentwarm_local() -> None:
    async with LocalEngine("tiny", chunk_size=32) as engine:
        spans = await llm_spans(engine)
    assert kinds(spans) == [(SpanKind.INTERNAL, "agentwarm.local")] * 2


def test_routing_refuses_workers_of_different_kinds() -> None:
    remote = SGLangEngine("http://127.0.0.1:1", tokenizer="byte")
    with pytest.raises(ValueError, match="one provider name and span kind"):
        MultiWorkerEngine({"remote": remote, "fake": FakeEngine()})
