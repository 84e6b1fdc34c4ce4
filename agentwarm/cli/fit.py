"""``agentwarm fit FILE[:WORKFLOW]``: pretrain a workflow's predictor on past traffic and save
it where ``agentwarm run`` loads it; ``agentwarm fit --gateway DIR``: the same for a gateway's
learned state (``agentwarm gateway --state-dir DIR``).

Sources: ``--trace FILE`` (the span lines ``agentwarm run --trace`` and ``agentwarm gateway
--trace`` write; no conversation in them, so their transitions are learned on the path alone)
and ``--conversations FILE`` (OpenAI-message JSON lines, as ``agentwarm bench --conversations``
reads them: every assistant turn is a step named by its tool, ``respond`` for text; learned
with what the conversation said at each step). The examples are made and learned by
:mod:`agentwarm.predictors.fit`.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer

from agentwarm.cli._errors import cli_errors
from agentwarm.errors import ConfigError
from agentwarm.predictors import PredictorStore, default_predictor, default_state_dir
from agentwarm.predictors.fit import (
    Example,
    FitResult,
    conversation_examples,
    fit,
    trace_examples,
)
from agentwarm.stats import StepSpan, TraceData, read_traces

__all__ = ("fit_command", "register")

_TRACE_FIX = (
    "--trace takes the span lines `agentwarm run --trace` / `agentwarm gateway --trace` write "
    "(conversations go to --conversations); fix or delete the line"
)


def _traces(paths: list[Path]) -> TraceData:
    data = read_traces(paths)
    if data.problems:
        raise ConfigError(f"{data.problems[0]}; {_TRACE_FIX}")
    return data


def _of(data: TraceData, workflow: str, skipped: Counter[str]) -> list[StepSpan]:
    """The steps of ``workflow``; the others counted as skipped."""
    for other, n in Counter(s.workflow for s in data.steps if s.workflow != workflow).items():
        skipped[f"step of another workflow ({other})"] += n
    return [s for s in data.steps if s.workflow == workflow]


def _fit_workflow(
    target: str, traces: list[Path], conversations: list[Path], state_dir: Path | None
) -> dict[str, Any]:
    from agentwarm.bench.conversations import load_conversations
    from agentwarm.runtime import load_workflow

    workflow = load_workflow(target)
    nodes = sorted(workflow.graph.nodes)
    skipped: Counter[str] = Counter()
    examples: list[Example] = []
    runs = 0
    if traces:
        data = _traces(traces)
        steps = _of(data, workflow.name, skipped)
        found, lost = trace_examples(steps, data.runs)
        examples += found
        skipped.update(lost)
        runs += len({s.run_id for s in steps})
    for path in conversations:
        convs = load_conversations(path)
        examples += conversation_examples([c.messages for c in convs], workflow.entry)
        runs += len(convs)
    store = PredictorStore(state_dir or default_state_dir())
    predictor = store.load(workflow.name, nodes, factory=default_predictor)
    result = fit(
        predictor,
        examples,
        nodes=nodes,
        candidates=lambda path: workflow.successors(path[-1]) if path else None,
    )
    result.skipped.update(skipped)
    _require(workflow.name, result)
    saved = store.save(workflow.name, predictor, nodes)
    return _report(workflow.name, runs, result, saved)


def _fit_gateway(gateway: Path, traces: list[Path], conversations: list[Path]) -> dict[str, Any]:
    from agentwarm.gateway.learner import MAX_PATH
    from agentwarm.gateway.state import GatewayState, load_state, save_state
    from agentwarm.gateway.tracing import GATEWAY_WORKFLOW

    if conversations:
        raise ConfigError(
            "--gateway learns from gateway traces only: a gateway's nodes are its heads, which "
            "conversation files do not name; drop --conversations (or fit a workflow file)"
        )
    state = load_state(gateway, default_predictor) or GatewayState.empty(default_predictor)
    skipped: Counter[str] = Counter()
    data = _traces(traces)
    steps = _of(data, GATEWAY_WORKFLOW, skipped)
    examples, lost = trace_examples(steps, data.runs, first=True, max_path=MAX_PATH)
    skipped.update(lost)
    heads = {head.name for head in state.heads}
    result = fit(state.predictor, examples, nodes=heads or None)
    result.skipped.update(skipped)
    _require(GATEWAY_WORKFLOW, result)
    saved = save_state(gateway, state)
    return _report(GATEWAY_WORKFLOW, len({s.run_id for s in steps}), result, saved)


def _require(workflow: str, result: FitResult) -> None:
    """Nothing is saved when nothing was learned: say why."""
    if not result.transitions:
        why = "; ".join(f"{n} skipped: {reason}" for reason, n in result.skipped.most_common(3))
        raise ConfigError(
            f"no transition of workflow {workflow!r} to learn in the given files"
            + (f" ({why})" if why else "")
            + "; give the traces or conversations of this workflow"
        )


def _report(workflow: str, runs: int, result: FitResult, saved: Path) -> dict[str, Any]:
    return {"workflow": workflow, "runs": runs, **result.to_dict(), "state": str(saved)}


def _show(out: dict[str, Any]) -> None:
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.0%}"

    typer.echo(
        f"{out['workflow']}: learned {out['transitions']} transitions of {out['runs']} runs; "
        f"top-1 before learning each: {pct(out['top1'])} (path only: {pct(out['top1_path'])})"
    )
    for reason, n in out["skipped"].items():
        typer.echo(f"skipped {n}: {reason}")
    typer.echo(f"saved {out['state']}")


def fit_command(
    target: Annotated[
        str | None,
        typer.Argument(metavar="[FILE[:WORKFLOW]]", help="The workflow whose predictor to fit."),
    ] = None,
    trace: Annotated[
        list[Path] | None,
        typer.Option("--trace", help="Trace file of `agentwarm run/gateway --trace` (repeatable)."),
    ] = None,
    conversations: Annotated[
        list[Path] | None,
        typer.Option("--conversations", help="OpenAI-message JSONL, one per line (repeatable)."),
    ] = None,
    state_dir: Annotated[
        Path | None, typer.Option("--state-dir", help="Learned predictor state directory.")
    ] = None,
    gateway: Annotated[
        Path | None,
        typer.Option("--gateway", metavar="DIR", help="Fit this gateway state dir instead."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    debug: Annotated[
        bool, typer.Option("--debug", "-v", help="Print the traceback of every error.")
    ] = False,
) -> None:
    """Pretrain a predictor on traces or conversations; save it where runs load it."""
    with cli_errors(debug=debug, json_failure=as_json):
        traces, convs = list(trace or ()), list(conversations or ())
        if not traces and not convs:
            raise ConfigError("nothing to fit: give --trace FILE or --conversations FILE")
        if (target is None) == (gateway is None):
            raise ConfigError(
                "give the workflow file to fit (FILE[:WORKFLOW]), or --gateway DIR for a "
                "gateway's state, not both"
            )
        if gateway is not None:
            if state_dir is not None:
                raise ConfigError("--state-dir is for workflows; a gateway's is --gateway DIR")
            out = _fit_gateway(gateway, traces, convs)
        else:
            assert target is not None
            out = _fit_workflow(target, traces, convs, state_dir)
        if as_json:
            typer.echo(json.dumps(out))
        else:
            _show(out)


def register(app: typer.Typer) -> None:
    app.command("fit")(fit_command)
