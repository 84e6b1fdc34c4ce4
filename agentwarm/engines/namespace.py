"""Tenant namespaces: the one rule that turns a request's ``cache_salt`` and ``extra_key`` into
the cache namespace an engine isolates by (``Engine.*(namespace=...)``).

SGLang releases read the tenant from ``extra_key`` (0.5.x) or ``cache_salt`` (newer);
:class:`~agentwarm.engines.sglang.SGLangEngine` sends its namespace in both, so a server sees
the same value twice. The rule, used by ``agentwarm serve`` and nothing else forming one:

* only one of them set (non-empty), or both equal → that value, unchanged;
* neither → ``""`` (the shared default namespace);
* both set and different → ``cache_salt + "\\0" + extra_key``.

Each part is at most :data:`MAX_PART_BYTES` bytes of UTF-8 and contains no NUL
(:func:`check_part`), so the mapping is injective: a value with no NUL is a single part, one with
exactly one NUL splits back into its pair. ``cache_salt="a|b"`` and
``(cache_salt="a", extra_key="b")`` are different tenants. :func:`namespace_parts` is the
inverse (what a client sends to be in a namespace), :func:`namespace_of` the rule applied to a
request body that has not been validated (the gateway's), and :func:`tenant_tag` the only form
of a namespace that may be shown or written to disk (a hash).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

__all__ = (
    "MAX_FIELD_BYTES",
    "MAX_PART_BYTES",
    "TAG_CHARS",
    "check_field",
    "check_part",
    "namespace_key",
    "namespace_of",
    "namespace_parts",
    "tenant_tag",
)

MAX_FIELD_BYTES = 256
"""Longest identifier a server keeps from a request (``rid``, ``session_id``, ``routing_key``,
``cache_salt``, ``extra_key``), in UTF-8 bytes: an id or its hash, not a payload (engines keep
them in logs, queues and cache bookkeeping, outside the cache's token budget)."""

MAX_PART_BYTES = MAX_FIELD_BYTES
"""Longest ``cache_salt`` / ``extra_key`` accepted (the namespace is kept for as long as the
cache holds a prefix of it)."""

_SEPARATOR = "\0"


def check_field(field: str, value: str) -> str:
    """``value`` if it is valid UTF-8 of at most :data:`MAX_FIELD_BYTES` bytes, else ValueError
    naming ``field``, its size and the limit: the one length rule for identifiers a server
    keeps."""
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{field} is not valid UTF-8 text (lone surrogate at index {exc.start})"
        ) from None
    if size > MAX_FIELD_BYTES:
        raise ValueError(
            f"{field} is {size} bytes; the limit is {MAX_FIELD_BYTES} bytes of UTF-8 "
            "(send an id or a hash of it)"
        )
    return value


def check_part(field: str, value: str) -> str:
    """``value`` if it is a valid ``field`` (``cache_salt`` or ``extra_key``): within
    :func:`check_field`'s limit and without NUL, else ValueError naming the field and the
    problem."""
    check_field(field, value)
    if _SEPARATOR in value:
        raise ValueError(f"{field} must not contain NUL (\\u0000)")
    return value


def namespace_key(cache_salt: str | None, extra_key: str | None) -> str:
    """The cache namespace of a request with these fields (see the module docstring); both are
    assumed to have passed :func:`check_part`."""
    if not cache_salt or cache_salt == extra_key:
        return extra_key or ""
    if not extra_key:
        return cache_salt
    return cache_salt + _SEPARATOR + extra_key


def namespace_parts(namespace: str) -> tuple[str | None, str | None]:
    """The ``(cache_salt, extra_key)`` a request sends to be in ``namespace``:
    ``namespace_key(*namespace_parts(ns)) == ns``; ``(None, None)`` for the default one."""
    if not namespace:
        return None, None
    salt, sep, key = namespace.partition(_SEPARATOR)
    return (salt, key) if sep else (namespace, None)


def namespace_of(body: Mapping[str, Any]) -> str | None:
    """The namespace of a request body's ``cache_salt`` / ``extra_key`` (absent or ``null``:
    unset); ``None`` when either is not a valid part (not a string, too long, NUL): a server
    refuses such a request."""
    parts: list[str | None] = []
    for field in ("cache_salt", "extra_key"):
        value = body.get(field)
        if value is not None:
            if not isinstance(value, str):
                return None
            try:
                check_part(field, value)
            except ValueError:
                return None
        parts.append(value)
    return namespace_key(*parts)


_TAG_DOMAIN = b"agentwarm.tenant\0"
TAG_CHARS = 32
"""Length of a :func:`tenant_tag` (hex)."""


def tenant_tag(namespace: str) -> str:
    """The tag of a tenant: ``""`` for the default namespace, else 32 hex chars of a sha256 of
    it (128 bits: distinct tenants never share one). What logs, session ids and files show of
    a namespace, never the salt itself."""
    if not namespace:
        return ""
    digest = hashlib.sha256(_TAG_DOMAIN + namespace.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:TAG_CHARS]
