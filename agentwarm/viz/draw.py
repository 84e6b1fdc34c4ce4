"""The workflow graph as a picture: networkx places the nodes, matplotlib draws and writes the
SVG or PNG.

Placement (:func:`layers`, :func:`positions`): the back edges a depth-first search from START
finds (loops) are set aside, ``networkx.topological_generations`` of what remains gives each
node its layer (END alone in the last), nodes within a layer are ordered by barycentre sweeps
(the mean position of their neighbours), and ``networkx.multipartite_layout`` spaces them
evenly, layer under layer. Drawing: rounded boxes for nodes (the entry outlined in green, END
a dark pill, START a dot) and matplotlib ``FancyArrowPatch`` edges clipped to the boxes, with
the encoding of :mod:`agentwarm.viz.annotate`. An edge whose twin runs the other way is bent
(each to its own side), one across several layers or within one is bent as little as keeps it
off the other boxes, a self-loop turns on the box's right side; captions take the first free
spot along their edge.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx

from agentwarm._fmt import plural
from agentwarm._spec import END, START
from agentwarm.viz.annotate import (
    NO_DATA,
    GraphInfo,
    edge_caption,
    edge_width,
    hit_colour,
    is_dashed,
    label,
    probability_legend,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

__all__ = ("figure", "layers", "positions", "render_png", "render_svg")

PT = 0.72
"""Points per pixel at 100 dpi: widths in :mod:`agentwarm.viz.annotate` are pixels."""
NAME_PT, SMALL_PT, CAPTION_PT = 10.0, 7.0, 7.5
BOX_H, LAYER_H, START_GAIN, GAP, MARGIN = 0.42, 1.2, 0.5, 0.4, 0.4  # inches
INK, MUTED, BOX_FILL, BOX_EDGE, DARK, ENTRY = (
    "#0f172a", "#64748b", "#f8fafc", "#475569", "#1e293b", "#16a34a"
)  # fmt: skip


def _back_edges(graph: nx.DiGraph[str]) -> set[tuple[str, str]]:
    """Edges into a node still on the depth-first stack (START first): the loops."""
    back: set[tuple[str, str]] = set()
    on_stack: set[str] = set()
    for u, v, kind in nx.dfs_labeled_edges(graph):
        if kind == "forward":
            on_stack.add(v)
        elif kind == "reverse":
            on_stack.discard(v)
        elif kind == "nontree" and v in on_stack:
            back.add((u, v))
    return back


def _graph(info: GraphInfo) -> nx.DiGraph[str]:
    graph: nx.DiGraph[str] = nx.DiGraph()
    graph.add_nodes_from((START, *info.nodes))
    graph.add_edges_from((e.source, e.target) for e in info.edges)
    return graph


def _centred(row: list[str]) -> dict[str, float]:
    return {n: i - (len(row) - 1) / 2 for i, n in enumerate(row)}


def layers(info: GraphInfo) -> list[list[str]]:
    """Nodes per layer, top to bottom: START's first, END alone in the last; within a layer,
    ordered by four alternating barycentre sweeps (the mean position of each node's neighbours
    in the layer above, then below) to reduce crossings."""
    graph = _graph(info)
    dag = graph.copy()
    dag.remove_edges_from(_back_edges(graph))
    dag.remove_edges_from(list(nx.selfloop_edges(dag)))
    if END in dag:
        dag.remove_node(END)
    declared = {n: i for i, n in enumerate(graph)}
    rows = [sorted(gen, key=declared.__getitem__) for gen in nx.topological_generations(dag)]
    if END in graph:
        rows.append([END])
    neighbours = {n: set(graph.predecessors(n)) | set(graph.successors(n)) for n in graph}
    for sweep in range(4):
        down = sweep % 2 == 0
        for k in range(1, len(rows)) if down else range(len(rows) - 2, -1, -1):
            ref, here = _centred(rows[k - 1 if down else k + 1]), _centred(rows[k])

            def barycentre(
                n: str, ref: dict[str, float] = ref, here: dict[str, float] = here
            ) -> float:
                xs = [ref[m] for m in neighbours[n] if m in ref]
                return sum(xs) / len(xs) if xs else here[n]

            rows[k].sort(key=barycentre)
    return rows


def positions(
    info: GraphInfo, rows: list[list[str]] | None = None
) -> dict[str, tuple[float, float]]:
    """Node centres in slot units: x counts slots from the middle of its layer, y is the layer
    (0 at the top), as ``networkx.multipartite_layout`` spaces :func:`layers` (or ``rows``)."""
    rows = rows or layers(info)
    pos = nx.multipartite_layout(
        _graph(info), subset_key=dict(enumerate(rows)), align="horizontal", scale=1.0
    )
    step = float(pos[rows[1][0]][1] - pos[rows[0][0]][1]) if len(rows) > 1 else 1.0
    y0 = float(pos[rows[0][0]][1])
    return {n: (float(x) / step, (float(y) - y0) / step) for n, (x, y) in pos.items()}


def _text_w(text: str, size: float, bold: bool = False) -> float:
    """Width of ``text`` in inches at ``size`` points."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import text_to_path

    prop = FontProperties(family="sans-serif", weight="bold" if bold else "normal", size=size)
    return float(text_to_path.get_text_width_height_descent(text, prop, ismath=False)[0]) / 72


def _subtitle(info: GraphInfo) -> str:
    legend = probability_legend(info)
    text = f"edge width: {legend}" if info.has_probabilities else legend
    if info.runs:
        text += f" · colour: branch hit rate over {plural(info.runs, 'run')}"
    else:
        text += " · no traces"
    return text + " · label: P · hits/taken · grey: no data"


Point = tuple[float, float]
Rect = tuple[float, float, float, float]
"""Centre x, centre y, width, height, in inches."""


def _overlaps(a: Rect, b: Rect) -> bool:
    return abs(a[0] - b[0]) * 2 < a[2] + b[2] and abs(a[1] - b[1]) * 2 < a[3] + b[3]


def _free_spot(spots: list[Point], size: tuple[float, float], placed: list[Rect]) -> Rect:
    """The first spot on the edge (or beside it) where a caption of ``size`` covers no box and
    no other caption, else the least crowded one; it is added to ``placed``."""
    w = size[0] / 2 + 0.06
    rects = [(x + dx, y, *size) for dx in (0.0, w, -w, 2 * w, -2 * w) for x, y in spots]
    best = min(rects, key=lambda r: sum(_overlaps(r, q) for q in placed))
    placed.append(best)
    return best


def _on_curve(a: Point, b: Point, rad: float, t: float) -> Point:
    """The point at ``t`` of the quadratic curve matplotlib's ``arc3,rad=rad`` draws."""
    cx, cy = (a[0] + b[0]) / 2 + rad * (b[1] - a[1]), (a[1] + b[1]) / 2 - rad * (b[0] - a[0])
    u = 1 - t
    return (
        u * u * a[0] + 2 * t * u * cx + t * t * b[0],
        u * u * a[1] + 2 * t * u * cy + t * t * b[1],
    )


def _rad(a: Point, b: Point, span: int, twin: bool, others: list[Rect]) -> float:
    """Straight to the next layer; bent when the reverse edge exists (each bends to its own
    side); else the least bend that keeps the curve off the other boxes."""
    if twin:
        return 0.18
    if abs(span) == 1:
        return 0.0
    for rad in (0.3, -0.3, 0.5, -0.5, 0.7, -0.7):
        points = (_on_curve(a, b, rad, t / 20) for t in range(2, 19))
        if not any(_overlaps((*p, 0.0, 0.0), r) for p in points for r in others):
            return rad
    return 0.3


def _layout(info: GraphInfo) -> tuple[dict[str, Point], dict[str, Rect], dict[str, int]]:
    """Node centres and boxes in inches (y up, START at 0), and each node's layer."""
    rows = layers(info)
    widths = {
        n: max(_text_w(label(n), NAME_PT, bold=n in (info.entry, END)) + 0.3, 0.9)
        for n in info.nodes
    }
    slot_w = max(widths.values(), default=1.0) + GAP
    box_h = BOX_H + (0.12 if info.visits else 0.0)
    centre: dict[str, Point] = {}
    boxes: dict[str, Rect] = {}
    for n, (x, y) in positions(info, rows).items():
        # START's dot needs less room than a layer of boxes.
        centre[n] = (x * slot_w, -max(y * LAYER_H - START_GAIN, 0.0))
        size = (0.14, 0.14) if n == START else (widths[n], box_h)
        boxes[n] = (*centre[n], *size)
    return centre, boxes, {n: k for k, row in enumerate(rows) for n in row}


def _draw_nodes(ax: Axes, info: GraphInfo, boxes: dict[str, Rect]) -> dict[str, Patch]:
    from matplotlib.patches import Circle, FancyBboxPatch

    patches: dict[str, Patch] = {}
    for n, (x, y, w, h) in boxes.items():
        end, entry = n == END, n == info.entry
        if n == START:
            patches[n] = Circle((x, y), w / 2, facecolor="#334155", edgecolor="none", zorder=3)
        else:
            patches[n] = FancyBboxPatch(
                (x - w / 2, y - h / 2),
                w,
                h,
                boxstyle=f"round,pad=0,rounding_size={h / 2 if end else 0.09}",
                facecolor=DARK if end else BOX_FILL,
                edgecolor=DARK if end else ENTRY if entry else BOX_EDGE,
                linewidth=(2.5 if entry else 1.2) * PT,
                zorder=3,
            )
        ax.add_patch(patches[n])
        if n == START:
            continue
        dy = 0.07 if info.visits and not end else 0.0
        # Names are shown as written: a "$" in one does not start math.
        text: dict[str, Any] = {"ha": "center", "va": "center", "zorder": 4, "parse_math": False}
        ax.text(x, y + dy, label(n), fontsize=NAME_PT, color="white" if end else INK,
                weight="bold" if end or entry else "normal", **text)  # fmt: skip
        if dy:
            visits = plural(info.visits.get(n, 0), "visit")
            ax.text(x, y - 0.11, visits, fontsize=SMALL_PT, color=MUTED, **text)
    return patches


def _draw_edges(
    ax: Axes, info: GraphInfo, boxes: dict[str, Rect], patches: dict[str, Patch],
    layer_of: dict[str, int],
) -> None:  # fmt: skip
    """Edges, most likely first, each with its caption on a free spot along it."""
    from matplotlib.patches import FancyArrowPatch

    placed = [(x, y, w + 0.06, h + 0.06) for x, y, w, h in boxes.values()]
    pairs = {(e.source, e.target) for e in info.edges}
    for e in sorted(info.edges, key=lambda e: -(e.probability or 0.0)):
        lw = edge_width(e) * PT
        style: dict[str, Any] = {
            "color": hit_colour(e.hit_rate),
            "linewidth": lw,
            "linestyle": "--" if is_dashed(e) else "-",
            "arrowstyle": "-|>,head_length=0.5,head_width=0.3",
            "mutation_scale": 8 + 0.9 * lw,
            "alpha": 0.9,
            "zorder": 2,
        }
        a, b = boxes[e.source][:2], boxes[e.target][:2]
        if e.source == e.target:
            right = a[0] + boxes[e.source][2] / 2
            style["connectionstyle"] = "arc,angleA=0,angleB=0,armA=24,armB=24,rad=7"
            ax.add_patch(FancyArrowPatch((right, a[1] + 0.1), (right, a[1] - 0.1), **style))
            spots = [(right + 0.42, a[1])]
        else:
            others = [r for n, r in boxes.items() if n not in (e.source, e.target)]
            span = layer_of[e.target] - layer_of[e.source]
            rad = _rad(a, b, span, (e.target, e.source) in pairs, others)
            style["connectionstyle"] = f"arc3,rad={rad}"
            ax.add_patch(FancyArrowPatch(a, b, patchA=patches[e.source], patchB=patches[e.target],
                                         shrinkA=0, shrinkB=1.5, **style))  # fmt: skip
            spots = [_on_curve(a, b, rad, t) for t in (0.5, 0.42, 0.58, 0.34, 0.66, 0.26, 0.74)]
        if caption := edge_caption(e):
            x, y, _, _ = _free_spot(spots, (_text_w(caption, CAPTION_PT) + 0.08, 0.17), placed)
            box = {"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": "none",
                   "alpha": 0.9}  # fmt: skip
            ax.text(x, y, caption, fontsize=CAPTION_PT, ha="center", va="center",
                    color="#334155", bbox=box, zorder=5)  # fmt: skip


def _legend(ax: Axes, x: float, y: float) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch as Swatch

    handles: list[Line2D | Swatch] = [
        Line2D([], [], color=MUTED, linewidth=edge_width(p) * PT, label=f"P {p:g}")
        for p in (0.25, 0.5, 1.0)
    ]
    handles += [Swatch(color=hit_colour(r), label=f"hit {r:.0%}") for r in (0.0, 0.5, 1.0)]
    handles.append(Swatch(color=NO_DATA, label="no data"))
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(x, y),
              bbox_transform=ax.transData, ncol=len(handles), frameon=False, fontsize=7.5,
              handlelength=1.8, columnspacing=1.2, borderaxespad=0)  # fmt: skip


def figure(info: GraphInfo) -> Figure:
    """The picture as a matplotlib figure whose data units are inches."""
    from matplotlib.figure import Figure

    _, boxes, layer_of = _layout(info)
    half = max(abs(x) + w / 2 for x, _, w, _ in boxes.values()) + MARGIN + 0.45
    half = max(half, _text_w(_subtitle(info), 8.0) / 2 + MARGIN / 2, 3.0)
    top, bottom = 0.75, -min(y - h / 2 for _, y, _, h in boxes.values()) + 0.55
    fig = Figure(figsize=(2 * half, top + bottom + MARGIN))
    ax = fig.add_axes((0.0, 0.0, 1.0, 1.0))
    ax.set_xlim(-half, half)
    ax.set_ylim(-bottom, top + MARGIN)
    ax.set_axis_off()
    left = -half + MARGIN
    ax.text(left, top + 0.05, info.name, fontsize=14, weight="bold", color=INK, parse_math=False)
    ax.text(left, top - 0.22, _subtitle(info), fontsize=8, color=MUTED)
    patches = _draw_nodes(ax, info, boxes)
    _draw_edges(ax, info, boxes, patches, layer_of)
    _legend(ax, left, -bottom + 0.08)
    return fig


@contextmanager
def _settings() -> Iterator[None]:
    """Text stays text in SVG, and the same graph gives the same file."""
    import matplotlib

    with matplotlib.rc_context(
        {"svg.fonttype": "none", "svg.hashsalt": "agentwarm", "font.family": "sans-serif"}
    ):
        yield


def render_svg(info: GraphInfo) -> str:
    """A standalone SVG document (node names, captions and legend are ``<text>``)."""
    buf = io.BytesIO()
    with _settings():
        figure(info).savefig(
            buf, format="svg", facecolor="white", metadata={"Title": info.name, "Date": None}
        )
    return buf.getvalue().decode("utf-8")


def render_png(info: GraphInfo, path: str | Path, *, scale: float = 2.0) -> None:
    """Write the picture as a PNG at ``100 * scale`` dots per inch."""
    with _settings():
        figure(info).savefig(str(path), format="png", dpi=100 * scale, facecolor="white")
