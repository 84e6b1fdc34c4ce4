"""The docs' PNG commands work from the Quickstart install (matplotlib is a dependency)."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

from typer.testing import CliRunner

from agentwarm.cli import app

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"


def _readme_command(start: str) -> list[str]:
    """The inline command (between backticks) of the README or a docs page that starts with
    ``start`` (the graph command is on docs/getting-started.md, beside the picture it draws)."""
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in page.read_text(encoding="utf-8").splitlines():
            for chunk in line.split("`")[1::2]:
                if chunk.startswith(start):
                    return shlex.split(chunk)
    raise AssertionError(f"neither README.md nor docs/*.md has a command starting with {start!r}")


def test_matplotlib_is_a_regular_dependency() -> None:
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "matplotlib>=3.8" in meta["dependencies"]


def test_readme_graph_png_command_writes_a_png(tmp_path: Path) -> None:
    args = _readme_command("agentwarm graph examples/support_bot.py")
    assert args[:3] == ["agentwarm", "graph", "examples/support_bot.py"]
    trace, png = tmp_path / "t.jsonl", tmp_path / "docs" / "support_bot.png"
    swap = {"t.jsonl": str(trace), "docs/support_bot.png": str(png)}
    args = [swap.get(a, a) for a in args[1:]]
    args[1] = str(ROOT / args[1])
    state = ["--state-dir", str(tmp_path / "state")]
    run = runner.invoke(
        app,
        ["run", args[1], "--runs", "3", "--engine", "fake", "--trace", str(trace), *state],
        env={"AGENTWARM_NO_PROGRESS": "1"},
    )
    assert run.exit_code == 0, run.output
    png.parent.mkdir()
    result = runner.invoke(app, [*args, *state])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == PNG


def test_bench_plot_writes_a_png(tmp_path: Path) -> None:
    eps = tmp_path / "eps.jsonl"
    eps.write_text("".join(json.dumps({"steps": r}) + "\n" for r in (["a", "b"], ["b", "a"])))
    png = tmp_path / "cdf.png"
    args = ["bench", "--engine", "fake", "--trajectories", str(eps), "--test-fraction", "1"]
    args += ["--think", "const:0", "--modes", "reactive,oracle", "--plot", str(png)]
    result = runner.invoke(app, args, env={"AGENTWARM_NO_PROGRESS": "1"})
    assert result.exit_code == 0, result.output
    assert f"TTFT CDF written to {png}" in result.stdout.replace("\n", "")
    assert png.read_bytes()[:8] == PNG
