"""The workflow graph as Graphviz DOT text (``dot -Tsvg`` lays it out), with the encoding of
:mod:`agentwarm.viz.annotate`."""

from __future__ import annotations

from agentwarm._spec import END, START
from agentwarm.viz.annotate import GraphInfo, edge_caption, edge_width, hit_colour, is_dashed

__all__ = ("render_dot",)


def _dot_id(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def render_dot(info: GraphInfo) -> str:
    """A DOT ``digraph``: START a dot, END a dark box, the entry node outlined in green."""
    lines = [
        f"digraph {_dot_id(info.name)} {{",
        "  rankdir=TB; nodesep=0.5; ranksep=0.6;",
        f'  label={_dot_id(info.name)}; labelloc=t; fontname="Helvetica";',
        '  node [shape=box, style="rounded,filled", fillcolor="#f8fafc", color="#334155", '
        'fontname="Helvetica"];',
        '  edge [fontname="Helvetica", fontsize=10, arrowsize=0.7];',
        f'  {_dot_id(START)} [shape=circle, label="", width=0.18, style=filled, '
        'fillcolor="#334155"];',
    ]
    for n in info.nodes:
        if n == END:
            lines.append(
                f'  {_dot_id(END)} [label="END", shape=box, style="rounded,filled", '
                'fillcolor="#1e293b", fontcolor="white"];'
            )
        else:
            extra = ', penwidth=2.5, color="#16a34a"' if n == info.entry else ""
            lines.append(f"  {_dot_id(n)} [label={_dot_id(n)}{extra}];")
    for e in info.edges:
        attrs = [f"penwidth={edge_width(e):.2f}", f'color="{hit_colour(e.hit_rate)}"']
        if caption := edge_caption(e):
            attrs.append(f"label={_dot_id(caption)}")
        if is_dashed(e):
            attrs.append("style=dashed")
        lines.append(f"  {_dot_id(e.source)} -> {_dot_id(e.target)} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
