"""What a drawing of a workflow graph shows: the compiled graph, learned ``P(target | source)``
and the per-edge figures read from traces, combined once into a :class:`GraphInfo`.

Every output (table, DOT, Mermaid, SVG/PNG) draws from a :class:`GraphInfo` with the same
encoding: an edge's width grows with its learned probability (:func:`edge_width`), its colour
runs from red (0% branch hit rate) through amber to green (100%), grey (:data:`NO_DATA`) when
the hit rate is unknown (:func:`hit_colour`), and its caption reads ``P · hits/taken``
(:func:`edge_caption`). An edge without a learned probability, or one seen in traces but not
declared, is dashed (:func:`is_dashed`).

A workflow declared nowhere (the gateway's learned heads) is drawn from its traces alone
(:func:`trace_graph_info`): the traced transitions are its edges, and ``P(target | source)`` is
observed, each transition's share of those out of its source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import networkx as nx

from agentwarm._spec import END, START

if TYPE_CHECKING:
    from agentwarm.graphs import CompiledGraph
    from agentwarm.stats import EdgeStats, TraceStats

__all__ = (
    "NO_DATA",
    "EdgeInfo",
    "GraphInfo",
    "edge_caption",
    "edge_width",
    "graph_info",
    "hit_colour",
    "is_dashed",
    "label",
    "probability_legend",
    "trace_graph_info",
)

NO_DATA = "#94a3b8"
"""The colour of an edge whose hit rate is unknown."""


@dataclass(frozen=True, slots=True)
class EdgeInfo:
    """One edge with what is known about it (``None`` = unknown)."""

    source: str
    target: str
    probability: float | None = None
    taken: int = 0
    prefetched: int = 0
    hits: int = 0
    declared: bool = True
    hit_rate: float | None = None
    """hits / taken as :attr:`agentwarm.stats.EdgeStats.hit_rate` defines it (``None``
    when never taken, for START and END edges, and when the traced runs prefetched nothing)."""


@dataclass(frozen=True, slots=True)
class GraphInfo:
    """A workflow graph ready to draw: nodes in declaration order (or :func:`trace_graph_info`'s),
    plus ``END``; edges."""

    name: str
    entry: str
    nodes: tuple[str, ...]
    edges: tuple[EdgeInfo, ...]
    has_probabilities: bool = False
    runs: int = 0
    visits: Mapping[str, int] = field(default_factory=dict)
    observed: bool = False
    """Whether trace statistics were given: without them taken/prefetched/hits are unknown."""
    probability_source: str = "learned"
    """Where the edges' ``P(target | source)`` comes from, as the legends name it: ``learned``
    (the predictor's estimate) or ``observed`` (the traced transitions' shares,
    :func:`trace_graph_info`)."""


def graph_info(
    workflow: CompiledGraph,
    probabilities: Mapping[tuple[str, str], float] | None = None,
    stats: TraceStats | None = None,
) -> GraphInfo:
    """Combine the compiled graph (an :class:`agentwarm.Workflow` is one), learned
    ``P(target | source)`` and trace statistics.

    Edges are the declared ones plus ``START → entry``; edges seen in ``stats`` but not declared
    are added with ``declared=False``. ``stats`` should be restricted to this workflow.
    """
    nodes = [str(n) for n in workflow.graph.nodes if n != END]
    if END in workflow.graph:
        nodes.append(END)
    pairs = [(START, workflow.entry), *((str(u), str(v)) for u, v in workflow.graph.edges)]
    declared = set(pairs)
    observed = {(e.from_node, e.to_node): e for e in stats.edges} if stats else {}
    extra = [k for k in observed if k not in declared and k[1] in nodes]
    probs = dict(probabilities or {})
    if probabilities is not None:
        probs.setdefault((START, workflow.entry), 1.0)
    edges = [
        _edge(u, v, probs.get((u, v)), observed.get((u, v)), declared=(u, v) in declared)
        for u, v in [*pairs, *extra]
    ]
    return GraphInfo(
        name=workflow.name,
        entry=workflow.entry,
        nodes=tuple(nodes),
        edges=tuple(edges),
        has_probabilities=probabilities is not None,
        runs=stats.runs if stats else 0,
        visits=_visits(edges) if stats else {},
        observed=stats is not None,
    )


def trace_graph_info(stats: TraceStats) -> GraphInfo:
    """The graph one workflow's traces show, with no declared graph (the gateway's runs, whose
    nodes are learned request heads).

    Nodes are the traced steps' nodes, plus END when completed runs moved there; edges are the
    transitions taken (edges only prefetched are left out), all counted as declared (the trace
    is the graph), each with its figures and ``P(target | source)`` = its share of the
    transitions taken out of ``source`` (into END included). The entry is the node most runs
    started at (the first node when no run's first step was traced). Nodes are in breadth-first
    order from START, the most taken edges first (nodes it does not reach after them, by name;
    END last); edges by source, most taken first.

    ``stats`` must be one workflow's (``compute_stats(..., workflow=name)``); raises ValueError
    when it holds several workflows or no step.
    """
    if len(stats.workflows) != 1 or not any(e.taken for e in stats.edges):
        what = ", ".join(stats.workflows) if stats.workflows else "none"
        raise ValueError(f"trace_graph_info needs the steps of one workflow (got: {what})")
    taken = sorted((e for e in stats.edges if e.taken), key=lambda e: (-e.taken, e.to_node))
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_node(START)
    graph.add_edges_from((e.from_node, e.to_node) for e in taken)
    reached = [v for _, v in nx.bfs_edges(graph, START)]
    rest = sorted(set(graph) - {START, *reached})
    nodes = [n for n in (*reached, *rest) if n != END] + ([END] if END in graph else [])
    order = {n: i for i, n in enumerate((START, *nodes))}
    out = {n: sum(e.taken for e in taken if e.from_node == n) for n in graph}
    edges = [
        _edge(e.from_node, e.to_node, e.taken / out[e.from_node], e, declared=True)
        for e in sorted(taken, key=lambda e: (order[e.from_node], -e.taken, order[e.to_node]))
    ]
    starts = [e for e in edges if e.source == START]
    return GraphInfo(
        name=stats.workflows[0],
        entry=starts[0].target if starts else nodes[0],
        nodes=tuple(nodes),
        edges=tuple(edges),
        has_probabilities=True,
        runs=stats.runs,
        visits=_visits(edges),
        observed=True,
        probability_source="observed",
    )


def _edge(
    u: str, v: str, probability: float | None, obs: EdgeStats | None, *, declared: bool
) -> EdgeInfo:
    return EdgeInfo(
        u,
        v,
        probability=probability,
        taken=obs.taken if obs else 0,
        prefetched=obs.prefetched if obs else 0,
        hits=obs.hits if obs else 0,
        declared=declared,
        hit_rate=obs.hit_rate if obs else None,
    )


def _visits(edges: list[EdgeInfo]) -> dict[str, int]:
    visits: dict[str, int] = {}
    for edge in edges:
        visits[edge.target] = visits.get(edge.target, 0) + edge.taken
    return visits


def probability_legend(info: GraphInfo) -> str:
    """What the edges' widths show: ``learned P(next | node)``, ``observed P(next | node)``,
    or ``no learned state``."""
    if not info.has_probabilities:
        return "no learned state"
    return f"{info.probability_source} P(next | node)"


def label(node: str) -> str:
    """A node's name as drawn: ``START`` and ``END`` for the two sentinels."""
    return {START: "START", END: "END"}.get(node, node)


def hit_colour(rate: float | None) -> str:
    """Hex colour for a hit rate: red (0) → amber (0.5) → green (1); grey when unknown."""
    if rate is None:
        return NO_DATA
    stops = ((0.0, (220, 38, 38)), (0.5, (245, 158, 11)), (1.0, (22, 163, 74)))
    r = min(max(rate, 0.0), 1.0)
    (a, ca), (b, cb) = (stops[0], stops[1]) if r <= 0.5 else (stops[1], stops[2])
    t = (r - a) / (b - a)
    rgb = (round(x + (y - x) * t) for x, y in zip(ca, cb, strict=True))
    return "#" + "".join(f"{c:02x}" for c in rgb)


def edge_caption(edge: EdgeInfo) -> str:
    """``"0.75 · 1/2"``: the learned probability and hits/taken, each when known; empty for
    the edge out of START."""
    if edge.source == START:
        return ""
    parts = []
    if edge.probability is not None:
        parts.append(f"{edge.probability:.2f}")
    if edge.taken:
        parts.append(f"{edge.hits}/{edge.taken}")
    return " · ".join(parts)


def edge_width(edge: EdgeInfo | float | None) -> float:
    """Line width in pixels: ``1 + 7 P`` (1.5 when P is unknown, 2 for the edge out of START);
    a bare number is a probability (the legend's samples)."""
    if isinstance(edge, EdgeInfo):
        if edge.source == START:
            return 2.0
        edge = edge.probability
    return 1.5 if edge is None else 1.0 + 7.0 * edge


def is_dashed(edge: EdgeInfo) -> bool:
    """Dashed: no learned probability, or seen in traces without being declared."""
    return edge.probability is None or not edge.declared
