"""Shared checks of ``bench --conversations`` tests: capture each live prompt and check that
the replay followed the conversations and that every prompt holds their real messages."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentwarm.bench import BenchConfig, BenchReport, MeteredEngine, split_episodes
from agentwarm.bench.conversations import load_conversations, step_turns
from agentwarm.engines.base import Completion, Engine, GenerateParams

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tau_airline"
EXCERPT = FIXTURES / "excerpt" / "conversations.jsonl"
FULL = FIXTURES / "full_policy" / "conversations.jsonl"


class Capture(MeteredEngine):
    """Keeps the decoded prompt of every live request (the first is the bench's warm-up)."""

    def __init__(self, inner: Engine, prompts: list[str]) -> None:
        super().__init__(inner)
        self.prompts = prompts
        self.chat_template = inner.chat_template

    async def generate_with(self, ids: Sequence[int], params: GenerateParams) -> Completion:
        self.prompts.append(self.decode(ids))
        return await super().generate_with(ids, params)


def check_replay(config: BenchConfig, report: BenchReport, prompts: Sequence[str]) -> None:
    """The reactive run's steps are the conversations' tool calls, in the test order, and the
    prompt of step ``k`` holds the policy and every real message before assistant turn ``k``,
    in order (contents, and the names of the tools called)."""
    assert config.conversations is not None
    convs = {c.episode.id: c for c in load_conversations(config.conversations)}
    _, test = split_episodes(
        [c.episode for c in convs.values()], seed=config.seed, test_fraction=config.test_fraction
    )
    test = test[: config.episodes] if config.episodes else test
    n = config.max_steps
    results = report.runs["reactive"].results
    assert [[s.node for s in r.steps][1:] for r in results] == [list(e.steps[:n]) for e in test]
    live = iter(prompts[1:])
    for episode in test:
        conv = convs[episode.id]
        turns = step_turns(conv.messages)
        for k in range(1, len(turns))[:n]:
            prompt = next(live)
            assert conv.system in prompt
            at = 0
            for m in (m for t in turns[:k] for m in t):  # every real message before turn k
                calls = m.get("tool_calls") or []
                for piece in [m.get("content") or "", *(c["function"]["name"] for c in calls)]:
                    at = prompt.index(piece, at)  # present, in the conversation's order
    assert next(live, None) is None
