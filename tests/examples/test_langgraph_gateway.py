"""``examples/langgraph_supervisor.py`` through ``agentwarm gateway`` (issue 13): the unchanged
LangGraph team, its ``ChatOpenAI`` pointed at the gateway, which forwards every request to
``agentwarm serve --model tiny`` and learns the team from the traffic — four nodes (the
supervisor and three specialists, each its own system prompt and tools), the handoffs between
them — and prefetches the next agent's prompt."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.conftest_server import GatewayProcess, serve
from tests.examples.test_langgraph_supervisor import load_example


@pytest.mark.slow
def test_the_gateway_learns_the_langgraph_team_and_prefetches_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    example = load_example()
    runs = 6  # two rounds of the example's inputs: the second round is predicted
    with serve("--engine", "local", "--model", "tiny") as worker:
        gateway = GatewayProcess(
            ["--upstream", worker.url, "--model", "tiny", "--state-dir", str(tmp_path)]
        )
        try:
            argv = ["--base-url", f"{gateway.url}/v1", "--runs", str(runs), "--session-header"]
            assert example.main(argv) == 0
            stats = httpx.get(f"{gateway.url}/v1/agentwarm/stats", timeout=30).json()
            served = worker.metrics()
        finally:
            gateway.stop()
    out = capsys.readouterr().out
    steps = [line for line in out.splitlines() if line.startswith("task ")]
    assert len(steps) == stats["requests"] == stats["steps"]
    assert stats["nodes"] == 4  # supervisor, reservations, baggage, refunds
    assert stats["runs"] == runs  # one session per task (the X-Agentwarm-Session header)
    assert stats["prefetches_issued"] > 0 and stats["prefetch_hits"] > 0
    assert stats["branch_hit_rate"] is not None and stats["branch_hit_rate"] >= 0.5
    # The worker served every live request, and the prefetches as prefill-only requests.
    prefills = served["agentwarm:prefill_requests_total"]
    assert served["sglang:num_requests_total"] - prefills == len(steps)
    assert 0 < prefills <= stats["prefetches_issued"]
    assert stats["cached_tokens"] > 0
