"""The model context is enforced the same way on every engine: a prompt over it, or a prompt
whose ``max_tokens`` would run past it, is refused up front with the lengths and the limit
(never answered with the few tokens that happen to fit)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm.engines.base import DEFAULT_MAX_CONTEXT, Engine
from agentwarm.errors import ContextLengthExceeded

A = 65  # a byte id every engine's vocabulary has

OVER = (
    "prompt of 8193 tokens exceeds the model context of 8192 tokens; shorten the prompt "
    "(system, tools, transcript) or use a longer-context model"
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


async def test_default_contexts(engine: Engine) -> None:
    """The fake engine's default is 8,192 tokens; the built-in presets' 32,768."""
    from agentwarm.engines.local.model import PRESET_CONTEXT

    assert (DEFAULT_MAX_CONTEXT, PRESET_CONTEXT) == (8192, 32_768)
    expected = DEFAULT_MAX_CONTEXT if isinstance(engine, FakeEngine) else PRESET_CONTEXT
    assert engine.max_context == expected  # type: ignore[attr-defined]


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
