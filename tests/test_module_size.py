"""The package's modules stay small: at most ``LIMIT`` lines, unless the module's docstring says
why it is longer (a line starting ``Longer than 400 lines because``).

A module that grows past the limit fails here with its name and length; split it by purpose, or
state the reason where the next reader will see it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "agentwarm"
BENCHMARKS = ROOT.parent / "benchmarks"
LIMIT = 400
REASON = "Longer than 400 lines because"


def _too_long(root: Path = ROOT) -> list[str]:
    """``path: lines`` of each module over the limit whose docstring gives no reason."""
    found = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n") + (not text.endswith("\n") and bool(text))
        if lines <= LIMIT:
            continue
        doc = ast.get_docstring(ast.parse(text)) or ""
        if not any(line.strip().startswith(REASON) for line in doc.splitlines()):
            found.append(f"{path.relative_to(root.parent)}: {lines} lines")
    return found


def test_no_module_over_the_limit_without_a_reason() -> None:
    assert _too_long() == []


def test_no_benchmark_script_over_the_limit_without_a_reason() -> None:
    assert _too_long(BENCHMARKS) == []


def test_the_check_catches_a_long_module_and_accepts_a_stated_reason(tmp_path: Path) -> None:
    pkg = tmp_path / "agentwarm"
    pkg.mkdir()
    body = "x = 1\n" * (LIMIT + 1)
    (pkg / "long.py").write_text('"""A module."""\n' + body)
    (pkg / "justified.py").write_text(f'"""A module.\n\n{REASON} it must.\n"""\n' + body)
    (pkg / "short.py").write_text('"""A module."""\n' + "x = 1\n" * (LIMIT - 1))
    assert _too_long(pkg) == [f"agentwarm/long.py: {LIMIT + 2} lines"]


@pytest.mark.parametrize("lines", [LIMIT, LIMIT + 1])
def test_the_limit_is_inclusive(tmp_path: Path, lines: int) -> None:
    pkg = tmp_path / "agentwarm"
    pkg.mkdir()
    (pkg / "m.py").write_text("x = 1\n" * lines)
    assert _too_long(pkg) == ([] if lines == LIMIT else [f"agentwarm/m.py: {lines} lines"])
