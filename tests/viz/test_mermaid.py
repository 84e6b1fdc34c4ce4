"""Mermaid flowchart text (``agentwarm graph --format mermaid``)."""

from __future__ import annotations

from agentwarm import END, WorkflowGraph, node
from agentwarm.viz import graph_info, render_mermaid
from tests.viz._flow import info, workflow


def test_small_workflow_with_probabilities_and_traces() -> None:
    assert render_mermaid(info()) == (
        "---\n"
        "title: agent\n"
        "---\n"
        "flowchart TD\n"
        "  %% width: learned P(next | node) · colour: branch hit rate over 1 run (grey: no data)"
        " · label: P · hits/taken\n"
        '  start((" "))\n'
        '  plan["plan<br/>3 visits"]\n'
        '  tool["tool<br/>2 visits"]\n'
        '  answer["answer<br/>1 visit"]\n'
        '  stop(["END"])\n'
        "  start --> plan\n"
        '  plan -->|"0.75 · 1/2"| tool\n'
        '  plan -->|"0.25 · 0/1"| answer\n'
        '  tool -->|"1.00 · 2/2"| plan\n'
        '  answer -->|"0.10"| answer\n'
        '  answer -->|"0.90"| stop\n'
        "  linkStyle 0 stroke:#94a3b8,stroke-width:2.00px\n"
        "  linkStyle 1 stroke:#f59e0b,stroke-width:6.25px\n"
        "  linkStyle 2 stroke:#dc2626,stroke-width:2.75px\n"
        "  linkStyle 3 stroke:#16a34a,stroke-width:8.00px\n"
        "  linkStyle 4 stroke:#94a3b8,stroke-width:1.70px\n"
        "  linkStyle 5 stroke:#94a3b8,stroke-width:7.30px\n"
        "  classDef entryNode stroke:#16a34a,stroke-width:2.5px\n"
        "  classDef startNode fill:#334155,stroke:#334155\n"
        "  classDef endNode fill:#1e293b,stroke:#1e293b,color:#ffffff\n"
        "  class plan entryNode\n"
        "  class start startNode\n"
        "  class stop endNode\n"
    )


def test_nothing_learned_or_traced_is_dashed_and_grey() -> None:
    lines = render_mermaid(graph_info(workflow())).splitlines()
    assert lines[4] == (
        "  %% width: no learned state · colour: no traces (grey: no data) · label: P · hits/taken"
    )
    assert '  plan["plan"]' in lines
    edges = [line for line in lines if "-.->" in line or "-->" in line]
    assert edges == [
        "  start -.-> plan",
        "  plan -.-> tool",
        "  plan -.-> answer",
        "  tool -.-> plan",
        "  answer -.-> answer",
        "  answer -.-> stop",
    ]
    styles = [line for line in lines if line.startswith("  linkStyle")]
    assert styles[0] == "  linkStyle 0 stroke:#94a3b8,stroke-width:2.00px"
    assert styles[1:] == [
        f"  linkStyle {k} stroke:#94a3b8,stroke-width:1.50px" for k in range(1, 6)
    ]


def test_names_mermaid_cannot_take_as_ids_or_text() -> None:
    @node(name='say "hi" <b> #1', entry=True, next=["end", "start"])
    async def odd(ctx: object) -> str:
        return "end"

    @node(name="end", next=[END])
    async def finish(ctx: object) -> str:
        return END

    @node(name="start", next=[END])
    async def begin(ctx: object) -> str:
        return END

    text = render_mermaid(graph_info(WorkflowGraph('a: "b"').add(odd, finish, begin).compile()))
    lines = text.splitlines()
    assert lines[1] == 'title: "a: \\"b\\""'
    assert '  n1["say #quot;hi#quot; #60;b#62; #35;1"]' in lines  # not an id: by position
    assert '  n2["end"]' in lines  # a flowchart keyword
    assert '  start_["start"]' in lines  # START took "start"
    assert "  n1 -.-> n2" in lines
    assert "  n1 -.-> start_" in lines
    assert "  class n1 entryNode" in lines
