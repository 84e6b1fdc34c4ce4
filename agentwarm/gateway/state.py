"""The gateway's learned state on disk: ``<state_dir>/gateway.json``.

::

    {"format": "agentwarm.gateway", "version": 2, "heads": {...}, "predictor": {...},
     "shapes": {...}, "tool_hints": {...}, "tenants": {TAG: {"predictor", "shapes",
     "tool_hints"}}}

The top-level predictor, shapes and tool hints are what all tenants pool; ``tenants`` holds
each tenant's own (``--no-share-learning``), by tag, and the heads their owners' tags
(:mod:`agentwarm.gateway.tenants`): no salt is ever written. A version 1 file (before tenants)
loads with no per-tenant learning and heads owned by nobody until they are sent again.

Written atomically under a lock file (the predictor store's :func:`~agentwarm.predictors.store.
atomic_write` and ``filelock``): a crash leaves the old or the new state. The learner saves
periodically (:class:`~agentwarm.gateway.learner.Learner`: encoded on the event loop that owns
the state, :func:`encode_state`, then written and fsynced in a thread, :func:`write_state`) and
at shutdown; :func:`check_writable` refuses, at start, a state dir it could not write.

Gateways (replicas) sharing a state dir lose no learning, as the runtime's predictor store:
:func:`write_state` given the *base* (the state this gateway loaded or last wrote, kept by its
:class:`~agentwarm.gateway.autosave.Autosave`) re-reads the file under the lock; when it is
missing or still the base, this gateway's state is written as it is (a lone writer saves
exactly what it learned); else the file's state (decoded as :func:`load_state` would) plus what
this gateway learned since the base (:func:`~agentwarm.gateway.statemerge.merge_documents`:
predictors merged, counts added, heads and owners united, tenants by tag), validated as the
loader would (a merge it would refuse is logged and this gateway's state written instead). A
file found unusable there is set aside as on load and this gateway's state written.

A file that cannot be used (not JSON, another format or
version, a bad field: a NaN, infinite or subnormal count, named in the warning) is set aside as
``gateway.corrupt-<UTC timestamp>.json`` with a
:class:`~agentwarm.predictors.PredictorStateWarning` naming both paths, and learning restarts:
never a crash, never a silent loss. :func:`encode_state` (so :func:`save_state` and every
periodic save) validates what it writes as :func:`load_state` would and refuses a state it would
set aside, keeping the previous file.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import filelock

from agentwarm import _jsonfile
from agentwarm.errors import ConfigError, PredictorStateError
from agentwarm.gateway.heads import HeadRegistry
from agentwarm.gateway.prompts import Shapes
from agentwarm.gateway.statemerge import merge_documents
from agentwarm.gateway.tenants import Learned, tenants_from_dict
from agentwarm.gateway.toolhints import ToolHints
from agentwarm.predictors import Predictor, PredictorStateWarning
from agentwarm.predictors.store import MAX_STATE_BYTES, atomic_write, set_aside

__all__ = (
    "FORMAT",
    "VERSION",
    "GatewayState",
    "check_writable",
    "encode_state",
    "load_state",
    "save_state",
    "state_path",
    "write_state",
)

log = logging.getLogger(__name__)

FORMAT = "agentwarm.gateway"
VERSION = 2
_READS = (1, VERSION)
#: What decoding an unusable file raises.
_UNUSABLE = (ValueError, TypeError, KeyError)


@dataclass(slots=True)
class GatewayState:
    """What a gateway learned: its nodes, transitions, prompt shapes and tool hints (pooled),
    and each tenant's own (by tag)."""

    heads: HeadRegistry
    predictor: Predictor
    shapes: Shapes
    tool_hints: ToolHints
    tenants: dict[str, Learned] = field(default_factory=dict)

    @classmethod
    def empty(cls, predictor_factory: Callable[[], Predictor]) -> GatewayState:
        """Nothing learned yet."""
        return cls(HeadRegistry(), predictor_factory(), Shapes(), ToolHints())


def state_path(state_dir: Path) -> Path:
    return state_dir / "gateway.json"


def load_state(state_dir: Path, predictor_factory: Callable[[], Predictor]) -> GatewayState | None:
    """The state saved in ``state_dir``; ``None`` when there is none or it was unusable (then
    set aside, with a warning)."""
    path = state_path(state_dir)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PredictorStateError(f"cannot read the gateway state {path}: {exc.strerror}") from exc
    try:
        if len(raw) > MAX_STATE_BYTES:
            raise ValueError(f"larger than the {MAX_STATE_BYTES}-byte limit of state files")
        return _decode(_jsonfile.loads(raw), type(predictor_factory()))
    except _UNUSABLE as exc:
        moved = set_aside(path)
        warnings.warn(
            f"gateway state {path} is unusable ({exc}); moved to {moved}, learning restarts",
            PredictorStateWarning,
            stacklevel=2,
        )
        return None


def _decode(data: Any, predictor_cls: type[Predictor]) -> GatewayState:
    """The state of a decoded file; ``ValueError`` (or ``TypeError``, ``KeyError``) saying
    what is wrong with it."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f'not a gateway state (no "format": "{FORMAT}")')
    if data.get("version") not in _READS:
        raise ValueError(f"version {data.get('version')!r}, this agentwarm reads {_READS}")
    pooled = Learned.from_dict(data, predictor_cls)
    return GatewayState(
        heads=HeadRegistry.from_dict(data["heads"]),
        predictor=pooled.predictor,
        shapes=pooled.shapes,
        tool_hints=pooled.tool_hints,
        tenants=tenants_from_dict(data.get("tenants", {}), predictor_cls),
    )


def save_state(state_dir: Path, state: GatewayState) -> Path:
    """Write ``state`` to ``state_dir`` (created if needed); the file's path.

    Raises:
        PredictorStateError: :func:`load_state` would refuse the state (a NaN or infinite
            count, a subnormal one): nothing is written, the previous file is kept.
        OSError: the directory or file cannot be written.
    """
    return write_state(state_dir, encode_state(state))


def encode_state(state: GatewayState) -> bytes:
    """The file's bytes for ``state`` (call where ``state`` is owned: the event loop);
    :class:`~agentwarm.errors.PredictorStateError` when :func:`load_state` would refuse them."""
    data = _dumps(_document(state))
    try:  # never write what the next start would set aside: all learning would be lost
        _decode(_jsonfile.loads(data), type(state.predictor))
    except _UNUSABLE as exc:
        raise PredictorStateError(
            f"gateway state not saved, the loader would refuse it ({exc}); "
            "the previous file is kept"
        ) from None
    return data


def _document(state: GatewayState) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "heads": state.heads.to_dict(),
        **Learned(state.predictor, state.shapes, state.tool_hints).to_dict(),
        "tenants": {tag: learned.to_dict() for tag, learned in state.tenants.items()},
    }


def _dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def write_state(
    state_dir: Path,
    data: bytes,
    *,
    base: bytes | None = None,
    predictor_type: type[Predictor] | None = None,
) -> Path:
    """Write the encoded state ``data`` to ``state_dir`` (created if needed) atomically, under
    the lock (from any thread); the file's path. With ``base`` (the encoded state this process
    loaded or last wrote) and ``predictor_type``, merged with what others saved since (the
    module docstring). Raises OSError, or PredictorStateError when an unusable file found
    there cannot be set aside."""
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_path(state_dir)
    with filelock.FileLock(str(path.with_name(".gateway.lock"))):
        if base is not None and predictor_type is not None:
            data = _merged_with_saved(path, data, base, predictor_type)
        atomic_write(path, data)
    return path


def _merged_with_saved(path: Path, mine: bytes, base: bytes, cls: type[Predictor]) -> bytes:
    """What to write over ``path`` (call with the lock held): ``mine`` when the file is
    missing, still ``base`` or unusable (then set aside, with a warning), else the merge."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return mine
    if raw == base:
        return mine  # nobody else saved since: exactly what this process has
    try:
        if len(raw) > MAX_STATE_BYTES:
            raise ValueError(f"larger than the {MAX_STATE_BYTES}-byte limit of state files")
        latest = json.loads(_dumps(_document(_decode(_jsonfile.loads(raw), cls))))
    except _UNUSABLE as exc:
        moved = set_aside(path)
        warnings.warn(
            f"gateway state {path} is unusable ({exc}); moved to {moved}, this gateway's "
            "learning is written",
            PredictorStateWarning,
            stacklevel=2,
        )
        return mine
    before = json.loads(base)
    if latest == before:
        return mine
    try:
        data = _dumps(merge_documents(latest, json.loads(mine), before, cls))
        _decode(_jsonfile.loads(data), cls)  # never write what the loader would refuse
    except _UNUSABLE as exc:
        log.warning(
            "gateway state %s: the merge is unusable (%s); this gateway's is written", path, exc
        )
        return mine
    return data


def check_writable(state_dir: Path) -> None:
    """Create ``state_dir`` if needed and check a file can be written there; ConfigError (one
    line naming the directory and the fix) when not, so that a run is refused at start rather
    than its learning lost at the end."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=state_dir, prefix=".gateway.", suffix=".probe")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise ConfigError(
            f"--state-dir {state_dir}: cannot write into it ({exc.strerror or exc}); give a "
            "writable directory (--state-dir or AGENTWARM_STATE_DIR)"
        ) from None
