"""The default learned predictor: a variable-order Markov model with decay, optionally mixed
with experts that see more of the run than its last few nodes.

**Markov expert.** For a path ``(..., a, b, c)`` the model keeps counts of what followed each
recent context ``()``, ``(c,)``, ``(b, c)``, ``(a, b, c)`` up to ``max_order`` nodes. Paths are
padded on the left with :data:`START`, so ``(START, a)`` means "``a`` was the first step", which
lets the model learn how runs begin apart from how they continue.

A prediction blends the contexts from short to long, PPM-C / Witten-Bell style: starting from a
uniform prior over the support (the declared successors when given), each context with counts
``c(x)`` replaces the estimate ``P`` by ``(c(x) + e * P(x)) / (sum(c) + e)``, where the escape
mass ``e = backoff * (number of distinct successors seen)``. A context seen often with few
distinct successors is trusted; a fresh or diverse context defers to the shorter ones. The
counts are restricted to the support before blending, so the result is exactly a distribution
over the candidates.

**Feature experts** (``features``, see :mod:`agentwarm.predictors._features`): ``run`` (how many
times in a row the current node has run), ``count`` (how many times it has run in this run) and
``visited`` (which nodes the run has visited). Each continues the Markov expert's ``()``,
``(c,)`` blend with one more context, ``(c, feature value)``, in the same escape framework.
**Recent expert** (``recent_half_life``): a second Markov expert whose counts forget fast, for
workloads whose behaviour clusters or drifts in time.

**Mixture.** With more than one expert the prediction is ``sum_e w_e * P_e``. The weights are a
Bayesian mixture learned online (each observation multiplies ``w_e`` by ``P_e(actual next)``,
i.e. by the expert's likelihood, over the nodes seen so far) with fixed share: after each update
a fraction ``share`` of the weight is spread evenly, so an expert that was poor for a while can
take over again. The mixture loses at most about ``log(number of experts)`` nats in total to the
best single expert, so extra experts cost little where they do not help.

Drift: every time a context is observed, its counts are first multiplied by
``0.5 ** (1 / half_life)``, so evidence in that context loses half its weight after
``half_life`` further observations of it. After a change of behaviour, a context that had
saturated (seen many half-lives) switches its most likely successor within ``half_life``
observations. Counts that decay below ``min_count`` are dropped.

``state`` is accepted for the protocol and ignored: the model conditions on the path only.

Modules: :mod:`.model` (the class, which owns the state), :mod:`.experts` (the count tables:
counting, decay, the context bound, their saved form), :mod:`.mixture` (each expert's blend
for one path, the mixture and its weight update).
"""

from __future__ import annotations

from agentwarm.predictors.markov.model import (
    DEFAULT_FEATURES,
    DEFAULT_RECENT_HALF_LIFE,
    MarkovPredictor,
    path_predictor,
)

__all__ = ("DEFAULT_FEATURES", "DEFAULT_RECENT_HALF_LIFE", "MarkovPredictor", "path_predictor")
