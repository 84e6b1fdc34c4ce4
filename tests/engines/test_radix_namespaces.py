"""Namespace bookkeeping of the radix cache stays bounded by what the cache holds.

A namespace's root is kept only while the namespace holds a node or a lock; every operation that
empties it forgets it. Without that, each unique ``cache_salt`` of ``agentwarm serve`` left a root
behind (and its key string) outside the token budget.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from agentwarm.engines.radix import RadixCache, RadixNode

N = 50


def test_a_miss_in_a_new_namespace_is_not_kept() -> None:
    cache: RadixCache[None] = RadixCache()
    for i in range(N):
        m = cache.match_prefix(f"t{i}", [1, 2, 3])
        assert m.length == 0 and not cache.is_attached(m.node)
    assert cache.namespaces == ()
    cache.check_integrity()


def test_lock_keeps_a_namespace_and_the_last_unlock_forgets_it() -> None:
    cache: RadixCache[None] = RadixCache()
    roots = [cache.match_prefix(f"t{i}", [1, 2]).node for i in range(N)]
    for root in roots:
        cache.lock(root)
        assert cache.is_attached(root)
    assert len(cache.namespaces) == N
    cache.check_integrity()
    for root in roots:
        cache.unlock(root)
    assert cache.namespaces == ()
    cache.check_integrity()


def test_a_locked_root_receives_the_insert_of_its_request() -> None:
    """What the engines do: match (miss) → lock the root → insert → move the lock."""
    cache: RadixCache[None] = RadixCache()
    root = cache.match_prefix("t", [1, 2, 3]).node
    cache.lock(root)
    leaf = cache.insert("t", [1, 2, 3]).node
    assert leaf.parent is root and cache.is_attached(leaf)
    cache.lock(leaf)
    cache.unlock(root)
    assert cache.namespaces == ("t",)
    cache.unlock(leaf)
    assert cache.namespaces == ("t",)  # it still holds 3 tokens
    cache.check_integrity()


def test_an_insert_with_no_room_does_not_keep_the_namespace() -> None:
    cache: RadixCache[None] = RadixCache(max_tokens=4)
    kept = cache.insert("owner", [1, 2, 3, 4]).node
    cache.lock(kept)
    for i in range(N):
        r = cache.insert(f"t{i}", [5, 6])
        assert r.length == 0
    assert cache.namespaces == ("owner",)
    cache.check_integrity()
    cache.unlock(kept)


def test_flushed_and_evicted_namespaces_are_forgotten() -> None:
    cache: RadixCache[None] = RadixCache()
    for i in range(N):
        cache.insert(f"t{i}", [i, i + 1, i + 2])
    assert len(cache.namespaces) == N
    assert cache.evict(3 * (N // 2)) == 3 * (N // 2)
    assert len(cache.namespaces) == N - N // 2
    cache.check_integrity()
    cache.reset()
    assert cache.namespaces == ()
    cache.check_integrity()


def test_integrity_check_reports_a_kept_empty_namespace() -> None:
    cache: RadixCache[None] = RadixCache()
    root = cache.match_prefix("t", [1]).node
    cache.lock(root)
    root.lock_ref = root.own_locks = 0  # what a leak looks like
    cache.active_locks = 0
    try:
        cache.check_integrity()
    except RuntimeError as exc:
        assert "namespace 't' is kept with no node and no lock" in str(exc)
    else:
        raise AssertionError("check_integrity accepted an empty unlocked root")


TOKENS = st.lists(st.integers(0, 3), min_size=1, max_size=8)
MANY = st.sampled_from([f"t{i}" for i in range(12)])


class NamespaceMachine(RuleBasedStateMachine):
    """Insert / match / lock / unlock / evict / reset across many namespaces in a small budget."""

    locked = Bundle("locked")

    def __init__(self) -> None:
        super().__init__()
        self.cache: RadixCache[None] = RadixCache(max_tokens=16)
        self.locks: list[RadixNode[None]] = []

    @rule(ns=MANY, ids=TOKENS)
    def insert(self, ns: str, ids: list[int]) -> None:
        self.cache.insert(ns, ids)

    @rule(ns=MANY, ids=TOKENS)
    def match(self, ns: str, ids: list[int]) -> None:
        self.cache.match_prefix(ns, ids)

    @rule(target=locked, ns=MANY, ids=TOKENS)
    def lock(self, ns: str, ids: list[int]) -> RadixNode[None]:
        node = self.cache.match_prefix(ns, ids).node
        self.cache.lock(node)
        self.locks.append(node)
        return node

    @rule(node=consumes(locked))
    def unlock(self, node: RadixNode[None]) -> None:
        self.locks.remove(node)
        self.cache.unlock(node)

    @rule(n=st.integers(0, 20))
    def evict(self, n: int) -> None:
        self.cache.evict(n)

    @rule()
    def reset(self) -> None:
        self.cache.reset()

    @invariant()
    def bounded(self) -> None:
        self.cache.check_integrity()  # includes: no namespace kept empty and unlocked
        held = {n.namespace for n in self.locks}
        assert held <= set(self.cache.namespaces)
        assert len(self.cache.namespaces) <= self.cache.total_tokens + len(held)
        for node in self.locks:
            assert self.cache.is_attached(node)

    def teardown(self) -> None:
        for node in self.locks:
            self.cache.unlock(node)
        self.cache.reset()
        assert self.cache.namespaces == ()
        self.cache.check_integrity()


NamespaceMachine.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_namespace_state_machine = NamespaceMachine.TestCase
