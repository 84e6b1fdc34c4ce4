"""Prefix stability: the ids of every stable prefix are a prefix of the ids of the whole prompt,
and a template that is not prefix-stable is detected and named once."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentwarm.chat import ChatTemplate, PrefixUnstableWarning, render_ids
from tests.chat.families import FAMILIES, TOOLS, conversation

# Message text: letters, digits, punctuation, spaces, newlines and non-ASCII, without the
# characters of control tokens (a message that spells one is tokenized as that token).
TEXT = st.text(alphabet="abcXYZ019 .,:'\"{}é€\n\t", max_size=24)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A system message (or none), then turns: a user message and the assistant's answer, which
    may first call a tool (one call, its result) — the shape every fixture template accepts."""
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(TEXT)})
    for turn in range(draw(st.integers(1, 3))):
        messages.append({"role": "user", "content": draw(TEXT)})
        if draw(st.booleans()):
            call_id = f"call{turn:05d}"
            name = TOOLS[draw(st.integers(0, 1))]["function"]["name"]
            arguments = draw(st.dictionaries(st.sampled_from("abc"), TEXT, max_size=2))
            call = {"id": call_id, "type": "function", "function": {"name": name}}
            call["function"]["arguments"] = arguments
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
            messages.append(
                {"role": "tool", "tool_call_id": call_id, "name": name, "content": draw(TEXT)}
            )
        if draw(st.booleans()) or turn == 0:
            messages.append({"role": "assistant", "content": draw(TEXT)})
        else:
            break
    return messages


@pytest.mark.filterwarnings("ignore::agentwarm.chat.PrefixUnstableWarning")
@pytest.mark.parametrize("name", sorted(FAMILIES))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(messages=conversations(), with_tools=st.booleans())
def test_stable_prefix_ids_are_a_prefix_of_the_whole(
    name: str, messages: list[dict[str, Any]], with_tools: bool
) -> None:
    family = FAMILIES[name]
    tools = TOOLS if with_tools else None
    whole = family.render_ids(messages, tools=tools)
    assert whole.ids == family.encode(whole.text)
    assert len(whole.boundaries) == whole.stable + 1
    assert whole.boundaries[0] == 0
    for k in range(1, whole.stable + 1):
        part = family.prefix_ids(messages[:k], tools)
        # a prefix that does not render on its own is not a boundary
        assert part is None or part == whole.ids[: whole.boundaries[k]]


def qwen3(name: str) -> ChatTemplate:
    """Qwen3's template under a name of the test's own (warnings are once per name)."""
    template = FAMILIES["qwen3"].template
    return ChatTemplate(template.source, name=name, eos_token=template.eos_token)


def test_an_unstable_template_is_detected_and_named_once() -> None:
    template = qwen3("qwen3-warns-once")
    encode = FAMILIES["qwen3"].encode
    messages = conversation()
    with pytest.warns(PrefixUnstableWarning, match=r"'qwen3-warns-once'.*message 2") as caught:
        first = render_ids(template, encode, messages, tools=TOOLS)
    assert len(caught) == 1
    # Qwen3 renders a last assistant turn with an empty <think></think> block that later
    # turns drop: only the system and the user message are stable.
    assert first.stable == 2
    assert first.ids == encode(first.text)
    assert first.prefix_ids == first.ids[: first.boundaries[2]]
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrefixUnstableWarning)
        again = render_ids(template, encode, messages, tools=TOOLS)
    assert again == first


def test_a_template_that_moves_tools_to_the_last_user_turn_is_unstable() -> None:
    mistral = FAMILIES["mistral_v3"]
    template = ChatTemplate(
        mistral.template.source, name="mistral-moves-tools", bos_token="<s>", eos_token="</s>"
    )
    with pytest.warns(PrefixUnstableWarning, match=r"'mistral-moves-tools'.*message 1"):
        rendered = render_ids(template, mistral.encode, conversation(), tools=TOOLS)
    assert rendered.stable == 1  # the system message alone renders as "<s>"
    assert mistral.decode(rendered.prefix_ids) == "<s>"


def test_then_checks_the_last_message_against_what_follows() -> None:
    """A prefix that ends on an assistant turn looks stable on its own under Qwen3; with the
    message expected next it is not."""
    template = qwen3("qwen3-then")
    encode = FAMILIES["qwen3"].encode
    messages = [*conversation()[:2], {"role": "assistant", "content": "Sure."}]
    alone = render_ids(template, encode, messages, add_generation_prompt=False)
    assert alone.stable == 3
    with pytest.warns(PrefixUnstableWarning, match="message 2"):
        going_on = render_ids(
            template,
            encode,
            messages,
            add_generation_prompt=False,
            then=[{"role": "user", "content": ""}],
        )
    assert going_on.stable == 2
    assert going_on.ids == alone.ids
    more = [*messages, {"role": "user", "content": "And?"}]
    follow = render_ids(template, encode, more, add_generation_prompt=False)
    assert follow.ids[: len(going_on.prefix_ids)] == going_on.prefix_ids
    assert follow.ids[: len(alone.prefix_ids)] != alone.prefix_ids


def test_the_cache_holds_the_pieces() -> None:
    family = FAMILIES["qwen2_5"]
    cache: dict[str, list[int]] = {}
    messages = conversation()
    first = render_ids(family.template, family.encode, messages, tools=TOOLS, cache=cache)
    assert "".join(cache) == first.text
    calls: list[str] = []

    def counting(text: str) -> list[int]:
        calls.append(text)
        return family.encode(text)

    longer = [*messages, {"role": "assistant", "content": "Yes."}]
    second = render_ids(family.template, counting, longer, tools=TOOLS, cache=cache)
    assert second.ids == family.encode(second.text)
    # only the new message was tokenized: the other pieces and the generation prompt were cached
    assert calls == ["<|im_start|>assistant\nYes.<|im_end|>\n"]


def test_renderings_kept_across_calls_do_not_mix_tools_or_variables() -> None:
    """render_ids keeps what it learned about prefixes between calls; a call with other tools or
    other template variables gets its own."""
    llama = FAMILIES["llama3_1_json"]
    messages = conversation()
    for tools in (TOOLS, None, TOOLS[:1]):
        for date in ("26 Jul 2024", "1 Jan 2025"):
            rendered = render_ids(
                llama.template, llama.encode, messages, tools=tools, date_string=date
            )
            expected = llama.template.render(messages, tools=tools, date_string=date)
            assert rendered.text == expected
            assert rendered.ids == llama.encode(expected)
            assert rendered.stable == len(messages)
