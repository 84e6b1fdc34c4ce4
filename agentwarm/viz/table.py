"""The workflow graph as a rich table: one row per edge, with its learned probability and the
figures read from traces (:data:`agentwarm._fmt.NA` where unknown)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentwarm._fmt import NA, pct, plural
from agentwarm._spec import START
from agentwarm.viz.annotate import GraphInfo, hit_colour, label

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ("render_text",)


def render_text(info: GraphInfo) -> Table:
    """A rich table: one row per edge, grouped by source, most likely first."""
    from rich.table import Table
    from rich.text import Text

    title = f"{info.name}: {len(info.nodes)} nodes, entry {info.entry}"
    if info.runs:
        title += f", hit rates from {plural(info.runs, 'traced run')}"
    table = Table(title=title, title_justify="left", header_style="bold")
    for col in ("from", "to", "P(to | from)"):
        table.add_column(col, justify="left")
    for col in ("taken", "prefetched", "hits", "hit rate"):
        table.add_column(col, justify="right")
    order = {n: i for i, n in enumerate((START, *info.nodes))}
    rows = sorted(info.edges, key=lambda e: (order.get(e.source, 1 << 30), -(e.probability or 0.0)))
    for e in rows:
        p = e.probability
        bar = "" if p is None else "█" * round(p * 10) + "░" * (10 - round(p * 10)) + f" {p:.2f}"
        rate = e.hit_rate
        table.add_row(
            label(e.source),
            label(e.target) + ("" if e.declared else " (undeclared)"),
            bar or NA,
            *((str(e.taken), str(e.prefetched), str(e.hits)) if info.observed else (NA,) * 3),
            Text(pct(rate), style="dim" if rate is None else hit_colour(rate)),
        )
    return table
