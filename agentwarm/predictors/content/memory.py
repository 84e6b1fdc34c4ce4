"""The example memory of a :class:`~agentwarm.predictors.content.ContentPredictor`: what came
next in the most similar past situations (nearest neighbours), an expert for requests that
recur (the same task asked again, by another user or in another trial).

An example is ``(previous node, word set, next node)``, kept per current node, the newest
``per_node`` of them (older ones are forgotten first). A word set is kept as a bit mask of
:data:`BITS` bits (each word hashed to one bit): Jaccard similarity is then two popcounts, so a
prediction over a full memory takes well under a millisecond. The distribution for a new
situation: among the examples of the same current node, the ``k`` most similar by Jaccard
similarity of the word masks (times :data:`SAME_PREVIOUS` when the previous node matches too)
each vote for their next node with weight ``similarity ** power``; every name gets
:data:`FLOOR` so no name is ruled out.
"""

from __future__ import annotations

import heapq
import zlib
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ("BITS", "FLOOR", "SAME_PREVIOUS", "ExampleMemory", "mask")

#: Vote every name gets, so that the distribution never rules a name out.
FLOOR = 0.01
#: Similarity bonus of an example whose previous node is the same as the query's.
SAME_PREVIOUS = 1.2

#: Bits of a word mask.
BITS = 4096

Example = tuple[str, int, str]


def mask(words: Iterable[str]) -> int:
    """The bit mask of ``words`` (CRC-32 of each, modulo :data:`BITS`)."""
    out = 0
    for word in words:
        out |= 1 << (zlib.crc32(word.encode("utf-8")) % BITS)
    return out


class ExampleMemory:
    """Bounded nearest-neighbour memory of ``(previous, words, next)`` per current node."""

    def __init__(self, *, per_node: int = 256, k: int = 10, power: float = 3.0) -> None:
        if per_node < 1 or k < 1 or power <= 0:
            raise ValueError("ExampleMemory needs per_node >= 1, k >= 1 and power > 0")
        self.per_node = per_node
        self.k = k
        self.power = power
        self._examples: dict[str, deque[Example]] = {}

    def __len__(self) -> int:
        return sum(len(d) for d in self._examples.values())

    def add(self, current: str, previous: str, words: int, nxt: str) -> None:
        """Remember that ``current`` (after ``previous``) with the word mask ``words`` went on
        to ``nxt``."""
        examples = self._examples.setdefault(current, deque(maxlen=self.per_node))
        examples.append((previous, words, nxt))

    def votes(self, current: str, previous: str, words: int) -> dict[str, float]:
        """Each next node's vote (before :data:`FLOOR`): empty when nothing is remembered."""
        examples = self._examples.get(current, ())
        scored = []
        for before, seen, nxt in examples:
            union = (words | seen).bit_count()
            similarity = (words & seen).bit_count() / union if union else 0.0
            if before == previous:
                similarity *= SAME_PREVIOUS
            scored.append((similarity, nxt))
        out: dict[str, float] = {}
        for similarity, nxt in heapq.nlargest(self.k, scored, key=lambda s: s[0]):
            out[nxt] = out.get(nxt, 0.0) + similarity**self.power
        return out

    def distribution(self, votes: Mapping[str, float], names: Sequence[str]) -> list[float]:
        """The probability of each of ``names`` from ``votes`` (with :data:`FLOOR`)."""
        raw = [FLOOR + votes.get(name, 0.0) for name in names]
        total = sum(raw)
        return [r / total for r in raw]

    def to_list(self) -> list[list[Any]]:
        """``[[current, previous, word mask as hex, next], ...]``, oldest first per node."""
        return [
            [current, before, format(seen, "x"), nxt]
            for current, examples in self._examples.items()
            for before, seen, nxt in examples
        ]

    def load(self, items: Sequence[Sequence[Any]]) -> None:
        """Add the examples of :meth:`to_list` (validated by the caller)."""
        for current, before, seen, nxt in items:
            self.add(current, before, int(seen, 16), nxt)

    def merged_with(self, other: ExampleMemory) -> ExampleMemory:
        """A memory holding ``other``'s examples, then this one's that ``other`` lacks."""
        out = ExampleMemory(per_node=self.per_node, k=self.k, power=self.power)
        theirs = other.to_list()
        out.load(theirs)
        have = {tuple(item) for item in theirs}
        for item in self.to_list():
            if tuple(item) not in have:
                current, before, seen, nxt = item
                out.add(current, before, int(seen, 16), nxt)
        return out
