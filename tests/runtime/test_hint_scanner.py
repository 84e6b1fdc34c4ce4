"""The mid-decode hint scanner (pure): which successor a partial output names, and when."""

from __future__ import annotations

import pytest

from agentwarm.runtime.prefetch.hints import output_hint, scanner_for
from agentwarm.runtime.prefetch.scanner import HintScanner


def feed_all(scanner: HintScanner, chunks: list[str]) -> list[str | None]:
    return [scanner.feed(c) for c in chunks]


def test_a_word_is_complete_only_once_a_non_word_character_follows():
    scanner = HintScanner(["billing", "refunds"])
    assert feed_all(scanner, ["Let me check bill", "ing", " now"]) == [None, None, "billing"]
    # "billing" at the very end may still grow: "billings" is not "billing".
    scanner = HintScanner(["billing"])
    assert feed_all(scanner, ["billing", "s and more"]) == [None, None]


def test_one_hint_per_scanner_then_none():
    scanner = HintScanner(["billing", "refunds"])
    assert feed_all(scanner, ["billing.", " refunds.", " billing."]) == ["billing", None, None]
    assert scanner.hint == "billing"


def test_two_successors_named_at_once_is_ambiguous_and_words_name_nothing_after():
    scanner = HintScanner(["billing", "refunds"])
    assert feed_all(scanner, ["billing or refunds?", " billing."]) == [None, None]
    assert scanner.hint is None


def test_a_handoff_split_across_chunks():
    scanner = HintScanner(["billing", "refunds"])
    chunks = ["I will call transf", "er_to_", "bill", "ing", "(", ")"]
    assert feed_all(scanner, chunks) == [None, None, None, None, "billing", None]


def test_a_handoff_beats_ambiguous_words():
    scanner = HintScanner(["billing", "refunds"])
    assert scanner.feed("billing or refunds: ") is None
    assert scanner.feed("transfer_to_refunds ") == "refunds"


@pytest.mark.parametrize(
    ("chunks", "at"),
    [
        # Hermes / Qwen: the name split inside "name" and inside its value
        (['<tool_call>\n{"na', 'me": "look', "up", '", "arguments": {}}</tool_call>'], 3),
        # Llama 3 JSON (the reply is the object), with or without <|python_tag|>
        (['{"name', '": "lookup', '"', ', "parameters": {}}'], 2),
        (['<|python_tag|>{"name": "lookup"', ', "parameters": {}}'], 0),
        # Mistral
        (['[TOOL_CALLS] [{"name": "look', 'up"', ', "arguments": {}}]'], 1),
    ],
)
def test_a_tool_calls_name_is_read_once_its_closing_quote_arrives(chunks, at):
    scanner = HintScanner(["lookup", "refunds"], words=[])  # no bare-word evidence
    expected: list[str | None] = [None] * len(chunks)
    expected[at] = "lookup"
    assert feed_all(scanner, chunks) == expected


def test_a_json_name_outside_a_tool_call_block_is_not_a_call():
    # Prose quoting JSON is no call; "lookup" is still named as a word, once complete.
    scanner = HintScanner(["lookup", "refunds"], words=[])
    assert scanner.feed('I would write "name": "lookup" there') is None


def test_a_call_to_a_tool_that_is_no_successor_names_nothing():
    scanner = HintScanner(["lookup"])
    assert scanner.feed('<tool_call>{"name": "weather", "arguments": {}}</tool_call>') is None


def test_route_keywords_name_their_successor_case_insensitively():
    scanner = HintScanner(["refunds", "billing"], keywords={"money back": "refunds"})
    assert feed_all(scanner, ["They want their Money ", "Back", "!"]) == [None, None, "refunds"]


def test_a_keyword_and_its_own_successor_are_one_target_not_ambiguous():
    scanner = HintScanner(["refunds", "billing"], keywords={"refund": "refunds"})
    assert scanner.feed("refund, via refunds.") == "refunds"


def test_a_keyword_for_an_unknown_successor_is_ignored():
    scanner = HintScanner(["billing"], keywords={"refund": "refunds"})
    assert scanner.feed("a refund, please.") is None


def test_short_names_count_as_calls_but_not_as_words():
    scanner = HintScanner(["go", "lookup"], words=["lookup"])
    assert scanner.feed("go on ") is None
    assert scanner.feed('<tool_call>{"name": "go"}') == "go"


def test_a_word_far_back_in_a_long_output_is_still_read_once():
    scanner = HintScanner(["billing"])
    assert scanner.feed("x" * 5000 + " billin") is None
    assert scanner.feed("g ") == "billing"


def test_a_suffix_of_a_longer_word_is_not_a_name():
    scanner = HintScanner(["billing"])
    assert scanner.feed("a" * 300) is None
    assert scanner.feed("billing ") is None  # "aaa...billing": one word


def test_scanner_for_and_output_hint_follow_the_node():
    from agentwarm import END, node

    @node(name="triage", next=["refunds", "billing", END], hints={"money back": "refunds"})
    def triage(ctx):
        return END

    reads = lambda name: name != "billing"  # noqa: E731 - billing reads no prompt
    scanner = scanner_for(triage, list(triage.next), reads)
    assert scanner is not None and scanner.successors == {"refunds"}
    # A finished output: a word at its very end is complete.
    assert output_hint("I want my money back", triage, list(triage.next), reads) == "refunds"
    assert output_hint("billing", triage, list(triage.next), reads) is None
    assert scanner_for(triage, [END], reads) is None


def test_a_name_in_a_calls_arguments_names_no_tool():
    scanner = HintScanner(["billing"], words=[])
    text = '<tool_call>{"name": "lookup_user", "arguments": {"name": "billing"}}</tool_call>'
    assert scanner.feed(text) is None
    # The next call's own name counts (the first "name" of each call object).
    assert scanner.feed('\n<tool_call>{"name": "billing", "arguments": {}}') == "billing"
    listed = HintScanner(["billing"], words=[])
    calls = '[TOOL_CALLS][{"name": "lookup", "arguments": {"name": "billing"}}, {"name": "b'
    assert feed_all(listed, [calls, 'illing"']) == [None, "billing"]
