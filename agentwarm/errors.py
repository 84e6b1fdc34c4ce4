"""Exceptions raised by agentwarm, split by the phase in which they happen.

::

    AgentwarmError
    ├── ConfigError                 bad option, bad file, bad input given by the user (setup)
    ├── GraphValidationError        a workflow graph that cannot compile (build)
    ├── WorkflowError               a workflow that failed while running (runtime)
    │   ├── NodeError               a node function raised; the original is ``__cause__``
    │   ├── StepTimeout             a step ran past its ``timeout_s`` / ``step_timeout_s``
    │   └── MaxStepsExceeded        a cyclic workflow did not reach END within ``max_steps``
    ├── PredictorStateError         learned predictor state could not be read or written
    └── EngineError                 an inference engine failed a request
        ├── EngineUnavailable       the engine cannot be reached (connection refused, closed)
        ├── EngineTimeout           the engine did not answer within the deadline
        ├── RequestAborted          the request was aborted before it finished
        └── InvalidRequest          the engine rejected the request (bad ids, too long, ...)
            └── ContextLengthExceeded   prompt (+ ``max_tokens``) longer than the model context

Errors raised while a workflow step runs carry the step's node name in ``node`` (set by the
runtime when the engine or the node did not name it).

Library exceptions (httpx, torch, OSError) are translated at the boundary with
``raise EngineError(...) from exc`` so callers only need to catch these types.
"""

from __future__ import annotations

__all__ = (
    "AgentwarmError",
    "ConfigError",
    "ContextLengthExceeded",
    "EngineError",
    "EngineTimeout",
    "EngineUnavailable",
    "GraphValidationError",
    "InvalidRequest",
    "MaxStepsExceeded",
    "NodeError",
    "PredictorStateError",
    "RequestAborted",
    "StepTimeout",
    "WorkflowError",
)


class AgentwarmError(Exception):
    """Root of every exception agentwarm raises on purpose."""

    #: The workflow node whose step raised it (None outside a step).
    node: str | None = None


class ConfigError(AgentwarmError):
    """The user gave an option, file or value agentwarm cannot use."""


class GraphValidationError(AgentwarmError):
    """A workflow graph is malformed; the message names the node and the fix."""

    def __init__(self, message: str, *, node: str | None = None) -> None:
        super().__init__(message)
        self.node = node


class WorkflowError(AgentwarmError):
    """A workflow failed while running."""


class NodeError(WorkflowError):
    """A node function raised; the original exception is ``__cause__``."""

    def __init__(self, message: str, *, node: str) -> None:
        super().__init__(message)
        self.node = node


class StepTimeout(WorkflowError):
    """A step ran longer than its time limit (``@node(timeout_s=...)``, ``step_timeout_s``)."""

    def __init__(self, message: str, *, node: str, limit_s: float) -> None:
        super().__init__(message)
        self.node = node
        self.limit_s = limit_s


class MaxStepsExceeded(WorkflowError):
    """A workflow (usually a loop) ran more than ``max_steps`` steps without reaching END."""


class PredictorStateError(AgentwarmError):
    """Learned predictor state could not be read or written."""


class EngineError(AgentwarmError):
    """An inference engine failed a request."""


class EngineUnavailable(EngineError):
    """The engine cannot be reached (server down, connection refused, engine closed)."""


class EngineTimeout(EngineError):
    """The engine did not answer within the deadline."""


class RequestAborted(EngineError):
    """The request was aborted (by ``abort(rid)`` or by the server) before it finished.

    ``cached_tokens``/``computed_tokens``: prompt tokens the engine had taken from the cache and
    computed before the abort (0 when the engine cannot tell, e.g. a remote server).
    """

    def __init__(self, message: str = "", *, cached_tokens: int = 0, computed_tokens: int = 0):
        super().__init__(message)
        self.cached_tokens = cached_tokens
        self.computed_tokens = computed_tokens


class InvalidRequest(EngineError):
    """The engine rejected the request as malformed (empty ids, over the context length, ...)."""


class ContextLengthExceeded(InvalidRequest):
    """A prompt (plus the tokens asked for) does not fit the model's context length."""

    def __init__(self, message: str, *, prompt_tokens: int, max_tokens: int, limit: int) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.limit = limit
