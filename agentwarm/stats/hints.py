"""Figures of the mid-decode hints: successors a step's streamed output named before the step
ended (``runtime.prefetch.scanner``), read from the runtime's records or from step spans.

* ``hint_steps``: steps that had a mid-decode hint.
* ``hints_right``: of those, the steps whose hint was one of the step's actual next nodes
  (the runtime's records list them; in traces they are the steps of the same run that came
  from the step's node after it and before that node's next step: :func:`next_in_runs`).
* ``hint_lead_mean_s`` / ``hint_lead_p50_s``: mean and median, over the hinted steps that
  report one, of the lead a hint gave its prefetch: seconds from the hint to the step's end
  (``None`` when no step had a hint).
* ``hint_gain_mean_s`` / ``hint_gain_p50_s``: the same of the lead reading mid-decode gained
  over reading the finished output: seconds from the hint to the end of the LLM call whose
  output named it (the lead includes the step's work after that call, which a hint read after
  it had too; ``None`` when no hinted step reports one).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol, TypeVar

from agentwarm.stats.definitions import percentile
from agentwarm.stats.traces import StepSpan

__all__ = ("HINT_KEYS", "HintFigures", "HintLike", "hint_figures", "next_in_runs")


class HintLike(Protocol):
    """What the hint figures need of a step (``runtime.records.StepRecord`` and
    ``stats.traces.StepSpan`` qualify)."""

    @property
    def hint_node(self) -> str | None: ...
    @property
    def hint_lead_s(self) -> float | None: ...
    @property
    def hint_gain_s(self) -> float | None: ...


H = TypeVar("H", bound=HintLike)


@dataclass(frozen=True, slots=True)
class HintFigures:
    """The hint figures of a set of steps (module docstring); the field names are JSON keys."""

    hint_steps: int = 0
    hints_right: int | None = None
    hint_lead_mean_s: float | None = None
    hint_lead_p50_s: float | None = None
    hint_gain_mean_s: float | None = None
    hint_gain_p50_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


HINT_KEYS: tuple[str, ...] = tuple(HintFigures.__dataclass_fields__)


def hint_figures(
    steps: Iterable[H], next_of: Callable[[H], Sequence[str]] | None = None
) -> HintFigures:
    """The :class:`HintFigures` of ``steps``; ``next_of`` gives a step's actual next nodes
    (without it ``hints_right`` is ``None``)."""
    hinted = [s for s in steps if s.hint_node is not None]
    leads = [s.hint_lead_s for s in hinted if s.hint_lead_s is not None]
    gains = [s.hint_gain_s for s in hinted if s.hint_gain_s is not None]
    return HintFigures(
        hint_steps=len(hinted),
        hints_right=(
            None if next_of is None else sum(1 for s in hinted if s.hint_node in next_of(s))
        ),
        hint_lead_mean_s=statistics.fmean(leads) if leads else None,
        hint_lead_p50_s=percentile(leads, 50),
        hint_gain_mean_s=statistics.fmean(gains) if gains else None,
        hint_gain_p50_s=percentile(gains, 50),
    )


def next_in_runs(steps: Sequence[StepSpan]) -> Callable[[StepSpan], list[str]]:
    """The next nodes of each traced step (steps are indexed in the order they started): the
    nodes of the later steps of its run that came from its node, up to that node's next step."""
    runs: dict[tuple[str, str], list[StepSpan]] = defaultdict(list)
    for s in steps:
        runs[(s.workflow, s.run_id)].append(s)
    nexts: dict[tuple[str, str, int], list[str]] = {}
    for (wf, run), mine in runs.items():
        mine.sort(key=lambda s: s.index)
        for i, s in enumerate(mine):
            later = []
            for t in mine[i + 1 :]:
                if t.from_node == s.node:
                    later.append(t.node)
                if t.node == s.node:
                    break
            nexts[(wf, run, s.index)] = later
    return lambda s: nexts.get((s.workflow, s.run_id, s.index), [])
