"""What a chat request must hold to be rendered: the checks of ``POST /v1/chat/completions``
(:class:`agentwarm.server.chat_protocol.ChatRequest`) that every other source of chat prefixes
reuses (warm-up plan lines, :mod:`agentwarm.warmup.types`), so that what would be refused as a
request is never warmed either.

* :func:`check_depth`: JSON nested at most :data:`MAX_DEPTH` levels (deeper nesting makes
  rendering recurse past Python's limit);
* :func:`check_tools`: every tool is ``{"type": "function", "function": {"name": ...}}``;
* :func:`chat_messages`: roles among :data:`ROLES`, ``content`` a string, null or a list of text
  parts (joined into one string).

Each raises ``ValueError`` naming the field and what it must be.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentwarm.chat.template import Message

__all__ = ("MAX_DEPTH", "ROLES", "chat_messages", "check_depth", "check_tools")

#: The roles a chat request's messages may have.
ROLES = ("system", "developer", "user", "assistant", "tool")
#: Deepest JSON nesting accepted (an object or a list is one level): real requests (tool
#: schemas included) stay far below it.
MAX_DEPTH = 64


def check_depth(value: Any, where: str = "the request", limit: int = MAX_DEPTH) -> None:
    """``ValueError`` if ``value`` (decoded JSON) nests objects and lists more than ``limit``
    levels deep; iterative, so any depth is checked without recursing."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Iterable[Any] = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth > limit:
            raise ValueError(
                f"{where} is nested deeper than {limit} levels of objects and lists; "
                "flatten it (no chat request needs more)"
            )
        stack.extend((child, depth + 1) for child in children)


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
    Raises ValueError naming the message that cannot be."""
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
