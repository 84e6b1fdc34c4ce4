"""``agentwarm bench --tools``: steps the tools file has no schema for are plain steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentwarm.bench.inputs import Episode
from agentwarm.bench.workload import Workload
from agentwarm.cli import app
from tests.bench.fake_args import bench_args

runner = CliRunner()
SHARED_TOOLS = Path(__file__).resolve().parents[3] / "shared/data/tau2-retail/tools.json"


def _schema(name: str) -> dict[str, object]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}


def _bench(tmp_path: Path, tools: Path, rows: list[list[str]], *extra: str):
    args = [*bench_args(tmp_path, rows, "reactive,agentwarm", "--tools", str(tools)), *extra]
    return runner.invoke(app, args, env={"AGENTWARM_NO_PROGRESS": "1"})


def test_step_without_schema_is_a_plain_step_with_a_note(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([_schema("a"), _schema("b")]), encoding="utf-8")
    rows = [["a", "b", "c"], ["a", "c"], ["b", "c", "a"]]
    result = _bench(tmp_path, tools, rows, "--json")
    assert result.exit_code == 0, result.output
    note = f"--tools {tools}: no schema for step(s) c; replayed as plain steps (no tool segment)"
    assert result.stderr.splitlines() == [f"note: {note}"]
    out = json.loads(result.stdout)
    assert out["notes"] == [note]
    assert out["modes"]["agentwarm"]["steps"] == 3 + 8  # an entry step per episode


def test_all_schemas_given_means_no_note(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps([_schema("a"), _schema("b")]), encoding="utf-8")
    result = _bench(tmp_path, tools, [["a", "b"], ["b", "a"]], "--json")
    assert result.exit_code == 0, result.output
    assert result.stderr == ""
    assert json.loads(result.stdout)["notes"] == []


@pytest.mark.parametrize("layout", ["subagent", "shared"])
def test_plain_step_has_no_tool_segment(layout: str) -> None:
    eps = [Episode("0", ("a", "c")), Episode("1", ("c", "a"))]
    w = Workload.build(
        eps, encode=lambda t: list(t.encode()), tool_schemas=[_schema("a")], layout=layout
    )
    assert w.plain_steps == ("c",)
    if layout == "shared":
        assert w.tools["a"] == w.tools["c"] == (_schema("a"),)
    else:
        assert (w.tools["a"], w.tools["c"]) == ((_schema("a"),), ())


@pytest.mark.skipif(not SHARED_TOOLS.exists(), reason="needs ../shared/data/tau2-retail")
def test_the_tau2_tools_file_replays_get_item_details_as_a_plain_step(tmp_path: Path) -> None:
    rows = [["get_order_details", "get_item_details"], ["get_item_details", "get_order_details"]]
    result = _bench(tmp_path, SHARED_TOOLS, rows)
    assert result.exit_code == 0, result.output
    assert "no schema for step(s) get_item_details; replayed as plain steps" in result.stderr
    assert "TTFT mean ms" in result.stdout
