"""Step time limits (``@node(timeout_s=...)``, ``compile(step_timeout_s=...)``,
``agentwarm run --step-timeout``) and Ctrl-C while a sync node blocks its thread."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm.cli import app
from agentwarm.errors import GraphValidationError, StepTimeout
from agentwarm.runtime.node_call import SYNC_THREAD_PREFIX
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
#: Prefetch at step start, both successors.
EAGER = PrefetchPolicy(top_n=2, min_p=0.0, timing="step_start", warm_confirmed=False)


def _leaf(name: str, system: str = ""):
    @node(name=name, system=system, next=[END])
    async def fn(ctx: Context) -> str:
        await ctx.llm("x", max_tokens=2)
        return END

    return fn


async def test_node_timeout_fails_the_run_and_cancels_the_steps_prefetches():
    @node(name="a", entry=True, next=["b", "c"], timeout_s=0.3)
    async def a(ctx: Context) -> str:
        await asyncio.Event().wait()  # never set: the step can only time out
        return "b"

    # Each successor's prefix takes ~60 s to prefill: both are in flight at the timeout.
    engine = FakeEngine(seconds_per_token=2e-2, chunk_size=16)
    wf = WorkflowGraph("slow").add(a, _leaf("b", "B" * 3000), _leaf("c", "C" * 3000)).compile()
    t0 = time.monotonic()
    with pytest.raises(StepTimeout) as info:
        await wf.run("x", engine=engine, policy=EAGER)
    assert time.monotonic() - t0 < 15  # generous, and far from the ~120 s of the prefetches
    assert str(info.value) == (
        "Node 'a' ran past the step time limit of 0.3 s (its @node(timeout_s=...)); the run "
        "was stopped and the step's prefetches cancelled"
    )
    assert (info.value.node, info.value.limit_s) == ("a", 0.3)
    prefills = [r for r in engine.log if r.kind == "prefill"]
    assert prefills, "the successors were prefetched"
    assert all(r.status == "aborted" for r in prefills)
    assert all(r.computed_tokens < r.prompt_tokens for r in prefills)
    assert {r.rid for r in prefills} <= set(engine.aborts)
    assert not any(r.kind == "generate" for r in engine.log)


async def test_compile_step_timeout_applies_to_nodes_without_their_own():
    @node(name="a", entry=True, next=["b"], timeout_s=30)
    async def a(ctx: Context) -> str:
        await asyncio.sleep(0.3)  # the work being timed: past the workflow's limit, not a's
        return "b"

    @node(name="b", next=[END])
    async def b(ctx: Context) -> str:
        await asyncio.Event().wait()
        return END

    wf = WorkflowGraph("wf").add(a, b).compile(step_timeout_s=0.1)
    assert wf.step_timeout_s == 0.1
    with pytest.raises(StepTimeout) as info:
        await wf.run("x", engine=FakeEngine(), policy=PrefetchPolicy.disabled())
    assert str(info.value).startswith(
        "Node 'b' ran past the step time limit of 0.1 s (the workflow's step_timeout_s / "
        "--step-timeout)"
    )


async def test_sync_node_timeout_abandons_its_thread_and_says_so():
    release = threading.Event()

    @node(name="blocked", entry=True, next=[END], timeout_s=0.2)
    def blocked(ctx: Context) -> str:
        release.wait(60)
        return END

    wf = WorkflowGraph("wf").add(blocked).compile()
    try:
        with pytest.raises(StepTimeout, match=r"its thread \(a sync node\) is abandoned"):
            await wf.run("x", engine=FakeEngine(), policy=PrefetchPolicy.disabled())
        names = [t.name for t in threading.enumerate()]
        assert f"{SYNC_THREAD_PREFIX}blocked" in names
        assert all(t.daemon for t in threading.enumerate() if t.name.startswith(SYNC_THREAD_PREFIX))
    finally:
        release.set()


def test_bad_time_limits_are_refused():
    with pytest.raises(GraphValidationError, match=r"Node 'a': timeout_s=0 must be a positive"):

        @node(name="a", entry=True, timeout_s=0)
        async def a(ctx: Context) -> None:
            return None

    with pytest.raises(GraphValidationError, match=r"step_timeout_s=-1 must be a positive"):
        WorkflowGraph("wf").add(_leaf("a")).compile(step_timeout_s=-1)


FLOW = """
import asyncio
from agentwarm import END, node

INPUTS = ["x"]

@node(entry=True, next=[END])
async def hang(ctx):
    await asyncio.Event().wait()
    return END
"""


def test_cli_step_timeout_fails_the_run_with_exit_1(tmp_path):
    flow = tmp_path / "flow.py"
    flow.write_text(FLOW)
    args = ["run", str(flow), "--engine", "fake", "--state-dir", str(tmp_path), "--json"]
    result = CliRunner().invoke(app, [*args, "--step-timeout", "0.2"])
    assert result.exit_code == 1, result.output
    [failed] = json.loads(result.stdout)["failed_runs"]
    assert failed == {
        "run": 1,
        "input": "x",
        "error": "Node 'hang' ran past the step time limit of 0.2 s (the workflow's "
        "step_timeout_s / --step-timeout); the run was stopped and the step's prefetches "
        "cancelled",
    }
    bad = CliRunner().invoke(app, [*args, "--step-timeout", "0"])
    assert bad.exit_code == 2
    assert "--step-timeout=0.0 must be a positive number of seconds" in bad.stderr


def test_first_sigint_cancels_a_blocked_sync_node_and_exits_130(tmp_path):
    flow = tmp_path / "flow.py"
    flow.write_text(
        textwrap.dedent(
            """
            import os, threading
            from pathlib import Path
            from agentwarm import END, node

            INPUTS = ["x"]

            @node(entry=True, next=[END])
            def stuck(ctx):
                Path(os.environ["SIGNAL_DIR"], "started").touch()
                threading.Event().wait()  # never returns
                return END
            """
        )
    )
    # As from a terminal: SIGINT raises KeyboardInterrupt (a background shell ignores it).
    launcher = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "from agentwarm.cli import main; sys.argv[0] = 'agentwarm'; main()"
    )
    cli = ["run", str(flow), "--engine", "fake", "--state-dir", str(tmp_path / "state")]
    proc = subprocess.Popen(
        [sys.executable, "-c", launcher, *cli],
        cwd=ROOT,
        env={**os.environ, "SIGNAL_DIR": str(tmp_path), "AGENTWARM_NO_PROGRESS": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        started = tmp_path / "started"
        wait_until(
            lambda: started.exists() or proc.poll() is not None,
            timeout_s=60,
            what="the node to start",
        )
        assert proc.poll() is None, proc.communicate()
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr
    assert elapsed < 15  # generous: the node would block for ever
    assert stderr.splitlines()[-1] == (
        "interrupted: the run was cancelled; the thread of sync node(s) 'stuck' is abandoned "
        "(still running until the process exits)"
    )
