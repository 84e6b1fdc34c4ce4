"""Which successors the policy prefetches (top-N, min_p, top_p), and candidates whose known
prefixes are identical sharing one request."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentwarm import END, Context, FakeEngine, PrefetchPolicy, WorkflowGraph, node
from agentwarm.engines.base import Priority
from agentwarm.runtime import PrefetchOutcome
from agentwarm.runtime.policy import choose_candidates
from tests.waiting import step_prefetches_done

PRED = [("b", 0.5), ("c", 0.25), (END, 0.15), ("d", 0.06), ("e", 0.04)]


def _names(chosen: list[tuple[int, str, float]]) -> list[str]:
    return [name for _, name, _ in chosen]


def test_top_n_and_min_p_cut_in_predicted_order_and_end_is_never_chosen():
    assert _names(choose_candidates(PRED, top_n=8, min_p=0.05)) == ["b", "c", "d"]
    assert _names(choose_candidates(PRED, top_n=2, min_p=0.0)) == ["b", "c"]
    # Ranks are the positions in the prediction (END's rank is skipped, not reused).
    assert [r for r, _, _ in choose_candidates(PRED, top_n=8, min_p=0.0)] == [0, 1, 3, 4]


def test_top_p_stops_once_the_chosen_cover_the_mass_and_end_counts_toward_it():
    assert _names(choose_candidates(PRED, top_n=8, min_p=0.0, top_p=0.5)) == ["b"]
    assert _names(choose_candidates(PRED, top_n=8, min_p=0.0, top_p=0.75)) == ["b", "c"]
    # b + c + END cover 0.90: a top_p of 0.9 needs no more, anything above it takes d.
    assert _names(choose_candidates(PRED, top_n=8, min_p=0.0, top_p=0.9)) == ["b", "c"]
    assert _names(choose_candidates(PRED, top_n=8, min_p=0.0, top_p=0.91)) == ["b", "c", "d"]


@given(
    st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=1, max_size=8),
    st.integers(1, 8),
    st.floats(0.0, 1.0),
    st.floats(0.01, 1.0),
)
def test_choice_is_an_ordered_bounded_subset(weights, top_n, min_p, top_p):
    total = sum(weights) or 1.0
    preds = sorted(((f"n{i}", w / total) for i, w in enumerate(weights)), key=lambda x: -x[1])
    chosen = choose_candidates(preds, top_n=top_n, min_p=min_p, top_p=top_p)
    assert len(chosen) <= top_n
    assert [r for r, _, _ in chosen] == sorted(r for r, _, _ in chosen)
    assert all(preds[r] == (name, p) and p >= min_p for r, name, p in chosen)
    # Every candidate was needed: the ones before it covered less than top_p.
    for r, _, _ in chosen:
        assert sum(p for _, p in preds[:r]) < top_p
    # Up to the last candidate, everything at or above min_p was taken.
    if chosen:
        upto = preds[: chosen[-1][0] + 1]
        assert _names(chosen) == [name for name, p in upto if p >= min_p]


def _same_prompt_workflow(winner: str):
    """One agent whose prompt does not depend on the tool it runs next (the ``shared``
    layout): b and c have identical known prefixes."""
    system = "One agent, all tools. " * 200

    @node(name="a", entry=True, system=system, next=["b", "c"])
    async def a(ctx: Context) -> str:
        await ctx.llm(ctx.input, max_tokens=2)
        await step_prefetches_done(ctx)  # a tool call that outlasts the prefetch
        return winner

    def leaf(name: str):
        @node(name=name, system=system, next=[END])
        async def fn(ctx: Context) -> str:
            await ctx.llm("go", max_tokens=2)
            return END

        return fn

    return WorkflowGraph("same").add(a, leaf("b"), leaf("c")).compile()


async def test_identical_prefixes_share_one_request_and_the_winner_is_credited():
    for winner in ("b", "c"):
        engine = FakeEngine(seconds_per_token=1e-6)
        wf = _same_prompt_workflow(winner)
        policy = PrefetchPolicy(top_n=2, min_p=0.0, warm_confirmed=False)
        result = await wf.run("x", engine=engine, policy=policy)
        spec = [p for p in result.steps[0].prefetches if p.speculative]
        assert sorted(p.target for p in spec) == ["b", "c"]
        sent = [q for q in engine.log if q.priority == Priority.SPECULATIVE]
        assert len(sent) == 1, "the second candidate must reuse the first one's request"
        hit = next(p for p in spec if p.target == winner)
        loser = next(p for p in spec if p.target != winner)
        assert hit.outcome == PrefetchOutcome.HIT and loser.outcome == PrefetchOutcome.WASTED
        assert hit.computed_tokens == sent[0].computed_tokens > 0
        assert loser.computed_tokens == 0
        assert result.summary()["wasted_tokens"] == 0
        # The live request found the whole shared prefix cached.
        live = [q for q in engine.log if q.kind == "generate"][-1]
        assert live.cached_tokens >= hit.tokens - 1
