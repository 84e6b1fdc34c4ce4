"""`agentwarm run` when runs fail: exit codes, the failed runs reported beside the completed
ones, `--inputs` without `--runs`, FILE:WORKFLOW by the printed name, the empty-input warning
and the output without prefetching."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from agentwarm.cli import app
from tests.conftest_server import ROOT, serve
from tests.waiting import wait_until

runner = CliRunner()
ENV = {"COLUMNS": "200", "AGENTWARM_NO_PROGRESS": "1"}

# Input "boom": node b raises; "long": b's prompt is over the FakeEngine's 8,192-token context;
# an input starting with "c" goes a -> c, any other a -> b.
FLOW = """
from agentwarm import END, node

INPUTS = ["hello"]


@node(entry=True, next=["b", "c"])
async def a(ctx):
    await ctx.llm(ctx.input, max_tokens=2)
    return "c" if ctx.input.startswith("c") else "b"


@node(next=[END])
async def b(ctx):
    if ctx.input == "boom":
        raise ValueError("bad input")
    await ctx.llm("x" * 9000 if ctx.input == "long" else "go", max_tokens=2)
    return END


@node(next=[END])
async def c(ctx):
    await ctx.llm("go", max_tokens=2)
    return END
"""


def _write(tmp_path: Path, text: str, name: str = "flow.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _inputs(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "inputs.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def _run(tmp_path: Path, *args: str) -> Result:
    return runner.invoke(
        app,
        ["run", *args, "--engine", "fake", "--state-dir", str(tmp_path / "state")],
        env=ENV,
    )


def test_failing_runs_do_not_stop_the_batch_and_are_reported_in_json(tmp_path):
    flow = _write(tmp_path, FLOW)
    inputs = _inputs(tmp_path, "ok", "boom", "c1", "long", "ok2")
    result = _run(tmp_path, str(flow), "--inputs", str(inputs), "--json")
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)
    assert out["runs"] == 3
    assert out["paths"] == [["a", "b"], ["a", "c"], ["a", "b"]]
    failed = out["failed_runs"]
    assert [(f["run"], f["input"]) for f in failed] == [(2, "boom"), (4, "long")]
    assert failed[0]["error"] == "Node 'b' raised ValueError: bad input"
    over = re.fullmatch(
        r"ContextLengthExceeded: Node 'b': prompt of (\d+) tokens exceeds the model context of "
        r"8192 tokens; .*",
        failed[1]["error"],
    )
    assert over is not None, failed[1]["error"]
    assert int(over.group(1)) > 9000
    errors = result.stderr.splitlines()
    assert errors[0] == "error: run 2 (input 'boom') failed: Node 'b' raised ValueError: bad input"
    assert errors[1].startswith("error: run 4 (input 'long') failed: ContextLengthExceeded: ")
    assert len(errors) == 2
    assert "Traceback" not in result.stderr


def test_table_shows_completed_and_failed_runs(tmp_path):
    flow = _write(tmp_path, FLOW)
    inputs = _inputs(tmp_path, "ok", "boom", "ok2")
    result = _run(tmp_path, str(flow), "--inputs", str(inputs))
    assert result.exit_code == 1, result.output
    rows = [line for line in result.stdout.splitlines() if re.match(r"│\s+\d ", line)]
    assert [row.split("│")[1].strip() for row in rows[:3]] == ["1", "2", "3"]
    assert rows[1].split("│")[2].strip() == "failed"
    assert "Steps of run 3" in result.stdout
    assert "flow: 2 runs of 3 completed, 1 failed, 4 steps · " in result.stdout


def test_debug_prints_the_traceback(tmp_path):
    flow = _write(tmp_path, FLOW)
    for flag in ("--debug", "-v"):
        result = _run(tmp_path, str(flow), "--input", "boom", "--json", flag)
        assert result.exit_code == 1
        assert "Traceback (most recent call last)" in result.stderr
        assert "ValueError: bad input" in result.stderr
        assert result.stderr.rstrip().endswith("Node 'b' raised ValueError: bad input")


def test_inputs_file_without_runs_runs_every_input_once(tmp_path):
    flow = _write(tmp_path, FLOW)
    inputs = _inputs(tmp_path, "x", "c", "y")
    once = json.loads(_run(tmp_path, str(flow), "--inputs", str(inputs), "--json").stdout)
    assert once["runs"] == 3
    assert once["paths"] == [["a", "b"], ["a", "c"], ["a", "b"]]
    assert once["failed_runs"] == []
    cycled = _run(tmp_path, str(flow), "--inputs", str(inputs), "--runs", "4", "--json")
    assert json.loads(cycled.stdout)["paths"] == [["a", "b"], ["a", "c"], ["a", "b"], ["a", "b"]]


def test_workflow_name_the_cli_prints_is_accepted_as_file_colon_workflow(tmp_path):
    printed = _run(tmp_path, "examples/support_bot.py", "--json")
    assert printed.exit_code == 0, printed.output
    name = json.loads(printed.stdout)["workflow"]
    assert name == "support_bot"
    named = _run(tmp_path, f"examples/support_bot.py:{name}", "--json")
    assert named.exit_code == 0, named.output
    assert json.loads(named.stdout)["workflow"] == "support_bot"
    # A workflow object is found by the name it prints too, not only by its attribute name.
    flow = _write(
        tmp_path,
        FLOW + "\nfrom agentwarm import WorkflowGraph\nwf = WorkflowGraph('triage').add(a, b, c)\n",
        name="objs.py",
    )
    by_name = _run(tmp_path, f"{flow}:triage", "--json")
    assert by_name.exit_code == 0, by_name.output
    assert json.loads(by_name.stdout)["workflow"] == "triage"
    missing = _run(tmp_path, f"{flow}:nope")
    assert missing.exit_code == 2
    assert "has no workflow named 'nope' (workflows: triage, wf)" in missing.stderr


def test_empty_input_without_inputs_warns_once_on_stderr(tmp_path):
    flow = _write(tmp_path, FLOW.replace('INPUTS = ["hello"]', ""))
    result = _run(tmp_path, str(flow), "--json")
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "warning: workflow 'flow' defines no INPUTS and no --input was given: running with an "
        "empty input (pass --input TEXT or --inputs FILE)"
    ]
    given = _run(tmp_path, str(flow), "--input", "hi", "--json")
    assert given.stderr == ""
    with_samples = _run(tmp_path, str(_write(tmp_path, FLOW, name="samples.py")), "--json")
    assert with_samples.stderr == ""


def test_no_prefetch_prints_no_prefetch_figures_and_plurals_agree(tmp_path):
    flow = _write(tmp_path, FLOW)
    reactive = _run(tmp_path, str(flow), "--no-prefetch")
    assert reactive.exit_code == 0, reactive.output
    for absent in ("acceptance", "branch hit", "hit rate", "prefetched", "wasted", "outcome"):
        assert absent not in reactive.stdout
    assert "flow: 1 run, 2 steps · cached " in reactive.stdout
    warm = _run(tmp_path, str(flow))
    assert "flow: 1 run, 2 steps · branch hit rate " in warm.stdout
    assert "acceptance" in warm.stdout


@pytest.mark.slow
def test_engine_that_dies_mid_run_exits_1_and_reports_the_completed_runs(tmp_path):
    # Run 2's sync node b tells the test it started and waits until the test has killed the
    # server; the LLM call of the next node, d, then finds the engine gone.
    flow = _write(
        tmp_path,
        """
        import os, time
        from pathlib import Path
        from agentwarm import END, node

        @node(entry=True, next=["b"])
        async def a(ctx):
            await ctx.llm(ctx.input, max_tokens=2)
            return "b"

        @node(next=["d"])
        def b(ctx):
            if ctx.input == "kill":
                Path(os.environ["SIGNAL_DIR"], "started").touch()
                killed = Path(os.environ["SIGNAL_DIR"], "killed")
                end = time.monotonic() + 60
                while not killed.exists() and time.monotonic() < end:
                    time.sleep(0.01)
            return "d"

        @node(next=[END])
        async def d(ctx):
            await ctx.llm("after", max_tokens=2)
            return END
        """,
    )
    inputs = _inputs(tmp_path, "ok", "kill", "never")
    with serve() as server:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agentwarm.cli",
                "run",
                str(flow),
                "--inputs",
                str(inputs),
                "--engine",
                server.url,
                "--state-dir",
                str(tmp_path / "state"),
                "--json",
            ],
            cwd=ROOT,
            env={**os.environ, "SIGNAL_DIR": str(tmp_path), "AGENTWARM_NO_PROGRESS": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            started = tmp_path / "started"
            wait_until(started.exists, timeout_s=60, what=f"{started} to appear")
            server.kill()
            (tmp_path / "killed").touch()
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 1, stderr
    out = json.loads(stdout)
    assert out["runs"] == 1 and out["paths"] == [["a", "b", "d"]]
    [failed] = out["failed_runs"]
    assert (failed["run"], failed["input"]) == (2, "kill")
    assert failed["error"].startswith("Node 'd': EngineUnavailable: "), failed["error"]
    assert "Traceback" not in stderr
    lines = [x for x in stderr.splitlines() if x.startswith("error: ")]
    assert lines[0].startswith("error: run 2 (input 'kill') failed: Node 'd': EngineUnavailable:")
    assert lines[-1] == ("error: the engine is unavailable: stopped after run 2; 1 run not started")
