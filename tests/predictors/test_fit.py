"""Pretraining from past traffic (:mod:`agentwarm.predictors.fit`): the examples of traced runs
and recorded conversations, what :func:`fit` learns and skips, and the bench's ``--pretrain``
going through it with the contexts its replay's transcript holds."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import pytest

from agentwarm.bench.conversations import load_conversations
from agentwarm.bench.modes import pretrain
from agentwarm.bench.workload import Workload
from agentwarm.engines.tokenizers import ByteTokenizer
from agentwarm.predictors import END, START, StepContext, default_predictor
from agentwarm.predictors.fit import conversation_examples, fit, trace_examples

AIRLINE = Path(__file__).resolve().parents[3] / "shared/data/tau-airline/conversations.jsonl"
needs_airline = pytest.mark.skipif(not AIRLINE.exists(), reason="needs ../shared/data/tau-airline")


class Recording:
    """A context-reading predictor (the default one inside) that records what it is given."""

    kind = "recording"

    def __init__(self) -> None:
        self.inner = default_predictor()
        self.predicted: list[tuple[tuple[str, ...], StepContext | None]] = []
        self.observed: list[tuple[tuple[str, ...], str, StepContext | None]] = []

    def predict(
        self,
        path: Sequence[str],
        state: Mapping[str, Any] | None = None,
        *,
        candidates: Sequence[str] | None = None,
    ) -> list[tuple[str, float]]:
        self.predicted.append((tuple(path), None))
        return self.inner.predict(path, state, candidates=candidates)

    def predict_in(
        self, path: Sequence[str], context: StepContext, *, candidates: Sequence[str] | None = None
    ) -> list[tuple[str, float]]:
        self.predicted.append((tuple(path), context))
        return self.inner.predict(path, None, candidates=candidates)

    def observe(self, path: Sequence[str], next_node: str) -> None:
        self.observed.append((tuple(path), next_node, None))
        self.inner.observe(path, next_node)

    def observe_in(self, path: Sequence[str], next_node: str, context: StepContext) -> None:
        self.observed.append((tuple(path), next_node, context))
        self.inner.observe(path, next_node)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        return cls()


@dataclass(frozen=True)
class Step:
    run_id: str
    index: int
    from_node: str
    node: str
    workflow: str = "wf"


@dataclass(frozen=True)
class Run:
    run_id: str
    completed: bool
    end_steps: tuple[int, ...] = ()
    workflow: str = "wf"


def test_traced_runs_give_the_runtimes_transitions() -> None:
    steps = [
        # run 1: a -> b -> END (completed, end steps not listed: the last step ended it)
        Step("1", 1, "a", "b"),
        Step("1", 0, START, "a"),
        # run 2: a fans out to b and c, both end the run
        Step("2", 0, START, "a"),
        Step("2", 1, "a", "b"),
        Step("2", 2, "a", "c"),
        # run 3 failed after a -> c: no END
        Step("3", 0, START, "a"),
        Step("3", 1, "a", "c"),
        # run 4 lost its first step: nothing known of the path
        Step("4", 3, "x", "b"),
    ]
    runs = [Run("1", True), Run("2", True, (1, 2)), Run("3", False)]
    examples, skipped = trace_examples(steps, runs)
    assert examples == [
        (("a",), "b", None),
        (("a", "b"), END, None),
        (("a",), "b", None),
        (("a",), "c", None),
        (("a", "b"), END, None),
        (("a", "c"), END, None),
        (("a",), "c", None),
    ]
    assert skipped == {"step whose previous step is not in the trace": 1}


def test_gateway_traces_learn_the_first_step_from_the_empty_path_and_cut_paths() -> None:
    steps = [Step("s", i, START if i == 0 else "n", "n") for i in range(4)]
    examples, _ = trace_examples(steps, [Run("s", True)], first=True, max_path=2)
    assert examples == [
        ((), "n", None),
        (("n",), "n", None),
        (("n", "n"), "n", None),
        (("n", "n"), "n", None),
        (("n", "n"), END, None),
    ]


def test_fit_learns_each_example_with_its_context_and_skips_unknown_nodes() -> None:
    ctx = StepContext(last_user="cancel my booking")
    examples = [
        (("entry",), "cancel", ctx),
        (("entry",), "cancel", None),
        (("entry", "cancel"), END, ctx),
        (("entry",), "rebook", None),
        (("entry", "ghost"), "cancel", None),
    ]
    predictor = Recording()
    result = fit(predictor, examples, nodes={"entry", "cancel"})
    assert predictor.observed == examples[:3]
    assert result.transitions == 3
    assert result.skipped == {"unknown node rebook": 1, "unknown node ghost": 1}
    # Scored before learning each: the second and third were predicted right on the path.
    assert (result.correct_path, result.top1_path) == (1, 1 / 3)
    assert result.to_dict()["skipped"] == {"unknown node ghost": 1, "unknown node rebook": 1}
    learned = default_predictor()
    fit(learned, examples)
    assert learned.predict(("entry",), {}, candidates=["cancel", "rebook", END])[0][0] == "cancel"


def test_fit_without_examples_or_scoring_has_no_figures() -> None:
    result = fit(default_predictor(), [])
    assert (result.transitions, result.top1, result.top1_path) == (0, None, None)
    predictor = Recording()
    result = fit(predictor, [(("a",), "b", None)] * 3, score=False)
    assert (result.transitions, result.top1, result.top1_path) == (3, None, None)
    assert predictor.predicted == []


def _airline(tmp_path: Path, n: int = 3) -> Path:
    lines = AIRLINE.read_text(encoding="utf-8").splitlines()[:n]
    path = tmp_path / "conversations.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@needs_airline
def test_conversation_examples_start_at_the_entry_and_carry_the_conversation(
    tmp_path: Path,
) -> None:
    convs = load_conversations(_airline(tmp_path, 1))
    (conv,) = convs
    examples = conversation_examples([conv.messages], "entry")
    steps = conv.episode.steps
    names = ("entry", *steps, END)
    assert [(p, n) for p, n, _ in examples] == [
        (names[: k + 1], names[k + 1]) for k in range(len(names) - 1)
    ]
    first_user = next(m["content"] for m in conv.messages if m["role"] == "user")
    assert all(c is not None and c.first_user == first_user for _, _, c in examples)
    assert examples[-1][2] == StepContext.from_messages(conv.messages)


@needs_airline
def test_bench_pretrain_fits_what_the_replay_transcript_holds_at_each_step_end(
    tmp_path: Path,
) -> None:
    convs = load_conversations(_airline(tmp_path))
    episodes = [c.episode for c in convs]
    workload = Workload.build(
        episodes,
        encode=ByteTokenizer().encode,
        conversations={c.episode.id: c.messages for c in convs},
    )
    predictor = Recording()
    fed = pretrain(predictor, workload, episodes)
    assert fed == sum(len(e.steps) + 1 for e in episodes) == len(predictor.observed)
    expected = []
    for episode in episodes:
        script = workload.script(episode)
        for k in range(len(script.names) - 1):
            # Node k's step ends once it added its turns: the transcript is turns[0..k].
            transcript = [m for turn in script.turns[: k + 1] for m in turn]
            expected.append(
                (script.names[: k + 1], script.names[k + 1], StepContext.from_messages(transcript))
            )
    assert predictor.observed == expected


def test_bench_pretrain_of_step_sequences_has_no_context() -> None:
    from agentwarm.bench.inputs import Episode

    episodes = [Episode("0", ("a", "b")), Episode("1", ("b",))]
    workload = Workload.build(episodes, encode=ByteTokenizer().encode)
    predictor = Recording()
    assert pretrain(predictor, workload, episodes) == 5
    entry = workload.entry
    assert predictor.observed == [
        ((entry,), "a", None),
        ((entry, "a"), "b", None),
        ((entry, "a", "b"), END, None),
        ((entry,), "b", None),
        ((entry, "b"), END, None),
    ]


def test_malformed_conversations_name_the_file_and_line(tmp_path: Path) -> None:
    from agentwarm.errors import ConfigError

    path = tmp_path / "bad.jsonl"
    good = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]}
    path.write_text(json.dumps(good) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2: not JSON"):
        load_conversations(path)
