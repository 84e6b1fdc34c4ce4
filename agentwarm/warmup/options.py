"""The warm-up options of ``agentwarm serve`` and ``agentwarm gateway`` — ``--warmup PLAN
[--ready-file PATH] [--keep-warm S] [--rewarm-below R]`` — checked by :func:`load_warmup`
before the server binds, the :class:`WarmupSettings` they make, and what ``GET /health/ready``
answers (:func:`ready_answer`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from agentwarm.engines.base import Engine
from agentwarm.errors import ConfigError
from agentwarm.warmup.keepwarm import KeepWarm, check_schedule
from agentwarm.warmup.readiness import Readiness
from agentwarm.warmup.render import ChatRenderer
from agentwarm.warmup.types import Plan, load_plan
from agentwarm.warmup.warmer import Warmer

__all__ = (
    "KeepWarmOption",
    "ReadyFileOption",
    "RewarmBelowOption",
    "WarmupOption",
    "WarmupSettings",
    "load_warmup",
    "ready_answer",
)

WarmupOption = Annotated[
    Path | None,
    typer.Option(
        "--warmup",
        help="Warm-up plan (JSONL, from 'agentwarm warmup plan') to warm once the server is up; "
        "GET /health/ready answers 503 until it is warm, then 200.",
    ),
]
ReadyFileOption = Annotated[
    Path | None,
    typer.Option(
        "--ready-file",
        help="Written (JSON progress) once the plan is warm; removed at start and shutdown.",
    ),
]
KeepWarmOption = Annotated[
    float | None,
    typer.Option("--keep-warm", help="Re-send the plan every S seconds (speculative priority)."),
]
RewarmBelowOption = Annotated[
    float | None,
    typer.Option(
        "--rewarm-below",
        help="Re-warm at once when the live cache hit rate of the last minute is below R (0..1).",
    ),
]


@dataclass(frozen=True, slots=True)
class WarmupSettings:
    """The warm-up options of a server (see :func:`load_warmup`)."""

    plan: Plan
    ready_file: Path | None = None
    keep_warm_s: float | None = None
    rewarm_below: float | None = None
    window_s: float = 60.0
    budget_fraction: float | None = 0.5
    #: Renders the plan's ``messages`` for the workers (None: each engine's own template).
    renderer: ChatRenderer | None = None

    def warmer(self, engine: Engine, worker: str = "local") -> Warmer:
        """The warmer of ``engine`` (labelled ``worker``) with these settings' renderer."""
        return Warmer(engine, renderer=self.renderer, worker=worker)

    def keeper(self, warmers: Mapping[str, Warmer]) -> KeepWarm:
        """The :class:`~agentwarm.warmup.keepwarm.KeepWarm` of these settings over
        ``warmers``, with a new :class:`~agentwarm.warmup.readiness.Readiness`
        (``keeper.readiness``)."""
        return KeepWarm(
            self.plan,
            warmers,
            readiness=Readiness(ready_file=self.ready_file),
            keep_warm_s=self.keep_warm_s,
            rewarm_below=self.rewarm_below,
            window_s=self.window_s,
            budget_fraction=self.budget_fraction,
        )


def load_warmup(
    plan: Path | None,
    *,
    ready_file: Path | None = None,
    keep_warm_s: float | None = None,
    rewarm_below: float | None = None,
) -> WarmupSettings | None:
    """The settings of ``--warmup PLAN --ready-file --keep-warm --rewarm-below`` (None without
    ``--warmup``), the plan loaded and a ready file left from an earlier run removed (it must
    not say ready while the model loads); :class:`~agentwarm.errors.ConfigError` naming the
    option and the fix for anything wrong (a bad plan names its file and line)."""
    if plan is None:
        given = [
            name
            for name, value in (
                ("--ready-file", ready_file),
                ("--keep-warm", keep_warm_s),
                ("--rewarm-below", rewarm_below),
            )
            if value is not None
        ]
        if given:
            raise ConfigError(
                f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} a plan to warm: "
                "add --warmup PLAN (make one with "
                "'agentwarm warmup plan --from TRACES_OR_LOGS... -o PLAN')"
            )
        return None
    check_schedule(keep_warm_s, rewarm_below)
    if ready_file is not None and not ready_file.parent.is_dir():
        raise ConfigError(
            f"--ready-file {ready_file}: its directory {ready_file.parent} does not exist "
            "(create it, or write the file elsewhere)"
        )
    settings = WarmupSettings(
        load_plan(plan),
        ready_file=ready_file,
        keep_warm_s=keep_warm_s,
        rewarm_below=rewarm_below,
    )
    if ready_file is not None:
        try:
            ready_file.unlink(missing_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"--ready-file {ready_file}: cannot remove the one left from an earlier run "
                f"({exc.strerror or exc}): fix its permissions, or write the file elsewhere"
            ) from None
    return settings


def ready_answer(
    keep_warm: KeepWarm | None, *, closing: bool = False
) -> tuple[int, dict[str, Any]]:
    """The status and JSON body of ``GET /health/ready`` of a server warming with ``keep_warm``
    (``agentwarm serve`` and ``agentwarm gateway``): 200 once its plan is warm, 503 before (and
    while closing, or when no worker could be warmed), with the progress
    (:meth:`~agentwarm.warmup.readiness.Readiness.to_dict`) and, with keep-warm, ``keep_warm``:
    ``{"rounds", "hit_rates", "tier_shares"}`` (:class:`KeepWarm`'s, per worker); 200
    ``{"ready": true}`` without a warm-up."""
    body: dict[str, Any] = {"ready": True}
    if keep_warm is not None and keep_warm.readiness is not None:
        body = keep_warm.readiness.to_dict()
        if keep_warm.keep_warm_s is not None or keep_warm.rewarm_below is not None:
            body["keep_warm"] = {
                "rounds": keep_warm.rounds,
                "hit_rates": dict(keep_warm.hit_rates),
                "tier_shares": dict(keep_warm.tier_shares),
            }
    body["ready"] = body["ready"] and not closing
    return (200 if body["ready"] else 503), body
