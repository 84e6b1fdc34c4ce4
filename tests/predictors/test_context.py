"""What the conversation says at a prediction point (:mod:`agentwarm.predictors.context`):
:meth:`StepContext.from_messages` and :func:`conversation_transitions` on small hand-written
OpenAI message lists, checked field by field."""

from __future__ import annotations

import json
from typing import Any

from agentwarm.predictors import END, StepContext, conversation_transitions
from agentwarm.predictors.context import MAX_TEXT, RESPOND, step_of

Message = dict[str, Any]


def call(name: str, **arguments: Any) -> Message:
    """An assistant turn that only calls the tool ``name``."""
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {"role": "assistant", "content": None, "tool_calls": [{"function": function}]}


def test_an_empty_conversation_is_the_empty_context() -> None:
    assert StepContext.from_messages([]) == StepContext()
    assert StepContext().empty
    assert not StepContext(last_tool="lookup").empty
    only_system = [{"role": "system", "content": "You are an airline agent."}]
    assert StepContext.from_messages(only_system) == StepContext()


def test_content_given_as_parts_is_read_as_its_text_parts() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "cancel my trip"},
                {"type": "text", "text": "please"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Which one?"}]},
    ]
    assert StepContext.from_messages(messages) == StepContext(
        first_user="cancel my trip\nplease",
        last_user="cancel my trip\nplease",
        last_assistant="Which one?",
    )


def test_tool_calls_results_and_names() -> None:
    messages: list[Message] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "where is my bag"},
        {"role": "assistant", "content": "Let me look.", "tool_calls": []},
        call("find_bag", tag="AB12"),
        {"role": "tool", "content": '{"status": "lost"}'},
    ]
    # A turn with only tool calls keeps the text before; a tool message without a name keeps
    # the called tool's.
    assert StepContext.from_messages(messages) == StepContext(
        first_user="where is my bag",
        last_user="where is my bag",
        last_assistant="Let me look.",
        last_tool="find_bag",
        last_tool_args='{"tag": "AB12"}',
        last_tool_result='{"status": "lost"}',
    )
    named: list[Message] = [
        *messages,
        {"role": "tool", "name": "file_claim", "content": "claim 7 filed"},
    ]
    assert StepContext.from_messages(named) == StepContext(
        first_user="where is my bag",
        last_user="where is my bag",
        last_assistant="Let me look.",
        last_tool="file_claim",
        last_tool_args='{"tag": "AB12"}',
        last_tool_result="claim 7 filed",
    )
    # A user message after the result: the result is old news, the rest stays.
    later: list[Message] = [
        *named,
        {"role": "user", "content": "thanks"},
        {"role": "assistant", "content": "Ok."},
    ]
    assert StepContext.from_messages(later) == StepContext(
        first_user="where is my bag",
        last_user="thanks",
        last_assistant="Ok.",
        last_tool="file_claim",
        last_tool_args='{"tag": "AB12"}',
        last_tool_result="",
    )


def test_arguments_given_as_an_object_and_long_texts_are_cut() -> None:
    function = {"name": "search", "arguments": {"q": "x"}}
    messages: list[Message] = [
        {"role": "user", "content": "a" * (MAX_TEXT + 5)},
        {"role": "assistant", "content": "", "tool_calls": [{"function": function}]},
        {"role": "tool", "content": "b" * (MAX_TEXT + 1)},
        {"role": "narrator", "content": "ignored"},
    ]
    assert StepContext.from_messages(messages) == StepContext(
        first_user="a" * MAX_TEXT,
        last_user="a" * MAX_TEXT,
        last_tool="search",
        last_tool_args="{'q': 'x'}",
        last_tool_result="b" * MAX_TEXT,
    )


def test_the_step_of_an_assistant_message() -> None:
    assert step_of(call("find_bag")) == "find_bag"
    assert step_of({"role": "assistant", "content": "Hi"}) == RESPOND == "respond"
    assert step_of({"role": "assistant", "tool_calls": [{"function": {}}]}) == RESPOND


CONVERSATION: list[Message] = [
    {"role": "system", "content": "You are an airline agent."},
    {"role": "user", "content": "cancel my reservation"},
    call("get_reservation", id="X1"),
    {"role": "tool", "content": "Error: not found"},
    {"role": "assistant", "content": "I could not find it. Its id?"},
    {"role": "user", "content": "Y2"},
    call("cancel_reservation", id="Y2"),
    {"role": "tool", "content": "ok"},
    {"role": "assistant", "content": "Cancelled."},
]

TASK = "cancel my reservation"
AFTER_LOOKUP = StepContext(TASK, TASK, "", "get_reservation", '{"id": "X1"}', "Error: not found")
AFTER_QUESTION = StepContext(
    TASK, "Y2", "I could not find it. Its id?", "get_reservation", '{"id": "X1"}', ""
)
AFTER_CANCEL = StepContext(
    TASK, "Y2", "I could not find it. Its id?", "cancel_reservation", '{"id": "Y2"}', "ok"
)
AT_THE_END = StepContext(TASK, "Y2", "Cancelled.", "cancel_reservation", '{"id": "Y2"}', "ok")


def test_transitions_without_an_entry_start_at_the_first_step() -> None:
    assert conversation_transitions(CONVERSATION) == [
        (("get_reservation",), AFTER_LOOKUP, RESPOND),
        (("get_reservation", RESPOND), AFTER_QUESTION, "cancel_reservation"),
        (("get_reservation", RESPOND, "cancel_reservation"), AFTER_CANCEL, RESPOND),
        (("get_reservation", RESPOND, "cancel_reservation", RESPOND), AT_THE_END, END),
    ]


def test_transitions_with_an_entry_predict_the_first_step_too() -> None:
    first = StepContext(first_user=TASK, last_user=TASK)
    assert conversation_transitions(CONVERSATION, entry="start") == [
        (("start",), first, "get_reservation"),
        (("start", "get_reservation"), AFTER_LOOKUP, RESPOND),
        (("start", "get_reservation", RESPOND), AFTER_QUESTION, "cancel_reservation"),
        (("start", "get_reservation", RESPOND, "cancel_reservation"), AFTER_CANCEL, RESPOND),
        (
            ("start", "get_reservation", RESPOND, "cancel_reservation", RESPOND),
            AT_THE_END,
            END,
        ),
    ]


def test_a_conversation_without_assistant_turns_has_no_transitions() -> None:
    user_only = [{"role": "user", "content": "hello"}]
    assert conversation_transitions([]) == []
    assert conversation_transitions([], entry="start") == []
    assert conversation_transitions(user_only) == []
    assert conversation_transitions(user_only, entry="start") == []
    one = [*user_only, {"role": "assistant", "content": "Hi!"}]
    context = StepContext("hello", "hello", "Hi!")
    assert conversation_transitions(one) == [((RESPOND,), context, END)]
    assert conversation_transitions(one, entry="start") == [
        (("start",), StepContext("hello", "hello"), RESPOND),
        (("start", RESPOND), context, END),
    ]
