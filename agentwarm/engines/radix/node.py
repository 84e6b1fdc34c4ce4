"""A node of the radix tree, the results of a lookup and an insert, the payload operations, and
the walks over a subtree (rules: :mod:`agentwarm.engines.radix`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Generic, NamedTuple, Protocol, TypeVar

__all__ = (
    "InsertResult",
    "MatchResult",
    "PayloadOps",
    "RadixNode",
    "check_subtree",
    "common_len",
    "subtree",
)

V = TypeVar("V")


class PayloadOps(Protocol[V]):
    """How the tree measures and cuts payloads. Only needed when nodes carry payloads."""

    def length(self, value: V) -> int:
        """Number of tokens ``value`` covers."""
        ...

    def slice(self, value: V, start: int, stop: int) -> V:
        """Tokens ``start:stop`` of ``value``, as a value the tree may keep.

        Called when a node is split and when only part of an inserted value is stored; an
        implementation backed by tensors should return a compact copy, not a view that keeps
        the whole original alive.
        """
        ...


class RadixNode(Generic[V]):
    """One edge of the tree. Read-only to callers; pass it back to lock/unlock/pin/unpin."""

    __slots__ = (
        "access_tick",
        "children",
        "depth",
        "key",
        "last_access",
        "lock_ref",
        "namespace",
        "own_locks",
        "parent",
        "pin_count",
        "pin_until",
        "value",
    )

    def __init__(
        self,
        namespace: str,
        key: tuple[int, ...],
        value: V | None,
        parent: RadixNode[V] | None,
    ) -> None:
        self.namespace = namespace
        self.key = key
        self.value = value
        self.parent = parent
        self.children: dict[int, RadixNode[V]] = {}
        self.depth: int = (parent.depth if parent is not None else 0) + len(key)
        self.lock_ref = 0
        self.own_locks = 0
        self.pin_count = 0
        self.pin_until = 0.0
        self.last_access = 0.0
        self.access_tick = 0

    @property
    def is_root(self) -> bool:
        return self.parent is None

    def path(self) -> list[RadixNode[V]]:
        """Nodes from the first child of the root down to this node."""
        nodes: list[RadixNode[V]] = []
        node: RadixNode[V] | None = self
        while node is not None and node.parent is not None:
            nodes.append(node)
            node = node.parent
        nodes.reverse()
        return nodes

    def prefix_ids(self) -> tuple[int, ...]:
        """All token ids from the root to the end of this node."""
        return tuple(tok for node in self.path() for tok in node.key)

    def __repr__(self) -> str:
        return (
            f"RadixNode(ns={self.namespace!r}, depth={self.depth}, len={len(self.key)}, "
            f"lock_ref={self.lock_ref}, pins={self.pin_count})"
        )


class MatchResult(NamedTuple, Generic[V]):
    """``length`` ids matched; ``node`` ends exactly there; ``values`` are the payloads of the
    nodes on the path root→node, in order, covering exactly ``length`` tokens."""

    length: int
    node: RadixNode[V]
    values: tuple[V | None, ...]


class InsertResult(NamedTuple, Generic[V]):
    """``cached_len`` ids were already present; the path root→``node`` now covers the first
    ``length`` ids (``length < len(ids)`` only when the budget left no room)."""

    cached_len: int
    node: RadixNode[V]
    length: int


def common_len(key: tuple[int, ...], ids: Sequence[int], pos: int) -> int:
    """How many leading tokens of ``key`` equal ``ids[pos:]``'s."""
    n = min(len(key), len(ids) - pos)
    if key[:n] == tuple(ids[pos : pos + n]):
        return n
    i = 0
    while i < n and key[i] == ids[pos + i]:
        i += 1
    return i


def subtree(node: RadixNode[V]) -> Iterator[RadixNode[V]]:
    """``node`` and every node below it (depth first)."""
    stack = [node]
    while stack:
        cur = stack.pop()
        yield cur
        stack.extend(cur.children.values())


def check_subtree(
    node: RadixNode[V], ops: PayloadOps[V] | None, problems: list[str]
) -> tuple[int, int, int]:
    """Recount the subtree of ``node``: (tokens, tokens on locked nodes, locks held); append
    what is inconsistent to ``problems``."""
    total = locked = locks = 0
    stack = [node]
    while stack:
        cur = stack.pop()
        locks += cur.own_locks
        if not cur.is_root:
            total += len(cur.key)
            if cur.lock_ref > 0:
                locked += len(cur.key)
            if not cur.key:
                problems.append(f"empty key in {cur!r}")
            if ops is not None and cur.value is not None:
                have = ops.length(cur.value)
                if have != len(cur.key):
                    problems.append(f"payload covers {have} tokens, key has {len(cur.key)}")
        child_locks = 0
        for first, child in cur.children.items():
            if child.parent is not cur:
                problems.append(f"child {child!r} does not link back to its parent")
            if not child.key or child.key[0] != first:
                problems.append(f"child {child!r} filed under token {first}")
            if child.namespace != cur.namespace:
                problems.append(f"child {child!r} in namespace {cur.namespace!r}")
            if child.depth != cur.depth + len(child.key):
                problems.append(f"child {child!r} depth != {cur.depth} + {len(child.key)}")
            child_locks += child.lock_ref
            stack.append(child)
        if cur.lock_ref != cur.own_locks + child_locks or cur.own_locks < 0:
            problems.append(
                f"lock_ref={cur.lock_ref} != own {cur.own_locks} + children {child_locks}"
                f" at {cur!r}"
            )
    return total, locked, locks
