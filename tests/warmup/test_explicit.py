"""``agentwarm.warm``: the three prefix forms, exact cache effects on the embedded engine, the
request it sends, its ``explicit`` span, and its errors."""

from __future__ import annotations

import asyncio
import threading
from functools import cache
from pathlib import Path

import pytest

import agentwarm
from agentwarm import telemetry as tm
from agentwarm._spec import PrefetchKind
from agentwarm.chat import FALLBACK, render_ids
from agentwarm.engines.base import PrefillResult, PrefillStatus, Priority
from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.local import LocalEngine
from agentwarm.engines.local.model import LoadedModel, load_model
from agentwarm.engines.tokenizers import ByteTokenizer
from agentwarm.errors import ConfigError, EngineUnavailable
from agentwarm.gateway.learner import Learner
from agentwarm.gateway.prompts import Renderer
from agentwarm.gateway.types import ChatCall
from agentwarm.warmup.explicit import renderer_for
from agentwarm.warmup.render import ChatRenderer
from tests.waiting import until
from tests.warmup.gate_engine import GateEngine

SYSTEM = {"role": "system", "content": "You are the airline's booking agent. Be brief."}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "find_flight",
            "description": "Find a flight",
            "parameters": {"type": "object", "properties": {"to": {"type": "string"}}},
        },
    }
]


@cache
def tiny() -> LoadedModel:
    return load_model("tiny", seed=0)


async def test_a_warmed_chat_prefix_is_cached_for_the_request_that_follows() -> None:
    async with LocalEngine(tiny(), chunk_size=64) as engine:
        user = {"role": "user", "content": "I need to fly to Lisbon on Friday."}
        result = await agentwarm.warm(engine, messages=[SYSTEM, user], tools=TOOLS)
        want = ChatRenderer.for_engine(engine).prefix_ids([SYSTEM, user], TOOLS)
        assert result.done
        assert (result.prompt_tokens, result.cached_tokens) == (len(want), 0)
        assert result.computed_tokens == len(want)
        assert engine.chat_template is not None
        live = render_ids(
            engine.chat_template, engine.encode, [SYSTEM, user], tools=TOOLS
        ).ids  # the real request: the same messages and the generation prompt
        assert live[: len(want)] == want and len(live) > len(want)
        completion = await engine.generate(live, max_tokens=1)
        assert completion.cached_tokens == len(want)
        again = await agentwarm.warm(engine, messages=[SYSTEM, user], tools=TOOLS)
        assert (again.cached_tokens, again.computed_tokens) == (len(want), 0)


async def test_text_and_ids_forms_are_cached_exactly() -> None:
    async with LocalEngine(tiny(), chunk_size=64) as engine:
        text = "A document was uploaded: the fare rules for economy light."
        ids = engine.encode(text)
        first = await agentwarm.warm(engine, text=text, namespace="tenant-a")
        assert (first.prompt_tokens, first.computed_tokens) == (len(ids), len(ids))
        same = await agentwarm.warm(engine, ids=ids, namespace="tenant-a")
        assert (same.cached_tokens, same.computed_tokens) == (len(ids), 0)
        other = await agentwarm.warm(engine, ids=ids, namespace="tenant-b")  # never shared
        assert other.cached_tokens == 0
        live = await engine.generate([*ids, *engine.encode(" Summarize.")], namespace="tenant-a")
        assert live.cached_tokens == len(ids)


async def test_the_prefill_is_speculative_pinned_and_routed_by_session() -> None:
    engine = GateEngine()
    await agentwarm.warm(engine, ids=[5, 6, 7], namespace="ns", session="s1", ttl_s=120.0)
    await agentwarm.warm(engine, text="hi", ttl_s=None)
    (ids, params), (ids2, params2) = engine.calls
    assert ids == [5, 6, 7]
    assert params.priority == Priority.SPECULATIVE
    assert (params.namespace, params.session, params.pin_ttl_s) == ("ns", "s1", 120.0)
    assert ids2 == list(b"hi")
    assert params2.pin_ttl_s is None  # the engine's default pin
    assert (params2.namespace, params2.session) == ("", None)


async def test_each_warm_is_one_explicit_prefill_span() -> None:
    engine = GateEngine()
    with tm.capture_spans() as spans:
        await agentwarm.warm(engine, ids=[1, 2, 3, 4], session="s1")
        await agentwarm.warm(engine, ids=[9], kind=PrefetchKind.KEEP_WARM)
    first, second = spans.get_finished_spans()
    assert first.name == tm.SPAN_PREFILL
    assert dict(first.attributes or {}) == {
        tm.AW_WORKFLOW: "warmup",
        tm.AW_RUN_ID: "s1",
        tm.AW_PREFILL_SOURCE: "explicit",
        tm.AW_PREFILL_TARGET: "prefix",
        tm.AW_PREFILL_KIND: "explicit",
        tm.AW_PREFILL_TOKENS: 4,
        tm.AW_PREFILL_OUTCOME: "hit",
        tm.AW_PREFILL_COMPUTED_TOKENS: 4,
    }
    assert (second.attributes or {})[tm.AW_PREFILL_KIND] == "keep_warm"


async def test_a_failed_warm_raises_and_its_span_says_failed() -> None:
    engine = FakeEngine()
    await engine.aclose()
    with tm.capture_spans() as spans, pytest.raises(EngineUnavailable):
        await agentwarm.warm(engine, ids=[1, 2, 3])
    (span,) = spans.get_finished_spans()
    attrs = span.attributes or {}
    assert (attrs[tm.AW_PREFILL_OUTCOME], attrs[tm.AW_PREFILL_COMPUTED_TOKENS]) == ("failed", 0)


async def test_an_aborted_warm_returns_aborted_and_its_span_says_cancelled() -> None:
    engine = GateEngine(auto=False)
    with tm.capture_spans() as spans:
        task = asyncio.ensure_future(agentwarm.warm(engine, ids=[1, 2]))
        await until(lambda: engine.calls, what="the prefill reached the engine")
        await engine.abort(engine.rid(0))
        result = await task
    assert result.status is PrefillStatus.ABORTED
    (span,) = spans.get_finished_spans()
    assert (span.attributes or {})[tm.AW_PREFILL_OUTCOME] == "cancelled"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of messages=, text= or ids= (got none)"),
        ({"text": "a", "ids": [1]}, "(got text and ids)"),
        ({"messages": [SYSTEM], "text": "a"}, "(got messages and text)"),
        ({"ids": [1], "tools": TOOLS}, "tools= go with messages="),
        ({"ids": []}, "the ids prefix is empty"),
        ({"text": ""}, "the text prefix is empty"),
        ({"messages": []}, "render to no stable prefix"),
    ],
)
async def test_a_bad_prefix_is_a_config_error_naming_the_fix(
    kwargs: dict[str, object], message: str
) -> None:
    engine = GateEngine()
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        await agentwarm.warm(engine, **kwargs)  # type: ignore[arg-type]
    assert engine.calls == []


class StubUpstream:
    """What the gateway's learner uses of its upstream for a warm, over one test engine."""

    def __init__(self, engine: GateEngine) -> None:
        self.engine = engine
        self.urls = ["http://w1"]

    def worker_for(self, session: str | None, rid: str) -> str:
        return self.urls[0]

    async def prefill(
        self, worker: str, ids: list[int], *, rid: str, session: str | None, namespace: str = ""
    ) -> PrefillResult:
        return await self.engine.prefill(ids, rid=rid, session=session, namespace=namespace)

    async def abort(self, worker: str, rid: str) -> None:
        await self.engine.abort(rid)


async def test_the_gateways_warm_requests_are_explicit_warms(tmp_path: Path) -> None:
    """``max_tokens: 0`` through the gateway: the same span as ``agentwarm.warm``'s, its target
    the request's node, on the session's worker."""
    engine = GateEngine()
    renderer = Renderer(ChatRenderer(ByteTokenizer().encode, FALLBACK))
    learner = Learner(StubUpstream(engine), renderer, state_dir=tmp_path)  # type: ignore[arg-type]
    body = {"model": "m", "max_tokens": 0, "messages": [SYSTEM, {"role": "user", "content": "hi"}]}
    call = ChatCall(body=body, rid="r1", session_hint="s1", node_hint="booking")
    with tm.capture_spans() as spans:
        reply = await learner.warm(call)
    assert reply is not None and reply["usage"]["prompt_tokens"] > 0
    ((ids, params),) = engine.calls
    assert (params.rid, params.priority) == ("r1", Priority.SPECULATIVE)
    (span,) = spans.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert attrs[tm.AW_PREFILL_KIND] == "explicit"
    assert (attrs[tm.AW_WORKFLOW], attrs[tm.AW_RUN_ID]) == ("warmup", "s1")
    assert (attrs[tm.AW_PREFILL_SOURCE], attrs[tm.AW_PREFILL_TARGET]) == ("explicit", "booking")
    assert attrs[tm.AW_PREFILL_TOKENS] == attrs[tm.AW_PREFILL_COMPUTED_TOKENS] == len(ids)
    assert attrs[tm.AW_PREFILL_OUTCOME] == "hit"
    await learner.aclose()


class ThreadEngine(GateEngine):
    """A GateEngine whose ``encode`` records the thread it runs in (a remote tokenizer's
    ``encode`` is a blocking HTTP call: it must not run on the event loop)."""

    def __init__(self) -> None:
        super().__init__()
        self.encode_threads: set[int] = set()

    def encode(self, text: str) -> list[int]:
        self.encode_threads.add(threading.get_ident())
        return super().encode(text)


async def test_rendering_and_tokenizing_run_off_the_event_loop() -> None:
    engine = ThreadEngine()
    user = {"role": "user", "content": "I need to fly to Lisbon on Friday."}
    await agentwarm.warm(engine, messages=[SYSTEM, user], tools=TOOLS)
    await agentwarm.warm(engine, text="A document was uploaded.")
    assert len(engine.calls) == 2
    assert engine.encode_threads and threading.get_ident() not in engine.encode_threads


async def test_one_renderer_per_engine_until_its_template_changes() -> None:
    engine, other = GateEngine(), GateEngine()
    first = renderer_for(engine)
    assert renderer_for(engine) is first and renderer_for(other) is not first
    await agentwarm.warm(engine, messages=[SYSTEM])
    assert renderer_for(engine) is first  # warm() used it: its rendered pieces are reused
    assert first._pieces  # the pieces it rendered for the warm
    engine.chat_template = FALLBACK  # a remote engine learns its template with its tokenizer
    assert renderer_for(engine) is not first
    assert renderer_for(engine).template is FALLBACK
