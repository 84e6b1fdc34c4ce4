"""Miss reasons in traces: step spans carry ``agentwarm.step.miss.*``; ``agentwarm stats`` reads
them back into the same per-reason counts as the run's own summary (one definition), prints them,
and counts a miss from a trace written before the reasons under ``unknown``."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentwarm import START
from agentwarm import telemetry as tm
from agentwarm.cli import app
from agentwarm.stats import compute_stats, read_traces
from agentwarm.stats.definitions import reasons_add_up
from tests.runtime.test_miss_reasons import _run
from tests.stats.test_traces import step, write

runner = CliRunner()


async def test_a_traced_runs_reasons_read_back_as_the_runs_own(tmp_path: Path) -> None:
    with tm.capture_spans() as exporter:
        priced = await _run("d")  # priced_out
        below = await _run("c", top_n=1)  # not_predicted
        dropped = await _run("c", max_prefills_per_s=1.0)  # dropped (rate)
    results = [priced, below, dropped]
    lines = [json.dumps(tm.span_to_dict(s)) for s in exporter.get_finished_spans()]
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(lines) + "\n", encoding="utf-8")
    data = read_traces([trace])
    assert data.problems == []
    by_run = {(s.run_id, s.index): s for s in data.steps}
    for result in results:
        read = by_run[(result.run_id, 1)]
        miss = result.steps[1].miss
        assert miss is not None
        got = (read.miss_reason, read.miss_cause, read.miss_p, read.miss_price, read.miss_rank)
        assert got == (miss.reason, miss.cause, miss.p, miss.price, miss.rank)
    assert reasons_add_up(data.steps)
    st = compute_stats(data.steps, data.prefills)
    runs = [s for r in results for s in r.steps]
    assert st.miss_reasons == {
        "not_predicted": 1,
        "priced_out": 1,
        "dropped": 1,
        "guardrail": 0,
        "failed": 0,
        "overtaken": 0,
        "off": 0,
        "late": 0,
        "prefix_mismatch": 0,
    }
    assert st.miss_reasons == {
        k: sum(1 for s in runs if s.miss_reason == k) for k in st.miss_reasons
    }
    out = json.loads(runner.invoke(app, ["stats", str(trace), "--json"]).stdout)
    assert (out["miss_reasons"], out["short_hits"]) == (st.miss_reasons, 0)
    text = runner.invoke(app, ["stats", str(trace)], env={"COLUMNS": "160"})
    assert text.exit_code == 0, text.output
    assert "miss reasons      not_predicted 1 · priced_out 1 · dropped 1" in text.stdout


def test_a_miss_from_a_trace_without_reasons_counts_as_unknown(tmp_path: Path) -> None:
    trace = write(
        tmp_path / "old.jsonl",
        [step("1", 0, START, "a"), step("1", 1, "a", "b"), step("1", 2, "b", "c", prefetched=True)],
    )
    data = read_traces([trace])
    st = compute_stats(data.steps, data.prefills)
    assert st.miss_reasons["unknown"] == 1
    assert sum(st.miss_reasons.values()) == 1
