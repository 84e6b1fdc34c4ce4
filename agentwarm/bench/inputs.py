"""What the benchmark reads from files: the recorded episodes of a trajectory file, how they
are split into train and test, and the optional policy text and tool schemas (``--system``,
``--tools``) that replace the generated ones. Each problem is a
:class:`~agentwarm.errors.ConfigError` naming the file and what to fix.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentwarm import _jsonfile
from agentwarm._spec import END, START
from agentwarm.data import load_trajectories
from agentwarm.errors import ConfigError

__all__ = ("Episode", "load_episodes", "read_system_file", "read_tools_file", "split_episodes")


@dataclass(frozen=True, slots=True)
class Episode:
    """One recorded episode: its id and the ordered step names (possibly none)."""

    id: str
    steps: tuple[str, ...]


def _line_of(path: Path, index: int) -> int:
    """1-based line number of the ``index``-th non-blank line of ``path``."""
    seen = -1
    for lineno, line in enumerate(path.read_bytes().splitlines(), start=1):
        if line.strip():
            seen += 1
            if seen == index:
                return lineno
    return 0


def load_episodes(path: Path | str | None = None) -> list[Episode]:
    """Episodes of a trajectory file (JSON lines, each an object with a ``"steps"`` list of
    step names; default: the packaged tau2-bench retail file). Episode ids are the line order.

    Raises :class:`ConfigError` naming the file and line for unreadable files, malformed lines
    and step names that cannot be node names (empty, or the reserved ``__end__`` /
    ``__start__``), and for a file with no steps at all.
    """
    trajectories = load_trajectories(path)
    name = str(path) if path is not None else "the packaged tau2 retail trajectories"
    episodes: list[Episode] = []
    for i, steps in enumerate(trajectories):
        bad = [s for s in steps if not s.strip() or s in (END, START)]
        if bad:
            where = f"{path}:{_line_of(Path(path), i)}" if path is not None else name
            raise ConfigError(
                f"{where}: step name {bad[0]!r} cannot be a node name; step names must be "
                f"non-empty and not {END!r} or {START!r}"
            )
        episodes.append(Episode(id=str(i), steps=tuple(steps)))
    if not any(e.steps for e in episodes):
        raise ConfigError(f'{name}: holds no steps; each line needs a non-empty "steps" list')
    return episodes


def split_episodes(
    episodes: Sequence[Episode], *, seed: int, test_fraction: float
) -> tuple[list[Episode], list[Episode]]:
    """Shuffle with ``seed`` and split into (train, test); the test split keeps at least one
    episode, and the train split too when there are two or more."""
    if not 0.0 < test_fraction <= 1.0:
        raise ConfigError(f"test fraction must be in (0, 1], got {test_fraction}")
    order = list(episodes)
    random.Random(seed).shuffle(order)
    n_test = max(1, round(len(order) * test_fraction))
    if len(order) > 1 and test_fraction < 1.0:
        n_test = min(n_test, len(order) - 1)
    return order[n_test:], order[:n_test]


def read_tools_file(path: Path) -> list[dict[str, Any]]:
    """Tool schemas from a JSON file holding a list of OpenAI-style schemas."""
    try:
        data = _jsonfile.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(f"--tools {path}: cannot read it ({exc.strerror})") from exc
    except _jsonfile.JSONTextError as exc:
        raise ConfigError(f"--tools {path}: {exc}") from exc
    if not isinstance(data, list) or not all(isinstance(t, dict) for t in data):
        raise ConfigError(f"--tools {path}: expected a JSON list of tool schema objects")
    for i, tool in enumerate(data):
        fn = tool.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ConfigError(
                f"--tools {path}: entry [{i}] has no function name; each entry must be "
                '{"type": "function", "function": {"name": "STEP", ...}}, named like a step'
            )
    return data


def read_system_file(path: Path) -> str:
    """The shared policy text from a file."""
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--system {path}: cannot read it ({exc})") from exc
