"""What a warm-up plan is mined from (``agentwarm warmup plan --from PATH``): the requests read
from request logs and agentwarm traces.

Each ``--from`` file's kind is told by its first non-blank line:

* a **request log**: JSON lines, each an OpenAI chat request body ``{"messages": [...],
  "tools": [...]}`` (other keys ignored) or ``{"input_ids": [...]}``, with an optional
  ``"time"`` / ``"timestamp"`` (unix seconds, or an ISO 8601 string; UTC when it has no zone);
* an **agentwarm trace**: the span lines ``agentwarm run --trace`` and ``agentwarm gateway
  --trace`` write (read by :func:`~agentwarm.stats.traces.read_traces`). A trace holds node
  names and step counts, not prompts: each step is one request of its node's *head* (its leading
  system messages and its tools), taken from a gateway's state dir (``--state``: the heads in
  its ``gateway.json``) or from the workflow that ran (``--workflow``: each node's system
  message and tools, as the runtime renders them).

A file that is not a regular one (a FIFO, a device, a directory) is refused before it is opened;
a request's ``messages`` and ``tools`` are checked as a chat request's
(:mod:`agentwarm.chat.request`: roles, content, function tools, nesting depth), so what the chat
endpoint would refuse is never mined into a plan.

``since_s`` keeps the records of the last ``since_s`` seconds: a request's time when it has one
(else its file's modification time), a span's end time (else its file's).
"""

from __future__ import annotations

import json
import math
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agentwarm import _jsonfile
from agentwarm.chat import Message
from agentwarm.chat.request import chat_messages, check_depth, check_tools
from agentwarm.errors import ConfigError
from agentwarm.warmup.types import special_kind

__all__ = ("ChatRecord", "Records", "read_sources")

_REQUEST_FORMAT = (
    'each line is an OpenAI chat request body {"messages": [...], "tools": [...]} or '
    '{"input_ids": [...]}, optionally with "time" (unix seconds or ISO 8601)'
)
_HEADS_FIX = (
    "agentwarm traces hold node names and step counts, not prompts: give the nodes' heads "
    "with --state DIR (the state dir of the gateway that wrote the trace) or --workflow FILE "
    "(the workflow that was run)"
)


@dataclass(frozen=True, slots=True)
class ChatRecord:
    """``count`` requests that are ``messages`` with ``tools`` (``node``: their node, when a
    trace named it)."""

    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    count: int = 1
    node: str | None = None


@dataclass(slots=True)
class Records:
    """Every request read: chat requests and token-id requests."""

    chats: list[ChatRecord] = field(default_factory=list)
    ids: list[tuple[int, ...]] = field(default_factory=list)

    @property
    def total(self) -> int:
        """How many requests were read."""
        return sum(c.count for c in self.chats) + len(self.ids)


# --- telling kinds apart -------------------------------------------------------------------


def _first_object(path: Path) -> tuple[int, Any]:
    """The first non-blank line of ``path`` as JSON, and its number (a path that is not a
    regular file is refused before it is opened: a FIFO would block forever)."""
    try:
        kind = special_kind(path)
        if kind is not None:
            raise ConfigError(f"--from {path}: is {kind}; give the log or trace file")
        with path.open("rb") as fh:
            for number, line in enumerate(fh, start=1):
                if line.strip():
                    try:
                        return number, _jsonfile.loads(line)
                    except _jsonfile.JSONTextError as exc:
                        raise ConfigError(
                            f"{path}:{number}: {exc}; --from takes a request log "
                            f"({_REQUEST_FORMAT}) or an agentwarm trace (agentwarm run/gateway "
                            "--trace)"
                        ) from None
    except IsADirectoryError:
        raise ConfigError(f"--from {path}: is a directory; give the log or trace file") from None
    except OSError as exc:
        raise ConfigError(f"--from {path}: cannot read it ({exc.strerror or exc})") from None
    raise ConfigError(f"--from {path}: the file is empty; give a request log or a trace")


def _kind(path: Path) -> str:
    number, obj = _first_object(path)
    if isinstance(obj, dict):
        if {"share", "tokens", "count"} <= obj.keys():
            raise ConfigError(
                f"--from {path}: is a warm-up plan (what agentwarm warmup plan writes), not "
                "traffic; give the request logs or traces to mine"
            )
        if "messages" in obj or "input_ids" in obj:
            return "requests"
        if "resourceSpans" in obj or (
            isinstance(obj.get("name"), str) and ("spanId" in obj or "attributes" in obj)
        ):
            return "traces"
        if obj.get("format") == "agentwarm.gateway":
            raise ConfigError(
                f"--from {path}: is a gateway's state file; give it with --state "
                f"{path.parent} and its --trace file with --from"
            )
    raise ConfigError(
        f"{path}:{number}: neither a request nor a trace span; --from takes a request log "
        f"({_REQUEST_FORMAT}) or an agentwarm trace (agentwarm run/gateway --trace)"
    )


# --- request logs --------------------------------------------------------------------------


def _time(value: Any, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    if isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return moment.timestamp()
    raise ConfigError(
        f"{where}: 'time' {value!r} is neither unix seconds nor an ISO 8601 time "
        "(e.g. 2026-12-01T09:30:00Z); fix it or drop the field"
    )


def _messages(value: Any, where: str) -> tuple[Message, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in value)
    ):
        raise ConfigError(
            f"{where}: 'messages' must be a non-empty list of objects with a 'role'; "
            + _REQUEST_FORMAT
        )
    _as_request(where, messages=value)
    return tuple(value)


def _tools(value: Any, where: str) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        raise ConfigError(f"{where}: 'tools' must be a list of objects; {_REQUEST_FORMAT}")
    _as_request(where, tools=value)
    return tuple(value)


def _as_request(
    where: str, *, messages: list[Any] | None = None, tools: list[Any] | None = None
) -> None:
    """The checks of :mod:`agentwarm.chat.request` (what the chat endpoint refuses is not
    mined either); a :class:`ConfigError` naming the line."""
    try:
        if messages is not None:
            check_depth(messages, "'messages'")
            chat_messages(messages)
        if tools is not None:
            check_depth(tools, "'tools'")
            check_tools(tools)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}; {_REQUEST_FORMAT}") from None


def _ids(value: Any, where: str) -> tuple[int, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value)
    ):
        raise ConfigError(
            f"{where}: 'input_ids' must be a non-empty list of token ids (integers >= 0)"
        )
    return tuple(value)


def _read_requests(path: Path, records: Records, cutoff: float | None) -> None:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"--from {path}: cannot read it ({exc.strerror or exc})") from None
    mtime = path.stat().st_mtime
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = _jsonfile.loads(line)
        except _jsonfile.JSONTextError as exc:
            raise ConfigError(f"{where}: {exc}; {_REQUEST_FORMAT}") from None
        if not isinstance(obj, dict) or ("messages" in obj) == ("input_ids" in obj):
            raise ConfigError(
                f"{where}: expected an object with exactly one of 'messages' and 'input_ids'; "
                + _REQUEST_FORMAT
            )
        stamp = obj.get("time", obj.get("timestamp"))
        when = mtime if stamp is None else _time(stamp, where)
        if "messages" in obj:
            messages, tools = _messages(obj["messages"], where), _tools(obj.get("tools"), where)
            if cutoff is None or when >= cutoff:
                records.chats.append(ChatRecord(messages, tools))
        else:
            ids = _ids(obj["input_ids"], where)
            if cutoff is None or when >= cutoff:
                records.ids.append(ids)


# --- traces and the heads of their nodes ---------------------------------------------------

Head = tuple[tuple[Message, ...], tuple[dict[str, Any], ...]]


def _state_heads(state_dir: Path) -> dict[str, Head]:
    """The heads a gateway saved in ``state_dir/gateway.json`` (``HeadRegistry.to_dict``)."""
    path = state_dir / "gateway.json"
    fix = "give the --state dir of the gateway that wrote the trace (agentwarm gateway --state-dir)"
    try:
        data = _jsonfile.loads(path.read_bytes())
    except OSError as exc:
        raise ConfigError(
            f"--state {state_dir}: cannot read {path} ({exc.strerror}); {fix}"
        ) from None
    except _jsonfile.JSONTextError as exc:
        raise ConfigError(f"--state {state_dir}: {path}: {exc}; {fix}") from None
    registry = data.get("heads") if isinstance(data, dict) else None
    heads = registry.get("heads") if isinstance(registry, dict) else None
    if (
        not isinstance(data, dict)
        or data.get("format") != "agentwarm.gateway"
        or not isinstance(heads, list)
    ):
        raise ConfigError(f"--state {state_dir}: {path} is not a gateway's state; {fix}")
    out: dict[str, Head] = {}
    for i, head in enumerate(heads):
        name = head.get("name") if isinstance(head, dict) else None
        system, tools = (
            head.get(k) if isinstance(head, dict) else None for k in ("system", "tools")
        )
        if (
            not isinstance(name, str)
            or not isinstance(system, list)
            or not isinstance(tools, list)
            or not all(isinstance(x, dict) for x in [*system, *tools])
        ):
            raise ConfigError(
                f"--state {state_dir}: {path}: heads[{i}] needs a 'name' and 'system' and "
                f"'tools' lists of objects; {fix}"
            )
        out[name] = (tuple(system), tuple(tools))
    return out


def _workflow_heads(workflow: Path) -> dict[str, Head]:
    """Each node's head as the runtime renders it: its system message and its tools."""
    from agentwarm.runtime import load_workflow
    from agentwarm.runtime.prompt import system_messages

    graph = load_workflow(workflow)
    return {
        name: (tuple(system_messages(spec.system)), tuple(spec.tools))
        for name, spec in sorted(graph.nodes.items())
    }


def _span_end_ns(span: Any) -> int | None:
    value = span.get("endTimeUnixNano") if isinstance(span, dict) else None
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def _recent_copy(path: Path, cutoff: float, folder: Path) -> Path:
    """A copy of trace ``path`` with the spans that ended before ``cutoff`` blanked out (line
    numbers kept, so that problems still name the right line)."""
    cutoff_ns = int(cutoff * 1e9)
    mtime_ns = int(path.stat().st_mtime * 1e9)
    lines: list[bytes] = []
    with path.open("rb") as fh:
        for line in fh:
            try:
                obj = _jsonfile.loads(line) if line.strip() else None
            except _jsonfile.JSONTextError:
                lines.append(line.rstrip(b"\n"))  # left for the reader to report
                continue
            if isinstance(obj, dict) and isinstance(obj.get("resourceSpans"), list):
                for rs in obj["resourceSpans"]:
                    for ss in (rs.get("scopeSpans") or []) if isinstance(rs, dict) else []:
                        if isinstance(ss, dict) and isinstance(ss.get("spans"), list):
                            ss["spans"] = [
                                s for s in ss["spans"] if (_span_end_ns(s) or mtime_ns) >= cutoff_ns
                            ]
                lines.append(json.dumps(obj).encode())
            elif obj is not None and (_span_end_ns(obj) or mtime_ns) < cutoff_ns:
                lines.append(b"")
            else:
                lines.append(line.rstrip(b"\n"))
    copy = folder / f"{len(list(folder.iterdir()))}.jsonl"
    copy.write_bytes(b"\n".join(lines) + b"\n")
    return copy


def _read_traces(
    paths: Sequence[Path],
    records: Records,
    cutoff: float | None,
    state_dir: Path | None,
    workflow: Path | None,
) -> None:
    from agentwarm.stats.traces import read_traces

    with tempfile.TemporaryDirectory(prefix="agentwarm-plan-") as tmp:
        read = (
            list(paths) if cutoff is None else [_recent_copy(p, cutoff, Path(tmp)) for p in paths]
        )
        data = read_traces(read)
    names = dict(zip(map(str, read), map(str, paths), strict=True))
    for problem in data.problems:
        where = f"{names.get(problem.path, problem.path)}:{problem.line}"
        warnings.warn(f"skipped {where}: {problem.message}", UserWarning, stacklevel=3)
    steps = Counter(step.node for step in data.steps)
    if not steps:
        return
    if state_dir is None and workflow is None:
        raise ConfigError(f"--from {paths[0]}: {_HEADS_FIX}")
    heads: dict[str, Head] = {}
    if state_dir is not None:
        heads.update(_state_heads(state_dir))
    if workflow is not None:
        heads.update(_workflow_heads(workflow))
    missing = sorted(node for node in steps if node not in heads)
    if missing:
        warnings.warn(
            f"{sum(steps[n] for n in missing)} traced steps of nodes without a head in "
            f"--state/--workflow ({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''}) "
            "count in the shares but give no prefix",
            UserWarning,
            stacklevel=3,
        )
    for node, count in sorted(steps.items()):
        system, tools = heads.get(node, ((), ()))
        records.chats.append(ChatRecord(system, tools, count=count, node=node))


def read_sources(
    paths: Sequence[Path],
    *,
    since_s: float | None = None,
    state_dir: Path | None = None,
    workflow: Path | None = None,
    now: float | None = None,
) -> Records:
    """The requests of ``paths`` (see the module docstring). Raises :class:`ConfigError` naming
    the file (and line) and the fix for anything unusable."""
    if not paths:
        raise ConfigError("nothing to mine: give request logs or traces with --from PATH")
    cutoff = None if since_s is None else (time.time() if now is None else now) - since_s
    records = Records()
    traces: list[Path] = []
    for path in map(Path, paths):
        if _kind(path) == "traces":
            traces.append(path)
        else:
            _read_requests(path, records, cutoff)
    if traces:
        _read_traces(traces, records, cutoff, state_dir, workflow)
    return records
