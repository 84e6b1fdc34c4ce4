"""``python -m benchmarks.gateway_bench --engine vllm:URL``: the tau-airline replay through the
gateway in front of a real vLLM server (issue 24), its smallest profile (``vllm-quick``).

Both modes (direct and gateway; ``--no-next-turn``: the next_turn peer mode is covered on the
embedded engine by tests/gateway/test_gateway_bench.py) run on the one server, each in a
``cache_salt`` of its own; through the gateway the
learner prefetches the next head into vLLM's cache and at least one measured step finds it.
No timing is asserted (the server may be shared and the machine loaded): only that no request
failed, both rows are there, and the learner prefetched and hit. ~5 min on 2 cores (318 s in the
clean-clone CI run at 9f7773c, a third of the vLLM tests' time): opt-in
(``AGENTWARM_VLLM_LONG_TESTS=1``), like the tier tests; the gateway prefetching into vLLM is
covered in CI by ``tests/vllm/test_gateway.py``, the benchmark itself by
``tests/gateway/test_gateway_bench.py`` on the embedded engine.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest_server import ROOT
from tests.vllm.helpers import long_test
from tests.vllm_server import MODEL

CONVERSATIONS = ROOT.parent / "shared" / "data" / "tau-airline" / "conversations.jsonl"

pytestmark = [
    pytest.mark.skipif(
        not CONVERSATIONS.is_file(), reason=f"{CONVERSATIONS} is not there (shared data)"
    ),
    long_test("replays conversations through the gateway in front of vLLM (~5 min)"),
    pytest.mark.timeout(1800),  # the subprocess's own limit, on a loaded shared server
]


def test_the_replay_through_the_gateway_prefetches_into_vllm_and_hits(vllm_url: str) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "benchmarks.gateway_bench", "--profile", "vllm-quick"),
            *("--engine", f"vllm:{vllm_url}", "--model", str(MODEL)),
            *("--layout", "subagent", "--no-next-turn", "--json"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,  # a loaded shared server is slow; a quiet one takes ~1 min
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["engine"], report["url"], report["model"]) == ("vllm", vllm_url, str(MODEL))
    assert report["served_model"]
    figures = report["layouts"]["subagent"]
    direct, gateway = figures["direct"], figures["gateway"]
    assert "next_turn" not in figures and "ttft_ratio_vs_next_turn" not in figures
    for mode in (direct, gateway):
        assert mode["client_errors"] == 0, mode["first_error"]
        assert mode["requests"] > 0 and mode["prompt_tokens"] > 0
        assert 0 < mode["ttft_p50_s"] <= mode["ttft_p95_s"]
        assert 0 <= mode["cached_fraction"] <= 1
    assert direct["prefetches_issued"] == 0 and direct["branch_hit_rate"] is None
    assert gateway["prefetches_issued"] > 0
    assert 1 <= gateway["prefetch_hits"] <= gateway["prefetches_issued"]
    assert gateway["branch_hits"] >= 1
    # vLLM itself reported the hits' prefetched tokens cached (whole 128-token blocks of them).
    assert gateway["hit_cached_fraction"] > 0.5
