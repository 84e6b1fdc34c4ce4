"""The rules a request body is checked by before any code walks it (:func:`agentwarm._jsonfile.
find_flaw`, :func:`agentwarm.chat.parse_arguments`), and how a bug is logged (bounded)."""

from __future__ import annotations

import json
import logging
import sys

import pytest

from agentwarm._jsonfile import MAX_DEPTH, find_flaw
from agentwarm.chat import check_tool_arguments, parse_arguments
from agentwarm.server.http import TRACEBACK_CHARS, log_bug


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_depth_is_counted_from_the_value_itself() -> None:
    assert MAX_DEPTH == 64
    assert find_flaw(json.loads(nested(64))) is None
    flaw = find_flaw(json.loads(nested(65)))
    assert flaw is not None and flaw.kind == "depth" and len(flaw.path) == 64
    assert find_flaw(json.loads(nested(65)), max_depth=None) is None


def test_a_flaw_names_its_path_and_the_fix() -> None:
    body = {"messages": [{"role": "user", "content": "a\ud800"}]}
    flaw = find_flaw(body)
    assert flaw is not None
    assert flaw.describe() == (
        "messages.0.content: contains a lone surrogate '\\ud800' at index 1, which is not "
        "valid Unicode: send UTF-8 text (a \\ud83d\\ude00 escape pair must come whole)"
    )
    deep = {"x": json.loads('{"a": ' * 100 + "1" + "}" * 100)}
    flaw = find_flaw(deep)
    assert flaw is not None
    assert flaw.describe() == (
        "x.a.a.a.a.a.a.a... (56 levels more): nested too deeply (more than 64 levels of arrays "
        "and objects): send data nested at most 64 levels deep"
    )
    key = find_flaw({"ok": {"\udfff": 1}})
    assert key is not None and key.in_key and key.where == "ok"
    assert find_flaw({"emoji": "\U0001f600", "ids": list(range(1000))}) is None


def test_tool_arguments_parse_as_templates_get_them() -> None:
    assert parse_arguments('{"a": 1}') == {"a": 1}
    assert parse_arguments("  ") == {}
    assert parse_arguments("not json") == "not json"
    assert parse_arguments(nested(64)) == json.loads(nested(64))
    for depth in (65, 50_000):
        with pytest.raises(ValueError, match=r"nested too deeply \(more than 64 levels"):
            parse_arguments(nested(depth))


def test_check_tool_arguments_names_the_call() -> None:
    fine = {"role": "assistant", "tool_calls": [{"function": {"arguments": nested(3)}}]}
    deep = {"role": "assistant", "tool_calls": [fine["tool_calls"][0], {"function": {}}]}
    deep["tool_calls"][1]["function"]["arguments"] = nested(70)
    user = {"role": "user", "content": nested(70)}  # a user's text is not parsed
    check_tool_arguments([user, fine, 1, {"role": "assistant", "tool_calls": "x"}])
    with pytest.raises(ValueError, match=r"^messages\[2\]\.tool_calls\[1\]\.function\.arguments: "):
        check_tool_arguments([user, fine, deep])


def test_a_bug_is_logged_with_a_bounded_traceback(caplog: pytest.LogCaptureFixture) -> None:
    def recurse(n: int) -> int:
        return recurse(n + 1) + 1

    try:
        recurse(0)
    except RecursionError as exc:
        error = exc
    log = logging.getLogger("tests.bug")
    with caplog.at_level(logging.ERROR, logger="tests.bug"):
        log_bug(log, "engine failed", error)
    (record,) = caplog.records
    text = record.getMessage()
    assert text.startswith("engine failed: RecursionError: maximum recursion depth exceeded")
    assert "Traceback" in text and "in recurse" in text
    assert len(text) < TRACEBACK_CHARS + 500 < sys.getrecursionlimit() * 50
