"""Messages to token ids, message by message, so that a prefix's ids are a prefix of the whole.

:func:`render_ids` renders ``messages[:k]`` (without the generation prompt) for each ``k`` and
checks that each rendering extends the one before and is a prefix of the full prompt. The text
between two such boundaries is tokenized on its own and the ids concatenated, so the ids of
``messages[:k]`` are an exact prefix of the ids of the whole prompt: what agentwarm prefetches
while the previous step runs is a token-exact prefix of the real request. With a template whose
boundaries sit on special tokens (``<|im_start|>``, ``<|eot_id|>``, ``[INST]``, ...) these are also
the ids of tokenizing the whole text at once.

Some templates are not prefix-stable: Qwen3 renders an assistant turn with an empty
``<think></think>`` block only while it is the last message; Mistral v3 moves the system prompt and
the tools into the last user turn. There the first message whose rendering changes once more
messages follow ends the stable prefix: :attr:`RenderedPrompt.stable` counts the messages before
it, only they are safe to prefetch, and a :class:`PrefixUnstableWarning` names the template and
the message (once per template name). A ``messages[:k]`` the template refuses to render on its own
(Llama 3.1 with tools wants a first user message) is not a boundary; the next one that renders is.

The cost is bounded: a conversation of up to :data:`MAX_PREFIX_RENDERS` messages is checked at
every message; a longer one only at every ``s``-th message (``s`` the smallest power of two that
leaves at most :data:`MAX_PREFIX_RENDERS` such prefixes) and at its last, so one call renders the
template at most ``MAX_PREFIX_RENDERS + 2`` times (+1 with ``then``), whatever its length. A
prefix that was rendered before (:class:`~agentwarm.chat.memo.PrefixMemo`, checked against this
prompt's text) is a boundary without a rendering, so a conversation that grows by a message
renders one new prefix. Between two checked boundaries the messages count as stable when the
later boundary is (their ``boundaries`` entries are the earlier one's, as for a prefix that does
not render): checking each of them would cost one rendering per message, quadratic in all.
"""

from __future__ import annotations

import hashlib
import threading
import warnings
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentwarm.chat.memo import NOT_RENDERED, PrefixMemo, utf8
from agentwarm.chat.template import ChatTemplate, Message, Tool
from agentwarm.errors import ConfigError

__all__ = ("MAX_PREFIX_RENDERS", "PrefixUnstableWarning", "RenderedPrompt", "render_ids")

Encode = Callable[[str], list[int]]

#: Past this many messages, only every ``s``-th prefix is rendered (module docstring).
MAX_PREFIX_RENDERS = 16


class PrefixUnstableWarning(UserWarning):
    """A chat template renders earlier messages differently once later ones follow; only the
    stable prefix of its prompts is prefetched."""


@dataclass(frozen=True)
class RenderedPrompt:
    """A prompt rendered message by message.

    ``boundaries[i]`` (``i`` = 0..``stable``) is the number of leading ids that hold messages
    before ``i`` and nothing of message ``i`` or later: where message ``i`` starts, or, when the
    template cannot render ``messages[:i]`` on its own, the last boundary before it
    (``boundaries[0]`` is 0, even where a template starts every prompt with a BOS).
    ``boundaries[len(messages)]``, when every message is stable, is where the generation prompt
    starts.
    """

    text: str
    """The full prompt text, ``template.render(messages, tools=..., add_generation_prompt=...)``."""
    ids: list[int]
    boundaries: list[int]
    stable: int
    """How many leading messages render the same whatever follows them: safe to prefetch."""

    @property
    def prefix_ids(self) -> list[int]:
        """The ids of the stable messages: a token-exact prefix of :attr:`ids` that stays a
        prefix once the conversation goes on."""
        return self.ids[: self.boundaries[-1]]


_MEMO = PrefixMemo()
_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(template: ChatTemplate, index: int, message: Message) -> None:
    with _warned_lock:
        if template.name in _warned:
            return
        _warned.add(template.name)
    warnings.warn(
        f"chat template {template.name!r} is not prefix-stable: message {index} "
        f"(role {message.get('role')!r}) renders differently once later messages follow; "
        f"prompts are prefetched only up to the message before it",
        PrefixUnstableWarning,
        stacklevel=3,
    )


def render_ids(
    template: ChatTemplate,
    encode: Encode,
    messages: Sequence[Message],
    *,
    tools: Sequence[Tool] | None = None,
    add_generation_prompt: bool = True,
    then: Sequence[Message] = (),
    cache: MutableMapping[str, list[int]] | None = None,
    max_renders: int = MAX_PREFIX_RENDERS,
    **variables: Any,
) -> RenderedPrompt:
    """Render ``messages`` (+ ``tools``) with ``template`` and tokenize them with ``encode``, one
    piece per stable message boundary (see the module docstring).

    The last message is checked only against the generation prompt. A caller that prefetches the
    prefix of a conversation that will go on passes the message(s) expected next as ``then`` (for
    instance an empty user message): a boundary then counts only when the rendering of
    ``[*messages, *then]`` starts with it too (ignored when that does not render). Qwen3 renders a
    last assistant turn with an empty ``<think></think>`` block that a following user turn removes.

    ``cache`` (optional) maps piece text to its ids, to reuse encodings across calls with the same
    ``encode`` (:class:`~agentwarm.chat.memo.PieceCache` bounds it). ``max_renders``: past that
    many messages, only every ``s``-th prefix is rendered (module docstring). ``variables`` are
    extra template variables (the fallback's ``node``, Llama's ``date_string``, ...). Raises
    :class:`~agentwarm.errors.ConfigError` when the template cannot render the whole
    conversation.
    """
    full = template.render(
        messages, tools=tools, add_generation_prompt=add_generation_prompt, **variables
    )
    goes_on = _render_or_none(template, [*messages, *then], tools, variables) if then else None

    def encoded(piece: str) -> list[int]:
        if cache is None:
            return list(encode(piece))
        ids = cache.get(piece)
        if ids is None:
            ids = cache[piece] = list(encode(piece))
        return ids

    def extends(length: int) -> bool:
        """Whether ``full[:length]`` extends the stable prefix and is kept by ``then`` (which
        kept ``full[:done]`` already: only the new span is compared)."""
        fits = done <= length <= len(full)
        return fits and (goes_on is None or goes_on[done:length] == full[done:length])

    keys = _MEMO.keys(template, tools, variables, messages)
    ids: list[int] = []
    boundaries = [0]
    done = 0  # the stable messages render as full[:done]
    hashed = hashlib.sha1(usedforsecurity=False)  # over full[:done]
    stable = 0
    every = _stride(len(messages), max_renders)
    for k in range(1, len(messages) + 1):
        known = _MEMO.get(keys[k])
        if known == NOT_RENDERED:
            continue  # not a boundary: the next messages[:k] that renders is
        end = None
        if isinstance(known, tuple) and extends(known[0]):
            candidate = hashed.copy()
            candidate.update(utf8(full[done : known[0]]))
            if candidate.digest() == known[1]:
                end, hashed = known[0], candidate
        if end is None:  # not known, or not what is known: render it (if it is checked)
            if k % every and k != len(messages):
                continue
            text = _render_or_none(template, messages[:k], tools, variables)
            _MEMO.put(keys[k], text)
            if text is None:
                continue
            if not (extends(len(text)) and full.startswith(text)):
                _warn_once(template, stable, messages[stable])
                break
            end = len(text)
            hashed.update(utf8(full[done:end]))
        ids.extend(encoded(full[done:end]))
        boundaries.extend([boundaries[-1]] * (k - 1 - stable))
        boundaries.append(len(ids))
        done, stable = end, k
    ids.extend(encoded(full[done:]))
    return RenderedPrompt(text=full, ids=ids, boundaries=boundaries, stable=stable)


def _stride(count: int, most: int) -> int:
    """The smallest power of two ``s`` with at most ``most`` multiples of ``s`` in 1..count."""
    s = 1
    while count // s > max(most, 1):
        s *= 2
    return s


def _render_or_none(
    template: ChatTemplate,
    messages: Sequence[Message],
    tools: Sequence[Tool] | None,
    variables: dict[str, Any],
) -> str | None:
    """``messages`` rendered without the generation prompt, or None when the template refuses."""
    try:
        return template.render(messages, tools=tools, add_generation_prompt=False, **variables)
    except ConfigError:
        return None
