"""Mid-decode hints in traces: step spans carry ``agentwarm.step.hint_node``,
``agentwarm.step.hint_lead_s`` and ``agentwarm.step.hint_gain_s``; ``agentwarm stats`` counts the
hinted steps, the right hints, the lead and the gain (JSON keys and the summary's line), the
same figures as the runtime's records give."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from agentwarm import START
from agentwarm import telemetry as tm
from agentwarm.cli import app
from agentwarm.stats import HINT_KEYS, compute_stats, hint_figures, read_traces
from tests.runtime.test_midstream_hints import ScriptedEngine, reply_for_triage, run_support
from tests.stats.test_traces import step, write

runner = CliRunner()


def hinted(
    run: str, index: int, frm: str, node: str, hint: str, lead: float, gain: float | None = None
) -> dict[str, Any]:
    record = step(run, index, frm, node, ttft=0.01)
    record["attributes"].update(
        tm.step_result_attributes(
            ttft_s=0.01,
            prompt_tokens=100,
            cached_tokens=0,
            hint_node=hint,
            hint_lead_s=lead,
            hint_gain_s=gain,
        )
    )
    return record


def test_hint_figures_from_step_spans(tmp_path: Path) -> None:
    trace = write(
        tmp_path / "t.jsonl",
        [
            # run 1: a (hints b, right) -> b (hints a, wrong: goes to c) -> c
            hinted("1", 0, START, "a", "b", 0.25, gain=0.125),
            hinted("1", 1, "a", "b", "a", 0.5, gain=0.25),
            step("1", 2, "b", "c"),
            # run 2, a loop: a (hints c, wrong: goes to a) -> a (hints c, right) -> c
            hinted("2", 0, START, "a", "c", 0.125),
            hinted("2", 1, "a", "a", "c", 0.75, gain=0.5),
            step("2", 2, "a", "c"),
        ],
    )
    data = read_traces([trace])
    assert data.problems == []
    st = compute_stats(data.steps, data.prefills)
    assert st.hints.hint_steps == 4
    assert st.hints.hints_right == 2
    assert st.hints.hint_lead_mean_s == statistics.fmean([0.25, 0.5, 0.125, 0.75])
    assert st.hints.hint_lead_p50_s == (0.25 + 0.5) / 2
    # The gain is over the hinted steps that report one (run 2's first step does not).
    assert st.hints.hint_gain_mean_s == statistics.fmean([0.125, 0.25, 0.5])
    assert st.hints.hint_gain_p50_s == 0.25
    assert hint_figures(data.steps).hints_right is None  # next nodes not given

    result = runner.invoke(app, ["stats", str(trace), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert {k: out[k] for k in HINT_KEYS} == {
        "hint_steps": 4,
        "hints_right": 2,
        "hint_lead_mean_s": 0.40625,
        "hint_lead_p50_s": 0.375,
        "hint_gain_mean_s": 0.875 / 3,
        "hint_gain_p50_s": 0.25,
    }
    text = runner.invoke(app, ["stats", str(trace)], env={"COLUMNS": "160"})
    assert text.exit_code == 0, text.output
    assert (
        "mid-decode hints  4 steps, 2 right, lead mean / p50 406.2 / 375.0 ms  "
        "(hint read from the streamed output → step end)"
    ) in text.stdout.splitlines()


def test_no_hints_no_line(tmp_path: Path) -> None:
    trace = write(tmp_path / "t.jsonl", [step("1", 0, START, "a"), step("1", 1, "a", "b")])
    out = json.loads(runner.invoke(app, ["stats", str(trace), "--json"]).stdout)
    assert {k: out[k] for k in HINT_KEYS} == {
        "hint_steps": 0,
        "hints_right": 0,
        "hint_lead_mean_s": None,
        "hint_lead_p50_s": None,
        "hint_gain_mean_s": None,
        "hint_gain_p50_s": None,
    }
    assert "mid-decode" not in runner.invoke(app, ["stats", str(trace)]).stdout


def test_a_bad_hint_is_a_skipped_line(tmp_path: Path) -> None:
    bad = hinted("1", 0, START, "a", "b", 0.25)
    bad["attributes"][tm.AW_STEP_HINT_NODE] = 7
    worse = hinted("1", 1, "a", "b", "c", 0.25)
    worse["attributes"][tm.AW_STEP_HINT_LEAD] = -1
    data = read_traces([write(tmp_path / "t.jsonl", [bad, worse])])
    assert [p.message for p in data.problems] == [
        f"step span without a string '{tm.AW_STEP_HINT_NODE}'",
        f"'{tm.AW_STEP_HINT_LEAD}' is negative: -1",
    ]


async def test_a_traced_run_reports_its_hint(tmp_path: Path) -> None:
    # triage's streamed reply calls the tool "lookup" (its successor) before it ends.
    path = tmp_path / "run.jsonl"
    with tm.configure(trace_file=path):
        results = [await run_support(ScriptedEngine(reply_for_triage)) for _ in range(2)]
    leads = [lead for r in results for lead in r.hint_leads_s]
    assert len(leads) == 2 and all(lead > 0 for lead in leads)
    result = runner.invoke(app, ["stats", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["steps"], out["hint_steps"], out["hints_right"]) == (4, 2, 2)
    assert out["hint_lead_mean_s"] == statistics.fmean(leads)
    # The same figures as the runtime's records give (what `agentwarm run --json` reports).
    records = hint_figures([s for r in results for s in r.steps], next_of=lambda s: s.next)
    assert records.hint_gain_mean_s is not None
    assert {k: out[k] for k in HINT_KEYS} == records.to_dict()
