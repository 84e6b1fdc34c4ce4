"""A node's prompt: chat messages rendered with the engine's chat template, prefix-stably.

A node's prompt is the message list ``[system (the node's)] + transcript + [user: the step's
text]`` with the node's ``tools``, rendered by the engine's chat template
(:attr:`Engine.chat_template <agentwarm.engines.Engine.chat_template>`, or
:data:`~agentwarm.chat.FALLBACK`, agentwarm's own format, when it has none) with the generation
prompt, then encoded.

What a candidate node's prompt is known to start with while the previous step runs — its
*prefix*, prefetched into the engine's cache — is the rendering of ``[system] + transcript``
without the generation prompt. Its ids must be a token-exact prefix of the real request's ids
(DESIGN §3), so both are built from the same pieces, cut where messages start (chat templates
open a message with a special token, where no BPE merge crosses), as
:func:`~agentwarm.chat.render_ids` does. Rendering is the costly part, so it is done once per
piece, not once per message boundary per step:

* :data:`~agentwarm.chat.FALLBACK` renders each message on its own, as a header, the content
  verbatim and a newline: the header and trailer of each (role, node) and each node's system
  and tools are rendered once per process, and each message is encoded once per run (a message
  with tool calls is rendered whole, once).
* Any other template may look at neighbouring messages, so it is rendered whole — once per
  node each time the transcript grew, and once per live request — and only the text that grew
  is encoded. When a rendering does not extend the one before (the template is not
  prefix-stable), :func:`~agentwarm.chat.render_ids` renders that prompt message by message: it
  warns once per template and gives the stable prefix, which is all that is prefetched then.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from agentwarm._spec import NodeSpec
from agentwarm.chat import FALLBACK, ChatTemplate, Message, render_ids
from agentwarm.chat.memo import PieceCache
from agentwarm.engines.base import Engine
from agentwarm.errors import ConfigError
from agentwarm.runtime.transcript import NO_SYSTEM, Transcript

__all__ = ("PromptRenderer", "render_system", "render_tools", "step_messages")


def render_system(system: str) -> str:
    """The fallback format's rendering of a system text alone (``""`` for none)."""
    return FALLBACK.render(system_messages(system), add_generation_prompt=False)


def render_tools(tools: Sequence[dict[str, Any]]) -> str:
    """The fallback format's rendering of tool schemas alone (``""`` for none)."""
    return FALLBACK.render([], tools=tools, add_generation_prompt=False)


def system_messages(system: str) -> list[Message]:
    """A node's system text as its prompt's first message (none when empty)."""
    return [{"role": "system", "content": system}] if system else []


def step_messages(text: str | None, node: str) -> list[Message]:
    """A step's own text as its prompt's last message, as the transcript will record it."""
    return [{"role": "user", "content": text, "node": node}] if text else []


#: FALLBACK renders a message as a header, its content verbatim, then a newline, and shows
#: nothing of it but its role, node and content (``chat/fallback.py``): its pieces are made once
#: per process, with a placeholder for the content, and reused by every run.
_CONTENT = "\x00content\x00"
_HEADS: dict[tuple[str, str], str] = {}
_MAX_HEADS = 1024


@functools.lru_cache(maxsize=4096)
def _fallback_around(role: str, node: str | None) -> tuple[str, str]:
    """FALLBACK's rendering of a transcript message of ``role`` added by ``node``: what goes
    before and after its content."""
    message: Message = {"role": role, "content": _CONTENT}
    if node is not None:
        message["node"] = node
    text = FALLBACK.render([NO_SYSTEM, message], add_generation_prompt=False)
    before, _, after = text.partition(_CONTENT)
    return before, after


@functools.lru_cache(maxsize=4096)
def _fallback_generation(node: str) -> str:
    """FALLBACK's generation prompt for ``node``."""
    return FALLBACK.render([NO_SYSTEM], add_generation_prompt=True, node=node)


def _fallback_head(spec: NodeSpec) -> str:
    """FALLBACK's rendering of ``spec``'s system text and tools."""
    key = (spec.system, json.dumps(spec.tools, sort_keys=True, default=repr))
    text = _HEADS.get(key)
    if text is None:
        if len(_HEADS) >= _MAX_HEADS:
            _HEADS.clear()
        messages = system_messages(spec.system)
        text = FALLBACK.render(messages, tools=spec.tools or None, add_generation_prompt=False)
        _HEADS[key] = text
    return text


class _Head:
    """A node's known prefix under a template other than FALLBACK: ``text``, the rendering of
    ``[system] + transcript[:count]`` without the generation prompt (or of its stable part),
    and its ``ids``."""

    __slots__ = ("count", "ids", "text")

    def __init__(self) -> None:
        self.count = -1  # nothing rendered yet
        self.text = ""
        self.ids: list[int] = []


class PromptRenderer:
    """Renders node prompts to token ids for one engine and one transcript (one run)."""

    def __init__(self, engine: Engine, transcript: Transcript) -> None:
        self.template: ChatTemplate = engine.chat_template or FALLBACK
        #: The template's tool-call format (:attr:`ChatTemplate.family`), None when unknown.
        self.tool_call_family = self.template.family
        self._encode = engine.encode
        self._transcript = transcript
        self._messages: list[Message] = []  # the transcript's messages, made once each
        self._local = self.template is FALLBACK
        # FALLBACK: ids of each node's system + tools and generation prompt, of each transcript
        # message, and of the last step text rendered (the transcript records it next).
        self._static: dict[str, list[int]] = {}
        self._generation: dict[str, list[int]] = {}
        self._message_ids: list[list[int]] = []
        self._pending: tuple[str, str, list[int]] | None = None  # (text, node, ids)
        # Any other template: each node's known prefix, and render_ids' encodings by text.
        self._heads: dict[str, _Head] = {}
        self._pieces = PieceCache()  # bounded by tokens and characters

    def prefix_ids(self, spec: NodeSpec) -> list[int]:
        """What is known of ``spec``'s next prompt now: ``[system] + transcript`` rendered
        without the generation prompt (its stable part); a prefix of :meth:`prompt_ids`."""
        if self._local:
            return self._static_ids(spec) + self._transcript_ids()
        return list(self._head(spec).ids)

    def prompt_ids(self, spec: NodeSpec, text: str | None) -> list[int]:
        """The ids of ``spec``'s live request with the step text ``text``.

        Raises :class:`~agentwarm.errors.ConfigError` when the template cannot render it."""
        if self._local:
            ids = self.prefix_ids(spec)
            if text:
                before, after = _fallback_around("user", spec.name)
                self._pending = (text, spec.name, self._encode(before + text + after))
                ids += self._pending[2]
            return ids + self._generation_ids(spec.name)
        head = self._head(spec)
        messages = [*system_messages(spec.system), *self._messages]
        messages += step_messages(text, spec.name)
        full = self._render(spec, messages, add_generation_prompt=True)
        if full.startswith(head.text):
            return head.ids + self._encode(full[len(head.text) :])
        return self._by_message(spec, messages, add_generation_prompt=True)[1]

    def boundary(self, spec: NodeSpec, token: int) -> tuple[str | None, int | None]:
        """Where token index ``token`` of ``spec``'s prompt falls, as ``(segment, message)``:
        ``head`` (its system text and tools), ``message`` (``message``: its index among the
        prompt's messages, the system one first) or ``step`` (the step's own text and the
        generation prompt). For templates other than :data:`~agentwarm.chat.FALLBACK` (which
        renders each message on its own), the first rendering of ``[system] + transcript[:k]``
        longer than ``token`` names it: a rendering per message, for a rare event (a prefix
        mismatch); ``(None, None)`` when the template cannot render them."""
        first = 1 if spec.system else 0
        if self._local:
            at = len(self._static_ids(spec))
            if token < at:
                return "head", 0 if spec.system else None
            self._transcript_ids()  # every message encoded
            for index, ids in enumerate(self._message_ids):
                at += len(ids)
                if token < at:
                    return "message", first + index
            return "step", None
        self._sync_messages()
        messages = [*system_messages(spec.system), *self._messages]
        try:
            for k in range(1, len(messages) + 1):
                if token < len(self._encode(self._render(spec, messages[:k]))):
                    return ("head" if k == first else "message"), k - 1
        except ConfigError:
            return None, None
        return "step", None

    # --- FALLBACK: every message rendered on its own ----------------------------------------

    def _static_ids(self, spec: NodeSpec) -> list[int]:
        ids = self._static.get(spec.name)
        if ids is None:
            ids = self._static[spec.name] = self._encode(_fallback_head(spec))
        return ids

    def _generation_ids(self, node: str) -> list[int]:
        ids = self._generation.get(node)
        if ids is None:
            ids = self._generation[node] = self._encode(_fallback_generation(node))
        return ids

    def _transcript_ids(self) -> list[int]:
        transcript, done = self._transcript, self._message_ids
        while len(done) < len(transcript):
            entry = transcript[len(done)]
            pending, self._pending = self._pending, None
            if (
                pending is not None
                and entry.role == "user"
                and pending[:2] == (entry.content, entry.node)
            ):
                done.append(pending[2])  # the step's text, now recorded
                continue
            if entry.tool_calls:  # rendered whole: the calls follow the content
                text = FALLBACK.render([NO_SYSTEM, entry.message()], add_generation_prompt=False)
                done.append(self._encode(text))
                continue
            before, after = _fallback_around(entry.role, entry.node)
            done.append(self._encode(before + entry.content + after))
        out: list[int] = []
        for ids in done:
            out.extend(ids)
        return out

    # --- any other template: rendered whole, encoded where it grew --------------------------

    def _head(self, spec: NodeSpec) -> _Head:
        """``spec``'s known prefix, brought up to the transcript's length."""
        self._sync_messages()
        head = self._heads.get(spec.name)
        if head is None:
            head = self._heads[spec.name] = _Head()
        if head.count == len(self._messages):
            return head
        head.count = len(self._messages)
        messages = [*system_messages(spec.system), *self._messages]
        if not messages:
            return head
        try:
            text = self._render(spec, messages)
        except ConfigError:  # e.g. a template that wants a user message first: nothing known
            return head
        if text.startswith(head.text):
            head.ids += self._encode(text[len(head.text) :])
            head.text = text
        else:
            head.text, head.ids = self._by_message(spec, messages)
        return head

    def _by_message(
        self, spec: NodeSpec, messages: list[Message], *, add_generation_prompt: bool = False
    ) -> tuple[str, list[int]]:
        """A rendering that did not extend the node's prefix, redone message by message
        (:func:`~agentwarm.chat.render_ids`, which warns): the text and ids of its stable
        prefix, or the whole prompt's ids with ``add_generation_prompt``."""
        rendered = render_ids(
            self.template,
            self._encode,
            messages,
            tools=spec.tools or None,
            add_generation_prompt=add_generation_prompt,
            cache=self._pieces,
        )
        if add_generation_prompt:
            return rendered.text, rendered.ids
        stable = messages[: rendered.stable]
        text = self._render(spec, stable) if stable else ""
        return text, rendered.prefix_ids

    # --- shared -----------------------------------------------------------------------------

    def _sync_messages(self) -> None:
        transcript, messages = self._transcript, self._messages
        while len(messages) < len(transcript):
            messages.append(transcript[len(messages)].message())

    def _render(
        self, spec: NodeSpec, messages: list[Message], *, add_generation_prompt: bool = False
    ) -> str:
        return self.template.render(
            messages,
            tools=spec.tools or None,
            add_generation_prompt=add_generation_prompt,
            node=spec.name,
        )
