"""Saving the gateway's learned state while it runs, so that a crash loses at most
``interval_s`` seconds of learning.

Rules (:class:`Autosave`): every ``interval_s`` seconds the state is encoded on the event loop
that owns it (:func:`~agentwarm.gateway.state.encode_state`: a consistent snapshot, nothing
shared with a thread) and, when it differs from what was last written, written and fsynced in a
thread (:func:`~agentwarm.gateway.state.write_state`: atomic, under the lock), merged with what
other gateways sharing the state dir saved meanwhile: the file's state plus what this one
learned since its *base*, the state it loaded (encoded when the :class:`Autosave` is made) or
last wrote, which this class keeps (the merge reads only encoded bytes and plain dicts). The
learner itself does not take in the others' learning (as the runtime's predictor store, it
keeps learning from its own state; a restart loads the sum). :meth:`Autosave.aclose` stops the
saves and lets a write in progress end, so that the final :meth:`Autosave.save` is the last one
on disk. A write that fails is logged (once until a write succeeds again) and tried again at
the next interval; it is never raised. A state that must not be written
(:func:`~agentwarm.gateway.state.encode_state` refuses a non-finite value) is logged and the
previous file kept.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from agentwarm.errors import PredictorStateError
from agentwarm.gateway.state import GatewayState, encode_state, write_state
from agentwarm.predictors import Predictor

__all__ = ("SAVE_INTERVAL_S", "Autosave")

log = logging.getLogger(__name__)

#: How often the learned state is saved by default.
SAVE_INTERVAL_S = 30.0


class Autosave:
    """Saves ``state()`` in ``state_dir`` every ``interval_s`` seconds once :meth:`start`
    ed (``None``: only when :meth:`save` is called); what ``state()`` gives now is the base
    of the first save's merge (what was loaded)."""

    def __init__(
        self, state_dir: Path, state: Callable[[], GatewayState], interval_s: float | None
    ) -> None:
        self.state_dir = state_dir
        self.interval_s = interval_s
        self._state = state
        self._written: bytes | None = None
        first = self._snapshot()
        self._base = None if first is None else first[0]
        self._failing = False
        self._writing: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the periodic saves in the running event loop (the one that owns the state);
        without one, nothing (only :meth:`save` writes)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self.interval_s and self._task is None:
            self._task = loop.create_task(self._run(self.interval_s))

    def save(self) -> None:
        """Write the state now, on the caller's thread, if it changed."""
        snapshot = self._snapshot()
        if snapshot is not None:
            self._write(*snapshot)

    async def aclose(self) -> None:
        """Stop the periodic saves; a write in progress ends first."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._writing is not None:
            await asyncio.wait({self._writing})

    async def _run(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            snapshot = self._snapshot()
            if snapshot is None:
                continue
            self._writing = asyncio.ensure_future(asyncio.to_thread(self._write, *snapshot))
            await asyncio.shield(self._writing)  # cancelled (aclose): the write still ends

    def _snapshot(self) -> tuple[bytes, type[Predictor]] | None:
        """The encoded state and its predictor's type, or None (logged) when it must not be
        written (a non-finite value the loader would refuse: the previous file is kept)."""
        state = self._state()
        try:
            return encode_state(state), type(state.predictor)
        except PredictorStateError as exc:
            log.warning("%s", exc)
            return None

    def _write(self, data: bytes, predictor_type: type[Predictor]) -> None:
        """In the write thread: ``data`` merged with the file (base: :attr:`_base`)."""
        if data == self._written:
            return
        try:
            write_state(self.state_dir, data, base=self._base, predictor_type=predictor_type)
        except (OSError, PredictorStateError) as exc:
            if not self._failing:
                log.warning(
                    "cannot save the gateway's learned state in %s: %s", self.state_dir, exc
                )
            self._failing = True
            return
        self._failing = False
        self._written = self._base = data  # mine, not the merge: the next delta is from here
