"""Draw a workflow graph with learned transition probabilities and observed branch hit rates.

Three outputs from one :class:`GraphInfo`: a text table (:func:`render_text`), Graphviz DOT
(:func:`render_dot`), and a picture: SVG written here with a small layered layout
(:func:`render_svg`, no dependency) or PNG through matplotlib (:func:`render_png`, the optional
``agentwarm[plot]`` extra). Neither picture needs a system Graphviz.

In pictures an edge's width grows with the learned probability P(target | source) and its colour
runs from red (0% branch hit rate) through amber to green (100%); grey means no observation. The
entry node is fed by a small START dot; END is a dark pill. Back edges (loops) run on the right.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import TYPE_CHECKING

from agentwarm._fmt import NA, pct, plural
from agentwarm.errors import ConfigError
from agentwarm.graphs._node import END, START

if TYPE_CHECKING:
    from rich.table import Table

    from agentwarm.graphs._workflow import Workflow
    from agentwarm.tracestats import TraceStats

__all__ = (
    "EdgeInfo",
    "GraphInfo",
    "Scene",
    "graph_info",
    "hit_colour",
    "layout",
    "render_dot",
    "render_png",
    "render_svg",
    "render_text",
)

NO_DATA = "#94a3b8"


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
    prefetching: bool = True
    """Whether the traced runs prefetched anything (``EdgeStats.prefetching``)."""

    @property
    def hit_rate(self) -> float | None:
        """hits / taken; ``None`` when never taken, for START and END edges (never
        prefetched: a run's first step has no previous step, END has no prompt), and when the
        traced runs prefetched nothing."""
        if not self.taken or self.source == START or self.target == END or not self.prefetching:
            return None
        return self.hits / self.taken


@dataclass(frozen=True, slots=True)
class GraphInfo:
    """A workflow graph ready to draw: nodes in declaration order (plus ``END``), edges."""

    name: str
    entry: str
    nodes: tuple[str, ...]
    edges: tuple[EdgeInfo, ...]
    has_probabilities: bool = False
    runs: int = 0
    visits: Mapping[str, int] = field(default_factory=dict)
    observed: bool = False
    """Whether trace statistics were given: without them taken/prefetched/hits are unknown."""


def graph_info(
    workflow: Workflow,
    probabilities: Mapping[tuple[str, str], float] | None = None,
    stats: TraceStats | None = None,
) -> GraphInfo:
    """Combine the compiled graph, learned ``P(target | source)`` and trace statistics.

    Edges are the declared ones plus ``START → entry``; edges seen in ``stats`` but not declared
    are added with ``declared=False``. ``stats`` should be restricted to this workflow.
    """
    nodes = [n for n in workflow.graph.nodes if n != END]
    if END in workflow.graph:
        nodes.append(END)
    pairs = [(START, workflow.entry), *((str(u), str(v)) for u, v in workflow.graph.edges)]
    observed = {(e.from_node, e.to_node): e for e in stats.edges} if stats else {}
    extra = [k for k in observed if k not in set(pairs) and k[1] in nodes]
    probs = dict(probabilities or {})
    if probabilities is not None:
        probs.setdefault((START, workflow.entry), 1.0)
    edges = []
    for u, v in [*pairs, *extra]:
        obs = observed.get((u, v))
        edges.append(
            EdgeInfo(
                u,
                v,
                probability=probs.get((u, v)),
                taken=obs.taken if obs else 0,
                prefetched=obs.prefetched if obs else 0,
                hits=obs.hits if obs else 0,
                declared=(u, v) in pairs,
                prefetching=obs.prefetching if obs else True,
            )
        )
    visits: dict[str, int] = {}
    for edge in edges:
        visits[edge.target] = visits.get(edge.target, 0) + edge.taken
    return GraphInfo(
        name=workflow.name,
        entry=workflow.entry,
        nodes=tuple(nodes),
        edges=tuple(edges),
        has_probabilities=probabilities is not None,
        runs=stats.runs if stats else 0,
        visits=visits if stats else {},
        observed=stats is not None,
    )


def _label(node: str) -> str:
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


# --- text and DOT -------------------------------------------------------------------------------


def render_text(info: GraphInfo) -> Table:
    """A rich table: one row per edge, grouped by source, most likely first."""
    from rich.table import Table
    from rich.text import Text

    title = f"{info.name}: {len(info.nodes)} nodes, entry {info.entry}"
    if info.runs:
        title += f", hit rates from {plural(info.runs, 'traced run')}"
    table = Table(title=title, title_justify="left", header_style="bold")
    for col, justify in (("from", "left"), ("to", "left"), ("P(to | from)", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for col in ("taken", "prefetched", "hits", "hit rate"):
        table.add_column(col, justify="right")
    order = {n: i for i, n in enumerate((START, *info.nodes))}
    rows = sorted(info.edges, key=lambda e: (order.get(e.source, 1 << 30), -(e.probability or 0.0)))
    for e in rows:
        p = e.probability
        bar = "" if p is None else "█" * round(p * 10) + "░" * (10 - round(p * 10)) + f" {p:.2f}"
        rate = e.hit_rate
        table.add_row(
            _label(e.source),
            _label(e.target) + ("" if e.declared else " (undeclared)"),
            bar or NA,
            *((str(e.taken), str(e.prefetched), str(e.hits)) if info.observed else (NA,) * 3),
            Text(pct(rate), style="dim" if rate is None else hit_colour(rate)),
        )
    return table


def _dot_id(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _edge_caption(e: EdgeInfo) -> str:
    if e.source == START:
        return ""
    parts = []
    if e.probability is not None:
        parts.append(f"{e.probability:.2f}")
    if e.taken:
        parts.append(f"{e.hits}/{e.taken}")
    return " · ".join(parts)


def _width(e: EdgeInfo | float | None) -> float:
    p = e.probability if isinstance(e, EdgeInfo) else e
    if isinstance(e, EdgeInfo) and e.source == START:
        return 2.0
    return 1.5 if p is None else 1.0 + 7.0 * p


def render_dot(info: GraphInfo) -> str:
    """Graphviz DOT with the same encoding as the pictures (``dot -Tsvg`` renders it)."""
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
        attrs = [f"penwidth={_width(e):.2f}", f'color="{hit_colour(e.hit_rate)}"']
        if caption := _edge_caption(e):
            attrs.append(f"label={_dot_id(caption)}")
        if e.probability is None or not e.declared:
            attrs.append("style=dashed")
        lines.append(f"  {_dot_id(e.source)} -> {_dot_id(e.target)} [{', '.join(attrs)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- layout and scene ---------------------------------------------------------------------------

Point = tuple[float, float]
NODE_H, LAYER_GAP, NODE_GAP, MARGIN, FONT = 40.0, 118.0, 40.0, 28.0, 13.0


@dataclass(frozen=True, slots=True)
class Box:
    node: str
    x: float
    y: float
    w: float
    h: float

    @property
    def cx(self) -> float:
        return self.x + self.w / 2


@dataclass
class Scene:
    """Drawing primitives in pixel coordinates (y grows downwards), shared by SVG and PNG."""

    width: float
    height: float
    rects: list[tuple[float, float, float, float, float, str, str, float]] = field(
        default_factory=list
    )  # x, y, w, h, radius, fill, stroke, stroke width
    circles: list[tuple[float, float, float, str]] = field(default_factory=list)
    curves: list[tuple[tuple[Point, Point, Point, Point], str, float, bool]] = field(
        default_factory=list
    )  # bezier, colour, width, dashed
    polygons: list[tuple[tuple[Point, ...], str]] = field(default_factory=list)
    texts: list[tuple[float, float, str, float, str, str, bool]] = field(
        default_factory=list
    )  # x, y, text, size, anchor (start|middle), colour, bold


def _text_w(text: str, size: float = FONT) -> float:
    return len(text) * size * 0.64


def _layers(info: GraphInfo) -> tuple[dict[str, int], set[tuple[str, str]]]:
    """Longest-path layers after removing the back edges found by a DFS from START."""
    succ: dict[str, list[str]] = {n: [] for n in (START, *info.nodes)}
    for e in info.edges:
        succ.setdefault(e.source, []).append(e.target)
    back: set[tuple[str, str]] = set()
    state: dict[str, int] = {}
    order: list[str] = []
    for root in (START, *info.nodes):
        if root in state:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, i = stack.pop()
            if i < len(succ[node]):
                stack.append((node, i + 1))
                nxt = succ[node][i]
                if state.get(nxt) == 1:
                    back.add((node, nxt))
                elif nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                order.append(node)
    layer = dict.fromkeys(succ, 0)
    for node in reversed(order):  # reverse post-order is a topological order of the DAG
        for nxt in succ[node]:
            if (node, nxt) not in back and nxt != node:
                layer[nxt] = max(layer[nxt], layer[node] + 1)
    if END in layer:
        layer[END] = max((v for k, v in layer.items() if k != END), default=0) + 1
    return layer, back


def _order(info: GraphInfo, layer: dict[str, int]) -> list[list[str]]:
    """Nodes per layer, ordered by a few barycenter sweeps to reduce crossings."""
    rows: list[list[str]] = [[] for _ in range(max(layer.values()) + 1)]
    for n in (START, *info.nodes):
        rows[layer[n]].append(n)
    nbrs: dict[str, list[str]] = {n: [] for n in layer}
    for e in info.edges:
        if e.source != e.target:
            nbrs[e.source].append(e.target)
            nbrs[e.target].append(e.source)
    for sweep in range(4):
        rng = range(1, len(rows)) if sweep % 2 == 0 else range(len(rows) - 2, -1, -1)
        for i in rng:
            ref = i - 1 if sweep % 2 == 0 else i + 1
            pos = {n: k for k, n in enumerate(rows[ref])}
            here = {n: float(k) for k, n in enumerate(rows[i])}

            def bary(n: str, pos: dict[str, int] = pos, here: dict[str, float] = here) -> float:
                ks = [pos[m] for m in nbrs[n] if m in pos]
                return sum(ks) / len(ks) if ks else here[n]

            rows[i].sort(key=bary)
    return rows


def _bezier_at(b: tuple[Point, Point, Point, Point], t: float) -> Point:
    (x0, y0), (x1, y1), (x2, y2), (x3, y3) = b
    u = 1 - t
    return (
        u**3 * x0 + 3 * u * u * t * x1 + 3 * u * t * t * x2 + t**3 * x3,
        u**3 * y0 + 3 * u * u * t * y1 + 3 * u * t * t * y2 + t**3 * y3,
    )


def _arrow(tip: Point, frm: Point, size: float) -> tuple[Point, ...]:
    dx, dy = tip[0] - frm[0], tip[1] - frm[1]
    d = math.hypot(dx, dy) or 1.0
    ux, uy = dx / d, dy / d
    bx, by = tip[0] - ux * size, tip[1] - uy * size
    return (
        tip,
        (bx - uy * size * 0.55, by + ux * size * 0.55),
        (bx + uy * size * 0.55, by - ux * size * 0.55),
    )


def _spread(n: int, k: int, w: float) -> float:
    """Offset of port ``k`` of ``n`` across a box side of width ``w``."""
    return 0.0 if n <= 1 else (k / (n - 1) - 0.5) * min(w * 0.6, 18.0 * (n - 1))


Segment = tuple[Point, Point, Point, Point]


def _down(p0: Point, p3: Point) -> Segment:
    """A cubic that leaves ``p0`` and enters ``p3`` vertically."""
    dy = (p3[1] - p0[1]) * 0.5
    return p0, (p0[0], p0[1] + dy), (p3[0], p3[1] - dy), p3


def _gap_x(row: list[Box], x: float, lo: float, hi: float) -> float:
    """The free x in a row of boxes (between or beside them) nearest to ``x``."""
    gaps = [(lo, row[0].x)] if row else [(lo, hi)]
    gaps += [(a.x + a.w, b.x) for a, b in itertools.pairwise(row)]
    if row:
        gaps.append((row[-1].x + row[-1].w, hi))
    best = min(gaps, key=lambda g: abs(min(max(x, g[0] + 12), g[1] - 12) - x))
    return min(max(x, best[0] + 12), best[1] - 12)


def layout(info: GraphInfo) -> Scene:
    """Place nodes in layers and route edges; the result is backend-independent."""
    layer, back = _layers(info)
    rows = _order(info, layer)
    widths = {n: 14.0 if n == START else max(84.0, _text_w(_label(n)) + 32.0) for n in layer}
    row_w = [sum(widths[n] for n in r) + NODE_GAP * (len(r) - 1) for r in rows]
    gutter = 40.0 + 18.0 * len(back)
    inner = max(max(row_w), 430.0 - 2 * gutter)
    width = MARGIN * 2 + inner + 2 * gutter
    row_y = [MARGIN + 48.0]
    for r in rows[:-1]:
        row_y.append(row_y[-1] + (64.0 if r == [START] else LAYER_GAP))
    boxes: dict[str, Box] = {}
    for i, r in enumerate(rows):
        x = MARGIN + gutter + (inner - row_w[i]) / 2
        for n in r:
            h = 14.0 if n == START else NODE_H
            boxes[n] = Box(n, x, row_y[i] + (NODE_H - h) / 2, widths[n], h)
            x += widths[n] + NODE_GAP
    height = row_y[-1] + NODE_H + 64.0
    scene = Scene(width, height)
    learned = info.has_probabilities
    subtitle = "edge width: learned P(next | node)" if learned else "no learned state"
    runs = plural(info.runs, "run")
    subtitle += f" · colour: branch hit rate over {runs}" if info.runs else " · no traces"
    subtitle += " · label: P · hits/taken"
    scene.texts.append((MARGIN, MARGIN + 4, info.name, 18.0, "start", "#0f172a", True))
    scene.texts.append((MARGIN, MARGIN + 24, subtitle, 11.0, "start", "#64748b", False))

    # Ports: forward edges leave a box's bottom and enter the next box's top; a loop back to
    # the previous layer ("lens") leaves the top and enters the bottom, beside its forward twin.
    ports: dict[tuple[str, str], list[tuple[float, int, int]]] = {}
    routes: list[str] = []
    for k, e in enumerate(info.edges):
        a, b = boxes[e.source], boxes[e.target]
        if e.source == e.target:
            routes.append("self")
        elif (e.source, e.target) not in back:
            routes.append("down")
            ports.setdefault((e.source, "bottom"), []).append((b.cx, 0, k))
            ports.setdefault((e.target, "top"), []).append((a.cx, 0, k))
        elif layer[e.source] - layer[e.target] == 1:
            routes.append("lens")
            ports.setdefault((e.source, "top"), []).append((b.cx, 1, k))
            ports.setdefault((e.target, "bottom"), []).append((a.cx, 1, k))
        else:
            routes.append("side")
    port_x: dict[tuple[int, str], float] = {}
    for (n, side), lst in ports.items():
        lst.sort()
        for i, (_, _, k) in enumerate(lst):
            port_x[(k, side)] = boxes[n].cx + _spread(len(lst), i, boxes[n].w)
    by_row = [[boxes[n] for n in r] for r in rows]
    lo_x, hi_x = MARGIN + gutter - 30, MARGIN + gutter + inner + 30
    centre = MARGIN + gutter + inner / 2
    side_rank = {"left": 0, "right": 0}
    paths: list[tuple[EdgeInfo, list[Segment]]] = []
    for k, e in enumerate(info.edges):
        a, b = boxes[e.source], boxes[e.target]
        route = routes[k]
        segs: list[Segment]
        if route == "self":
            x0, y0 = a.x + a.w, a.y + a.h * 0.3
            segs = [((x0, y0), (x0 + 46, y0 - 22), (x0 + 46, a.y + a.h * 0.7 + 22),
                     (x0 + 2, a.y + a.h * 0.7))]  # fmt: skip
        elif route == "down":
            pts = [(port_x[(k, "bottom")], a.y + a.h)]
            end = (port_x[(k, "top")], b.y - 2)
            for i in range(layer[e.source] + 1, layer[e.target]):
                t = (i - layer[e.source]) / (layer[e.target] - layer[e.source])
                guess = pts[0][0] + (end[0] - pts[0][0]) * t
                gx = _gap_x(by_row[i], guess, lo_x, hi_x)
                pts += [(gx, row_y[i] - 6), (gx, row_y[i] + NODE_H + 6)]
            pts.append(end)
            segs = [_down(p, q) for p, q in itertools.pairwise(pts)]
        elif route == "lens":
            x0, x3 = port_x[(k, "top")], port_x[(k, "bottom")]
            p0, p3 = (x0, a.y), (x3, b.y + b.h + 2)
            dy = (p0[1] - p3[1]) * 0.45
            segs = [(p0, (x0 + 14, p0[1] - dy), (x3 + 14, p3[1] + dy), p3)]
        else:
            side = "right" if (a.cx + b.cx) / 2 >= centre else "left"
            lo, hi = sorted((layer[e.source], layer[e.target]))
            span = [boxes[n] for n in layer if lo <= layer[n] <= hi]
            rank = side_rank[side] = side_rank[side] + 1
            if side == "right":
                gx = max(bx.x + bx.w for bx in span) + 28.0 + 18.0 * (rank - 1)
                p0, p3 = (a.x + a.w, a.y + a.h / 2), (b.x + b.w + 2, b.y + b.h / 2)
            else:
                gx = min(bx.x for bx in span) - 28.0 - 18.0 * (rank - 1)
                p0, p3 = (a.x, a.y + a.h / 2), (b.x - 2, b.y + b.h / 2)
            segs = [(p0, (gx, p0[1]), (gx, p3[1]), p3)]
        paths.append((e, segs))
        colour, w = hit_colour(e.hit_rate), _width(e)
        dashed = e.probability is None or not e.declared
        last = segs[-1]
        size = 7.0 + w * 0.9
        tip, base = last[3], _bezier_at(last, 0.97)
        d = math.hypot(tip[0] - base[0], tip[1] - base[1]) or 1.0
        shaft_end = (tip[0] - (tip[0] - base[0]) / d * size * 0.8,
                     tip[1] - (tip[1] - base[1]) / d * size * 0.8)  # fmt: skip
        for seg in segs[:-1]:
            scene.curves.append((seg, colour, w, dashed))
        scene.curves.append(((last[0], last[1], last[2], shaft_end), colour, w, dashed))
        scene.polygons.append((_arrow(tip, base, size), colour))
    _place_labels(scene, paths, list(boxes.values()))
    for n, bx in boxes.items():
        if n == START:
            scene.circles.append((bx.cx, bx.y + bx.h / 2, 7.0, "#334155"))
        elif n == END:
            scene.rects.append((bx.x, bx.y, bx.w, bx.h, bx.h / 2, "#1e293b", "#1e293b", 1.0))
            scene.texts.append((bx.cx, bx.y + bx.h / 2, "END", FONT, "middle", "#ffffff", True))
        else:
            entry = n == info.entry
            stroke, sw = ("#16a34a", 2.5) if entry else ("#475569", 1.2)
            scene.rects.append((bx.x, bx.y, bx.w, bx.h, 9.0, "#f8fafc", stroke, sw))
            ty = bx.y + bx.h / 2 - (6 if info.visits else 0)
            scene.texts.append((bx.cx, ty, n, FONT, "middle", "#0f172a", entry))
            if info.visits:
                v = plural(info.visits.get(n, 0), "visit")
                scene.texts.append((bx.cx, ty + 14, v, 9.5, "middle", "#64748b", False))
    _legend(scene, MARGIN, height - 22.0)
    return scene


def _overlaps(r: tuple[float, float, float, float], q: tuple[float, float, float, float]) -> bool:
    return r[0] < q[0] + q[2] and q[0] < r[0] + r[2] and r[1] < q[1] + q[3] and q[1] < r[1] + r[3]


def _place_labels(
    scene: Scene, paths: list[tuple[EdgeInfo, list[Segment]]], boxes: list[Box]
) -> None:
    """Caption each edge near its middle, sliding along it to avoid nodes and other captions."""
    taken = [(b.x - 3, b.y - 3, b.w + 6, b.h + 6) for b in boxes]
    ranked = sorted(paths, key=lambda ep: -(ep[0].probability or 0.0))
    for e, segs in ranked:
        curve = segs[0]
        caption = _edge_caption(e)
        if not caption:
            continue
        tw, th = _text_w(caption, 10.0) + 8, 15.0
        spot = None
        for t in (0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8, 0.12, 0.88):
            x, y = _bezier_at(curve, t)
            rect = (x - tw / 2, y - th / 2, tw, th)
            if not any(_overlaps(rect, q) for q in taken):
                spot = rect
                break
        if spot is None:
            x, y = _bezier_at(curve, 0.5)
            spot = (x - tw / 2, y - th / 2, tw, th)
        taken.append(spot)
        x, y, w, h = spot
        scene.rects.append((x, y, w, h, 4.0, "#ffffffe6", "none", 0.0))
        scene.texts.append((x + w / 2, y + h / 2, caption, 10.0, "middle", "#334155", False))


def _legend(scene: Scene, x: float, y: float) -> None:
    for i, p in enumerate((0.25, 0.5, 1.0)):
        x0 = x + i * 62
        scene.curves.append((((x0, y), (x0 + 10, y), (x0 + 20, y), (x0 + 28, y)), "#64748b",
                             _width(p), False))  # fmt: skip
        scene.texts.append((x0 + 31, y, f"{p:g}", 9.5, "start", "#64748b", False))
    x1 = x + 200
    scene.texts.append((x1, y, "hit", 9.5, "start", "#64748b", False))
    for i, r in enumerate((0.0, 0.25, 0.5, 0.75, 1.0)):
        scene.rects.append((x1 + 22 + i * 22, y - 5, 20, 10, 2.0, hit_colour(r), "none", 0.0))
    scene.texts.append((x1 + 22, y + 14, "0%", 8.5, "start", "#64748b", False))
    scene.texts.append((x1 + 130, y + 14, "100%", 8.5, "end", "#64748b", False))
    scene.rects.append((x1 + 140, y - 5, 20, 10, 2.0, NO_DATA, "none", 0.0))
    scene.texts.append((x1 + 164, y, "no data", 9.5, "start", "#64748b", False))


# --- backends -----------------------------------------------------------------------------------


def _svg_colour(c: str) -> str:
    if len(c) == 9:  # #rrggbbaa
        return f'{c[:7]}" fill-opacity="{int(c[7:], 16) / 255:.2f}'
    return c


def render_svg(info: GraphInfo) -> str:
    """A standalone SVG document."""
    s = layout(info)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{s.width:.0f}" height="{s.height:.0f}" '
        f'viewBox="0 0 {s.width:.0f} {s.height:.0f}" '
        'font-family="Helvetica, Arial, sans-serif">',
        f"<title>{escape(info.name)}</title>",
        f'<rect width="{s.width:.0f}" height="{s.height:.0f}" fill="#ffffff"/>',
    ]
    for (p0, p1, p2, p3), colour, w, dashed in s.curves:
        dash = ' stroke-dasharray="6 4"' if dashed else ""
        out.append(
            f'<path d="M{p0[0]:.1f},{p0[1]:.1f} C{p1[0]:.1f},{p1[1]:.1f} {p2[0]:.1f},{p2[1]:.1f} '
            f'{p3[0]:.1f},{p3[1]:.1f}" fill="none" stroke="{colour}" stroke-width="{w:.2f}" '
            f'stroke-linecap="round" stroke-opacity="0.9"{dash}/>'
        )
    for pts, colour in s.polygons:
        points = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
        out.append(f'<polygon points="{points}" fill="{colour}"/>')
    for x, y, w, h, r, fill, stroke, sw in s.rects:
        out.append(
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="{r:.1f}" '
            f'fill="{_svg_colour(fill)}" stroke="{stroke}" stroke-width="{sw:.1f}"/>'
        )
    for cx, cy, r, fill in s.circles:
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{r:.1f}" fill="{fill}"/>')
    for x, y, text, size, anchor, colour, bold in s.texts:
        weight = ' font-weight="bold"' if bold else ""
        out.append(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size:g}" text-anchor="{anchor}" '
            f'dominant-baseline="central" fill="{colour}"{weight}>{escape(text)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def render_png(info: GraphInfo, path: str | Path, *, scale: float = 2.0) -> None:
    """Write a PNG of the same picture with matplotlib (``pip install 'agentwarm[plot]'``)."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
        from matplotlib import patches
        from matplotlib.path import Path as MplPath
    except ImportError as exc:
        raise ConfigError(
            "PNG output needs matplotlib: pip install 'agentwarm[plot]' (or use --format svg)"
        ) from exc
    s = layout(info)
    pt = 72.0 / 100.0  # 1 px at 100 dpi in points
    fig = plt.figure(figsize=(s.width / 100, s.height / 100), dpi=100)
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(0, s.width)
    ax.set_ylim(s.height, 0)
    ax.axis("off")
    for bez, colour, w, dashed in s.curves:
        codes = [MplPath.MOVETO, MplPath.CURVE4, MplPath.CURVE4, MplPath.CURVE4]
        ax.add_patch(patches.PathPatch(MplPath(list(bez), codes), fill=False, edgecolor=colour,
                                       lw=w * pt, ls="--" if dashed else "-", alpha=0.9,
                                       capstyle="round"))  # fmt: skip
    for pts, colour in s.polygons:
        ax.add_patch(patches.Polygon(list(pts), closed=True, facecolor=colour, edgecolor="none"))
    for x, y, w, h, r, fill, stroke, sw in s.rects:
        ax.add_patch(
            patches.FancyBboxPatch(
                (x, y), w, h, boxstyle=f"round,pad=0,rounding_size={min(r, h / 2, w / 2)}",
                facecolor=fill, edgecolor=stroke if stroke != "none" else "none",
                lw=sw * pt,
            )
        )  # fmt: skip
    for cx, cy, r, fill in s.circles:
        ax.add_patch(patches.Circle((cx, cy), r, facecolor=fill, edgecolor="none"))
    for x, y, text, size, anchor, colour, bold in s.texts:
        ha = {"start": "left", "middle": "center", "end": "right"}[anchor]
        ax.text(x, y, text, fontsize=size * pt, ha=ha, va="center", color=colour,
                fontweight="bold" if bold else "normal", family="sans-serif")  # fmt: skip
    fig.savefig(str(path), dpi=100 * scale, facecolor="white")
    plt.close(fig)
