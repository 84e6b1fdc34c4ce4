"""Mining a warm-up plan (:func:`agentwarm.warmup.mine.mine_plan`) from request logs and
traces."""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentwarm import telemetry as tm
from agentwarm.chat import FALLBACK, Message
from agentwarm.cli import app
from agentwarm.errors import ConfigError
from agentwarm.gateway.heads import HeadRegistry
from agentwarm.runtime import StepOutcome, load_workflow
from agentwarm.stats.traces import read_traces
from agentwarm.warmup import ChatRenderer, load_chat_renderer, plan_lines
from agentwarm.warmup.mine import mine_plan

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "support_bot.py"
TAU = ROOT.parent / "shared" / "data" / "tau-airline"


class CountingRenderer(ChatRenderer):
    """10 tokens per message, 1 per tool: lengths a test can compute by hand."""

    def __init__(self) -> None:
        super().__init__(lambda text: [], FALLBACK)

    def prefix_ids(
        self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None = None
    ) -> list[int]:
        return [0] * (10 * len(messages) + len(tools or ()))


R = CountingRenderer()

SA: Message = {"role": "system", "content": "You are A."}
SB: Message = {"role": "system", "content": "You are B."}
TOOL = {"type": "function", "function": {"name": "t1", "parameters": {"type": "object"}}}


def user(text: str) -> Message:
    return {"role": "user", "content": text}


def assistant(text: str) -> Message:
    return {"role": "assistant", "content": text}


U1, A1, TWO, THREE = user("u1"), assistant("a1"), user("two"), user("three")
#: Head A (system + tool): 6 requests that branch after [u1, a1] into "two" and "three"
#: (2 each); head B (no tool): 4 requests, each its own conversation. 10 in all.
REQUESTS: list[dict[str, Any]] = [
    {"messages": [SA, U1], "tools": [TOOL]},
    {"messages": [SA, U1, A1, TWO], "tools": [TOOL]},
    {"messages": [SA, U1, A1, TWO, assistant("a2"), user("u4")], "tools": [TOOL]},
    {"messages": [SA, U1, A1, THREE], "tools": [TOOL], "model": "ignored"},
    {"messages": [SA, U1, A1, THREE, assistant("a3"), user("u5")], "tools": [TOOL]},
    {"messages": [SA, user("u9")], "tools": [TOOL]},
    *({"messages": [SB, user(f"v{i}")]} for i in range(4)),
]


def line(prefix: dict[str, Any]) -> str:
    return json.dumps(prefix, ensure_ascii=False, separators=(",", ":"))


def write_jsonl(path: Path, records: Sequence[Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_two_heads_one_branching_give_the_exact_plan(tmp_path: Path) -> None:
    log = write_jsonl(tmp_path / "requests.jsonl", REQUESTS)
    plan = mine_plan([log], renderer=R, min_share=0.2)
    assert plan_lines(plan) == [
        # Head A's conversations branch after [u1, a1] into "two" and "three", but each branch
        # is one conversation (a request and the one that extends it): their histories are not
        # shared, so the branch point is the prefix (4 of 10 requests, 3 messages + 1 tool).
        line({"messages": [SA, U1, A1], "tools": [TOOL], "share": 0.4, "tokens": 31,
              "count": 4}),
        # Head A itself: 6 of 10 requests start with it; value 0.6 x 11.
        line({"messages": [SA], "tools": [TOOL], "share": 0.6, "tokens": 11, "count": 6}),
        # Head B: no conversation of it is shared by 2 requests: the head is the prefix.
        line({"messages": [SB], "share": 0.4, "tokens": 10, "count": 4}),
    ]  # fmt: skip


def test_min_share_and_top_k_cut_the_plan(tmp_path: Path) -> None:
    log = write_jsonl(tmp_path / "requests.jsonl", REQUESTS)
    plan = mine_plan([log], renderer=R, min_share=0.5)
    # 5 requests needed: [SA, U1] has 5 (its child [.., a1] only 4), head A 6, head B 4.
    assert plan_lines(plan) == [
        line({"messages": [SA, U1], "tools": [TOOL], "share": 0.5, "tokens": 21, "count": 5}),
        line({"messages": [SA], "tools": [TOOL], "share": 0.6, "tokens": 11, "count": 6}),
    ]
    assert plan_lines(mine_plan([log], renderer=R, min_share=0.5, top_k=1)) == plan_lines(plan)[:1]
    assert len(mine_plan([log], renderer=R, min_share=0.2, top_k=3)) == 3
    # Over every request: nothing is shared that widely.
    assert len(mine_plan([log], renderer=R, min_share=1.0)) == 0


def test_input_ids_are_mined_by_their_longest_shared_prefixes(tmp_path: Path) -> None:
    ids = [[1, 2, 3, 4, 5], [1, 2, 3, 7], [9, 9], [1, 2, 3, 4, 6], [1, 2, 3, 7, 8]]
    log = write_jsonl(tmp_path / "ids.jsonl", [{"input_ids": i} for i in ids])
    plan = mine_plan([log], renderer=None, min_share=0.4)
    # [1, 2, 3] (4 requests) is extended by [1, 2, 3, 4], which two conversations share;
    # [1, 2, 3, 7] starts 2 requests too, but of one conversation ([.., 7] then [.., 7, 8]).
    assert plan_lines(plan) == [
        line({"input_ids": [1, 2, 3, 4], "share": 0.4, "tokens": 4, "count": 2}),
    ]
    # Identical requests are so many conversations (a fixed prompt sent by each session).
    same = write_jsonl(tmp_path / "same.jsonl", [{"input_ids": [4, 2]}] * 3)
    assert plan_lines(mine_plan([same], renderer=None, min_share=1.0)) == [
        line({"input_ids": [4, 2], "share": 1.0, "tokens": 2, "count": 3})
    ]
    plan = mine_plan([log], renderer=None, min_share=0.8)
    assert plan_lines(plan) == [
        line({"input_ids": [1, 2, 3], "share": 0.8, "tokens": 3, "count": 4})
    ]


def test_chat_and_ids_requests_share_one_denominator(tmp_path: Path) -> None:
    chats = write_jsonl(tmp_path / "chats.jsonl", REQUESTS)
    ids = write_jsonl(tmp_path / "ids.jsonl", [{"input_ids": [5, 6, 7]}] * 10)
    plan = mine_plan([chats, ids], renderer=R, min_share=0.5)
    assert plan_lines(plan) == [
        line({"input_ids": [5, 6, 7], "share": 0.5, "tokens": 3, "count": 10}),
    ]  # head A: 6 of 20 requests


def test_the_plan_is_deterministic_whatever_the_input_order(tmp_path: Path) -> None:
    first = write_jsonl(tmp_path / "a.jsonl", REQUESTS)
    expected = plan_lines(mine_plan([first], renderer=R, min_share=0.1))
    assert plan_lines(mine_plan([first], renderer=R, min_share=0.1)) == expected
    shuffled = list(REQUESTS)
    for seed in range(3):
        random.Random(seed).shuffle(shuffled)
        half = len(shuffled) // 2
        one = write_jsonl(tmp_path / f"one{seed}.jsonl", shuffled[:half])
        two = write_jsonl(tmp_path / f"two{seed}.jsonl", shuffled[half:])
        assert plan_lines(mine_plan([two, one], renderer=R, min_share=0.1)) == expected


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"messages": [{"role": "user", "content": "hi"}]}', "not json"],
         ":2: not JSON (Expecting value at column 1); each line is an OpenAI chat request body"),
        (['{"messages": [{"role": "user", "content": "hi"}]}', '{"model": "m"}'],
         ":2: expected an object with exactly one of 'messages' and 'input_ids'; each line is"),
        (['{"messages": []}'], ":1: 'messages' must be a non-empty list of objects with a 'role'"),
        (['{"input_ids": [1, -2]}'], ":1: 'input_ids' must be a non-empty list of token ids"),
        (['{"messages": [{"role": "user"}], "tools": {}}'], ":1: 'tools' must be a list of"),
        (['{"input_ids": [1], "time": "yesterday"}'],
         ":1: 'time' 'yesterday' is neither unix seconds nor an ISO 8601 time"),
        (['{"model": "m"}'], ":1: neither a request nor a trace span; --from takes a request log"),
        (["not json"], ":1: not JSON (Expecting value at column 1); --from takes a request log"),
    ],
)  # fmt: skip
def test_bad_request_logs_name_the_file_line_and_fix(
    tmp_path: Path, lines: list[str], message: str
) -> None:
    log = tmp_path / "bad.jsonl"
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError) as caught:
        mine_plan([log], renderer=R)
    assert str(caught.value).startswith(f"{log}{message}")


def test_unusable_files_and_options_are_config_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    cases: list[tuple[list[Path], dict[str, Any], str]] = [
        ([tmp_path / "missing.jsonl"], {}, f"--from {tmp_path / 'missing.jsonl'}: cannot read"),
        ([tmp_path], {}, f"--from {tmp_path}: is a directory"),
        ([empty], {}, f"--from {empty}: the file is empty"),
        ([], {}, "nothing to mine: give request logs or traces with --from PATH"),
        ([empty], {"min_share": 0.0}, "--min-share must be in (0, 1], got 0.0"),
        ([empty], {"top_k": 0}, "--top-k must be a positive integer, got 0"),
    ]
    plan = write_jsonl(tmp_path / "plan.jsonl", [{"input_ids": [1], "share": 1.0, "tokens": 1,
                                                   "count": 1}])  # fmt: skip
    cases.append(([plan], {}, f"--from {plan}: is a warm-up plan (what agentwarm warmup plan"))
    for paths, options, message in cases:
        with pytest.raises(ConfigError) as caught:
            mine_plan(paths, renderer=R, **options)
        assert str(caught.value).startswith(message), str(caught.value)


def test_since_keeps_the_recent_requests(tmp_path: Path) -> None:
    now = time.time()
    recent = datetime.fromtimestamp(now - 60, UTC).isoformat()
    log = write_jsonl(
        tmp_path / "timed.jsonl",
        [
            {"input_ids": [1, 2], "time": now - 7200},
            {"input_ids": [1, 2], "timestamp": now - 7200},
            {"input_ids": [3, 4, 6], "time": recent},
            {"input_ids": [3, 4, 5], "time": now - 10},
        ],
    )
    plan = mine_plan([log], renderer=None, min_share=1.0, since_s=3600)
    assert plan_lines(plan) == [line({"input_ids": [3, 4], "share": 1.0, "tokens": 2, "count": 2})]
    untimed = write_jsonl(tmp_path / "untimed.jsonl", [{"input_ids": [1]}])
    os.utime(untimed, (now - 7200, now - 7200))  # no time field: the file's mtime counts
    with pytest.raises(ConfigError) as caught:
        mine_plan([untimed], renderer=None, since_s=3600)
    assert str(caught.value) == (
        f"nothing to mine: {untimed} hold no requests from the last 1 hours; give request logs "
        "or traces with their steps, or a longer --since-hours"
    )


# --- traces --------------------------------------------------------------------------------


def span(run: str, index: int, node: str, end_s: float | None = None) -> dict[str, Any]:
    attrs: dict[str, Any] = tm.step_attributes(
        workflow="gateway",
        run_id=run,
        index=index,
        from_node="__start__" if index == 0 else "x",
        node=node,
        prefetched=False,
        outcome=StepOutcome.MISS,
    )
    record: dict[str, Any] = {"traceId": run * 32, "spanId": f"{run}{index:015x}",
                              "name": f"invoke_agent {node}", "attributes": attrs}  # fmt: skip
    if end_s is not None:
        record["endTimeUnixNano"] = int(end_s * 1e9)
    return record


TRIAGE: list[Message] = [{"role": "system", "content": "Triage the request."}]
BILLING: list[Message] = [{"role": "system", "content": "Billing agent."}]


def gateway_state(state_dir: Path) -> Path:
    """A state dir as a gateway leaves it: its heads in gateway.json."""
    registry = HeadRegistry()
    registry.identify([*TRIAGE, user("hi")], [TOOL], hint="triage")
    registry.identify([*BILLING, user("pay")], None, hint="billing")
    state_dir.mkdir()
    doc = {"format": "agentwarm.gateway", "version": 1, "heads": registry.to_dict(),
           "predictor": {}, "shapes": {}, "tool_hints": {}}  # fmt: skip
    (state_dir / "gateway.json").write_text(json.dumps(doc))
    return state_dir


def test_a_gateway_trace_is_mined_with_the_heads_of_its_state_dir(tmp_path: Path) -> None:
    now = time.time()
    trace = write_jsonl(
        tmp_path / "trace.jsonl",
        [
            span("1", 0, "triage", now - 7200),
            span("1", 1, "billing", now - 7200),
            span("2", 0, "triage", now - 60),
            span("3", 0, "triage", now - 30),
            span("3", 1, "unknown", now - 20),
        ],
    )
    state = gateway_state(tmp_path / "state")
    with pytest.warns(UserWarning, match=r"^1 traced steps of nodes without a head .*\(unknown\)"):
        plan = mine_plan([trace], renderer=R, state_dir=state)
    assert plan_lines(plan) == [
        line({"messages": TRIAGE, "tools": [TOOL], "share": 0.6, "tokens": 11, "count": 3,
              "node": "triage"}),
        line({"messages": BILLING, "share": 0.2, "tokens": 10, "count": 1, "node": "billing"}),
    ]  # fmt: skip
    with pytest.warns(UserWarning):
        recent = mine_plan([trace], renderer=R, state_dir=state, since_s=3600)
    assert plan_lines(recent) == [
        line({"messages": TRIAGE, "tools": [TOOL], "share": round(2 / 3, 6), "tokens": 11,
              "count": 2, "node": "triage"}),
    ]  # fmt: skip


def test_traces_without_heads_name_the_fix(tmp_path: Path) -> None:
    trace = write_jsonl(tmp_path / "trace.jsonl", [span("1", 0, "triage")])
    with pytest.raises(ConfigError) as caught:
        mine_plan([trace], renderer=R)
    assert str(caught.value) == (
        f"--from {trace}: agentwarm traces hold node names and step counts, not prompts: give "
        "the nodes' heads with --state DIR (the state dir of the gateway that wrote the trace) "
        "or --workflow FILE (the workflow that was run)"
    )
    with pytest.raises(ConfigError, match=r"--state .*: cannot read .*gateway.json"):
        mine_plan([trace], renderer=R, state_dir=tmp_path / "nowhere")
    state = tmp_path / "state.jsonl"
    state.write_text('{"format": "agentwarm.gateway", "version": 1}\n')
    with pytest.raises(ConfigError, match=r"is a gateway's state file; give it with --state"):
        mine_plan([state], renderer=R)


def test_bad_trace_lines_are_skipped_with_a_warning(tmp_path: Path) -> None:
    trace = write_jsonl(tmp_path / "trace.jsonl", [span("1", 0, "triage")])
    with trace.open("a") as fh:
        fh.write("not json\n")
    state = gateway_state(tmp_path / "state")
    with pytest.warns(UserWarning, match=rf"^skipped {trace}:2: not JSON"):
        plan = mine_plan([trace], renderer=R, state_dir=state)
    assert [p.node for p in plan] == ["triage"]


def test_a_workflow_run_trace_is_mined_with_its_workflow(tmp_path: Path) -> None:
    trace = tmp_path / "run.jsonl"
    done = CliRunner().invoke(
        app,
        ["run", str(EXAMPLE), "--runs", "4", "--engine", "fake", "--trace", str(trace),
         "--json", "--state-dir", str(tmp_path / "state")],
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    steps = Counter(step.node for step in read_traces([trace]).steps)
    total = sum(steps.values())
    nodes = load_workflow(EXAMPLE).nodes
    plan = mine_plan([trace], renderer=R, workflow=EXAMPLE, min_share=0.01, top_k=100)
    # One prefix per head (nodes sharing a system prompt and tools share one), its share all
    # the steps of the nodes with that head.
    heads: dict[str, list[str]] = {}
    for node in steps:
        spec = nodes[node]
        heads.setdefault(json.dumps([spec.system, spec.tools]), []).append(node)
    expected = [
        (
            [{"role": "system", "content": nodes[group[0]].system}],
            list(nodes[group[0]].tools),
            sum(steps[n] for n in group) / total,
        )
        for group in heads.values()
    ]
    got = [(list(p.messages or ()), list(p.tools or ()), p.share) for p in plan]
    assert sorted(got, key=json.dumps) == sorted(expected, key=json.dumps)
    assert {p.node for p in plan} <= set(steps)


@pytest.mark.skipif(not (TAU / "tools.json").is_file(), reason=f"{TAU} is not there (shared data)")
def test_the_tau_airline_policy_and_its_tools_are_the_top_prefix(tmp_path: Path) -> None:
    from agentwarm.bench.conversations import load_conversations

    tools = json.loads((TAU / "tools.json").read_text())
    requests = []
    for conversation in load_conversations(TAU / "conversations.jsonl"):
        messages = [{"role": "system", "content": conversation.system}, *conversation.messages]
        requests += [
            {"messages": messages[:i], "tools": tools}
            for i, m in enumerate(messages)
            if m["role"] == "assistant"
        ]
    log = write_jsonl(tmp_path / "tau.jsonl", requests)
    renderer = load_chat_renderer("tiny")
    plan = mine_plan([log], renderer=renderer, min_share=0.01, top_k=3)
    # Then one opening that several trials of one task share (22 requests of 5 trials); no
    # conversation's own history (shared only by its own requests) is kept.
    top, opening = plan.prefixes
    roles = ["system", "user", "assistant", "user", "assistant"]
    assert [m["role"] for m in opening.messages or ()] == roles
    assert opening.count == 22
    assert len(tools) == 14
    assert top.messages == (requests[0]["messages"][0],)
    assert top.tools == tuple(tools)
    assert (top.share, top.count) == (1.0, len(requests))
    assert top.tokens == len(renderer.prefix_ids(list(top.messages), tools)) > 1000
