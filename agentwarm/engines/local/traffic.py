"""The scheduler's traffic counters: what ``stats()`` reports of the requests that finished."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentwarm.engines.local.request import Request

__all__ = ("Traffic",)


@dataclass(slots=True)
class Traffic:
    """Counts of finished requests since start or the last flush (worker only).

    ``prompt_tokens`` counts whole prompts, but only the tokens processed before the abort of
    an aborted request (its cached + computed tokens); ``hit_tokens`` are the cached ones, of
    which ``disk_hit_tokens`` were loaded from the disk tier.
    """

    requests: int = 0
    aborted: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0
    disk_hit_tokens: int = 0
    computed_tokens: int = 0

    def count(self, req: Request, *, aborted: bool) -> None:
        """Count ``req``, which just finished (``aborted``: by an abort)."""
        self.requests += 1
        self.aborted += int(aborted)
        processed = req.cached_tokens + req.computed_tokens
        self.prompt_tokens += processed if aborted else len(req.ids)
        self.hit_tokens += req.cached_tokens
        self.disk_hit_tokens += (req.disk_tokens or 0) + (req.host_tokens or 0)
        self.computed_tokens += req.computed_tokens
