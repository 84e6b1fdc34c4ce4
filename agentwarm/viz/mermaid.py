"""The workflow graph as Mermaid flowchart text: a Mermaid renderer (GitHub, GitLab, the Mermaid
live editor, ``mmdc``) lays it out.

The encoding is :mod:`agentwarm.viz.annotate`'s: each edge carries its caption (``P ·
hits/taken``) as a label and a ``linkStyle`` with its colour (branch hit rate, grey when
unknown) and width (learned probability); dashed edges have no learned probability or were not
declared. START is a small dark circle, END a dark pill, the entry node is outlined in green.
Node ids are the names where Mermaid accepts them as ids (START is ``start``, END ``stop``), else
``n{position}``; an id already taken gets a trailing ``_``.
"""

from __future__ import annotations

import json
import re

from agentwarm._fmt import plural
from agentwarm._spec import END, START
from agentwarm.viz.annotate import (
    GraphInfo,
    edge_caption,
    edge_width,
    hit_colour,
    is_dashed,
    probability_legend,
)

__all__ = ("render_mermaid",)

_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_PLAIN_TITLE = re.compile(r"[\w .-]+")
# Words the flowchart grammar reads as keywords wherever an id stands (``end`` closes a subgraph).
_KEYWORDS = frozenset({"end", "graph", "flowchart", "subgraph", "style", "class", "classdef",
                       "click", "call", "href", "linkstyle", "direction", "default"})  # fmt: skip


def _ids(nodes: tuple[str, ...]) -> dict[str, str]:
    """A Mermaid id per node: its name when that is a usable id, else ``n{position}``."""
    ids: dict[str, str] = {}
    used: set[str] = set()
    for i, name in enumerate(nodes):
        if name == START:
            candidate = "start"
        elif name == END:
            candidate = "stop"
        elif _ID.fullmatch(name) and name.lower() not in _KEYWORDS:
            candidate = name
        else:
            candidate = f"n{i}"
        while candidate in used:
            candidate += "_"
        used.add(candidate)
        ids[name] = candidate
    return ids


def _escape(text: str) -> str:
    """Text for a label between double quotes: Mermaid's entity codes for what would end it or
    be read as markup."""
    for raw, code in (("#", "#35;"), ('"', "#quot;"), ("<", "#60;"), (">", "#62;")):
        text = text.replace(raw, code)
    return text


def _legend(info: GraphInfo) -> str:
    learned = probability_legend(info)
    hits = f"branch hit rate over {plural(info.runs, 'run')}" if info.runs else "no traces"
    return f"width: {learned} · colour: {hits} (grey: no data) · label: P · hits/taken"


def render_mermaid(info: GraphInfo) -> str:
    """A ``flowchart TD`` with a front-matter title, ending in a newline."""
    ids = _ids((START, *(n for n in info.nodes if n != START)))
    title = info.name if _PLAIN_TITLE.fullmatch(info.name) else json.dumps(info.name)
    lines = ["---", f"title: {title}", "---", "flowchart TD", f"  %% {_legend(info)}"]
    for name, node_id in ids.items():
        if name == START:
            lines.append(f'  {node_id}((" "))')
        elif name == END:
            lines.append(f'  {node_id}(["END"])')
        else:
            visits = f"<br/>{plural(info.visits.get(name, 0), 'visit')}" if info.visits else ""
            lines.append(f'  {node_id}["{_escape(name)}{visits}"]')
    styles = []
    for k, e in enumerate(info.edges):
        arrow = "-.->" if is_dashed(e) else "-->"
        caption = edge_caption(e)
        text = f'|"{_escape(caption)}"|' if caption else ""
        lines.append(f"  {ids[e.source]} {arrow}{text} {ids[e.target]}")
        styles.append(
            f"  linkStyle {k} stroke:{hit_colour(e.hit_rate)},stroke-width:{edge_width(e):.2f}px"
        )
    lines += styles
    lines.append("  classDef entryNode stroke:#16a34a,stroke-width:2.5px")
    lines.append("  classDef startNode fill:#334155,stroke:#334155")
    lines.append("  classDef endNode fill:#1e293b,stroke:#1e293b,color:#ffffff")
    lines.append(f"  class {ids[info.entry]} entryNode")
    lines.append(f"  class {ids[START]} startNode")
    if END in ids:
        lines.append(f"  class {ids[END]} endNode")
    return "\n".join(lines) + "\n"
