"""Warm-up beyond the next branch: prefixes mined from traffic (a *plan*), warmed on every worker
before traffic comes (static), kept warm between bursts (keep-warm), gating readiness, and warmed
on request from code (explicit warms).

* :mod:`~agentwarm.warmup.types` — the plan format.
* :mod:`~agentwarm.warmup.render` — a chat prefix as the token ids a worker will see.
* :mod:`~agentwarm.warmup.mine` — a plan mined from request logs and traces
  (:func:`mine_plan`, ``agentwarm warmup plan``).
* :mod:`~agentwarm.warmup.warmer` — a plan warmed on workers within a budget of their cache
  (:class:`Warmer`, :func:`warm_workers`, ``agentwarm warmup run``).
* :mod:`~agentwarm.warmup.keepwarm` — a server's warm-up: static, then kept warm
  (:class:`KeepWarm`, ``--warmup``, ``--keep-warm``, ``--rewarm-below``).
* :mod:`~agentwarm.warmup.readiness` — whether the plan is warm (:class:`Readiness`,
  ``/health/ready``, ``--ready-file``).
* :mod:`~agentwarm.warmup.options` — the ``--warmup`` options of ``agentwarm serve`` and
  ``agentwarm gateway`` and their ``/health/ready`` answer.
* :mod:`~agentwarm.warmup.explicit` — one warm asked for by code (``agentwarm.warm``; the
  gateway's ``max_tokens: 0`` requests use its span).
* :mod:`~agentwarm.warmup.debounce` — repeated warms of one session coalesced
  (``agentwarm.Debouncer``).
"""

from agentwarm.warmup.keepwarm import KeepWarm
from agentwarm.warmup.mine import mine_plan
from agentwarm.warmup.readiness import Readiness
from agentwarm.warmup.render import ChatRenderer, load_chat_renderer
from agentwarm.warmup.types import Plan, WarmPrefix, load_plan, plan_lines, save_plan
from agentwarm.warmup.warmer import Warmer, WarmSummary, budget_for, warm_workers

__all__ = (
    "ChatRenderer",
    "KeepWarm",
    "Plan",
    "Readiness",
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
