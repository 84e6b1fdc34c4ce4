"""``agentwarm warmup run`` end to end: two real ``agentwarm serve --model tiny`` workers (one pair
for the whole module), the command run as a process, then the first live request of every
worker finds the warmed prefix cached, token for token."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from agentwarm.cli import app
from agentwarm.engines.base import Engine
from agentwarm.engines.sglang import SGLangEngine
from agentwarm.errors import ConfigError
from agentwarm.warmup import Plan, WarmPrefix, load_chat_renderer, load_plan, run_command, save_plan
from agentwarm.warmup.run_command import Refresh, served_renderer
from tests.conftest_server import ROOT, ServeProcess, free_port
from tests.warmup.gate_engine import GateEngine

KEY = "warm-secret"
MESSAGES = (
    {"role": "system", "content": "You are the airline's booking agent. Be brief and exact."},
    {"role": "user", "content": "I need to change my flight to Boston."},
)


@pytest.fixture(scope="module")
def workers() -> Iterator[list[ServeProcess]]:
    """Two ``agentwarm serve --engine local --model tiny`` workers (started side by side)."""
    args = ["--engine", "local", "--model", "tiny", "--chunk-size", "64", "--api-key", KEY]
    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(ServeProcess, args) for _ in range(2)]
    started = [f.result() for f in futures if f.exception() is None]
    try:
        if len(started) < 2:
            raise next(e for f in futures if (e := f.exception()) is not None)
        yield started
    finally:
        for process in started:
            process.stop()


def warmup_run(*args: str) -> subprocess.CompletedProcess[str]:
    """``agentwarm warmup run ARGS`` as a process (no progress bar: not a terminal anyway)."""
    return subprocess.run(
        [sys.executable, "-m", "agentwarm.cli", "warmup", "run", *args],
        cwd=ROOT,
        env={**os.environ, "AGENTWARM_NO_PROGRESS": "1"},
        capture_output=True,
        text=True,
        timeout=180,
    )


def live_cached_tokens(url: str, ids: Sequence[int]) -> int:
    """``cached_tokens`` of a live request of ``ids`` (one output token) on ``url``."""
    reply = httpx.post(
        f"{url}/generate",
        json={"input_ids": list(ids), "sampling_params": {"max_new_tokens": 1}},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=60,
    )
    reply.raise_for_status()
    return int(reply.json()["meta_info"]["cached_tokens"])


def ids(start: int, n: int) -> list[int]:
    return list(range(start, start + n))


@pytest.mark.slow
def test_every_worker_finds_the_plan_warm_on_its_first_live_request(
    workers: list[ServeProcess], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.jsonl"
    save_plan(
        Plan(
            (WarmPrefix(messages=MESSAGES, node="book"), WarmPrefix(input_ids=tuple(ids(1000, 60))))
        ),
        plan,
    )
    chat = load_chat_renderer("tiny").prefix_ids(MESSAGES)
    urls = [w.url for w in workers]
    # No --model: the workers' /model_info names the preset, which renders the messages.
    done = warmup_run(str(plan), "--engine", ",".join(urls), "--api-key", KEY, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    capacity = [int(w.metrics()["sglang:max_total_num_tokens"]) for w in workers]
    assert report["plan"] == str(plan) and report["prefixes"] == 2
    assert [{k: v for k, v in s.items() if k != "seconds"} for s in report["workers"]] == [
        {
            "worker": url,
            "kind": "static",
            "prefixes": 2,
            "skipped": 0,
            "tokens": len(chat) + 60,
            "computed_tokens": len(chat) + 60,
            "prompt_tokens": len(chat) + 60,
            "cached_tokens": 0,
            "budget_tokens": cap // 2,
            "error": None,
        }
        for url, cap in zip(urls, capacity, strict=True)
    ]
    for url in urls:
        assert live_cached_tokens(url, [*chat, *ids(50, 5)]) == len(chat)
        assert live_cached_tokens(url, [*ids(1000, 60), 7, 8]) == 60


def test_a_worker_that_fails_is_named_and_the_others_are_warmed(
    workers: list[ServeProcess], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.jsonl"
    save_plan(Plan((WarmPrefix(input_ids=tuple(ids(3000, 40))),)), plan)
    dead = f"http://127.0.0.1:{free_port()}"
    done = warmup_run(str(plan), "--engine", f"{workers[0].url},{dead}", "--api-key", KEY, "--json")
    assert done.returncode == 1
    assert f"warm-up failed on 1 of 2 workers: {dead} (EngineUnavailable" in done.stderr
    first, second = json.loads(done.stdout)["workers"]
    assert (first["worker"], first["prefixes"], first["computed_tokens"], first["error"]) == (
        workers[0].url,
        1,
        40,
        None,
    )
    assert second["worker"] == dead and second["error"].startswith("EngineUnavailable")
    assert live_cached_tokens(workers[0].url, [*ids(3000, 40), 7]) == 40


def test_refresh_plan_mines_the_recent_traffic_writes_the_plan_and_warms_it(
    workers: list[ServeProcess], tmp_path: Path
) -> None:
    now, old = time.time(), time.time() - 48 * 3600
    recent = ids(5000, 50)
    log = tmp_path / "requests.jsonl"
    lines = [{"input_ids": [*recent, 100 + i], "time": now} for i in range(3)]
    lines += [{"input_ids": [*ids(6000, 50), 100 + i], "time": old} for i in range(3)]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    plan = tmp_path / "plan.jsonl"
    plan.write_text('{"input_ids": [1, 2, 3]}\n')  # the stale plan, replaced
    urls = [w.url for w in workers]
    args = ["--refresh-plan", "--from", str(log), "--since-hours", "24", "--min-share", "0.5"]
    done = warmup_run(str(plan), "--engine", ",".join(urls), "--api-key", KEY, *args)
    assert done.returncode == 0, done.stderr
    assert [p.input_ids for p in load_plan(plan).prefixes] == [tuple(recent)]
    assert re.search(r"warm-up of 1 prefix *\n", done.stdout), done.stdout
    assert all(url in done.stdout for url in urls)
    for url in urls:
        assert live_cached_tokens(url, [*recent, 7]) == 50


def test_usage_errors_name_the_fix(tmp_path: Path) -> None:
    plan = tmp_path / "plan.jsonl"
    save_plan(Plan((WarmPrefix(input_ids=(1, 2)),)), plan)
    runner = CliRunner()
    cases: list[tuple[list[str], str]] = [
        (["--engine", "localhost:1"], "--engine"),
        (["--engine", "http://a:1,http://a:1"], "given twice"),
        (["--engine", "http://a:1", "--budget-fraction", "1.5"], "--budget-fraction"),
        (["--engine", "http://a:1", "--from", str(plan)], "--refresh-plan"),
        (["--engine", "http://a:1", "--refresh-plan"], "--from PATH"),
    ]
    for args, message in cases:
        result = runner.invoke(app, ["warmup", "run", str(plan), *args])
        assert isinstance(result.exception, ConfigError), (args, result.output)
        assert message in str(result.exception)
    missing = runner.invoke(
        app, ["warmup", "run", str(tmp_path / "none"), "--engine", "http://a:1"]
    )
    assert isinstance(missing.exception, ConfigError)
    assert "agentwarm warmup plan" in str(missing.exception)


async def test_a_served_model_not_known_here_asks_for_model() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/model_info"
        return httpx.Response(200, json={"model_path": "org/remote-model"})

    engine = SGLangEngine(
        "http://worker:30000", tokenizer="byte", transport=httpx.MockTransport(answer)
    )
    async with engine:
        with pytest.raises(ConfigError, match="pass --model"):
            await served_renderer({"http://worker:30000": engine})
    known: Any = SGLangEngine(
        "http://worker:30000",
        tokenizer="byte",
        transport=httpx.MockTransport(lambda _: httpx.Response(200, json={"model_path": "tiny"})),
    )
    async with known:
        renderer = await served_renderer({"w": known})
    assert renderer.prefix_ids(MESSAGES) == load_chat_renderer("tiny").prefix_ids(MESSAGES)


class Closing(GateEngine):
    """A worker opened by the command: it records that the command closed it."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    async def aclose(self) -> None:
        self.closed = True


def _warm_args(plan_path: Path, plan: Plan | None, refresh: Refresh | None = None) -> Any:
    return {
        "plan_path": plan_path,
        "plan": plan,
        "model": None,
        "api_key": None,
        "budget_fraction": 0.5,
        "show_progress": False,
        "refresh": refresh,
    }


@pytest.mark.parametrize("failing", [0, 1])
def test_every_opened_worker_is_closed_when_another_fails_unexpectedly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, failing: int
) -> None:
    urls = ["http://a:1", "http://b:2"]
    opened: list[Closing] = []

    async def fake_open(url: str, model: str | None, api_key: str | None, _: float) -> Engine:
        if url == urls[failing]:
            raise RuntimeError("not an engine error")
        opened.append(Closing())
        return opened[-1]

    monkeypatch.setattr(run_command, "_open", fake_open)
    plan = Plan((WarmPrefix(input_ids=(1, 2)),))
    with pytest.raises(RuntimeError, match="not an engine error"):
        asyncio.run(run_command._warm(urls, **_warm_args(tmp_path / "p.jsonl", plan)))
    assert len(opened) == 1 and opened[0].closed and opened[0].calls == []


def request_log(path: Path, when: float, n: int = 3) -> Path:
    system = {"role": "system", "content": "You are the airline's booking agent. Be brief."}
    lines = [
        {"messages": [system, {"role": "user", "content": f"question {i}"}], "time": when}
        for i in range(n)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_quiet_window_keeps_the_plan_warns_and_still_warms(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = request_log(tmp_path / "requests.jsonl", time.time() - 48 * 3600)  # none in the window
    plan = tmp_path / "plan.jsonl"
    save_plan(Plan((WarmPrefix(input_ids=(1, 2, 3)),)), plan)
    before = plan.read_bytes()
    workers: list[Closing] = []

    async def fake_open(url: str, model: str | None, api_key: str | None, _: float) -> Engine:
        workers.append(Closing())
        return workers[-1]

    monkeypatch.setattr(run_command, "_open", fake_open)
    args = ["--refresh-plan", "--from", str(log), "--since-hours", "1"]
    result = CliRunner().invoke(
        app, ["warmup", "run", str(plan), "--engine", "http://a:1", "--json", *args]
    )
    assert result.exit_code == 0, result.output
    assert f"warning: --refresh-plan: no request in the last 1 hours of {log}" in result.stderr
    assert f"{plan} is kept as it is and warmed" in " ".join(result.stderr.split())
    assert plan.read_bytes() == before
    ((worker,),) = [workers]
    assert [ids for ids, _ in worker.calls] == [[1, 2, 3]] and worker.closed
    assert json.loads(result.stdout)["workers"][0]["prefixes"] == 1

    plan.unlink()  # no plan to fall back on: the usage error says what to do
    missing = CliRunner().invoke(app, ["warmup", "run", str(plan), "--engine", "http://a:1", *args])
    assert isinstance(missing.exception, ConfigError)
    assert "nothing to mine" in str(missing.exception) and not plan.exists()


def test_a_refreshed_plan_that_cannot_be_rendered_does_not_replace_the_plan(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    log = request_log(tmp_path / "requests.jsonl", time.time())
    plan = tmp_path / "plan.jsonl"
    save_plan(Plan((WarmPrefix(input_ids=(1, 2, 3)),)), plan)
    before = plan.read_bytes()
    unknown = httpx.MockTransport(
        lambda _: httpx.Response(200, json={"model_path": "org/remote-model"})
    )

    async def fake_open(url: str, model: str | None, api_key: str | None, _: float) -> Engine:
        return SGLangEngine(url, tokenizer="byte", transport=unknown)

    monkeypatch.setattr(run_command, "_open", fake_open)
    args = ["--refresh-plan", "--from", str(log), "--min-share", "0.5"]
    result = CliRunner().invoke(app, ["warmup", "run", str(plan), "--engine", "http://a:1", *args])
    assert isinstance(result.exception, ConfigError), result.output
    assert "pass --model" in str(result.exception)
    assert plan.read_bytes() == before  # validated first: PLAN untouched


@pytest.mark.parametrize("option", ["--since-hours", "--min-share"])
def test_a_window_or_share_of_zero_is_a_usage_error(tmp_path: Path, option: str) -> None:
    plan = tmp_path / "plan.jsonl"
    save_plan(Plan((WarmPrefix(input_ids=(1, 2)),)), plan)
    result = CliRunner().invoke(
        app, ["warmup", "run", str(plan), "--engine", "http://a:1", option, "0"]
    )
    assert result.exit_code == 2
    assert option in result.stderr and "0 must be > 0" in result.stderr


def test_save_plan_replaces_the_file_atomically(tmp_path: Path) -> None:
    plan = tmp_path / "plan.jsonl"
    save_plan(Plan((WarmPrefix(input_ids=(1, 2)),)), plan)
    with plan.open("rb") as reader:  # a reader of the old plan (a server loading it)
        save_plan(Plan((WarmPrefix(input_ids=(7, 8, 9)),)), plan)
        assert json.loads(reader.read())["input_ids"] == [1, 2]  # never a half-written file
    assert [p.input_ids for p in load_plan(plan).prefixes] == [(7, 8, 9)]
    assert [p.name for p in tmp_path.iterdir()] == ["plan.jsonl"]  # no temporary left
