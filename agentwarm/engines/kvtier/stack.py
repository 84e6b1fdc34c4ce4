"""The tiers below the radix cache, in order: host RAM (optional), then disk (issue 25 §1).

:class:`TierStack` is what the engine's spiller and loader talk to. It holds the
:class:`~agentwarm.engines.kvtier.DiskTier` and, on CUDA, a
:class:`~agentwarm.engines.kvtier.host.HostTier` above it; both key blocks the same way (the hash
chain of :func:`~agentwarm.engines.kvtier.keys.block_keys`, per namespace), so one block boundary
means the same thing in both.

* **Writes are write-through**: a spilled block goes to the host tier (a copy into pinned memory,
  no disk) *and* is queued for the disk tier (never waited on), so a block the host tier later
  drops (LRU) is still on disk, and a clean stop has nothing host-only to lose. SGLang HiCache's
  ``--hicache-write-policy write_through`` is the same rule.
* **Reads prefer the host tier**: :meth:`TierStack.runs` cuts a stored range into runs, each
  served by the fastest tier that holds it (host, else disk); a prefix whose head is in host RAM
  and tail only on disk is found in full (:meth:`TierStack.stored_prefix`).
* **Cost**: :meth:`TierStack.load_seconds` prices a set of runs with each tier's measured read
  throughput (``None`` while one of them is unknown: the loader then loads, and so measures).

Without a host tier the stack is the disk tier alone (every run is ``"disk"``). Sources are
vLLM's names for ``cached_tokens_by_source``: ``"host"``, ``"disk"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from agentwarm.engines.local.kv import KV, SEQ_DIM
from agentwarm.engines.types import SOURCE_DISK, SOURCE_HOST

if TYPE_CHECKING:
    from agentwarm.engines.kvtier.host import HostTier
    from agentwarm.engines.kvtier.tier import DiskTier

__all__ = ("DISK", "HOST", "Run", "TierStack")

HOST = SOURCE_HOST
DISK = SOURCE_DISK


@dataclass(frozen=True, slots=True)
class Run:
    """Tokens ``[start, stop)`` (whole blocks) stored in tier ``source`` (``"host"``/``"disk"``)."""

    start: int
    stop: int
    source: str

    @property
    def tokens(self) -> int:
        return self.stop - self.start


class TierStack:
    """The disk tier ``disk`` with, optionally, the host tier ``host`` above it (same block size).

    Threads: the engine's compute thread (the disk tier's own methods are thread-safe; the host
    tier's are not, and are called from that thread only)."""

    def __init__(self, disk: DiskTier, host: HostTier | None = None) -> None:
        if host is not None and host.block_tokens != disk.block_tokens:
            raise ValueError(
                f"the host tier's blocks ({host.block_tokens} tokens) must be the disk tier's "
                f"({disk.block_tokens})"
            )
        self.disk = disk
        self.host = host

    @property
    def block_tokens(self) -> int:
        return self.disk.block_tokens

    @property
    def enabled(self) -> bool:
        """Whether any tier can take a write (the disk tier turns itself off on faults)."""
        return self.disk.enabled or self.host is not None

    @property
    def meta(self) -> dict[str, Any]:
        """The disk tier's persisted figures (the engine keeps its prefill rate there)."""
        return self.disk.meta

    # ------------------------------------------------------------ finding

    def stored_prefix(self, namespace: str, ids: Sequence[int], start: int = 0) -> int:
        """The end of the longest run of blocks of ``ids`` from the block holding ``start`` that
        are each in some tier; a value <= ``start`` when that block is in none."""
        runs = self.runs(namespace, ids, start, len(ids))
        return runs[-1].stop if runs else max(start, 0) // self.block_tokens * self.block_tokens

    def runs(self, namespace: str, ids: Sequence[int], start: int, stop: int) -> list[Run]:
        """The stored blocks of ``ids`` from the block holding ``start`` up to ``stop`` (at the
        first block no tier holds), as consecutive runs, each from the host tier where it has
        them, else from the disk tier."""
        block = self.block_tokens
        end = max(start, 0) // block * block
        limit = min(stop, len(ids)) // block * block
        out: list[Run] = []
        while end < limit:
            for source, tier in ((HOST, self.host), (DISK, self.disk)):
                if tier is None:
                    continue
                reach = min(tier.stored_prefix(namespace, ids[:limit], end), limit)
                if reach > end:
                    if out and out[-1].source == source:
                        out[-1] = Run(out[-1].start, reach, source)
                    else:
                        out.append(Run(end, reach, source))
                    end = reach
                    break
            else:
                break
        return out

    # ------------------------------------------------------------ reading

    def read(
        self, namespace: str, ids: Sequence[int], runs: Sequence[Run], device: torch.device | str
    ) -> KV | None:
        """The KV of ``runs`` (consecutive, as :meth:`runs` gives them) on ``device``,
        concatenated; ``None`` when a tier cannot serve its run (dropped since, damaged)."""
        parts: list[KV] = []
        for run in runs:
            if run.source == HOST and self.host is not None:
                kv = self.host.read(namespace, ids[: run.stop], run.start, run.stop, device)
            else:
                kv = self.disk.read(namespace, ids[: run.stop], run.start, run.stop)
            if kv is None:
                return None
            parts.append(kv.to(device))
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=SEQ_DIM)

    def load_seconds(
        self, tokens_by_source: Mapping[str, int], kv_bytes_per_token: int
    ) -> float | None:
        """Seconds reading ``tokens_by_source`` (``{"host": n, "disk": m}``) takes at each
        tier's measured throughput; ``None`` while a tier that serves some of them has not
        measured it yet."""
        total = 0.0
        for source, tokens in tokens_by_source.items():
            if tokens <= 0:
                continue
            tier = self.host if source == HOST else self.disk
            rate = None if tier is None else tier.read_bytes_per_s
            if rate is None or rate <= 0:
                return None
            total += tokens * kv_bytes_per_token / rate
        return total

    # ------------------------------------------------------------ writing

    def stored_everywhere(self, namespace: str, ids: Sequence[int], start: int) -> int:
        """How far from ``start``'s block every tier that takes writes already holds ``ids``
        (what a spill can skip)."""
        ends = []
        if self.disk.enabled:
            ends.append(self.disk.stored_prefix(namespace, ids, start))
        if self.host is not None:
            ends.append(self.host.stored_prefix(namespace, ids, start))
        return min(ends) if ends else len(ids)

    def write(
        self, namespace: str, ids: Sequence[int], kv: KV, start: int, *, durable: bool = False
    ) -> None:
        """Store the whole blocks of ``ids[start:]`` (``kv`` covers them, on any device): into
        the host tier (unless ``durable``: a clean stop, where only the disk outlives the
        process) and queued for the disk tier (a copy on CPU; it skips the blocks it has)."""
        if self.host is not None and not durable:
            self.host.write(namespace, ids, kv, start)
        if self.disk.enabled:  # it skips the blocks it holds; it never waits
            self.disk.write(namespace, ids, kv.cpu(), start)
