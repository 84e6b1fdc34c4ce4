"""The shared, append-only transcript of a workflow run, as chat messages."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from agentwarm.chat import FALLBACK, Message
from agentwarm.errors import ConfigError

__all__ = ("Entry", "Transcript", "check_tool_calls")


def check_tool_calls(role: str, calls: Sequence[Any]) -> None:
    """Raise :class:`~agentwarm.errors.ConfigError` unless ``calls`` can be an assistant
    message's ``tool_calls``: the role is ``assistant`` and each call is OpenAI's
    ``{"function": {"name": str, "arguments": str | dict}, ...}``."""
    if role != "assistant":
        raise ConfigError(
            f"tool_calls belong to an assistant message, not a {role!r} one: "
            'add them with role="assistant"'
        )
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        ok = (
            isinstance(fn, dict)
            and isinstance(fn.get("name"), str)
            and bool(fn["name"])
            and isinstance(fn.get("arguments", {}), str | dict)
        )
        if not ok:
            raise ConfigError(
                f"tool_calls[{i}] is not an OpenAI tool call: expected "
                '{"id": ..., "type": "function", "function": {"name": str, "arguments": '
                f"JSON string or object}}}}, got {call!r:.200}"
            )


@dataclass(frozen=True, slots=True)
class Entry:
    """One transcript message. ``node`` is the step that added it.

    ``tool_calls`` are the calls an assistant message made (OpenAI's ``{"id", "type":
    "function", "function": {"name", "arguments"}}``); ``tool_call_id`` is the call a ``tool``
    message answers and ``name`` the tool's name (both optional, as in OpenAI's messages).
    """

    role: str
    content: str
    node: str | None = None
    tool_calls: tuple[dict[str, Any], ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def message(self) -> Message:
        """The entry as a chat message; ``"node"`` (the node that added it) is agentwarm's own
        key, which chat templates ignore and :data:`~agentwarm.chat.FALLBACK` shows."""
        out: Message = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [dict(call) for call in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            out["name"] = self.name
        if self.node is not None:
            out["node"] = self.node
        return out


class Transcript:
    """Append-only list of :class:`Entry`; every node of a run sees the same transcript.

    Append-only is what keeps prompts prefix-stable: a prefix rendered earlier in the run stays
    a prefix of every later prompt.
    """

    def __init__(self) -> None:
        self._entries: list[Entry] = []

    def add(
        self,
        content: str,
        *,
        role: str = "user",
        node: str | None = None,
        tool_calls: Sequence[dict[str, Any]] = (),
        tool_call_id: str | None = None,
        name: str | None = None,
    ) -> Entry:
        entry = Entry(
            role=role,
            content=content,
            node=node,
            tool_calls=tuple(tool_calls),
            tool_call_id=tool_call_id,
            name=name,
        )
        self._entries.append(entry)
        return entry

    @property
    def entries(self) -> tuple[Entry, ...]:
        return tuple(self._entries)

    def messages(self) -> list[Message]:
        """The transcript as chat messages (new dicts: changing them changes nothing here)."""
        return [e.message() for e in self._entries]

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries)

    def __getitem__(self, index: int) -> Entry:
        return self._entries[index]

    def text(self) -> str:
        """The transcript in agentwarm's plain format (:data:`~agentwarm.chat.FALLBACK`)."""
        return FALLBACK.render([NO_SYSTEM, *self.messages()], add_generation_prompt=False)


#: An empty system message: :data:`~agentwarm.chat.FALLBACK` renders nothing for it, so the
#: messages after it render as transcript messages (a leading system message would render as a
#: node's system text, without its node).
NO_SYSTEM: Message = {"role": "system", "content": ""}
