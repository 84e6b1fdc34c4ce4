"""The content-aware predictor: the path experts stacked with what the conversation says
(:mod:`.model`), its features (:mod:`.features`), example memory (:mod:`.memory`) and saved
form (:mod:`.serial`)."""

from __future__ import annotations

from agentwarm.predictors.content.memory import ExampleMemory
from agentwarm.predictors.content.model import ContentPredictor, default_predictor

__all__ = ("ContentPredictor", "ExampleMemory", "default_predictor")
