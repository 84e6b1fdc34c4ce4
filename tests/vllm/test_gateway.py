"""``agentwarm gateway`` in front of a real vLLM server, through the ``openai`` SDK (issue 24 §2-3).

* An agent of two heads (a planner, then a checker that gets the planner's conversation and
  reply): once the gateway has seen it, the checker's prompt is prefetched through
  VLLMEngine's token-id wire while the client "thinks", and the checker's live request finds
  it in vLLM's cache — beyond its head, on a task vLLM has never seen — proved by the
  ``cached_tokens`` vLLM itself reports, and by the gateway's hits.
* A warm request (``max_tokens: 0``, which vLLM itself refuses) is prefilled by the gateway;
  the live request after it finds the warmed prefix cached.
* ``--warmup PLAN``: ``/health/ready`` is 200 once vLLM holds the plan's prefix.
* A plain URL of a vLLM server is taken for one (and ``--model`` defaults to its directory).
No mock: the server is ``tests/vllm_server.py``'s (or ``AGENTWARM_VLLM_URL``'s).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from agentwarm.engines.base import new_rid
from agentwarm.engines.tokenizers import load_tokenizer
from agentwarm.warmup.types import Plan, WarmPrefix, save_plan
from tests.conftest_server import GatewayProcess
from tests.vllm_server import MODEL
from tests.waiting import wait_until

BLOCK = 128  # vLLM's KV block on CPU: cached tokens come in whole blocks


def prose(topic: str, words: int) -> str:
    """``words`` words of plain English about ``topic`` (different for each topic)."""
    words_of = [
        "check",
        "every",
        "booking",
        "against",
        "the",
        "fare",
        "rules",
        "and",
        "the",
        "passenger",
        "record",
    ]
    words_of += [
        "before",
        "answering",
        "then",
        "state",
        "the",
        "outcome",
        "with",
        "the",
        "reason",
        "and",
        "next",
        "step",
    ]
    body = " ".join(words_of[(i * 7 + len(topic)) % len(words_of)] for i in range(words))
    return f"{topic}: {body}."


PLANNER = "You are the planner of a travel agency. " + prose("planning rules", 400)
CHECKER = "You are the checker of a travel agency. " + prose("checking rules", 400)


def head_tokens(system: str) -> int:
    """Tokens of ``system`` rendered as the first message of a prompt (ChatML)."""
    tok = load_tokenizer(MODEL)
    assert tok is not None
    return len(tok.encode(f"<|im_start|>system\n{system}<|im_end|>\n"))


@pytest.fixture(scope="module")
def gateway(vllm_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    state = tmp_path_factory.mktemp("gateway-vllm")
    args = ["--upstream", f"vllm:{vllm_url}", "--model", str(MODEL), "--state-dir", str(state)]
    gw = GatewayProcess(args)
    try:
        yield gw
    finally:
        gw.stop()
    assert gw.proc.returncode in (0, -signal.SIGTERM), "".join(gw.output)
    assert "Traceback" not in "".join(gw.output)


@pytest.fixture(scope="module")
def model(vllm_url: str) -> str:
    """The served model's name (what requests must call it)."""
    return str(httpx.get(f"{vllm_url}/v1/models", timeout=10).json()["data"][0]["id"])


def stats(gw: GatewayProcess) -> dict[str, Any]:
    return dict(httpx.get(f"{gw.url}/v1/agentwarm/stats", timeout=10).json())


def test_the_next_agent_is_prefetched_into_vllm_and_its_request_finds_it(
    gateway: GatewayProcess, model: str
) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="none", max_retries=0)
    salt = f"tenant-{new_rid()}"  # this test's own cache namespace on the shared server
    checked: list[tuple[int, int]] = []  # (prompt, cached) of the checker's requests
    for session in range(3):
        task = f"Trip {session} {new_rid()}: " + prose(f"itinerary {session}", 300)
        user = f"user-{new_rid()}"
        asked: list[dict[str, str]] = [{"role": "user", "content": task}]
        issued = stats(gateway)["prefetches_issued"]
        plan = client.chat.completions.create(
            model=model,
            messages=[{"role": "system", "content": PLANNER}, *asked],  # type: ignore[list-item]
            max_tokens=12,
            temperature=0,
            user=user,
            extra_body={"cache_salt": salt},
        )
        reply = plan.choices[0].message.content or ""
        if session == 2:  # the gateway has seen planner → checker twice: it prefetches
            wait_until(
                lambda: stats(gateway)["prefetches_issued"] > issued,  # noqa: B023
                what="the checker's prefetch to be issued",
            )
            wait_until(
                lambda: stats(gateway)["prefetches_in_flight"] == 0,
                timeout_s=180,
                what="the checker's prefetch to be done",
            )
        check = client.chat.completions.create(
            model=model,
            messages=[
                {"role": "system", "content": CHECKER},
                *asked,  # type: ignore[list-item]
                {"role": "assistant", "content": reply},
                {"role": "user", "content": "Check that plan."},
            ],
            max_tokens=4,
            temperature=0,
            user=user,
            extra_body={"cache_salt": salt},
        )
        assert check.usage is not None and check.usage.prompt_tokens_details is not None
        checked.append(
            (check.usage.prompt_tokens, check.usage.prompt_tokens_details.cached_tokens or 0)
        )
    after = stats(gateway)
    assert after["prefetch_hits"] >= 1 and after["branch_hits"] >= 1, after
    prompt, cached = checked[2]
    # The task is new to vLLM: only a prefetch can have computed it. Without one, vLLM would
    # have cached at most the checker's head (seen in the earlier sessions).
    head = head_tokens(CHECKER)
    assert cached % BLOCK == 0 and cached >= head + 2 * BLOCK, (checked, head)
    assert cached <= prompt
    assert checked[0][1] < head + BLOCK  # the first checker request found its task uncached


def test_a_warm_request_is_prefilled_in_front_of_vllm(gateway: GatewayProcess, model: str) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="none", max_retries=0)
    salt = f"tenant-{new_rid()}"
    system = "You are the refunds agent. " + prose(f"refund rules {new_rid()}", 500)
    messages: list[Any] = [{"role": "system", "content": system}]
    warm = client.chat.completions.create(
        model=model, messages=messages, max_tokens=0, extra_body={"cache_salt": salt}
    )
    assert warm.choices == [] and warm.usage is not None
    assert warm.usage.prompt_tokens >= head_tokens(system)
    live = client.chat.completions.create(
        model=model,
        messages=[*messages, {"role": "user", "content": "Refund my ticket."}],
        max_tokens=2,
        extra_body={"cache_salt": salt},
    )
    assert live.usage is not None and live.usage.prompt_tokens_details is not None
    assert live.usage.prompt_tokens_details.cached_tokens == head_tokens(system) // BLOCK * BLOCK
    # another tenant does not find it (vLLM isolates by cache_salt)
    other = client.chat.completions.create(
        model=model,
        messages=[*messages, {"role": "user", "content": "Refund my ticket."}],
        max_tokens=2,
        extra_body={"cache_salt": f"tenant-{new_rid()}"},
    )
    assert other.usage is not None and other.usage.prompt_tokens_details is not None
    assert (other.usage.prompt_tokens_details.cached_tokens or 0) == 0


def test_the_gateway_is_ready_once_vllm_holds_its_warmup_plan(
    vllm_url: str, model: str, tmp_path: Path
) -> None:
    system = "You are the baggage agent. " + prose(f"baggage rules {new_rid()}", 500)
    plan, ready_file = tmp_path / "plan.jsonl", tmp_path / "ready.json"
    messages = ({"role": "system", "content": system},)
    save_plan(Plan((WarmPrefix(messages=messages, node="baggage"),)), plan)
    gw = GatewayProcess(
        [
            *("--upstream", vllm_url),  # plain: told apart as vLLM; --model: its directory
            *("--warmup", str(plan), "--ready-file", str(ready_file)),
            *("--state-dir", str(tmp_path / "state")),
        ]
    )
    try:
        wait_until(
            lambda: httpx.get(f"{gw.url}/health/ready", timeout=10).status_code == 200,
            timeout_s=180,
            what="the gateway's warm-up of vLLM",
        )
        done = json.loads(ready_file.read_text())
        assert done["ready"] is True
        (summary,) = done["workers"].values()
        assert summary["error"] is None and summary["prefixes"] == 1
        assert summary["budget_tokens"] > 0  # half of vLLM's KV capacity (its /metrics)
        body = {
            "model": model,
            "messages": [*messages, {"role": "user", "content": "My bag is lost."}],
            "max_tokens": 2,
        }
        live = httpx.post(f"{gw.url}/v1/chat/completions", json=body, timeout=120).json()
        cached = live["usage"]["prompt_tokens_details"]["cached_tokens"]
        assert cached == head_tokens(system) // BLOCK * BLOCK
    finally:
        gw.stop()
    output = "".join(gw.output)
    assert f"upstream=vllm:{vllm_url}" in output or f"upstream={vllm_url}" in output
    assert "the vLLM server's own" in output  # --model defaulted to the served directory
