"""``meta_info.cached_tokens_details``: SGLang's split of a request's cached tokens by tier, and
its mapping to an engine's ``cached_tokens_by_source`` (:class:`~agentwarm.engines.base.Completion`,
:class:`~agentwarm.engines.base.PrefillResult`), both ways: ``agentwarm serve`` writes it from its
engine's split, the SGLang client reads it from SGLang HiCache or ``agentwarm serve --kv-dir``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

__all__ = (
    "STORAGE_BACKEND",
    "CachedTokensDetails",
    "cached_tokens_by_source",
    "cached_tokens_details",
)


class CachedTokensDetails(TypedDict, total=False):
    """``meta_info.cached_tokens_details``: SGLang's split of ``cached_tokens`` by tier (with
    ``--enable-hierarchical-cache``; ``None`` or absent without it, and when nothing was cached):
    ``device`` (GPU memory), ``host`` (host memory), with a storage backend also ``storage``
    (its L3 tier) and ``storage_backend`` (the backend's class name). ``agentwarm serve --kv-dir``
    answers the same, its disk tier as ``storage`` (:data:`STORAGE_BACKEND`)."""

    device: int
    host: int
    storage: int
    storage_backend: str


#: ``storage_backend`` of ``agentwarm serve``'s disk tier in :class:`CachedTokensDetails`.
STORAGE_BACKEND = "agentwarm.DiskTier"
#: An engine's ``cached_tokens_by_source`` keys (``Completion``/``PrefillResult``) and their
#: names in :class:`CachedTokensDetails`.
_SGLANG_SOURCE = {"device": "device", "host": "host", "disk": "storage"}


def cached_tokens_details(by_source: Mapping[str, int]) -> CachedTokensDetails | None:
    """``meta_info.cached_tokens_details`` of an engine's ``cached_tokens_by_source`` (``None``,
    as in SGLang, when it is empty or counts no cached token)."""
    if not any(by_source.values()):
        return None
    details = CachedTokensDetails(
        device=int(by_source.get("device", 0)), host=int(by_source.get("host", 0))
    )
    if "disk" in by_source:
        details["storage"] = int(by_source["disk"])
        details["storage_backend"] = STORAGE_BACKEND
    return details


def cached_tokens_by_source(meta: Mapping[str, Any]) -> dict[str, int]:
    """The engine's ``cached_tokens_by_source`` from a reply's ``cached_tokens_details``
    (``device``, ``host``, ``disk`` for SGLang's ``storage``); empty when the server gives none."""
    details = meta.get("cached_tokens_details")
    if not isinstance(details, Mapping):
        return {}
    by_source: dict[str, int] = {}
    for source, name in _SGLANG_SOURCE.items():
        value = details.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            by_source[source] = value
    return by_source
