"""The ``next_turn`` mode (Dynamo's speculative next-turn prefill) on the fake engine: one warm
per reply, rendered without tools or generation prompt, and what the next live request found."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentwarm.bench import BenchConfig, PromptSizes, Workload, load_episodes, run_bench
from agentwarm.bench.conversations import RESPOND
from agentwarm.bench.report import BenchReport
from agentwarm.cli import app
from agentwarm.engines.fake import FakeEngine
from agentwarm.engines.types import Priority
from agentwarm.runtime.prompt import render_system
from tests.bench.conversation_checks import EXCERPT
from tests.bench.fake_args import bench_args

SIZES = PromptSizes(
    policy=120,
    instructions=(30, 60),
    schema=(20, 40),
    opening=(10, 20),
    result=(10, 30),
    output_tokens=4,
)
ROWS = [["a", "a", "b"], ["b", "b", "a", "a"]]


class Engines:
    def __init__(self) -> None:
        self.made: list[FakeEngine] = []

    def __call__(self) -> FakeEngine:
        engine = FakeEngine(seconds_per_token=1e-6, seconds_per_output_token=1e-5, chunk_size=64)
        self.made.append(engine)
        return engine


def _config(tmp_path: Path, layout: str, *, plain: bool = False) -> BenchConfig:
    eps = tmp_path / "eps.jsonl"
    eps.write_text("".join(json.dumps({"steps": r}) + "\n" for r in ROWS), encoding="utf-8")
    kw: dict[str, Any] = {}
    if plain:  # a schema for no step: every step is a plain step (no tool segment)
        tools = tmp_path / "tools.json"
        schema = {"type": "function", "function": {"name": "other", "parameters": {}}}
        tools.write_text(json.dumps([schema]), encoding="utf-8")
        kw["tools_file"] = tools
    return BenchConfig(
        trajectories=eps,
        test_fraction=1.0,
        think="const:0.02",
        sizes=SIZES,
        pretrain=False,
        layout=layout,
        modes=("reactive", "next_turn"),
        **kw,
    )


def _cached(report: BenchReport, mode: str) -> list[list[int]]:
    return [[st.cached_tokens for st in r.steps] for r in report.runs[mode].results]


@pytest.mark.slow
async def test_one_warm_per_reply_at_live_priority_without_tools(tmp_path: Path) -> None:
    engines = Engines()
    report = await run_bench(_config(tmp_path, "shared"), engines)
    nt = report.modes["next_turn"]
    steps = sum(len(r) + 1 for r in ROWS)  # every node (the entry too) makes one reply
    assert nt["steps"] == steps
    assert nt["next_turn_warms"] == nt["prefetches_issued"] == steps
    # The fake's log: the warm-up request, then per step its live request and its warm.
    generates = [r for r in engines.made[1].log if r.kind == "generate"]
    assert len(generates) == 1 + 2 * steps
    assert {r.priority for r in generates} == {Priority.LIVE}
    # Dynamo renders the next turn without the tools: in this format they follow the system
    # text, so each warm agrees with the next prompt up to the end of the system text only,
    # all of which the previous live request had cached: nothing new for any step.
    log = report.runs["next_turn"].next_turn
    assert log is not None
    encode = FakeEngine().encode
    episodes = load_episodes(tmp_path / "eps.jsonl")
    workload = Workload.build(episodes, encode=encode, layout="shared", sizes=SIZES)
    system = len(encode(render_system(workload.system["a"])))
    paired = [w for w in log.warms if w.covered is not None]
    assert len(paired) == steps - len(ROWS)  # the warm after a run's last reply has no pair
    # The next message's header ("<|user ...", "<|assistant ...") and the tools' ("<|tools|>")
    # share their first two bytes.
    assert {w.covered for w in paired} == {system + len(encode("<|"))}
    assert nt["branch_hit_rate"] == 0.0
    assert nt["miss_reasons"] == {"not_predicted": steps - len(ROWS)}
    assert _cached(report, "next_turn") == _cached(report, "reactive")
    r = report.modes["reactive"]
    assert nt["live_computed_tokens"] == r["live_computed_tokens"]
    assert nt["wasted_tokens"] == nt["next_turn_computed_tokens"] > 0
    assert nt["computed_tokens"] == nt["live_computed_tokens"] + nt["next_turn_computed_tokens"]


async def test_the_same_agents_next_turn_is_warmed_another_agents_head_is_not(
    tmp_path: Path,
) -> None:
    """Plain steps (no tools), subagent layout: a warm is a prefix of its agent's next prompt,
    so a step that repeats its node finds the whole warm cached; a step of another node (its
    own head) finds exactly what reactive caching finds."""
    report = await run_bench(_config(tmp_path, "subagent", plain=True), Engines())
    log = report.runs["next_turn"].next_turn
    assert log is not None
    warmed, reactive = _cached(report, "next_turn"), _cached(report, "reactive")
    runs = report.runs["next_turn"].results
    same = other = 0
    for run, mine, base in zip(runs, warmed, reactive, strict=True):
        for k in range(1, len(run.steps)):
            warm = log.for_live(run.run_id, k)
            assert warm is not None and warm.covered is not None and not warm.failed
            if run.steps[k].node == run.steps[k - 1].node:
                same += 1
                assert warm.covered == warm.tokens  # the whole warm is the next prompt's start
                assert mine[k] == warm.tokens > base[k]
            else:
                other += 1
                assert warm.covered < warm.tokens
                assert mine[k] == base[k]
    assert (same, other) == (3, 4)
    nt = report.modes["next_turn"]
    assert nt["prefetch_hits"] == same
    assert nt["miss_reasons"] == {"not_predicted": other}
    assert nt["short_hits"] == 0
    assert nt["live_computed_tokens"] < report.modes["reactive"]["live_computed_tokens"]


@pytest.mark.slow
def test_the_cli_reports_next_turn_beside_the_other_modes(tmp_path: Path) -> None:
    args = bench_args(tmp_path, ROWS, "reactive,next_turn,agentwarm,oracle", "--json")
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert list(out["modes"]) == ["reactive", "next_turn", "agentwarm", "oracle"]
    nt = out["modes"]["next_turn"]
    assert nt["next_turn_warms"] == nt["steps"] == sum(len(r) + 1 for r in ROWS)
    for key in ("next_turn_gap_closed", "ttft_speedup_vs_next_turn", "gap_closed_live_tokens"):
        assert key in out
    table = CliRunner().invoke(app, args[:-1])
    assert table.exit_code == 0, table.output
    assert "next_turn miss reasons: not_predicted" in table.output


async def test_a_replayed_conversation_warms_after_each_real_assistant_turn() -> None:
    """A real conversation (subagent layout): the recorded assistant turn is the reply. The
    entry (the user's opening) replies nothing, so each run's first LLM call has no warm; a
    reply of the plain ``respond`` node followed by ``respond`` again is wholly found."""
    config = BenchConfig(
        conversations=EXCERPT,
        layout="subagent",
        test_fraction=1.0,
        think="const:0.02",
        modes=("reactive", "next_turn"),
    )
    report = await run_bench(config, Engines())
    log = report.runs["next_turn"].next_turn
    assert log is not None
    runs = report.runs["next_turn"].results
    assert len(log.warms) == sum(len(r.steps) - 1 for r in runs)
    repeats = 0
    for run in runs:
        calls = [st for st in run.steps if st.llm_calls]
        assert log.for_live(run.run_id, 0) is None
        for index in range(1, len(calls)):
            warm = log.for_live(run.run_id, index)
            assert warm is not None and warm.covered is not None and not warm.failed
            if calls[index].node == calls[index - 1].node == RESPOND:
                repeats += 1
                assert calls[index].cached_tokens == warm.covered == warm.tokens
    assert repeats > 0
    nt = report.modes["next_turn"]
    assert nt["miss_reasons"]["not_predicted"] >= len(runs)
    assert nt["prefetch_hits"] >= repeats
