"""The bench's inter-token latency of live requests (report and ``--json``) and the ``server``
profile (issue 24), on the fake engine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentwarm.bench import headline
from agentwarm.bench.config import PROFILES
from agentwarm.bench.metered import RequestRecord
from agentwarm.cli import app
from tests.bench.fake_args import bench_args

runner = CliRunner()


def _record(**kw: object) -> RequestRecord:
    base: dict[str, object] = dict(
        kind="generate",
        priority=1,
        prompt_tokens=10,
        cached_tokens=0,
        computed_tokens=10,
        status="done",
    )
    return RequestRecord(**{**base, **kw})  # type: ignore[arg-type]


def test_itl_is_the_decode_time_per_token_after_the_first() -> None:
    assert _record(ttft_s=0.5, e2e_s=1.1, output_tokens=4).itl_s == pytest.approx(0.2)
    assert _record(ttft_s=0.5, e2e_s=0.9, output_tokens=1).itl_s is None  # no second token
    assert _record(ttft_s=0.5, e2e_s=0.0, output_tokens=4).itl_s is None  # no e2e reported
    assert _record(output_tokens=4).itl_s is None  # aborted: no timings


def test_headline_itl_slowdown_is_agentwarm_over_reactive() -> None:
    modes = {"reactive": {"itl_mean_s": 0.02}, "agentwarm": {"itl_mean_s": 0.03}}
    assert headline(modes)["itl_slowdown_vs_reactive"] == pytest.approx(1.5)
    assert headline({"reactive": {"itl_mean_s": 0.02}})["itl_slowdown_vs_reactive"] is None


ROWS = [["a", "b", "a"], ["b", "a"], ["a", "a", "b"]]


def _args(tmp_path: Path, *extra: str) -> list[str]:
    return bench_args(tmp_path, ROWS, "reactive,agentwarm", *extra)


def test_json_and_table_report_live_itl(tmp_path: Path) -> None:
    result = runner.invoke(app, _args(tmp_path, "--json"), env={"AGENTWARM_NO_PROGRESS": "1"})
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    for figures in out["modes"].values():
        assert figures["itl_mean_s"] > 0  # the fake's quick profile decodes 8 tokens a step
        assert figures["itl_p50_s"] <= figures["itl_p95_s"]
    assert out["itl_slowdown_vs_reactive"] > 0
    table = runner.invoke(app, _args(tmp_path), env={"AGENTWARM_NO_PROGRESS": "1"})
    assert table.exit_code == 0, table.output
    assert "live ITL mean ms" in table.stdout and "ITL agentwarm/reactive" in table.stdout


def test_server_profile_is_described_and_sized_for_two_cores(tmp_path: Path) -> None:
    server = PROFILES["server"]
    for words in ("2 CPU cores", "vllm:URL", "prompts", "think time", "minutes"):
        assert words in server.description
    assert server.noise_note is None and server.config.episodes is not None
    args = _args(tmp_path, "--profile", "server", "--json", "--episodes", "2")
    result = runner.invoke(app, args, env={"AGENTWARM_NO_PROGRESS": "1"})
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["config"]["profile"] == "server" and out["noise_note"] is None
    assert out["config"]["think"] == "const:0"  # the option still overrides the profile
    assert out["workload"]["static_prompt_tokens_min"] >= 400
    assert out["workload"]["static_prompt_tokens_max"] <= 1_000
