"""Pretraining a predictor on past traffic (``agentwarm fit``, the bench's ``--pretrain``).

An :data:`Example` is one transition a run took: ``(path, next node, context)``, the path
ending with the node that just ran (the runtime's ``StepScope.path``), the context what the
conversation said when the step ended (``None`` when not recorded). :func:`fit` feeds examples
to a predictor exactly as the runtime does online (:func:`~agentwarm.predictors.context.
observe_with`), skipping those that name nodes the workflow lacks; the predictor is then saved
where runs load it (:class:`~agentwarm.predictors.store.PredictorStore`).

Where examples come from:

* recorded conversations: :func:`~agentwarm.predictors.context.conversation_transitions`
  (:func:`conversation_examples`), each with its context;
* traces (the step spans of ``agentwarm run --trace`` and ``agentwarm gateway --trace``, read
  by :func:`agentwarm.stats.read_traces`): :func:`trace_examples`. A step's path is its
  previous step's path plus its node, the previous step being the latest earlier step of the
  run whose node is the step's ``from`` node (a run's first step comes from ``__start__``).
  A step is followed by each step that came from it; in a completed run, the steps in
  ``end_steps`` (its last step when the list is empty) are also followed by ``END`` (the rule
  of :mod:`agentwarm.stats.edges`). Traces record no conversation: their examples have no
  context.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentwarm._spec import END, START
from agentwarm.predictors.base import Predictor
from agentwarm.predictors.context import (
    StepContext,
    conversation_transitions,
    observe_with,
    predict_with,
)

__all__ = (
    "Example",
    "FitResult",
    "conversation_examples",
    "fit",
    "trace_examples",
)

Example = tuple[tuple[str, ...], str, StepContext | None]
"""``(path, next node, context)``: one transition to learn."""


class StepLike(Protocol):
    """What :func:`trace_examples` reads of a step span (:class:`agentwarm.stats.StepSpan`)."""

    @property
    def workflow(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def from_node(self) -> str: ...
    @property
    def node(self) -> str: ...


class RunLike(Protocol):
    """What :func:`trace_examples` reads of a run span (:class:`agentwarm.stats.RunSpan`)."""

    @property
    def workflow(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def completed(self) -> bool: ...
    @property
    def end_steps(self) -> tuple[int, ...]: ...


@dataclass
class FitResult:
    """What :func:`fit` did: transitions learned, examples skipped (per reason), and the top-1
    accuracy of the predictor on each example just before learning it (prequential), reading
    the context (``top1``) and on the path alone (``top1_path``); ``None`` without examples or
    when not ``scored``."""

    transitions: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    correct: int = 0
    correct_path: int = 0
    scored: bool = True

    @property
    def top1(self) -> float | None:
        return self.correct / self.transitions if self.transitions and self.scored else None

    @property
    def top1_path(self) -> float | None:
        return self.correct_path / self.transitions if self.transitions and self.scored else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "transitions": self.transitions,
            "skipped": dict(sorted(self.skipped.items())),
            "top1": self.top1,
            "top1_path": self.top1_path,
        }


def _unknown(example: Example, nodes: Collection[str]) -> str | None:
    path, nxt, _ = example
    for name in (*path, nxt):
        if name != END and name not in nodes:
            return name
    return None


def _top(predicted: list[tuple[str, float]]) -> str | None:
    return predicted[0][0] if predicted else None


def fit(
    predictor: Predictor,
    examples: Iterable[Example],
    *,
    nodes: Collection[str] | None = None,
    candidates: Callable[[tuple[str, ...]], Sequence[str] | None] | None = None,
    score: bool = True,
) -> FitResult:
    """Teach ``predictor`` every example in order (:func:`~agentwarm.predictors.context.
    observe_with`, with its context when it has one); return what was done.

    With ``nodes`` (the workflow's node names), an example naming another node (``END``
    aside) is skipped, counted under ``"unknown node <name>"``. ``candidates(path)`` gives the
    successors the runtime would predict over (default: none, every observed successor);
    it is used only for the top-1 figures, which ``score=False`` leaves out.
    """
    result = FitResult(scored=score)
    for example in examples:
        path, nxt, context = example
        missing = _unknown(example, nodes) if nodes is not None else None
        if missing is not None:
            result.skipped[f"unknown node {missing}"] += 1
            continue
        if score:
            allowed = candidates(path) if candidates is not None else None
            plain = _top(predict_with(predictor, path, None, candidates=allowed))
            read = plain
            if context is not None:
                read = _top(
                    predict_with(predictor, path, None, candidates=allowed, context=context)
                )
            result.correct += read == nxt
            result.correct_path += plain == nxt
        observe_with(predictor, path, nxt, context)
        result.transitions += 1
    return result


def conversation_examples(
    conversations: Iterable[Sequence[Mapping[str, Any]]], entry: str | None
) -> list[Example]:
    """The examples of recorded conversations (OpenAI messages each), paths starting at
    ``entry`` (the workflow's entry node) as the runtime's do: :func:`~agentwarm.predictors.
    context.conversation_transitions`."""
    return [
        (path, nxt, context)
        for messages in conversations
        for path, context, nxt in conversation_transitions(messages, entry=entry)
    ]


def trace_examples(
    steps: Iterable[StepLike],
    runs: Iterable[RunLike] = (),
    *,
    first: bool = False,
    max_path: int | None = None,
) -> tuple[list[Example], Counter[str]]:
    """The examples of traced runs (module docstring), and what was skipped, per reason.

    ``first``: also learn each run's first step from the empty path (the gateway's predictor
    does; the runtime's runs always start at the entry). ``max_path``: keep at most the last
    ``max_path`` nodes of each path (the gateway's ``MAX_PATH``).
    """
    by_run: dict[tuple[str, str], list[StepLike]] = defaultdict(list)
    for step in steps:
        by_run[(step.workflow, step.run_id)].append(step)
    ends: dict[tuple[str, str], set[int]] = {}
    for run in runs:
        key = (run.workflow, run.run_id)
        if run.completed and by_run.get(key):
            last = max(s.index for s in by_run[key])
            ends.setdefault(key, set()).update(run.end_steps or (last,))
    examples: list[Example] = []
    skipped: Counter[str] = Counter()
    for key, mine in by_run.items():
        mine.sort(key=lambda s: s.index)
        paths: dict[int, tuple[str, ...] | None] = {}
        latest: dict[str, int] = {}
        for step in mine:
            if step.from_node == START:
                paths[step.index] = (step.node,)
                if first:
                    examples.append(((), step.node, None))
            elif step.from_node in latest:
                parent = paths[latest[step.from_node]]
                paths[step.index] = None if parent is None else (*parent, step.node)
                if parent is not None:
                    examples.append((_cut(parent, max_path), step.node, None))
            else:
                paths[step.index] = None
                skipped["step whose previous step is not in the trace"] += 1
            latest[step.node] = step.index
        for index in sorted(ends.get(key, ())):
            path = paths.get(index)
            if path is not None:
                examples.append((_cut(path, max_path), END, None))
    return examples, skipped


def _cut(path: tuple[str, ...], max_path: int | None) -> tuple[str, ...]:
    return path[-max_path:] if max_path is not None else path
