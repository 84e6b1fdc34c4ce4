"""``agentwarm graph`` through the CLI runner."""

from __future__ import annotations

import json
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentwarm import END, load_workflow
from agentwarm import telemetry as tm
from agentwarm.cli import app
from agentwarm.predictors.markov import MarkovPredictor
from agentwarm.predictors.store import PredictorStore

runner = CliRunner()

FLOW = """
from agentwarm import node, END

@node(entry=True, next=["tool", "answer"])
async def plan(ctx):
    return "tool"

@node(next=["plan"])
async def tool(ctx):
    return "plan"

@node(next=[END])
async def answer(ctx):
    return END
"""


@pytest.fixture
def flow(tmp_path: Path) -> Path:
    path = tmp_path / "flow.py"
    path.write_text(textwrap.dedent(FLOW))
    return path


@pytest.fixture
def state_dir(tmp_path: Path, flow: Path) -> Path:
    """Learned state of two runs: plan→tool→plan→answer→END and plan→answer→END."""
    wf = load_workflow(flow)
    predictor = MarkovPredictor(3, half_life=None)
    for path in (["plan", "tool", "plan", "answer", END], ["plan", "answer", END]):
        for i in range(1, len(path)):
            predictor.observe(tuple(path[:i]), path[i])
    sdir = tmp_path / "state"
    PredictorStore(sdir).save(wf.name, predictor, nodes=sorted(wf.graph.nodes))
    return sdir


def _trace(path: Path, workflow: str = "flow") -> Path:
    """One run of ``workflow``: plan → tool (hit) → plan (hit) → answer (miss), no run span."""
    trace_id = workflow.encode().hex().ljust(32, "0")[:32]

    def step(i: int, frm: str, node: str, hit: bool) -> dict[str, object]:
        attrs = tm.step_attributes(workflow=workflow, run_id="r", index=i, from_node=frm,
                                   node=node, prefetched=hit, outcome="x")  # fmt: skip
        return {"traceId": trace_id, "spanId": f"{i:016x}", "name": f"invoke_agent {node}",
                "attributes": attrs}  # fmt: skip

    rows = [step(0, "__start__", "plan", False), step(1, "plan", "tool", True),
            step(2, "tool", "plan", True), step(3, "plan", "answer", False)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_dot_shows_first_order_probabilities(flow: Path, state_dir: Path) -> None:
    result = runner.invoke(app, ["graph", str(flow), "--state-dir", str(state_dir), "-f", "dot"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    # Order-1 estimate for plan: uniform prior, blended with overall counts (tool 1, answer 2),
    # then with plan's own counts (tool 1, answer 2), escape 2 per distinct successor:
    # P(tool) = (1 + 4 * 3/7) / 7 = 19/49, P(answer) = 30/49.
    assert '  "plan" -> "tool" [penwidth=3.71, color="#94a3b8", label="0.39"];' in lines
    assert '  "plan" -> "answer" [penwidth=5.29, color="#94a3b8", label="0.61"];' in lines
    assert '  "tool" -> "plan" [penwidth=8.00, color="#94a3b8", label="1.00"];' in lines
    assert result.stderr == ""


def test_text_with_traces(flow: Path, state_dir: Path, tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.jsonl")
    result = runner.invoke(
        app,
        ["graph", str(flow), "--state-dir", str(state_dir), "--trace", str(trace)],
        env={"COLUMNS": "150"},
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].rstrip() == (
        "flow: 4 nodes, entry plan, hit rates from 1 traced run"
    )
    assert "│ plan   │ tool   │ ████░░░░░░ 0.39 │     1 │          0 │    1 │     100% │" in (
        result.stdout
    )
    assert "│ plan   │ answer │ ██████░░░░ 0.61 │     1 │          0 │    0 │       0% │" in (
        result.stdout
    )


def test_svg_and_png_files(flow: Path, state_dir: Path, tmp_path: Path) -> None:
    svg = tmp_path / "g.svg"
    result = runner.invoke(app, ["graph", str(flow), "--state-dir", str(state_dir), "-o", str(svg)])
    assert result.exit_code == 0, result.output
    root = ET.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = {t.text for t in root.iter("{http://www.w3.org/2000/svg}text")}
    assert {"flow", "plan", "tool", "answer", "END", "0.39", "0.61", "1.00"} <= texts
    assert result.stderr == f"wrote {svg}\n"
    printed = runner.invoke(app, ["graph", str(flow), "--state-dir", str(state_dir), "-f", "svg"])
    assert printed.exit_code == 0, printed.output
    assert printed.stdout == svg.read_text()
    png = tmp_path / "g.png"
    result = runner.invoke(app, ["graph", str(flow), "--state-dir", str(state_dir), "-o", str(png)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert result.stderr == f"wrote {png}\n"


def test_mermaid_with_traces(flow: Path, state_dir: Path, tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.jsonl")
    args = ["graph", str(flow), "--state-dir", str(state_dir), "--trace", str(trace)]
    result = runner.invoke(app, [*args, "--format", "mermaid"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:4] == ["---", "title: flow", "---", "flowchart TD"]
    assert [line for line in lines if "->" in line] == [
        "  start --> plan",
        '  plan -->|"0.39 · 1/1"| tool',
        '  plan -->|"0.61 · 0/1"| answer',
        '  tool -->|"1.00 · 1/1"| plan',
        '  answer -->|"1.00"| stop',
    ]
    assert '  plan["plan<br/>2 visits"]' in lines
    assert "  linkStyle 1 stroke:#16a34a,stroke-width:3.71px" in lines  # 1/1 hits, P = 19/49
    assert "  linkStyle 2 stroke:#dc2626,stroke-width:5.29px" in lines  # 0/1 hits, P = 30/49
    assert result.stderr == ""
    mmd = tmp_path / "g.mmd"
    written = runner.invoke(app, [*args, "-o", str(mmd)])
    assert written.exit_code == 0, written.output
    assert mmd.read_text() == result.stdout
    assert written.stderr == f"wrote {mmd}\n"


def test_without_learned_state(flow: Path, tmp_path: Path) -> None:
    empty = tmp_path / "nothing"
    result = runner.invoke(app, ["graph", str(flow), "--state-dir", str(empty), "-f", "dot"])
    assert result.exit_code == 0
    assert "note: nothing learned yet for 'flow'" in result.stderr
    assert '  "plan" -> "tool" [penwidth=1.50, color="#94a3b8", style=dashed];' in (
        result.stdout.splitlines()
    )
    assert not empty.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.py"], "error: missing.py: no such file"),
        (["{flow}:nope"], "error: {flow}: has no workflow named 'nope'"),
        (["{flow}", "-f", "png"], "error: --format png writes a binary file: give -o FILE.png"),
        (["{flow}", "--trace", "{tmp}/none.jsonl"], "error: {tmp}/none.jsonl: no such trace file"),
    ],
)
def test_user_errors_are_one_line(
    flow: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    argv = [a.format(flow=flow, tmp=tmp_path) for a in args]
    result = runner.invoke(app, ["graph", *argv, "--state-dir", str(tmp_path / "s")])
    assert result.exit_code == 2
    lines = [x for x in result.stderr.splitlines() if not x.startswith("note:")]
    assert len(lines) == 1
    assert lines[0].startswith(message.format(flow=flow, tmp=tmp_path))


def test_bad_format_value_is_a_usage_error(flow: Path) -> None:
    result = runner.invoke(app, ["graph", str(flow), "-f", "jpeg"])
    assert result.exit_code == 2
    assert "Invalid value" in result.stderr


def test_trace_alone_in_every_format(tmp_path: Path) -> None:
    # No workflow file: the traced transitions are the graph, P their observed shares.
    trace = _trace(tmp_path / "t.jsonl")
    text = runner.invoke(app, ["graph", "--trace", str(trace)], env={"COLUMNS": "150"})
    assert text.exit_code == 0, text.output
    assert [line.rstrip() for line in text.stdout.splitlines()] == [
        "flow: 3 nodes, entry plan, hit rates from 1 traced run",
        "┏━━━━━━━┳━━━━━━━━┳━━━━━━━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━┳━━━━━━┳━━━━━━━━━━┓",
        "┃ from  ┃ to     ┃ P(to | from)    ┃ taken ┃ prefetched ┃ hits ┃ hit rate ┃",
        "┡━━━━━━━╇━━━━━━━━╇━━━━━━━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━╇━━━━━━╇━━━━━━━━━━┩",
        "│ START │ plan   │ ██████████ 1.00 │     1 │          0 │    0 │        — │",
        "│ plan  │ answer │ █████░░░░░ 0.50 │     1 │          0 │    0 │       0% │",
        "│ plan  │ tool   │ █████░░░░░ 0.50 │     1 │          0 │    1 │     100% │",
        "│ tool  │ plan   │ ██████████ 1.00 │     1 │          0 │    1 │     100% │",
        "└───────┴────────┴─────────────────┴───────┴────────────┴──────┴──────────┘",
    ]
    assert text.stderr == ""
    dot = runner.invoke(app, ["graph", "--trace", str(trace), "-f", "dot"])
    assert dot.exit_code == 0, dot.output
    assert [line for line in dot.stdout.splitlines() if "->" in line or "label=" in line] == [
        '  label="flow"; labelloc=t; fontname="Helvetica";',
        '  "__start__" [shape=circle, label="", width=0.18, style=filled, fillcolor="#334155"];',
        '  "plan" [label="plan", penwidth=2.5, color="#16a34a"];',
        '  "answer" [label="answer"];',
        '  "tool" [label="tool"];',
        '  "__start__" -> "plan" [penwidth=2.00, color="#94a3b8"];',
        '  "plan" -> "answer" [penwidth=4.50, color="#dc2626", label="0.50 · 0/1"];',
        '  "plan" -> "tool" [penwidth=4.50, color="#16a34a", label="0.50 · 1/1"];',
        '  "tool" -> "plan" [penwidth=8.00, color="#16a34a", label="1.00 · 1/1"];',
    ]
    mmd = tmp_path / "g.mmd"
    mermaid = runner.invoke(app, ["graph", "--trace", str(trace), "-o", str(mmd)])
    assert mermaid.exit_code == 0, mermaid.output
    assert mermaid.stderr == f"wrote {mmd}\n"
    lines = mmd.read_text().splitlines()
    assert lines[4] == (
        "  %% width: observed P(next | node) · colour: branch hit rate over 1 run (grey: no data)"
        " · label: P · hits/taken"
    )
    assert lines[5:13] == [
        '  start((" "))',
        '  plan["plan<br/>2 visits"]',
        '  answer["answer<br/>1 visit"]',
        '  tool["tool<br/>1 visit"]',
        "  start --> plan",
        '  plan -->|"0.50 · 0/1"| answer',
        '  plan -->|"0.50 · 1/1"| tool',
        '  tool -->|"1.00 · 1/1"| plan',
    ]
    svg = tmp_path / "g.svg"
    assert runner.invoke(app, ["graph", "--trace", str(trace), "-o", str(svg)]).exit_code == 0
    texts = {t.text for t in ET.parse(svg).getroot().iter("{http://www.w3.org/2000/svg}text")}
    assert {"flow", "plan", "tool", "answer", "0.50 · 0/1", "0.50 · 1/1", "1.00 · 1/1"} <= texts
    assert "END" not in texts  # the run has no run span: no edge into END
    png = tmp_path / "g.png"
    assert runner.invoke(app, ["graph", "--trace", str(trace), "-o", str(png)]).exit_code == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trace_of_several_workflows_needs_workflow(tmp_path: Path) -> None:
    traces = [str(_trace(tmp_path / "a.jsonl")), str(_trace(tmp_path / "b.jsonl", "other"))]
    args = ["graph", "--trace", traces[0], "--trace", traces[1], "-f", "mermaid"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: --trace {traces[0]}, {traces[1]}: the trace holds 2 workflows (flow, other); "
        "choose one with --workflow NAME\n"
    )
    chosen = runner.invoke(app, [*args, "--workflow", "other"])
    assert chosen.exit_code == 0, chosen.output
    assert chosen.stdout.splitlines()[1] == "title: other"
    unknown = runner.invoke(app, [*args, "--workflow", "nope"])
    assert unknown.exit_code == 2
    assert (
        unknown.stderr
        == "error: --workflow nope: no steps of it in the trace; it holds flow, other\n"
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "error: nothing to draw: give a workflow file (agentwarm graph FILE[:WORKFLOW]) or a "
             "trace (agentwarm graph --trace TRACE.jsonl)"),
        (["-f", "dot"], "error: nothing to draw: give a workflow file (agentwarm graph "
         "FILE[:WORKFLOW]) or a trace (agentwarm graph --trace TRACE.jsonl)"),
        (["{flow}", "--workflow", "flow"], "error: --workflow flow is for a graph drawn from "
         "traces alone; with a workflow file name the workflow as {flow}:flow"),
        (["--trace", "{trace}", "--state-dir", "{tmp}/s"], "error: --state-dir needs a workflow "
         "file (learned state is kept per declared workflow); without FILE the graph shows the "
         "transitions observed in the trace"),
        (["--trace", "{tmp}/foreign.jsonl"], "error: --trace {tmp}/foreign.jsonl: no workflow "
         "steps in the trace; trace runs with `agentwarm run --trace` or `agentwarm gateway "
         "--trace`"),
        (["--trace", "{tmp}/none.jsonl"], "error: {tmp}/none.jsonl: no such trace file"),
        (["--trace", "{trace}", "-f", "png"], "error: --format png writes a binary file: "
         "give -o FILE.png"),
    ],
)  # fmt: skip
def test_trace_alone_user_errors(flow: Path, tmp_path: Path, args: list[str], message: str) -> None:
    trace = _trace(tmp_path / "t.jsonl")
    (tmp_path / "foreign.jsonl").write_text('{"name": "GET /", "attributes": {}}\n')
    argv = [a.format(flow=flow, tmp=tmp_path, trace=trace) for a in args]
    result = runner.invoke(app, ["graph", *argv])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr == message.format(flow=flow, tmp=tmp_path) + "\n"
