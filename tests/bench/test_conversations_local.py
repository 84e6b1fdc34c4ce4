"""``agentwarm bench --conversations`` on the embedded engine (tiny preset), both layouts.

Fixtures: ``tests/fixtures/tau_airline`` (tau-bench airline excerpts, see its SOURCE.md).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from agentwarm.bench import BenchConfig, run_bench
from agentwarm.cli import app
from agentwarm.engines.local import LocalEngine
from tests.bench.conversation_checks import EXCERPT, FULL, Capture, check_replay

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def _bench(*args: str) -> dict:
    result = CliRunner().invoke(
        app,
        ["bench", "--engine", "local", "--model", "tiny", *args, "--json"],
        env={"AGENTWARM_NO_PROGRESS": "1"},
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


async def _tiny_context() -> int:
    engine = LocalEngine("tiny")
    try:
        return engine.max_context
    finally:
        await engine.aclose()


@pytest.mark.parametrize("layout", ["subagent", "shared"])
@pytest.mark.slow
def test_quick_conversation_replay_on_the_tiny_preset(layout: str) -> None:
    out = _bench(
        "--conversations", str(EXCERPT), "--layout", layout, "--episodes", "1",
        "--max-steps", "3", "--think", "const:0.01",
    )  # fmt: skip
    assert out["workload"]["conversations"] is True
    assert out["workload"]["test_steps"] == 3
    assert out["peak_rss_mib"] > 0
    for mode, f in out["modes"].items():
        assert f["steps"] == 1 + 3, mode  # the entry node and three assistant turns
        assert f["accounting_mismatched_requests"] == 0, mode
        assert f["useful_tokens"] + f["wasted_tokens"] == f["computed_tokens"], mode
        assert f["peak_rss_mib"] > 0, mode
    assert out["modes"]["cold"]["cached_tokens"] == 0
    assert out["modes"]["reactive"]["cached_tokens"] > 0


async def test_prompts_on_the_tiny_preset_hold_the_real_conversation() -> None:
    """Rendered with the preset's own chat template (when it has one), decoded back."""
    prompts: list[str] = []
    config = BenchConfig(
        conversations=EXCERPT,
        test_fraction=1.0,
        think="const:0",
        modes=("reactive",),
        episodes=1,
        max_steps=3,
    )
    report = await run_bench(config, lambda: Capture(LocalEngine("tiny"), prompts))
    check_replay(config, report, prompts)


@pytest.mark.slow
def test_full_policy_and_all_tools_fit_the_context_in_the_shared_layout() -> None:
    """The 7.6 KB airline policy + all 14 tool schemas + a real conversation (issue 12)."""
    context = asyncio.run(_tiny_context())
    if context < 32768:
        pytest.skip(
            f"tiny preset has a {context}-token context: waiting for its real tokenizer and "
            "32k context (issue 12)"
        )
    out = _bench(
        "--conversations", str(FULL), "--layout", "shared", "--modes", "reactive",
        "--test-fraction", "1.0", "--think", "const:0",
    )  # fmt: skip
    assert out["workload"]["static_prompt_tokens_max"] < context
    assert out["modes"]["reactive"]["steps"] == 1 + 4
    assert not out["notes"][1:], out["notes"]  # only "tool schemas from ...": all 14 known
