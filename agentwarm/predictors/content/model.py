"""The content-aware predictor: P(next | path, conversation), learned online.

Three things predict the next node, and one logistic model weighs them (stacking):

* the path experts (the order-3 Markov mixture, :func:`~agentwarm.predictors.markov.
  path_predictor`), as the log-probability ``log P_path``;
* the :class:`~.memory.ExampleMemory` (what came next in the most similar past situations),
  as ``log P_memory``;
* hashed features of the path and the conversation (:mod:`.features`): the words of the last
  user message, the last tool's result and arguments, the last assistant text, shapes such
  as an id or a question.

The score of a name ``n`` is ``a * log P_path(n) + b * log P_memory(n) + sum_f W[f, n]`` over
the present features ``f``, and the prediction is its softmax over the candidates. ``W``
starts at zero and ``(a, b)`` at ``(1, 1/2)``, so before any content is learned the prediction
is the path experts' (sharpened by nothing: the memory is uniform while empty). Each observation
in context takes one gradient step of the log-loss: ``W`` of the present features by
``learning_rate / sqrt(number of features)``, ``(a, b)`` by ``offset_rate``.

Without context (``predict``/``observe``, or an empty :class:`~agentwarm.predictors.context.
StepContext`) it is exactly the path experts: a workflow whose steps carry no conversation
loses nothing. Bounded: ``W`` has ``buckets`` rows and at most ``max_classes`` columns (names
beyond are predicted by the path and memory only), the memory ``per_node`` examples per node.

Measured on the real airline conversations (``python -m benchmarks.predictor_eval
--conversations``): online top-1 / top-3 0.661 / 0.894 against the path experts' 0.543 / 0.845.
The defaults (``learning_rate`` 0.1, 1,024 examples per node, ``k`` 10) were chosen on that
file, so they fit it; stacking beat a Bayesian mixture of the same parts there (0.658 against
0.647 top-1 in a prototype), so the parts are stacked rather than mixed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Self

import numpy as np

from agentwarm.predictors import _serial
from agentwarm.predictors.base import rank
from agentwarm.predictors.content import features, serial
from agentwarm.predictors.content.memory import ExampleMemory
from agentwarm.predictors.context import StepContext
from agentwarm.predictors.markov import MarkovPredictor, path_predictor

__all__ = ("ContentPredictor", "default_predictor")

#: Smallest path probability taken into the log (names the path never saw are not ruled out).
_P_FLOOR = 1e-6


class ContentPredictor:
    """Predicts the next node from the path and the conversation (see the module docstring)."""

    kind = "content"

    def __init__(
        self,
        path: MarkovPredictor | None = None,
        *,
        buckets: int = 1 << 14,
        max_classes: int = 256,
        learning_rate: float = 0.1,
        offset_rate: float = 0.02,
        memory: ExampleMemory | None = None,
    ) -> None:
        if buckets < 1 or max_classes < 1 or learning_rate <= 0 or offset_rate < 0:
            raise ValueError(
                "ContentPredictor needs buckets >= 1, max_classes >= 1, learning_rate > 0 "
                "and offset_rate >= 0"
            )
        self.path = path if path is not None else path_predictor()
        self.buckets = buckets
        self.max_classes = max_classes
        self.learning_rate = learning_rate
        self.offset_rate = offset_rate
        self.memory = memory if memory is not None else ExampleMemory()
        self.offsets = np.array([1.0, 0.5])
        self.observations = 0
        self._classes: dict[str, int] = {}
        self._weights = np.zeros((buckets, 0), dtype=np.float32)

    @property
    def classes(self) -> list[str]:
        """The names with a column of weights, in the order they were first observed."""
        return list(self._classes)

    # --- without context: the path experts -----------------------------------------------------

    def predict(
        self,
        path: Sequence[str],
        state: Mapping[str, Any] | None = None,
        *,
        candidates: Sequence[str] | None = None,
    ) -> list[tuple[str, float]]:
        """The path experts' distribution (no conversation known)."""
        return self.path.predict(path, state, candidates=candidates)

    def observe(self, path: Sequence[str], next_node: str) -> None:
        """Teach the path experts only (no conversation known)."""
        self.path.observe(path, next_node)

    # --- with context -------------------------------------------------------------------------

    def predict_in(
        self,
        path: Sequence[str],
        context: StepContext,
        *,
        candidates: Sequence[str] | None = None,
    ) -> list[tuple[str, float]]:
        """The distribution over ``candidates`` (else the names seen so far) for ``path`` in
        ``context``; the path experts' alone for an empty path or context."""
        base = self.path.predict(path, None, candidates=candidates)
        if not path or context.empty or len(base) <= 1:
            return base
        names = [name for name, _ in base]
        probs, _, _, _ = self._scores(path, context, names, dict(base))
        return rank(names, [float(x) for x in probs])

    def observe_in(self, path: Sequence[str], next_node: str, context: StepContext) -> None:
        """Learn ``path -> next_node`` in ``context``: one gradient step of the logistic model,
        one example for the memory, then the path experts' count."""
        try:
            if path and not context.empty:
                self._learn(path, next_node, context)
        finally:  # the path experts learn whatever happened to the rest
            self.path.observe(path, next_node)

    def _learn(self, path: Sequence[str], next_node: str, context: StepContext) -> None:
        if next_node not in self._classes and len(self._classes) < self.max_classes:
            self._classes[next_node] = len(self._classes)
            column = np.zeros((self.buckets, 1), dtype=np.float32)
            self._weights = np.hstack([self._weights, column])
        names = list(dict.fromkeys([*self._classes, next_node]))
        base = dict(self.path.predict(path, None, candidates=names))
        probs, log_path, log_memory, rows = self._scores(path, context, names, base)
        gradient = probs.copy()
        gradient[names.index(next_node)] -= 1.0
        columns = [self._classes[n] for n in names if n in self._classes]
        known = [i for i, n in enumerate(names) if n in self._classes]
        step = self.learning_rate / math.sqrt(len(rows))
        block = self._weights[np.ix_(rows, columns)]
        self._weights[np.ix_(rows, columns)] = block - step * gradient[known][None, :]
        self.offsets = self.offsets - self.offset_rate * np.array(
            [gradient @ log_path, gradient @ log_memory]
        )
        current, previous = path[-1], (path[-2] if len(path) > 1 else "^")
        self.memory.add(current, previous, features.memory_words(context), next_node)
        self.observations += 1

    def _scores(
        self,
        path: Sequence[str],
        context: StepContext,
        names: Sequence[str],
        base: Mapping[str, float],
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[int]]:
        """Softmax over ``names``, the two log-probability inputs and the feature rows."""
        rows = features.hashed(features.names(path, context), self.buckets)
        log_path = np.log(np.maximum([base.get(n, 0.0) for n in names], _P_FLOOR))
        previous = path[-2] if len(path) > 1 else "^"
        votes = self.memory.votes(path[-1], previous, features.memory_words(context))
        log_memory = np.log(self.memory.distribution(votes, names))
        with np.errstate(over="ignore", invalid="ignore"):  # overflow: handled below
            score = self.offsets[0] * log_path + self.offsets[1] * log_memory
            summed = self._weights[rows].sum(axis=0) if rows else None
            if summed is not None and len(self._classes):
                learned = [(i, self._classes[n]) for i, n in enumerate(names) if n in self._classes]
                for i, column in learned:
                    score[i] += float(summed[column])
        if not np.isfinite(score).all():  # absurd weights or offsets: the path experts alone
            score = log_path
        score = score - score.max()
        probs = np.exp(score)
        return probs / probs.sum(), log_path, log_memory, rows

    # --- state --------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Configuration and learned state as JSON data (``kind`` ``"content"``); the weights
        as the rows that are not all zero (:mod:`.serial`)."""
        path = self.path.to_dict()
        rows, data = serial.encode_weights([self.weights_of(n) for n in self.classes])
        return {
            "kind": self.kind,
            "known": list(path.get("known", [])),
            "path": path,
            "buckets": self.buckets,
            "max_classes": self.max_classes,
            "learning_rate": self.learning_rate,
            "offset_rate": self.offset_rate,
            "offsets": [float(x) for x in self.offsets],
            "observations": self.observations,
            "classes": self.classes,
            "rows": rows,
            "data": data,
            "memory": {
                "per_node": self.memory.per_node,
                "k": self.memory.k,
                "power": self.memory.power,
                "examples": self.memory.to_list(),
            },
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Rebuild from :meth:`to_dict` (``ValueError`` naming a bad field), or wrap a saved
        path predictor (``kind`` ``"markov"``, the default before this one): nothing it learned
        is lost, and nothing is learned from content yet."""
        if isinstance(data, Mapping) and data.get("kind") == MarkovPredictor.kind:
            return cls(path=MarkovPredictor.from_dict(data))
        state = serial.parse(data)
        path = _serial.parse(_serial.MarkovState, state.path, serial.WHAT, at="path")
        model = cls(
            path=MarkovPredictor.from_state(path),
            buckets=state.buckets,
            max_classes=state.max_classes,
            learning_rate=state.learning_rate,
            offset_rate=state.offset_rate,
            memory=serial.memory_of(state),
        )
        model.set_weights(state.classes, serial.decode_weights(state))
        model.offsets = np.array(state.offsets, dtype=float)
        model.observations = state.observations
        return model

    def _config(self) -> tuple[int, int, int]:
        return (self.buckets, self.max_classes, self.memory.per_node)

    def merged(self, latest: Self, base: Self | None) -> Self:
        """``latest`` plus what this model learned since ``base``: the path experts merge their
        counts; ``W`` adds this model's change (by name); the memory keeps ``latest``'s
        examples and adds those this one added since ``base``; the offsets are this model's
        (last writer).

        Raises:
            ValueError: ``latest`` or ``base`` has another configuration.
        """
        for other in (latest, base):
            if other is not None and other._config() != self._config():
                raise ValueError(f"cannot merge {self!r} with {other!r}: another configuration")
        out = type(self)(
            path=self.path.merged(latest.path, base.path if base is not None else None),
            buckets=self.buckets,
            max_classes=self.max_classes,
            learning_rate=self.learning_rate,
            offset_rate=self.offset_rate,
            memory=self.memory.merged(latest.memory, base.memory if base is not None else None),
        )
        classes = list(dict.fromkeys([*latest.classes, *self.classes]))[: self.max_classes]
        columns = [
            latest.weights_of(name)
            + (self.weights_of(name) - (base.weights_of(name) if base is not None else 0.0))
            for name in classes
        ]
        weights = np.stack(columns, axis=1) if columns else np.zeros((self.buckets, 0))
        out.set_weights(classes, weights.astype(np.float32))
        out.offsets = self.offsets.copy()
        before = base.observations if base is not None else 0
        out.observations = latest.observations + max(0, self.observations - before)
        return out

    def weights_of(self, name: str) -> np.ndarray:
        """The weight column of ``name`` (zeros if it has none), for merging and tests."""
        index = self._classes.get(name)
        if index is None:
            return np.zeros(self.buckets, dtype=np.float32)
        return np.asarray(self._weights[:, index])

    def set_weights(self, classes: Sequence[str], weights: np.ndarray) -> None:
        """Replace the classes and their weight columns (``buckets x len(classes)``)."""
        if weights.shape != (self.buckets, len(classes)) or len(classes) > self.max_classes:
            raise ValueError(
                f"weights of shape {weights.shape} do not fit {len(classes)} classes of "
                f"{self.buckets} buckets (at most {self.max_classes} classes)"
            )
        self._classes = {name: i for i, name in enumerate(classes)}
        self._weights = np.ascontiguousarray(weights, dtype=np.float32)


def default_predictor() -> ContentPredictor:
    """The predictor a workflow uses when none is given: the path experts
    (:func:`~agentwarm.predictors.markov.path_predictor`) stacked with what the conversation
    says, where the runtime or the gateway know it."""
    return ContentPredictor()
