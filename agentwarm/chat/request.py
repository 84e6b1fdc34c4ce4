"""What a chat request must hold to be rendered: the checks of ``POST /v1/chat/completions``
(:class:`agentwarm.server.chat_protocol.ChatRequest`) that every other source of chat prefixes
reuses (warm-up plan lines, :mod:`agentwarm.warmup.types`), so that what would be refused as a
request is never warmed either.

* :func:`check_depth`: JSON nested at most :data:`~agentwarm._jsonfile.MAX_DEPTH` levels (deeper
  nesting makes rendering recurse past Python's limit);
* :func:`check_tools`: every tool is ``{"type": "function", "function": {"name": ...}}``;
* :func:`chat_messages`: roles among :data:`ROLES`, ``content`` a string, null or a list of text
  parts (joined into one string).

Each raises ``ValueError`` naming the field and what it must be.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentwarm._jsonfile import MAX_DEPTH, find_flaw
from agentwarm.chat.template import Message, check_tool_arguments

__all__ = ("MAX_DEPTH", "ROLES", "chat_messages", "check_depth", "check_tools")

#: The roles a chat request's messages may have.
ROLES = ("system", "developer", "user", "assistant", "tool")


def check_depth(value: Any, where: str = "the request", limit: int = MAX_DEPTH) -> None:
    """``ValueError`` if ``value`` (decoded JSON) nests objects and lists more than ``limit``
    levels deep (:func:`~agentwarm._jsonfile.find_flaw`: iterative, so any depth is checked
    without recursing)."""
    flaw = find_flaw(value, max_depth=limit, surrogates=False)
    if flaw is not None:
        raise ValueError(f"{where}: {flaw.problem()}")


def check_tools(tools: Iterable[Any] | None) -> None:
    """``ValueError`` unless every tool is a function tool with a name."""
    for tool in tools or ():
        fn = tool.get("function") if isinstance(tool, Mapping) else None
        if (
            not isinstance(tool, Mapping)
            or tool.get("type") != "function"
            or not isinstance(fn, Mapping)
            or not fn.get("name")
        ):
            raise ValueError(
                'tools: each tool must be {"type": "function", "function": {"name": ...}}'
            )


def chat_messages(messages: Iterable[Mapping[str, Any]]) -> list[Message]:
    """The messages as the chat template takes them: text parts joined into ``content``.
    Raises ValueError naming the message that cannot be (a tool call's ``arguments`` whose JSON
    nests too deeply included: :func:`~agentwarm.chat.check_tool_arguments`)."""
    check_tool_arguments(list(messages))
    out: list[Message] = []
    for i, raw in enumerate(messages):
        message = dict(raw)
        if message.get("role") not in ROLES:
            raise ValueError(f"messages[{i}]: role must be one of {', '.join(ROLES)}")
        content = message.get("content")
        if isinstance(content, list):
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text":
                    raise ValueError(
                        f"messages[{i}]: only text content parts are supported by this "
                        "engine (no images or audio)"
                    )
                texts.append(str(part.get("text", "")))
            message["content"] = "".join(texts)
        elif content is not None and not isinstance(content, str):
            raise ValueError(f"messages[{i}]: content must be a string, a list or null")
        out.append(message)
    return out
