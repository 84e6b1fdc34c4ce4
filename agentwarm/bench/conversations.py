"""Real conversations for the benchmark (``agentwarm bench --conversations FILE``).

A conversations file is JSON lines, one conversation per line: an object whose ``"messages"``
is the whole conversation in OpenAI chat format — an optional ``system`` message (the agent's
policy), ``user`` turns, ``assistant`` turns (text, or ``tool_calls`` with ``function.name``)
and ``tool`` results. Other keys (``task_id``, ``trial``, ``reward``, ``steps``) are ignored:
the steps are read from the messages.

Every assistant turn is a step: its node is the tool it called (the first, when it called
several) or ``respond`` for a text answer (:func:`agentwarm.predictors.context.step_of`). The
replay (:mod:`agentwarm.bench.workload`) adds the real messages to the run's transcript: node 0
(the entry) adds the messages before the first assistant turn; node ``k`` calls the model on
the conversation so far, then adds the real ``k``-th assistant turn and the tool results and
user turns that followed it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentwarm import _jsonfile
from agentwarm._spec import END, START
from agentwarm.bench.inputs import Episode
from agentwarm.chat import Message
from agentwarm.errors import ConfigError
from agentwarm.predictors.context import RESPOND, step_of

if TYPE_CHECKING:
    from agentwarm.runtime import Context

__all__ = (
    "RESPOND",
    "Conversation",
    "add_message",
    "load_conversations",
    "shared_policy",
    "step_of",
    "step_turns",
    "tools_beside",
)

_ROLES = ("system", "user", "assistant", "tool")


@dataclass(frozen=True, slots=True)
class Conversation:
    """One conversation: its episode (id = line order, steps = one per assistant turn), its
    system message (``""`` when none) and the other messages in order."""

    episode: Episode
    system: str
    messages: tuple[Message, ...]


def step_turns(messages: Sequence[Message]) -> list[tuple[Message, ...]]:
    """The messages grouped as the replay adds them: ``[0]`` those before the first assistant
    turn, then per assistant turn that turn and every message up to the next one."""
    turns: list[list[Message]] = [[]]
    for m in messages:
        if m["role"] == "assistant":
            turns.append([])
        turns[-1].append(m)
    return [tuple(t) for t in turns]


def _check(where: str, record: Any) -> tuple[str, tuple[Message, ...]]:
    messages = record.get("messages") if isinstance(record, dict) else None
    if not isinstance(messages, list) or not messages:
        raise ConfigError(f'{where}: expected an object with a non-empty "messages" list')
    system = ""
    out: list[Message] = []
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if role not in _ROLES:
            raise ConfigError(f"{where}: message [{i}] has no role among {', '.join(_ROLES)}")
        content = m.get("content")
        if content is not None and not isinstance(content, str):
            raise ConfigError(f"{where}: message [{i}]: content must be a string or null")
        if role == "system":
            if i != 0:
                raise ConfigError(f"{where}: message [{i}]: a system message must come first")
            system = content or ""
            continue
        for call in m.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, dict) else None
            name = fn.get("name") if isinstance(fn, dict) else None
            if not isinstance(name, str) or not name.strip() or name in (END, START):
                raise ConfigError(
                    f"{where}: message [{i}]: each tool call needs a function name usable as a "
                    f"node name (non-empty, not {END!r} or {START!r})"
                )
        out.append(m)
    return system, tuple(out)


def load_conversations(path: Path) -> list[Conversation]:
    """The conversations of ``path`` (see the module docstring). Raises :class:`ConfigError`
    naming the file and line for an unreadable file or a malformed line, and for a file
    without any assistant turn."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"--conversations {path}: cannot read it ({exc.strerror})") from exc
    out: list[Conversation] = []
    for lineno, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            record = _jsonfile.loads(line)
        except _jsonfile.JSONTextError as exc:
            raise ConfigError(f"{where}: {exc}") from exc
        system, messages = _check(where, record)
        steps = tuple(step_of(m) for m in messages if m["role"] == "assistant")
        out.append(Conversation(Episode(id=str(len(out)), steps=steps), system, messages))
    if not any(c.episode.steps for c in out):
        raise ConfigError(f"--conversations {path}: holds no assistant turn (no step to replay)")
    return out


def shared_policy(conversations: Sequence[Conversation]) -> tuple[str, int]:
    """The system message most conversations share, and how many conversations differ from it
    (the replay gives every node one policy)."""
    counts = Counter(c.system for c in conversations)
    text, n = counts.most_common(1)[0]
    return text, len(conversations) - n


def tools_beside(path: Path) -> Path | None:
    """``tools.json`` in the folder of ``path``, when there is one (the tool schemas the
    conversations' agent was given, as in ``shared/data/tau-airline``)."""
    candidate = path.parent / "tools.json"
    return candidate if candidate.is_file() else None


def add_message(ctx: Context, message: Message) -> None:
    """Add a real message to the run's transcript as it was: its role, an assistant turn's
    ``tool_calls`` (rendered by the chat template as the model family writes them) and a tool
    result's ``tool_call_id`` and tool name."""
    role = message["role"]
    ctx.add(
        message.get("content") or "",
        role=role,
        tool_call_id=message.get("tool_call_id") if role == "tool" else None,
        name=message.get("name") if role == "tool" else None,
        tool_calls=message.get("tool_calls") or () if role == "assistant" else (),
    )
