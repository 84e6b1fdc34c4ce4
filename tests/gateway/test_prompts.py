"""What the gateway prefetches for a node: its head + the conversation its shape predicts, as
token ids that are an exact prefix of the real request's (Qwen2.5's template and tokenizer)."""

from __future__ import annotations

from typing import Any

import pytest

from agentwarm.chat import FALLBACK, QWEN2_5
from agentwarm.engines.tokenizers import ByteTokenizer, QwenTokenizer
from agentwarm.errors import ConfigError
from agentwarm.gateway.heads import HeadRegistry
from agentwarm.gateway.prompts import (
    Renderer,
    Shape,
    Shapes,
    classify,
    expected_conversation,
    load_renderer,
)
from agentwarm.gateway.sessions import chain, extend
from agentwarm.warmup.render import ChatRenderer

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_user_details",
            "description": "Get a user's profile.",
            "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}},
        },
    }
]
SYSTEM: dict[str, Any] = {
    "role": "system",
    "content": "You are the reservations agent of an airline.",
}
USER: dict[str, Any] = {
    "role": "user",
    "content": "I want to change my flight. My id is mia_kim_4397.",
}
REPLY: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_user_details", "arguments": '{"user_id":"mia_kim_4397"}'},
        }
    ],
}
RESULT: dict[str, Any] = {
    "role": "tool",
    "tool_call_id": "call_1",
    "content": '{"name": "Mia Kim"}',
}


def test_classify_tells_the_three_shapes() -> None:
    def shape(conversation: list[dict[str, Any]], last: list[dict[str, Any]], reply: Any) -> Shape:
        before = chain(last)
        after = extend(before, reply) if reply is not None else None
        return classify(chain(conversation), before, after)

    last = [USER]
    assert shape([USER, REPLY, RESULT], last, REPLY) is Shape.CONTINUE
    echoed = {**REPLY, "content": "", "tool_calls": [{**REPLY["tool_calls"][0], "id": "x"}]}
    assert shape([USER, echoed, RESULT], last, REPLY) is Shape.CONTINUE  # as a client echoes
    assert shape([USER], last, REPLY) is Shape.SAME
    assert shape([USER, RESULT], last, REPLY) is Shape.SAME
    assert shape([{"role": "user", "content": "Book a hotel."}], last, REPLY) is Shape.FRESH
    assert shape([USER], [], None) is Shape.FRESH


def test_expected_conversation_and_the_learned_rule() -> None:
    assert expected_conversation(Shape.CONTINUE, [USER], REPLY) == [USER, REPLY]
    assert expected_conversation(Shape.SAME, [USER], REPLY) == [USER]
    assert expected_conversation(Shape.FRESH, [USER], REPLY) == []
    shapes = Shapes()
    assert shapes.rule("a") is Shape.CONTINUE  # nothing seen yet
    shapes.observe("a", Shape.FRESH)
    shapes.observe("a", Shape.SAME)
    shapes.observe("a", Shape.FRESH)
    assert shapes.rule("a") is Shape.FRESH and shapes.rule("b") is Shape.CONTINUE
    assert (
        Shapes.from_dict(shapes.to_dict()).to_dict()
        == shapes.to_dict()
        == {"a": {"fresh": 2, "same": 1}}
    )
    with pytest.raises(ValueError):
        Shapes.from_dict({"a": {"fresh": -1}})
    with pytest.raises(ValueError):
        Shapes.from_dict({"a": {"sideways": 1}})


def test_prefetched_ids_are_an_exact_prefix_of_the_real_request() -> None:
    tokenizer = QwenTokenizer()
    renderer = Renderer(ChatRenderer(tokenizer.encode, QWEN2_5))
    head, _ = HeadRegistry().identify([SYSTEM, USER], TOOLS)
    prefix = renderer.prefix_ids(head, [USER, REPLY])
    real = tokenizer.encode(
        QWEN2_5.render([SYSTEM, USER, REPLY, RESULT], tools=TOOLS, add_generation_prompt=True)
    )
    known = QWEN2_5.render([SYSTEM, USER, REPLY], tools=TOOLS, add_generation_prompt=False)
    assert prefix == tokenizer.encode(known)
    assert real[: len(prefix)] == prefix and len(real) > len(prefix)
    # The head alone (a fresh node): system and tools.
    alone = renderer.prefix_ids(head, [])
    assert alone == tokenizer.encode(
        QWEN2_5.render([SYSTEM], tools=TOOLS, add_generation_prompt=False)
    )
    assert prefix[: len(alone)] == alone


def test_load_renderer_for_presets_and_bad_models() -> None:
    qwen = load_renderer("tiny")
    assert isinstance(qwen.chat.tokenizer, QwenTokenizer) and qwen.template is QWEN2_5
    byte = load_renderer("tiny-bytes")
    assert isinstance(byte.chat.tokenizer, ByteTokenizer) and byte.template is FALLBACK
    with pytest.raises(ConfigError, match="neither a preset"):
        load_renderer("no-such-model")
