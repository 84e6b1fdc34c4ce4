"""Warm-up beyond the next branch: prefixes mined from traffic (a *plan*), warmed on every worker
before traffic comes (static), kept warm between bursts (keep-warm), gating readiness, and warmed
on request from code (explicit warms).

* :mod:`~agentwarm.warmup.types` — the plan format.
* :mod:`~agentwarm.warmup.render` — a chat prefix as the token ids a worker will see.
* :mod:`~agentwarm.warmup.mine` — a plan mined from request logs and traces
  (:func:`mine_plan`, ``agentwarm warmup plan``).
* :mod:`~agentwarm.warmup.warmer` — a plan warmed on workers within a budget of their cache
  (:class:`Warmer`, :func:`warm_workers`, ``agentwarm warmup run``).
"""

from agentwarm.warmup.mine import mine_plan
from agentwarm.warmup.render import ChatRenderer, load_chat_renderer
from agentwarm.warmup.types import Plan, WarmPrefix, load_plan, plan_lines, save_plan
from agentwarm.warmup.warmer import Warmer, WarmSummary, budget_for, warm_workers

__all__ = (
    "ChatRenderer",
    "Plan",
    "WarmPrefix",
    "WarmSummary",
    "Warmer",
    "budget_for",
    "load_chat_renderer",
    "load_plan",
    "mine_plan",
    "plan_lines",
    "save_plan",
    "warm_workers",
)
