"""``agentwarm warmup run PLAN --engine vllm:URL`` against a real vLLM server (issue 24 §2): the
plan's chat prefix is rendered with the served model's template, prefilled at speculative
priority within half of vLLM's KV capacity (read from its ``/metrics``), and the live chat
request that starts with it finds it in vLLM's cache (``cached_tokens``, vLLM's own count)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from agentwarm.engines.base import new_rid
from agentwarm.engines.tokenizers import load_tokenizer
from agentwarm.engines.vllm.metrics import parse_cache_config
from agentwarm.warmup.types import Plan, WarmPrefix, save_plan
from tests.conftest_server import ROOT
from tests.vllm_server import MODEL

BLOCK = 128


@pytest.mark.parametrize("spec", ["vllm:{url}", "{url}"])
def test_warmup_run_warms_a_vllm_server(vllm_url: str, tmp_path: Path, spec: str) -> None:
    salt = f"tenant-{new_rid()}"
    system = f"You are the seat agent {new_rid()}. " + "Seats are assigned at check-in. " * 60
    plan = tmp_path / "plan.jsonl"
    messages = ({"role": "system", "content": system},)
    save_plan(Plan((WarmPrefix(messages=messages, node="seats", namespace=salt),)), plan)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "agentwarm.cli", "warmup", "run", str(plan), "--json"),
            *("--engine", spec.format(url=vllm_url), "--model", str(MODEL)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (summary,) = json.loads(done.stdout)["workers"]
    tok = load_tokenizer(MODEL)
    assert tok is not None
    head = len(tok.encode(f"<|im_start|>system\n{system}<|im_end|>\n"))
    assert (summary["worker"], summary["prefixes"], summary["error"]) == (vllm_url, 1, None)
    assert summary["tokens"] == head
    cache = parse_cache_config(httpx.get(f"{vllm_url}/metrics", timeout=10).text)
    assert cache.capacity_tokens is not None  # vLLM's KV capacity: num_gpu_blocks x block_size
    assert summary["budget_tokens"] == cache.capacity_tokens // 2  # --budget-fraction 0.5
    model = httpx.get(f"{vllm_url}/v1/models", timeout=10).json()["data"][0]["id"]
    body = {
        "model": model,
        "messages": [*messages, {"role": "user", "content": "A window seat, please."}],
        "max_tokens": 2,
        "cache_salt": salt,
    }
    live = httpx.post(f"{vllm_url}/v1/chat/completions", json=body, timeout=120).json()
    assert live["usage"]["prompt_tokens_details"]["cached_tokens"] == head // BLOCK * BLOCK
