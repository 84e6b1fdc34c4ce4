"""The host-RAM tier between a GPU's radix cache and the disk tier (issue 25 §1, ``device="cuda"``).

:class:`HostTier` holds KV blocks of ``block_tokens`` tokens in host memory, pinned on CUDA (so
that copies to and from the GPU are DMA transfers that need not stall the compute stream),
found by token prefix with the disk tier's own keys (the hash chain of
:func:`~agentwarm.engines.kvtier.keys.block_keys`, per namespace), least recently used first out
within ``max_bytes``. Its surface is :class:`~agentwarm.engines.kvtier.DiskTier`'s:
``stored_prefix`` / ``read`` / ``write`` / ``stats``, so the engine can ask the host tier first and
the disk tier for what follows.

On CPU the radix cache already lives in host memory: it is the host tier itself, and the engine
builds no ``HostTier`` (a copy would double the memory and save nothing). ``pin_memory`` is then
``False`` (pinning needs CUDA); the class still runs there, which is how its logic is tested.

Wired into ``LocalEngine`` through :class:`~agentwarm.engines.kvtier.stack.TierStack`
(write-through above the disk tier; reads prefer it). Its reads are timed
(:attr:`HostTier.read_bytes_per_s`, an EWMA) so that the loader prices a host load with a measured
figure, as it does a disk load; onto a GPU the copies are asynchronous, so the figure is the
time to issue them (a host load then always looks cheap, which on PCIe it is).
``tests/engines/kvtier/test_host.py`` and ``tests/engines/local/test_host_tier.py`` have the
CUDA tests (``-m gpu``) that check the pinned path on a GPU; they have not run yet (no GPU here).

Threads: the engine's compute thread only (no lock). A write on CUDA copies device to host
without blocking and records an event; a read onto the CPU waits for that event, a read onto a
device is ordered after it on the stream.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agentwarm.engines.kvtier.defaults import DEFAULT_BLOCK_TOKENS, READ_RATE_WEIGHT
from agentwarm.engines.kvtier.keys import block_keys, namespace_dir
from agentwarm.engines.local.kv import KV, SEQ_DIM, kv_len

__all__ = ("HostTier", "HostTierStats")


@dataclass(frozen=True, slots=True)
class HostTierStats:
    """A host tier's figures since it was made."""

    stored_bytes: int
    stored_blocks: int
    max_bytes: int
    bytes_written: int
    bytes_read: int
    blocks_written: int
    blocks_read: int
    evicted_blocks: int
    pinned: bool


@dataclass(slots=True)
class _Block:
    kv: KV
    copied: torch.cuda.Event | None  # the device-to-host copy, on CUDA

    @property
    def nbytes(self) -> int:
        return self.kv.numel() * self.kv.element_size()


class HostTier:
    """KV blocks in (pinned) host memory, keyed like the disk tier, LRU within ``max_bytes``.

    ``pin_memory``: ``None`` pins when CUDA is available; ``True`` without CUDA is refused.
    """

    def __init__(
        self,
        *,
        max_bytes: int,
        block_tokens: int = DEFAULT_BLOCK_TOKENS,
        pin_memory: bool | None = None,
    ) -> None:
        if max_bytes < 0 or block_tokens <= 0:
            raise ValueError(
                f"HostTier(max_bytes={max_bytes}, block_tokens={block_tokens}): max_bytes must "
                "be >= 0 and block_tokens > 0"
            )
        cuda = torch.cuda.is_available()
        if pin_memory and not cuda:
            raise ValueError(
                "HostTier(pin_memory=True) needs CUDA (pinned memory is for GPU transfers); on "
                "CPU the radix cache is the host tier: leave pin_memory unset"
            )
        self.max_bytes = max_bytes
        self.block_tokens = block_tokens
        self.pinned = cuda if pin_memory is None else pin_memory
        self.enabled = True  # as DiskTier's: a host tier never turns itself off
        self._blocks: OrderedDict[tuple[str, str], _Block] = OrderedDict()  # oldest first
        self._bytes = 0
        self._written = self._read = self._blocks_written = self._blocks_read = 0
        self._evicted = 0
        self._read_rate: float | None = None

    @property
    def read_bytes_per_s(self) -> float | None:
        """EWMA of the measured read throughput (``None`` before the first read)."""
        return self._read_rate

    def keys(self, ids: Sequence[int], blocks: int | None = None) -> list[str]:
        """The keys of the whole blocks of ``ids``: the disk tier's
        (:func:`~agentwarm.engines.kvtier.keys.block_keys`)."""
        return block_keys(ids, self.block_tokens, blocks)

    def stored_prefix(self, namespace: str, ids: Sequence[int], start: int = 0) -> int:
        """The end of the longest run of stored blocks of ``ids`` from the block holding
        ``start`` (a multiple of ``block_tokens``); a value <= ``start`` when that block is not
        stored, as :meth:`~agentwarm.engines.kvtier.DiskTier.stored_prefix` answers."""
        first = max(start, 0) // self.block_tokens
        ns = namespace_dir(namespace)
        keys = self.keys(ids)
        end = first
        while end < len(keys) and (ns, keys[end]) in self._blocks:
            end += 1
        return end * self.block_tokens

    def read(
        self,
        namespace: str,
        ids: Sequence[int],
        start: int,
        stop: int,
        device: torch.device | str | None = None,
    ) -> KV | None:
        """KV of tokens ``[start, stop)`` (multiples of ``block_tokens``), concatenated, on
        ``device`` (default: the CPU), or ``None`` when a block of the range is not stored.
        Touches the blocks (most recently used)."""
        bt = self.block_tokens
        if start % bt or stop % bt or not 0 <= start < stop <= len(ids):
            return None
        ns = namespace_dir(namespace)
        keys = self.keys(ids, stop // bt)[start // bt :]
        blocks = [self._blocks.get((ns, key)) for key in keys]
        if any(b is None for b in blocks):
            return None
        parts: list[KV] = []
        began = time.perf_counter()
        nbytes = 0
        for key, block in zip(keys, blocks, strict=True):
            assert block is not None
            self._blocks.move_to_end((ns, key))
            if device is None or torch.device(device).type == "cpu":
                if block.copied is not None:
                    block.copied.synchronize()
                parts.append(block.kv)
            else:  # from pinned memory: ordered after the copy in on the stream
                parts.append(block.kv.to(device, non_blocking=self.pinned))
            self._read += block.nbytes
            nbytes += block.nbytes
            self._blocks_read += 1
        out = torch.cat(parts, dim=SEQ_DIM)
        self._measure(nbytes, time.perf_counter() - began)
        return out

    def write(self, namespace: str, ids: Sequence[int], kv: KV, start: int) -> int:
        """Store the whole blocks of ``ids[start:]`` (``start`` a multiple of ``block_tokens``;
        ``kv`` covers ``ids[start:]``, on any device; a trailing partial block is ignored,
        blocks already stored are touched, not copied). The least recently used blocks go when
        over budget; a block larger than the whole budget is not stored. Returns the blocks
        stored."""
        bt = self.block_tokens
        if start % bt or kv_len(kv) != len(ids) - start:
            raise ValueError(
                f"HostTier.write: start={start} must be a multiple of {bt} and kv must cover "
                f"ids[{start}:] ({len(ids) - start} tokens), not {kv_len(kv)}"
            )
        ns = namespace_dir(namespace)
        stored = 0
        keys = self.keys(ids)
        for b in range(start // bt, len(keys)):
            key = (ns, keys[b])
            if key in self._blocks:
                self._blocks.move_to_end(key)
                continue
            block = self._copy(kv.narrow(SEQ_DIM, b * bt - start, bt))
            if block.nbytes > self.max_bytes:
                continue
            self._make_room(block.nbytes)
            self._blocks[key] = block
            self._bytes += block.nbytes
            self._written += block.nbytes
            self._blocks_written += 1
            stored += 1
        return stored

    def stats(self) -> HostTierStats:
        return HostTierStats(
            stored_bytes=self._bytes,
            stored_blocks=len(self._blocks),
            max_bytes=self.max_bytes,
            bytes_written=self._written,
            bytes_read=self._read,
            blocks_written=self._blocks_written,
            blocks_read=self._blocks_read,
            evicted_blocks=self._evicted,
            pinned=self.pinned,
        )

    def _measure(self, nbytes: int, seconds: float) -> None:
        if nbytes <= 0 or seconds <= 0:
            return
        rate, old = nbytes / seconds, self._read_rate
        self._read_rate = rate if old is None else old + READ_RATE_WEIGHT * (rate - old)

    def _copy(self, part: KV) -> _Block:
        """``part`` copied into its own (pinned) host buffer."""
        buf = torch.empty(part.shape, dtype=part.dtype, device="cpu", pin_memory=self.pinned)
        on_gpu = part.device.type == "cuda"
        buf.copy_(part, non_blocking=on_gpu and self.pinned)
        event: torch.cuda.Event | None = None
        if on_gpu and self.pinned:
            event = torch.cuda.Event()
            event.record()
        return _Block(buf, event)

    def _make_room(self, nbytes: int) -> None:
        while self._blocks and self._bytes + nbytes > self.max_bytes:
            _, old = self._blocks.popitem(last=False)
            self._bytes -= old.nbytes
            self._evicted += 1
