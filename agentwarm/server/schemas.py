"""How ``agentwarm serve`` words a request that fails validation.

The request models are the wire format shared with the client,
:mod:`agentwarm.engines.sglang.protocol`; this module turns their validation errors into the one
line a 400 reply carries.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

__all__ = ("describe_validation_error",)


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem: ``sampling_params.max_new_tokens: Input should be a valid integer``."""
    lines: list[str] = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in error["loc"] if not _is_union_tag(part))
        lines.append(f"{loc or 'body'}: {error['msg']}")
    unique = list(dict.fromkeys(lines))
    return "; ".join(unique[:8]) + (f" (+{len(unique) - 8} more)" if len(unique) > 8 else "")


def _is_union_tag(part: Any) -> bool:
    return isinstance(part, str) and ("[" in part or part in _UNION_TAGS)


_UNION_TAGS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})
