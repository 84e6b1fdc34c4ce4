"""The learner behind the gateway, end to end: the real ``openai`` SDK talks to the gateway app
(in-process) in front of a real ``agentwarm serve`` (its chat endpoint and native ``/generate``),
for a two-agent workflow — a supervisor that hands off, a specialist that gets the whole
conversation. The gateway learns the nodes, the transition and the prompt shape, prefetches the
specialist as soon as the supervisor's reply is out, and the specialist's real request finds
that prefix in the upstream's cache."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from typer.testing import CliRunner

from agentwarm import telemetry as tm
from agentwarm._spec import END
from agentwarm.chat import FALLBACK
from agentwarm.cli import app as cli_app
from agentwarm.engines.tokenizers import ByteTokenizer
from agentwarm.errors import EngineUnavailable
from agentwarm.gateway.app import GatewayConfig, create_gateway_app
from agentwarm.gateway.learner import Learner
from agentwarm.gateway.prompts import Renderer
from agentwarm.gateway.types import ChatCall, Reply
from agentwarm.gateway.upstream import Upstream
from agentwarm.runtime.guardrail import Level
from agentwarm.warmup.render import ChatRenderer
from tests.conftest_server import ServeProcess, serve

SUPERVISOR = "You are the supervisor of an airline support team. Hand the customer to a specialist."
BAGGAGE = "You are the baggage specialist. Answer questions about checked bags and fees."
HANDOFF = {
    "type": "function",
    "function": {"name": "transfer_to_baggage", "parameters": {"type": "object"}},
}
BAG_TOOL = {
    "type": "function",
    "function": {"name": "bag_fee", "parameters": {"type": "object", "properties": {}}},
}


class Observed:
    """The learner, with an event per finished ``on_response`` (its prefetches drained)."""

    def __init__(self, learner: Learner) -> None:
        self.learner = learner
        self.responded: asyncio.Queue[ChatCall] = asyncio.Queue()

    async def on_request(self, call: ChatCall) -> None:
        await self.learner.on_request(call)

    def on_tool_call(self, call: ChatCall, name: str) -> None:
        self.learner.on_tool_call(call, name)

    async def on_response(self, call: ChatCall, reply: Reply) -> None:
        await self.learner.on_response(call, reply)
        await self.learner.drain()
        self.responded.put_nowait(call)

    async def warm(self, call: ChatCall) -> dict[str, Any] | None:
        return await self.learner.warm(call)

    def stats(self) -> dict[str, Any]:
        return self.learner.stats()

    async def aclose(self) -> None:
        await self.learner.aclose()


@pytest.fixture(scope="module")
def upstream_server() -> Iterator[ServeProcess]:
    with serve() as server:  # --engine fake: byte tokens, the fallback chat format
        yield server


class Gateway:
    """The gateway app in-process with a learner, and an openai client of it."""

    def __init__(self, upstream: Upstream, learner: Learner) -> None:
        self.upstream, self.hooks = upstream, Observed(learner)
        app = create_gateway_app(upstream, self.hooks, GatewayConfig())
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
        self.client = openai.AsyncOpenAI(
            base_url="http://127.0.0.1/v1", api_key="none", http_client=self.http
        )

    async def aclose(self) -> None:
        await self.hooks.aclose()
        await self.http.aclose()
        await self.upstream.aclose()


def make_gateway(
    url: str, state_dir: Path, upstream_type: type[Upstream] = Upstream, **kw: Any
) -> Gateway:
    upstream = upstream_type([url])
    return Gateway(
        upstream,
        Learner(
            upstream,
            Renderer(ChatRenderer(ByteTokenizer().encode, FALLBACK)),
            state_dir=state_dir,
            **kw,
        ),
    )


@pytest.fixture
async def gateway(
    upstream_server: ServeProcess, tmp_path: Path
) -> AsyncIterator[tuple[openai.AsyncOpenAI, Observed]]:
    gw = make_gateway(upstream_server.url, tmp_path)
    yield gw.client, gw.hooks
    await gw.aclose()


async def one_run(
    client: openai.AsyncOpenAI, hooks: Observed, run: int, specialist: str = BAGGAGE
) -> dict[str, Any]:
    """Supervisor → baggage specialist, as a client would send them."""
    user = {"role": "user", "content": f"Run {run}: how much is a second checked bag?"}
    first = await client.chat.completions.create(
        model="fake",
        messages=[{"role": "system", "content": SUPERVISOR}, user],  # type: ignore[list-item]
        tools=[HANDOFF],  # type: ignore[list-item]
        max_tokens=4,
        extra_headers={"X-Agentwarm-Session": f"run-{run}"},
    )
    await hooks.responded.get()
    # The client sends the conversation on, with the supervisor's reply as it came back (a
    # random-weights model makes no real tool call; the handoff is the client's decision).
    reply = {"role": "assistant", "content": first.choices[0].message.content}
    handoff = {"role": "user", "content": "Transferred to the baggage desk."}
    second = await client.chat.completions.create(
        model="fake",
        messages=[{"role": "system", "content": specialist}, user, reply, handoff],  # type: ignore[list-item]
        tools=[BAG_TOOL],  # type: ignore[list-item]
        max_tokens=4,
        extra_headers={"X-Agentwarm-Session": f"run-{run}"},
    )
    await hooks.responded.get()
    assert second.usage is not None
    details = second.usage.prompt_tokens_details
    return {"prompt": second.usage.prompt_tokens, "cached": details.cached_tokens if details else 0}


async def test_the_gateway_learns_the_handoff_and_prefetches_the_specialist(
    gateway: tuple[openai.AsyncOpenAI, Observed],
) -> None:
    client, hooks = gateway
    for run in range(3):
        await one_run(client, hooks, run)
    stats = hooks.stats()
    assert stats["nodes"] == 2 and stats["requests"] == 6
    assert stats["prefetches_issued"] >= 1 and stats["prefetch_hits"] >= 1
    # Once learned, the specialist is prefetched during the handoff: a branch hit, and its
    # real request finds all of the supervisor-written conversation cached but the tool result.
    before = stats["prefetch_hits"]
    last = await one_run(client, hooks, 3)
    stats = hooks.stats()
    assert stats["prefetch_hits"] == before + 1
    learner = hooks.learner
    specialist = next(h for h in learner.heads if h.system[0]["content"] == BAGGAGE)
    assert learner.shapes.rule(specialist.name) == "continue"
    assert last["cached"] >= last["prompt"] - 64  # all but the new user turn
    assert stats["hit_cached_fraction"] == 1.0
    assert json.loads(json.dumps(stats)) == stats


REFUNDS = "You are the refunds specialist. Decide refunds for cancelled and delayed flights."


async def test_losing_candidates_are_settled_as_wasted_and_never_delay_the_winner(
    gateway: tuple[openai.AsyncOpenAI, Observed],
) -> None:
    client, hooks = gateway
    for run in range(6):
        await one_run(client, hooks, run, BAGGAGE if run % 2 else REFUNDS)
    outcomes = {pf.outcome for pf in hooks.learner._prefetches}
    assert "hit" in outcomes and outcomes & {"wasted", "cancelled"}
    stats = hooks.stats()
    assert stats["nodes"] == 3 and stats["wasted_tokens"] > 0
    assert stats["acceptance_ratio"] is not None and 0 < stats["acceptance_ratio"] < 1


class FailingPrefills(Upstream):
    """An upstream whose prefills all fail (its live chat endpoint works)."""

    async def prefill(
        self, worker: str, ids: Any, *, rid: str, session: str | None, **_: Any
    ) -> Any:
        raise EngineUnavailable(f"{worker} refused the prefill (injected)")


async def test_a_failing_prefetch_never_breaks_a_live_request(
    upstream_server: ServeProcess, tmp_path: Path
) -> None:
    gw = make_gateway(upstream_server.url, tmp_path, FailingPrefills)
    try:
        for run in range(3):
            last = await one_run(gw.client, gw.hooks, run)
            assert last["prompt"] > 0
        failed = [pf for pf in gw.hooks.learner._prefetches if pf.outcome == "failed"]
        assert failed and gw.hooks.stats()["prefetch_hits"] == 0
    finally:
        await gw.aclose()


async def test_learned_state_survives_a_restart(
    upstream_server: ServeProcess, tmp_path: Path
) -> None:
    first = make_gateway(upstream_server.url, tmp_path)
    for run in range(3):
        await one_run(first.client, first.hooks, run)
    await first.aclose()
    assert (tmp_path / "gateway.json").is_file()
    second = make_gateway(upstream_server.url, tmp_path)
    try:
        assert len(second.hooks.learner.heads) == 2
        await one_run(second.client, second.hooks, 10)  # new process: a hit at once
        assert second.hooks.stats()["prefetch_hits"] == 1
    finally:
        await second.aclose()


async def test_an_idle_session_ends_and_the_predictor_learns_it(
    upstream_server: ServeProcess, tmp_path: Path
) -> None:
    now = [0.0]
    gw = make_gateway(upstream_server.url, tmp_path, session_idle_s=10.0, clock=lambda: now[0])
    try:
        for run in range(3):
            await one_run(gw.client, gw.hooks, run)
            now[0] += 60.0  # each run's session is idle long before the next run starts
        learner = gw.hooks.learner
        names = {h.system[0]["content"]: h.name for h in learner.heads}
        path = [names[SUPERVISOR], names[BAGGAGE]]
        assert learner.predictor.predict(path)[0][0] == END
        assert len(learner._sessions) == 1  # only the last run's
    finally:
        await gw.aclose()


async def test_the_trace_of_a_gateway_gives_the_learners_figures(
    upstream_server: ServeProcess, tmp_path: Path
) -> None:
    """``agentwarm gateway --trace F``: ``agentwarm stats F`` reports what the learner counted."""
    path = tmp_path / "trace.jsonl"
    telemetry = tm.configure(trace_file=path)
    try:
        gw = make_gateway(upstream_server.url, tmp_path)
        for run in range(4):
            await one_run(gw.client, gw.hooks, run, BAGGAGE if run % 2 else REFUNDS)
        await gw.aclose()  # settles what is pending and writes the open runs
        learned = gw.hooks.stats()
    finally:
        telemetry.shutdown()
    result = CliRunner().invoke(cli_app, ["stats", str(path), "--json"])
    assert result.exit_code == 0, result.output
    traced = json.loads(result.stdout)
    keys = ["runs", "steps", "branch_hits", "prefetches_issued", "prefetch_hits"]
    keys += ["wasted_tokens", "prompt_tokens", "cached_tokens", "acceptance_ratio"]
    assert {k: traced[k] for k in keys} == {k: learned[k] for k in keys}
    assert learned["steps"] == 8 and learned["prefetch_hits"] >= 1


async def test_a_warm_request_prefills_the_prompt_for_the_real_one(
    gateway: tuple[openai.AsyncOpenAI, Observed],
) -> None:
    """``max_tokens: 0`` (the hosted APIs' convention for a warm request): the gateway prefills
    the prompt at speculative priority and answers with usage only, no choices."""
    client, hooks = gateway
    messages: list[Any] = [
        {"role": "system", "content": BAGGAGE},
        {"role": "user", "content": "A question about a long bag claim " + "x" * 400},
    ]
    warm = await client.chat.completions.create(model="fake", messages=messages, max_tokens=0)
    assert warm.choices == [] and warm.usage is not None
    assert warm.usage.prompt_tokens > 400 and warm.usage.completion_tokens == 0
    real = await client.chat.completions.create(model="fake", messages=messages, max_tokens=4)
    await hooks.responded.get()
    assert real.usage is not None and real.usage.prompt_tokens_details is not None
    # All of the warmed prompt was found cached; only the generation prompt was new.
    assert real.usage.prompt_tokens_details.cached_tokens >= warm.usage.prompt_tokens
    assert hooks.stats()["requests"] == 1  # a warm request is not a step


async def test_a_paused_guardrail_keeps_scoring_and_speculation_resumes(
    gateway: tuple[openai.AsyncOpenAI, Observed],
) -> None:
    """Predictions are scored while speculation is paused (as in the runtime), so a gateway that
    paused on poor early predictions resumes once they are good; it never stays paused."""
    client, hooks = gateway
    learner = hooks.learner
    learner.guardrail.ewma, learner.guardrail.level = 0.0, Level.PAUSED
    for run in range(8):
        await one_run(client, hooks, run)
        if learner.guardrail.level is not Level.PAUSED:
            break
    assert learner.guardrail.level is not Level.PAUSED
    before = learner.stats()["prefetches_issued"]
    await one_run(client, hooks, 99)
    assert learner.stats()["prefetches_issued"] > before
