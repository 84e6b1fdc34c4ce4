"""The gateway's learned state on disk: ``<state_dir>/gateway.json``.

::

    {"format": "agentwarm.gateway", "version": 1, "heads": {...}, "predictor": {...},
     "shapes": {...}, "tool_hints": {...}}

Written atomically under a lock file (the predictor store's :func:`~agentwarm.predictors.store.
atomic_write` and ``filelock``): a crash leaves the old or the new state. Gateways sharing a
state dir: the last writer wins. A file that cannot be used (not JSON, another format or
version, a bad field: a NaN, infinite or subnormal count, named in the warning) is set aside
as ``gateway.corrupt-<UTC timestamp>.json`` with a
:class:`~agentwarm.predictors.PredictorStateWarning` naming both paths, and learning restarts:
never a crash, never a silent loss. :func:`save_state` validates what it writes as
:func:`load_state` would and refuses a state it would set aside, keeping the previous file.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import filelock

from agentwarm import _jsonfile
from agentwarm.errors import PredictorStateError
from agentwarm.gateway.heads import HeadRegistry
from agentwarm.gateway.prompts import Shapes
from agentwarm.gateway.toolhints import ToolHints
from agentwarm.predictors import Predictor, PredictorStateWarning
from agentwarm.predictors.store import MAX_STATE_BYTES, atomic_write, set_aside

__all__ = ("FORMAT", "VERSION", "GatewayState", "load_state", "save_state", "state_path")

FORMAT = "agentwarm.gateway"
VERSION = 1


@dataclass(slots=True)
class GatewayState:
    """What a gateway learned: its nodes, transitions, prompt shapes and tool hints."""

    heads: HeadRegistry
    predictor: Predictor
    shapes: Shapes
    tool_hints: ToolHints


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
    except (ValueError, TypeError, KeyError) as exc:
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
    if data.get("version") != VERSION:
        raise ValueError(f"version {data.get('version')!r}, this agentwarm reads {VERSION}")
    return GatewayState(
        heads=HeadRegistry.from_dict(data["heads"]),
        predictor=predictor_cls.from_dict(data["predictor"]),
        shapes=Shapes.from_dict(data["shapes"]),
        tool_hints=ToolHints.from_dict(data["tool_hints"]),
    )


def save_state(state_dir: Path, state: GatewayState) -> Path:
    """Write ``state`` to ``state_dir`` (created if needed); the file's path.

    Raises:
        PredictorStateError: :func:`load_state` would refuse the state (a NaN or infinite
            count, a subnormal one): nothing is written, the previous file is kept.
        OSError: the directory or file cannot be written.
    """
    path = state_path(state_dir)
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "heads": state.heads.to_dict(),
        "predictor": state.predictor.to_dict(),
        "shapes": state.shapes.to_dict(),
        "tool_hints": state.tool_hints.to_dict(),
    }
    data = json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    try:  # never write what the next start would set aside: all learning would be lost
        _decode(_jsonfile.loads(data), type(state.predictor))
    except (ValueError, TypeError, KeyError) as exc:
        raise PredictorStateError(
            f"gateway state not saved, the loader would refuse it ({exc}); "
            f"the previous file {path} is kept"
        ) from None
    state_dir.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(path.with_name(".gateway.lock"))):
        atomic_write(path, data)
    return path
