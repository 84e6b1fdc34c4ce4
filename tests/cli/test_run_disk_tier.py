"""``agentwarm run --kv-dir D`` twice, each a process of its own: the second run loads from D
what the first stored, its step spans say how much (``agentwarm.step.disk_cached_tokens``), and
``agentwarm stats`` of its trace reports it; the first run's trace reports none loaded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest_server import ROOT

ENV = {"AGENTWARM_NO_PROGRESS": "1", "COLUMNS": "200"}


def agentwarm(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "agentwarm.cli", *args],
        cwd=ROOT,
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_a_second_run_loads_what_the_first_stored_and_its_trace_says_so(tmp_path: Path) -> None:
    kv, state = tmp_path / "kv", tmp_path / "state"
    figures = []
    for name in ("first", "second"):
        trace = tmp_path / f"{name}.jsonl"
        ran = agentwarm(
            "run",
            str(ROOT / "examples" / "support_bot.py"),
            "--kv-dir",
            str(kv),
            "--state-dir",
            str(state),
            "--trace",
            str(trace),
            "--json",
        )
        figures.append(json.loads(agentwarm("stats", str(trace), "--json")))
        # agentwarm run --json gives the same figure as agentwarm stats of its trace.
        assert json.loads(ran)["disk_cached_tokens"] == figures[-1]["disk_cached_tokens"]
    first, second = figures
    assert first["disk_cached_tokens"] == 0  # a new directory: nothing to load
    assert 0 < second["disk_cached_tokens"] <= second["cached_tokens"]
    assert second["cached_tokens"] > first["cached_tokens"]
    line = (
        f"cached tokens     {second['cached_tokens']}/{second['prompt_tokens']} prompt tokens, "
        f"{second['disk_cached_tokens']} of them loaded from the disk tier"
    )
    assert line in agentwarm("stats", str(tmp_path / "second.jsonl")).splitlines()
