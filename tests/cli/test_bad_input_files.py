"""Every reader of a user's JSON file, through the CLI, on content that used to crash it.

``--inputs``, ``bench --tools`` and ``bench --trajectories`` refuse the file with one ``error:``
line naming the file (and line) and exit 2; ``stats`` and ``graph --trace`` skip the line with a
warning, and ``stats`` exits 2 only when nothing usable remains; a predictor state file is set
aside with a warning that says what is wrong. Never a traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from agentwarm.cli import app
from agentwarm.predictors.store import PredictorStore
from tests.stats.test_traces import step

runner = CliRunner()

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "support_bot.py"
INPUT_HINT = 'each line must be a JSON string or an object with an "input" field'

#: name: (the bad content, what the error or warning says about it)
CORRUPTIONS: dict[str, tuple[bytes, str]] = {
    "huge-int": (b"1" * 5000, "not usable JSON (an integer has more than 4300 digits)"),
    "deep-nesting": (b"[" * 100_000 + b"]" * 100_000, "not usable JSON (nested too deeply)"),
    "not-utf8": (b"\xff\xfe\x00", "not UTF-8 text (byte 0xff at offset 0)"),
    "lone-surrogate": (
        b'"\\ud800 hi"',
        "not usable JSON (a string holds the lone surrogate \\ud800, which is not text)",
    ),
    "not-json": (
        b"{oops",
        "not JSON (Expecting property name enclosed in double quotes at column 2)",
    ),
}


def _no_traceback(result: Result) -> None:
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output


def _file(tmp_path: Path, name: str, first_line: str | None, bad: bytes) -> Path:
    """``bad`` alone, or on line 2 after a valid ``first_line``."""
    path = tmp_path / name
    path.write_bytes((first_line.encode() + b"\n" if first_line else b"") + bad + b"\n")
    return path


def _trajectories(tmp_path: Path) -> Path:
    return _file(tmp_path, "ok.jsonl", None, json.dumps({"steps": ["a", "b"]}).encode())


@pytest.mark.parametrize("corruption", CORRUPTIONS)
@pytest.mark.parametrize("reader", ["--inputs", "--tools", "--trajectories"])
def test_refused_with_one_error_line_exit_2(tmp_path: Path, reader: str, corruption: str) -> None:
    bad, problem = CORRUPTIONS[corruption]
    if reader == "--inputs":
        path = _file(tmp_path, "in.jsonl", '"hello"', bad)
        args = ["run", str(EXAMPLE), "--engine", "fake", "--state-dir", str(tmp_path / "state")]
        args += ["--inputs", str(path)]
        expected = f"error: --inputs {path}:2: {problem}; {INPUT_HINT}"
    elif reader == "--tools":
        path = _file(tmp_path, "tools.json", None, bad)
        args = ["bench", "--engine", "fake", "--trajectories", str(_trajectories(tmp_path))]
        args += ["--tools", str(path)]
        expected = f"error: --tools {path}: {problem}"
    else:
        path = _file(tmp_path, "eps.jsonl", json.dumps({"steps": ["a"]}), bad)
        args = ["bench", "--engine", "fake", "--trajectories", str(path)]
        expected = f"error: {path}:2: {problem}"
    result = runner.invoke(app, args)
    _no_traceback(result)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [expected]
    assert result.stdout == ""


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_stats_skips_the_line_and_reports_the_rest(tmp_path: Path, corruption: str) -> None:
    bad, problem = CORRUPTIONS[corruption]
    path = _file(tmp_path, "t.jsonl", json.dumps(step("r1", 0, "__start__", "a", ttft=0.25)), bad)
    result = runner.invoke(app, ["stats", str(path), "--json"])
    _no_traceback(result)
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [f"warning: skipped {path}:2: {problem}"]
    out = json.loads(result.stdout)
    assert (out["steps"], out["skipped_lines"], out["ttft_p50_s"]) == (1, 1, 0.25)


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_stats_with_nothing_usable_left_exits_2(tmp_path: Path, corruption: str) -> None:
    bad, problem = CORRUPTIONS[corruption]
    path = _file(tmp_path, "t.jsonl", None, bad)
    result = runner.invoke(app, ["stats", str(path)])
    _no_traceback(result)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"warning: skipped {path}:1: {problem}",
        "error: no agentwarm step or prefill spans in 1 file (0 spans read); "
        "write traces with `agentwarm run --trace FILE`",
    ]


@pytest.mark.parametrize("corruption", CORRUPTIONS)
def test_graph_trace_skips_the_line(tmp_path: Path, corruption: str) -> None:
    bad, problem = CORRUPTIONS[corruption]
    good = step("r1", 0, "__start__", "triage", workflow="support_bot")
    path = _file(tmp_path, "t.jsonl", json.dumps(good), bad)
    args = ["graph", str(EXAMPLE), "--state-dir", str(tmp_path / "state"), "--trace", str(path)]
    result = runner.invoke(app, args)
    _no_traceback(result)
    assert result.exit_code == 0
    lines = [line for line in result.stderr.splitlines() if not line.startswith("note: ")]
    assert lines == [f"warning: skipped {path}:2: {problem}"]  # notes: nothing learned yet
    assert "triage" in result.stdout


@pytest.mark.parametrize("corruption", CORRUPTIONS)
@pytest.mark.slow
def test_corrupt_predictor_state_is_named_set_aside_and_the_run_goes_on(
    tmp_path: Path, corruption: str
) -> None:
    bad, problem = CORRUPTIONS[corruption]
    state = tmp_path / "state"
    state.mkdir()
    path = PredictorStore(state).path_for("support_bot")
    path.write_bytes(bad)
    cmd = [sys.executable, "-m", "agentwarm.cli", "run", str(EXAMPLE), "--engine", "fake"]
    cmd += ["--input", "hi", "--json", "--state-dir", str(state)]
    env = {**os.environ, "AGENTWARM_NO_PROGRESS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    (aside,) = state.glob("support_bot.corrupt-*.json")
    assert aside.read_bytes() == bad
    assert proc.stderr.splitlines() == [
        f"warning: predictor state {path} is unusable ({problem}); moved it to {aside} "
        "and started learning afresh"
    ]
    assert json.loads(proc.stdout)["runs"] == 1
