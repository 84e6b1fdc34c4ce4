"""Persistence of learned predictor state, one JSON file per workflow.

File ``<state_dir>/<workflow>.json``::

    {"format": "agentwarm.predictor", "version": 2, "workflow": "...",
     "nodes": [...sorted node names...], "fingerprint": "<sha256 of the node set>",
     "predictor": {...predictor.to_dict()...}}

Rules:

* Writes are atomic: a temporary file in the same directory is written, fsynced and renamed
  over the old one (``os.replace``), so a crash leaves the old or the new state, never half.
* Processes sharing a state directory lose no learning: :meth:`PredictorStore.save` holds the
  lock file ``<state_dir>/.<name>.lock`` (``filelock``), re-reads the file, and writes the
  state on disk plus what the predictor learned since this store loaded or last saved it (the
  delta), so the saved counts are the sum of every process's. Exact for plain counts and the
  observation count; decayed counts merge to first order and mixture weights are the last
  writer's (see :mod:`agentwarm.predictors._merge`). A predictor that is not
  :class:`~agentwarm.predictors.base.Mergeable`, or that this store did not load, replaces
  the file (last writer wins).
* The whole document is validated on load by pydantic models (the envelope in
  :mod:`agentwarm.predictors._document`, the predictor's state in
  :mod:`agentwarm.predictors._serial`): strict types, finite non-negative counts (not
  subnormal, at most ``2**53``), integers
  that fit, bounded sizes (at most :data:`MAX_STATE_BYTES`), the format version this
  agentwarm reads (only :data:`FORMAT_VERSION`), the workflow, its node set and the predictor
  kind.
* Nothing the loader would refuse is written: :meth:`PredictorStore.save` validates the state
  (merged) as :meth:`PredictorStore.load` would and, for a non-finite or subnormal value,
  raises :class:`~agentwarm.errors.PredictorStateError` naming the field and keeps the
  previous file as it was.
* A file that cannot be used (not JSON, truncated, another format version, another node set,
  another predictor kind, any bad field) is renamed to ``<name>.corrupt-<UTC timestamp>.json``
  with a :class:`PredictorStateWarning` naming both paths, and learning restarts from a fresh
  predictor: never a crash, never a silent loss. :meth:`PredictorStore.save` does the same
  with an unusable file it finds before writing.
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

import filelock

from agentwarm import _jsonfile
from agentwarm.errors import PredictorStateError
from agentwarm.predictors import _document
from agentwarm.predictors._document import FORMAT, FORMAT_VERSION, node_fingerprint
from agentwarm.predictors.base import Mergeable, Predictor
from agentwarm.predictors.content import default_predictor

__all__ = (
    "FORMAT",
    "FORMAT_VERSION",
    "MAX_STATE_BYTES",
    "PredictorStateWarning",
    "PredictorStore",
    "atomic_write",
    "default_state_dir",
    "node_fingerprint",
    "set_aside",
)

#: Larger state files are set aside unread (an expert keeps at most ``max_contexts`` contexts,
#: so real files stay far below this).
MAX_STATE_BYTES = 64 * 2**20
#: How long :meth:`PredictorStore.save` waits for another process's save to finish.
LOCK_TIMEOUT_S = 60.0

_ADVICE = "set AGENTWARM_STATE_DIR (or pass --state-dir / state_dir=) to a writable directory"
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


#: What decoding an unusable file raises (pydantic's ValidationError is a ValueError).
_UNUSABLE = (ValueError, TypeError, KeyError, RecursionError, ArithmeticError)


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


class PredictorStore:
    """Loads and saves one predictor per workflow name under ``state_dir``.

    The directory is created on the first :meth:`save`; :meth:`load` never creates anything
    except a set-aside copy of a bad file.
    """

    def __init__(self, state_dir: str | os.PathLike[str] | None = None) -> None:
        self.state_dir = Path(state_dir) if state_dir is not None else default_state_dir()
        # Per workflow: the predictor this store loaded or saved, and its state at that time
        # (as JSON reads it back): the base of the delta merged on the next save.
        self._base: dict[str, tuple[Predictor, dict[str, Any]]] = {}

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

    def lock_path_for(self, workflow: str) -> Path:
        """The lock file that serializes saves of ``workflow`` (hidden, next to the state)."""
        path = self.path_for(workflow)
        return path.with_name(f".{path.stem}.lock")

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
        with a :class:`PredictorStateWarning` and gives a fresh predictor. What is returned is
        the base of the merge when it is saved with this store.

        Raises:
            PredictorStateError: the file exists but cannot be read, or cannot be set aside.
        """
        path = self.path_for(workflow)
        node_list = sorted(set(nodes))
        fresh = factory()
        raw = _read(path)
        predictor = fresh
        if raw is not None:
            try:
                predictor = _decode_predictor(raw, workflow, node_list, fresh)
            except _UNUSABLE as exc:
                # Set aside under the lock, and only the bytes that failed: a save may have
                # replaced them meanwhile.
                with self._lock(workflow):
                    again = _read(path)
                    if again == raw:
                        self._discard(path, exc)
                    elif again is not None:
                        return self.load(workflow, node_list, factory)
        self._base[workflow] = (predictor, _json_copy(predictor.to_dict()))
        return predictor

    def save(self, workflow: str, predictor: Predictor, nodes: Iterable[str]) -> Path:
        """Write ``predictor``'s state for ``workflow`` atomically, under the lock, merged with
        what other processes saved since this store loaded or last saved it (see the module
        docstring); returns the file path.

        Only a predictor this store loaded or saved before is merged (the store knows what it
        learned since); any other replaces the file, as does a predictor that is not
        :class:`~agentwarm.predictors.base.Mergeable`. The predictor itself is not changed: it
        keeps learning from its own state, and the next save adds only what it learned after
        this one.

        Raises:
            PredictorStateError: the directory or file cannot be created or written, or the
                lock is held by another process for :data:`LOCK_TIMEOUT_S`.
        """
        return self.save_snapshot(workflow, predictor.to_dict(), nodes, of=predictor)

    def save_snapshot(
        self, workflow: str, state: dict[str, Any], nodes: Iterable[str], *, of: Predictor
    ) -> Path:
        """:meth:`save` for ``state``, a ``to_dict()`` of the predictor ``of`` taken earlier
        (e.g. on the event loop that owns ``of``, while this runs in a thread): merged as
        ``of``'s would be, without touching ``of``; the next save of ``of`` adds only what it
        learned after ``state``."""
        node_list = sorted(set(nodes))
        path = self.path_for(workflow)
        mine = state
        predictor = of
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            with self._lock(workflow):
                state = self._merge_with_saved(workflow, node_list, predictor, mine)
                _refuse_unloadable(path, workflow, node_list, state, type(predictor))
                atomic_write(path, _encode(workflow, node_list, state))
        except filelock.Timeout as exc:
            raise PredictorStateError(
                f"cannot save predictor state {path}: another process has held its lock "
                f"{exc.lock_file} for {LOCK_TIMEOUT_S:.0f} s; if no agentwarm process is "
                "running, delete the lock file"
            ) from exc
        except OSError as exc:
            raise PredictorStateError(
                f"cannot write predictor state {path}: {exc.strerror or exc}; {_ADVICE}"
            ) from exc
        self._base[workflow] = (predictor, _json_copy(mine))
        return path

    def _lock(self, workflow: str) -> filelock.BaseFileLock:
        return filelock.FileLock(self.lock_path_for(workflow), timeout=LOCK_TIMEOUT_S)

    def _merge_with_saved(
        self, workflow: str, nodes: list[str], predictor: Predictor, mine: dict[str, Any]
    ) -> dict[str, Any]:
        """The state to write: ``mine`` merged with the file's (call with the lock held)."""
        path = self.path_for(workflow)
        raw = _read(path)
        loaded = self._base.get(workflow)
        if raw is None or loaded is None or loaded[0] is not predictor:
            return mine
        if not isinstance(predictor, Mergeable):
            return mine
        base_state = loaded[1]
        try:
            latest_state = _decode_state(raw, workflow, nodes, str(mine.get("kind")))
            if latest_state == base_state:
                return mine  # nobody else saved since: exactly what this process has
            cls = type(predictor)
            latest = cls.from_dict(latest_state)
            ours = cls.from_dict(mine)  # the snapshot, not ``predictor``: it may have moved on
            merged: dict[str, Any] = ours.merged(latest, cls.from_dict(base_state)).to_dict()
            return merged
        except _UNUSABLE as exc:
            self._discard(path, exc)
            return mine

    def _discard(self, path: Path, exc: BaseException) -> None:
        moved = set_aside(path)
        warnings.warn(
            f"predictor state {path} is unusable ({exc}); moved it to {moved} "
            "and started learning afresh",
            PredictorStateWarning,
            stacklevel=3,
        )


def set_aside(path: Path) -> Path:
    """Rename the unusable file ``path`` to ``<stem>.corrupt-<UTC timestamp>.json`` beside it;
    the new path. Raises :class:`~agentwarm.errors.PredictorStateError` when it cannot."""
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


def _read(path: Path) -> bytes | None:
    """The file's bytes (at most one past :data:`MAX_STATE_BYTES`); ``None`` if missing."""
    try:
        with path.open("rb") as handle:
            return handle.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PredictorStateError(
            f"cannot read predictor state {path}: {exc.strerror or exc}; "
            f"fix its permissions or {_ADVICE}"
        ) from exc


def _encode(workflow: str, nodes: list[str], state: dict[str, Any]) -> bytes:
    doc = _document.document(workflow, nodes, state)
    try:
        payload = json.dumps(doc, allow_nan=False, separators=(",", ":")).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise PredictorStateError(
            f"predictor state for {workflow!r} is not JSON-serializable: {exc}"
        ) from exc
    if len(payload) > MAX_STATE_BYTES:
        raise PredictorStateError(
            f"predictor state for {workflow!r} is {len(payload)} bytes, over the "
            f"{MAX_STATE_BYTES}-byte limit of state files; lower the predictor's max_contexts"
        )
    return payload


def _refuse_unloadable(
    path: Path, workflow: str, nodes: list[str], state: dict[str, Any], cls: type[Predictor]
) -> None:
    """Raise :class:`~agentwarm.errors.PredictorStateError` if :meth:`PredictorStore.load`
    would refuse ``state`` (a NaN or infinite count, a subnormal one): such a file would be set
    aside on the next start and everything learned lost, so the previous file is kept."""
    try:
        data = json.loads(json.dumps(_document.document(workflow, nodes, state)))
        cls.from_dict(_document.predictor_state(data, workflow, nodes, str(state.get("kind"))))
    except _UNUSABLE as exc:
        raise PredictorStateError(
            f"predictor state for {workflow!r} not saved, the loader would refuse it ({exc}); "
            f"the previous file {path} is kept"
        ) from None


def _json_copy(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` as it reads back from the file (lists for tuples, a deep copy)."""
    copy: dict[str, Any] = json.loads(json.dumps(state, allow_nan=False))
    return copy


def _decode_state(raw: bytes, workflow: str, nodes: list[str], kind: str) -> dict[str, Any]:
    """The predictor state of a file's bytes, the whole document validated (see
    :mod:`~agentwarm.predictors._document`); raises one of :data:`_UNUSABLE` saying why the
    file cannot be used."""
    if len(raw) > MAX_STATE_BYTES:
        raise ValueError(f"larger than the {MAX_STATE_BYTES}-byte limit of state files")
    return _document.predictor_state(_jsonfile.loads(raw), workflow, nodes, kind)


def _decode_predictor(raw: bytes, workflow: str, nodes: list[str], fresh: Predictor) -> Predictor:
    kind = str(fresh.to_dict().get("kind"))
    return type(fresh).from_dict(_decode_state(raw, workflow, nodes, kind))


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file beside it, fsynced, renamed."""
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
