"""The "Writing a workflow" example of ``docs/workflows.md`` is a complete workflow file: run it, so
it cannot drift from the API (every name it uses is defined in it, and it runs on FakeEngine)."""

from __future__ import annotations

import inspect
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentwarm import FakeEngine, load_workflow
from agentwarm.cli import app

ROOT = Path(__file__).resolve().parent.parent


def readme_section() -> str:
    page = (ROOT / "docs" / "workflows.md").read_text(encoding="utf-8")
    return page.split("\n## Writing a workflow\n", 1)[1].split("\n## ", 1)[0]


def readme_example() -> str:
    """The first ```python block of docs/workflows.md's "## Writing a workflow" section."""
    match = re.search(r"```python\n(.*?)```", readme_section(), re.S)
    assert match, "the 'Writing a workflow' section has no ```python block"
    return match.group(1)


@pytest.fixture
def example(tmp_path: Path) -> Path:
    path = tmp_path / "support.py"
    path.write_text(readme_example(), encoding="utf-8")
    return path


def test_the_example_defines_every_name_it_uses(example: Path) -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    # F: pyflakes (undefined names, unused imports); run from tmp so the project config and
    # its excludes do not apply.
    proc = subprocess.run(
        [ruff, "check", "--isolated", "--select", "F,E9", example.name],
        cwd=example.parent,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_example_runs_through_the_cli(example: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["run", str(example), "--engine", "fake", "--runs", "2", "--json",
         "--state-dir", str(tmp_path / "state")],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    # Its INPUTS, one per run: a refund request, then a question.
    assert out["workflow"] == "support"
    assert out["paths"] == [["triage", "refund", "answer"], ["triage", "answer"]]
    assert out["runs"] == 2 and out["steps"] == 5


def test_the_example_from_python(example: Path) -> None:
    workflow = load_workflow(example)
    assert workflow.nodes["refund"].tools[0]["function"]["name"] == "lookup_order"
    result = workflow.run_sync(
        "My order 4471 arrived broken, I want a refund.", engine=FakeEngine()
    )
    assert result.path == ["triage", "refund", "answer"]
    assert result.state["answered"] is True
    assert isinstance(result.state["refund_note"], str)
    refund = result.steps[1]
    assert refund.node == "refund" and refund.llm_calls == 1
    # The refund prompt holds its system text, the tool schema, the transcript (triage's
    # exchange and the tool result): FakeEngine counts one token per UTF-8 byte.
    assert refund.prompt_tokens > len(workflow.nodes["refund"].system) + len("lookup_order")


def test_the_section_says_sync_nodes_cannot_call_the_llm() -> None:
    # ctx.llm is a coroutine function: a plain `def` node cannot await it.
    from agentwarm import Context

    assert inspect.iscoroutinefunction(Context.llm)
    text = " ".join(readme_section().split())
    assert "A sync (`def`) node runs in a worker thread" in text
    assert "It cannot call the LLM" in text
