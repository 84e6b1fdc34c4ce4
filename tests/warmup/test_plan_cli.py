"""``agentwarm warmup plan`` end to end through the CLI runner."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner, Result

from agentwarm.cli import app, main
from agentwarm.errors import ConfigError
from agentwarm.warmup import load_chat_renderer, load_plan, plan_lines
from agentwarm.warmup.mine import mine_plan
from agentwarm.warmup.plan_command import plan

runner = CliRunner()

SYSTEM = {"role": "system", "content": "You are a helpful agent."}
TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
REQUESTS = [
    {"messages": [SYSTEM, {"role": "user", "content": f"question {i % 3}"}], "tools": [TOOL]}
    for i in range(9)
] + [{"input_ids": [7, 8, 9]}]


def _registered() -> bool:
    """Whether ``agentwarm warmup`` is registered (it is once its plan and run commands both
    import)."""
    return any(
        "warmup" in (group.name, group.typer_instance and group.typer_instance.info.name)
        for group in app.registered_groups
    )


def invoke(*args: str) -> Result:
    """``agentwarm warmup plan ARGS`` on the real app, or on an app of the plan command alone
    while the ``warmup`` group is not registered."""
    if _registered():
        return runner.invoke(app, ["warmup", "plan", *args])
    local = typer.Typer()
    local.command()(plan)
    return runner.invoke(local, list(args))


def _log(tmp_path: Path) -> Path:
    log = tmp_path / "requests.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    return log


def test_the_warmup_group_is_registered() -> None:
    assert _registered()


def test_plan_prints_the_plan_as_jsonl(tmp_path: Path) -> None:
    log = _log(tmp_path)
    result = invoke("--from", str(log), "--min-share", "0.2", "--top-k", "3")
    assert result.exit_code == 0, result.output
    expected = mine_plan([log], renderer=load_chat_renderer("tiny"), min_share=0.2, top_k=3)
    assert result.stdout == "".join(line + "\n" for line in plan_lines(expected))
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    # The head has 9 of 10 requests, each "question k" 3; no ids prefix reaches 2 requests.
    assert [(p["share"], p["count"], len(p["messages"])) for p in lines] == [
        (0.9, 9, 1),
        (0.3, 3, 2),
        (0.3, 3, 2),
    ]
    assert result.stderr == ""


def test_plan_writes_the_plan_and_a_summary(tmp_path: Path) -> None:
    log, out = _log(tmp_path), tmp_path / "plan.jsonl"
    ids = tmp_path / "ids.jsonl"
    ids.write_text('{"input_ids": [7, 8, 9]}\n')
    result = invoke("--from", str(log), "--from", str(ids), "--min-share", "0.5", "-o", str(out))
    assert result.exit_code == 0, result.output
    written = load_plan(out)
    [head] = written.prefixes
    # 11 requests: the head has 9 (a "question k" 3, the ids 2 of the 6 needed).
    assert (head.messages, head.tools, head.share, head.count) == (
        (SYSTEM,),
        (TOOL,),
        round(9 / 11, 6),
        9,
    )
    assert result.stdout == ""
    assert result.stderr == (
        f"agentwarm warmup plan: 1 prefixes from 11 requests, {head.tokens} tokens -> {out}\n"
    )


def test_plan_errors_are_config_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"model": "m"}\n')
    result = invoke("--from", str(bad))
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception).startswith(f"{bad}:1: neither a request nor a trace span")


def test_the_command_line_prints_one_error_line_and_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"messages": [{"role": "user", "content": "hi"}]}\nnot json\n')
    monkeypatch.setattr(sys, "argv", ["agentwarm", "warmup", "plan", "--from", str(bad)])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"error: {bad}:2: not JSON (Expecting value at column 1); ")
    assert len(err.splitlines()) == 1
