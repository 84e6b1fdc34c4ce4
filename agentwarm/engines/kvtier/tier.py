"""``DiskTier``: KV blocks of the embedded engine's layout in files under a directory, found by
token prefix, LRU within a byte budget, surviving restarts, never returning a wrong tensor.

Threads: the caller (the engine's compute thread) runs :meth:`~DiskTier.stored_prefix` (the
in-memory index only), :meth:`~DiskTier.read` (plain file reads, no thread hop) and
:meth:`~DiskTier.write` (checks the index and queues; never waits on disk). One daemon writer
thread (:class:`~agentwarm.engines.kvtier.writer.Writer`) writes the files. One lock guards the
index and the counters; nobody holds it across I/O.

Faults: a block file that is truncated, fails its checksum, has no header of this format, was
written by another fingerprint or names another block is dropped (index and disk) and the read
returns ``None``; each cause is logged once as a warning (:class:`Notices`). A directory that
cannot be created or written, or a write failing (ENOSPC, EACCES, EROFS, ...), turns the tier
off (``enabled = False``, one warning): nothing more is written, and the blocks already stored
may still be read, because each read checks its file's checksum and header, so a full or
read-only disk cannot make a read wrong. Names the tier does not make are left in place (not
deleted: the directory may be the user's) and logged once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from agentwarm.engines.kvtier.blockfile import BlockError, Expected, check_kv
from agentwarm.engines.kvtier.defaults import (
    DEFAULT_BLOCK_TOKENS,
    DEFAULT_QUEUE_BYTES,
    READ_RATE_WEIGHT,
    capped_budget,
    check_options,
)
from agentwarm.engines.kvtier.index import BlockIndex, BlockKey, Entry, scan
from agentwarm.engines.kvtier.keys import (
    block_keys,
    fingerprint_dir,
    iter_block_keys,
    namespace_dir,
)
from agentwarm.engines.kvtier.meta import META_NAME, MetaError, load_meta, save_meta
from agentwarm.engines.kvtier.notices import Notices
from agentwarm.engines.kvtier.reading import BadBlock, read_run
from agentwarm.engines.kvtier.writer import Writer
from agentwarm.engines.kvtier.writing import describe_os_error as why
from agentwarm.engines.kvtier.writing import store_block

if TYPE_CHECKING:
    from agentwarm.engines.local.kv import KV

__all__ = ("DiskTier", "TierStats")

log = logging.getLogger("agentwarm.engines.kvtier")


@dataclass(frozen=True, slots=True)
class TierStats:
    """A disk tier's figures since it was opened (``stored_*``: now, including what an
    earlier process stored)."""

    stored_bytes: int
    stored_blocks: int
    max_bytes: int
    bytes_written: int
    bytes_read: int
    blocks_written: int
    blocks_read: int
    writes_dropped: int
    blocks_rejected: int
    evicted_blocks: int
    enabled: bool
    read_bytes_per_s: float | None


class DiskTier:
    """KV blocks of ``block_tokens`` tokens stored under ``path``, per fingerprint and namespace.

    ``fingerprint`` names what produced the KV (:func:`~agentwarm.engines.kvtier.fingerprint.
    model_fingerprint`); ``kv_bytes_per_token`` is the engine's (every block read or written must
    have it); ``max_bytes`` is the disk budget (capped by free space at open, see
    :data:`FREE_DISK_RESERVE`); ``queue_bytes`` bounds the writes waiting for the writer
    (default :data:`DEFAULT_QUEUE_BYTES`, at most the budget). Raises ``ValueError`` for
    arguments out of range; never for the directory (a bad one turns the tier off).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        fingerprint: str,
        kv_bytes_per_token: int,
        max_bytes: int,
        block_tokens: int = DEFAULT_BLOCK_TOKENS,
        queue_bytes: int | None = None,
    ) -> None:
        check_options(
            fingerprint=fingerprint, kv_bytes_per_token=kv_bytes_per_token, max_bytes=max_bytes,
            block_tokens=block_tokens, queue_bytes=queue_bytes,
        )  # fmt: skip
        self.path = Path(path)
        self.fingerprint = fingerprint
        self.kv_bytes_per_token = kv_bytes_per_token
        self.block_tokens = block_tokens
        self.root = self.path / fingerprint_dir(fingerprint, block_tokens)
        self.meta: dict[str, float] = {}
        """Small figures the engine may set (e.g. ``"prefill_tokens_per_s"``); saved at
        :meth:`close`, loaded at open."""
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._index = BlockIndex()
        self._pending: set[BlockKey] = set()
        self._enabled = True
        self._closed = False
        self._read_rate: float | None = None
        self._counts = dict.fromkeys(
            ("bytes_written", "bytes_read", "blocks_written", "blocks_read", "writes_dropped",
             "blocks_rejected", "evicted_blocks"),
            0,
        )  # fmt: skip
        self._notices = Notices(log, str(self.root))
        queue = DEFAULT_QUEUE_BYTES if queue_bytes is None else queue_bytes
        self._writer = Writer(min(queue, max_bytes))
        self._open()

    @property
    def enabled(self) -> bool:
        """False once the tier turned itself off (a bad directory, a failed write)."""
        return self._enabled

    @property
    def read_bytes_per_s(self) -> float | None:
        """EWMA of the measured read throughput (bytes per second of block files read,
        verified and copied out); loaded from the meta file; ``None`` until known."""
        return self._read_rate

    @property
    def max_bytes(self) -> int:
        """The budget in force (the one given, capped by free space at open)."""
        return self._max_bytes

    def stored_prefix(self, namespace: str, ids: Sequence[int], start: int = 0) -> int:
        """The end of the longest run of stored blocks of ``ids`` beginning at the block holding
        ``start`` (a multiple of ``block_tokens``); a value <= ``start`` when that block is not
        stored. Reads the in-memory index only; never raises."""
        first = max(start, 0) // self.block_tokens
        try:
            ns = namespace_dir(namespace)
            end = first
            for b, key in enumerate(iter_block_keys(ids, self.block_tokens)):
                if b >= first:
                    with self._lock:
                        if (ns, key) not in self._index:
                            break
                    end = b + 1
            return end * self.block_tokens
        except Exception as exc:  # the caller is the engine's compute thread
            self._notices.note("internal", f"stored_prefix failed ({exc!r}); reporting none")
            return first * self.block_tokens

    def read(self, namespace: str, ids: Sequence[int], start: int, stop: int) -> KV | None:
        """The KV of tokens ``[start, stop)`` of ``ids`` (multiples of ``block_tokens``), read
        from disk and verified, on CPU; ``None`` if any block is missing or bad (bad files are
        dropped, one warning per cause). Touches the blocks' LRU time. Raises ``ValueError``
        only for a range that breaks these rules."""
        size = self.block_tokens
        if start % size or stop % size or not 0 <= start < stop <= len(ids):
            raise ValueError(
                f"read range [{start}, {stop}) must be whole blocks of {size} tokens "
                f"within the {len(ids)} ids"
            )
        try:
            return self._read(namespace_dir(namespace), ids, start // size, stop // size)
        except Exception as exc:
            self._notices.note("internal", f"read failed ({exc!r}); recomputing")
            return None

    def write(self, namespace: str, ids: Sequence[int], kv: KV, start: int) -> None:
        """Queue the whole blocks of ``ids[start:]`` (``kv`` covers ``ids[start:]``, ``start`` a
        multiple of ``block_tokens``) that are not stored yet; a trailing partial block is
        ignored. Never waits: when the queue is full the write is dropped and counted. The
        caller must not change ``kv`` afterwards. Raises ``ValueError`` only for a ``kv`` or
        ``start`` that breaks these rules; never for the disk."""
        check_kv(kv, len(ids), start, self.block_tokens, self.kv_bytes_per_token)
        if not self._enabled or self._closed:
            return
        size = self.block_tokens
        count = len(ids) // size
        if start // size >= count or size * self.kv_bytes_per_token > self._max_bytes:
            return
        ns = namespace_dir(namespace)
        keys = block_keys(ids, size, count)
        with self._lock:
            new = [
                b
                for b in range(start // size, count)
                if (ns, keys[b]) not in self._index and (ns, keys[b]) not in self._pending
            ]
            self._pending.update((ns, keys[b]) for b in new)
        if not new:
            return
        blocks = [(b, keys[b], tuple(int(i) for i in ids[b * size : (b + 1) * size])) for b in new]
        first, last = new[0] * size - start, (new[-1] + 1) * size - start
        span = kv.narrow(3, first, last - first)
        nbytes = (last - first) * self.kv_bytes_per_token

        def job() -> None:
            self._store(ns, blocks, span)

        if not self._writer.submit(job, nbytes):
            with self._lock:
                self._pending.difference_update((ns, keys[b]) for b in new)
                self._counts["writes_dropped"] += 1
            self._notices.note(
                "queue full",
                f"dropped a write of {len(new)} blocks: {self._writer.queued_bytes} bytes "
                f"are already waiting for the disk (limit {self._writer.max_bytes})",
            )

    def flush(self, timeout: float | None = None) -> None:
        """Wait until the queued writes are on disk (or ``timeout`` seconds passed)."""
        if not self._writer.flush(timeout):
            log.warning("kv tier %s: writes still queued after %s s", self.root, timeout)

    def close(self, timeout: float | None = None) -> None:
        """Finish the queued writes, save the meta file and stop the writer (idempotent); the
        index stays readable."""
        if self._closed:
            return
        self._closed = True
        if not self._writer.stop(timeout):  # it runs what is queued, then ends
            log.warning("kv tier %s: writes still queued after %s s", self.root, timeout)
        if self.root.is_dir():
            try:
                save_meta(self.root / META_NAME, self._read_rate, self.meta)
            except OSError as exc:
                log.debug("kv tier %s: meta not saved (%s)", self.root, exc)

    def stats(self) -> TierStats:
        with self._lock:
            return TierStats(
                stored_bytes=self._index.bytes,
                stored_blocks=len(self._index),
                max_bytes=self._max_bytes,
                enabled=self._enabled,
                read_bytes_per_s=self._read_rate,
                **self._counts,
            )

    def __enter__(self) -> DiskTier:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "on" if self._enabled else "off"
        return f"DiskTier({str(self.root)!r}, {len(self._index)} blocks, {state})"

    # -- internals -----------------------------------------------------------------------------

    def _open(self) -> None:
        try:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            found = scan(self.root, keep=frozenset({META_NAME}))
        except OSError as exc:
            self._disable("bad directory", f"cannot use {self.root}: {why(exc)}")
            return
        for path in found.stale:
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)
        if found.foreign:
            self._notices.note(
                "foreign names",
                f"ignored {len(found.foreign)} entries this tier did not make (left in place), "
                f"e.g. {found.foreign[0].name!r}",
            )
        for key, entry in found.blocks:
            self._index.add(key, entry)
        try:
            self._read_rate, meta = load_meta(self.root / META_NAME)
            self.meta.update(meta)
        except (MetaError, OSError) as exc:
            self._notices.note("meta", f"ignored the meta file ({exc})")
        probe = self.root / f".probe.{os.getpid()}.tmp"
        try:
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            self._disable("unwritable", f"cannot write in {self.root}: {why(exc)}")
        self._max_bytes = capped_budget(self.root, self._index.bytes, self._max_bytes)
        self._delete(self._index.evict(self._max_bytes))

    def _read(self, ns: str, ids: Sequence[int], first: int, stop: int) -> KV | None:
        size = self.block_tokens
        keys = block_keys(ids, size, stop)
        began = time.perf_counter()
        with self._lock:
            found = [self._index.get((ns, keys[b])) for b in range(first, stop)]
        entries = [entry for entry in found if entry is not None]
        if len(entries) < len(found):
            return None  # evicted since stored_prefix said so
        expects = [
            Expected(
                fingerprint=self.fingerprint,
                namespace=ns,
                block=b,
                key=keys[b],
                ids=tuple(int(i) for i in ids[b * size : (b + 1) * size]),
                bytes_per_token=self.kv_bytes_per_token,
            )
            for b in range(first, stop)
        ]
        try:
            out = read_run([entry.path for entry in entries], expects)
        except BadBlock as bad:
            self._reject((ns, keys[first + bad.position]), entries[bad.position], bad.error)
            return None
        nbytes = sum(entry.size for entry in entries)
        rate = nbytes / max(time.perf_counter() - began, 1e-9)
        with self._lock:
            for b in range(first, stop):
                self._index.touch((ns, keys[b]))
            self._counts["bytes_read"] += nbytes
            self._counts["blocks_read"] += stop - first
            old = self._read_rate
            self._read_rate = rate if old is None else old + READ_RATE_WEIGHT * (rate - old)
        for entry in entries:  # on a read-only disk the order is lost at restart, nothing else
            with contextlib.suppress(OSError):
                os.utime(entry.path)
        return out

    def _reject(self, key: BlockKey, entry: Entry, exc: BlockError) -> None:
        with self._lock:
            if self._index.get(key) is entry:
                self._index.remove(key)
            if exc.cause != "missing":
                self._counts["blocks_rejected"] += 1
        if exc.cause == "missing":
            log.debug("kv tier %s: %s", self.root, exc)
            return
        with contextlib.suppress(OSError):  # read-only: the index forgetting it is enough
            entry.path.unlink(missing_ok=True)
        self._notices.note(exc.cause, f"dropped block file {exc.detail}; it will be recomputed")

    def _store(self, ns: str, blocks: list[tuple[int, str, tuple[int, ...]]], span: KV) -> None:
        """The writer's job: write ``blocks`` (``span`` holds them, from the first one on)."""
        size, first = self.block_tokens, blocks[0][0]
        try:
            for b, key, ids in blocks:
                if not self._enabled:
                    return
                payload = span.narrow(3, (b - first) * size, size)
                try:
                    path, written = store_block(
                        self.root, fingerprint=self.fingerprint, namespace=ns, block=b, key=key,
                        ids=ids, payload=payload,
                    )  # fmt: skip
                except OSError as exc:
                    self._disable("write failed", f"cannot write a block: {why(exc)}")
                    return
                with self._lock:
                    self._index.add((ns, key), Entry(path, written))
                    self._counts["bytes_written"] += written
                    self._counts["blocks_written"] += 1
                    victims = self._index.evict(self._max_bytes)
                self._delete(victims)
        finally:
            with self._lock:
                self._pending.difference_update((ns, key) for _, key, _ in blocks)

    def _delete(self, victims: list[Entry]) -> None:
        if not victims:
            return
        with self._lock:
            self._counts["evicted_blocks"] += len(victims)
        for entry in victims:
            try:
                entry.path.unlink(missing_ok=True)
            except OSError as exc:
                log.debug("kv tier %s: cannot delete %s (%s)", self.root, entry.path.name, exc)

    def _disable(self, cause: str, reason: str) -> None:
        with self._lock:
            was = self._enabled
            self._enabled = False
        self._writer.discard()
        if was:
            self._notices.note(
                cause, f"{reason}; the tier is off (no more writes; stored blocks stay readable)"
            )
