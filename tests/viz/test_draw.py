"""The picture: networkx placement, matplotlib drawing, SVG and PNG files."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from matplotlib.colors import to_hex
from matplotlib.patches import FancyArrowPatch
from PIL import Image

from agentwarm import END, WorkflowGraph, node
from agentwarm.viz import graph_info, render_png, render_svg
from agentwarm.viz.draw import figure, layers, positions
from tests.viz._flow import info, workflow

SVG = "{http://www.w3.org/2000/svg}"


def test_layers_put_loops_aside_and_end_last() -> None:
    assert layers(info()) == [["__start__"], ["plan"], ["tool", "answer"], [END]]
    pos = positions(info())
    assert pos == {
        "__start__": pytest.approx((0.0, 0.0)),
        "plan": pytest.approx((0.0, 1.0)),
        "tool": pytest.approx((-0.5, 2.0)),
        "answer": pytest.approx((0.5, 2.0)),
        END: pytest.approx((0.0, 3.0)),
    }


def test_a_long_loop_keeps_its_nodes_in_order() -> None:
    @node(entry=True, next=["b"])
    async def a(ctx: object) -> str:
        return "b"

    @node(next=["c"])
    async def b(ctx: object) -> str:
        return "c"

    @node(next=["a", END])
    async def c(ctx: object) -> str:
        return END

    flow = graph_info(WorkflowGraph("ring").add(a, b, c).compile())
    assert layers(flow) == [["__start__"], ["a"], ["b"], ["c"], [END]]


def test_one_arrow_per_edge_in_its_hit_colour() -> None:
    fig = figure(info())
    arrows = [p for p in fig.axes[0].patches if isinstance(p, FancyArrowPatch)]
    assert len(arrows) == 6
    colours = sorted(to_hex(a.get_edgecolor()) for a in arrows)
    assert colours == sorted(["#94a3b8", "#f59e0b", "#dc2626", "#16a34a", "#94a3b8", "#94a3b8"])
    widths = sorted(round(a.get_linewidth() / 0.72, 2) for a in arrows)  # points -> pixels
    assert widths == [1.7, 2.0, 2.75, 6.25, 7.3, 8.0]


def test_svg_is_a_document_with_every_name_and_caption_as_text() -> None:
    svg = render_svg(info())
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert {"agent", "plan", "tool", "answer", "END"} <= set(texts)
    assert {"3 visits", "2 visits", "1 visit"} <= set(texts)
    assert {"0.75 · 1/2", "0.25 · 0/1", "1.00 · 2/2", "0.10", "0.90"} <= set(texts)
    assert "no data" in texts
    assert render_svg(info()) == svg  # the same graph gives the same file


def test_svg_shows_names_as_written() -> None:
    @node(name="a<b> $x$ & y", entry=True, next=[END])
    async def odd(ctx: object) -> str:
        return END

    root = ET.fromstring(render_svg(graph_info(WorkflowGraph("$odd$").add(odd).compile())))
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "a<b> $x$ & y" in texts
    assert "$odd$" in texts


def test_png(tmp_path: Path) -> None:
    out = tmp_path / "g.png"
    render_png(info(), out, scale=1.0)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with Image.open(out) as image:
        image.verify()
    with Image.open(out) as image:
        w, h = figure(info()).get_size_inches()
        assert image.size == (int(w * 100), int(h * 100))  # matplotlib truncates


def test_without_learned_state_or_traces(tmp_path: Path) -> None:
    root = ET.fromstring(render_svg(graph_info(workflow())))
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert {"plan", "tool", "answer", "END"} <= set(texts)
    assert "no learned state · no traces · label: P · hits/taken · grey: no data" in texts
    assert not any("visit" in (t or "") for t in texts)
