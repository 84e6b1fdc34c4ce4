"""The disk tier in traces: a step span carries ``agentwarm.step.disk_cached_tokens`` (of its
cached tokens, those the engine loaded from disk) when the engine splits its cached tokens by
source; ``agentwarm stats`` sums it (JSON key and the cached-tokens line), and says nothing of a
tier when no span carries it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from agentwarm import START
from agentwarm import telemetry as tm
from agentwarm.cli import app
from agentwarm.engines.base import Completion
from agentwarm.runtime.records import StepRecord
from agentwarm.stats import compute_stats, read_traces
from tests.stats.test_traces import step, write

runner = CliRunner()


def tiered(run: str, index: int, frm: str, node: str, cached: int, disk: int) -> dict[str, Any]:
    record = step(run, index, frm, node, ttft=0.01, prompt=700, cached=cached)
    record["attributes"].update(
        tm.step_result_attributes(
            ttft_s=0.01, prompt_tokens=700, cached_tokens=cached, disk_cached_tokens=disk
        )
    )
    return record


def test_the_disk_share_of_the_cached_tokens_is_summed(tmp_path: Path) -> None:
    trace = write(
        tmp_path / "t.jsonl",
        [
            tiered("1", 0, START, "a", cached=640, disk=576),  # after a restart: from disk
            tiered("1", 1, "a", "b", cached=650, disk=0),  # then from the radix cache
            step("1", 2, "b", "c", prompt=100, cached=10),  # a span that does not say
        ],
    )
    data = read_traces([trace])
    assert data.problems == []
    assert [s.disk_cached_tokens for s in data.steps] == [576, 0, None]
    assert compute_stats(data.steps, data.prefills).disk_cached_tokens == 576
    out = json.loads(runner.invoke(app, ["stats", str(trace), "--json"]).stdout)
    assert (out["cached_tokens"], out["prompt_tokens"], out["disk_cached_tokens"]) == (
        1300,
        1500,
        576,
    )
    text = runner.invoke(app, ["stats", str(trace)], env={"COLUMNS": "160"})
    assert text.exit_code == 0, text.output
    assert (
        "cached tokens     1300/1500 prompt tokens, 576 of them loaded from the disk tier"
        in text.stdout.splitlines()
    )


def test_without_a_split_nothing_is_said_of_a_tier(tmp_path: Path) -> None:
    trace = write(tmp_path / "t.jsonl", [step("1", 0, START, "a", cached=10)])
    out = json.loads(runner.invoke(app, ["stats", str(trace), "--json"]).stdout)
    assert "disk_cached_tokens" not in out
    text = runner.invoke(app, ["stats", str(trace)]).stdout
    assert "cached tokens     10/100 prompt tokens" in text.splitlines()
    assert "disk" not in text


def test_a_negative_disk_count_is_a_skipped_line(tmp_path: Path) -> None:
    bad = tiered("1", 0, START, "a", cached=64, disk=64)
    bad["attributes"][tm.AW_STEP_DISK_CACHED_TOKENS] = -1
    data = read_traces([write(tmp_path / "t.jsonl", [bad])])
    assert [p.message for p in data.problems] == [
        f"'{tm.AW_STEP_DISK_CACHED_TOKENS}' is negative: -1"
    ]


def test_a_step_record_takes_the_split_of_its_first_call() -> None:
    def completion(by_source: dict[str, int]) -> Completion:
        return Completion("", (), 700, 640, 0.1, "stop", cached_tokens_by_source=by_source)

    record = StepRecord(0, "a", START, ["a"])
    record.note_tokens(completion({"device": 64, "disk": 576}))
    assert (record.prompt_tokens, record.cached_tokens, record.disk_cached_tokens) == (
        700,
        640,
        576,
    )
    record.note_tokens(completion({"device": 640}))  # split, none from disk
    assert record.disk_cached_tokens == 0
    record.note_tokens(completion({}))  # an engine that does not split
    assert record.disk_cached_tokens is None
