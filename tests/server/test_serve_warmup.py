"""``agentwarm serve --warmup PLAN``: ``/health/ready`` answers 503 with the progress until the
plan is warm, then 200 (public, like ``/health``, which stays liveness) — shown step by step on
the app with an engine the test releases prefill by prefill; the served process: the ready file
holds the same JSON (removed at shutdown), keep-warm rounds run, the first live requests of the
warmed prefixes (``/generate`` ids, chat messages) find them cached. Bad warm-up options fail
before the server binds."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from agentwarm.engines.fake import FakeEngine
from agentwarm.errors import ConfigError
from agentwarm.server import ServerConfig, create_app
from agentwarm.server.command import serve
from agentwarm.warmup.options import WarmupSettings
from agentwarm.warmup.render import ChatRenderer
from agentwarm.warmup.types import Plan, WarmPrefix, save_plan
from tests.conftest_server import ServeProcess
from tests.waiting import until, wait_until
from tests.warmup.gate_engine import GateEngine

KEY = "warm-key"
IDS = tuple(range(1, 251)) * 8
MESSAGES = (
    {"role": "system", "content": "You triage support tickets. " * 10},
    {"role": "user", "content": "My order has not arrived."},
)


def chat_ids() -> list[int]:
    """The ids the server renders the chat prefix to (its engine's template and encoding)."""
    return ChatRenderer.for_engine(FakeEngine()).prefix_ids(MESSAGES)


@pytest.fixture(scope="module")
def warming(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServeProcess, Path]]:
    folder = tmp_path_factory.mktemp("warmup")
    plan = folder / "plan.jsonl"
    save_plan(
        Plan(
            (
                WarmPrefix(input_ids=IDS, tokens=len(IDS), share=0.6),
                WarmPrefix(messages=MESSAGES, share=0.4),
            )
        ),
        plan,
    )
    ready_file = folder / "ready.json"
    ready_file.write_text('{"ready": true, "left": "by an earlier run"}\n')
    server = ServeProcess(
        [
            *("--engine", "fake", "--fake-seconds-per-token", "1e-3"),
            *("--api-key", KEY, "--warmup", str(plan), "--ready-file", str(ready_file)),
            *("--keep-warm", "0.2", "--rewarm-below", "0.2"),
        ]
    )
    try:
        yield server, ready_file
    finally:
        server.stop()
    # Stopped in time (not killed), the keep-warm loop cancelled without a trace, the ready
    # file removed (a stopped server is not ready).
    assert server.proc.returncode in (0, -signal.SIGTERM), "".join(server.output)
    assert "Traceback" not in "".join(server.output)
    assert not ready_file.exists()


async def test_ready_answers_503_with_the_progress_until_the_plan_is_warm() -> None:
    engine = GateEngine(auto=False)  # each prefill waits for the test
    plan = Plan((WarmPrefix(input_ids=(1, 2, 3)), WarmPrefix(input_ids=(4, 5))))
    app = create_app(engine, ServerConfig(api_key=KEY), warmup=WarmupSettings(plan))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client,
    ):

        async def ready() -> tuple[int, dict[str, Any]]:
            answer = await client.get("/health/ready")  # public: no API key
            return answer.status_code, answer.json()

        await until(lambda: len(engine.calls) == 1, what="the first warm-up prefill")
        assert await ready() == (
            503,
            {"ready": False, "prefixes": 0, "total": 2, "workers": {}, "error": None},
        )
        assert (await client.get("/health")).status_code == 200
        engine.release(engine.rid(0))
        await until(lambda: len(engine.calls) == 2, what="the second warm-up prefill")
        status, body = await ready()
        assert (status, body["ready"], body["prefixes"], body["total"]) == (503, False, 1, 2)
        assert body["workers"]["local"]["prefixes"] == 1
        engine.release(engine.rid(1))
        keep = app.state.server.keep_warm
        await until(keep.warmed.is_set, what="the warm-up to finish")
        status, body = await ready()
        assert (status, body["ready"], body["prefixes"], body["total"]) == (200, True, 2, 2)
        assert (body["workers"]["local"]["tokens"], body["error"]) == (5, None)


@pytest.mark.slow
def test_ready_goes_200_and_warmed_prefixes_hit_on_first_use(
    warming: tuple[ServeProcess, Path],
) -> None:
    server, ready_file = warming
    answers: list[httpx.Response] = []

    def ready() -> bool:
        answers.append(httpx.get(f"{server.url}/health/ready", timeout=10))  # no API key
        return answers[-1].status_code == 200

    wait_until(ready, timeout_s=60, what="the warm-up to finish")
    for early in answers[:-1]:  # the progress while it warmed, if the test was that early
        assert (early.status_code, early.json()["ready"], early.json()["total"]) == (503, False, 2)
    assert httpx.get(f"{server.url}/health", timeout=10).status_code == 200

    warm = chat_ids()
    done = answers[-1].json()
    done.pop("keep_warm")  # the ready file holds the warm-up's progress only
    local = done["workers"]["local"]
    assert (done["ready"], done["prefixes"], done["total"], done["error"]) == (True, 2, 2, None)
    assert (local["kind"], local["prefixes"], local["skipped"], local["error"]) == (
        "static",
        2,
        0,
        None,
    )
    assert local["tokens"] == local["computed_tokens"] == len(IDS) + len(warm)
    assert json.loads(ready_file.read_text()) == done  # the earlier run's file replaced

    def rounds() -> int:
        body = httpx.get(f"{server.url}/health/ready", timeout=10).json()
        return int(body["keep_warm"]["rounds"])

    # --keep-warm 0.2: the plan is re-sent every 0.2 s (no live window ended yet: no rate).
    wait_until(lambda: rounds() >= 2, timeout_s=60, what="two keep-warm rounds")
    body = httpx.get(f"{server.url}/health/ready", timeout=10).json()
    assert (body["ready"], body["keep_warm"]["hit_rates"]) == (True, {})
    assert body["keep_warm"]["tier_shares"] == {}  # no window checked yet

    auth = {"Authorization": f"Bearer {KEY}"}
    live = httpx.post(
        f"{server.url}/generate",
        json={"input_ids": [*IDS, 7, 8, 9], "sampling_params": {"max_new_tokens": 1}},
        headers=auth,
        timeout=30,
    )
    assert live.status_code == 200, live.text
    assert live.json()["meta_info"]["cached_tokens"] == len(IDS)
    chat = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": "x", "messages": list(MESSAGES), "max_tokens": 1},
        headers=auth,
        timeout=30,
    )
    assert chat.status_code == 200, chat.text
    assert chat.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == len(warm)


async def test_without_a_plan_the_server_is_ready_at_once() -> None:
    engine = FakeEngine()
    app = create_app(engine, ServerConfig(), close_engine=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        answer = await client.get("/health/ready")
    assert (answer.status_code, answer.json()) == (200, {"ready": True})
    await engine.aclose()


def invoke(*args: str) -> Any:
    app = typer.Typer()
    app.command()(serve)
    return CliRunner().invoke(app, list(args))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--keep-warm", "30"], "--keep-warm needs a plan to warm: add --warmup PLAN"),
        (["--warmup", "{plan}", "--rewarm-below", "2"], "--rewarm-below 2.0: give a hit rate"),
        (["--warmup", "{bad}"], "line 1: 'input_ids' must be a non-empty list"),
        (["--warmup", "{missing}"], "cannot read it"),
    ],
)
def test_bad_warmup_options_fail_before_binding(
    args: list[str], message: str, tmp_path: Path
) -> None:
    plan, bad = tmp_path / "plan.jsonl", tmp_path / "bad.jsonl"
    save_plan(Plan((WarmPrefix(input_ids=(1, 2, 3)),)), plan)
    bad.write_text('{"input_ids": []}\n')
    paths = {"plan": plan, "bad": bad, "missing": tmp_path / "missing.jsonl"}
    # Port 1 cannot be bound by a test: reaching the binding would fail differently.
    result = invoke("--engine", "fake", "--port", "1", *(a.format(**paths) for a in args))
    assert isinstance(result.exception, ConfigError), result.output
    assert message in str(result.exception)
