"""The README's Quickstart commands are what CI and users run: keep them in sync."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from typer.testing import CliRunner

from agentwarm.cli import app

ROOT = Path(__file__).resolve().parent.parent


def _ci_command() -> str:
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return next(line for line in lines if line.startswith("python3 -m venv"))


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    assert _ci_command() in readme.splitlines()


def test_ci_sets_up_vllm_with_the_readme_command_first():
    """The one other README command ``.ci/run`` runs: the real vLLM server's setup, before the
    tests (so that the ``vllm`` tests run against it)."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    setup = "bash scripts/setup_vllm.sh"
    assert setup in lines and lines.index(setup) < lines.index(_ci_command())
    assert setup in (ROOT / "README.md").read_text().splitlines()
    assert (ROOT / "scripts" / "setup_vllm.sh").exists()


def test_readme_main_command_runs_the_support_bot_example():
    readme = (ROOT / "README.md").read_text()
    main = [line for line in readme.splitlines() if "agentwarm run examples/support_bot.py" in line]
    assert main and main[0].startswith("python3 -m venv .venv && ")
    assert "pip install torch==2.13.0" in main[0]
    assert (ROOT / "examples" / "support_bot.py").exists()


def test_readme_workflow_runs_as_shown(tmp_path: Path) -> None:
    """The README's short workflow is a complete file: its bash line runs it on the fake engine."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## A workflow\n", 1)[1].split("\n## ", 1)[0]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    line = re.search(r"```bash\n(agentwarm run support\.py .*?)\n```", section, re.S)
    assert code and line, "the README's 'A workflow' section lost its example or its command"
    (tmp_path / "support.py").write_text(code.group(1), encoding="utf-8")
    args = shlex.split(line.group(1))[1:]
    args[1] = str(tmp_path / "support.py")
    result = CliRunner().invoke(
        app, [*args, "--json", "--state-dir", str(tmp_path / "state")],
        env={"AGENTWARM_NO_PROGRESS": "1"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["paths"][0] == ["triage", "refund", "answer"]
