"""``agentwarm bench --conversations``: real conversations replayed step by step.

Fixtures: ``tests/fixtures/tau_airline`` (tau-bench airline excerpts, see its SOURCE.md).
"""

from __future__ import annotations

import json
import weakref
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentwarm.bench import BenchConfig, run_bench
from agentwarm.bench.conversations import load_conversations, step_turns
from agentwarm.chat import ChatTemplate
from agentwarm.cli import app
from agentwarm.engines.base import Engine
from agentwarm.engines.fake import FakeEngine
from agentwarm.errors import ConfigError
from tests.bench.conversation_checks import EXCERPT, Capture, check_replay


def _tool_call_sequence(line: dict) -> list[str]:
    out = []
    for m in line["messages"]:
        if m["role"] == "assistant":
            calls = m.get("tool_calls") or []
            out.append(calls[0]["function"]["name"] if calls else "respond")
    return out


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def test_each_assistant_turn_is_a_step_named_by_its_tool() -> None:
    convs = load_conversations(EXCERPT)
    lines = _lines(EXCERPT)
    assert [list(c.episode.steps) for c in convs] == [_tool_call_sequence(x) for x in lines]
    assert [list(c.episode.steps) for c in convs] == [x["steps"] for x in lines]
    assert all(c.system.startswith("# Airline Agent Policy") for c in convs)
    assert all(m["role"] != "system" for c in convs for m in c.messages)
    turns = step_turns(convs[0].messages)
    assert len(turns) == len(convs[0].episode.steps) + 1
    assert [m["role"] for m in turns[0]] == ["user"]
    assert all(t[0]["role"] == "assistant" for t in turns[1:])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{}\n", '"messages" list'),
        ('{"messages": [{"role": "bot", "content": "x"}]}\n', "no role"),
        ('{"messages": [{"role": "user", "content": 3}]}\n', "content must be"),
        ('{"messages": [{"role": "user", "content": "hi"}]}\n', "no assistant turn"),
        (
            '{"messages": [{"role": "assistant", "content": null, "tool_calls": '
            '[{"function": {"name": "__end__"}}]}]}\n',
            "function name",
        ),
    ],
)
def test_malformed_conversations_are_named(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "c.jsonl"
    bad.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError, match=message):
        load_conversations(bad)


def _config(layout: str, **extra: object) -> BenchConfig:
    fields: dict[str, object] = {
        "conversations": EXCERPT,
        "layout": layout,
        "test_fraction": 1.0,
        "think": "const:0",
        "modes": ("reactive",),
    }
    return BenchConfig.model_validate({**fields, **extra})


@pytest.mark.parametrize("layout", ["subagent", "shared"])
async def test_the_replay_follows_the_conversation_and_prompts_hold_its_real_messages(
    layout: str,
) -> None:
    prompts: list[str] = []
    config = _config(layout)
    report = await run_bench(config, lambda: Capture(FakeEngine(), prompts))
    check_replay(config, report, prompts)
    assert report.workload["conversations"] is True
    assert report.workload["test_steps"] == sum(
        len(c.episode.steps) for c in load_conversations(EXCERPT)
    )


async def test_prompts_are_rendered_with_the_engine_chat_template() -> None:
    template = ChatTemplate(
        "{% for m in messages %}[{{ m.role }}]{{ m.content }}"
        "{% for c in m.tool_calls or [] %}"
        "<call {{ c.function.name }} {{ c.function.arguments | tojson }}>"
        "{% endfor %}{% endfor %}"
        "{% if add_generation_prompt %}[assistant]{% endif %}",
        name="test-brackets",
    )

    def engine() -> Engine:
        inner = FakeEngine()
        inner.chat_template = template
        return Capture(inner, prompts)

    prompts: list[str] = []
    config = _config("shared", max_steps=3)
    report = await run_bench(config, engine)
    check_replay(config, report, prompts)
    for prompt in prompts[1:]:
        assert prompt.startswith("[system]# Airline Agent Policy")
        assert prompt.endswith("[assistant]") and "[user]" in prompt
        assert "<|" not in prompt  # nothing of the fallback format
    # The real assistant turns' tool calls reach the template as calls, arguments parsed.
    assert any('<call get_reservation_details {"reservation_id": "H9ZU1C"}>' in p for p in prompts)


async def test_max_steps_replays_the_first_steps_of_each_conversation() -> None:
    report = await run_bench(_config("subagent", max_steps=2), FakeEngine)
    for r in report.runs["reactive"].results:
        assert len(r.steps) == 1 + 2  # the entry node and two assistant turns


async def test_each_mode_engine_is_released_before_the_next_is_made() -> None:
    made: list[weakref.ref[FakeEngine]] = []

    def factory() -> FakeEngine:
        assert all(ref() is None for ref in made), "a previous mode's engine is still alive"
        engine = FakeEngine()
        made.append(weakref.ref(engine))
        return engine

    config = _config("subagent", max_steps=2, modes=("cold", "reactive", "agentwarm", "oracle"))
    report = await run_bench(config, factory)
    assert len(made) == 4
    assert report.peak_rss_mib is not None and report.peak_rss_mib > 0
    assert all(f["peak_rss_mib"] > 0 for f in report.modes.values())


def _cli(*args: str) -> dict:
    result = CliRunner().invoke(app, ["bench", *args, "--json"], env={"AGENTWARM_NO_PROGRESS": "1"})
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("layout", ["subagent", "shared"])
@pytest.mark.slow
def test_cli_replays_conversations_on_the_fake_engine(layout: str) -> None:
    out = _cli(
        "--engine", "fake", "--conversations", str(EXCERPT), "--layout", layout,
        "--think", "const:0", "--test-fraction", "1.0",
    )  # fmt: skip
    assert out["config"]["conversations"] == str(EXCERPT)
    assert out["workload"]["conversations"] is True
    assert out["peak_rss_mib"] > 0
    oracle = out["modes"]["oracle"]
    assert oracle["prefetch_hits"] > 0 and oracle["wasted_tokens"] == 0
    # tools.json beside the file gives two schemas; the other tools are plain steps.
    assert f"tool schemas from {EXCERPT.parent / 'tools.json'}" in out["notes"]
    assert any("transfer_to_human_agents" in n and "plain steps" in n for n in out["notes"])
    assert not any("respond" in n for n in out["notes"])


def test_cli_refuses_conversations_with_trajectories(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["bench", "--engine", "fake", "--conversations", str(EXCERPT), "-t", str(EXCERPT)],
    )
    assert result.exit_code != 0
    assert "--conversations and --trajectories" in result.output
