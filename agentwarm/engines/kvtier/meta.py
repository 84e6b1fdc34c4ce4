"""The disk tier's meta file: small figures that outlive the process (the measured read
throughput, what the engine sets in ``DiskTier.meta``), as JSON, written atomically.

``{"format": 1, "read_bytes_per_s": <float or null>, "meta": {<name>: <float>}}``. Loading is
strict (any other shape is an error the tier reports once and ignores); only finite numbers
are saved or loaded.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from agentwarm._jsonfile import JSONTextError
from agentwarm._jsonfile import loads as json_loads

__all__ = ("META_NAME", "MetaError", "load_meta", "save_meta")

META_NAME = "meta.json"
_FORMAT = 1
_MAX_BYTES = 1 << 20


class MetaError(ValueError):
    """The meta file is not one this tier wrote; ``str()`` says why."""


def load_meta(path: Path) -> tuple[float | None, dict[str, float]]:
    """``(read_bytes_per_s, meta)`` from ``path``; ``(None, {})`` if there is none. Raises
    :class:`MetaError` for a malformed file, OSError if it cannot be read."""
    try:
        with path.open("rb") as src:
            data = src.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        return None, {}
    if len(data) > _MAX_BYTES:
        raise MetaError(f"{path.name} is over {_MAX_BYTES} bytes")
    try:
        doc: Any = json_loads(data)
    except JSONTextError as exc:
        raise MetaError(f"{path.name} is {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
        raise MetaError(f"{path.name} is not a format-{_FORMAT} meta file")
    rate = doc.get("read_bytes_per_s")
    figures = doc.get("meta", {})
    if rate is not None and not _positive(rate):
        raise MetaError(f"{path.name}: read_bytes_per_s {rate!r} is not a positive number")
    if not isinstance(figures, dict) or not all(
        isinstance(k, str) and _finite(v) for k, v in figures.items()
    ):
        raise MetaError(f"{path.name}: meta must map names to finite numbers")
    return (None if rate is None else float(rate)), {k: float(v) for k, v in figures.items()}


def save_meta(path: Path, read_bytes_per_s: float | None, meta: dict[str, float]) -> None:
    """Write the meta file atomically (a temporary file, then :func:`os.replace`); entries
    that are not finite numbers with string names are left out. Raises OSError."""
    figures = {k: float(v) for k, v in meta.items() if isinstance(k, str) and _finite(v)}
    rate = read_bytes_per_s if _positive(read_bytes_per_s) else None
    text = json.dumps({"format": _FORMAT, "read_bytes_per_s": rate, "meta": figures}, indent=1)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _positive(value: object) -> bool:
    return _finite(value) and float(value) > 0  # type: ignore[arg-type]
