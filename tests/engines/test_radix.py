"""Unit and stateful property tests of the token-level radix cache."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from agentwarm.engines.radix import RadixCache, RadixNode


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TupleOps:
    """Payload = the token ids themselves, so tests can check payloads line up with keys."""

    def length(self, value: tuple[int, ...]) -> int:
        return len(value)

    def slice(self, value: tuple[int, ...], start: int, stop: int) -> tuple[int, ...]:
        return value[start:stop]


def make(max_tokens: int | None = None) -> tuple[RadixCache[tuple[int, ...]], FakeClock]:
    clock = FakeClock()
    return RadixCache(max_tokens, clock=clock, ops=TupleOps()), clock


def joined(values: tuple[tuple[int, ...] | None, ...]) -> tuple[int, ...]:
    return tuple(t for v in values if v is not None for t in v)


# ------------------------------------------------------------------ unit tests


def test_insert_reports_cached_len_and_stores_only_new_part() -> None:
    cache, _ = make()
    r1 = cache.insert("", [1, 2, 3, 4], (1, 2, 3, 4))
    assert (r1.cached_len, r1.length, r1.node.depth) == (0, 4, 4)
    r2 = cache.insert("", [1, 2, 3, 4, 5, 6], (1, 2, 3, 4, 5, 6))
    assert (r2.cached_len, r2.length) == (4, 6)
    assert r2.node.key == (5, 6) and r2.node.value == (5, 6)
    assert cache.total_tokens == 6
    r3 = cache.insert("", [1, 2, 3, 4])
    assert (r3.cached_len, r3.length) == (4, 4) and r3.node is r1.node
    cache.check_integrity()


def test_value_offset_covers_suffix_only() -> None:
    cache, _ = make()
    cache.insert("", [1, 2, 3], (1, 2, 3))
    r = cache.insert("", [1, 2, 3, 4, 5], (4, 5), value_offset=3)
    assert (r.cached_len, r.length) == (3, 5)
    assert joined(cache.match_prefix("", [1, 2, 3, 4, 5]).values) == (1, 2, 3, 4, 5)
    # a gap (offset past the cached part) cannot be stored
    r = cache.insert("", [9, 9, 9, 9], (9, 9), value_offset=2)
    assert (r.cached_len, r.length) == (0, 0)
    with pytest.raises(ValueError, match="covers 1 tokens"):
        cache.insert("", [1, 2], (1,))
    cache.check_integrity()


def test_match_splits_inside_a_node_and_handles_survive() -> None:
    cache, _ = make()
    leaf = cache.insert("", [1, 2, 3, 4, 5], (1, 2, 3, 4, 5)).node
    cache.lock(leaf)
    cache.pin(leaf, 10.0)
    m = cache.match_prefix("", [1, 2, 3, 9])
    assert m.length == 3 and m.node.key == (1, 2, 3) and m.node.depth == 3
    assert joined(m.values) == (1, 2, 3)
    assert leaf.key == (4, 5) and leaf.value == (4, 5) and leaf.parent is m.node
    assert leaf.prefix_ids() == (1, 2, 3, 4, 5)
    assert m.node.lock_ref == 1 and cache.locked_tokens == 5
    assert cache.is_pinned(leaf)
    cache.check_integrity()
    cache.unlock(leaf)
    assert cache.locked_tokens == 0
    cache.check_integrity()


def test_diverging_insert_splits() -> None:
    cache, _ = make()
    cache.insert("", [1, 2, 3, 4], (1, 2, 3, 4))
    r = cache.insert("", [1, 2, 7, 8], (1, 2, 7, 8))
    assert (r.cached_len, r.length) == (2, 4)
    assert cache.total_tokens == 6
    assert cache.match_prefix("", [1, 2, 3, 4]).length == 4
    assert cache.match_prefix("", [1, 2, 7]).length == 3
    assert cache.match_prefix("", [5]).length == 0
    cache.check_integrity()


def test_namespaces_never_share() -> None:
    cache, _ = make()
    cache.insert("a", [1, 2, 3], (1, 2, 3))
    assert cache.match_prefix("b", [1, 2, 3]).length == 0
    r = cache.insert("b", [1, 2, 3], (1, 2, 3))
    assert r.cached_len == 0
    assert cache.total_tokens == 6
    assert set(cache.namespaces) >= {"a", "b"}
    cache.check_integrity()


def test_lru_eviction_is_leaf_first_and_respects_locks_and_pins() -> None:
    cache, clock = make(max_tokens=10)
    a = cache.insert("", [1, 1, 1], (1, 1, 1)).node
    clock.now = 1
    b = cache.insert("", [2, 2, 2], (2, 2, 2)).node
    clock.now = 2
    c = cache.insert("", [3, 3, 3], (3, 3, 3)).node
    cache.lock(a)
    cache.pin(b, ttl_s=5.0)
    clock.now = 3
    # needs 3 more tokens: a is locked, b pinned, so c (the only candidate) goes
    r = cache.insert("", [4, 4, 4, 4], (4, 4, 4, 4))
    assert r.length == 4
    assert not cache.is_attached(c) and cache.is_attached(a) and cache.is_attached(b)
    assert cache.evicted_tokens == 3 and cache.total_tokens == 10
    # everything protected or newest: only what fits is stored
    cache.lock(r.node)
    r2 = cache.insert("", [5, 5, 5], (5, 5, 5))
    assert (r2.cached_len, r2.length) == (0, 0) and cache.total_tokens == 10
    # pin expires: b becomes evictable
    clock.now = 9
    assert not cache.is_pinned(b)
    assert cache.evictable_tokens == 3
    r3 = cache.insert("", [5, 5, 5, 5], (5, 5, 5, 5))
    assert r3.length == 3 and cache.total_tokens == 10 and not cache.is_attached(b)
    cache.check_integrity()


def test_evict_frees_parents_after_children() -> None:
    cache, clock = make()
    cache.insert("", [1, 2], (1, 2))
    clock.now = 1
    cache.insert("", [1, 2, 3, 4], (3, 4), value_offset=2)
    clock.now = 2
    cache.insert("", [1, 2, 5], (5,), value_offset=2)
    # the shared parent [1,2] is the oldest but has children: leaves go first
    assert cache.evict(1) == 2
    assert cache.match_prefix("", [1, 2, 3, 4]).length == 2
    assert cache.evict(100) == 3
    assert cache.total_tokens == 0 and cache.evicted_tokens == 5
    cache.check_integrity()


def test_reset_keeps_locked_paths() -> None:
    cache, _ = make()
    keep = cache.insert("", [1, 2, 3], (1, 2, 3)).node
    cache.insert("", [1, 2, 9], (9,), value_offset=2)
    cache.insert("x", [4, 5], (4, 5))
    cache.lock(keep)
    assert cache.reset() == 3
    assert cache.total_tokens == 3 and cache.is_attached(keep)
    cache.unlock(keep)
    assert cache.reset() == 3 and cache.total_tokens == 0
    cache.check_integrity()


def test_unlock_without_lock_raises_and_integrity_reports_counts() -> None:
    cache, _ = make()
    node = cache.insert("", [1, 2], (1, 2)).node
    with pytest.raises(ValueError, match="not locked"):
        cache.unlock(node)
    cache.total_tokens += 1
    with pytest.raises(RuntimeError, match=r"total_tokens=3 but nodes hold 2"):
        cache.check_integrity()


def test_payloadless_cache() -> None:
    cache: RadixCache[None] = RadixCache(max_tokens=4)
    r = cache.insert("", [1, 2, 3])
    assert (r.cached_len, r.length) == (0, 3)
    m = cache.match_prefix("", [1, 2, 4])
    assert m.length == 2 and m.values == (None,)
    assert cache.insert("", [7, 7, 7]).length == 3
    assert cache.total_tokens <= 4
    cache.check_integrity()


def test_unpin_is_counted_and_safe_after_eviction() -> None:
    cache, _ = make()
    node = cache.insert("", [1, 2], (1, 2)).node
    cache.pin(node, 10)
    cache.pin(node, 10)
    cache.unpin(node)
    assert cache.is_pinned(node)
    cache.unpin(node)
    assert not cache.is_pinned(node)
    cache.evict(10)
    cache.unpin(node)
    assert not cache.is_attached(node)
    assert node.value is None  # a stale handle keeps no payload alive


def test_reset_drops_payloads_of_the_whole_subtree() -> None:
    cache, _ = make()
    top = cache.insert("", [1, 2], (1, 2)).node
    leaf = cache.insert("", [1, 2, 3], (3,), value_offset=2).node
    cache.reset()
    assert top.value is None and leaf.value is None
    assert not cache.is_attached(top) and not cache.is_attached(leaf)


# ------------------------------------------------------------- stateful test

TOKENS = st.lists(st.integers(0, 3), min_size=1, max_size=12)
NAMESPACES = st.sampled_from(["", "a"])


class RadixMachine(RuleBasedStateMachine):
    """Random insert / match / lock / unlock / pin / unpin / expire / evict / reset sequences."""

    locked = Bundle("locked")

    def __init__(self) -> None:
        super().__init__()
        self.budget = 24
        self.cache, self.clock = make(self.budget)
        self.inserted: dict[str, list[tuple[int, ...]]] = {"": [], "a": []}
        self.locks: list[tuple[RadixNode[tuple[int, ...]], tuple[int, ...]]] = []
        self.pins: list[RadixNode[tuple[int, ...]]] = []
        # model of the pin rules: id(node) -> [node, ids, count, until]
        self.pin_model: dict[int, list[Any]] = {}

    def _lcp_bound(self, ns: str, ids: tuple[int, ...]) -> int:
        best = 0
        for seq in self.inserted[ns]:
            n = 0
            while n < min(len(seq), len(ids)) and seq[n] == ids[n]:
                n += 1
            best = max(best, n)
        return best

    @rule(ns=NAMESPACES, ids=TOKENS, offset=st.integers(0, 12))
    def insert(self, ns: str, ids: list[int], offset: int) -> None:
        offset = min(offset, len(ids))
        before = self.cache.match_prefix(ns, ids).length
        r = self.cache.insert(ns, ids, tuple(ids[offset:]), value_offset=offset)
        assert r.cached_len == before
        assert r.node.depth == r.length >= r.cached_len
        if r.length > r.cached_len:
            assert r.cached_len >= offset
        self.inserted[ns].append(tuple(ids[: r.length]))

    @rule(ns=NAMESPACES, ids=TOKENS)
    def match(self, ns: str, ids: list[int]) -> None:
        m = self.cache.match_prefix(ns, ids)
        assert m.node.depth == m.length
        assert joined(m.values) == tuple(ids[: m.length])
        assert m.length <= self._lcp_bound(ns, tuple(ids))

    @rule(target=locked, ns=NAMESPACES, ids=TOKENS)
    def lock(self, ns: str, ids: list[int]) -> RadixNode[tuple[int, ...]]:
        m = self.cache.match_prefix(ns, ids)
        self.cache.lock(m.node)
        self.locks.append((m.node, tuple(ids[: m.length])))
        return m.node

    @rule(node=consumes(locked))
    def unlock(self, node: RadixNode[tuple[int, ...]]) -> None:
        for i, (n, _) in enumerate(self.locks):
            if n is node:
                del self.locks[i]
                break
        self.cache.unlock(node)

    @rule(ns=NAMESPACES, ids=TOKENS, ttl=st.floats(0.5, 5.0))
    def pin(self, ns: str, ids: list[int], ttl: float) -> None:
        m = self.cache.match_prefix(ns, ids)
        if m.length:
            self.cache.pin(m.node, ttl)
            self.pins.append(m.node)
            entry = self.pin_model.setdefault(id(m.node), [m.node, tuple(ids[: m.length]), 0, 0.0])
            if not (entry[2] > 0 and self.clock.now < entry[3]):
                entry[2] = 0
            entry[2] += 1
            entry[3] = max(entry[3], self.clock.now + ttl)

    @precondition(lambda self: bool(self.pins))
    @rule(data=st.data())
    def unpin(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.pins) - 1))
        node = self.pins.pop(i)
        self.cache.unpin(node)
        entry = self.pin_model[id(node)]
        entry[2] = max(0, entry[2] - 1)
        if entry[2] == 0:
            entry[3] = 0.0

    @rule(dt=st.floats(0.1, 3.0))
    def advance(self, dt: float) -> None:
        self.clock.now += dt

    @rule(n=st.integers(0, 30))
    def evict(self, n: int) -> None:
        before = self.cache.total_tokens
        evictable = self.cache.evictable_tokens
        freed = self.cache.evict(n)
        assert freed == before - self.cache.total_tokens
        assert freed <= evictable
        if freed < n:
            assert freed == evictable

    @precondition(lambda self: not self.locks)
    @rule()
    def reset(self) -> None:
        self.cache.reset()
        assert self.cache.total_tokens == 0
        self.pins.clear()
        self.pin_model.clear()

    @invariant()
    def integrity(self) -> None:
        self.cache.check_integrity()
        assert self.cache.total_tokens <= self.budget
        assert 0 <= self.cache.evictable_tokens <= self.cache.total_tokens
        for node, ids in self.locks:
            assert self.cache.is_attached(node), "a locked node was evicted"
            assert node.prefix_ids() == ids
        for node, ids, count, until in self.pin_model.values():
            if count > 0 and self.clock.now < until:
                assert self.cache.is_attached(node), "a pinned node was evicted"
                assert self.cache.is_pinned(node)
                assert node.prefix_ids() == ids

    def teardown(self) -> None:
        for node, _ in list(self.locks):
            self.cache.unlock(node)
        self.cache.check_integrity()
        assert self.cache.locked_tokens == 0


RadixMachine.TestCase.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_radix_state_machine = RadixMachine.TestCase
