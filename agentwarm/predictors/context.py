"""What the conversation says at a prediction point, for predictors that read it.

The path of node names says where a run is; the conversation says what happens next: what the
user just asked ("I want to cancel my reservation"), which tool ran last and what it returned
(an error, an empty list), what the step itself answered. :class:`StepContext` is that, taken
from OpenAI-style messages (the runtime's transcript, a gateway request), and
:func:`conversation_transitions` turns a whole recorded conversation into the ``(path, context,
next step)`` examples a predictor learns from, with the context a run has at each step's end.

A predictor that reads context is a :class:`ContextPredictor`; :func:`predict_with` and
:func:`observe_with` call any :class:`~agentwarm.predictors.base.Predictor` with or without
one, so the runtime and the gateway need not know which kind they hold.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from agentwarm._spec import END
from agentwarm.predictors.base import Predictor

__all__ = (
    "RESPOND",
    "ContextPredictor",
    "StepContext",
    "conversation_transitions",
    "observe_with",
    "predict_with",
    "step_of",
)

RESPOND = "respond"
"""The step of an assistant message that calls no tool (answers in text)."""

#: Each text field keeps at most this many characters (the start: where tool results say
#: what they are, and user messages what they want). Bounds the work of a prediction.
MAX_TEXT = 2_000


def _text(content: Any) -> str:
    """A message's content as text: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping)]
        return "\n".join(p for p in parts if isinstance(p, str) and p)
    return ""


def _call_name(call: Any) -> str:
    function = call.get("function") if isinstance(call, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) else ""


def step_of(message: Mapping[str, Any]) -> str:
    """The step of an assistant message: its first tool call's name, else :data:`RESPOND`."""
    calls = message.get("tool_calls") or ()
    name = _call_name(calls[0]) if calls else ""
    return name or RESPOND


@dataclass(frozen=True, slots=True)
class StepContext:
    """The conversation at a prediction point (every field ``""`` when unknown).

    ``first_user`` is the conversation's first user message (the task), ``last_user`` the
    latest; ``last_assistant`` the latest assistant text (a turn that only calls tools has none
    and keeps the one before); ``last_tool`` the latest tool called
    (by an assistant ``tool_calls`` entry or named by a ``tool`` message), ``last_tool_args``
    its arguments (JSON text) and ``last_tool_result`` the latest ``tool`` message, ``""``
    when a user message or another tool call came after it (the result is old news then, or
    not the last tool's).
    """

    first_user: str = ""
    last_user: str = ""
    last_assistant: str = ""
    last_tool: str = ""
    last_tool_args: str = ""
    last_tool_result: str = ""

    @property
    def empty(self) -> bool:
        """No field is known: a predictor reading context has nothing beyond the path."""
        return not any(
            (
                self.first_user,
                self.last_user,
                self.last_assistant,
                self.last_tool,
                self.last_tool_args,
                self.last_tool_result,
            )
        )

    @classmethod
    def from_messages(cls, messages: Sequence[Mapping[str, Any]]) -> StepContext:
        """The context at the end of ``messages`` (OpenAI chat messages, in order; system
        messages and unknown roles are skipped)."""
        first_user = last_user = last_assistant = tool = args = result = ""
        for message in messages:
            role = message.get("role")
            content = _text(message.get("content"))[:MAX_TEXT]
            if role == "user":
                first_user = first_user or content
                last_user, result = content, ""
            elif role == "assistant":
                last_assistant = content or last_assistant
                calls = message.get("tool_calls") or ()
                if calls and _call_name(calls[0]):
                    tool, result = _call_name(calls[0]), ""  # the new call's result is not in
                    function = calls[0].get("function") or {}
                    raw = function.get("arguments", "")
                    args = (raw if isinstance(raw, str) else str(raw))[:MAX_TEXT]
            elif role == "tool":
                name = message.get("name")
                tool = name if isinstance(name, str) and name else tool
                result = content
        return cls(first_user, last_user, last_assistant, tool, args, result)


@runtime_checkable
class ContextPredictor(Protocol):
    """A :class:`~agentwarm.predictors.base.Predictor` that also reads the conversation."""

    def predict_in(
        self,
        path: Sequence[str],
        context: StepContext,
        *,
        candidates: Sequence[str] | None = None,
    ) -> list[tuple[str, float]]:
        """Like ``predict``, knowing ``context`` (same rules)."""
        ...

    def observe_in(self, path: Sequence[str], next_node: str, context: StepContext) -> None:
        """Like ``observe``, knowing the ``context`` the prediction for ``path`` had."""
        ...


def predict_with(
    predictor: Predictor,
    path: Sequence[str],
    state: Mapping[str, Any] | None = None,
    *,
    candidates: Sequence[str] | None = None,
    context: StepContext | None = None,
) -> list[tuple[str, float]]:
    """``predictor``'s distribution for ``path``, reading ``context`` if it can."""
    if context is not None and isinstance(predictor, ContextPredictor):
        return predictor.predict_in(path, context, candidates=candidates)
    return predictor.predict(path, state, candidates=candidates)


def observe_with(
    predictor: Predictor, path: Sequence[str], next_node: str, context: StepContext | None = None
) -> None:
    """Teach ``predictor`` that ``path`` went on to ``next_node``, in ``context`` if it reads it."""
    if context is not None and isinstance(predictor, ContextPredictor):
        predictor.observe_in(path, next_node, context)
    else:
        predictor.observe(path, next_node)


def conversation_transitions(
    messages: Sequence[Mapping[str, Any]], entry: str | None = None
) -> list[tuple[tuple[str, ...], StepContext, str]]:
    """The ``(path, context, next step)`` examples of one recorded conversation.

    Every assistant message is a step (:func:`step_of`). With ``entry`` (the workflow's entry
    node, which adds the messages before the first assistant turn), paths start with it and the
    first example predicts the first step; without, paths start at the first step. The last
    step is followed by :data:`~agentwarm.predictors.base.END`. Each context is the
    conversation just before the next assistant message: what a run holds when its step ends.
    """
    out: list[tuple[tuple[str, ...], StepContext, str]] = []
    path: tuple[str, ...] = (entry,) if entry is not None else ()
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        step = step_of(message)
        if path:
            out.append((path, StepContext.from_messages(messages[:i]), step))
        path = (*path, step)
    if path and (entry is None or len(path) > 1):
        out.append((path, StepContext.from_messages(messages), END))
    return out
