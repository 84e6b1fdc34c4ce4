"""Span names and attribute builders: what each agentwarm span carries, in one place.

Each builder returns the attributes of one span at one moment (its start, or its end); the keys
are those of :mod:`agentwarm.telemetry.names`. Enum values (step outcome, prefill kind) are set
as their plain strings.
"""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.util.types import AttributeValue

from agentwarm._spec import Miss, PrefetchKind, StepOutcome
from agentwarm.telemetry.names import (
    AW_PREFILL_KIND,
    AW_PREFILL_PROBABILITY,
    AW_PREFILL_RANK,
    AW_PREFILL_SOURCE,
    AW_PREFILL_TARGET,
    AW_PREFILL_TOKENS,
    AW_RUN_COMPLETED,
    AW_RUN_END_STEPS,
    AW_RUN_ID,
    AW_STEP_CACHED_TOKENS,
    AW_STEP_DISK_CACHED_TOKENS,
    AW_STEP_FROM,
    AW_STEP_HINT_GAIN,
    AW_STEP_HINT_LEAD,
    AW_STEP_HINT_NODE,
    AW_STEP_INDEX,
    AW_STEP_MISS_CAUSE,
    AW_STEP_MISS_MESSAGE,
    AW_STEP_MISS_MISSING_TOKENS,
    AW_STEP_MISS_P,
    AW_STEP_MISS_PRICE,
    AW_STEP_MISS_RANK,
    AW_STEP_MISS_REASON,
    AW_STEP_MISS_TOKEN,
    AW_STEP_NODE,
    AW_STEP_OUTCOME,
    AW_STEP_PREFETCHED,
    AW_STEP_PROMPT_TOKENS,
    AW_STEP_TTFT,
    AW_WORKFLOW,
    GEN_AI_AGENT_NAME,
    GEN_AI_OPERATION_NAME,
    GEN_AI_PROVIDER_NAME,
    GEN_AI_REQUEST_MAX_TOKENS,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_REQUEST_TEMPERATURE,
    GEN_AI_RESPONSE_FINISH_REASONS,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    OP_INVOKE_AGENT,
    OP_INVOKE_WORKFLOW,
    OP_TEXT_COMPLETION,
    SPAN_LLM,
    SPAN_STEP,
    SPAN_WORKFLOW,
)

__all__ = (
    "llm_request_attributes",
    "llm_response_attributes",
    "llm_span_name",
    "miss_attributes",
    "prefill_attributes",
    "step_attributes",
    "step_result_attributes",
    "step_span_name",
    "workflow_attributes",
    "workflow_result_attributes",
    "workflow_span_name",
)


def workflow_span_name(workflow: str) -> str:
    return f"{SPAN_WORKFLOW} {workflow}"


def step_span_name(node: str) -> str:
    return f"{SPAN_STEP} {node}"


def llm_span_name(model: str) -> str:
    return f"{SPAN_LLM} {model}"


def workflow_attributes(workflow: str, run_id: str) -> dict[str, AttributeValue]:
    """Attributes of the ``invoke_workflow`` span, set at its start."""
    return {
        GEN_AI_OPERATION_NAME: OP_INVOKE_WORKFLOW,
        GEN_AI_AGENT_NAME: workflow,
        AW_WORKFLOW: workflow,
        AW_RUN_ID: run_id,
    }


def workflow_result_attributes(end_steps: Sequence[int]) -> dict[str, AttributeValue]:
    """Attributes of the ``invoke_workflow`` span of a run that completed (reached END), set at
    its end; ``end_steps`` are the indices of the steps that moved to END."""
    return {AW_RUN_COMPLETED: True, AW_RUN_END_STEPS: list(end_steps)}


def step_attributes(
    *,
    workflow: str,
    run_id: str,
    index: int,
    from_node: str,
    node: str,
    prefetched: bool,
    outcome: StepOutcome,
) -> dict[str, AttributeValue]:
    """Attributes of an ``invoke_agent`` step span, known at its start.

    ``from_node`` is the previous step's node (:data:`agentwarm._spec.START` for the first
    step); ``prefetched`` and ``outcome`` describe what the previous step speculatively
    prefilled.
    """
    return {
        GEN_AI_OPERATION_NAME: OP_INVOKE_AGENT,
        GEN_AI_AGENT_NAME: node,
        AW_WORKFLOW: workflow,
        AW_RUN_ID: run_id,
        AW_STEP_INDEX: index,
        AW_STEP_FROM: from_node,
        AW_STEP_NODE: node,
        AW_STEP_PREFETCHED: prefetched,
        AW_STEP_OUTCOME: str(outcome),
    }


def step_result_attributes(
    *,
    ttft_s: float | None,
    prompt_tokens: int,
    cached_tokens: int,
    hint_node: str | None = None,
    hint_lead_s: float | None = None,
    hint_gain_s: float | None = None,
    miss: Miss | None = None,
    disk_cached_tokens: int | None = None,
) -> dict[str, AttributeValue]:
    """Attributes of a step span known at its end; TTFT is left out when no LLM call was made,
    the mid-decode hint, its lead and gain when the step had no hint, the miss reason
    (:func:`miss_attributes`) when it had none, the disk tier's share of the cached tokens when
    the engine did not say."""
    attrs: dict[str, AttributeValue] = {
        AW_STEP_PROMPT_TOKENS: prompt_tokens,
        AW_STEP_CACHED_TOKENS: cached_tokens,
    }
    if disk_cached_tokens is not None:
        attrs[AW_STEP_DISK_CACHED_TOKENS] = disk_cached_tokens
    if ttft_s is not None:
        attrs[AW_STEP_TTFT] = ttft_s
    if hint_node is not None:
        attrs[AW_STEP_HINT_NODE] = hint_node
        if hint_lead_s is not None:
            attrs[AW_STEP_HINT_LEAD] = hint_lead_s
        if hint_gain_s is not None:
            attrs[AW_STEP_HINT_GAIN] = hint_gain_s
    return attrs | miss_attributes(miss)


#: The span attribute of each detail of a :class:`~agentwarm._spec.Miss`.
_MISS_KEYS = (
    ("cause", AW_STEP_MISS_CAUSE),
    ("p", AW_STEP_MISS_P),
    ("price", AW_STEP_MISS_PRICE),
    ("rank", AW_STEP_MISS_RANK),
    ("token", AW_STEP_MISS_TOKEN),
    ("message", AW_STEP_MISS_MESSAGE),
    ("missing_tokens", AW_STEP_MISS_MISSING_TOKENS),
)


def miss_attributes(miss: Miss | None) -> dict[str, AttributeValue]:
    """A step's miss reason and the details it knows (none for ``None``: no miss)."""
    if miss is None:
        return {}
    attrs: dict[str, AttributeValue] = {AW_STEP_MISS_REASON: str(miss.reason)}
    for field, key in _MISS_KEYS:
        value = getattr(miss, field)
        if value is not None:
            attrs[key] = value
    return attrs


def llm_request_attributes(
    *,
    model: str,
    provider: str,
    max_tokens: int,
    temperature: float,
    agent: str | None = None,
) -> dict[str, AttributeValue]:
    """Attributes of a ``text_completion`` span, known before the request is sent."""
    attrs: dict[str, AttributeValue] = {
        GEN_AI_OPERATION_NAME: OP_TEXT_COMPLETION,
        GEN_AI_REQUEST_MODEL: model,
        GEN_AI_PROVIDER_NAME: provider,
        GEN_AI_REQUEST_MAX_TOKENS: max_tokens,
        GEN_AI_REQUEST_TEMPERATURE: temperature,
    }
    if agent is not None:
        attrs[GEN_AI_AGENT_NAME] = agent
    return attrs


def llm_response_attributes(
    *,
    input_tokens: int,
    output_tokens: int,
    cached_tokens: int,
    finish_reason: str | None,
    ttft_s: float | None = None,
) -> dict[str, AttributeValue]:
    """Attributes of a ``text_completion`` span known once the response is complete."""
    attrs: dict[str, AttributeValue] = {
        GEN_AI_USAGE_INPUT_TOKENS: input_tokens,
        GEN_AI_USAGE_OUTPUT_TOKENS: output_tokens,
        GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS: cached_tokens,
    }
    if finish_reason is not None:
        attrs[GEN_AI_RESPONSE_FINISH_REASONS] = (finish_reason,)
    if ttft_s is not None:
        attrs[AW_STEP_TTFT] = ttft_s
    return attrs


def prefill_attributes(
    *,
    workflow: str,
    run_id: str,
    source: str,
    target: str,
    kind: PrefetchKind,
    tokens: int,
    probability: float | None = None,
    rank: int | None = None,
) -> dict[str, AttributeValue]:
    """Attributes of an ``agentwarm.prefill`` span known when it is issued.

    Set ``agentwarm.prefill.outcome`` (a :class:`~agentwarm._spec.PrefetchOutcome`) and
    ``agentwarm.prefill.computed_tokens`` before ending the span; every prefill span must end
    with an outcome. ``probability`` and ``rank`` are given for speculative prefills.
    """
    attrs: dict[str, AttributeValue] = {
        AW_WORKFLOW: workflow,
        AW_RUN_ID: run_id,
        AW_PREFILL_SOURCE: source,
        AW_PREFILL_TARGET: target,
        AW_PREFILL_KIND: str(kind),
        AW_PREFILL_TOKENS: tokens,
    }
    if probability is not None:
        attrs[AW_PREFILL_PROBABILITY] = probability
    if rank is not None:
        attrs[AW_PREFILL_RANK] = rank
    return attrs
