"""The in-memory index of a disk tier: which blocks are stored, their files' sizes, in LRU order.

:class:`BlockIndex` is plain data (the tier's lock guards it); :func:`scan` builds its contents
at open from a fingerprint directory, oldest file (by mtime) first, without reading any file.
"""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

from agentwarm.engines.kvtier.keys import BLOCK_SUFFIX, is_block_name, is_namespace_dir

__all__ = ("BlockIndex", "BlockKey", "Entry", "Scan", "scan")

BlockKey = tuple[str, str]
"""``(namespace directory, block key)``."""

_TMP = re.compile(r"\.[\w.]+\.(\d+)\.tmp")


@dataclass(slots=True)
class Entry:
    """One stored block: its file and the file's size in bytes."""

    path: Path
    size: int


class BlockIndex:
    """Stored blocks by :data:`BlockKey`, least recently used first, and their total bytes."""

    def __init__(self) -> None:
        self._entries: OrderedDict[BlockKey, Entry] = OrderedDict()
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: BlockKey) -> bool:
        return key in self._entries

    def get(self, key: BlockKey) -> Entry | None:
        return self._entries.get(key)

    def add(self, key: BlockKey, entry: Entry) -> None:
        """Store ``entry`` as the most recently used (replacing one of the same key)."""
        self.remove(key)
        self._entries[key] = entry
        self.bytes += entry.size

    def touch(self, key: BlockKey) -> None:
        """Mark ``key`` (if stored) as the most recently used."""
        if key in self._entries:
            self._entries.move_to_end(key)

    def remove(self, key: BlockKey) -> Entry | None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self.bytes -= entry.size
        return entry

    def evict(self, max_bytes: int) -> list[Entry]:
        """Remove least recently used entries until the total is at most ``max_bytes``; the
        removed ones (their files are the caller's to delete)."""
        gone: list[Entry] = []
        while self.bytes > max_bytes and self._entries:
            _, entry = self._entries.popitem(last=False)
            self.bytes -= entry.size
            gone.append(entry)
        return gone

    def keys(self) -> list[BlockKey]:
        """Keys, least recently used first."""
        return list(self._entries)


@dataclass(slots=True)
class Scan:
    """What :func:`scan` found: block files oldest first, temporary files left by processes
    that are gone, and paths of no name this tier makes (left alone)."""

    blocks: list[tuple[BlockKey, Entry]] = field(default_factory=list)
    stale: list[Path] = field(default_factory=list)
    foreign: list[Path] = field(default_factory=list)


def scan(root: Path, *, keep: frozenset[str] = frozenset()) -> Scan:
    """The block files under ``root`` (``<namespace dir>/<key>.kv``), by mtime; names in ``keep``
    at the top level are the tier's own (its meta file). Symbolic links and other non-regular
    files are foreign. Raises OSError if ``root`` cannot be listed."""
    found = Scan()
    dated: list[tuple[int, BlockKey, Entry]] = []
    with os.scandir(root) as top:
        for ns in top:
            if ns.name in keep or _is_stale_tmp(ns.name):
                if ns.name not in keep:
                    found.stale.append(Path(ns.path))
                continue
            if not (is_namespace_dir(ns.name) and ns.is_dir(follow_symlinks=False)):
                found.foreign.append(Path(ns.path))
                continue
            with os.scandir(ns.path) as files:
                for item in files:
                    if _is_stale_tmp(item.name):
                        found.stale.append(Path(item.path))
                    elif is_block_name(item.name) and item.is_file(follow_symlinks=False):
                        info = item.stat(follow_symlinks=False)
                        key = (ns.name, item.name.removesuffix(BLOCK_SUFFIX))
                        dated.append((info.st_mtime_ns, key, Entry(Path(item.path), info.st_size)))
                    elif not _TMP.fullmatch(item.name):  # a live writer's temporary file
                        found.foreign.append(Path(item.path))
    dated.sort(key=lambda row: row[0])
    found.blocks = [(key, entry) for _, key, entry in dated]
    return found


def _is_stale_tmp(name: str) -> bool:
    """A temporary file whose writer process is gone."""
    match = _TMP.fullmatch(name)
    if match is None:
        return False
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):
        return False
    return False
