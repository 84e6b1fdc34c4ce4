from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest

from agentwarm.predictors import END, FirstOrderPredictor, MarkovPredictor, default_predictor
from benchmarks.predictor_eval import (
    PREDICTORS,
    Workload,
    _targets,
    agent_workloads,
    coding_agent,
    evaluate,
    main,
    markov_source,
    oracle_score,
    react_web,
    supervisor_team,
    tau2_workload,
    time_predictors,
)


def test_online_scoring_counts_every_step_and_the_end() -> None:
    workload = Workload("tiny", [["a", "b"], ["a", "b"], []], ["a", "b", END])
    score = evaluate(MarkovPredictor(), workload, "m")
    # targets: b, END (run 1), b, END (run 2); the empty run has none.
    assert score.n == 4
    # Run 1 is predicted from nothing (uniform: "a" first by candidate order); run 2 is learned.
    assert score.top1 == 0.5
    assert score.top3 == 1.0


def test_synthetic_source_is_deterministic_and_has_an_oracle() -> None:
    a = markov_source("s", order=2, runs=30, seed=4)
    b = markov_source("s", order=2, runs=30, seed=4)
    assert a.trajectories == b.trajectories
    assert a.truth is not None
    assert [len(t) for t in a.truth] == [len(r) for r in a.trajectories]
    oracle = oracle_score(a)
    assert oracle is not None and oracle.n == sum(len(r) for r in a.trajectories)
    assert oracle_score(tau2_workload()) is None


def test_default_beats_first_order_on_a_second_order_source() -> None:
    workload = markov_source("s", order=2, runs=200, seed=1)
    markov = evaluate(default_predictor(), workload)
    first = evaluate(FirstOrderPredictor(), workload)
    oracle = oracle_score(workload)
    assert oracle is not None
    assert markov.top1 > first.top1 + 0.2
    assert markov.log_loss < first.log_loss
    assert markov.top1 <= oracle.top1 + 0.02


def test_default_follows_drift_better_than_first_order() -> None:
    workload = markov_source("d", order=1, runs=300, seed=2, drift_at=150)
    assert (
        evaluate(default_predictor(), workload).top1
        > evaluate(FirstOrderPredictor(), workload).top1
    )


def test_default_beats_first_order_and_the_old_default_on_tau2() -> None:
    workload = tau2_workload()
    new = evaluate(default_predictor(), workload)
    old = evaluate(MarkovPredictor(), workload)
    first = evaluate(FirstOrderPredictor(), workload)
    assert new.n == old.n == first.n == 550
    # Targets right at top-1 / top-3, pinned: 331 / 438 (default), 325 / 434 (old default:
    # the plain order-3 Markov model), 301 / 419 (first order).
    assert [round(s.top1 * 550) for s in (new, old, first)] == [331, 325, 301]
    assert [round(s.top3 * 550) for s in (new, old, first)] == [438, 434, 419]
    assert new.log_loss < old.log_loss - 0.1
    assert new.log_loss < first.log_loss - 0.1


def test_shuffled_replay_keeps_the_runs() -> None:
    plain, shuffled = tau2_workload(), tau2_workload(shuffle=3)
    assert shuffled.name == "tau2-retail (shuffled 3)"
    assert shuffled.trajectories != plain.trajectories
    assert sorted(shuffled.trajectories) == sorted(plain.trajectories)
    assert tau2_workload(shuffle=3).trajectories == shuffled.trajectories


def test_generated_agent_workloads_follow_their_documented_processes() -> None:
    coding, react, team = agent_workloads(runs=60)
    assert [w.name for w in (coding, react, team)] == [
        "coding-agent",
        "react-web",
        "supervisor-team",
    ]
    assert coding.trajectories == coding_agent(60, 11).trajectories
    for w in (coding, react, team):
        assert w.truth is not None and w.oracle == "oracle (knows hidden state)"
        assert [len(t) for t in w.truth] == [len(_targets(r)) for r in w.trajectories]
        for run, truths in zip(w.trajectories, w.truth, strict=True):
            for (_, target), dist in zip(_targets(run), truths, strict=True):
                assert dist[target] > 0.0
                assert math.isclose(sum(dist.values()), 1.0)
                assert set(dist) <= set(w.candidates)
    for run in coding.trajectories:
        assert run[:2] == ["plan", "search"] and run[-1] == "submit"
        assert 1 <= run.count("search") <= 3 and run.count("submit") == 1
        assert run.count("run_tests") <= 5
    for run in react.trajectories:
        assert run[-1] == "answer" and run.count("answer") == 1
        assert ("calculator" in run) == (run[-2] == "calculator")
        assert (run[0] == "decompose") == (run.count("decompose") == 1)
    for run in team.trajectories:
        workers = run[1::2][:-1]
        assert run[0::2] == ["supervisor"] * (len(run) // 2) and run[-1] == "finish"
        assert len(workers) == len(set(workers)) >= 1


@pytest.mark.parametrize(
    ("make", "margin"),
    [(coding_agent, 0.03), (react_web, 0.1), (supervisor_team, 0.08)],
)
def test_default_beats_first_order_on_generated_agent_traces(
    make: Callable[[int, int], Workload], margin: float
) -> None:
    workload = make(150, 7)
    new = evaluate(default_predictor(), workload)
    first = evaluate(FirstOrderPredictor(), workload)
    assert new.top1 > first.top1 + margin
    assert new.log_loss < first.log_loss


def test_visited_set_beats_the_old_default_on_the_supervisor_team() -> None:
    workload = supervisor_team(150, 7)
    new = evaluate(default_predictor(), workload)
    old = evaluate(MarkovPredictor(), workload)
    assert new.top1 > old.top1 + 0.04
    assert new.log_loss < old.log_loss


def test_no_regression_on_the_first_order_control() -> None:
    workload = markov_source("c", order=1, runs=300, seed=3)
    new = evaluate(default_predictor(), workload)
    first = evaluate(FirstOrderPredictor(), workload)
    assert new.top1 >= first.top1 - 0.005
    assert new.log_loss <= first.log_loss + 0.02


def test_timing_rows_cover_every_predictor_and_size() -> None:
    rows = time_predictors((6, 12), steps=300, calls=50)
    assert [(t.predictor, t.candidates) for t in rows] == [
        (name, size) for size in (6, 12) for name in PREDICTORS
    ]
    assert all(t.predict_us > 0.0 and t.observe_us > 0.0 for t in rows)


@pytest.mark.parametrize("data", [None, "custom"])
def test_main_prints_and_writes_scores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: str | None
) -> None:
    argv = ["--runs", "20", "--json", str(tmp_path / "out.json")]
    files = []
    if data:
        for i in range(2):
            custom = tmp_path / f"runs{i}.jsonl"
            custom.write_text('{"steps": ["x", "y"]}\n{"steps": ["x", "y", "z"]}\n')
            argv += ["--data", str(custom)]
            files.append(f"data:{custom}")
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in PREDICTORS) and "first-order baseline" in out
    rows = json.loads((tmp_path / "out.json").read_text())
    workloads = {r["workload"] for r in rows}
    assert {"synthetic-2nd-order", "synthetic-drift", "synthetic-1st-order"} <= workloads
    assert {"coding-agent", "react-web", "supervisor-team"} <= workloads
    assert ("tau2-retail" in workloads) == (data is None)
    assert set(files) <= workloads
    assert {r["predictor"] for r in rows if r["workload"] == "react-web"} == {
        *PREDICTORS,
        "oracle (knows hidden state)",
    }
