"""Small things of the command line, each through the CLI: agentwarm's warnings as one plain
line, ``--step-timeout inf``, the file named when it has no nodes, the quick profile's episode
count, ``bench --json`` on failure, ``graph -o`` with an unknown extension, a tools entry
without a name and the capitalisation of run failures."""

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

from agentwarm.bench.config import PROFILES
from agentwarm.cli import app
from tests.conftest_server import ROOT

runner = CliRunner()
ENV = {"AGENTWARM_NO_PROGRESS": "1", "COLUMNS": "200"}
EXAMPLE = ROOT / "examples" / "support_bot.py"
SOURCE_LOCATION = re.compile(r"\.py:\d+:")


def _agentwarm(*args: str) -> subprocess.CompletedProcess[str]:
    """The real entry point (``main``), in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "agentwarm.cli", *args],
        cwd=ROOT,
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )


def _invoke(*args: str) -> Result:
    return runner.invoke(app, list(args), env=ENV)


def _trajectories(tmp_path: Path) -> Path:
    eps = tmp_path / "eps.jsonl"
    rows = [["a", "b"], ["b", "a"], ["a", "a", "b"]]
    eps.write_text("".join(json.dumps({"steps": r}) + "\n" for r in rows), encoding="utf-8")
    return eps


def _bench_args(tmp_path: Path, *extra: str) -> list[str]:
    eps = str(_trajectories(tmp_path))
    return ["bench", "--engine", "fake", "--trajectories", eps, "--test-fraction", "1",
            "--think", "const:0", "--modes", "reactive,oracle", *extra]  # fmt: skip


# 2. Warnings ------------------------------------------------------------------------------


@pytest.mark.slow
def test_unusable_state_file_is_one_plain_warning_line(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "support_bot.json").write_text("{not json")
    done = _agentwarm("run", str(EXAMPLE), "--engine", "fake", "--state-dir", str(state), "--json")
    assert done.returncode == 0, done.stderr
    [moved] = state.glob("support_bot.corrupt-*.json")
    # One line (why the JSON is unusable is the reader's wording, not checked here).
    [line] = done.stderr.splitlines()
    assert line.startswith(f"warning: predictor state {state / 'support_bot.json'} is unusable (")
    assert line.endswith(f"); moved it to {moved} and started learning afresh")
    assert not SOURCE_LOCATION.search(done.stderr)


@pytest.mark.slow
def test_state_not_saved_is_one_plain_warning_line(tmp_path):
    # A directory where the lock file goes: every save fails (and is warned about, not raised).
    state = tmp_path / "state"
    (state / ".support_bot.lock").mkdir(parents=True)
    done = _agentwarm("run", str(EXAMPLE), "--engine", "fake", "--state-dir", str(state), "--json")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines, "the failed save was not reported"
    assert all(line.startswith("warning: learned state not saved: cannot write ") for line in lines)
    assert not SOURCE_LOCATION.search(done.stderr)


def test_library_users_still_get_pythons_warning_format(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "wf.json").write_text("{not json")
    code = textwrap.dedent(
        f"""
        import warnings
        from agentwarm import END, WorkflowGraph, node

        @node(entry=True, next=[END])
        async def a(ctx):
            return END

        WorkflowGraph("wf").add(a).compile().session(state_dir={str(state)!r})
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "PredictorStateWarning: predictor state " in done.stderr
    assert not done.stderr.startswith("warning: ")


# 3. --step-timeout ------------------------------------------------------------------------

HANG_AFTER_LIMIT = """
import asyncio
from agentwarm import END, WorkflowGraph, node

INPUTS = ["x"]

@node(entry=True, next=[END])
async def slow(ctx):
    await asyncio.sleep(0.3)
    return END

wf = WorkflowGraph("wf").add(slow).compile(step_timeout_s=0.05)
"""


def test_step_timeout_inf_lifts_the_workflows_own_limit(tmp_path):
    flow = tmp_path / "flow.py"
    flow.write_text(HANG_AFTER_LIMIT)
    base = ["run", str(flow), "--engine", "fake", "--state-dir", str(tmp_path / "s"), "--json"]
    limited = _invoke(*base)
    assert limited.exit_code == 1, limited.output
    assert json.loads(limited.stdout)["failed_runs"][0]["error"].startswith(
        "Node 'slow' ran past the step time limit of 0.05 s"
    )
    unlimited = _invoke(*base, "--step-timeout", "inf")
    assert unlimited.exit_code == 0, unlimited.output
    assert json.loads(unlimited.stdout)["runs"] == 1


def test_bad_step_timeout_says_how_to_ask_for_no_limit(tmp_path):
    flow = tmp_path / "flow.py"
    flow.write_text(HANG_AFTER_LIMIT)
    for bad in ("0", "-1", "nan"):
        result = _invoke("run", str(flow), "--engine", "fake", "--step-timeout", bad)
        assert result.exit_code == 2
        [line] = result.stderr.splitlines()
        assert line == (
            f"error: --step-timeout={float(bad)!r} must be a positive number of seconds (inf "
            "for no limit, even where the workflow sets one)"
        )
        assert "None" not in line


# 4. A file without nodes ------------------------------------------------------------------


def test_a_file_without_nodes_is_named_by_its_path():
    result = _invoke("run", "examples/_common.py", "--engine", "fake")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "error: examples/_common.py: defines no @node functions and no workflow; decorate the "
        "workflow's steps with @node (from agentwarm import node)"
    ]
    assert "agentwarm_user" not in result.stderr


# 5. The quick profile's noise note --------------------------------------------------------


def test_quick_noise_note_counts_the_episodes_replayed(tmp_path):
    one = _invoke(*_bench_args(tmp_path, "--episodes", "1", "--json"))
    assert one.exit_code == 0, one.output
    note = json.loads(one.stdout)["noise_note"]
    assert note.startswith("quick profile: a smoke test (tiny model, 1 short episode); ")
    three = _invoke(*_bench_args(tmp_path, "--json"))
    assert json.loads(three.stdout)["noise_note"] == note.replace(
        "1 short episode", "3 short episodes"
    )
    assert PROFILES["quick"].note(2) == note.replace("1 short episode", "2 short episodes")


# 6. bench --json on failure ---------------------------------------------------------------


def test_bench_json_failure_prints_one_json_object_with_the_error(tmp_path):
    system = tmp_path / "system.txt"
    system.write_text("word " * 3000)  # over the fake engine's 8,192-token context
    result = _invoke(*_bench_args(tmp_path, "--system", str(system), "--json"))
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout)  # exactly one JSON object
    assert list(out) == ["error"]
    assert out["error"].startswith("engine failed: Node ")
    assert "exceeds the model context of 8192 tokens" in out["error"]
    assert result.stderr.splitlines() == [f"error: {out['error']}"]
    plain = _invoke(*_bench_args(tmp_path, "--system", str(system)))
    assert plain.exit_code == 1 and plain.stdout == ""


# 7. graph -o with an unknown extension ----------------------------------------------------


def test_graph_output_with_an_unknown_extension_is_refused(tmp_path):
    for name, what in (("g.xyz", "unknown extension '.xyz'"), ("g", "no extension")):
        out = tmp_path / name
        result = _invoke("graph", str(EXAMPLE), "--state-dir", str(tmp_path), "-o", str(out))
        assert result.exit_code == 2
        assert result.stderr.splitlines() == [
            f"error: -o {out}: {what}; use .txt, .dot, .gv, .mmd, .svg, .png "
            "(or give --format text|dot|mermaid|svg|png)"
        ]
        assert not out.exists()
    forced = tmp_path / "g.xyz"
    chosen = _invoke(
        "graph", str(EXAMPLE), "--state-dir", str(tmp_path), "-o", str(forced), "-f", "dot"
    )
    assert chosen.exit_code == 0, chosen.output
    assert forced.read_text().startswith("digraph")


# 8. A tools entry without a name ----------------------------------------------------------


def test_tools_entry_without_a_name_is_refused_naming_its_index(tmp_path):
    named = {"type": "function", "function": {"name": "a", "parameters": {}}}
    for entries, index in (([{"type": "function"}], 0), ([named, {"function": {}}], 1)):
        tools = tmp_path / "tools.json"
        tools.write_text(json.dumps(entries))
        result = _invoke(*_bench_args(tmp_path, "--tools", str(tools)))
        assert result.exit_code == 2, result.output
        assert result.stderr.splitlines() == [
            f"error: --tools {tools}: entry [{index}] has no function name; each entry must be "
            '{"type": "function", "function": {"name": "STEP", ...}}, named like a step'
        ]


# 9. Capitalisation of run failures --------------------------------------------------------


def test_run_failures_name_the_node_capitalised_alike(tmp_path):
    flow = tmp_path / "flow.py"
    flow.write_text(
        textwrap.dedent(
            """
            from agentwarm import END, node
            from agentwarm.errors import EngineUnavailable

            @node(entry=True, next=[END])
            async def a(ctx):
                if ctx.input == "raise":
                    raise ValueError("bad")
                raise EngineUnavailable("gone")
            """
        )
    )
    inputs = tmp_path / "in.jsonl"
    inputs.write_text('"raise"\n"gone"\n')
    state = str(tmp_path / "s")
    result = _invoke(
        "run",
        str(flow),
        "--inputs",
        str(inputs),
        "--engine",
        "fake",
        "--state-dir",
        state,
        "--json",
    )
    assert result.exit_code == 1, result.output
    errors = [f["error"] for f in json.loads(result.stdout)["failed_runs"]]
    assert errors == ["Node 'a' raised ValueError: bad", "Node 'a': EngineUnavailable: gone"]
