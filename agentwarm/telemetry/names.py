"""Every span name, attribute key and metric name agentwarm emits (pinned in
``tests/test_telemetry.py``).

Spans follow the OpenTelemetry GenAI semantic conventions where they define a name, in their
current (2025) form: ``gen_ai.provider.name`` replaced the deprecated ``gen_ai.system`` (semconv
1.37), and the workflow span carries its name in ``gen_ai.agent.name`` (the GenAI repository
merged ``gen_ai.workflow.name`` into it). agentwarm's own attributes live under ``agentwarm.*``,
never ``gen_ai.*``. The values of the outcome and kind attributes are the enums of
:mod:`agentwarm._spec` (:class:`~agentwarm._spec.StepOutcome`,
:class:`~agentwarm._spec.PrefetchOutcome`, :class:`~agentwarm._spec.PrefetchKind`).
"""

from __future__ import annotations

__all__ = (
    "AW_PREFILL_COMPUTED_TOKENS",
    "AW_PREFILL_KIND",
    "AW_PREFILL_OUTCOME",
    "AW_PREFILL_PROBABILITY",
    "AW_PREFILL_RANK",
    "AW_PREFILL_SOURCE",
    "AW_PREFILL_TARGET",
    "AW_PREFILL_TOKENS",
    "AW_RUN_COMPLETED",
    "AW_RUN_END_STEPS",
    "AW_RUN_ID",
    "AW_STEP_CACHED_TOKENS",
    "AW_STEP_DISK_CACHED_TOKENS",
    "AW_STEP_FROM",
    "AW_STEP_HINT_GAIN",
    "AW_STEP_HINT_LEAD",
    "AW_STEP_HINT_NODE",
    "AW_STEP_INDEX",
    "AW_STEP_MISS_CAUSE",
    "AW_STEP_MISS_MESSAGE",
    "AW_STEP_MISS_MISSING_TOKENS",
    "AW_STEP_MISS_P",
    "AW_STEP_MISS_PRICE",
    "AW_STEP_MISS_RANK",
    "AW_STEP_MISS_REASON",
    "AW_STEP_MISS_TOKEN",
    "AW_STEP_NODE",
    "AW_STEP_OUTCOME",
    "AW_STEP_PREFETCHED",
    "AW_STEP_PROMPT_TOKENS",
    "AW_STEP_TTFT",
    "AW_WORKFLOW",
    "GEN_AI_AGENT_NAME",
    "GEN_AI_INPUT_MESSAGES",
    "GEN_AI_OPERATION_NAME",
    "GEN_AI_OUTPUT_MESSAGES",
    "GEN_AI_PROVIDER_NAME",
    "GEN_AI_REQUEST_MAX_TOKENS",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_REQUEST_TEMPERATURE",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "METRIC_PREFETCH_DROPPED",
    "METRIC_PREFETCH_HITS",
    "METRIC_PREFETCH_ISSUED",
    "METRIC_PREFETCH_WASTED_TOKENS",
    "METRIC_STEP_TTFT",
    "OP_INVOKE_AGENT",
    "OP_INVOKE_WORKFLOW",
    "OP_TEXT_COMPLETION",
    "PROVIDER_FAKE",
    "PROVIDER_LOCAL",
    "PROVIDER_SGLANG",
    "PROVIDER_VLLM",
    "SPAN_LLM",
    "SPAN_PREFILL",
    "SPAN_STEP",
    "SPAN_WORKFLOW",
    "TRACER_NAME",
    "TTFT_BUCKETS_S",
)

TRACER_NAME = "agentwarm"
"""The instrumentation scope of agentwarm's tracer and meter, and its ``service.name``."""

# --- span names -------------------------------------------------------------------------------
SPAN_WORKFLOW = "invoke_workflow"
SPAN_STEP = "invoke_agent"
SPAN_LLM = "text_completion"
SPAN_PREFILL = "agentwarm.prefill"

# --- gen_ai.operation.name values -------------------------------------------------------------
OP_INVOKE_WORKFLOW = "invoke_workflow"
OP_INVOKE_AGENT = "invoke_agent"
OP_TEXT_COMPLETION = "text_completion"

# --- GenAI semantic-convention attribute keys ---------------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"

PROVIDER_LOCAL = "agentwarm.local"
PROVIDER_SGLANG = "sglang"
PROVIDER_VLLM = "vllm"
PROVIDER_FAKE = "agentwarm.fake"

# --- agentwarm attribute keys ------------------------------------------------------------------
AW_WORKFLOW = "agentwarm.workflow"
AW_RUN_ID = "agentwarm.run.id"
AW_RUN_COMPLETED = "agentwarm.run.completed"
"""True on the workflow span of a run that reached END; absent when it failed or was cancelled."""
AW_RUN_END_STEPS = "agentwarm.run.end_steps"
"""Indices (:data:`AW_STEP_INDEX`) of the steps that moved to END; set with
:data:`AW_RUN_COMPLETED` (several when fan-out branches each end the run)."""
AW_STEP_INDEX = "agentwarm.step.index"
"""0-based index of the step within its run."""
AW_STEP_FROM = "agentwarm.step.from"
"""The previous step's node, or :data:`agentwarm._spec.START` for a run's first step."""
AW_STEP_NODE = "agentwarm.step.node"
AW_STEP_PREFETCHED = "agentwarm.step.prefetched"
"""True when this node was speculatively prefetched during the previous step (a branch hit)."""
AW_STEP_OUTCOME = "agentwarm.step.outcome"
"""A :class:`~agentwarm._spec.StepOutcome` (``hit`` | ``miss`` | ``none``). Also the TTFT
histogram's attribute."""
AW_STEP_TTFT = "agentwarm.step.ttft_s"
"""TTFT in seconds of the step's first LLM call; absent when the step made no LLM call."""
AW_STEP_PROMPT_TOKENS = "agentwarm.step.prompt_tokens"
"""Prompt tokens of the step's first LLM call."""
AW_STEP_CACHED_TOKENS = "agentwarm.step.cached_tokens"
"""Prompt tokens of the step's first LLM call served from the prefix cache."""
AW_STEP_DISK_CACHED_TOKENS = "agentwarm.step.disk_cached_tokens"
"""Of :data:`AW_STEP_CACHED_TOKENS`, those the engine loaded from its disk tier (``LocalEngine``
with ``kv_dir``); absent when the engine does not split its cached tokens by source."""
AW_STEP_HINT_NODE = "agentwarm.step.hint_node"
"""The successor the step's streamed output named before the step ended (its mid-decode hint);
absent when there was none."""
AW_STEP_HINT_LEAD = "agentwarm.step.hint_lead_s"
"""Seconds from the mid-decode hint to the step's end (the lead it gave its prefetch); set with
:data:`AW_STEP_HINT_NODE`."""
AW_STEP_HINT_GAIN = "agentwarm.step.hint_gain_s"
"""Seconds from the mid-decode hint to the end of the LLM call whose output it read: the lead
reading mid-decode gained over reading the finished output; set with :data:`AW_STEP_HINT_NODE`."""
AW_STEP_MISS_REASON = "agentwarm.step.miss.reason"
"""A :class:`~agentwarm._spec.MissReason`: why a step with a previous step missed, or why a
branch hit did not find its whole prefetched prefix cached; absent otherwise. The
``agentwarm.step.miss.*`` attributes below are its details, each set when known."""
AW_STEP_MISS_CAUSE = "agentwarm.step.miss.cause"
"""The reason's finer cause (e.g. ``rate``, ``step_budget``, ``cautious``, ``running``)."""
AW_STEP_MISS_P = "agentwarm.step.miss.p"
"""The node's probability in the ranking that refused it."""
AW_STEP_MISS_PRICE = "agentwarm.step.miss.price"
"""``priced_out``: the price per wasted token the spend rule charged."""
AW_STEP_MISS_RANK = "agentwarm.step.miss.rank"
"""The node's rank in the ranking that refused it (0: the most likely)."""
AW_STEP_MISS_TOKEN = "agentwarm.step.miss.token"
"""``prefix_mismatch``: the first token index where the prefetched ids diverged."""
AW_STEP_MISS_MESSAGE = "agentwarm.step.miss.message"
"""``prefix_mismatch``: the index of the prompt's message that token fell in."""
AW_STEP_MISS_MISSING_TOKENS = "agentwarm.step.miss.missing_tokens"
"""``late`` / ``prefix_mismatch``: prefetched tokens the live request did not find cached."""
AW_PREFILL_SOURCE = "agentwarm.prefill.source"
"""The node whose step issued the prefill."""
AW_PREFILL_TARGET = "agentwarm.prefill.target"
AW_PREFILL_PROBABILITY = "agentwarm.prefill.probability"
AW_PREFILL_RANK = "agentwarm.prefill.rank"
"""Position in the predictor's ranking, 0 = the most likely candidate."""
AW_PREFILL_TOKENS = "agentwarm.prefill.tokens"
"""Length of the prefix sent to the engine."""
AW_PREFILL_COMPUTED_TOKENS = "agentwarm.prefill.computed_tokens"
"""Tokens the engine computed for this prefill (the rest were already cached)."""
AW_PREFILL_OUTCOME = "agentwarm.prefill.outcome"
"""A :class:`~agentwarm._spec.PrefetchOutcome`; every prefill span ends with one."""
AW_PREFILL_KIND = "agentwarm.prefill.kind"
"""A :class:`~agentwarm._spec.PrefetchKind`."""

# --- metric names -----------------------------------------------------------------------------
METRIC_PREFETCH_ISSUED = "agentwarm.prefetch.issued"
METRIC_PREFETCH_HITS = "agentwarm.prefetch.hits"
METRIC_PREFETCH_DROPPED = "agentwarm.prefetch.dropped"
METRIC_PREFETCH_WASTED_TOKENS = "agentwarm.prefetch.wasted_tokens"
METRIC_STEP_TTFT = "agentwarm.step.ttft"

TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0
)  # fmt: skip
"""Bucket bounds of the TTFT histogram (those of the GenAI ``time_to_first_token`` metric)."""
