"""The embedded engine's KV tiers, wired in: ``LocalEngine(kv_dir=...)`` (issue 25).

:class:`DiskLink` opens a :class:`~agentwarm.engines.kvtier.DiskTier` for the loaded model
(:func:`~agentwarm.engines.kvtier.model_fingerprint` of its config, weights, dtype and tokenizer,
and the chunk size) and, with a host budget (the default on CUDA), a
:class:`~agentwarm.engines.kvtier.host.HostTier` above it, stacked
(:class:`~agentwarm.engines.kvtier.stack.TierStack`: write-through, reads from host first), then
connects them to

* the radix cache, whose eviction hook spills each evicted node's blocks
  (:mod:`~agentwarm.engines.local.spill`; the worker copies and enqueues, never touches disk);
* the scheduler, whose :class:`~agentwarm.engines.local.loading.Loader` loads a request's stored
  continuation past its radix match when that is measured to be faster than computing it.

At a clean stop (:meth:`DiskLink.close`, called by ``LocalEngine.aclose`` once the worker has
stopped) everything still cached is spilled and the tier closed, which waits for the writes and
saves its measured figures (read throughput, prefill throughput) for the next process.

Tiers on CPU: the radix cache lives in host memory, so it is the host tier itself and there is
no separate one by default; KV goes from the cache to disk (an explicit ``kv_host_bytes`` on CPU
builds one anyway, in plain memory, with a warning: it only exercises the CUDA path). Loaded
blocks are moved to the model's device and checked against its geometry before they enter the
tree.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentwarm.engines.local.loading import Loader
from agentwarm.engines.local.spill import Spiller
from agentwarm.errors import InvalidRequest

if TYPE_CHECKING:
    from agentwarm.engines.kvtier import DiskTier
    from agentwarm.engines.kvtier.host import HostTier
    from agentwarm.engines.local.kv import KV
    from agentwarm.engines.local.model import LoadedModel
    from agentwarm.engines.local.runner import ModelRunner
    from agentwarm.engines.local.scheduler import Scheduler

__all__ = ("DiskLink",)

log = logging.getLogger(__name__)


class DiskLink:
    """A disk tier at ``kv_dir`` (at most ``max_bytes``, default
    :data:`~agentwarm.engines.kvtier.DEFAULT_KV_DISK_BYTES`) and a host tier of ``host_bytes``
    (``None``: :data:`~agentwarm.engines.local.engine.DEFAULT_CACHE_BYTES` on CUDA, none
    elsewhere; 0: none) wired to ``scheduler`` and its cache. Build it before the first request;
    :meth:`close` it after the worker stopped."""

    def __init__(
        self,
        loaded: LoadedModel,
        runner: ModelRunner,
        scheduler: Scheduler,
        kv_dir: str | Path,
        max_bytes: int | None,
        *,
        chunk_size: int,
        host_bytes: int | None = None,
        default_host_bytes: int = 0,
    ) -> None:
        from agentwarm.engines import kvtier
        from agentwarm.engines.kvtier.host import HostTier
        from agentwarm.engines.kvtier.stack import TierStack

        if max_bytes is not None and max_bytes <= 0:
            raise InvalidRequest(f"kv_disk_bytes must be positive, got {max_bytes}")
        if host_bytes is not None and host_bytes < 0:
            raise InvalidRequest(f"kv_host_bytes must be >= 0 (0: no host tier), got {host_bytes}")
        self.runner = runner
        self.cache = scheduler.cache
        self.tier: DiskTier = kvtier.DiskTier(
            Path(kv_dir),
            fingerprint=kvtier.model_fingerprint(loaded, chunk_size=chunk_size),
            kv_bytes_per_token=runner.kv_bytes_per_token,
            max_bytes=kvtier.DEFAULT_KV_DISK_BYTES if max_bytes is None else max_bytes,
        )
        on_cuda = runner.device.type == "cuda"
        if host_bytes is None:
            host_bytes = default_host_bytes if on_cuda else 0
        elif host_bytes and not on_cuda:
            log.warning(
                "kv_host_bytes=%d on %s: the radix cache already holds its KV in host memory, so "
                "this host tier is a copy (it exercises the CUDA path; leave it unset on CPU)",
                host_bytes,
                runner.device,
            )
        self.host: HostTier | None = None
        """The host-RAM tier above the disk tier (pinned on CUDA), or ``None``."""
        if host_bytes:
            self.host = HostTier(max_bytes=host_bytes, block_tokens=self.tier.block_tokens)
        self.tiers = TierStack(self.tier, self.host)
        self.spiller = Spiller(self.tiers)
        self.loader = Loader(
            self.tiers,
            scheduler.prefixes,
            chunk_size=chunk_size,
            kv_bytes_per_token=runner.kv_bytes_per_token,
            place=self.place,
            device=runner.device,
        )
        self.cache.on_evict = self.spiller.spill
        scheduler.loader = self.loader

    @classmethod
    def open(
        cls,
        loaded: LoadedModel,
        runner: ModelRunner,
        scheduler: Scheduler,
        kv_dir: str | Path | None,
        max_bytes: int | None,
        **options: Any,
    ) -> DiskLink | None:
        """The tiers of ``LocalEngine(kv_dir=..., kv_host_bytes=...)``: ``None`` without
        ``kv_dir``; :class:`InvalidRequest` for a host budget without it."""
        if kv_dir is not None:
            return cls(loaded, runner, scheduler, kv_dir, max_bytes, **options)
        if options.get("host_bytes"):
            raise InvalidRequest(
                "kv_host_bytes needs kv_dir: the host tier sits above the disk tier (give "
                "kv_dir=DIR, or leave kv_host_bytes unset)"
            )
        return None

    def place(self, kv: KV) -> KV | None:
        """``kv`` read from the tier, on the model's device; None (and a warning) when it does
        not fit the model (the tier's fingerprint check should make that impossible)."""
        placed = kv.to(self.runner.device)
        try:
            self.runner.check_kv(placed)
        except ValueError as exc:
            log.warning("kv tier: a stored block does not fit the model, recomputing: %s", exc)
            return None
        return placed

    def stats_fields(self) -> dict[str, Any]:
        """The ``EngineStats`` fields of the tier (thread-safe)."""
        stats = self.tier.stats()
        host = self.host.stats() if self.host is not None else None
        return {
            "host_tier_stored_bytes": host.stored_bytes if host is not None else 0,
            "host_tier_max_bytes": host.max_bytes if host is not None else 0,
            "tier_bytes_written": stats.bytes_written,
            "tier_bytes_read": stats.bytes_read,
            "tier_loads_refused": self.loader.loads_refused,
            "tier_stored_bytes": stats.stored_bytes,
            "tier_enabled": stats.enabled,
        }

    def close(self) -> None:
        """Spill what is still cached and close the tier (waits for its writes). Call it once
        the worker has stopped: the tree is then the caller's."""
        self.cache.on_evict = None
        try:
            self.spiller.spill_all(self.cache)
        finally:
            self.tier.close()
