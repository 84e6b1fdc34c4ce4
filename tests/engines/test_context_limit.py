"""The model context is enforced the same way on every engine: a prompt over it, or a prompt
whose ``max_tokens`` would run past it, is refused up front with the lengths and the limit
(never answered with the few tokens that happen to fit)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm.engines.base import DEFAULT_MAX_CONTEXT, Engine
from agentwarm.engines.sglang import SGLangEngine
from agentwarm.errors import ContextLengthExceeded, InvalidRequest
from tests.conftest_server import serve

A = 65  # a byte id every engine's vocabulary has

OVER = (
    "prompt of 8193 tokens exceeds the model context of 8192 tokens; shorten the prompt "
    "(system, tools, transcript) or use a longer-context model"
)
PAST = (
    "prompt of 8190 tokens + max_tokens 10 exceeds the model context of 8192 tokens; lower "
    "max_tokens to at most 2 or shorten the prompt"
)


@pytest.fixture(params=["fake", "local"])
async def engine(request: pytest.FixtureRequest) -> AsyncIterator[Engine]:
    if request.param == "fake":
        eng: Engine = FakeEngine(seconds_per_token=1e-7, seconds_per_output_token=1e-6)
    else:
        from agentwarm.engines.local import LocalEngine

        eng = LocalEngine("tiny")
    async with eng:
        yield eng


async def test_default_context_is_the_presets(engine: Engine) -> None:
    assert DEFAULT_MAX_CONTEXT == 8192
    assert engine.max_context == DEFAULT_MAX_CONTEXT  # type: ignore[attr-defined]


async def test_prompt_over_the_context_is_refused(engine: Engine) -> None:
    with pytest.raises(ContextLengthExceeded) as info:
        await engine.generate([A] * 8193, max_tokens=1)
    assert str(info.value) == OVER
    assert (info.value.prompt_tokens, info.value.limit) == (8193, 8192)
    with pytest.raises(ContextLengthExceeded) as prefill:
        await engine.prefill([A] * 8193)
    assert str(prefill.value) == OVER


async def test_max_tokens_past_the_context_is_an_explicit_error(engine: Engine) -> None:
    with pytest.raises(ContextLengthExceeded) as info:
        await engine.generate([A] * 8190, max_tokens=10)
    assert str(info.value) == PAST
    assert (info.value.prompt_tokens, info.value.max_tokens, info.value.limit) == (8190, 10, 8192)


async def test_fake_engine_context_is_configurable() -> None:
    async with FakeEngine(max_context=100) as eng:
        out = await eng.generate([A] * 98, max_tokens=2)
        assert len(out.token_ids) == 2
        with pytest.raises(ContextLengthExceeded, match="prompt of 101 tokens exceeds"):
            await eng.prefill([A] * 101)


async def test_workflow_error_names_the_node_the_length_and_the_limit() -> None:
    @node(name="big", entry=True, system="S" * 9000, next=[END])
    async def big(ctx: Context) -> str:
        await ctx.llm("hi", max_tokens=2)
        return END

    wf = WorkflowGraph("wf").add(big).compile()
    with pytest.raises(ContextLengthExceeded) as info:
        await wf.run("x", engine=FakeEngine(), policy=PrefetchPolicy.disabled())
    prompt = info.value.prompt_tokens
    assert prompt > 9000
    assert str(info.value) == f"Node 'big': {OVER.replace('8193', str(prompt))}"
    assert info.value.node == "big"


async def test_agentwarm_serve_refuses_them_too() -> None:
    with serve() as server:
        async with await SGLangEngine.from_url(server.url) as remote:
            with pytest.raises(InvalidRequest) as over:
                await remote.generate([A] * 8193, max_tokens=1)
            assert "prompt of 8193 tokens" in str(over.value)
            assert "exceeds the model context of 8192 tokens" in str(over.value)
            with pytest.raises(InvalidRequest) as past:
                await remote.generate([A] * 8190, max_tokens=10)
            assert PAST in str(past.value)
