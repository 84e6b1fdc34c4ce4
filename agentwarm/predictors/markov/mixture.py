"""Estimation: each expert's Witten-Bell blend of its tables for one path, and the mixture of
the experts by their online Bayesian weights.

A :class:`Step` is what predicting for one path reads from the count tables, in the form the
estimates use. Along an expert's chain of tables (most specific context first), each table
with counts ``c`` over the support enters the blend as ``(sum(c) + e, keep)`` (a
:data:`Blend`), ``e = backoff * sum(min(c, 1))`` its escape mass and
``keep = e / (sum(c) + e)``. Unrolled, ``P(x) = a * uniform + sum_j coef_j * c_j(x)``, ``a``
the product of all ``keep`` and ``coef_j = 1 / (sum(c_j) + e_j)`` times the ``keep`` of the
more specific tables. The sums run in the same order as the step-by-step blend
``P <- (c + e * P) / (sum(c) + e)``, so the results are the same to the last bit.

Divisions are guarded: a table whose ``sum(c) + e`` is not a finite normal float (an
overflowing ``backoff``, counts decayed towards zero) is left out as if it counted nothing,
so every coefficient stays finite and no prediction or weight is ever NaN.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentwarm.predictors import _features
from agentwarm.predictors._serial import MIN_NORMAL
from agentwarm.predictors.markov.experts import Context, Table

__all__ = ("Blend", "Step", "all_blends", "blends", "mix", "posterior", "prepare")

#: ``(sum(c) + e, keep)`` of a table over some support; ``None`` if it counts none of it.
Blend = tuple[float, float] | None


@dataclass(slots=True)
class Step:
    """What predicting for one path reads from the counts. Valid while the counts do not
    change: the model drops every step it kept when it observes."""

    #: The Markov contexts of the path, shortest first.
    contexts: list[Context]
    #: The path's key of each feature, in the model's feature order.
    keys: list[_features.FeatureKey | None]
    #: The distinct non-empty tables of the path's contexts, in the order they mix in.
    tables: list[Table]
    #: Each expert's tables (indexes into ``tables``), most specific first.
    chains: list[list[int]]
    #: The blend of each table over every node seen so far, once made.
    blends: list[Blend] | None = None


def prepare(
    contexts: list[Context],
    keys: list[_features.FeatureKey | None],
    counts: Mapping[Context, Table],
    recent: Mapping[Context, Table] | None,
    feature_counts: Mapping[str, Mapping[_features.FeatureKey, Table]],
    features: Sequence[str],
) -> Step:
    """The step of a path with these ``contexts`` and feature ``keys`` under the counts.

    The experts' chains of tables, most specific first, skipping contexts never seen:
    Markov ``(a, b, c), (b, c), (c,), ()``; recent (unless ``None``) the same in its own
    tables; each feature its ``(c, value)`` then Markov's ``(c,), ()``, shared.
    """
    tables: list[Table] = []
    shared: list[int] = []  # the tables of () and (c,)
    for order in range(len(contexts) - 1, -1, -1):
        table = counts.get(contexts[order])
        if table:  # not a context never seen (or emptied)
            if order < 2:
                shared.append(len(tables))
            tables.append(table)
    chains = [list(range(len(tables)))]
    if recent is not None:
        start = len(tables)
        tables += [table for table in map(recent.get, reversed(contexts)) if table]
        chains.append(list(range(start, len(tables))))
    for feature, key in zip(features, keys, strict=True):
        table = None if key is None else feature_counts[feature].get(key)
        if table:
            chains.append([len(tables), *shared])
            tables.append(table)
        else:
            chains.append(shared)
    return Step(contexts, keys, tables, chains)


def all_blends(step: Step, backoff: float) -> list[Blend]:
    """The blends of ``step``'s tables over every node seen so far: all their counts, as every
    name in a table is a known node (the model keeps that)."""
    if step.blends is None:
        out: list[Blend] = []
        for table in step.tables:
            total = escape = 0.0
            for c in table.values():
                total += c
                escape += c if c < 1.0 else 1.0
            out.append(_blend(total, escape, backoff))
        step.blends = out
    return step.blends


def blends(step: Step, allowed: Mapping[str, Any], backoff: float) -> list[Blend]:
    """The blends of ``step``'s tables over the names in ``allowed``: those of
    :func:`all_blends` for a table whose names are all allowed, else summed again."""
    keys = allowed.keys()
    out: list[Blend] = []
    for table, every in zip(step.tables, all_blends(step, backoff), strict=True):
        if table.keys() <= keys:
            out.append(every)
            continue
        total = escape = 0.0
        for name, c in table.items():
            if name in allowed:
                total += c
                escape += c if c < 1.0 else 1.0
        out.append(_blend(total, escape, backoff))
    return out


def _blend(total: float, escape: float, backoff: float) -> Blend:
    """The blend of a table counting ``total`` with ``escape`` distinct-name mass; ``None``
    when it counts nothing, or when ``total + backoff * escape`` is not a finite normal float
    (dividing by it would overflow)."""
    if not total > 0.0:
        return None
    escape = backoff * escape
    norm = total + escape
    if not MIN_NORMAL <= norm < math.inf:
        return None
    return (norm, escape / norm)


def mix(
    step: Step, weights: Sequence[float], blends: Sequence[Blend], mixed: dict[str, float]
) -> float:
    """Add each expert's weighted counts into ``mixed`` (one entry per name of the support,
    zero to start); return the weight of the uniform prior, ``sum_e w_e * a_e``.

    ``P(x) = sum_e w_e * (a_e / len(support) + sum_j coef_ej * c_j(x))``: each table's
    coefficients are added up over the experts, then its counts added once.
    """
    coefs = [0.0] * len(step.tables)
    uniform = 0.0
    for w, chain in zip(weights, step.chains, strict=True):
        a = 1.0
        for i in chain:
            blend = blends[i]
            if blend is not None:
                total, keep = blend
                coefs[i] += w * (a / total)
                a *= keep
        uniform += w * a
    for table, coef in zip(step.tables, coefs, strict=True):
        if not coef:
            continue
        # Scan the smaller of the two: each name still adds the tables in the same order.
        if len(table) <= len(mixed):
            for name, c in table.items():
                if name in mixed:
                    mixed[name] += coef * c
        else:
            for name in mixed:
                count = table.get(name)
                if count is not None:
                    mixed[name] += coef * count
    return uniform


def posterior(
    step: Step,
    weights: list[float],
    next_node: str,
    support_size: int,
    backoff: float,
    share: float,
) -> list[float]:
    """The weights after seeing ``next_node``: each multiplied by its expert's probability of
    ``next_node`` over a support of ``support_size`` nodes (every node seen so far and
    ``next_node``), normalised, then a fraction ``share`` spread evenly (a subnormal weight is
    0). ``weights`` itself if no expert gave ``next_node`` any probability (or their sum is
    not a finite normal float)."""
    every = all_blends(step, backoff)
    counts = [table.get(next_node, 0.0) for table in step.tables]
    likelihoods = []
    for chain in step.chains:
        a = 1.0
        terms = []
        for i in chain:
            blend = every[i]
            if blend is not None:
                total, keep = blend
                if counts[i]:  # a zero term leaves the sum (and its rounding) as it is
                    terms.append(a / total * counts[i])
                a *= keep
        likelihoods.append(a / support_size + sum(terms))
    products = [w * p for w, p in zip(weights, likelihoods, strict=True)]
    total = sum(products)
    k = len(products)
    if MIN_NORMAL <= total < math.inf:
        out = [(1 - share) * p / total + share / k for p in products]
        return [w if w >= MIN_NORMAL else 0.0 for w in out]  # no subnormal weight is kept
    return weights
