"""``RadixCache(on_evict=...)``: the hook sees each node eviction removes, just before it goes
(a leaf still attached, its payload and the path above it intact), and nothing a reset drops."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentwarm.engines.radix import RadixCache, RadixNode
from tests.engines.test_radix import TupleOps


class Seen:
    """An eviction hook recording what it saw, checked at the moment it was called."""

    def __init__(self) -> None:
        self.cache: RadixCache[tuple[int, ...]] | None = None
        self.prefixes: list[tuple[int, ...]] = []
        self.tokens = 0

    def __call__(self, node: RadixNode[tuple[int, ...]]) -> None:
        assert self.cache is not None
        assert self.cache.is_attached(node) and not node.children
        assert node.value == node.key
        # The payloads of the path spell the node's prefix ids (TupleOps stores the ids).
        path_ids = tuple(t for n in node.path() for t in (n.value or ()))
        assert path_ids == node.prefix_ids()
        self.prefixes.append(node.prefix_ids())
        self.tokens += len(node.key)


def make(max_tokens: int | None) -> tuple[RadixCache[tuple[int, ...]], Seen]:
    seen = Seen()
    cache = RadixCache(max_tokens, ops=TupleOps(), on_evict=seen)
    seen.cache = cache
    return cache, seen


def test_the_hook_sees_the_evicted_leaf_with_its_path() -> None:
    cache, seen = make(6)
    cache.insert("", [1, 2, 3, 4], (1, 2, 3, 4))
    cache.insert("", [1, 2, 5, 6], (1, 2, 5, 6))  # [1, 2] above [3, 4] and [5, 6]
    cache.insert("", [7, 8], (7, 8))  # needs 2 of 6: evicts the older leaf, [3, 4]
    assert seen.prefixes == [(1, 2, 3, 4)]
    assert (seen.tokens, cache.evicted_tokens) == (2, 2)
    cache.insert("", [9, 9, 9, 9], (9, 9, 9, 9))  # needs 4: [5, 6], then [1, 2] (a leaf now)
    assert seen.prefixes == [(1, 2, 3, 4), (1, 2, 5, 6), (1, 2)]
    assert seen.tokens == cache.evicted_tokens == 6


def test_reset_does_not_call_the_hook() -> None:
    cache, seen = make(None)
    cache.insert("", [1, 2, 3], (1, 2, 3))
    cache.insert("b", [4, 5], (4, 5))
    assert cache.reset() == 5
    assert seen.prefixes == []


def test_nodes_lists_every_node_parents_first() -> None:
    cache, _ = make(None)
    cache.insert("", [1, 2, 3, 4], (1, 2, 3, 4))
    cache.insert("", [1, 2, 5], (1, 2, 5))
    cache.insert("b", [7], (7,))
    order = [n.prefix_ids() for n in cache.nodes()]
    assert sorted(order) == [(1, 2), (1, 2, 3, 4), (1, 2, 5), (7,)]
    assert order.index((1, 2)) < min(order.index((1, 2, 3, 4)), order.index((1, 2, 5)))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=8), min_size=1, max_size=25),
    st.integers(1, 12),
)
def test_the_hook_sees_exactly_the_evicted_tokens(inserts: list[list[int]], budget: int) -> None:
    cache, seen = make(budget)
    for ids in inserts:
        cache.insert("", ids, tuple(ids))
        cache.check_integrity()
    assert seen.tokens == cache.evicted_tokens
