"""What rendering a prompt may cost the gateway: a big warm request is rendered off the event
loop while other requests are answered (a real ``agentwarm gateway`` in front of ``agentwarm
serve --engine fake``), and a prompt that cannot fit the model's context is refused before it
is rendered (400 naming the limit and the fix)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from agentwarm.chat import FALLBACK
from agentwarm.engines.base import PrefillResult, PrefillStatus
from agentwarm.engines.tokenizers import ByteTokenizer, QwenTokenizer
from agentwarm.gateway.app import GatewayConfig, create_gateway_app
from agentwarm.gateway.learner import Learner
from agentwarm.gateway.prompts import Renderer
from agentwarm.gateway.types import ChatCall, Reply
from agentwarm.warmup.render import ChatRenderer
from tests.chat.test_render_bounds import counting
from tests.conftest_server import GatewayProcess, ServeProcess, serve

#: A warm request of this many (empty) messages: ~7,500 tokens (the fake worker's context is
#: 8,192), whose rendering one prefix per message took seconds on the gateway's event loop.
MESSAGES = 1500
#: Generous: the issue asks 0.5 s; one prefix per message on the loop made it several seconds.
STATS_BOUND_S = 2.0


@pytest.fixture(scope="module")
def worker() -> Iterator[ServeProcess]:
    with serve("--model", "tiny") as server:
        yield server


@pytest.mark.slow
def test_stats_are_answered_while_a_big_warm_request_renders(worker: ServeProcess) -> None:
    gw = GatewayProcess(["--upstream", worker.url, "--model", "tiny"])
    try:
        roles = ("user", "assistant")
        messages = [{"role": roles[i % 2], "content": ""} for i in range(MESSAGES)]
        body = {"model": "tiny", "max_tokens": 0, "messages": messages}
        warmed: list[httpx.Response] = []

        def warm() -> None:
            warmed.append(httpx.post(f"{gw.url}/v1/chat/completions", json=body, timeout=120))

        thread = threading.Thread(target=warm)
        thread.start()
        latencies: list[float] = []
        during = 0  # stats answered while the warm request had not returned
        with httpx.Client(timeout=120) as client:
            while thread.is_alive() or not latencies:
                sent = time.monotonic()
                stats = client.get(f"{gw.url}/v1/agentwarm/stats")
                latencies.append(time.monotonic() - sent)
                assert stats.status_code == 200
                during += thread.is_alive()
        thread.join()
        assert warmed[0].status_code == 200, warmed[0].text
        usage = warmed[0].json()["usage"]
        assert usage["prompt_tokens"] > 7000  # the whole conversation was warmed
        assert during >= 3
        assert max(latencies) < STATS_BOUND_S, latencies
    finally:
        gw.stop()


class StubUpstream:
    """One worker that records the prefills it is sent."""

    urls = ("http://w1",)

    def __init__(self) -> None:
        self.prefills: list[int] = []

    def worker_for(self, session: str | None, rid: str) -> str:
        return "http://w1"

    async def prefill(
        self, worker: str, ids: list[int], *, rid: str, session: str | None, namespace: str = ""
    ) -> PrefillResult:
        self.prefills.append(len(ids))
        return PrefillResult(rid, len(ids), 0, len(ids), PrefillStatus.DONE)

    async def abort(self, worker: str, rid: str) -> None:
        return None

    async def aclose(self) -> None:
        return None


async def _warm(
    content: str, *, max_context: int, count: int = 1
) -> tuple[httpx.Response, Any, list[int]]:
    template = counting("qwen2.5-refused")
    encoded: list[int] = []
    encode = QwenTokenizer().encode

    def counted(text: str) -> list[int]:
        encoded.append(len(text))
        return encode(text)

    upstream = StubUpstream()
    renderer = Renderer(ChatRenderer(counted, template, max_context=max_context))
    learner = Learner(upstream, renderer)  # type: ignore[arg-type]
    app = create_gateway_app(upstream, learner, GatewayConfig())  # type: ignore[arg-type]
    messages = [{"role": "user", "content": content}] * count
    body = {"model": "m", "max_tokens": 0, "messages": messages}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app)) as client:
        answer = await client.post("http://127.0.0.1/v1/chat/completions", json=body)
    await learner.aclose()
    return answer, template.calls + encoded, upstream.prefills


async def test_a_warm_request_too_big_for_the_context_is_refused_unrendered() -> None:
    # 16 bytes per token at most (the rule of the servers' body limits): 1,000 tokens of context
    # hold at most 16 * 1,000 + 64 KiB of text.
    answer, rendered, prefills = await _warm("x" * 90_000, max_context=1000)
    assert answer.status_code == 400
    message = answer.json()["error"]["message"]
    assert message == (
        "prompt of 90004 bytes of text cannot fit the model context of 1000 tokens (at most "
        "81536 bytes of text at 16 bytes per token); shorten the prompt (system, tools, "
        "conversation) or use a longer-context model"
    )  # the content and the role
    assert rendered == [] and prefills == []


async def test_a_warm_request_over_the_context_in_tokens_is_refused_unsent() -> None:
    answer, rendered, prefills = await _warm("word " * 2000, max_context=1000)
    assert answer.status_code == 400
    message = answer.json()["error"]["message"]
    assert "exceeds the model context of 1000 tokens" in message
    assert rendered and prefills == []  # rendered (small enough to), never sent


async def test_a_warm_request_of_more_messages_than_the_context_is_refused_unrendered() -> None:
    answer, rendered, prefills = await _warm("", max_context=1000, count=1001)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == (
        "prompt of 1001 messages cannot fit the model context of 1000 tokens (each message "
        "takes at least one); shorten the conversation or use a longer-context model"
    )
    assert rendered == [] and prefills == []


async def test_a_prefetch_too_big_for_the_context_is_skipped_with_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    upstream = StubUpstream()
    renderer = Renderer(ChatRenderer(ByteTokenizer().encode, FALLBACK, max_context=1000))
    learner = Learner(upstream, renderer)  # type: ignore[arg-type]
    supervisor = {"role": "system", "content": "You are the supervisor: route every question."}
    specialist = {"role": "system", "content": "You are the specialist: answer the question."}
    reply = {"role": "assistant", "content": "Transferring you."}

    async def run(session: str, question: str) -> None:
        user = {"role": "user", "content": question}
        first = ChatCall({"messages": [supervisor, user]}, rid=f"{session}-1", session_hint=session)
        await learner.on_request(first)
        await learner.on_response(first, Reply(200, reply))
        await learner.drain()
        second = ChatCall(
            {"messages": [specialist, user, reply]}, rid=f"{session}-2", session_hint=session
        )
        await learner.on_request(second)

    await run("s1", "Where is my bag?")  # learns supervisor -> specialist
    await run("s2", "Where is my bag, again?")
    sent = len(upstream.prefills)
    assert sent == 2  # one after each first reply (s2: the specialist)
    with caplog.at_level(logging.WARNING, logger="agentwarm.gateway.prompts"):
        await run("s3", "x" * 90_000)
    assert len(upstream.prefills) == sent  # nothing sent for the huge conversation
    skipped = sorted(r.getMessage().split(" not prefetched: ")[0] for r in caplog.records)
    assert skipped == ["node you-are-the-specialist", "node you-are-the-supervisor"]  # one each
    assert all("prompt of 900" in r.getMessage() for r in caplog.records)
    await learner.aclose()


async def test_a_small_prompt_is_prefetched_before_the_clients_next_request() -> None:
    """A client that sends its next request as soon as a reply ends (LangGraph's handoffs)
    finds the prefetch of a small prompt already sent: it is rendered at once, not in a render
    thread whose result could come after the next request (then the prefetch is abandoned)."""
    upstream = StubUpstream()
    renderer = Renderer(ChatRenderer(ByteTokenizer().encode, FALLBACK, max_context=100_000))
    learner = Learner(upstream, renderer)  # type: ignore[arg-type]
    supervisor = {"role": "system", "content": "You are the supervisor: route every question."}
    specialist = {"role": "system", "content": "You are the specialist: answer the question."}
    reply = {"role": "assistant", "content": "Transferring you."}
    for i in range(3):  # the transition supervisor -> specialist is learned, then predicted
        session, user = f"s{i}", {"role": "user", "content": f"Where is bag {i}?"}
        first = ChatCall({"messages": [supervisor, user]}, rid=f"{session}-1", session_hint=session)
        await learner.on_request(first)
        before = len(learner._prefetches)
        await learner.on_response(first, Reply(200, reply))
        await asyncio.sleep(0)  # one turn of the loop: what runs before the next request is read
        if i > 0:
            assert len(learner._prefetches) > before, i  # sent, not waiting on a thread
        second = ChatCall(
            {"messages": [specialist, user, reply]}, rid=f"{session}-2", session_hint=session
        )
        await learner.on_request(second)
        await learner.drain()
    assert learner.stats()["prefetch_hits"] == 2
    await learner.aclose()
