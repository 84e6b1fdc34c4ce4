"""``agentwarm bench``: the quick profile's noise note, and progress on stderr with ``--json``."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentwarm.bench.config import PROFILES
from agentwarm.cli import app
from tests.bench.fake_args import bench_args

runner = CliRunner()
NOTE = PROFILES["quick"].note(3)  # the 3 episodes of _args
assert NOTE is not None


ROWS = [["a", "b"], ["b", "a"], ["a", "a", "b"]]


def _args(tmp_path: Path, *extra: str) -> list[str]:
    return bench_args(tmp_path, ROWS, "reactive,oracle", *extra)


def test_quick_profile_report_says_its_ratios_are_noise(tmp_path: Path) -> None:
    result = runner.invoke(app, _args(tmp_path), env={"AGENTWARM_NO_PROGRESS": "1"})
    assert result.exit_code == 0, result.output
    assert f"note: {NOTE}" in " ".join(result.stdout.split())
    assert "smoke test" in NOTE and "noise" in NOTE


def test_quick_profile_json_has_the_noise_note(tmp_path: Path) -> None:
    result = runner.invoke(app, _args(tmp_path, "--json"), env={"AGENTWARM_NO_PROGRESS": "1"})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["noise_note"] == NOTE


def test_full_profile_has_no_noise_note(tmp_path: Path) -> None:
    args = _args(tmp_path, "--profile", "full", "--json", "--episodes", "1")
    result = runner.invoke(app, args, env={"AGENTWARM_NO_PROGRESS": "1"})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["noise_note"] is None


def test_progress_goes_to_stderr_with_json_and_stdout_is_one_object(tmp_path: Path) -> None:
    result = runner.invoke(app, _args(tmp_path, "--json"))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)  # exactly one JSON document, nothing else
    assert result.stdout.count("\n") == 1 and out["config"]["profile"] == "quick"
    assert result.stderr.splitlines() == [
        f"bench: {mode} {i}/3 episodes" for mode in ("reactive", "oracle") for i in (1, 2, 3)
    ]


def test_no_progress_env_silences_it(tmp_path: Path) -> None:
    result = runner.invoke(app, _args(tmp_path, "--json"), env={"AGENTWARM_NO_PROGRESS": "1"})
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
