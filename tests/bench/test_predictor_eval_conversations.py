"""``python -m benchmarks.predictor_eval --conversations``: online scoring that reads the
conversation, on small hand-written conversations (the real ones: docs/benchmarks.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentwarm.predictors import END
from benchmarks import conversation_eval
from benchmarks.predictor_eval import PREDICTORS, main


def _call(name: str) -> dict[str, object]:
    return {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": name, "arguments": "{}"}}
    ]}  # fmt: skip


def _conversation(result: str) -> dict[str, object]:
    """lookup -> (its result says error: retry, else respond) -> END."""
    after = "retry" if "error" in result else "respond"
    turn = _call("retry") if after == "retry" else {"role": "assistant", "content": "done"}
    return {"messages": [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "find my order"},
        _call("lookup"),
        {"role": "tool", "content": result},
        turn,
    ]}  # fmt: skip


@pytest.fixture
def conversations(tmp_path: Path) -> Path:
    results = ["error: not found", "ok: order 7"] * 20
    path = tmp_path / "chats.jsonl"
    path.write_text("".join(json.dumps(_conversation(r)) + "\n" for r in results))
    return path


def test_every_step_after_the_first_and_the_end_is_scored_reading_the_result(
    conversations: Path,
) -> None:
    workload = conversation_eval.load_workload(str(conversations))
    assert workload.candidates == ["lookup", "respond", "retry", END]
    content = conversation_eval.score_conversations(PREDICTORS["default"], workload, "d")
    path = conversation_eval.score_conversations(
        PREDICTORS["path experts (old default)"], workload, "p"
    )
    assert content.n == path.n == 40 * 2  # (lookup -> next) and (next -> END) per conversation
    # The next step after lookup alternates with its result: the path alone cannot tell them
    # apart (at best half of those 40 right), the result's words can.
    assert path.top1 <= (40 + 20 + 1) / 80
    assert content.top1 >= (40 + 30) / 80
    assert content.pretrained == path.pretrained == 0


def test_pretraining_on_a_leading_fraction_scores_only_the_rest(
    conversations: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "scores.json"
    code = main(
        ["--conversations", str(conversations), "--pretrain-fraction", "0.5", "--json", str(out)]
    )
    assert code == 0
    scores = json.loads(out.read_text())
    assert [s["predictor"] for s in scores] == list(PREDICTORS)
    assert {s["n"] for s in scores} == {20 * 2} and {s["pretrained"] for s in scores} == {40}
    assert all(s["workload"] == "chats (after 20 pretrained)" for s in scores)
    assert "chats (after 20 pretrained)" in capsys.readouterr().out


def test_a_bad_fraction_is_refused() -> None:
    with pytest.raises(SystemExit, match="--pretrain-fraction must be"):
        main(["--conversations", "x.jsonl", "--pretrain-fraction", "1.0"])
