"""``POST /v1/chat/completions`` of ``agentwarm serve`` through the real ``openai`` SDK: prompts
rendered token for token with the engine's chat template, tool calls parsed, streams equal to
plain replies, ``cached_tokens`` in the usage, warm requests, and clear 400s. In-process over
httpx's ASGI transport with a scripted engine, and over the wire against ``agentwarm serve
--model tiny`` (real tokenizer, real template, random weights)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import openai
import pytest

from agentwarm.chat import QWEN2_5
from agentwarm.engines.base import Completion, GenerateParams, StreamChunk
from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.tokenizers import QwenTokenizer
from agentwarm.server import ServerConfig, create_app
from tests.conftest_server import serve

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_user_details",
            "description": "Get the details of a user.",
            "parameters": {
                "type": "object",
                "properties": {"user_id": {"type": "string"}},
                "required": ["user_id"],
            },
        },
    }
]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_user_details", "arguments": '{"user_id": "mia_kim_4397"}'},
}
MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are an airline agent."},
    {"role": "user", "content": "My user id is mia_kim_4397."},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"name": "Mia Kim"}'},
    {
        "role": "user",
        "content": [{"type": "text", "text": "What is my "}, {"type": "text", "text": "name?"}],
    },
]
#: MESSAGES as the template sees them: the text parts joined.
RENDERED = [*MESSAGES[:4], {"role": "user", "content": "What is my name?"}]
TOOL_REPLY = (
    '<tool_call>\n{"name": "get_user_details", "arguments": {"user_id": "u1"}}\n</tool_call>'
)


class Scripted(FakeEngine):
    """A FakeEngine with Qwen2.5's chat template whose replies are ``replies`` in order (one
    chunk per 3 characters when streamed); ``live`` keeps the ids of each generation."""

    def __init__(self, *replies: str) -> None:
        super().__init__(seconds_per_token=0, seconds_per_output_token=0)
        self.chat_template = QWEN2_5
        self.replies = list(replies)
        self.live: list[list[int]] = []

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        self.live.append(list(ids))
        completion = await super().generate_with(ids, params)
        if self.replies:
            completion = dataclasses.replace(
                completion, text=self.replies.pop(0), finish_reason="stop"
            )
        return completion

    async def stream_with(
        self, ids: Sequence[int], params: GenerateParams
    ) -> AsyncIterator[StreamChunk]:
        completion = await self.generate_with(ids, params)
        for i in range(0, len(completion.text), 3):
            yield StreamChunk([], completion.text[i : i + 3], None)
        yield StreamChunk([], "", completion)


def client_for(engine: FakeEngine) -> openai.AsyncOpenAI:
    app = create_app(engine, ServerConfig(max_new_tokens=64), close_engine=False)
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
    return openai.AsyncOpenAI(base_url="http://127.0.0.1/v1", api_key="none", http_client=http)


async def test_the_prompt_is_the_templates_rendering_and_text_comes_back() -> None:
    engine = Scripted("Your name is Mia Kim.")
    out = await client_for(engine).chat.completions.create(
        model="any",
        messages=MESSAGES,
        tools=TOOLS,
        max_tokens=8,  # type: ignore[arg-type]
    )
    ids = engine.encode(QWEN2_5.render(RENDERED, tools=TOOLS, add_generation_prompt=True))
    assert engine.live == [ids]
    (choice,) = out.choices
    assert choice.message.role == "assistant" and choice.message.content == "Your name is Mia Kim."
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    assert out.usage is not None and out.usage.prompt_tokens == len(ids)
    assert out.model == engine.model_name and out.object == "chat.completion"


async def test_tool_calls_are_parsed_for_the_templates_family() -> None:
    engine = Scripted(TOOL_REPLY, TOOL_REPLY)
    client = client_for(engine)
    out = await client.chat.completions.create(
        model="any",
        messages=MESSAGES[:2],
        tools=TOOLS,
        max_tokens=32,  # type: ignore[arg-type]
    )
    (choice,) = out.choices
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.id
    assert call.function.name == "get_user_details"
    assert json.loads(call.function.arguments) == {"user_id": "u1"}
    # Without tools in the request the reply is text, as the endpoints of SGLang and vLLM do.
    plain = await client.chat.completions.create(
        model="any",
        messages=MESSAGES[:2],
        max_tokens=32,  # type: ignore[arg-type]
    )
    assert (
        plain.choices[0].message.content == TOOL_REPLY and not plain.choices[0].message.tool_calls
    )


async def test_a_stream_carries_the_same_reply_and_the_usage() -> None:
    engine = Scripted("Your name is Mia Kim.", "Your name is Mia Kim.")
    client = client_for(engine)
    whole = await client.chat.completions.create(
        model="any",
        messages=MESSAGES,
        max_tokens=8,  # type: ignore[arg-type]
    )
    stream = await client.chat.completions.create(
        model="any",
        messages=MESSAGES,  # type: ignore[arg-type]
        max_tokens=8,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 7  # 21 / 3
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert whole.usage is not None
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert {c.id for c in chunks} == {chunks[0].id}


async def test_a_stream_with_tools_sends_the_calls_at_the_end() -> None:
    engine = Scripted(TOOL_REPLY)
    stream = await client_for(engine).chat.completions.create(
        model="any",
        messages=MESSAGES[:2],  # type: ignore[arg-type]
        tools=TOOLS,  # type: ignore[arg-type]
        max_tokens=32,
        stream=True,
    )
    chunks = [chunk async for chunk in stream]
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert [(tc.index, tc.function and tc.function.name) for tc in calls] == [
        (0, "get_user_details")
    ]
    assert calls[0].function is not None
    assert json.loads(calls[0].function.arguments or "") == {"user_id": "u1"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


async def test_max_tokens_zero_warms_the_prompt_for_the_next_request() -> None:
    engine = FakeEngine(seconds_per_token=0, seconds_per_output_token=0)
    engine.chat_template = QWEN2_5
    client = client_for(engine)
    warm = await client.chat.completions.create(
        model="any",
        messages=MESSAGES,
        max_tokens=0,  # type: ignore[arg-type]
    )
    assert warm.choices == [] and warm.usage is not None and warm.usage.completion_tokens == 0
    live = await client.chat.completions.create(
        model="any",
        messages=MESSAGES,
        max_tokens=4,  # type: ignore[arg-type]
    )
    assert live.usage is not None and live.usage.prompt_tokens == warm.usage.prompt_tokens
    details = live.usage.prompt_tokens_details
    assert details is not None and details.cached_tokens == warm.usage.prompt_tokens - 1
    (prefill, generate) = list(engine.log)
    assert (prefill.kind, generate.kind) == ("prefill", "generate")
    assert prefill.priority < generate.priority  # the warm-up ran at speculative priority


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"n": 2}, "n: only n=1"),
        ({"top_p": 0.5}, "top_p"),
        ({"stop": ["\n"]}, "stop sequences are not supported"),
        ({"max_tokens": 65}, "exceeds this server's limit of 64"),
        ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0]: role must be"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            "only text content parts",
        ),
        ({"tools": [{"type": "function", "function": {}}]}, "tools: each tool"),
        ({"messages": []}, "messages"),
    ],
)
async def test_bad_requests_are_400s_that_name_the_problem(
    extra: dict[str, Any], message: str
) -> None:
    body: dict[str, Any] = {"model": "any", "messages": MESSAGES[:2], "max_tokens": 4, **extra}
    with pytest.raises(openai.BadRequestError, match=message.replace("[", r"\[")):
        await client_for(Scripted()).chat.completions.create(**body)


@pytest.mark.slow
def test_over_the_wire_on_the_tiny_preset() -> None:
    """``agentwarm serve --model tiny``: Qwen2.5's tokenizer and template, token-exact usage,
    the repeated prompt found in the cache, and a greedy stream equal to the plain reply."""
    with serve("--engine", "local", "--model", "tiny") as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none")
        ids = QwenTokenizer().encode(
            QWEN2_5.render(RENDERED, tools=TOOLS, add_generation_prompt=True)
        )
        kwargs: dict[str, Any] = {"model": "tiny", "messages": MESSAGES, "tools": TOOLS}
        first = client.chat.completions.create(**kwargs, max_tokens=6, temperature=0)
        again = client.chat.completions.create(**kwargs, max_tokens=6, temperature=0)
        assert first.usage is not None and again.usage is not None
        assert first.usage.prompt_tokens == again.usage.prompt_tokens == len(ids)
        assert again.usage.prompt_tokens_details is not None
        assert again.usage.prompt_tokens_details.cached_tokens == len(ids) - 1
        plain = client.chat.completions.create(
            model="tiny",
            messages=MESSAGES,
            max_tokens=6,
            temperature=0,  # type: ignore[arg-type]
        )
        stream = client.chat.completions.create(
            model="tiny",
            messages=MESSAGES,  # type: ignore[arg-type]
            max_tokens=6,
            temperature=0,
            stream=True,
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text == plain.choices[0].message.content and text
