"""Tool calls read out of model replies, per supported family."""

from __future__ import annotations

import json

import pytest

from agentwarm.chat import family_of, parse_tool_calls, split_tool_calls
from tests.chat.families import FAMILIES


def calls(text: str, template: str) -> list[tuple[str, dict[str, object]]]:
    """(name, arguments) of each call, checking the OpenAI form on the way."""
    out = []
    for call in parse_tool_calls(text, template):
        assert call["type"] == "function"
        assert len(call["id"]) == 9 and call["id"].isalnum()
        arguments = call["function"]["arguments"]
        assert isinstance(arguments, str)
        out.append((call["function"]["name"], json.loads(arguments)))
    return out


@pytest.mark.parametrize("name", ["qwen2.5", "Qwen3-8B", "hermes", "NousResearch/Hermes-3"])
def test_hermes_tool_call_blocks(name: str) -> None:
    text = (
        "Let me look.\n<tool_call>\n"
        '{"name": "get_reservation_details", "arguments": {"reservation_id": "8JX2WO"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "refund", "arguments": {"amount": 12.5, "note": "é"}}'
        "\n</tool_call>"
    )
    assert calls(text, name) == [
        ("get_reservation_details", {"reservation_id": "8JX2WO"}),
        ("refund", {"amount": 12.5, "note": "é"}),
    ]
    content, found = split_tool_calls(text, name)
    assert content == "Let me look."
    assert len(found) == 2
    # a reply cut at the end of the call, before the closing tag, still counts
    assert calls('<tool_call>\n{"name": "a", "arguments": {}}', name) == [("a", {})]


def test_llama3_json_calls() -> None:
    assert calls('{"name": "get_weather", "parameters": {"city": "Paris"}}', "llama3.1") == [
        ("get_weather", {"city": "Paris"})
    ]
    text = '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "arguments": {}}'
    assert calls(text, "Llama-3.2-3B-Instruct") == [("a", {"x": 1}), ("b", {})]
    # prose, or JSON that is not a call, is an answer
    assert parse_tool_calls("The weather is fine.", "llama3") == []
    assert parse_tool_calls('{"city": "Paris"}', "llama3") == []
    assert parse_tool_calls('{"name": "a", "parameters": {}} and more', "llama3") == []


def test_mistral_calls() -> None:
    text = '[TOOL_CALLS] [{"name": "a", "arguments": {"x": "y"}}, {"name": "b", "arguments": {}}]'
    assert calls(text, "mistral_v3") == [("a", {"x": "y"}), ("b", {})]
    # decoding drops the special [TOOL_CALLS]: the bare list is read too
    assert calls('[{"name": "a", "arguments": {"x": "y"}}]', "Mistral-7B-Instruct-v0.3") == [
        ("a", {"x": "y"})
    ]
    assert parse_tool_calls("[1, 2] is a list.", "mistral") == []
    assert parse_tool_calls("[TOOL_CALLS] not json", "mistral") == []


def test_unknown_families_and_plain_replies_give_no_calls() -> None:
    assert parse_tool_calls('<tool_call>{"name": "a", "arguments": {}}</tool_call>', "gemma") == []
    assert parse_tool_calls("agentwarm-fallback reply", "agentwarm-fallback") == []
    assert parse_tool_calls("Just an answer.", "qwen2.5") == []
    assert parse_tool_calls("<tool_call>not json</tool_call>", "qwen2.5") == []
    assert split_tool_calls("Just an answer.", "qwen2.5") == ("Just an answer.", [])


def test_ids_are_deterministic_and_distinct() -> None:
    text = (
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    )
    first = parse_tool_calls(text, "qwen2.5")
    assert first == parse_tool_calls(text, "qwen2.5")
    assert first[0]["id"] != first[1]["id"]


def test_family_of() -> None:
    assert family_of("qwen2.5") == "hermes"
    assert family_of("hermes") == "hermes"
    assert family_of("meta-llama/Llama-3.1-8B-Instruct") == "llama3"
    assert family_of("llama3") == "llama3"
    assert family_of("mistral") == "mistral"
    assert family_of("agentwarm-fallback") is None


@pytest.mark.parametrize("name", ["qwen2_5", "hermes", "qwen3", "llama3_1_json", "mistral_v3"])
def test_a_parsed_call_renders_back_in_the_template(name: str) -> None:
    """What the parser returns is what the template takes back in an assistant message."""
    family = FAMILIES[name]
    reply = {
        "hermes": '<tool_call>\n{"name": "lookup", "arguments": {"id": "8JX2WO"}}\n</tool_call>',
        "llama3": '{"name": "lookup", "parameters": {"id": "8JX2WO"}}',
        "mistral": '[TOOL_CALLS] [{"name": "lookup", "arguments": {"id": "8JX2WO"}}]',
    }[str(family.template.family)]
    found = parse_tool_calls(reply, str(family.template.family))
    messages = [
        {"role": "user", "content": "Look 8JX2WO up."},
        {"role": "assistant", "content": None, "tool_calls": found},
    ]
    text = family.template.render(messages, add_generation_prompt=False, **dict(family.variables))
    assert "lookup" in text
    assert '"id": "8JX2WO"' in text
