"""One warning per cause: a disk tier logs the first fault of each kind at WARNING and the
rest at DEBUG (a directory of a thousand garbled files logs one line, not a thousand)."""

from __future__ import annotations

import logging
import threading

__all__ = ("Notices",)


class Notices:
    """Counts faults by cause; :meth:`note` logs the first of each cause as a warning."""

    def __init__(self, logger: logging.Logger, where: str) -> None:
        self._log = logger
        self._where = where
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def note(self, cause: str, message: str) -> None:
        with self._lock:
            seen = self.counts.get(cause, 0)
            self.counts[cause] = seen + 1
        if seen:
            self._log.debug("kv tier %s: %s", self._where, message)
        else:
            self._log.warning(
                "kv tier %s: %s (further %s faults are logged at debug level)",
                self._where,
                message,
                cause,
            )
