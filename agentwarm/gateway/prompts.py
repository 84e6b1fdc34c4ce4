"""What the gateway prefetches for a candidate node: the prompt the client will most likely send.

A node (a request head: system messages + tools) receives, in its requests, some conversation.
What that conversation is, relative to the session's last request, is learned per node from
the requests it got (:class:`Shapes`), one of:

* ``continue`` — the last request's conversation, its reply, then more (tool results, a user
  turn): a ReAct loop, or a handoff that passes the whole history (LangGraph's supervisor).
* ``same`` — the last request's conversation again, without its reply (parallel fan-out, a
  router that hands the same conversation to a specialist).
* ``fresh`` — neither (a subagent that gets only a new task): only its head is known.

The rule that matched the most of a node's real requests is the one used for it (``continue``
until it has seen any). :class:`Renderer` turns a node's head + that conversation into token ids
with the model's chat template, exactly as the upstream's chat endpoint renders the real request
(:func:`~agentwarm.chat.render_ids`): only the messages that render the same whatever follows
them are prefetched, so the ids are a token-exact prefix of the real request's. Whether they
were is checked against the upstream's ``cached_tokens`` (the learner's stats).

Rendering costs CPU in proportion to the prompt (bounded per call:
:func:`~agentwarm.chat.render_ids`), so the learner renders with :meth:`Renderer.prompt_ids`: in
one of :data:`RENDER_THREADS` worker threads (process-wide; more renders wait their turn), not
on the event loop, except a small prompt (:data:`INLINE_MESSAGES`, :data:`INLINE_BYTES`: bounded
work, rendered at once so that a prefetch is sent before the client's next request), and only
prompts that can fit the model's context. A prompt of more messages
than the context has tokens, or whose text alone is longer than
:func:`~agentwarm.server.security.default_max_request_bytes` of the context (16 bytes per token +
64 KiB; 8 MiB when the context is unknown), is refused unrendered; one of more ids than the
context after rendering is refused unsent. A warm request gets
:class:`~agentwarm.errors.ContextLengthExceeded` (its 400), a prefetch is skipped (one log line).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum
from typing import Any

from agentwarm.chat import ChatTemplate, Message
from agentwarm.chat.memo import utf8
from agentwarm.engines.types import check_context
from agentwarm.errors import ContextLengthExceeded
from agentwarm.gateway.heads import Head
from agentwarm.predictors import _serial
from agentwarm.server.security import BYTES_PER_CONTEXT_TOKEN, default_max_request_bytes
from agentwarm.warmup.render import ChatRenderer, load_chat_renderer

__all__ = (
    "INLINE_BYTES",
    "INLINE_MESSAGES",
    "RENDER_THREADS",
    "Renderer",
    "Shape",
    "Shapes",
    "classify",
    "expected_conversation",
    "expected_points",
    "load_renderer",
)

log = logging.getLogger(__name__)

#: How many prompts are rendered at once (worker threads, process-wide).
RENDER_THREADS = 2
_POOL = ThreadPoolExecutor(RENDER_THREADS, thread_name_prefix="agentwarm-render")
#: A prompt of at most this many messages and bytes of text is rendered on the event loop
#: (measured: 31 messages, 15 KB, Qwen2.5 tokenizer and template: 8 ms cold, 2 ms for one more
#: message; see :meth:`Renderer.prompt_ids`).
INLINE_MESSAGES = 32
INLINE_BYTES = 16 * 1024


class Shape(StrEnum):
    CONTINUE = "continue"
    SAME = "same"
    FRESH = "fresh"


def classify(points: Sequence[str], last: Sequence[str], after_reply: str | None) -> Shape:
    """How a request relates to the session's last request, by message digests
    (:func:`~agentwarm.gateway.sessions.chain`): ``points`` of its conversation, ``last`` of the
    last request's, ``after_reply`` the digest that followed ``last`` with its reply
    (:func:`~agentwarm.gateway.sessions.extend`; None without a reply)."""
    n = len(last)
    if after_reply is not None and len(points) > n and points[n] == after_reply:
        return Shape.CONTINUE
    if last and len(points) >= n and points[n - 1] == last[-1]:
        return Shape.SAME
    return Shape.FRESH


def expected_conversation(
    shape: Shape, last: Sequence[Message], reply: Message | None
) -> list[Message]:
    """The conversation a node of ``shape`` will be sent next (its known part)."""
    if shape is Shape.CONTINUE:
        return [*last, reply] if reply is not None else list(last)
    if shape is Shape.SAME:
        return list(last)
    return []


def expected_points(shape: Shape, points: Sequence[str], after_reply: str | None) -> list[str]:
    """The :func:`~agentwarm.gateway.sessions.chain` of :func:`expected_conversation`, from
    the last request's (``points``) and the digest its reply adds (``after_reply``)."""
    if shape is Shape.CONTINUE:
        return [*points, after_reply] if after_reply is not None else list(points)
    if shape is Shape.SAME:
        return list(points)
    return []


class Shapes:
    """Per node, how many of its requests had each :class:`Shape`."""

    def __init__(self) -> None:
        self._counts: dict[str, Counter[Shape]] = {}

    def observe(self, node: str, shape: Shape) -> None:
        self._counts.setdefault(node, Counter())[shape] += 1

    def rule(self, node: str) -> Shape:
        """The shape that matched most of ``node``'s requests (``continue`` when none seen)."""
        counts = self._counts.get(node)
        if not counts:
            return Shape.CONTINUE
        order = list(Shape)
        return max(counts, key=lambda s: (counts[s], -order.index(s)))

    def forget(self, node: str) -> None:
        self._counts.pop(node, None)

    def to_dict(self) -> dict[str, dict[str, int]]:
        return {n: {str(s): c for s, c in counts.items()} for n, counts in self._counts.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Shapes:
        out = cls()
        for node, counts in data.items():
            if not isinstance(node, str) or not isinstance(counts, Mapping):
                raise ValueError("shapes: expected {node: {shape: count}}")
            for shape, count in counts.items():
                if not _serial.is_count(count):
                    raise ValueError(
                        f"shapes[{node!r}][{shape!r}]: not a count (an integer in [0, 2**53]), "
                        f"got {_serial.short(count)}"
                    )
                out._counts.setdefault(node, Counter())[Shape(shape)] = count
        return out


class Renderer:
    """A node's known prompt as token ids (a :class:`~agentwarm.warmup.render.ChatRenderer` over
    the head's system messages + the conversation, with the head's tools)."""

    def __init__(self, chat: ChatRenderer) -> None:
        self.chat = chat

    @property
    def template(self) -> ChatTemplate:
        return self.chat.template

    def prefix_ids(self, head: Head, conversation: Sequence[Message]) -> list[int]:
        """The ids of ``head`` + ``conversation`` that the real request will start with (its
        stable messages; ``[]`` when nothing renders)."""
        return self.chat.prefix_ids([*head.system, *conversation], head.tools)

    @property
    def max_prompt_bytes(self) -> int:
        """The most text a prompt that fits the model's context can hold (module docstring)."""
        return default_max_request_bytes(self.chat.max_context)

    def fitting_ids(self, head: Head, conversation: Sequence[Message]) -> list[int]:
        """:meth:`prefix_ids`, for a prompt that can fit the model's context; else
        :class:`~agentwarm.errors.ContextLengthExceeded` naming the limit and the fix, before
        rendering when its text alone is too long (module docstring)."""
        messages = [*head.system, *conversation]
        size, limit = _text_bytes([messages, head.tools]), self.max_prompt_bytes
        context = self.chat.max_context
        if context and len(messages) > context:
            raise ContextLengthExceeded(
                f"prompt of {len(messages)} messages cannot fit the model context of {context} "
                "tokens (each message takes at least one); shorten the conversation or use a "
                "longer-context model",
                prompt_tokens=len(messages),
                max_tokens=0,
                limit=context,
            )
        if size > limit:
            fits = (
                f"the model context of {context} tokens (at most {limit} bytes of text at "
                f"{BYTES_PER_CONTEXT_TOKEN} bytes per token)"
                if context
                else f"the {limit} bytes of text the gateway renders (the model context is unknown)"
            )
            raise ContextLengthExceeded(
                f"prompt of {size} bytes of text cannot fit {fits}; shorten the prompt "
                "(system, tools, conversation) or use a longer-context model",
                prompt_tokens=size // BYTES_PER_CONTEXT_TOKEN,
                max_tokens=0,
                limit=context or 0,
            )
        ids = self.chat.prefix_ids(messages, head.tools)
        if context:
            check_context(len(ids), context)
        return ids

    async def prompt_ids(
        self, head: Head, conversation: Sequence[Message], *, refuse: bool = False
    ) -> list[int]:
        """:meth:`fitting_ids` in a render thread (at most :data:`RENDER_THREADS` at once; the
        others wait their turn), so that the event loop goes on serving; a small prompt (at
        most :data:`INLINE_MESSAGES` messages and :data:`INLINE_BYTES` of text: bounded work)
        is rendered at once, without the thread hop, so that a prefetch chosen at a reply's end
        is sent before a client that answers at once sends its next request. A prompt that cannot
        fit the context raises with ``refuse`` (a warm request), else is ``[]`` (a prefetch:
        skipped, one log line)."""
        try:
            if _inline(head, conversation):
                return self.fitting_ids(head, conversation)
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(_POOL, self.fitting_ids, head, list(conversation))
        except ContextLengthExceeded as exc:
            if refuse:
                raise
            log.warning("node %s not prefetched: %s", head.name, exc)
            return []


def _inline(head: Head, conversation: Sequence[Message]) -> bool:
    """Whether the prompt is small enough to render on the event loop (bounded work)."""
    if len(head.system) + len(conversation) > INLINE_MESSAGES:
        return False
    return _text_bytes([head.system, conversation, head.tools]) <= INLINE_BYTES


def _text_bytes(value: Any) -> int:
    """The UTF-8 bytes of the strings in ``value`` (mapping values, not keys), nested lists and
    mappings walked without recursion: a template prints at least the text it is given."""
    total, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            total += len(utf8(item))
        elif isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, Iterable) and not isinstance(item, bytes | bytearray):
            stack.extend(item)
    return total


def load_renderer(model: str) -> Renderer:
    """The renderer of ``--model`` (see :func:`~agentwarm.warmup.render.load_chat_renderer`)."""
    return Renderer(load_chat_renderer(model))
