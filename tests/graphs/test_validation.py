from __future__ import annotations

import pytest

from agentwarm import END, GraphValidationError, WorkflowGraph, node


async def _noop(ctx):  # pragma: no cover - never run
    return END


def build(*specs):
    return WorkflowGraph("wf").add(*specs).compile()


def test_valid_graph_with_cycle_compiles():
    a = node(name="a", entry=True, next=["b", END])(_noop)
    b = node(name="b", next=["a"])(_noop)
    wf = build(a, b)
    assert wf.entry == "a"
    assert set(wf.graph.edges) == {("a", "b"), ("a", END), ("b", "a")}
    assert wf.successors("a") == ["b", END]


def test_unknown_successor_names_node_and_fix():
    a = node(name="a", entry=True, next=["bilCompiling"])(_noop)
    with pytest.raises(GraphValidationError, match=r"Node 'a' has a successor 'bilCompiling'") as e:
        build(a)
    assert e.value.node == "a"
    assert "next=[...]" in str(e.value)


def test_no_entry():
    a = node(name="a", next=[END])(_noop)
    with pytest.raises(GraphValidationError, match=r"no entry node.*entry=True"):
        build(a)


def test_several_entries_names_them():
    a = node(name="a", entry=True, next=[END])(_noop)
    b = node(name="b", entry=True, next=[END])(_noop)
    with pytest.raises(GraphValidationError, match=r"several entry nodes \['a', 'b'\]"):
        build(a, b)


def test_unreachable_node():
    a = node(name="a", entry=True, next=[END])(_noop)
    b = node(name="orphan", next=[END])(_noop)
    with pytest.raises(
        GraphValidationError, match="Node 'orphan' is unreachable from entry node 'a'"
    ):
        build(a, b)


@pytest.mark.parametrize("bad", ["b", 3, [3], [""], ["b", "b"]])
def test_next_must_be_list_of_names(bad):
    with pytest.raises(GraphValidationError, match="Node 'a'"):
        node(name="a", entry=True, next=bad)(_noop)


def test_string_next_suggests_list():
    with pytest.raises(GraphValidationError, match=r"write next=\['b'\]"):
        node(name="a", next="b")(_noop)


def test_tools_must_be_dicts():
    with pytest.raises(GraphValidationError, match="Node 'a': tool 'x' is not a dict"):
        node(name="a", tools=["x"])(_noop)  # type: ignore[list-item]


def test_join_needs_two_predecessors():
    a = node(name="a", entry=True, next=["j"])(_noop)
    j = node(name="j", join=True, next=[END])(_noop)
    with pytest.raises(GraphValidationError, match="Join node 'j' has 1 predecessor"):
        build(a, j)


def test_duplicate_names():
    a1 = node(name="a", entry=True, next=[END])(_noop)
    a2 = node(name="a", next=[END])(_noop)
    with pytest.raises(GraphValidationError, match="Two nodes are named 'a'"):
        WorkflowGraph("wf").add(a1, a2)


def test_empty_workflow():
    with pytest.raises(GraphValidationError, match="has no nodes"):
        WorkflowGraph("wf").compile()


def test_adding_non_node():
    with pytest.raises(GraphValidationError, match="decorate it with @node"):
        WorkflowGraph("wf").add(_noop)  # type: ignore[arg-type]


def test_reserved_names_rejected():
    with pytest.raises(GraphValidationError, match="reserved or missing name"):
        node(name=END)(_noop)


def test_node_spec_equal_by_value_hashed_by_name():
    tools = [{"type": "function", "function": {"name": "t", "parameters": {}}}]
    a = node(name="a", entry=True, next=[END], tools=tools)(_noop)
    same = node(name="a", entry=True, next=[END], tools=tools)(_noop)
    other = node(name="a", entry=True, next=["b"], tools=tools)(_noop)
    assert a == same
    assert a != other
    assert hash(a) == hash(other) == hash("a")
    assert {a, same, other} == {a, other}


def test_graphs_compile_plain_data_and_workflow_graph_a_runnable_workflow():
    from agentwarm import Workflow
    from agentwarm.graphs import CompiledGraph, GraphBuilder

    a = node(name="a", entry=True, next=[END])(_noop)
    plain = GraphBuilder("wf").add(a).compile(max_steps=3)
    assert type(plain) is CompiledGraph
    assert not hasattr(plain, "run")
    wf = build(a)
    assert isinstance(wf, Workflow)
    assert (wf.name, wf.entry, wf.successors("a")) == ("wf", "a", [END])
    assert Workflow.of(wf) is wf
    wrapped = Workflow.of(plain)
    assert (wrapped.name, wrapped.max_steps, wrapped.nodes) == ("wf", 3, {"a": a})
