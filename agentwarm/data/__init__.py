"""Packaged data: agent step sequences for benchmarks and predictor tests.

``tau2_retail_steps.jsonl`` holds the tool-call step names of the 114 tau2-bench retail tasks
(MIT licence, see ``NOTICE.md`` next to it). Each line is a JSON object with a ``"steps"``
list of strings (and a ``"task_id"``); other keys are ignored.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError

from agentwarm import _jsonfile
from agentwarm.errors import ConfigError

__all__ = ("TAU2_RETAIL_STEPS", "load_trajectories")

#: File name of the packaged tau2-bench retail step sequences.
TAU2_RETAIL_STEPS = "tau2_retail_steps.jsonl"


class _Trajectory(BaseModel):
    """One line of a trajectory file: an object whose ``"steps"`` is a list of strings (other
    keys are ignored)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    steps: list[StrictStr] = Field(strict=True)


def load_trajectories(path: str | os.PathLike[str] | None = None) -> list[list[str]]:
    """Step sequences from a JSON-lines file (default: the packaged tau2 retail file).

    Blank lines are skipped; every other line must be a JSON object whose ``"steps"`` is a list
    of strings (it may be empty). Order is kept.

    Raises:
        ConfigError: the file cannot be read, or a line is malformed; the message names the
            file and the 1-based line number.
    """
    if path is None:
        source = resources.files(__name__).joinpath(TAU2_RETAIL_STEPS)
        name = f"{__name__}/{TAU2_RETAIL_STEPS}"
        try:
            raw = source.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read packaged data {name}: {exc}") from exc
    else:
        name = str(path)
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read trajectories file {name}: {exc}") from exc
    trajectories: list[list[str]] = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = _jsonfile.loads(line)
        except _jsonfile.JSONTextError as exc:
            raise ConfigError(f"{name}:{lineno}: {exc}") from exc
        try:
            trajectory = _Trajectory.model_validate(record)
        except ValidationError:
            raise ConfigError(
                f'{name}:{lineno}: expected an object with a "steps" list of strings'
            ) from None
        trajectories.append(trajectory.steps)
    return trajectories
