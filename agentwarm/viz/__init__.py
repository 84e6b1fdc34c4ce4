"""Drawing a workflow graph with what agentwarm learned about it and saw in traces.

:mod:`~agentwarm.viz.annotate` combines the graph, learned probabilities and trace figures
into a :class:`GraphInfo` (or builds one from traces alone, :func:`trace_graph_info`); the
outputs are a rich table (:mod:`~agentwarm.viz.table`), Graphviz DOT
(:mod:`~agentwarm.viz.dot`), Mermaid flowchart text (:mod:`~agentwarm.viz.mermaid`) and a
picture, SVG or PNG (:mod:`~agentwarm.viz.draw`: networkx layout, matplotlib drawing). This
package sits on top: it reads ``graphs`` and ``stats``, and nothing below imports it.
"""

from __future__ import annotations

from agentwarm.viz.annotate import EdgeInfo, GraphInfo, graph_info, trace_graph_info
from agentwarm.viz.dot import render_dot
from agentwarm.viz.draw import render_png, render_svg
from agentwarm.viz.mermaid import render_mermaid
from agentwarm.viz.table import render_text

__all__ = (
    "EdgeInfo",
    "GraphInfo",
    "graph_info",
    "render_dot",
    "render_mermaid",
    "render_png",
    "render_svg",
    "render_text",
    "trace_graph_info",
)
