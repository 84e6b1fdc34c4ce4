"""Heads (nodes) learned from traffic: keys, names, the registry's bound and its saved form."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentwarm._spec import END, START
from agentwarm.chat import Message
from agentwarm.gateway.heads import (
    MAX_OWNERS,
    HeadRegistry,
    content_text,
    head_key,
    sanitize_name,
    split_head,
)

PLANNER = "You are the Planner: split the task into steps."
TOOLS = [
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "book", "parameters": {"type": "object"}}},
]


def system(text: str, role: str = "system") -> Message:
    return {"role": role, "content": text}


def user(text: str) -> Message:
    return {"role": "user", "content": text}


texts = st.text(max_size=40)
roles = st.sampled_from(["system", "developer"])
systems = st.lists(st.builds(system, texts, roles), max_size=3)
tools = st.lists(
    st.builds(
        lambda name, desc: {"type": "function", "function": {"name": name, "description": desc}},
        st.text(min_size=1, max_size=8),
        texts,
    ),
    max_size=3,
)
conversations = st.lists(st.builds(user, texts), max_size=4)


def test_split_head_cuts_after_the_leading_system_and_developer_messages() -> None:
    messages = [system("a"), system("b", "developer"), user("hi"), system("late")]
    assert split_head(messages) == (messages[:2], messages[2:])
    assert split_head([user("hi")]) == ([], [user("hi")])
    assert split_head([]) == ([], [])


def test_head_key_is_the_documented_canonical_hash() -> None:
    doc = {"system": [["system", PLANNER]], "tools": TOOLS}
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert head_key([system(PLANNER)], TOOLS) == hashlib.sha256(text.encode()).hexdigest()[:16]
    assert head_key([system(PLANNER)], TOOLS) == "598a66db3e1b43bc"


def test_content_text_joins_text_parts() -> None:
    parts = [{"type": "text", "text": "You are "}, {"type": "text", "text": "the Planner"}]
    assert content_text(parts) == "You are the Planner"
    assert content_text(None) == ""
    assert head_key([{"role": "system", "content": parts}], []) == head_key(
        [system("You are the Planner")], []
    )
    image = {"type": "image_url", "image_url": {"url": "x"}}
    assert content_text(["a", image]) != content_text(["a"])


@given(systems, tools, conversations, conversations)
def test_key_depends_on_head_not_conversation(
    sys_: list[Message], tools_: list[dict[str, Any]], conv1: list[Message], conv2: list[Message]
) -> None:
    a, rest_a = HeadRegistry().identify(sys_ + conv1, tools_)
    b, rest_b = HeadRegistry().identify(sys_ + conv2, tools_)
    assert a.key == b.key == head_key(sys_, tools_)
    assert (rest_a, rest_b) == (conv1, conv2)
    assert a.name == b.name


@given(systems, tools, texts)
def test_system_text_and_tool_order_change_the_key(
    sys_: list[Message], tools_: list[dict[str, Any]], extra: str
) -> None:
    base = head_key(sys_, tools_)
    assert head_key([*sys_, system(extra)], tools_) != base
    if sys_:
        changed = [*sys_[:-1], system(str(sys_[-1]["content"]) + "!", sys_[-1]["role"])]
        assert head_key(changed, tools_) != base
    if len(tools_) > 1 and tools_ != tools_[::-1]:
        assert head_key(sys_, tools_[::-1]) != base


def test_no_tools_and_empty_tools_are_one_head() -> None:
    registry = HeadRegistry()
    a, _ = registry.identify([system(PLANNER)], None)
    b, _ = registry.identify([system(PLANNER)], [])
    assert a is b and len(registry) == 1


def test_names_from_slug_hint_and_no_system() -> None:
    registry = HeadRegistry()
    assert registry.identify([system(PLANNER)], TOOLS)[0].name == "you-are-the-planner"
    assert registry.identify([user("hi")], None)[0].name == "no-system"
    long = "Supercalifragilistic expialidocious antidisestablishmentarianism wordsmith more"
    assert registry.identify([system(long)], None)[0].name == (
        "supercalifragilistic-expialidocious-anti"
    )
    hinted, _ = registry.identify([system("Writer")], None, hint="  Writer agent/v2 ")
    assert hinted.name == "Writer-agent-v2"
    assert registry.get("Writer-agent-v2") is hinted


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        ("planner", "planner"),
        ("a b\tc", "a-b-c"),
        ("ünï/côdé", "n-c-d"),
        ("x" * 100, "x" * 64),
        ("ok_name-1.2", "ok_name-1.2"),
        ("!!!", ""),
    ],
)
def test_sanitize_name(hint: str, expected: str) -> None:
    assert sanitize_name(hint) == expected


@given(st.text(max_size=100))
def test_sanitized_names_are_safe(hint: str) -> None:
    name = sanitize_name(hint)
    assert len(name) <= 64
    assert all(c.isascii() and (c.isalnum() or c in "_.-") for c in name)


def test_an_empty_sanitized_hint_falls_back_to_the_slug() -> None:
    head, _ = HeadRegistry().identify([system(PLANNER)], None, hint="!!!")
    assert head.name == "you-are-the-planner"


def test_name_collisions_get_the_key_prefix() -> None:
    registry = HeadRegistry()
    first, _ = registry.identify([system(PLANNER)], TOOLS)
    second, _ = registry.identify([system(PLANNER)], TOOLS[:1])
    third, _ = registry.identify([system("Writer")], None, hint="you-are-the-planner")
    assert first.name == "you-are-the-planner"
    assert second.name == f"you-are-the-planner-{second.key[:6]}"
    assert third.name == f"you-are-the-planner-{third.key[:6]}"
    assert len({first.name, second.name, third.name}) == 3


def test_reserved_names_are_never_used() -> None:
    registry = HeadRegistry()
    end, _ = registry.identify([system("a")], None, hint=END)
    start, _ = registry.identify([system("b")], None, hint=START)
    assert end.name == f"{END}-{end.key[:6]}"
    assert start.name == f"{START}-{start.key[:6]}"


def test_a_later_hint_does_not_rename() -> None:
    registry = HeadRegistry()
    head, _ = registry.identify([system(PLANNER)], TOOLS)
    again, _ = registry.identify([system(PLANNER)], TOOLS, hint="boss")
    assert again is head and head.name == "you-are-the-planner" and registry.get("boss") is None


def test_heads_are_copies() -> None:
    messages = [system(PLANNER)]
    head, _ = HeadRegistry().identify(messages, TOOLS)
    messages[0]["content"] = "changed"
    assert head.system == (system(PLANNER),)


def test_lru_bound_forgets_the_least_recently_identified() -> None:
    registry = HeadRegistry(max_heads=2)
    a, _ = registry.identify([system("a")], None)
    b, _ = registry.identify([system("b")], None)
    registry.identify([system("a")], None)  # a is now the most recent
    c, _ = registry.identify([system("c")], None)
    assert [h.name for h in registry] == ["a", "c"]
    assert registry.get("b") is None and registry.by_key(b.key) is None
    assert registry.get("a") is a and registry.get("c") is c
    # b's name is free again; so is its key (registered anew when it comes back)
    registry.identify([system("x")], None, hint="b")
    assert registry.get("b") is not None and registry.get("b") is not b


@given(st.lists(st.tuples(systems, tools, st.none() | texts), max_size=12))
def test_names_are_unique_stable_and_round_trip(
    requests: list[tuple[list[Message], list[dict[str, Any]], str | None]],
) -> None:
    one, two = HeadRegistry(max_heads=5), HeadRegistry(max_heads=5)
    for sys_, tools_, hint in requests:
        a, _ = one.identify(sys_, tools_, hint=hint)
        b, _ = two.identify(sys_, tools_, hint=hint)
        assert (a.key, a.name) == (b.key, b.name)
        assert one.by_key(a.key) is a
    heads = list(one)
    assert len(heads) == len(one) <= 5
    assert len({h.name for h in heads}) == len(heads)
    assert not {h.name for h in heads} & {END, START}
    restored = HeadRegistry.from_dict(json.loads(json.dumps(one.to_dict())))
    assert [(h.key, h.name, h.system, h.tools) for h in restored] == [
        (h.key, h.name, h.system, h.tools) for h in heads
    ]
    for head in heads:  # restored heads keep their names
        again, _ = restored.identify([*head.system, user("next")], head.tools, hint="other")
        assert (again.key, again.name) == (head.key, head.name)
    assert len(restored) == len(heads)


def test_from_dict_keeps_the_most_recent_heads_under_a_smaller_bound() -> None:
    registry = HeadRegistry()
    for text in "abc":
        registry.identify([system(text)], None)
    restored = HeadRegistry.from_dict(registry.to_dict(), max_heads=2)
    assert [h.name for h in restored] == ["b", "c"] and restored.max_heads == 2


def _saved() -> dict[str, Any]:
    registry = HeadRegistry()
    registry.identify([system(PLANNER)], TOOLS)
    registry.identify([system("Writer")], None)
    return registry.to_dict()


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda d: d.update(format=9), "format 1"),
        (lambda d: d.update(heads={}), "'heads' must be a list"),
        (lambda d: d["heads"].append(3), r"heads\[2\]: expected a mapping"),
        (lambda d: d["heads"][0].update(key="XYZ"), "16 lowercase hex"),
        (lambda d: d["heads"][0].update(name=""), "'name' must be"),
        (lambda d: d["heads"][0].update(tools="x"), "'tools' must be a list"),
        (lambda d: d["heads"][0]["system"][0].update(content="x"), "does not match"),
        (lambda d: d["heads"][1].update(name=d["heads"][0]["name"]), "is taken or reserved"),
        (lambda d: d["heads"][1].update(name=END), "is taken or reserved"),
        (lambda d: d["heads"].append(dict(d["heads"][0])), "appears twice"),
        (lambda d: d.update(max_heads=0), "max_heads must be a positive integer"),
    ],
)
def test_from_dict_rejects_bad_data(corrupt: Any, message: str) -> None:
    data = _saved()
    corrupt(data)
    with pytest.raises(ValueError, match=message):
        HeadRegistry.from_dict(data)


def test_a_tool_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ValueError, match=r"tools\[1\] must be a JSON object, got str"):
        HeadRegistry().identify([system(PLANNER)], [TOOLS[0], "search"])  # type: ignore[list-item]


def test_max_heads_is_checked() -> None:
    with pytest.raises(ValueError, match="max_heads must be a positive integer"):
        HeadRegistry(max_heads=0)


def test_a_tenant_owns_the_heads_it_sent_and_is_predicted_only_those() -> None:
    registry = HeadRegistry()
    a, b = "a" * 32, "b" * 32
    shared, _ = registry.identify([{"role": "system", "content": PLANNER}], None, tenant=a)
    registry.identify([{"role": "system", "content": PLANNER}], None, tenant=b)
    private, _ = registry.identify([{"role": "system", "content": "B only."}], None, tenant=b)
    assert registry.owns(a, shared.name) and registry.owns(b, shared.name)
    assert registry.owns(b, private.name) and not registry.owns(a, private.name)
    assert not registry.owns("", shared.name) and not registry.owns(a, "unknown")
    ranked = [(private.name, 0.6), (shared.name, 0.3), (END, 0.1)]
    assert registry.own_predictions(ranked, b) == ranked
    kept = registry.own_predictions(ranked, a)  # B's head dropped, the rest keeps the total
    assert [n for n, _ in kept] == [shared.name, END]
    assert [round(p, 9) for _, p in kept] == [0.75, 0.25]
    for i in range(MAX_OWNERS + 1):  # bounded: the least recent owner is forgotten
        registry.identify([{"role": "system", "content": PLANNER}], None, tenant=f"{i:032x}")
    assert not registry.owns(a, shared.name) and registry.owns(f"{MAX_OWNERS:032x}", shared.name)
    restored = HeadRegistry.from_dict(json.loads(json.dumps(registry.to_dict())))
    assert restored.owns(b, private.name) and not restored.owns(a, private.name)
