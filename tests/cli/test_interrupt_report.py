"""Ctrl-C during `agentwarm run`: the runs that completed are still reported (table, or one
`--json` object with ``"interrupted": true``), the learned state is saved, and the exit code
is 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest_server import ROOT
from tests.waiting import wait_until

# Run 3 (input "block") tells the test it started, then waits for ever.
FLOW = """
import asyncio, os
from pathlib import Path
from agentwarm import END, node


@node(entry=True, next=["b", "c"])
async def a(ctx):
    await ctx.llm(ctx.input, max_tokens=2)
    return "c" if ctx.input.startswith("c") else "b"


@node(next=[END])
async def b(ctx):
    if ctx.input == "block":
        Path(os.environ["SIGNAL_DIR"], "started").touch()
        await asyncio.Event().wait()  # never set
    await ctx.llm("go", max_tokens=2)
    return END


@node(next=[END])
async def c(ctx):
    await ctx.llm("go", max_tokens=2)
    return END
"""

# As from a terminal: SIGINT raises KeyboardInterrupt (a background shell ignores it).
LAUNCHER = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from agentwarm.cli import main; sys.argv[0] = 'agentwarm'; main()"
)
DEADLINE_S = 60.0


def _interrupt_third_run(tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    flow = tmp_path / "flow.py"
    flow.write_text(textwrap.dedent(FLOW))
    inputs = tmp_path / "inputs.jsonl"
    inputs.write_text("".join(json.dumps(x) + "\n" for x in ["x", "c1", "block", "y", "z"]))
    cli = ["run", str(flow), "--inputs", str(inputs), "--engine", "fake"]
    cli += ["--state-dir", str(tmp_path / "state"), *extra]
    env = {**os.environ, "SIGNAL_DIR": str(tmp_path), "AGENTWARM_NO_PROGRESS": "1"}
    env["COLUMNS"] = "200"
    proc = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, *cli],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        started = tmp_path / "started"
        wait_until(
            lambda: started.exists() or proc.poll() is not None,
            timeout_s=DEADLINE_S,
            what="run 3 to start",
        )
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        # Generous: the blocked node would otherwise never return.
        stdout, stderr = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, stdout, stderr


def test_sigint_with_json_prints_the_completed_runs_and_exits_130(tmp_path):
    code, stdout, stderr = _interrupt_third_run(tmp_path, "--json")
    assert code == 130, stderr
    out = json.loads(stdout)  # exactly one JSON object
    assert out["interrupted"] is True
    assert out["runs"] == 2
    assert out["paths"] == [["a", "b"], ["a", "c"]]
    assert out["failed_runs"] == []
    assert out["steps"] == 4
    assert stderr.splitlines()[-1] == "interrupted: the run was cancelled"
    # What the completed runs (and the cancelled one's first step) taught is saved.
    saved = json.loads((tmp_path / "state" / "flow.json").read_text())
    assert saved["workflow"] == "flow"


def test_sigint_prints_the_table_of_the_completed_runs(tmp_path):
    code, stdout, stderr = _interrupt_third_run(tmp_path)
    assert code == 130, stderr
    rows = [line.split("│")[1].strip() for line in stdout.splitlines() if line.startswith("│")]
    assert rows[:2] == ["1", "2"]
    assert "Steps of run 2" in stdout
    assert "flow: 2 runs, 4 steps · " in stdout
    assert stderr.splitlines()[-1] == "interrupted: the run was cancelled"


@pytest.mark.slow
def test_json_without_interruption_has_no_interrupted_key(tmp_path):
    flow = tmp_path / "flow.py"
    flow.write_text(textwrap.dedent(FLOW))
    cli = ["run", str(flow), "--input", "x", "--engine", "fake", "--json"]
    done = subprocess.run(
        [sys.executable, "-m", "agentwarm.cli", *cli, "--state-dir", str(tmp_path / "state")],
        cwd=ROOT,
        env={**os.environ, "AGENTWARM_NO_PROGRESS": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "interrupted" not in json.loads(done.stdout)
