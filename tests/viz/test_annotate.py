"""What a drawing shows: the graph combined with learned probabilities and trace figures."""

from __future__ import annotations

from agentwarm import END
from agentwarm.stats import StepSpan, compute_stats
from agentwarm.viz import graph_info
from agentwarm.viz.annotate import (
    NO_DATA,
    EdgeInfo,
    edge_caption,
    edge_width,
    hit_colour,
    is_dashed,
)
from tests.viz._flow import PROBS, info, stats, workflow


def test_hit_colour_scale() -> None:
    assert hit_colour(0.0) == "#dc2626"
    assert hit_colour(0.5) == "#f59e0b"
    assert hit_colour(1.0) == "#16a34a"
    assert hit_colour(None) == NO_DATA == "#94a3b8"
    assert hit_colour(0.25) == "#e86218"


def test_graph_info_combines_probabilities_and_hits() -> None:
    edges = {(e.source, e.target): e for e in info().edges}
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
    assert edges[("__start__", "plan")].hit_rate is None  # not a branch
    assert edges[("answer", END)].hit_rate is None
    assert info().visits == {"plan": 3, "tool": 2, "answer": 1, END: 0}
    assert info().runs == 1
    assert info().observed
    bare = graph_info(workflow())
    assert not bare.has_probabilities and not bare.observed and bare.visits == {}
    assert all(e.probability is None and e.hit_rate is None for e in bare.edges)


def test_runs_that_prefetched_nothing_have_no_hit_rate() -> None:
    edges = graph_info(workflow(), PROBS, stats(False, False, False, False, False)).edges
    assert [e.taken for e in edges] == [1, 2, 1, 2, 0, 0]
    assert [e.hit_rate for e in edges] == [None] * 6


def test_an_undeclared_edge_from_traces_is_added_dashed() -> None:
    steps = [StepSpan("agent", "r", 0, "__start__", "plan", False, 0.1, 10, 5),
             StepSpan("agent", "r", 1, "plan", "plan", True, 0.1, 10, 5)]  # fmt: skip
    edges = graph_info(workflow(), PROBS, compute_stats(steps, [])).edges
    extra = edges[-1]
    assert (extra.source, extra.target, extra.declared, extra.hit_rate) == (
        "plan", "plan", False, 1.0
    )  # fmt: skip
    assert is_dashed(extra)
    assert [e.declared for e in edges[:-1]] == [True] * 6


def test_caption_width_and_dashes() -> None:
    assert edge_caption(EdgeInfo("plan", "tool", 0.75, taken=2, hits=1)) == "0.75 · 1/2"
    assert edge_caption(EdgeInfo("plan", "tool", None, taken=2, hits=1)) == "1/2"
    assert edge_caption(EdgeInfo("plan", "tool", 0.75)) == "0.75"
    assert edge_caption(EdgeInfo("plan", "tool")) == ""
    assert edge_caption(EdgeInfo("__start__", "plan", 1.0, taken=3)) == ""
    assert edge_width(EdgeInfo("plan", "tool", 0.75)) == 6.25
    assert edge_width(EdgeInfo("plan", "tool")) == 1.5
    assert edge_width(EdgeInfo("__start__", "plan", 1.0)) == 2.0
    assert edge_width(0.5) == 4.5
    assert is_dashed(EdgeInfo("plan", "tool"))
    assert not is_dashed(EdgeInfo("plan", "tool", 0.5))
