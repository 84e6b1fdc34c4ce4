"""The example memory of a :class:`~agentwarm.predictors.content.ContentPredictor`: what came
next in the most similar past situations (nearest neighbours), an expert for requests that
recur (the same task asked again, by another user or in another trial).

An example is ``(previous node, word set, next node)``, kept per current node, the newest
``per_node`` of them (older ones are forgotten first). A word set is kept as a bit mask of
:data:`BITS` bits (each word hashed to one bit): Jaccard similarity is then two popcounts over a
node's examples at once (numpy): a fraction of a millisecond over a full memory. The
distribution for a new situation: among the examples of the same current node, the ``k`` most
similar by Jaccard similarity of the word masks (times :data:`SAME_PREVIOUS` when the previous
node matches too) each vote for their next node with weight ``similarity ** power``; every name
gets :data:`FLOOR` so no name is ruled out."""

from __future__ import annotations

import base64
import functools
import itertools
import zlib
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = (
    "BITS",
    "FLOOR",
    "MAX_POWER",
    "SAME_PREVIOUS",
    "ExampleMemory",
    "crc",
    "decode_mask",
    "encode_mask",
    "mask",
)

#: Vote every name gets, so that the distribution never rules a name out.
FLOOR = 0.01
#: Similarity bonus of an example whose previous node is the same as the query's.
SAME_PREVIOUS = 1.2

#: Largest ``power`` of the similarity votes (a similarity of up to 1.2 raised to more
#: overflows a float long before this matters to the ranking).
MAX_POWER = 64.0

#: Bits of a word mask.
BITS = 4096

Example = tuple[str, int, str]


@functools.lru_cache(maxsize=1 << 16)
def crc(text: str) -> int:
    """CRC-32 of ``text`` (UTF-8): a hash that is the same in every process, unlike ``hash``;
    cached, since the same words and features recur from step to step."""
    return zlib.crc32(text.encode("utf-8"))


def mask(words: Iterable[str]) -> int:
    """The bit mask of ``words`` (:func:`crc` of each, modulo :data:`BITS`)."""
    out = 0
    for word in words:
        out |= 1 << (crc(word) % BITS)
    return out


class ExampleMemory:
    """Bounded nearest-neighbour memory of ``(previous, words, next)`` per current node."""

    def __init__(self, *, per_node: int = 1024, k: int = 10, power: float = 3.0) -> None:
        if per_node < 1 or k < 1 or not 0 < power <= MAX_POWER:
            raise ValueError(
                f"ExampleMemory needs per_node >= 1, k >= 1 and 0 < power <= {MAX_POWER}"
            )
        self.per_node = per_node
        self.k = k
        self.power = power
        self._examples: dict[str, deque[Example]] = {}
        #: Per node, its examples' masks as rows of 64-bit words and their previous nodes
        #: (kept in step with the deque, for vectorised similarity).
        self._matrix: dict[str, np.ndarray] = {}
        self._previous: dict[str, np.ndarray] = {}

    def __len__(self) -> int:
        return sum(len(d) for d in self._examples.values())

    def add(self, current: str, previous: str, words: int, nxt: str) -> None:
        """Remember that ``current`` (after ``previous``) with the word mask ``words`` went on
        to ``nxt`` (copies the node's rows: ~50 µs for 1,024 examples; :meth:`load` builds
        many at once)."""
        examples = self._examples.setdefault(current, deque(maxlen=self.per_node))
        full = len(examples) == self.per_node
        examples.append((previous, words, nxt))
        matrix = self._matrix.get(current, np.zeros((0, BITS // 64), dtype="<u8"))
        self._matrix[current] = np.vstack([matrix[1:] if full else matrix, _words64(words)])
        before = self._previous.get(current, np.zeros(0, dtype=object))
        self._previous[current] = np.append(before[1:] if full else before, [previous])

    def votes(self, current: str, previous: str, words: int) -> dict[str, float]:
        """Each next node's vote (before :data:`FLOOR`): empty when nothing is remembered."""
        examples = self._examples.get(current)
        if not examples:
            return {}
        rows, query = self._matrix[current], _words64(words)
        union = np.bitwise_count(rows | query).sum(axis=1)
        common = np.bitwise_count(rows & query).sum(axis=1)
        similarity = np.where(union > 0, common / np.maximum(union, 1), 0.0)
        same = self._previous[current] == previous
        similarity = np.where(same, similarity * SAME_PREVIOUS, similarity)
        # The k most similar; among equals the older example first, as a stable sort keeps them.
        order = np.argsort(-similarity, kind="stable")[: self.k]
        out: dict[str, float] = {}
        for i in order.tolist():
            nxt = examples[i][2]
            out[nxt] = out.get(nxt, 0.0) + float(similarity[i]) ** self.power
        return out

    def distribution(self, votes: Mapping[str, float], names: Sequence[str]) -> list[float]:
        """The probability of each of ``names`` from ``votes`` (with :data:`FLOOR`)."""
        raw = [FLOOR + votes.get(name, 0.0) for name in names]
        total = sum(raw)
        return [r / total for r in raw]

    def to_list(self) -> list[list[Any]]:
        """``[[current, previous, word mask, next], ...]``, oldest first per node; a word mask
        as :func:`encode_mask` writes it."""
        return [
            [current, before, encode_mask(seen), nxt]
            for current, examples in self._examples.items()
            for before, seen, nxt in examples
        ]

    def load(self, items: Sequence[Sequence[Any]]) -> None:
        """Add the examples of :meth:`to_list` (validated by the caller), in order; each node's
        rows are built at once (not one ``add`` at a time)."""
        for current, before, seen, nxt in items:
            examples = self._examples.setdefault(current, deque(maxlen=self.per_node))
            examples.append((before, decode_mask(seen), nxt))
        for current, examples in self._examples.items():
            self._matrix[current] = np.stack([_words64(seen) for _, seen, _ in examples])
            self._previous[current] = np.array([b for b, _, _ in examples], dtype=object)

    def merged(self, latest: ExampleMemory, base: ExampleMemory | None) -> ExampleMemory:
        """``latest``'s examples, then those this memory added since ``base`` (``None``: all of
        its own), each node keeping its newest ``per_node``: what another process learned
        meanwhile is kept, and so is what this one learned."""
        out = ExampleMemory(per_node=self.per_node, k=self.k, power=self.power)
        had = Counter(tuple(item) for item in base.to_list()) if base is not None else Counter()
        new = []
        for item in self.to_list():
            key = tuple(item)
            if had[key] > 0:
                had[key] -= 1
            else:
                new.append(item)
        out.load([*latest.to_list(), *new])
        return out


def _words64(words: int) -> np.ndarray:
    """A word mask as :data:`BITS` / 64 little-endian 64-bit words."""
    return np.frombuffer(words.to_bytes(BITS // 8, "little"), dtype="<u8")


def encode_mask(words: int) -> str:
    """A word mask as saved: the indices of its set bits, ascending, as little-endian 16-bit
    integers in base64 (a context sets ~100 of the 4,096 bits: ~270 characters)."""
    bits = [i for i in range(words.bit_length()) if words >> i & 1]
    return base64.b64encode(np.array(bits, dtype="<u2").tobytes()).decode("ascii")


def decode_mask(text: str) -> int:
    """The word mask :func:`encode_mask` wrote; ``ValueError`` if ``text`` is not one (not
    base64, an odd byte count, bits not ascending or not below :data:`BITS`)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError as exc:
        raise ValueError(f"word mask {text[:20]!r}...: not base64 ({exc})") from None
    if len(raw) % 2:
        raise ValueError(f"word mask {text[:20]!r}...: an odd number of bytes")
    bits = np.frombuffer(raw, dtype="<u2").tolist()
    if any(b >= BITS for b in bits) or any(a >= b for a, b in itertools.pairwise(bits)):
        raise ValueError(f"word mask {text[:20]!r}...: bits not ascending below {BITS}")
    out = 0
    for b in bits:
        out |= 1 << b
    return out
