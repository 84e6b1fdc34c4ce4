"""``agentwarm warmup run --refresh-plan``: the plan re-mined from the recent traffic before
warming (:func:`refresh_plan`), or PLAN kept as it is when the window held no request
(:func:`kept_plan`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer

from agentwarm.errors import ConfigError
from agentwarm.warmup.render import ChatRenderer
from agentwarm.warmup.types import Plan, load_plan

__all__ = ("Refresh", "kept_plan", "refresh_plan")


@dataclass(frozen=True, slots=True)
class Refresh:
    """``--refresh-plan``'s options: what to mine the plan from."""

    sources: tuple[Path, ...]
    since_hours: float = 24.0
    top_k: int = 20
    min_share: float = 0.01
    state: Path | None = None
    workflow: Path | None = None


def refresh_plan(refresh: Refresh, renderer: ChatRenderer | None) -> Plan | None:
    """The plan re-mined from the last ``since_hours`` of ``refresh.sources`` (not written:
    the caller writes it once it is known to be usable); ``None`` when they hold no request
    in that window."""
    from agentwarm.warmup.mine import mine_records
    from agentwarm.warmup.sources import read_sources

    if not refresh.sources:
        raise ConfigError("--refresh-plan needs the traces or logs to mine: --from PATH...")
    records = read_sources(
        refresh.sources,
        since_s=refresh.since_hours * 3600.0,
        state_dir=refresh.state,
        workflow=refresh.workflow,
    )
    if records.total == 0:
        return None
    return mine_records(
        records, renderer=renderer, top_k=refresh.top_k, min_share=refresh.min_share
    )


def kept_plan(plan_path: Path, refresh: Refresh) -> Plan:
    """PLAN as it is, when the refresh window held no request (a warning says so)."""
    window = f"the last {refresh.since_hours:g} hours of {', '.join(map(str, refresh.sources))}"
    if not plan_path.exists():
        raise ConfigError(
            f"--refresh-plan: nothing to mine: no request in {window}, and no plan at "
            f"{plan_path} to warm instead; give a longer --since-hours or more --from files"
        )
    plan = load_plan(plan_path)
    typer.echo(
        f"warning: --refresh-plan: no request in {window}; {plan_path} is kept as it is and warmed",
        err=True,
    )
    return plan
