"""``agentwarm fit`` through the CLI runner: a real trace of ``agentwarm run --trace`` fitted
into the state dir runs load, a conversations file, a gateway's state from its trace, and the
errors of bad input."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from agentwarm import END, load_workflow
from agentwarm import telemetry as tm
from agentwarm.bench.conversations import load_conversations
from agentwarm.cli import app
from agentwarm.predictors import PredictorStore, default_predictor
from tests.predictors.test_fit import AIRLINE, needs_airline

runner = CliRunner()
ENV = {"AGENTWARM_NO_PROGRESS": "1", "COLUMNS": "200"}

FLOW = """
from agentwarm import node, END

INPUTS = ["my invoice is wrong", "the app crashes", "charged twice on my invoice"]

@node(entry=True, next=["billing", "tech"])
async def triage(ctx):
    return "billing" if "invoice" in ctx.input else "tech"

@node(next=[END])
async def billing(ctx):
    return END

@node(next=[END])
async def tech(ctx):
    return END
"""


def _fit(*args: str) -> Result:
    return runner.invoke(app, ["fit", *args], env=ENV)


@pytest.fixture
def flow(tmp_path: Path) -> Path:
    path = tmp_path / "flow.py"
    path.write_text(textwrap.dedent(FLOW))
    return path


def test_a_run_trace_is_fitted_where_runs_load_it(flow: Path, tmp_path: Path) -> None:
    trace = tmp_path / "runs.jsonl"
    run_state = tmp_path / "run-state"
    args = ["run", str(flow), "--engine", "fake", "--runs", "6", "--trace", str(trace)]
    ran = runner.invoke(app, [*args, "--state-dir", str(run_state), "--json"], env=ENV)
    assert ran.exit_code == 0, ran.output
    state = tmp_path / "state"
    result = _fit(str(flow), "--trace", str(trace), "--state-dir", str(state), "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    # 6 runs: 4 billing, 2 tech, each triage -> X and X -> END.
    assert (out["workflow"], out["runs"], out["transitions"]) == ("flow", 6, 12)
    assert out["skipped"] == {}
    assert out["state"] == str(PredictorStore(state).path_for("flow"))
    wf = load_workflow(flow)
    nodes = sorted(wf.graph.nodes)
    fitted = PredictorStore(state).load("flow", nodes)
    ranked = fitted.predict(("triage",), {}, candidates=wf.successors("triage"))
    assert ranked[0][0] == "billing" and ranked[0][1] > 0.5
    assert fitted.predict(("triage", "tech"), {}, candidates=[END]) == [(END, 1.0)]
    # A second fit adds to what is saved: the text report says what it read.
    again = _fit(str(flow), "--trace", str(trace), "--state-dir", str(state))
    assert again.exit_code == 0, again.output
    lines = again.stdout.splitlines()
    assert lines[0].startswith("flow: learned 12 transitions of 6 runs; top-1 before learning")
    assert lines[-1] == f"saved {out['state']}"


def _steps_flow(tmp_path: Path, steps: list[str]) -> Path:
    """A workflow whose nodes are an entry and the given steps (each may follow any)."""
    nodes = "\n".join(f"{s} = node(name={s!r}, next=NEXT)(_step)" for s in steps)
    path = tmp_path / "airline.py"
    path.write_text(
        "from agentwarm import END, node\n\n"
        f"NEXT = [*{steps!r}, END]\n\n"
        "async def _step(ctx):\n    return END\n\n"
        "opening = node(name='opening', entry=True, next=NEXT)(_step)\n" + nodes + "\n"
    )
    return path


@needs_airline
def test_a_conversations_file_is_fitted_with_its_contexts(tmp_path: Path) -> None:
    convs_file = tmp_path / "conversations.jsonl"
    lines = AIRLINE.read_text(encoding="utf-8").splitlines()[:3]
    convs_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    convs = load_conversations(convs_file)
    steps = sorted({s for c in convs for s in c.episode.steps})
    flow = _steps_flow(tmp_path, steps)
    state = tmp_path / "state"
    result = _fit(
        str(flow), "--conversations", str(convs_file), "--state-dir", str(state), "--json"
    )
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["runs"], out["skipped"]) == (3, {})
    assert out["transitions"] == sum(len(c.episode.steps) + 1 for c in convs)
    assert 0.0 <= out["top1_path"] <= 1.0 and 0.0 <= out["top1"] <= 1.0
    # The saved predictor is the one `agentwarm run` loads, and it learned the first step.
    wf = load_workflow(flow)
    fitted = PredictorStore(state).load(wf.name, sorted(wf.graph.nodes))
    assert type(fitted) is type(default_predictor())
    first = [c.episode.steps[0] for c in convs]
    top = fitted.predict(("opening",), {}, candidates=wf.successors("opening"))[0][0]
    assert top == max(set(first), key=first.count)
    # A workflow without one of the steps skips the transitions that name it.
    missing = steps[0]
    (tmp_path / "narrow").mkdir()
    narrow = _steps_flow(tmp_path / "narrow", steps[1:])
    other = str(tmp_path / "narrow-state")
    result = _fit(str(narrow), "--conversations", str(convs_file), "--state-dir", other)
    assert result.exit_code == 0, result.output
    assert re.search(rf"^skipped \d+: unknown node {missing}$", result.stdout, re.M)


def _gateway_trace(path: Path) -> Path:
    """Two gateway sessions: a -> b, then ended (completed runs)."""
    rows: list[dict[str, Any]] = []
    for run in ("s1.x", "s2.x"):
        trace_id = run.encode().hex().ljust(32, "0")[:32]
        for i, (frm, node) in enumerate((("__start__", "a"), ("a", "b"))):
            attrs = tm.step_attributes(workflow="gateway", run_id=run, index=i, from_node=frm,
                                       node=node, prefetched=False, outcome="none")  # fmt: skip
            rows.append({"traceId": trace_id, "spanId": f"{i + 1:016x}",
                         "name": f"invoke_agent {node}", "attributes": attrs})  # fmt: skip
        attrs = {**tm.workflow_attributes("gateway", run), **tm.workflow_result_attributes(())}
        rows.append({"traceId": trace_id, "spanId": f"{9:016x}",
                     "name": "invoke_workflow gateway", "attributes": attrs})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_gateway_state_is_fitted_from_its_trace(tmp_path: Path) -> None:
    from agentwarm.gateway.state import load_state

    trace = _gateway_trace(tmp_path / "gw.jsonl")
    state = tmp_path / "gw-state"
    result = _fit("--gateway", str(state), "--trace", str(trace), "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["workflow"], out["runs"], out["transitions"]) == ("gateway", 2, 6)
    loaded = load_state(state, default_predictor)
    assert loaded is not None
    assert loaded.predictor.predict(())[0][0] == "a"
    assert loaded.predictor.predict(("a",))[0][0] == "b"
    assert loaded.predictor.predict(("a", "b"))[0][0] == END


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "error: nothing to fit: give --trace FILE or --conversations FILE"),
        (["--gateway", "{tmp}/gw", "--trace", "{bad_trace}", "{flow}"], "not both"),
        (["{flow}", "--trace", "{bad_trace}"], "error: {bad_trace}:2: not JSON"),
        (["{flow}", "--conversations", "{bad_convs}"], "error: {bad_convs}:2: not JSON"),
        (["{flow}", "--trace", "{tmp}/none.jsonl"], "error: {tmp}/none.jsonl: no such trace file"),
        (["--gateway", "{tmp}/gw", "--conversations", "{bad_convs}"], "heads"),
        (
            ["{flow}", "--trace", "{gw_trace}"],
            "error: no transition of workflow 'flow' to learn in the given files "
            "(4 skipped: step of another workflow (gateway))",
        ),
    ],
)
def test_bad_input_is_one_line_naming_the_file_and_line(
    flow: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    gw_trace = _gateway_trace(tmp_path / "gw.jsonl")
    bad_trace = _gateway_trace(tmp_path / "t.jsonl")
    bad_trace.write_text(bad_trace.read_text().replace("\n", "\n{oops\n", 1))
    bad_convs = tmp_path / "c.jsonl"
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]}
    bad_convs.write_text(json.dumps(good) + "\n{not json\n", encoding="utf-8")
    names = {"tmp": tmp_path, "flow": flow, "gw_trace": gw_trace, "bad_trace": bad_trace}
    names["bad_convs"] = bad_convs
    result = _fit(*(a.format(**names) for a in args))
    assert result.exit_code == 2, result.output
    assert message.format(**names) in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
