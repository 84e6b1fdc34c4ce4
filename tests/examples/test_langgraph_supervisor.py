"""``examples/langgraph_supervisor.py`` end to end against ``agentwarm serve --engine local
--model tiny``: the real LangGraph graph and ``ChatOpenAI`` send real chat requests (captured on
the wire with an httpx event hook), the stand-in policy routes (random weights), and the
server's cache serves each agent's repeated prefix."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

from agentwarm.gateway.types import SESSION_HEADER
from tests.conftest_server import serve

ROOT = Path(__file__).resolve().parents[2]
STEP = re.compile(
    r"task (\d+)\s+(\S+)\s+(\S+)\s+prompt_tokens=(\d+)\s+cached_tokens=(\d+)\s+by=(\w+)$"
)

#: The route of the first three INPUTS: (agent, tool it calls or "-" to answer, the call's args).
ROUTES: list[list[tuple[str, str, dict[str, Any]]]] = [
    [
        ("supervisor", "transfer_to_reservations", {}),
        ("reservations", "find_booking", {"booking_code": "QX7K2P"}),
        ("reservations", "change_flight", {"booking_code": "QX7K2P", "new_date": "2026-03-14"}),
        ("reservations", "-", {}),
        ("supervisor", "-", {}),
    ],
    [
        ("supervisor", "transfer_to_baggage", {}),
        ("baggage", "track_bag", {"bag_tag": "SK482913"}),
        ("baggage", "open_claim", {"bag_tag": "SK482913", "reason": "delayed"}),
        ("baggage", "-", {}),
        ("supervisor", "-", {}),
    ],
    [
        ("supervisor", "transfer_to_refunds", {}),
        ("refunds", "find_booking", {"booking_code": "PL9D3W"}),
        ("refunds", "refund_quote", {"booking_code": "PL9D3W"}),
        ("refunds", "issue_refund", {"booking_code": "PL9D3W", "amount_eur": 212.4}),
        ("refunds", "-", {}),
        ("supervisor", "-", {}),
    ],
]
TOOLS = {
    "supervisor": ["transfer_to_reservations", "transfer_to_baggage", "transfer_to_refunds"],
    "reservations": ["find_booking", "change_flight"],
    "baggage": ["track_bag", "open_claim"],
    "refunds": ["find_booking", "refund_quote", "issue_refund"],
}


def load_example() -> ModuleType:
    path = ROOT / "examples" / "langgraph_supervisor.py"
    spec = importlib.util.spec_from_file_location("langgraph_supervisor", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses and LangGraph resolve annotations through it
    spec.loader.exec_module(module)
    return module


class Wire:
    """Every chat request the example's httpx client sends, with the JSON reply to it."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.replies: list[dict[str, Any]] = []
        self.client = httpx.Client(
            timeout=60, event_hooks={"request": [self.requests.append], "response": [self.read]}
        )

    def read(self, response: httpx.Response) -> None:
        response.read()
        self.replies.append(response.json())

    def body(self, i: int) -> dict[str, Any]:
        body: dict[str, Any] = json.loads(self.requests[i].content)
        return body


@pytest.mark.slow
def test_the_team_runs_over_real_chat_requests(capsys: pytest.CaptureFixture[str]) -> None:
    example = load_example()
    assert example.SESSION_HEADER == SESSION_HEADER  # the header agentwarm gateway reads
    prompts = {a.name: a.prompt for a in (example.SUPERVISOR, *example.SPECIALISTS)}
    wire = Wire()
    with serve("--engine", "local", "--model", "tiny") as server:
        argv = ["--base-url", f"{server.url}/v1", "--runs", "3", "--session-header"]
        assert example.main(argv, http_client=wire.client) == 0
        metrics = server.metrics()
        # A base URL without /v1 is a clear error, not a traceback.
        assert example.main(["--base-url", server.url, "--runs", "1"]) == 1
    out, err = capsys.readouterr()
    assert "the base URL of an OpenAI-compatible server usually ends in /v1" in err
    lines = out.splitlines()
    steps = [STEP.match(line) for line in lines[:-1]]
    assert all(steps), lines
    rows = [(int(m[1]), m[2], m[3], int(m[4]), int(m[5]), m[6]) for m in steps if m]

    # The route is the stand-in policy's (the random-weight model never made a valid call).
    assert [row[5] for row in rows] == ["policy"] * len(rows)
    by_task = [[(r[1], r[2]) for r in rows if r[0] == task] for task in range(3)]
    assert by_task == [[(agent, tool) for agent, tool, _ in route] for route in ROUTES]

    # One real request per step, all counted by the server, the usage printed as served.
    n = sum(len(route) for route in ROUTES)
    assert len(rows) == len(wire.requests) == len(wire.replies) == n
    assert metrics["sglang:num_requests_total"] == n
    assert sum(r[3] for r in rows) == metrics["sglang:prompt_tokens_total"]
    assert sum(r[4] for r in rows) == metrics["sglang:cached_tokens_total"]
    for row, reply in zip(rows, wire.replies, strict=True):
        usage = reply["usage"]
        assert (row[3], row[4]) == (
            usage["prompt_tokens"],
            usage["prompt_tokens_details"]["cached_tokens"],
        )
    total, cached = sum(r[3] for r in rows), sum(r[4] for r in rows)
    assert lines[-1].startswith(f"3 tasks, {n} requests, {total} prompt tokens, {cached} cached")

    # Each request: the agent's own system prompt first, then the conversation; its tools.
    i = 0
    for task, route in enumerate(ROUTES):
        sessions = {wire.requests[i + k].headers[SESSION_HEADER] for k in range(len(route))}
        assert len(sessions) == 1
        history: list[dict[str, Any]] = [{"role": "user", "content": example.INPUTS[task]}]
        for agent, tool, args in route:
            body = wire.body(i)
            assert wire.requests[i].url.path == "/v1/chat/completions"
            assert body["model"] == "tiny" and body["max_completion_tokens"] == 16
            assert body["messages"][0] == {"role": "system", "content": prompts[agent]}
            assert [t["function"]["name"] for t in body["tools"]] == TOOLS[agent]
            assert body["messages"][1:] == history  # the conversation so far, unchanged
            if i + 1 < n and wire.body(i + 1)["messages"][1] == history[0]:
                grown = wire.body(i + 1)["messages"][1 + len(history) :]
                answer = wire.replies[i]["choices"][0]["message"]["content"]
                check_growth(grown, agent, tool, args, answer)
                history = history + grown
            i += 1
    assert len({r.headers[SESSION_HEADER] for r in wire.requests}) == 3  # one session per task

    # The cache: every request after the first reuses a prefix; an agent's next request in a
    # task finds at least its whole previous prompt.
    assert all(row[4] > 0 for row in rows[1:])
    for k, row in enumerate(rows):
        earlier = [r for r in rows[:k] if r[0] == row[0] and r[1] == row[1]]
        if earlier:
            assert row[4] >= earlier[-1][3], (k, row, earlier[-1])


def check_growth(
    grown: list[dict[str, Any]], agent: str, tool: str, args: dict[str, Any], answer: str
) -> None:
    """The messages a step added: its tool call and the tool's result, or its answer."""
    if tool == "-":
        assert grown == [{"role": "assistant", "content": answer, "name": agent}]
        return
    call, result = grown
    assert call["role"] == "assistant" and call["name"] == agent
    (sent,) = call["tool_calls"]
    assert sent["function"]["name"] == tool
    assert json.loads(sent["function"]["arguments"]) == args
    assert result["role"] == "tool" and result["tool_call_id"] == sent["id"]
    if tool.startswith("transfer_to_"):
        assert result["content"] == f"Transferred to {tool.removeprefix('transfer_to_')}."
    else:
        data = json.loads(result["content"])  # the stub's JSON echoes the arguments
        assert {key: data.get(key) for key in args} == args


def test_bad_arguments_are_refused_before_any_request() -> None:
    example = load_example()
    with pytest.raises(SystemExit) as exc:
        example.main(["--base-url", "http://127.0.0.1:9/v1", "--runs", "0"])
    assert exc.value.code == 2
