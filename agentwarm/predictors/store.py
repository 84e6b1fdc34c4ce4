"""Persistence of learned predictor state, one JSON file per workflow.

File ``<state_dir>/<workflow>.json``::

    {"format": "agentwarm.predictor", "version": 2, "workflow": "...",
     "nodes": [...sorted node names...], "fingerprint": "<sha256 of the node set>",
     "predictor": {...predictor.to_dict()...}}

Rules:

* Writes are atomic: a temporary file in the same directory is written, fsynced and renamed
  over the old one (``os.replace``), so a crash leaves the old or the new state, never half.
  Concurrent writers of one workflow do not interleave; the last rename wins.
* A file that cannot be used (not JSON, truncated, another format version, another node set,
  another predictor kind, bad fields) is renamed to ``<name>.corrupt-<UTC timestamp>.json``
  with a :class:`PredictorStateWarning` naming both paths, and learning restarts from a fresh
  predictor: never a crash, never a silent loss.
* Errors of the file system (directory not writable, file not readable, set aside impossible)
  raise :class:`~agentwarm.errors.PredictorStateError` with the path and what to do; callers
  that must not fail (the runtime) catch it and warn.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from agentwarm.errors import PredictorStateError
from agentwarm.predictors.base import Predictor
from agentwarm.predictors.markov import default_predictor

__all__ = (
    "FORMAT",
    "FORMAT_VERSION",
    "PredictorStateWarning",
    "PredictorStore",
    "default_state_dir",
    "node_fingerprint",
)

FORMAT = "agentwarm.predictor"
#: Version 2: the Markov predictor's mixture experts (weights, recent and feature contexts).
#: Files of other versions are set aside and learning restarts.
FORMAT_VERSION = 2

_ADVICE = "set AGENTWARM_STATE_DIR (or pass --state-dir / state_dir=) to a writable directory"
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class PredictorStateWarning(RuntimeWarning):
    """A state file could not be used and was set aside; learning restarted."""


def default_state_dir() -> Path:
    """``$AGENTWARM_STATE_DIR``, else ``$XDG_STATE_HOME/agentwarm``, else
    ``~/.local/state/agentwarm`` (empty variables count as unset)."""
    explicit = os.environ.get("AGENTWARM_STATE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg:
        return Path(xdg).expanduser() / "agentwarm"
    return Path.home() / ".local" / "state" / "agentwarm"


def node_fingerprint(nodes: Iterable[str]) -> str:
    """SHA-256 of the sorted, deduplicated node names (order of ``nodes`` does not matter)."""
    joined = "\n".join(sorted(set(nodes)))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


class PredictorStore:
    """Loads and saves one predictor per workflow name under ``state_dir``.

    The directory is created on the first :meth:`save`; :meth:`load` never creates anything
    except a set-aside copy of a bad file.
    """

    def __init__(self, state_dir: str | os.PathLike[str] | None = None) -> None:
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()

    def path_for(self, workflow: str) -> Path:
        """The state file of ``workflow``.

        Names made of letters, digits, ``._-`` (not starting with ``.``) are used as they are;
        any other name is sanitized and suffixed with a short hash so distinct names never
        share a file.
        """
        if _SAFE_NAME.fullmatch(workflow):
            stem = workflow
        else:
            digest = hashlib.sha256(workflow.encode("utf-8")).hexdigest()[:12]
            cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", workflow).strip("._")[:80]
            stem = f"{cleaned or 'workflow'}-{digest}"
        return self.state_dir / f"{stem}.json"

    def exists(self, workflow: str) -> bool:
        """Whether a state file for ``workflow`` exists (it may still turn out unusable)."""
        return self.path_for(workflow).is_file()

    def load(
        self,
        workflow: str,
        nodes: Iterable[str],
        factory: Callable[[], Predictor] = default_predictor,
    ) -> Predictor:
        """The saved predictor of ``workflow``, else ``factory()``.

        The saved state is restored with ``type(factory()).from_dict`` (so it keeps its saved
        configuration). A missing file gives a fresh predictor; an unusable one is set aside
        with a :class:`PredictorStateWarning` and gives a fresh predictor.

        Raises:
            PredictorStateError: the file exists but cannot be read, or cannot be set aside.
        """
        path = self.path_for(workflow)
        fresh = factory()
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return fresh
        except OSError as exc:
            raise PredictorStateError(
                f"cannot read predictor state {path}: {exc.strerror or exc}; "
                f"fix its permissions or {_ADVICE}"
            ) from exc
        try:
            return self._decode(raw, workflow, sorted(set(nodes)), fresh)
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            moved = self._set_aside(path)
            warnings.warn(
                f"predictor state {path} is unusable ({exc}); moved it to {moved.name} "
                "and started learning afresh",
                PredictorStateWarning,
                stacklevel=2,
            )
            return fresh

    def save(self, workflow: str, predictor: Predictor, nodes: Iterable[str]) -> Path:
        """Atomically write ``predictor``'s state for ``workflow``; returns the file path.

        Raises:
            PredictorStateError: the directory or file cannot be created or written.
        """
        node_list = sorted(set(nodes))
        document = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "workflow": workflow,
            "nodes": node_list,
            "fingerprint": node_fingerprint(node_list),
            "predictor": predictor.to_dict(),
        }
        path = self.path_for(workflow)
        try:
            payload = json.dumps(document, allow_nan=False, separators=(",", ":"))
        except (TypeError, ValueError) as exc:
            raise PredictorStateError(
                f"predictor state for {workflow!r} is not JSON-serializable: {exc}"
            ) from exc
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            _atomic_write(path, payload.encode("utf-8"))
        except OSError as exc:
            raise PredictorStateError(
                f"cannot write predictor state {path}: {exc.strerror or exc}; {_ADVICE}"
            ) from exc
        return path

    @staticmethod
    def _decode(raw: bytes, workflow: str, nodes: list[str], fresh: Predictor) -> Predictor:
        document: Any = json.loads(raw.decode("utf-8"))
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise ValueError(f"not an agentwarm predictor file (format must be {FORMAT!r})")
        version = document.get("version")
        if version != FORMAT_VERSION:
            raise ValueError(f"format version {version!r}, this agentwarm reads {FORMAT_VERSION}")
        if document.get("workflow") != workflow:
            raise ValueError(f"saved for workflow {document.get('workflow')!r}")
        saved_nodes = document.get("nodes")
        if saved_nodes != nodes or document.get("fingerprint") != node_fingerprint(nodes):
            if isinstance(saved_nodes, list):
                saved = {str(n) for n in saved_nodes}
                diff = f"added {sorted(set(nodes) - saved)}, removed {sorted(saved - set(nodes))}"
            else:
                diff = "no node list"
            raise ValueError(f"saved for another node set ({diff})")
        state = document.get("predictor")
        kind = fresh.to_dict().get("kind")
        if not isinstance(state, dict) or state.get("kind") != kind:
            found = state.get("kind") if isinstance(state, dict) else None
            raise ValueError(f"saved predictor kind {found!r}, expected {kind!r}")
        return type(fresh).from_dict(state)

    @staticmethod
    def _set_aside(path: Path) -> Path:
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for attempt in range(1000):
            suffix = f"-{attempt}" if attempt else ""
            target = path.with_name(f"{path.stem}.corrupt-{stamp}{suffix}.json")
            if target.exists():
                continue
            try:
                os.rename(path, target)
            except OSError as exc:
                raise PredictorStateError(
                    f"predictor state {path} is unusable and cannot be moved aside "
                    f"({exc.strerror or exc}); move or delete it, or {_ADVICE}"
                ) from exc
            return target
        raise PredictorStateError(f"predictor state {path} is unusable; too many set-aside copies")


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
