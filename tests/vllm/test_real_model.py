"""The real model end to end (issue 24 §2, §3): ``agentwarm run`` through the CLI on the real vLLM
server, and on the embedded engine with the same converted SmolLM2 directory (``--model smollm2``,
the name of what ``scripts/setup_vllm.sh`` built: its own tokenizer and chat template)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from agentwarm.engines.vllm import VLLMEngine
from tests.conftest_server import ROOT
from tests.vllm_server import missing


def run_json(*args: str) -> dict[str, Any]:
    """``agentwarm run examples/support_bot.py ARGS --json``: its report."""
    proc = subprocess.run(
        [sys.executable, "-m", "agentwarm.cli", "run", "examples/support_bot.py", *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    return report


async def test_agentwarm_run_learns_and_prefetches_on_vllm(vllm_url: str) -> None:
    engine = await VLLMEngine.from_url(vllm_url, wait_s=10)
    block = engine.block_size
    await engine.aclose()
    report = run_json("--engine", f"vllm:{vllm_url}", "--runs", "2")
    assert report["runs"] == 2 and report["failed_runs"] == []
    assert report["prefetches_issued"] > 0 and report["prefetch_hits"] > 0
    assert report["branch_hits"] > 0
    # What the live requests found cached, in vLLM's whole blocks (128 tokens on CPU).
    assert report["cached_tokens"] > 0 and report["cached_tokens"] % block == 0
    assert report["cached_tokens"] < report["prompt_tokens"]


def test_the_embedded_engine_runs_the_converted_model() -> None:
    if (why := missing()) is not None and "model" in why:
        pytest.skip(why)
    # ``smollm2`` names the directory the setup script built (MODEL, from the working directory)
    report = run_json("--model", "smollm2", "--runs", "2")
    assert report["runs"] == 2 and report["failed_runs"] == []
    assert report["prefetch_hits"] > 0 and report["cached_tokens"] > 0
