"""benchmarks/hint_lead.py on two conversations built here: every tool-call turn is hinted
right by its call's name (every tool is a successor), no text turn is hinted, and the tokens
counted after each hint are those after the one that completed the call's name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentwarm.engines.tokenizers import QwenTokenizer
from benchmarks import hint_lead


def call(name: str, arguments: dict[str, Any], i: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def result(name: str, content: str, i: int) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": f"call_{i}", "name": name, "content": content}


SYSTEM = {"role": "system", "content": "You are an airline agent. Follow the policy."}
CONVERSATIONS = [
    [
        SYSTEM,
        {"role": "user", "content": "I need to change my flight."},
        call("get_user_details", {"user_id": "ann_1"}, 1),
        result("get_user_details", '{"reservations": ["ABC123"]}', 1),
        {"role": "assistant", "content": "Which reservation would you like to change?"},
        {"role": "user", "content": "ABC123, please."},
        call("get_reservation_details", {"reservation_id": "ABC123"}, 2),
        result("get_reservation_details", '{"flights": []}', 2),
        {"role": "assistant", "content": "That reservation holds no flight to change."},
    ],
    [
        SYSTEM,
        {"role": "user", "content": "Get me a human."},
        call("transfer_to_human_agents", {"summary": "wants a human"}, 1),
        result("transfer_to_human_agents", "Transfer successful", 1),
        {"role": "assistant", "content": "You are being transferred now. Goodbye."},
    ],
]
TOOL_TURNS = [m for c in CONVERSATIONS for m in c if m.get("tool_calls")]


def tokens_after_name(message: dict[str, Any]) -> int:
    """Tokens of the rendered turn after the first prefix that holds the whole call name."""
    text = hint_lead.rendered_turn(message)
    name = message["tool_calls"][0]["function"]["name"]
    tokenizer = QwenTokenizer()
    ids = tokenizer.encode(text)
    first = next(i for i in range(1, len(ids) + 1) if f'"{name}"' in tokenizer.decode(ids[:i]))
    return len(ids) - first


def test_every_tool_call_is_hinted_right_and_no_text_answer_is(tmp_path: Path, capsys):
    path = tmp_path / "conversations.jsonl"
    path.write_text("".join(json.dumps({"messages": c}) + "\n" for c in CONVERSATIONS))
    assert hint_lead.main(["--conversations", str(path), "--decode-ms", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["conversations"], report["replay_mismatches"]) == (2, 0)
    tools, texts = report["tool_call"], report["text"]
    assert (tools["steps"], tools["hinted"], tools["right"]) == (3, 3, 3)
    assert (texts["steps"], texts["hinted"], texts["right"]) == (3, 0, 0)
    assert texts["lead_ms"] == {"mean": None, "p50": None, "p95": None}
    expected = sorted(tokens_after_name(m) for m in TOOL_TURNS)
    assert all(n > 0 for n in expected)  # the arguments follow the name
    assert tools["lead_tokens"]["mean"] == sum(expected) / 3
    assert tools["lead_tokens"]["p50"] == expected[1]
    assert tools["lead_ms"]["mean"] >= 0


def test_the_rendered_turn_is_what_qwen_decodes():
    turn = hint_lead.rendered_turn(TOOL_TURNS[0])
    assert turn == (
        '<tool_call>\n{"name": "get_user_details", "arguments": {"user_id": "ann_1"}}\n</tool_call>'
    )
    text = {"role": "assistant", "content": "Which one?"}
    assert hint_lead.rendered_turn(text) == "Which one?"
