from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentwarm.predictors import END, FirstOrderPredictor, MarkovPredictor, default_predictor
from benchmarks.predictor_eval import (
    Workload,
    evaluate,
    main,
    markov_source,
    oracle_score,
    tau2_workload,
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


def test_default_beats_first_order_on_tau2() -> None:
    workload = tau2_workload()
    markov = evaluate(default_predictor(), workload)
    first = evaluate(FirstOrderPredictor(), workload)
    assert markov.n == first.n == 550
    assert markov.top1 > first.top1
    assert markov.top3 > first.top3


@pytest.mark.parametrize("data", [None, "custom"])
def test_main_prints_and_writes_scores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: str | None
) -> None:
    argv = ["--runs", "20", "--json", str(tmp_path / "out.json")]
    if data:
        custom = tmp_path / "runs.jsonl"
        custom.write_text('{"steps": ["x", "y"]}\n{"steps": ["x", "y", "z"]}\n')
        argv += ["--data", str(custom)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "markov (default)" in out and "first-order baseline" in out
    rows = json.loads((tmp_path / "out.json").read_text())
    workloads = {r["workload"] for r in rows}
    assert {"synthetic-2nd-order", "synthetic-drift", "synthetic-1st-order"} <= workloads
    assert ("tau2-retail" in workloads) == (data is None)
