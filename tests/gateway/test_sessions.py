"""Sessions learned from traffic: message digests, hints, continuity and the tracker's bounds."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentwarm.chat import Message
from agentwarm.gateway.sessions import SessionTracker, chain, message_digest, session_of_hint

PLANNER, WRITER = "a1b2c3d4e5f60718", "0f1e2d3c4b5a6978"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def assistant(text: str | None = None, **calls: dict[str, Any]) -> Message:
    message: Message = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls.items())
        ]
    return message


def tool(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def echoed(message: Message, suffix: str = "x") -> Message:
    """``message`` as a client sends it back: other call ids, compact arguments, content "",
    extra fields."""
    out: Message = {**message, "content": message.get("content") or "", "refusal": None}
    calls = []
    for call in message.get("tool_calls", ()):
        args = json.dumps(json.loads(call["function"]["arguments"]), separators=(",", ":"))
        calls.append({**call, "id": call["id"] + suffix, "function": {**call["function"]}})
        calls[-1]["function"]["arguments"] = args
    if calls:
        out["tool_calls"] = calls
    return out


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=8,
)
messages = st.builds(
    lambda role, text: {"role": role, "content": text},
    st.sampled_from(["user", "assistant", "tool"]),
    st.text(max_size=10),
)


# --- message_digest and chain -------------------------------------------------------------


@given(st.dictionaries(st.text(max_size=5), json_values, max_size=4), st.sampled_from([0, 2]))
def test_digest_ignores_call_ids_and_argument_spacing(args: dict[str, Any], indent: int) -> None:
    def call(id_: str, arguments: Any) -> Message:
        function = {"name": "search", "arguments": arguments}
        return {"role": "assistant", "tool_calls": [{"id": id_, "function": function}]}

    spaced = json.dumps(args, indent=indent or None)
    compact = json.dumps(args, separators=(",", ":"), sort_keys=True)
    digest = message_digest(call("call_1", spaced))
    assert digest == message_digest(call("call_2", compact)) == message_digest(call("c", args))


def test_digest_invariances() -> None:
    reply = assistant(None, search={"q": "Paris", "n": 2})
    assert message_digest(reply) == message_digest(echoed(reply))
    assert message_digest(user("hi")) == message_digest(
        {"role": "user", "content": [{"type": "text", "text": "h"}, {"type": "text", "text": "i"}]}
    )
    assert message_digest(assistant("ok")) == message_digest({**assistant("ok"), "tool_calls": []})
    assert len(message_digest(user("hi"))) == 16
    documented = json.dumps(["user", "hi", [], None, None], separators=(",", ":"))
    assert message_digest(user("hi")) == hashlib.sha256(documented.encode()).hexdigest()[:16]
    assert message_digest(user("hi")) == "4ea1dacf968a549f"


@pytest.mark.parametrize(
    "other",
    [
        {"role": "assistant", "content": "hi"},
        user("hi "),
        {**user("hi"), "name": "bob"},
        {**user("hi"), "tool_call_id": "call_0"},
        {**user("hi"), "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
    ],
)
def test_digest_sensitivities(other: Message) -> None:
    assert message_digest(other) != message_digest(user("hi"))


def test_digest_sees_tool_names_arguments_and_their_order() -> None:
    base = message_digest(assistant(None, a={"x": 1}, b={}))
    assert base != message_digest(assistant(None, a={"x": 2}, b={}))
    assert base != message_digest(assistant(None, c={"x": 1}, b={}))
    assert base != message_digest(assistant(None, b={}, a={"x": 1}))
    bad = {"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": "{x"}}]}
    assert message_digest(bad) != message_digest(assistant(None, a={}))


def test_digest_refuses_a_non_mapping() -> None:
    with pytest.raises(ValueError, match="must be a JSON object, got str"):
        message_digest("hi")  # type: ignore[arg-type]


@given(st.lists(messages, max_size=6))
def test_chain_identifies_each_prefix(conversation: list[Message]) -> None:
    digests = chain(conversation)
    assert len(digests) == len(conversation)
    for k in range(len(conversation)):
        assert chain(conversation[: k + 1]) == digests[: k + 1]
    assert len(set(digests)) == len(digests)


def test_chain_order_matters() -> None:
    a, b = user("a"), user("b")
    assert chain([a, b])[-1] != chain([b, a])[-1]
    assert chain([a, a])[-1] != chain([a])[-1]


# --- hints ----------------------------------------------------------------------------------


def test_session_of_hint() -> None:
    assert session_of_hint("run-42") == "run-42"
    named = session_of_hint("user@example.com")
    assert named is not None and named.startswith("user-example.com-") and len(named) == 33
    assert session_of_hint("user#example.com") not in (named, None)
    assert session_of_hint("!!!") is None
    long = session_of_hint("x" * 1000)
    assert long is not None and len(long.encode()) <= 256
    assert long != session_of_hint("x" * 999)


def test_hinted_sessions() -> None:
    tracker = SessionTracker()
    sid, _ = tracker.assign([user("hi")], PLANNER)
    tracker.record(sid, [user("hi")], PLANNER, assistant("hello"))
    conversation = [user("hi"), assistant("hello"), user("more")]
    assert tracker.assign(conversation, PLANNER, hint="run-7") == ("run-7", True)
    assert tracker.assign(conversation, PLANNER, hint="run-7") == ("run-7", False)
    # a hint that sanitizes to nothing is no hint: continuity applies
    assert tracker.assign(conversation, PLANNER, hint="???") == (sid, False)
    # once recorded, an unhinted continuation of the hinted session joins it
    tracker.record("run-7", conversation, PLANNER, assistant("done"))
    later = [*conversation, assistant("done"), user("thanks")]
    assert tracker.assign(later, WRITER) == ("run-7", False)


def test_a_session_belongs_to_one_tenant() -> None:
    """The same hint, or a continued conversation, of another tenant is another session; no
    hint of the default tenant can name a salted tenant's session."""
    tracker = SessionTracker()
    a, b = "a" * 32, "b" * 32
    assert tracker.assign([user("hi")], PLANNER, hint="alice", tenant=a) == (f"alice~{a}", True)
    assert tracker.assign([user("hi")], PLANNER, hint="alice", tenant=b) == (f"alice~{b}", True)
    assert tracker.assign([user("hi")], PLANNER, hint="alice") == ("alice", True)
    assert session_of_hint(f"alice~{a}") not in (f"alice~{a}", None)
    sid, _ = tracker.assign([user("hi")], PLANNER, tenant=a)
    tracker.record(sid, [user("hi")], PLANNER, assistant("hello"), tenant=a)
    more = [user("hi"), assistant("hello"), user("more")]
    assert tracker.assign(more, WRITER, tenant=a) == (sid, False)
    other, new = tracker.assign(more, WRITER, tenant=b)
    assert new and other != sid
    assert tracker.assign(more, WRITER)[1]  # nor the default tenant
    tracker.check_integrity()


# --- continuity -----------------------------------------------------------------------------


def test_an_agent_loop_sent_step_by_step_keeps_one_session_across_a_handoff() -> None:
    tracker = SessionTracker()
    conversation: list[Message] = [user("Book me a flight to Paris")]
    steps: list[tuple[str, Message]] = [
        (PLANNER, assistant(None, search={"to": "Paris"})),
        (PLANNER, assistant("Found AF123.")),
        (WRITER, assistant(None, book={"flight": "AF123"})),  # handoff to another head
        (WRITER, assistant("Booked.")),
        (PLANNER, assistant("Anything else?")),
    ]
    sid = ""
    for i, (head, reply) in enumerate(steps):
        got, new = tracker.assign(conversation, head)
        sid = sid or got
        assert (got, new) == (sid, i == 0)
        tracker.record(sid, conversation, head, reply)
        conversation = [*conversation, echoed(reply, suffix=str(i))]
        if reply.get("tool_calls"):
            conversation.append(tool(reply["tool_calls"][0]["id"] + str(i), "ok"))
        elif i == 1:
            pass  # the writer takes over the conversation as it stands (conversation + reply)
        else:
            conversation.append(user(f"step {i}"))
    assert tracker.assign(conversation, PLANNER) == (sid, False)
    assert len(tracker) == 1


def test_a_handoff_with_the_same_conversation_stays_in_the_session() -> None:
    tracker = SessionTracker()
    conversation = [user("hi"), assistant("hello"), user("write it up")]
    sid, _ = tracker.assign(conversation, PLANNER)
    tracker.record(sid, conversation, PLANNER, None)
    assert tracker.assign(conversation, WRITER) == (sid, False)


def test_a_retry_with_the_same_head_opens_a_new_session() -> None:
    tracker = SessionTracker()
    opening = [user("hi")]
    first, _ = tracker.assign(opening, PLANNER)
    tracker.record(first, opening, PLANNER, assistant("hello"))
    second, new = tracker.assign(opening, PLANNER)
    assert new and second != first and len(tracker) == 2
    tracker.record(second, opening, PLANNER, assistant("hey"))
    assert tracker.assign([*opening, assistant("hello"), user("a")], PLANNER) == (first, False)
    assert tracker.assign([*opening, assistant("hey"), user("b")], PLANNER) == (second, False)
    # the first run's request point went to the second run: a third retry is new again
    third, new = tracker.assign(opening, PLANNER)
    assert new and third not in (first, second)


def test_a_request_continues_from_its_own_point_when_the_reply_was_not_echoed() -> None:
    tracker = SessionTracker()
    sid, _ = tracker.assign([user("hi")], PLANNER)
    tracker.record(sid, [user("hi")], PLANNER, assistant("<think>x</think>hello"))
    assert tracker.assign([user("hi"), assistant("hello"), user("go")], PLANNER) == (sid, False)


def test_unrelated_and_empty_conversations_are_new_sessions() -> None:
    tracker = SessionTracker()
    sid, _ = tracker.assign([user("hi")], PLANNER)
    tracker.record(sid, [user("hi")], PLANNER, assistant("hello"))
    other, new = tracker.assign([user("bye")], PLANNER)
    assert new and other != sid
    empty_a, new_a = tracker.assign([], PLANNER)
    empty_b, new_b = tracker.assign([], PLANNER)
    assert new_a and new_b and empty_a != empty_b


# --- bounds ---------------------------------------------------------------------------------


def test_sessions_idle_past_the_ttl_are_dropped() -> None:
    clock = Clock()
    tracker = SessionTracker(ttl_s=60.0, clock=clock)
    sid, _ = tracker.assign([user("hi")], PLANNER)
    tracker.record(sid, [user("hi")], PLANNER, assistant("hello"))
    clock.now = 60.0  # idle exactly ttl_s: still live
    conversation = [user("hi"), assistant("hello"), user("again")]
    assert tracker.assign(conversation, PLANNER) == (sid, False)
    clock.now = 120.5  # idle 60.5 s since that assign
    fresh, new = tracker.assign(conversation, PLANNER)
    assert new and fresh != sid and sid not in tracker and len(tracker) == 1
    assert tracker._index == {}
    tracker.check_integrity()


def test_max_sessions_bounds_sessions_and_index() -> None:
    tracker = SessionTracker(max_sessions=3)
    sids = []
    for i in range(10):
        conversation = [user(f"task {i}")]
        sid, new = tracker.assign(conversation, PLANNER)
        assert new
        tracker.record(sid, conversation, PLANNER, assistant(f"on it {i}"))
        sids.append(sid)
        assert len(tracker) <= 3 and len(tracker._index) <= 6
        tracker.check_integrity()
    assert len(tracker) == 3 and len(tracker._index) == 6
    assert [s in tracker for s in sids] == [False] * 7 + [True] * 3
    # the least recently *used* goes: touch the oldest survivor, then add one
    tracker.assign([user("task 7"), assistant("on it 7"), user("next")], PLANNER)
    tracker.assign([user("task 10")], PLANNER)
    assert [s in tracker for s in sids[7:]] == [True, False, True]
    tracker.check_integrity()


ops = st.lists(
    st.tuples(
        st.sampled_from(["assign", "record", "wait"]),
        st.lists(st.sampled_from([user("a"), user("b"), assistant("c")]), max_size=4),
        st.sampled_from([PLANNER, WRITER]),
        st.none() | st.sampled_from(["h1", "h2"]),
    ),
    max_size=30,
)


@given(ops)
def test_the_index_stays_consistent_and_bounded(steps: list[Any]) -> None:
    clock = Clock()
    tracker = SessionTracker(max_sessions=4, ttl_s=10.0, clock=clock)
    last = None
    for op, conversation, head, hint in steps:
        if op == "wait":
            clock.now += 4.0
        elif op == "assign":
            last, _ = tracker.assign(conversation, head, hint)
        elif last is not None:
            tracker.record(last, conversation, head, assistant("r") if hint else None)
        tracker.check_integrity()
        assert len(tracker) <= 4 and len(tracker._index) <= 2 * len(tracker)


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="max_sessions must be a positive integer"):
        SessionTracker(max_sessions=0)
    with pytest.raises(ValueError, match="ttl_s must be a positive number"):
        SessionTracker(ttl_s=0)
