from __future__ import annotations

import textwrap

import pytest

from agentwarm import load_workflow
from agentwarm.errors import ConfigError, GraphValidationError

MODULE = """
from agentwarm import node, END, WorkflowGraph

@node(entry=True, next=["b", END])
async def a(ctx):
    return "b"

@node(next=[END])
def b(ctx):
    return END
"""


def write(tmp_path, text, name="flow.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_collects_nodes_from_module(tmp_path):
    wf = load_workflow(write(tmp_path, MODULE))
    assert wf.name == "flow"
    assert set(wf.nodes) == {"a", "b"}


def test_named_workflow(tmp_path):
    path = write(tmp_path, MODULE + "\nsupport = WorkflowGraph('support').add(a, b)\n")
    wf = load_workflow(f"{path}:support")
    assert wf.name == "support"


def test_missing_named_workflow(tmp_path):
    path = write(tmp_path, MODULE)
    with pytest.raises(ConfigError, match="has no workflow named 'nope'"):
        load_workflow(f"{path}:nope")


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_workflow(tmp_path / "absent.py")


def test_module_without_nodes(tmp_path):
    with pytest.raises(ConfigError, match="defines no @node functions"):
        load_workflow(write(tmp_path, "x = 1\n"))


def test_import_error_reported(tmp_path):
    with pytest.raises(ConfigError, match="importing it failed: ZeroDivisionError"):
        load_workflow(write(tmp_path, "1/0\n"))


def test_invalid_graph_in_module(tmp_path):
    text = MODULE.replace('next=["b", END]', 'next=["c", END]')
    with pytest.raises(GraphValidationError, match="successor 'c'"):
        load_workflow(write(tmp_path, text))
