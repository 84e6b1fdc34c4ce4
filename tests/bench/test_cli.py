"""``agentwarm bench`` through the CLI runner (fake engine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentwarm.cli import app

runner = CliRunner()

KEYS = (
    "ttft_mean_s",
    "ttft_p50_s",
    "ttft_p95_s",
    "makespan_s",
    "computed_tokens",
    "wasted_tokens",
    "acceptance_ratio",
    "branch_hit_rate",
)


def _file(tmp_path: Path) -> Path:
    f = tmp_path / "eps.jsonl"
    rows = [["a", "b", "c"], ["a", "c"], ["b", "c"], ["a", "b", "b", "c"]]
    f.write_text("".join(json.dumps({"steps": r}) + "\n" for r in rows), encoding="utf-8")
    return f


def _args(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "bench",
        "--engine",
        "fake",
        "--trajectories",
        str(_file(tmp_path)),
        "--test-fraction",
        "1",
        "--think",
        "const:0.001",
        *extra,
    ]


@pytest.mark.slow
def test_json_is_one_object_with_the_documented_keys(tmp_path: Path) -> None:
    result = runner.invoke(app, _args(tmp_path, "--json"))
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert list(out["modes"]) == ["cold", "reactive", "next_turn", "agentwarm", "oracle"]
    for figures in out["modes"].values():
        assert set(KEYS) <= set(figures)
        assert figures["episodes"] == 4
    for key in ("gap_closed", "ttft_speedup_vs_reactive", "makespan_speedup_vs_reactive"):
        assert key in out
    assert out["config"]["profile"] == "quick"
    assert out["config"]["engine"] == "fake"
    assert out["modes"]["oracle"]["wasted_tokens"] == 0
    assert out["modes"]["cold"]["cached_tokens"] == 0


def test_table_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "cdf.png"
    result = runner.invoke(
        app, _args(tmp_path, "--modes", "reactive,oracle", "--layout", "shared", "--plot", str(png))
    )
    assert result.exit_code == 0, result.output
    assert "shared layout" in result.stdout
    assert "TTFT mean ms" in result.stdout and "oracle" in result.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--think", "gauss:1"], "unknown distribution 'gauss'"),
        (["--modes", "cold,warm"], "--modes 'cold,warm'"),
        (["--layout", "flat"], "layout must be one of subagent, shared"),
        (["--profile", "huge"], "unknown profile 'huge'"),
        (["--tools", "missing.json"], "--tools missing.json: cannot read it"),
    ],
)
def test_bad_options_are_one_line_exit_2(tmp_path: Path, extra: list[str], message: str) -> None:
    result = runner.invoke(app, _args(tmp_path, *extra))
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith("error: ")
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_bad_trajectory_line_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"steps": ["a"]}\n\n{"steps": 3}\n', encoding="utf-8")
    result = runner.invoke(app, ["bench", "--engine", "fake", "--trajectories", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:3:" in result.stderr
