"""``agentwarm gateway --warmup PLAN`` in front of two ``agentwarm serve`` workers: every worker is
warmed (its first live request of the prefix finds it cached), ``/health/ready`` answers 503
with the progress until both are — one worker is stopped (SIGSTOP) until the test saw the 503,
so its warm-up cannot finish before — then 200, and the ready file holds the same JSON. A plan
of chat prefixes needs ``--model`` to render them."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
import typer
from typer.testing import CliRunner

from agentwarm.errors import ConfigError
from agentwarm.gateway.command import gateway
from agentwarm.warmup.types import Plan, WarmPrefix, save_plan
from tests.conftest_server import GatewayProcess, ServeProcess, serve
from tests.waiting import wait_until

IDS = tuple(range(1, 251)) * 6


@pytest.fixture(scope="module")
def setup(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[GatewayProcess, list[ServeProcess], Path]]:
    folder = tmp_path_factory.mktemp("gateway-warmup")
    plan, ready_file = folder / "plan.jsonl", folder / "ready.json"
    save_plan(Plan((WarmPrefix(input_ids=IDS, tokens=len(IDS)),)), plan)
    with ExitStack() as stack:
        workers = [stack.enter_context(serve("--fake-seconds-per-token", "1e-3")) for _ in range(2)]
        # The second worker answers nothing (its connections wait in the kernel's backlog)
        # until the test continues it.
        os.kill(workers[1].proc.pid, signal.SIGSTOP)
        stack.callback(os.kill, workers[1].proc.pid, signal.SIGCONT)
        gw = GatewayProcess(
            [
                *("--upstream", ",".join(w.url for w in workers)),
                *("--warmup", str(plan), "--ready-file", str(ready_file), "--keep-warm", "3600"),
            ]
        )
        try:
            yield gw, workers, ready_file
        finally:
            gw.stop()
        assert gw.proc.returncode in (0, -signal.SIGTERM), "".join(gw.output)
        assert "Traceback" not in "".join(gw.output)


def test_every_worker_is_warmed_before_the_gateway_is_ready(
    setup: tuple[GatewayProcess, list[ServeProcess], Path],
) -> None:
    gw, workers, ready_file = setup
    urls = [w.url for w in workers]
    first = httpx.get(f"{gw.url}/health/ready", timeout=10)
    assert first.status_code == 503
    progress = first.json()
    assert (progress["ready"], progress["total"], progress["error"]) == (False, 2, None)
    assert urls[1] not in progress["workers"]  # the stopped worker warmed nothing yet
    os.kill(workers[1].proc.pid, signal.SIGCONT)

    answers: list[httpx.Response] = []

    def ready() -> bool:
        answers.append(httpx.get(f"{gw.url}/health/ready", timeout=10))
        return answers[-1].status_code == 200

    wait_until(ready, timeout_s=60, what="the gateway's warm-up to finish")
    done = answers[-1].json()
    assert done.pop("keep_warm")["hit_rates"] == {}  # keep-warm on; the file holds the rest
    assert (done["ready"], done["prefixes"], done["total"], done["error"]) == (True, 2, 2, None)
    assert list(done["workers"]) == urls
    for url in urls:
        worker = done["workers"][url]
        assert (worker["worker"], worker["kind"], worker["prefixes"], worker["error"]) == (
            url,
            "static",
            1,
            None,
        )
        assert worker["tokens"] == worker["computed_tokens"] == len(IDS)
    assert json.loads(ready_file.read_text()) == done

    for url in urls:
        live = httpx.post(
            f"{url}/generate",
            json={"input_ids": [*IDS, 7], "sampling_params": {"max_new_tokens": 1}},
            timeout=30,
        )
        assert live.status_code == 200, live.text
        assert live.json()["meta_info"]["cached_tokens"] == len(IDS)


def test_a_plan_of_chat_prefixes_needs_model(tmp_path: Path) -> None:
    plan = tmp_path / "plan.jsonl"
    save_plan(Plan((WarmPrefix(messages=({"role": "system", "content": "hi"},)),)), plan)
    app = typer.Typer()
    app.command()(gateway)
    result = CliRunner().invoke(
        app, ["--upstream", "http://127.0.0.1:1", "--port", "1", "--warmup", str(plan)]
    )
    assert isinstance(result.exception, ConfigError), result.output
    assert "the plan has chat prefixes (messages)" in str(result.exception)
    assert "pass --model" in str(result.exception)
