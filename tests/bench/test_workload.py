"""The benchmark workload: trajectory files, split, think times, prompts, replay workflow."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from agentwarm import END
from agentwarm.bench import (
    Episode,
    PromptSizes,
    ThinkTime,
    Workload,
    load_episodes,
    prompts,
    split_episodes,
)
from agentwarm.engines.fake import FakeEngine
from agentwarm.errors import ConfigError
from agentwarm.runtime.prompt import render_system, render_tools

ENC = FakeEngine().encode


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _episodes() -> list[Episode]:
    return [
        Episode("0", ("lookup", "fetch", "act")),
        Episode("1", ("lookup", "act")),
        Episode("2", ()),
        Episode("3", ("fetch", "fetch", "lookup")),
    ]


def test_load_episodes_reads_any_file_of_the_format(tmp_path: Path) -> None:
    f = _write(
        tmp_path / "t.jsonl",
        ['{"steps": ["a", "b"], "task_id": "x"}', "", '{"steps": []}', '{"steps": ["b"]}'],
    )
    eps = load_episodes(f)
    assert [e.steps for e in eps] == [("a", "b"), (), ("b",)]
    assert [e.id for e in eps] == ["0", "1", "2"]


def test_packaged_trajectories_load() -> None:
    eps = load_episodes()
    assert len(eps) == 114
    assert sum(len(e.steps) for e in eps) == 550


@pytest.mark.parametrize(
    ("lines", "line"),
    [
        (['{"steps": ["a"]}', "", "{not json"], 3),
        (['{"steps": ["a"]}', '{"steps": "a"}'], 2),
        (['{"steps": ["a"]}', "", '{"steps": ["b", "__end__"]}'], 3),
        (['{"steps": [""]}'], 1),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path: Path, lines: list[str], line: int) -> None:
    f = _write(tmp_path / "bad.jsonl", lines)
    with pytest.raises(ConfigError, match=rf"bad\.jsonl:{line}\b"):
        load_episodes(f)


def test_missing_or_stepless_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.jsonl"):
        load_episodes(tmp_path / "nope.jsonl")
    with pytest.raises(ConfigError, match="holds no steps"):
        load_episodes(_write(tmp_path / "empty.jsonl", ['{"steps": []}']))


def test_split_is_seeded_disjoint_and_complete() -> None:
    eps = [Episode(str(i), ("a",)) for i in range(10)]
    train, test = split_episodes(eps, seed=3, test_fraction=0.3)
    assert len(test) == 3 and len(train) == 7
    assert {e.id for e in train} | {e.id for e in test} == {str(i) for i in range(10)}
    assert not {e.id for e in train} & {e.id for e in test}
    assert split_episodes(eps, seed=3, test_fraction=0.3) == (train, test)
    assert split_episodes(eps, seed=4, test_fraction=0.3) != (train, test)
    one_train, one_test = split_episodes(eps[:1], seed=0, test_fraction=0.2)
    assert one_train == [] and len(one_test) == 1
    with pytest.raises(ConfigError):
        split_episodes(eps, seed=0, test_fraction=0.0)


def test_think_time_specs() -> None:
    assert ThinkTime.parse("const:0.5").sample(random.Random(0)) == 0.5
    assert str(ThinkTime.parse(" lognormal:sigma=0.5, mean=2 ")) == "lognormal:mean=2,sigma=0.5"
    lo = ThinkTime.parse("lognormal:mean=1.0,sigma=0.5")
    a = [lo.sample(random.Random(7)) for _ in range(3)]
    assert a == [lo.sample(random.Random(7)) for _ in range(3)]
    assert lo.mean == 1.0
    u = ThinkTime.parse("uniform:low=1,high=2")
    assert all(1 <= u.sample(random.Random(i)) <= 2 for i in range(20))
    assert ThinkTime.parse("lognormal:mean=0,sigma=1").sample(random.Random(0)) == 0.0
    for bad in ("gauss:1", "const:x", "uniform:low=2,high=1", "lognormal:mean=1", "const:-1"):
        with pytest.raises(ConfigError, match="think time"):
            ThinkTime.parse(bad)


def _static_tokens(w: Workload, name: str) -> int:
    return len(ENC(render_system(w.system[name]))) + len(ENC(render_tools(w.tools[name])))


def test_subagent_layout_shares_only_the_policy() -> None:
    w = Workload.build(_episodes(), encode=ENC, layout="subagent", seed=1)
    assert w.steps == ("lookup", "fetch", "act")
    policy = prompts.policy_text(1, PromptSizes().policy, w.chars_per_token)
    for n in (w.entry, *w.steps):
        assert w.system[n].startswith(policy + "\n\n")
    assert w.tools["fetch"] == (w.tools["fetch"][0],)
    assert w.tools["fetch"][0]["function"]["name"] == "fetch"
    assert w.system["fetch"] != w.system["act"]
    assert w.tools[w.entry] == ()
    sizes = [_static_tokens(w, n) for n in w.steps]
    # policy 1000 + instructions 300..600 + schema 120..240, byte tokenizer, with slack.
    assert all(1300 <= s <= 2100 for s in sizes), sizes


def test_shared_layout_gives_every_node_the_same_head() -> None:
    w = Workload.build(_episodes(), encode=ENC, layout="shared", seed=1)
    heads = {(w.system[n], json.dumps(w.tools[n])) for n in (w.entry, *w.steps)}
    assert len(heads) == 1
    assert [t["function"]["name"] for t in w.tools["act"]] == ["lookup", "fetch", "act"]


def test_workflow_declares_every_step_and_end_as_successor() -> None:
    w = Workload.build(_episodes(), encode=ENC, seed=0)
    wf = w.workflow()
    assert wf.entry == w.entry == "opening_turn"
    for n in (w.entry, *w.steps):
        assert wf.successors(n) == ["lookup", "fetch", "act", END]
    assert wf.max_steps == 4


def test_entry_name_never_clashes_with_a_step() -> None:
    w = Workload.build([Episode("0", ("opening_turn", "x"))], encode=ENC)
    assert w.entry == "opening_turn_"
    assert w.steps == ("opening_turn", "x")


def test_scripts_are_deterministic_and_sized() -> None:
    think = ThinkTime.parse("lognormal:mean=1,sigma=0.5")
    w1 = Workload.build(_episodes(), encode=ENC, seed=5, think=think)
    w2 = Workload.build(_episodes(), encode=ENC, seed=5, think=think)
    ep = _episodes()[0]
    s1, s2 = w1.script(ep), w2.script(ep)
    assert s1 == s2
    assert s1.names == ("opening_turn", "lookup", "fetch", "act", END)
    assert [s1.next_after(k) for k in range(1, 5)] == ["lookup", "fetch", "act", END]
    assert s1.next_after(9) == END
    assert s1.results[0] == "" and len(s1.results) == 4 and len(s1.think_s) == 4
    for r in s1.results[1:]:
        assert json.loads(r)["ok"] is True
        assert 40 <= len(ENC(r)) <= 360 * 1.3 + 150
    assert 60 <= len(ENC(s1.opening)) <= 200
    assert w1.script(_episodes()[1]).results != s1.results[:3]
    assert Workload.build(_episodes(), encode=ENC, seed=6, think=think).script(ep) != s1


def test_prompt_sizes_follow_the_tokenizer() -> None:
    def four_chars_per_token(text: str) -> list[int]:
        return list(range((len(text) + 3) // 4))

    w = Workload.build(_episodes(), encode=four_chars_per_token, seed=0)
    assert w.chars_per_token == pytest.approx(4.0, rel=0.01)
    n = len(four_chars_per_token(w.system["act"]))
    assert 1300 <= n <= 1700


def test_given_system_and_tools_are_used_and_steps_without_one_are_plain() -> None:
    tools = [{"type": "function", "function": {"name": s, "parameters": {}}} for s in "abc"]
    eps = [Episode("0", ("a", "b"))]
    w = Workload.build(eps, encode=ENC, system_text="POLICY", tool_schemas=tools, layout="shared")
    assert w.system["a"] == "POLICY"
    # One ReAct agent is given every tool of the file, also those no episode calls.
    assert [t["function"]["name"] for t in w.tools["a"]] == ["a", "b", "c"]
    plain = Workload.build([Episode("0", ("a", "z"))], encode=ENC, tool_schemas=tools)
    assert plain.plain_steps == ("z",) and plain.tools["z"] == ()


def test_unknown_layout() -> None:
    with pytest.raises(ConfigError, match="layout"):
        Workload.build(_episodes(), encode=ENC, layout="flat")
