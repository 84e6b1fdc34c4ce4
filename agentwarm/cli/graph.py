"""``agentwarm graph FILE[:WORKFLOW]``: the workflow graph with what agentwarm learned about it;
``agentwarm graph --trace F``: the graph a trace shows, for a workflow declared nowhere (the
gateway's)."""

from __future__ import annotations

import io
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from agentwarm.cli._errors import cli_errors
from agentwarm.errors import ConfigError
from agentwarm.runtime import load_workflow
from agentwarm.viz import (
    GraphInfo,
    graph_info,
    render_dot,
    render_mermaid,
    render_png,
    render_svg,
    render_text,
    trace_graph_info,
)

if TYPE_CHECKING:
    from agentwarm.predictors.base import Predictor
    from agentwarm.runtime import Workflow
    from agentwarm.stats import TraceData, TraceStats

__all__ = ("Format", "graph", "learned_probabilities", "register")


class Format(StrEnum):
    TEXT = "text"
    DOT = "dot"
    MERMAID = "mermaid"
    SVG = "svg"
    PNG = "png"


_SUFFIXES = {".txt": Format.TEXT, ".dot": Format.DOT, ".gv": Format.DOT, ".mmd": Format.MERMAID,
             ".svg": Format.SVG, ".png": Format.PNG}  # fmt: skip


def learned_probabilities(
    workflow: Workflow, state_dir: Path
) -> dict[tuple[str, str], float] | None:
    """First-order ``P(next | node)`` over each node's declared successors, from the predictor
    learned in ``state_dir``; ``None`` when nothing was learned for this workflow yet.

    For the default predictor this is its path experts' order-1 estimate (the counts of
    what followed ``node`` anywhere in a run, blended with overall successor frequencies), i.e.
    the marginal over all the paths that reached ``node``. Other predictors are asked with the
    one-node path ``(node,)``.
    """
    from agentwarm.predictors import default_predictor
    from agentwarm.predictors.store import PredictorStore

    store = PredictorStore(state_dir)
    if not store.exists(workflow.name):
        return None
    predictor = _first_order_view(
        store.load(workflow.name, nodes=sorted(workflow.graph.nodes), factory=default_predictor)
    )
    probs: dict[tuple[str, str], float] = {}
    for node in workflow.nodes:
        candidates = workflow.successors(node)
        for target, p in predictor.predict((node,), {}, candidates=candidates):
            probs[(node, target)] = float(p)
    return probs


def _first_order_view(predictor: Predictor) -> Predictor:
    from agentwarm.predictors import ContentPredictor, MarkovPredictor

    if isinstance(predictor, ContentPredictor):  # the graph shows the path experts' view
        predictor = predictor.path
    if not isinstance(predictor, MarkovPredictor):
        return predictor
    return predictor.first_order_view()


def _read(traces: list[Path]) -> TraceData:
    from agentwarm.cli.stats import print_problems
    from agentwarm.stats import read_traces

    data = read_traces(traces)
    print_problems(data.problems)
    return data


def _stats(workflow: Workflow, traces: list[Path]) -> TraceStats | None:
    from agentwarm.stats import compute_stats

    data = _read(traces)
    st = compute_stats(data.steps, data.prefills, workflow=workflow.name, runs=data.runs)
    if not st.steps:
        typer.echo(f"note: no steps of workflow '{workflow.name}' in the given traces", err=True)
    return st


def _traced_graph(traces: list[Path], name: str | None) -> GraphInfo:
    """The graph of one workflow's traced runs (:func:`agentwarm.viz.trace_graph_info`):
    ``name``, else the only workflow the traces hold."""
    from agentwarm.stats import compute_stats

    data = _read(traces)
    names = sorted({s.workflow for s in data.steps})
    given = ", ".join(str(t) for t in traces)
    if not names:
        raise ConfigError(
            f"--trace {given}: no workflow steps in the trace; trace runs with "
            "`agentwarm run --trace` or `agentwarm gateway --trace`"
        )
    if name is None and len(names) > 1:
        raise ConfigError(
            f"--trace {given}: the trace holds {len(names)} workflows ({', '.join(names)}); "
            "choose one with --workflow NAME"
        )
    name = name if name is not None else names[0]
    if name not in names:
        raise ConfigError(
            f"--workflow {name}: no steps of it in the trace; it holds {', '.join(names)}"
        )
    stats = compute_stats(data.steps, data.prefills, workflow=name, runs=data.runs)
    return trace_graph_info(stats)


def _default_state_dir() -> Path:
    from agentwarm.predictors.store import default_state_dir

    return Path(default_state_dir())


def graph(
    target: Annotated[
        str | None,
        typer.Argument(
            metavar="FILE[:WORKFLOW]",
            help="Workflow file; without it, the graph the --trace file(s) show.",
        ),
    ] = None,
    state_dir: Annotated[
        Path | None, typer.Option("--state-dir", help="Learned predictor state directory.")
    ] = None,
    trace: Annotated[
        list[Path] | None,
        typer.Option(
            "--trace",
            help="Trace file(s) for observed hit rates; without FILE, the graph they show "
            "(repeatable).",
        ),
    ] = None,
    workflow_name: Annotated[
        str | None,
        typer.Option(
            "--workflow",
            help="Without FILE: the traced workflow to draw (needed when the trace holds several).",
        ),
    ] = None,
    fmt: Annotated[
        Format | None,
        typer.Option(
            "--format",
            "-f",
            help="text, dot, mermaid, svg or png (default: from -o, else text).",
        ),
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="Write to this file (png needs it).")
    ] = None,
) -> None:
    """Draw the workflow graph: learned transition probabilities and observed branch hit rates.

    Without FILE, draw the graph the traces show (observed transitions and their shares)."""
    with cli_errors():
        _check_arguments(target, trace, workflow_name, state_dir)
        if fmt is None and output is not None and output.suffix.lower() not in _SUFFIXES:
            what = f"unknown extension {output.suffix!r}" if output.suffix else "no extension"
            raise ConfigError(
                f"-o {output}: {what}; use {', '.join(_SUFFIXES)} "
                f"(or give --format {'|'.join(Format)})"
            )
        workflow = load_workflow(target) if target is not None else None
        kind = fmt or (_SUFFIXES.get(output.suffix.lower()) if output else None) or Format.TEXT
        if kind is Format.PNG and output is None:
            raise ConfigError("--format png writes a binary file: give -o FILE.png")
        if workflow is None:
            assert trace
            info = _traced_graph(trace, workflow_name)
        else:
            info = _declared_graph(workflow, state_dir, trace)
        if kind is Format.PNG:
            assert output is not None
            render_png(info, output)
        elif kind is Format.TEXT and output is None:
            Console(highlight=False).print(render_text(info))
        else:
            body = {Format.TEXT: _as_text, Format.DOT: render_dot, Format.MERMAID: render_mermaid,
                    Format.SVG: render_svg}[kind]  # fmt: skip
            text = body(info)
            if output is None:
                typer.echo(text, nl=False)
            else:
                output.write_text(text, encoding="utf-8")
        if output is not None:
            typer.echo(f"wrote {output}", err=True)


def _check_arguments(
    target: str | None, trace: list[Path] | None, name: str | None, state_dir: Path | None
) -> None:
    if target is None and not trace:
        raise ConfigError(
            "nothing to draw: give a workflow file (agentwarm graph FILE[:WORKFLOW]) or a trace "
            "(agentwarm graph --trace TRACE.jsonl)"
        )
    if target is not None and name is not None:
        raise ConfigError(
            f"--workflow {name} is for a graph drawn from traces alone; with a workflow file "
            f"name the workflow as {target.partition(':')[0]}:{name}"
        )
    if target is None and state_dir is not None:
        raise ConfigError(
            "--state-dir needs a workflow file (learned state is kept per declared workflow); "
            "without FILE the graph shows the transitions observed in the trace"
        )


def _declared_graph(
    workflow: Workflow, state_dir: Path | None, trace: list[Path] | None
) -> GraphInfo:
    sdir = state_dir or _default_state_dir()
    probs = learned_probabilities(workflow, sdir)
    if probs is None:
        typer.echo(
            f"note: nothing learned yet for '{workflow.name}' in {sdir}; "
            "`agentwarm run` learns transition probabilities",
            err=True,
        )
    return graph_info(workflow, probs, _stats(workflow, trace) if trace else None)


def _as_text(info: GraphInfo) -> str:
    buf = io.StringIO()
    Console(file=buf, width=120, highlight=False).print(render_text(info))
    return buf.getvalue()


def register(app: typer.Typer) -> None:
    """Add the ``graph`` command to ``app``."""
    app.command("graph")(graph)
