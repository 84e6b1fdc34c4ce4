"""Loading a request's prefix from the disk tier instead of recomputing it (issue 25).

When a request starts, after its radix match of ``m`` tokens, :meth:`Loader.begin` asks the
tier for the longest run of stored blocks from the block holding ``m``
(:meth:`~agentwarm.engines.kvtier.DiskTier.stored_prefix`, never past the tokens the request
may take from the cache: a generate still computes its last prompt token). When that run ends
past ``m`` and loading it is cheaper than recomputing it, the request loads it in ``"load"``
steps of at most ``chunk_size`` tokens (whole blocks, at least one), each read with
:meth:`~agentwarm.engines.kvtier.DiskTier.read` on the worker and inserted into the radix tree
as if computed, the request's lock moving with it (like a prefill chunk's
:meth:`~agentwarm.engines.local.prefixes.Prefixes.keep`). Load steps are scheduled like prefill
chunks, so live work preempts a speculative load between two steps. A read that fails (None:
missing, damaged or foreign file) ends the load: the rest is computed.

Cheaper is decided from two measured figures, per token gained: ``bytes read /
tier.read_bytes_per_s`` (the tier measures its reads) against ``tokens gained /
prefill_tokens_per_s`` (measured here from the scheduler's prefill chunks, an EWMA weighted by
chunk length, kept in ``tier.meta["prefill_tokens_per_s"]`` so that a restarted process starts
with it). While either figure is unknown the engine loads (and so measures the read
throughput). A refused load is counted in :attr:`Loader.loads_refused` and the tokens are
computed. Worker only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from agentwarm.engines.local.request import Request, StepEvent

if TYPE_CHECKING:
    from agentwarm.engines.kvtier import DiskTier
    from agentwarm.engines.local.prefixes import Prefixes
    from agentwarm.engines.radix import MatchResult

__all__ = ("META_PREFILL_TOKENS_PER_S", "PREFILL_EWMA", "Loader", "NullLoader")

META_PREFILL_TOKENS_PER_S = "prefill_tokens_per_s"
"""The tier meta key holding the measured prefill throughput (tokens/s)."""

PREFILL_EWMA = 0.25
"""Weight of a full chunk's throughput in the prefill EWMA (a shorter chunk weighs in
proportion to its length: its fixed costs make it look slower per token)."""


class NullLoader:
    """The loader of a scheduler without a disk tier: nothing is ever loaded."""

    def begin(self, req: Request, match: MatchResult[Any]) -> MatchResult[Any] | None:
        """Whether ``req`` loads from disk after its radix ``match``: here never (``match``)."""
        return match

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        """A prefill chunk of ``tokens`` took ``seconds`` (nothing to measure for)."""

    def event(self, req: Request) -> StepEvent:
        raise AssertionError(f"request {req.rid} loads without a disk tier")

    def run(self, req: Request, event: StepEvent) -> MatchResult[Any] | None:
        raise AssertionError(f"request {req.rid} loads without a disk tier")


class Loader(NullLoader):
    """The disk-tier side of one scheduler: decides, plans and runs ``"load"`` steps.

    ``place`` moves a KV read from the tier (on CPU) to the model's device (None: it does not
    fit, compute instead); ``kv_bytes_per_token`` is what one token's KV takes (what a load
    reads per token).
    """

    def __init__(
        self,
        tier: DiskTier,
        prefixes: Prefixes,
        *,
        chunk_size: int,
        kv_bytes_per_token: int,
        place: Callable[[Any], Any | None],
    ) -> None:
        self.tier = tier
        self.prefixes = prefixes
        self.chunk_size = chunk_size
        self.kv_bytes_per_token = kv_bytes_per_token
        self.place = place
        block = tier.block_tokens
        self.step_tokens = max(block, chunk_size // block * block)
        seeded = tier.meta.get(META_PREFILL_TOKENS_PER_S)
        self.prefill_tokens_per_s: float | None = (
            float(seeded) if seeded is not None and seeded > 0 else None
        )
        self.loads = 0
        self.loads_refused = 0
        self.loads_failed = 0
        self.loaded_tokens = 0

    # ------------------------------------------------------------ deciding

    def begin(self, req: Request, match: MatchResult[Any]) -> MatchResult[Any] | None:
        """After ``req``'s radix ``match``: start loading (``req.load_stop`` set, None returned)
        when the tier holds more of its prompt and loading it is worth it; else ``match``, to
        build the request's state from."""
        req.disk_tokens = 0
        cached = match.length
        block = self.tier.block_tokens
        start = cached // block * block
        stop = self.tier.stored_prefix(req.namespace, req.ids[: req.match_limit], start)
        if stop <= cached:
            return match
        if not self.worth_loading(stop - start, stop - cached):
            self.loads_refused += 1
            return match
        self.loads += 1
        req.load_stop = stop
        return None

    def worth_loading(self, read_tokens: int, gained_tokens: int) -> bool:
        """Whether reading ``read_tokens`` of KV takes less time than computing
        ``gained_tokens``, by the measured figures; True while one is unknown (load and
        measure)."""
        read_bps = self.tier.read_bytes_per_s
        prefill = self.prefill_tokens_per_s
        if read_bps is None or read_bps <= 0 or prefill is None:
            return True
        load_s = read_tokens * self.kv_bytes_per_token / read_bps
        return load_s < gained_tokens / prefill

    def observe_prefill(self, tokens: int, seconds: float) -> None:
        """Count a prefill chunk of ``tokens`` that took ``seconds`` in the throughput EWMA."""
        if tokens <= 0 or seconds <= 0:
            return
        rate = tokens / seconds
        old = self.prefill_tokens_per_s
        weight = PREFILL_EWMA * min(1.0, tokens / self.chunk_size)
        self.prefill_tokens_per_s = rate if old is None else old + weight * (rate - old)
        self.tier.meta[META_PREFILL_TOKENS_PER_S] = self.prefill_tokens_per_s

    # ------------------------------------------------------------ loading

    def event(self, req: Request) -> StepEvent:
        """The next load step of ``req``: from the block holding the end of its locked path,
        at most :attr:`step_tokens`, never past ``req.load_stop``."""
        assert req.node is not None and req.load_stop
        block = self.tier.block_tokens
        start = req.node.depth // block * block
        stop = min(start + self.step_tokens, req.load_stop)
        return StepEvent(req.rid, "load", start, stop, req.priority)

    def run(self, req: Request, event: StepEvent) -> MatchResult[Any] | None:
        """Read the KV of ``event``'s blocks and insert it for ``req``. When the load is over
        (all loaded, a failed read, or no room left in the cache) the request's prompt is
        matched again and the match returned (to build its state from); else None."""
        assert req.disk_tokens is not None
        have = self.prefixes.rematch(req, req.load_stop).length
        if have >= event.stop:
            # Another request put these blocks in the tree since (a live request over this
            # speculative load loads them itself, without waiting): nothing to read.
            if have < req.load_stop:
                return None
        elif (placed := self._read(req, event)) is None:
            self.loads_failed += 1
        else:
            ids = req.ids[: event.stop]
            result = self.prefixes.insert(req, ids, placed, event.start)
            stored = max(0, result.length - result.cached_len)
            req.disk_tokens += stored
            req.cached_tokens += stored
            self.loaded_tokens += stored
            if event.stop <= result.length < req.load_stop:
                return None
        req.load_stop = 0
        return self.prefixes.rematch(req)

    def _read(self, req: Request, event: StepEvent) -> Any | None:
        """The KV of ``event``'s blocks on the model's device, or None (missing, bad)."""
        kv = self.tier.read(req.namespace, req.ids[: event.stop], event.start, event.stop)
        return None if kv is None else self.place(kv)
