"""A graph drawn from traces alone (:func:`agentwarm.viz.trace_graph_info`): the traced
transitions are the edges, ``P(target | source)`` their observed shares."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from agentwarm import END
from agentwarm._spec import START, PrefetchKind, PrefetchOutcome
from agentwarm.stats import PrefillSpan, RunSpan, StepSpan, compute_stats
from agentwarm.viz import EdgeInfo, GraphInfo, render_mermaid, render_svg, trace_graph_info


def _prefill(source: str, target: str, outcome: PrefetchOutcome) -> PrefillSpan:
    return PrefillSpan("agent", "r", source, target, PrefetchKind.SPECULATIVE, outcome,
                       10, 10, 0.5, 0)  # fmt: skip


def test_the_traced_transitions_are_the_graph() -> None:
    # One completed run: plan → tool → plan → tool → plan → answer (→ END), hits on steps 1, 2
    # and 4; a hit prefetch of plan → tool and a wasted one of answer → tool.
    path = [START, "plan", "tool", "plan", "tool", "plan", "answer"]
    hits = (False, True, True, False, True, False)
    steps = [
        StepSpan("agent", "r", i, path[i], path[i + 1], hits[i], 0.1, 10, 5)
        for i in range(len(path) - 1)
    ]
    prefills = [_prefill("plan", "tool", PrefetchOutcome.HIT),
                _prefill("answer", "tool", PrefetchOutcome.WASTED)]  # fmt: skip
    st = compute_stats(steps, prefills, runs=[RunSpan("agent", "r", True)])
    assert trace_graph_info(st) == GraphInfo(
        name="agent",
        entry="plan",
        nodes=("plan", "tool", "answer", END),
        edges=(
            EdgeInfo(START, "plan", 1.0, taken=1),
            EdgeInfo("plan", "tool", 2 / 3, taken=2, prefetched=1, hits=1, hit_rate=0.5),
            EdgeInfo("plan", "answer", 1 / 3, taken=1, hit_rate=0.0),
            EdgeInfo("tool", "plan", 1.0, taken=2, hits=2, hit_rate=1.0),
            EdgeInfo("answer", END, 1.0, taken=1),
        ),  # answer → tool was only prefetched: not a transition
        has_probabilities=True,
        runs=1,
        visits={"plan": 3, "tool": 2, "answer": 1, END: 1},
        observed=True,
        probability_source="observed",
    )


def test_order_entry_and_nodes_no_run_started_at() -> None:
    steps = [
        StepSpan("w", "r1", 0, START, "b", False, None, 0, 0),
        StepSpan("w", "r2", 0, START, "a", False, None, 0, 0),
        StepSpan("w", "r3", 0, START, "b", False, None, 0, 0),
        StepSpan("w", "r1", 1, "b", "c", False, None, 0, 0),
        StepSpan("w", "r2", 1, "a", "c", False, None, 0, 0),
        # r4's first steps are not in the trace: y and x are reached from no run's start.
        StepSpan("w", "r4", 5, "y", "x", False, None, 0, 0),
    ]
    info = trace_graph_info(compute_stats(steps, []))
    assert (info.entry, info.nodes) == ("b", ("b", "a", "c", "x", "y"))
    assert [(e.source, e.target, e.probability) for e in info.edges] == [
        (START, "b", 2 / 3),
        (START, "a", 1 / 3),
        ("b", "c", 1.0),
        ("a", "c", 1.0),
        ("y", "x", 1.0),
    ]
    assert info.visits == {"b": 2, "a": 1, "c": 2, "x": 1}
    assert all(e.hit_rate is None for e in info.edges)  # nothing was prefetched
    lost = trace_graph_info(compute_stats(steps[-1:], []))
    assert (lost.entry, lost.nodes) == ("x", ("x", "y"))


def test_one_workflow_with_steps_is_needed() -> None:
    steps = [StepSpan("a", "r", 0, START, "x", False, None, 0, 0),
             StepSpan("b", "r", 0, START, "x", False, None, 0, 0)]  # fmt: skip
    with pytest.raises(ValueError, match=r"needs the steps of one workflow \(got: a, b\)"):
        trace_graph_info(compute_stats(steps, []))
    with pytest.raises(ValueError, match=r"\(got: none\)"):
        trace_graph_info(compute_stats([], []))
    only_prefills = [_prefill("plan", "tool", PrefetchOutcome.WASTED)]
    with pytest.raises(ValueError, match=r"\(got: agent\)"):
        trace_graph_info(compute_stats([], only_prefills))


def test_legends_say_the_probabilities_are_observed() -> None:
    steps = [StepSpan("agent", "r", 0, START, "plan", False, None, 0, 0)]
    info = trace_graph_info(compute_stats(steps, []))
    assert render_mermaid(info).splitlines()[4] == (
        "  %% width: observed P(next | node) · colour: branch hit rate over 1 run"
        " (grey: no data) · label: P · hits/taken"
    )
    texts = {
        t.text for t in ET.fromstring(render_svg(info)).iter("{http://www.w3.org/2000/svg}text")
    }
    assert (
        "edge width: observed P(next | node) · colour: branch hit rate over 1 run"
        " · label: P · hits/taken · grey: no data"
    ) in texts
