"""`agentwarm run --engine URL` end to end: against `agentwarm serve`, two workers, and the
real sglang-router. Same paths and comparable hit rates as in process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest_server import RouterProcess, needs_router, serve

EXAMPLE = "examples/support_bot.py"
RUNS = 10


def run_cli(*args: str, state_dir) -> dict:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentwarm.cli",
            "run",
            EXAMPLE,
            "--runs",
            str(RUNS),
            "--json",
            "--state-dir",
            str(state_dir),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def in_process(tmp_path_factory) -> dict:
    return run_cli("--engine", "fake", state_dir=tmp_path_factory.mktemp("state"))


def assert_comparable(remote: dict, local: dict) -> None:
    assert remote["paths"] == local["paths"]
    assert remote["steps"] == local["steps"]
    assert abs(remote["branch_hit_rate"] - local["branch_hit_rate"]) <= 0.1
    # Sanity: most prompt tokens came from the cache (static heads, transcripts, prefetches).
    assert remote["cached_tokens"] > 0.6 * remote["prompt_tokens"]


@pytest.mark.slow
def test_run_against_agentwarm_serve(in_process, tmp_path):
    with serve() as server:
        remote = run_cli("--engine", server.url, state_dir=tmp_path)
        metrics = server.metrics()
    assert_comparable(remote, in_process)
    assert metrics["sglang:cached_tokens_total"] >= remote["cached_tokens"]


@pytest.mark.slow
def test_run_against_two_workers(in_process, tmp_path):
    with serve() as w1, serve() as w2:
        remote = run_cli("--engine", f"{w1.url},{w2.url}", state_dir=tmp_path)
        served = [w.metrics()["sglang:num_requests_total"] for w in (w1, w2)]
    assert_comparable(remote, in_process)
    assert sum(served) > 0


@pytest.mark.slow
@needs_router
def test_run_through_sglang_router(in_process, tmp_path):
    with serve() as w1, serve() as w2:
        router = RouterProcess([w1.url, w2.url], "cache_aware")
        try:
            remote = run_cli("--engine", router.url, state_dir=tmp_path)
        finally:
            router.stop()
        cached = [w.metrics()["sglang:cached_tokens_total"] for w in (w1, w2)]
    assert_comparable(remote, in_process)
    assert sum(cached) >= remote["cached_tokens"]


def test_unreachable_engine_url_is_a_one_line_error(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentwarm.cli",
            "run",
            EXAMPLE,
            "--engine",
            "http://127.0.0.1:9",
            "--state-dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ") and "127.0.0.1:9" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
