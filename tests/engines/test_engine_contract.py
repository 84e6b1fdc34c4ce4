"""What the Engine base class enforces on engine authors (issue 11): every engine class says its
own provider name and span kind, and implements the params forms, never the keyword methods."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from opentelemetry.trace import SpanKind

from agentwarm import FakeEngine, LocalEngine, MultiWorkerEngine, SGLangEngine, VLLMEngine
from agentwarm import telemetry as tm
from agentwarm.bench.metered import MeteredEngine
from agentwarm.engines.base import Completion, Engine, GenerateParams


def test_an_engine_that_does_not_say_its_provider_cannot_be_made() -> None:
    def stub(self: object, *args: object, **kwargs: object) -> None:
        raise AssertionError("not called")

    # Everything an engine implements, but its provider name and span kind.
    rest = Engine.__abstractmethods__ - {"provider_name", "span_kind"}
    quiet = type("Quiet", (Engine,), dict.fromkeys(rest, stub))
    with pytest.raises(TypeError, match="provider_name") as info:
        quiet()
    assert "span_kind" in str(info.value)
    said = type("Said", (quiet,), {"provider_name": "x", "span_kind": SpanKind.CLIENT})
    assert (said().provider_name, said().span_kind) == ("x", SpanKind.CLIENT)

    class Named(FakeEngine):
        pass

    assert Named().provider_name == tm.PROVIDER_FAKE  # inherited from an engine that says it


def test_every_engine_class_says_its_own_provider_and_span_kind() -> None:
    said = {
        cls: (cls.__dict__.get("provider_name"), cls.__dict__.get("span_kind"))
        for cls in (FakeEngine, LocalEngine, SGLangEngine, VLLMEngine)
    }
    assert said == {
        FakeEngine: (tm.PROVIDER_FAKE, SpanKind.INTERNAL),
        LocalEngine: (tm.PROVIDER_LOCAL, SpanKind.INTERNAL),
        SGLangEngine: (tm.PROVIDER_SGLANG, SpanKind.CLIENT),
        VLLMEngine: (tm.PROVIDER_VLLM, SpanKind.CLIENT),
    }


async def test_wrappers_report_what_they_wrap() -> None:
    fake = FakeEngine()
    metered = MeteredEngine(fake)
    routed = MultiWorkerEngine({"w0": FakeEngine(), "w1": FakeEngine()})
    try:
        assert (metered.provider_name, metered.span_kind) == (tm.PROVIDER_FAKE, SpanKind.INTERNAL)
        assert (routed.provider_name, routed.span_kind) == (tm.PROVIDER_FAKE, SpanKind.INTERNAL)
    finally:
        await metered.aclose()
        await routed.aclose()


def test_overriding_a_keyword_method_is_refused_with_the_fix() -> None:
    with pytest.raises(TypeError, match=r"overrides Engine\.generate.*implement generate_with"):

        class Sneaky(FakeEngine):
            async def generate(self, ids: Sequence[int], **kw: object) -> Completion:  # type: ignore[override]
                raise AssertionError("never called through a wrapper")


async def test_the_params_form_is_what_callers_reach() -> None:
    seen: list[GenerateParams] = []

    class Recording(FakeEngine):
        async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
            seen.append(params)
            return await super().generate_with(ids, params)

    engine = Recording(seconds_per_token=0, seconds_per_output_token=0)
    await engine.generate([1, 2, 3], max_tokens=2, temperature=0.5, seed=7)
    await MeteredEngine(engine).generate([1, 2, 3], max_tokens=3)
    assert [(p.max_tokens, p.temperature, p.seed) for p in seen] == [(2, 0.5, 7), (3, 0.0, None)]
    assert isinstance(engine, Engine)
