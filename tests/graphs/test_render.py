"""Rendering a workflow graph: text, DOT, SVG layout, PNG."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from agentwarm import END, WorkflowGraph, node
from agentwarm.errors import ConfigError
from agentwarm.graphs.render import (
    NO_DATA,
    graph_info,
    hit_colour,
    layout,
    render_dot,
    render_png,
    render_svg,
    render_text,
)
from agentwarm.tracestats import StepSpan, compute_stats


@node(entry=True, next=["tool", "answer"])
async def plan(ctx: object) -> str:
    return "tool"


@node(next=["plan"])
async def tool(ctx: object) -> str:
    return "plan"


@node(next=["answer", END])
async def answer(ctx: object) -> str:
    return END


def workflow():  # type: ignore[no-untyped-def]
    return WorkflowGraph("agent").add(plan, tool, answer).compile()


PROBS = {("plan", "tool"): 0.75, ("plan", "answer"): 0.25, ("tool", "plan"): 1.0,
         ("answer", "answer"): 0.1, ("answer", END): 0.9}  # fmt: skip


def stats():  # type: ignore[no-untyped-def]
    def s(i: int, frm: str, to: str, hit: bool) -> StepSpan:
        return StepSpan("agent", "r", i, frm, to, hit, 0.1, 10, 5)

    steps = [
        s(0, "__start__", "plan", False),
        s(1, "plan", "tool", True),
        s(2, "tool", "plan", True),
        s(3, "plan", "tool", False),
        s(4, "tool", "plan", True),
        s(5, "plan", "answer", False),
    ]
    return compute_stats(steps, [])


def test_hit_colour_scale() -> None:
    assert hit_colour(0.0) == "#dc2626"
    assert hit_colour(0.5) == "#f59e0b"
    assert hit_colour(1.0) == "#16a34a"
    assert hit_colour(None) == NO_DATA
    assert hit_colour(0.25) == "#e86218"


def test_graph_info_combines_probabilities_and_hits() -> None:
    info = graph_info(workflow(), PROBS, stats())
    edges = {(e.source, e.target): e for e in info.edges}
    assert list(edges) == [
        ("__start__", "plan"),
        ("plan", "tool"),
        ("plan", "answer"),
        ("tool", "plan"),
        ("answer", "answer"),
        ("answer", END),
    ]
    assert edges[("__start__", "plan")].probability == 1.0
    assert (edges[("plan", "tool")].taken, edges[("plan", "tool")].hits) == (2, 1)
    assert edges[("plan", "tool")].hit_rate == 0.5
    assert edges[("tool", "plan")].hit_rate == 1.0
    assert edges[("plan", "answer")].hit_rate == 0.0
    assert edges[("answer", END)].hit_rate is None
    assert info.visits == {"plan": 3, "tool": 2, "answer": 1, END: 0}
    assert info.runs == 1
    bare = graph_info(workflow())
    assert not bare.has_probabilities
    assert all(e.probability is None and e.hit_rate is None for e in bare.edges)


def test_dot_output() -> None:
    dot = render_dot(graph_info(workflow(), PROBS, stats()))
    assert dot.startswith('digraph "agent" {\n')
    assert dot.endswith("}\n")
    lines = dot.splitlines()
    assert '  "plan" [label="plan", penwidth=2.5, color="#16a34a"];' in lines
    assert '  "plan" -> "tool" [penwidth=6.25, color="#f59e0b", label="0.75 · 1/2"];' in lines
    assert '  "tool" -> "plan" [penwidth=8.00, color="#16a34a", label="1.00 · 2/2"];' in lines
    assert '  "answer" -> "__end__" [penwidth=7.30, color="#94a3b8", label="0.90"];' in lines
    assert '  "__start__" -> "plan" [penwidth=2.00, color="#94a3b8"];' in lines
    no_probs = render_dot(graph_info(workflow()))
    assert '  "plan" -> "tool" [penwidth=1.50, color="#94a3b8", style=dashed];' in (
        no_probs.splitlines()
    )


def test_dot_quotes_names() -> None:
    @node(name='say "hi"', entry=True, next=[END])
    async def odd(ctx: object) -> str:
        return END

    dot = render_dot(graph_info(WorkflowGraph("q").add(odd).compile()))
    assert '"say \\"hi\\""' in dot


def test_text_table() -> None:
    console = Console(width=140, record=True)
    console.print(render_text(graph_info(workflow(), PROBS, stats())))
    text = console.export_text()
    title = text.splitlines()[0].rstrip()
    assert title == "agent: 4 nodes, entry plan, hit rates from 1 traced run"
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == [
        "START",
        "plan",
        "plan",
        "tool",
        "answer",
        "answer",
    ]
    assert "│ plan   │ tool   │ ████████░░ 0.75 │     2 │          0 │    1 │      50% │" in text


def _boxes(scene):  # type: ignore[no-untyped-def]
    return [r for r in scene.rects if r[5] in ("#f8fafc", "#1e293b")]


def test_layout_is_layered_and_non_overlapping() -> None:
    scene = layout(graph_info(workflow(), PROBS, stats()))
    boxes = _boxes(scene)
    assert len(boxes) == 4  # plan, tool, answer, END (START is a circle)
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert (
                a[0] + a[2] <= b[0]
                or b[0] + b[2] <= a[0]
                or a[1] + a[3] <= b[1]
                or (b[1] + b[3] <= a[1])
            )
    assert all(r[0] >= 0 and r[0] + r[2] <= scene.width for r in scene.rects)
    assert all(r[1] >= 0 and r[1] + r[3] <= scene.height for r in scene.rects)
    ys = sorted({round(b[1]) for b in boxes})
    assert len(ys) == 3  # plan | tool, answer | END
    assert len(scene.polygons) == 6  # one arrowhead per edge
    assert len(scene.circles) == 1


def test_arrowheads_touch_their_target() -> None:
    info = graph_info(workflow(), PROBS, stats())
    scene = layout(info)
    boxes = _boxes(scene)
    for tip in (poly[0][0] for poly in scene.polygons):
        near = min(
            max(b[0] - tip[0], 0, tip[0] - b[0] - b[2])
            + max(b[1] - tip[1], 0, tip[1] - b[1] - b[3])
            for b in boxes
        )
        assert near <= 3.0


def test_svg_is_well_formed_and_encodes_edges() -> None:
    svg = render_svg(graph_info(workflow(), PROBS, stats()))
    root = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    assert root.tag == f"{ns}svg"
    texts = [t.text for t in root.iter(f"{ns}text")]
    assert {"plan", "tool", "answer", "END", "agent"} <= set(texts)
    assert "0.75 · 1/2" in texts
    polygons = [p.get("fill", "") for p in root.iter(f"{ns}polygon")]
    assert sorted(polygons) == sorted(
        ["#94a3b8", "#f59e0b", "#dc2626", "#16a34a", NO_DATA, NO_DATA]
    )
    widths = {float(p.get("stroke-width", 0)) for p in root.iter(f"{ns}path")}
    assert {2.0, 6.25, 8.0, 7.3, 1.7, 2.75} <= widths


def test_png_needs_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ConfigError, match=r"pip install 'agentwarm\[plot\]'"):
        render_png(graph_info(workflow()), tmp_path / "g.png")


def test_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "g.png"
    render_png(graph_info(workflow(), PROBS, stats()), out, scale=1.0)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    scene = layout(graph_info(workflow(), PROBS, stats()))
    assert (width, height) == (round(scene.width), round(scene.height))
