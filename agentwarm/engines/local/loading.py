"""Loading a request's prefix from the tiers below the cache instead of recomputing it (issue 25).

When a request starts, after its radix match of ``m`` tokens, :meth:`Loader.begin` asks the
tiers for the longest run of stored blocks from the block holding ``m``
(:meth:`~agentwarm.engines.kvtier.stack.TierStack.runs`: each run from the host tier where it
holds it, else from disk; never past the tokens the request may take from the cache: a generate
still computes its last prompt token). When that run ends
past ``m`` and loading it is cheaper than recomputing it, the request loads it in ``"load"``
steps of at most ``chunk_size`` tokens (whole blocks, at least one), each read with
:meth:`~agentwarm.engines.kvtier.stack.TierStack.read` on the worker and inserted into the radix
tree as if computed, the request's lock moving with it (like a prefill chunk's
:meth:`~agentwarm.engines.local.prefixes.Prefixes.keep`). Load steps are scheduled like prefill
chunks, so live work preempts a speculative load between two steps. A read that fails (None:
missing, damaged or foreign file) ends the load: the rest is computed.

Cheaper is decided from measured figures, per token gained: ``bytes read / read_bytes_per_s``
of the tier each run comes from (each tier measures its reads) against ``tokens gained /
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
from agentwarm.engines.types import SOURCE_DISK as DISK
from agentwarm.engines.types import SOURCE_HOST as HOST

if TYPE_CHECKING:
    import torch

    from agentwarm.engines.kvtier.stack import Run, TierStack
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
    """The lower tiers' side of one scheduler: decides, plans and runs ``"load"`` steps.

    ``place`` moves a KV read from the tier (on CPU) to the model's device (None: it does not
    fit, compute instead); ``kv_bytes_per_token`` is what one token's KV takes (what a load
    reads per token).
    """

    def __init__(
        self,
        tier: TierStack,
        prefixes: Prefixes,
        *,
        chunk_size: int,
        kv_bytes_per_token: int,
        place: Callable[[Any], Any | None],
        device: torch.device | str = "cpu",
    ) -> None:
        self.tier = tier
        self.device = device
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
        if self.tier.host is not None:
            req.host_tokens = 0
        cached = match.length
        block = self.tier.block_tokens
        start = cached // block * block
        limit = req.match_limit
        runs = self.tier.runs(req.namespace, req.ids[:limit], start, limit)
        stop = runs[-1].stop if runs else start
        if stop <= cached:
            return match
        host = sum(r.tokens for r in runs if r.source == HOST)
        if not self.worth_loading(stop - start, stop - cached, host_tokens=host):
            self.loads_refused += 1
            return match
        self.loads += 1
        req.load_stop = stop
        return None

    def worth_loading(self, read_tokens: int, gained_tokens: int, *, host_tokens: int = 0) -> bool:
        """Whether reading ``read_tokens`` of KV (``host_tokens`` of them from the host tier, the
        rest from disk) takes less time than computing ``gained_tokens``, by the measured
        figures; True while one is unknown (load and measure)."""
        prefill = self.prefill_tokens_per_s
        tokens = {HOST: host_tokens, DISK: read_tokens - host_tokens}
        load_s = self.tier.load_seconds(tokens, self.kv_bytes_per_token)
        if load_s is None or prefill is None:
            return True
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
        elif (read := self._read(req, event)) is None:
            self.loads_failed += 1
        else:
            placed, runs = read
            ids = req.ids[: event.stop]
            result = self.prefixes.insert(req, ids, placed, event.start)
            stored = max(0, result.length - result.cached_len)
            host = _overlap(runs, HOST, result.cached_len, result.length)
            req.disk_tokens += stored - host
            if req.host_tokens is not None:
                req.host_tokens += host
            req.cached_tokens += stored
            self.loaded_tokens += stored
            if event.stop <= result.length < req.load_stop:
                return None
        req.load_stop = 0
        return self.prefixes.rematch(req)

    def _read(self, req: Request, event: StepEvent) -> tuple[Any, list[Run]] | None:
        """The KV of ``event``'s blocks on the model's device and the runs it came from, or
        None (no longer stored, damaged)."""
        ids = req.ids[: event.stop]
        runs = self.tier.runs(req.namespace, ids, event.start, event.stop)
        if not runs or runs[-1].stop < event.stop:
            return None
        kv = self.tier.read(req.namespace, ids, runs, self.device)
        placed = None if kv is None else self.place(kv)
        return None if placed is None else (placed, runs)


def _overlap(runs: list[Run], source: str, start: int, stop: int) -> int:
    """Tokens of ``[start, stop)`` inside the runs of ``source``."""
    return sum(max(0, min(stop, r.stop) - max(start, r.start)) for r in runs if r.source == source)
