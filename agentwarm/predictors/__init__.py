"""Predictors: P(next node | path, state), learned online and persisted per workflow.

:class:`Predictor` is the protocol the runtime uses; :class:`MarkovPredictor` is a
variable-order Markov model with backoff, a uniform prior over declared successors and decay.
The default (:func:`default_predictor`) mixes it with experts that see more of the run (how
often in a row and in all the current node ran, which nodes the run visited, fast-forgetting
recent counts), weighted online by how well each predicted. :class:`FirstOrderPredictor` is the
plain baseline.
:class:`PredictorStore` saves and loads learned state atomically under a state directory.
"""

from __future__ import annotations

from agentwarm.predictors.base import END, START, Mergeable, Predictor
from agentwarm.predictors.content import ContentPredictor, default_predictor
from agentwarm.predictors.context import (
    ContextPredictor,
    StepContext,
    conversation_transitions,
    observe_with,
    predict_with,
)
from agentwarm.predictors.first_order import FirstOrderPredictor
from agentwarm.predictors.markov import MarkovPredictor, path_predictor
from agentwarm.predictors.store import (
    FORMAT_VERSION,
    PredictorStateWarning,
    PredictorStore,
    default_state_dir,
    node_fingerprint,
)

__all__ = (
    "END",
    "FORMAT_VERSION",
    "START",
    "ContentPredictor",
    "ContextPredictor",
    "FirstOrderPredictor",
    "MarkovPredictor",
    "Mergeable",
    "Predictor",
    "PredictorStateWarning",
    "PredictorStore",
    "StepContext",
    "conversation_transitions",
    "default_predictor",
    "default_state_dir",
    "node_fingerprint",
    "observe_with",
    "path_predictor",
    "predict_with",
)
