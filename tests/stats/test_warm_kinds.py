"""``agentwarm stats`` over traces that hold warm-up prefills (kinds static, keep_warm, explicit;
workflow ``warmup``; no run span): read without a problem, kept out of the prefetch figures,
and reported per kind as cache writes (computed tokens) vs tokens already cached when the
warm-up ran (named so, not "read": they are no live request's cache reads)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

import agentwarm
from agentwarm import START
from agentwarm import telemetry as tm
from agentwarm._spec import PrefetchKind, PrefetchOutcome
from agentwarm.cli import app
from agentwarm.engines.fake import FakeEngine
from agentwarm.stats import read_traces
from tests.stats.test_traces import prefill, span, step, write

runner = CliRunner()


def warm_up(kind: PrefetchKind, outcome: str, tokens: int, computed: int) -> dict[str, Any]:
    """A warm-up span as the warmer writes it (source, target, no run id)."""
    attrs: dict[str, Any] = tm.prefill_attributes(
        workflow="warmup", run_id="", source="warmup", target="plan-0", kind=kind, tokens=tokens
    )
    attrs[tm.AW_PREFILL_OUTCOME] = outcome
    attrs[tm.AW_PREFILL_COMPUTED_TOKENS] = computed
    return span(tm.SPAN_PREFILL, attrs, "warmup")


def bare_warm_up(kind: str, tokens: int, computed: int) -> dict[str, Any]:
    """A warm-up span with no source or target: it is on no edge, so it is still read."""
    attrs = {
        tm.AW_WORKFLOW: "warmup",
        tm.AW_PREFILL_KIND: kind,
        tm.AW_PREFILL_TOKENS: tokens,
        tm.AW_PREFILL_COMPUTED_TOKENS: computed,
        tm.AW_PREFILL_OUTCOME: "hit",
    }
    return span(tm.SPAN_PREFILL, attrs, "warmup")


def run_records() -> list[dict[str, Any]]:
    """One run of workflow ``wf``: one hit prefetch (30 computed), one wasted (20)."""
    return [
        step("r1", 0, START, "a", ttft=0.5, prompt=100, cached=60),
        prefill("r1", "a", "b", PrefetchOutcome.HIT, 30),
        prefill("r1", "a", "c", PrefetchOutcome.WASTED, 20),
        step("r1", 1, "a", "b", prefetched=True, ttft=0.1, prompt=200, cached=150),
    ]


def warm_up_records() -> list[dict[str, Any]]:
    static, keep, explicit = PrefetchKind.STATIC, PrefetchKind.KEEP_WARM, PrefetchKind.EXPLICIT
    return [
        warm_up(static, "hit", 100, 100),
        warm_up(static, "hit", 80, 30),  # shares 50 tokens with the first
        warm_up(static, "dropped", 500, 0),  # over the budget: never sent
        warm_up(keep, "hit", 100, 0),  # all still cached
        warm_up(keep, "hit", 80, 20),
        warm_up(keep, "failed", 60, 0),
        warm_up(explicit, "cancelled", 40, 10),  # superseded: 30 never processed, not read
        bare_warm_up("explicit", 12, 2),
    ]


STATIC = {
    "kind": "static",
    "prefills": 2,
    "dropped": 1,
    "failed": 0,
    "tokens": 180,
    "written_tokens": 130,
    "already_cached_tokens": 50,
    "already_cached_ratio": 50 / 180,
}
KEEP_WARM = {
    "kind": "keep_warm",
    "prefills": 3,
    "dropped": 0,
    "failed": 1,
    "tokens": 240,
    "written_tokens": 20,
    "already_cached_tokens": 160,
    "already_cached_ratio": 160 / 180,
}
EXPLICIT = {
    "kind": "explicit",
    "prefills": 2,
    "dropped": 0,
    "failed": 0,
    "tokens": 52,
    "written_tokens": 12,
    "already_cached_tokens": 10,
    "already_cached_ratio": 10 / 22,
}


def stats_json(*paths: Path) -> dict[str, Any]:
    result = runner.invoke(app, ["stats", *map(str, paths), "--json"])
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def test_warm_ups_are_reported_per_kind_and_left_out_of_the_prefetch_figures(
    tmp_path: Path,
) -> None:
    runs = write(tmp_path / "runs.jsonl", run_records())
    alone = stats_json(runs)
    mixed = stats_json(write(tmp_path / "all.jsonl", [*warm_up_records(), *run_records()]))
    assert "warm_ups" not in alone
    assert mixed.pop("warm_ups") == [STATIC, KEEP_WARM, EXPLICIT]
    mixed.pop("files")
    alone.pop("files")
    assert mixed == alone  # the runs' figures, edges and workflow are the same
    assert (mixed["workflow"], mixed["acceptance_ratio"], mixed["wasted_tokens"]) == ("wf", 0.5, 20)
    assert mixed["prefetches_issued"] == 2


def test_a_trace_of_warm_ups_alone_is_read_without_error(tmp_path: Path) -> None:
    path = write(tmp_path / "warmup.jsonl", warm_up_records())
    data = read_traces([path])
    assert (data.problems, data.runs, data.steps, len(data.prefills)) == ([], [], [], 8)
    out = stats_json(path)
    assert out["warm_ups"] == [STATIC, KEEP_WARM, EXPLICIT]
    assert (out["runs"], out["steps"], out["prefetches_issued"], out["edges"]) == (0, 0, 0, [])
    assert out["acceptance_ratio"] is None and out["workflow"] is None
    text = runner.invoke(app, ["stats", str(path)])
    assert text.exit_code == 0, text.output
    assert "Warm-ups" in text.stdout
    row = next(line for line in text.stdout.splitlines() if "keep_warm" in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    assert cells == ["keep_warm", "3", "0", "1", "240", "20", "160", "88.9%"]
    assert "Branches" not in text.stdout  # no run: only the warm-ups are shown
    shown = " ".join(text.stdout.split())
    header = [line for line in text.stdout.splitlines() if "┃" in line]
    cells_of = [[w.strip() for w in h.split("┃")[1:-1]] for h in header]
    columns = [" ".join(c) for c in zip(*cells_of, strict=True)]
    assert [c.strip() for c in columns] == [
        "kind",
        "prefills",
        "dropped",
        "failed",
        "tokens",
        "written",
        "already cached",
        "%",
    ]
    assert "already cached: tokens of the completed ones that were in the cache when" in shown
    assert "live requests read 0/0 prompt tokens from the cache; which warm-up kind" in shown


async def test_spans_of_real_explicit_warms_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    telemetry = tm.configure(trace_file=path)
    try:
        async with FakeEngine() as engine:
            ids = engine.encode("A contract was uploaded: clause 1, clause 2, clause 3.")
            await agentwarm.warm(engine, ids=ids, session="s1")
            await agentwarm.warm(engine, ids=[*ids, *engine.encode(" Clause 4.")], session="s1")
            extra = len(engine.encode(" Clause 4."))
    finally:
        telemetry.shutdown()
    (explicit,) = stats_json(path)["warm_ups"]
    total = 2 * len(ids) + extra
    assert explicit == {
        "kind": "explicit",
        "prefills": 2,
        "dropped": 0,
        "failed": 0,
        "tokens": total,
        "written_tokens": len(ids) + extra,
        "already_cached_tokens": len(ids),
        "already_cached_ratio": len(ids) / total,
    }
