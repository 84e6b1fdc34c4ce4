"""The table (``agentwarm graph``'s default) and Graphviz DOT text."""

from __future__ import annotations

from rich.console import Console

from agentwarm import END, WorkflowGraph, node
from agentwarm.viz import graph_info, render_dot, render_text
from tests.viz._flow import info, workflow


def test_dot_output() -> None:
    dot = render_dot(info())
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
    console.print(render_text(info()))
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
    assert "│ answer │ END    │ █████████░ 0.90 │     0 │          0 │    0 │        — │" in text


def test_text_table_without_traces_says_unknown() -> None:
    console = Console(width=140, record=True)
    console.print(render_text(graph_info(workflow())))
    text = console.export_text()
    assert text.splitlines()[0].rstrip() == "agent: 4 nodes, entry plan"
    assert "│ plan   │ tool   │ —            │     — │          — │    — │        — │" in text
