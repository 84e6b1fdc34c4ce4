"""Confirmed warm-ups waiting for their node's live request.

On engines that cannot reuse an in-flight prefill (``supports_promotion`` false), a node's live
request waits for its confirmed warm-up, or for the speculative hit that sent its whole prefix
(then no warm-up was sent), so the prefix is computed once.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agentwarm.engines.base import Engine
from agentwarm.runtime.prefetch.sender import Sender
from agentwarm.runtime.prefetch.settle import Settler
from agentwarm.runtime.prefetch.state import Prefetch

__all__ = ("WarmUps",)

log = logging.getLogger(__name__)


class WarmUps:
    """The confirmed warm-ups (and covering hits) of one run, by target node, until the node's
    live request comes (:meth:`before_live`) or the run ends (:meth:`close`)."""

    def __init__(
        self, *, engine: Engine, sender: Sender, settler: Settler, timeout_s: float
    ) -> None:
        self.engine = engine
        self._sender = sender
        self._settler = settler
        self._timeout_s = timeout_s
        self._confirmed: dict[str, Prefetch] = {}
        # Speculative hits that sent a node's whole known prefix (no confirmed warm-up needed).
        self._covered: dict[str, asyncio.Task[Any]] = {}

    def cover(self, target: str, task: asyncio.Task[Any]) -> None:
        """``target``'s live request is to wait for ``task``, a hit that sent its prefix."""
        self._covered[target] = task

    def sent(self, target: str, pf: Prefetch) -> None:
        """``pf`` is ``target``'s new confirmed warm-up (an earlier one is settled as used)."""
        previous = self._confirmed.pop(target, None)
        if previous is not None:
            self._settler.settle(previous, hit=True)
        self._confirmed[target] = pf

    async def before_live(self, node: str) -> None:
        """Called before a node's live request: on engines that cannot reuse an in-flight
        prefill, wait for the confirmed warm-up of this node (or the speculative hit that sent
        its whole prefix) so its work is not done twice."""
        covered = self._covered.pop(node, None)
        pf = self._confirmed.pop(node, None)
        task = covered
        if pf is not None:
            self._settler.settle(pf, hit=True)
            latest = pf.latest
            task = latest.task if latest is not None else None
        if self.engine.supports_promotion or task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), self._timeout_s)
        except Exception:
            log.debug("warm-up of %r did not finish; sending the request anyway", node)

    def close(self) -> None:
        """The run is over: stop the warm-ups no live request used and settle them."""
        for pf in self._confirmed.values():
            for req in pf.requests:
                self._sender.stop(req)
            self._settler.settle(pf, hit=True)
        self._confirmed.clear()
        self._covered.clear()
