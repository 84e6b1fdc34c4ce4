"""Tenants in the gateway: whose a request is, and where what it teaches is kept.

A request's tenant is its cache namespace, the one the upstream isolates its prefix cache by:
:func:`~agentwarm.engines.namespace.namespace_of` of the body's ``cache_salt`` / ``extra_key``
(neither: the default tenant). The learner keeps these rules with it:

* **Sessions** belong to one tenant (:class:`~agentwarm.gateway.sessions.SessionTracker` scopes
  hints and continuity by it): the same ``user`` under two salts is two sessions.
* **Prefetches** of a session are sent in its tenant's namespace, and only with heads that this
  tenant has sent itself (:meth:`~agentwarm.gateway.heads.HeadRegistry.own_predictions`): the
  rest of a prediction is dropped before anything is chosen.
* **Learning** (the predictor's transitions, tool hints, prompt shapes: a :class:`Learned`) is
  pooled across tenants by default (``share=True``, ``agentwarm gateway --share-learning``).
  Pooled statistics are keyed by node names and a name is one head's content, so tenants pool
  them only between identical heads, and a tenant is only prefetched heads it sent (another
  tenant's transition to its own private head is never used for it). Pooling is the default
  because per-user salts would otherwise make each user a tenant learning from its own few
  sessions: isolation would silently reduce learning to nearly nothing. ``share=False``
  (``--no-share-learning``) keeps one :class:`Learned` per tenant (at most
  :data:`MAX_TENANT_MODELS`, the least recently used dropped): no tenant's traffic changes
  another's predictions.
* Salts stay in memory: what logs, session ids and the state file hold of a tenant is its tag
  (:func:`~agentwarm.engines.namespace.tenant_tag`, a hash).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from agentwarm.engines.namespace import TAG_CHARS, namespace_of, tenant_tag
from agentwarm.gateway.prompts import Shapes
from agentwarm.gateway.toolhints import ToolHints
from agentwarm.predictors import Predictor

__all__ = (
    "DEFAULT_TENANT",
    "MAX_TENANT_MODELS",
    "Learned",
    "Tenant",
    "TenantModels",
    "tenants_from_dict",
)

#: Tenants whose own learning is kept at once when learning is not shared.
MAX_TENANT_MODELS = 256
_TAG = re.compile(f"[0-9a-f]{{{TAG_CHARS}}}|")


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant: its ``namespace`` (the salts; kept in memory only) and its ``tag``."""

    namespace: str
    tag: str

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> Tenant | None:
        """The tenant of a chat request body; ``None`` when its salts are not valid (the
        upstream refuses such a request: nothing is learned from it)."""
        namespace = namespace_of(body)
        if namespace is None:
            return None
        return DEFAULT_TENANT if not namespace else cls(namespace, tenant_tag(namespace))


DEFAULT_TENANT = Tenant("", "")


@dataclass(slots=True)
class Learned:
    """What traffic taught: transitions (``predictor``), prompt ``shapes``, ``tool_hints``."""

    predictor: Predictor
    shapes: Shapes
    tool_hints: ToolHints

    def to_dict(self) -> dict[str, Any]:
        return {
            "predictor": self.predictor.to_dict(),
            "shapes": self.shapes.to_dict(),
            "tool_hints": self.tool_hints.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], predictor_type: type[Predictor]) -> Learned:
        """Raises ValueError, TypeError or KeyError for data :meth:`to_dict` did not give."""
        return cls(
            predictor_type.from_dict(data["predictor"]),
            Shapes.from_dict(data["shapes"]),
            ToolHints.from_dict(data["tool_hints"]),
        )


def tenants_from_dict(
    data: Any, predictor_type: type[Predictor], where: str = "tenants"
) -> dict[str, Learned]:
    """Per-tenant :class:`Learned` by tag, as saved; ValueError naming a bad tag or entry."""
    if not isinstance(data, Mapping) or len(data) > MAX_TENANT_MODELS:
        raise ValueError(f"{where}: expected a mapping of at most {MAX_TENANT_MODELS} tenants")
    out: dict[str, Learned] = {}
    for tag, learned in data.items():
        if not isinstance(tag, str) or not _TAG.fullmatch(tag):
            raise ValueError(f"{where}: {tag!r} is not a tenant tag ({TAG_CHARS} hex chars)")
        if not isinstance(learned, Mapping):
            raise ValueError(f"{where}[{tag}]: expected a mapping")
        out[tag] = Learned.from_dict(learned, predictor_type)
    return out


class Saved(Protocol):
    """What :class:`TenantModels` starts from (a :class:`~agentwarm.gateway.state.
    GatewayState`): the pooled model's parts and the per-tenant models by tag."""

    predictor: Predictor
    shapes: Shapes
    tool_hints: ToolHints
    tenants: dict[str, Learned]


class TenantModels:
    """The :class:`Learned` each tenant predicts with (see the module docstring): the pooled
    one (``saved``'s predictor, shapes and tool hints) for all when ``share``, else one per
    tenant (``saved.tenants``, more made by ``factory`` on first use)."""

    def __init__(
        self, saved: Saved, *, share: bool = True, factory: Callable[[], Predictor]
    ) -> None:
        self.pooled = Learned(saved.predictor, saved.shapes, saved.tool_hints)
        self.share = share
        self._factory = factory
        self._tenants: OrderedDict[str, Learned] = OrderedDict(saved.tenants)

    def of(self, tag: str) -> Learned:
        """What ``tag``'s sessions learn into and predict with."""
        if self.share:
            return self.pooled
        learned = self._tenants.get(tag)
        if learned is None:
            learned = Learned(self._factory(), Shapes(), ToolHints())
            self._tenants[tag] = learned
            while len(self._tenants) > MAX_TENANT_MODELS:
                self._tenants.popitem(last=False)
        self._tenants.move_to_end(tag)
        return learned

    def tenants(self) -> dict[str, Learned]:
        """The per-tenant models (kept, and saved, whichever mode runs)."""
        return dict(self._tenants)
