"""FALLBACK is agentwarm's historic prompt format: with the byte tokenizer, the ids of a message
list are those the old ``PromptRenderer`` gave the same system, tools, transcript and step."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentwarm.chat import FALLBACK, render_ids
from agentwarm.engines.tokenizers import ByteTokenizer

ENCODE = ByteTokenizer().encode


def historic_ids(
    system: str,
    tools: list[dict[str, Any]],
    entries: list[tuple[str, str, str | None]],
    text: str | None,
    node: str,
) -> list[int]:
    """The ids of ``PromptRenderer.prompt_ids`` as of commit a2917e8 (``runtime/prompt.py`` and
    ``runtime/transcript.py``), written out: system, tools, each transcript entry's header and
    body, the step's text as a user entry, the assistant header — each tokenized on its own."""

    def header(role: str, by: str | None) -> str:
        return f"<|{role}{f' {by}' if by else ''}|>\n"

    segments = []
    if system:
        segments.append(f"<|system|>\n{system}\n")
    if tools:
        lines = [json.dumps(t, sort_keys=True, separators=(",", ":")) for t in tools]
        segments.append("<|tools|>\n" + "\n".join(lines) + "\n")
    for role, content, by in entries:
        segments += [header(role, by), f"{content}\n"]
    if text:
        segments += [header("user", node), f"{text}\n"]
    segments.append(header("assistant", node))
    return [i for segment in segments for i in ENCODE(segment)]


def messages_of(
    system: str,
    entries: list[tuple[str, str, str | None]],
    text: str | None,
    node: str,
    *,
    empty_system: bool = True,
) -> list[dict[str, Any]]:
    """The message list the runtime builds: the node's system, the transcript, the step text."""
    messages: list[dict[str, Any]] = []
    if system or empty_system:
        messages.append({"role": "system", "content": system})
    for role, content, by in entries:
        message = {"role": role, "content": content}
        if by:
            message["node"] = by
        messages.append(message)
    if text:
        messages.append({"role": "user", "content": text, "node": node})
    return messages


SUPPORT_TOOLS = [
    {"name": "lookup_order", "description": "Look an order up.", "parameters": {"id": "str"}},
    {"name": "refund", "description": "Rembourser — a refund.", "parameters": {}},
]


def test_the_support_bot_prompt_is_unchanged() -> None:
    entries = [
        ("user", "My order 1234 never arrived.", None),
        ("assistant", "intent: refund", "classify"),
        ("user", "lookup_order -> shipped 3 days ago", "lookup"),
    ]
    system, step = "You are a support agent.", "Draft a reply."
    expected = historic_ids(system, SUPPORT_TOOLS, entries, step, "reply")
    for empty_system in (True, False):
        messages = messages_of(system, entries, step, "reply", empty_system=empty_system)
        rendered = render_ids(FALLBACK, ENCODE, messages, tools=SUPPORT_TOOLS, node="reply")
        assert rendered.ids == expected
        assert rendered.stable == len(messages)
    assert rendered.text.startswith("<|system|>\nYou are a support agent.\n<|tools|>\n{")
    assert rendered.text.endswith("<|user reply|>\nDraft a reply.\n<|assistant reply|>\n")


NAME = st.text(alphabet="abcxyz_-", min_size=1, max_size=8)
TEXT = st.text(max_size=30)
ENTRY = st.tuples(st.sampled_from(["user", "assistant", "tool"]), TEXT, st.none() | NAME)
TOOL = st.dictionaries(NAME, st.none() | TEXT | st.integers(), max_size=3)


@settings(max_examples=200, deadline=None)
@given(
    system=TEXT,
    tools=st.lists(TOOL, max_size=3),
    entries=st.lists(ENTRY, max_size=6),
    text=st.none() | TEXT,
    node=NAME,
    empty_system=st.booleans(),
)
def test_fallback_ids_are_the_historic_ids(
    system: str,
    tools: list[dict[str, Any]],
    entries: list[tuple[str, str, str | None]],
    text: str | None,
    node: str,
    empty_system: bool,
) -> None:
    messages = messages_of(system, entries, text, node, empty_system=empty_system)
    rendered = render_ids(FALLBACK, ENCODE, messages, tools=tools, node=node)
    assert rendered.ids == historic_ids(system, tools, entries, text, node)
    assert rendered.stable == len(messages)
    # the prefix without the step is a prefix of the prompt (what is prefetched)
    known = messages_of(system, entries, None, node, empty_system=empty_system)
    prefix = render_ids(FALLBACK, ENCODE, known, tools=tools, add_generation_prompt=False)
    assert rendered.ids[: len(prefix.ids)] == prefix.ids


def test_without_node_the_generation_header_is_untagged() -> None:
    text = FALLBACK.render([{"role": "user", "content": "hi"}])
    assert text == "<|user|>\nhi\n<|assistant|>\n"
    assert FALLBACK.render([], tools=None, add_generation_prompt=False) == ""


def test_assistant_tool_calls_are_one_json_line_each_after_the_content() -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_user", "arguments": '{"user_id": "mia_kim_4397", "n": "\u00e9"}'},
    }
    messages = [
        {"role": "system", "content": ""},
        {"role": "assistant", "content": None, "node": "a", "tool_calls": [call]},
        {"role": "assistant", "content": "Looking.", "tool_calls": [call, call]},
        {"role": "assistant", "content": "Done."},  # no calls: the historic rendering
    ]
    line = '{"name":"get_user","arguments":{"user_id":"mia_kim_4397","n":"\\u00e9"}}\n'
    assert FALLBACK.render(messages, add_generation_prompt=False) == (
        f"<|assistant a|>\n{line}<|assistant|>\nLooking.\n{line}{line}<|assistant|>\nDone.\n"
    )
