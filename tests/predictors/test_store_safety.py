"""Issue 10, item 13: any invalid state file is set aside with a warning, never a crash.

Every corruption below is written over a valid state file of the default predictor (a
:class:`~agentwarm.predictors.ContentPredictor`: its path experts' state under ``path``, its
own weights and example memory beside); loading it must not raise, must move the exact bytes to
``support.corrupt-*.json``, warn with both paths, and restart learning (a fresh predictor that
saves and loads again cleanly).
"""

from __future__ import annotations

import base64
import json
import os
import struct
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentwarm import load_workflow
from agentwarm.predictors import (
    END,
    FORMAT_VERSION,
    ContentPredictor,
    FirstOrderPredictor,
    PredictorStateWarning,
    PredictorStore,
    StepContext,
    default_predictor,
    node_fingerprint,
    path_predictor,
)
from agentwarm.predictors import store as store_module

NODES = ["triage", "billing", "refund", END]
HUGE = "9" * 400  # an integer JSON decodes exactly, too large for a float

Doc = dict[str, Any]


BILL = StepContext(first_user="my bill", last_user="my bill is wrong")
REFUND = StepContext(first_user="refund", last_user="refund my order", last_tool_result="[]")


def trained() -> ContentPredictor:
    """24 path observations, 8 of them in context (so weights and memory are saved too)."""
    model = default_predictor()
    for i in range(6):
        if i < 2:
            model.observe_in(["triage"], "billing", BILL)
            model.observe_in(["triage", "billing"], END, BILL)
            model.observe_in(["triage"], "refund", REFUND)
            model.observe_in(["triage", "refund"], END, REFUND)
        else:
            model.observe(["triage"], "billing")
            model.observe(["triage", "billing"], END)
            model.observe(["triage"], "refund")
            model.observe(["triage", "refund"], END)
    assert (model.observations, model.path.observations) == (8, 24)
    return model


def with_predictor(**fields: Any) -> Callable[[Doc, bytes], bytes]:
    """A valid document whose predictor state has ``fields`` replaced (``...``: removed)."""

    def corrupt(doc: Doc, raw: bytes) -> bytes:
        state = {**doc["predictor"], **fields}
        state = {k: v for k, v in state.items() if v is not ...}
        return json.dumps({**doc, "predictor": state}).encode()

    return corrupt


def with_path(**fields: Any) -> Callable[[Doc, bytes], bytes]:
    """A valid document whose path experts' state has ``fields`` replaced (``...``: removed)."""

    def corrupt(doc: Doc, raw: bytes) -> bytes:
        path = {**doc["predictor"]["path"], **fields}
        path = {k: v for k, v in path.items() if v is not ...}
        return json.dumps({**doc, "predictor": {**doc["predictor"], "path": path}}).encode()

    return corrupt


def with_memory(**fields: Any) -> Callable[[Doc, bytes], bytes]:
    """A valid document whose example memory has ``fields`` replaced."""

    def corrupt(doc: Doc, raw: bytes) -> bytes:
        memory = {**doc["predictor"]["memory"], **fields}
        return json.dumps({**doc, "predictor": {**doc["predictor"], "memory": memory}}).encode()

    return corrupt


def with_weights(transform: Callable[[Doc], dict[str, Any]]) -> Callable[[Doc, bytes], bytes]:
    """A valid document whose predictor fields ``transform(predictor state)`` replaced."""

    def corrupt(doc: Doc, raw: bytes) -> bytes:
        state = doc["predictor"]
        return json.dumps({**doc, "predictor": {**state, **transform(state)}}).encode()

    return corrupt


def _floats(values: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")


def with_doc(**fields: Any) -> Callable[[Doc, bytes], bytes]:
    def corrupt(doc: Doc, raw: bytes) -> bytes:
        out = {k: v for k, v in {**doc, **fields}.items() if v is not ...}
        return json.dumps(out).encode()

    return corrupt


def replace_text(old: str, new: str) -> Callable[[Doc, bytes], bytes]:
    """Edit the JSON text itself, for values ``json.dumps`` cannot write (``1e4000``, huge
    integers as literals)."""

    def corrupt(doc: Doc, raw: bytes) -> bytes:
        text = json.dumps(doc)
        assert old in text, old
        return text.replace(old, new, 1).encode()

    return corrupt


def first_count(value: str) -> Callable[[Doc, bytes], bytes]:
    """Set the first count of the first Markov context to the JSON literal ``value``."""

    def corrupt(doc: Doc, raw: bytes) -> bytes:
        path = doc["predictor"]["path"]
        context, table = path["contexts"][0]
        name = next(iter(table))
        marker = "__COUNT__"
        entries = [[context, {**table, name: marker}], *path["contexts"][1:]]
        state = {**doc["predictor"], "path": {**path, "contexts": entries}}
        text = json.dumps({**doc, "predictor": state})
        return text.replace(f'"{marker}"', value, 1).encode()

    return corrupt


CORRUPTIONS: dict[str, Callable[[Doc, bytes], bytes]] = {
    # Numbers JSON decodes to values a float cannot hold, or that are not numbers at all.
    "observations 1e4000 (inf)": replace_text('"observations": 24', '"observations": 1e4000'),
    "observations huge int": replace_text('"observations": 24', f'"observations": {HUGE}'),
    "observations -1e4000": replace_text('"observations": 24', '"observations": -1e4000'),
    "observations NaN": replace_text('"observations": 24', '"observations": NaN'),
    "observations 2**64": with_path(observations=2**64),
    "observations float": with_path(observations=24.0),
    "observations negative": with_path(observations=-3),
    "observations bool": with_path(observations=True),
    "observations string": with_path(observations="24"),
    "count 1e4000 (inf)": first_count("1e4000"),
    "count huge int": first_count(HUGE),
    "count NaN": first_count("NaN"),
    "count -Infinity": first_count("-Infinity"),
    "count negative": first_count("-2.5"),
    "count bool": first_count("true"),
    "count string": first_count('"3"'),
    "count null": first_count("null"),
    "half_life 1e4000": replace_text('"half_life": 200.0', '"half_life": 1e4000'),
    "half_life huge int": replace_text('"half_life": 200.0', f'"half_life": {HUGE}'),
    "backoff NaN": replace_text('"backoff": 2.0', '"backoff": NaN'),
    "max_order huge int": replace_text('"max_order": 3', f'"max_order": {HUGE}'),
    "max_contexts huge int": replace_text('"max_contexts": 4096', f'"max_contexts": {HUGE}'),
    "weights inf": with_path(weights=[1.0, 0, 0, 0, float("inf")]),
    "weights wrong length": with_path(weights=[1.0]),
    "feature key huge int": replace_text('["triage", 1]', f'["triage", {HUGE}]'),
    # Wrong types and shapes.
    "contexts not a list": with_path(contexts={"triage": {"billing": 1}}),
    "context entry too short": with_path(contexts=[[["triage"]]]),
    "known not a list": with_predictor(known="billing"),
    "path known not a list": with_path(known="billing"),
    "path not an object": with_predictor(path=[1, 2]),
    "path of another kind": with_predictor(path=FirstOrderPredictor().to_dict()),
    "predictor not an object": with_doc(predictor=[1, 2]),
    "nodes not a list": with_doc(nodes="triage"),
    "unknown top-level key": with_doc(extra=1),
    "unknown predictor key": with_predictor(extra=1),
    "unknown path key": with_path(extra=1),
    # Missing keys.
    "missing observations": with_predictor(observations=...),
    "missing path observations": with_path(observations=...),
    "missing contexts": with_path(contexts=...),
    "missing path": with_predictor(path=...),
    "missing memory": with_predictor(memory=...),
    "missing predictor": with_doc(predictor=...),
    "missing nodes": with_doc(nodes=...),
    "missing version": with_doc(version=...),
    "missing format": with_doc(format=...),
    "missing workflow": with_doc(workflow=...),
    "missing fingerprint": with_doc(fingerprint=...),
    "predictor without kind": with_predictor(kind=...),
    # Not a predictor file of this version.
    "version 1": with_doc(version=1),
    "version next": with_doc(version=FORMAT_VERSION + 1),
    "version string": with_doc(version=str(FORMAT_VERSION)),
    "version 1e4000": replace_text(f'"version": {FORMAT_VERSION}', '"version": 1e4000'),
    "version huge int": replace_text(f'"version": {FORMAT_VERSION}', f'"version": {HUGE}'),
    "other format": with_doc(format="x"),
    "other kind": with_doc(predictor=FirstOrderPredictor().to_dict()),
    # Unknown node names.
    "other node set": with_doc(
        nodes=["sales", "triage"], fingerprint=node_fingerprint(["sales", "triage"])
    ),
    "fingerprint not hex": with_doc(fingerprint="zz"),
    "nodes unsorted": lambda doc, raw: with_doc(nodes=doc["nodes"][::-1])(doc, raw),
    "nodes repeated": lambda doc, raw: with_doc(nodes=[*doc["nodes"], doc["nodes"][0]])(doc, raw),
    # Saved for another workflow.
    "other workflow": with_doc(workflow="sales"),
    "workflow not a string": with_doc(workflow=["support"]),
    "known names a removed node": lambda doc, raw: with_predictor(
        known=[*doc["predictor"]["known"], "sales"]
    )(doc, raw),
    "path knows a removed node": lambda doc, raw: with_path(
        known=[*doc["predictor"]["path"]["known"], "sales"]
    )(doc, raw),
    # The content model's own state: weights, offsets, example memory.
    "content observations negative": with_predictor(observations=-1),
    "content offsets inf": with_predictor(offsets=[1.0, float("inf")]),
    "content offsets one number": with_predictor(offsets=[1.0]),
    "content buckets zero": with_predictor(buckets=0),
    "content rows not ascending": with_weights(lambda p: {"rows": p["rows"][::-1]}),
    "content row repeated": with_weights(lambda p: {"rows": [p["rows"][0], *p["rows"]]}),
    "content row beyond buckets": with_weights(lambda p: {"rows": [*p["rows"][:-1], 1 << 14]}),
    "content data size": with_weights(lambda p: {"data": p["data"][:-8]}),
    "content data not base64": with_weights(lambda p: {"data": "!" + p["data"][1:]}),
    "content weights NaN": with_weights(
        lambda p: {"data": _floats([float("nan")] * (len(p["rows"]) * len(p["classes"])))}
    ),
    "content too many classes": with_predictor(max_classes=1),
    "content class repeated": with_weights(lambda p: {"classes": [p["classes"][0]] * 2}),
    "content class not a node": with_weights(lambda p: {"classes": ["sales", *p["classes"][1:]]}),
    "memory mask not hex": with_weights(
        lambda p: {"memory": {**p["memory"], "examples": [["triage", "^", "xyz", "billing"]]}}
    ),
    "memory example too short": with_memory(examples=[["triage", "^", "ff"]]),
    "memory next not a node": with_memory(examples=[["triage", "^", "ff", "sales"]]),
    "memory per_node zero": with_memory(per_node=0),
    "memory power NaN": replace_text('"power": 3.0', '"power": NaN'),
    # Not JSON at all, or not an object.
    "truncated": lambda doc, raw: raw[: len(raw) // 2],
    "empty": lambda doc, raw: b"",
    "not utf-8": lambda doc, raw: b"\xff\xfe" + raw,
    "deeply nested": lambda doc, raw: b"[" * 100_000 + b"]" * 100_000,
    "top level list": lambda doc, raw: b"[1, 2, 3]",
    "top level string": lambda doc, raw: b'"support"',
    "top level number": lambda doc, raw: b"1e4000",
    "top level null": lambda doc, raw: b"null",
}


def _valid(tmp_path: Path) -> tuple[Path, Doc, bytes]:
    path = PredictorStore(tmp_path).save("support", trained(), nodes=NODES)
    raw = path.read_bytes()
    return path, json.loads(raw), raw


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_invalid_file_is_set_aside_and_learning_restarts(tmp_path: Path, case: str) -> None:
    path, doc, raw = _valid(tmp_path)
    bad = CORRUPTIONS[case](doc, raw)
    assert bad != raw
    path.write_bytes(bad)

    store = PredictorStore(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fresh = store.load("support", nodes=NODES)  # must not raise

    messages = [str(w.message) for w in caught if issubclass(w.category, PredictorStateWarning)]
    assert len(messages) == 1, [str(w.message) for w in caught]
    aside = sorted(tmp_path.glob("support.corrupt-*.json"))
    assert len(aside) == 1
    assert aside[0].read_bytes() == bad  # set aside byte for byte
    assert str(path) in messages[0] and str(aside[0]) in messages[0]  # both paths named
    assert not path.exists()

    assert isinstance(fresh, ContentPredictor)
    assert fresh.observations == 0 and fresh.path.observations == 0
    assert fresh.path.experts == path_predictor().experts
    fresh.observe_in(["triage"], "refund", REFUND)
    store.save("support", fresh, nodes=NODES)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = PredictorStore(tmp_path).load("support", nodes=NODES)
    assert again.to_dict() == fresh.to_dict()


def test_file_over_the_size_limit_is_set_aside_unparsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, _, raw = _valid(tmp_path)
    monkeypatch.setattr(store_module, "MAX_STATE_BYTES", len(raw) - 1)
    with pytest.warns(PredictorStateWarning, match="byte limit"):
        fresh = PredictorStore(tmp_path).load("support", nodes=NODES)
    assert isinstance(fresh, ContentPredictor) and fresh.path.observations == 0
    assert [p.read_bytes() for p in tmp_path.glob("support.corrupt-*.json")] == [raw]


def test_error_names_the_field_and_value(tmp_path: Path) -> None:
    path, doc, _ = _valid(tmp_path)
    path.write_text(json.dumps(doc).replace('"observations": 24', f'"observations": {HUGE}'))
    with pytest.warns(PredictorStateWarning) as record:
        PredictorStore(tmp_path).load("support", nodes=NODES)
    message = str(record[0].message)
    assert "field 'path.observations'" in message
    assert "an integer of 1329 bits" in message  # not 400 digits echoed back
    assert len(message) < 600


#: What the warning says is wrong, for each way a document can be refused.
PROBLEMS: dict[str, str] = {
    "other format": "is not an agentwarm predictor file (format must be 'agentwarm.predictor')",
    "missing format": "is not an agentwarm predictor file",
    "version 1": f"has format version 1, this agentwarm reads {FORMAT_VERSION}",
    "version string": f"has format version '{FORMAT_VERSION}', this agentwarm reads",
    "missing version": "has format version None",
    "other workflow": "was saved for workflow 'sales'",
    "workflow not a string": "field 'workflow': Input should be a valid string",
    "other node set": "saved for another node set (added ['__end__', 'billing', 'refund'], "
    "removed ['sales'])",
    "fingerprint not hex": "field 'fingerprint'",
    "nodes unsorted": "lists its nodes unsorted or more than once",
    "nodes repeated": "lists its nodes unsorted or more than once",
    "other kind": "holds a predictor of kind 'first_order', expected 'content'",
    "predictor without kind": "holds a predictor of kind None, expected 'content'",
    "known names a removed node": "knows successors that are not nodes: ['sales']",
    "unknown top-level key": "field 'extra': Extra inputs are not permitted",
    "top level list": "must be a JSON object, got list",
    "truncated": "not JSON",
}


@pytest.mark.parametrize("case", list(PROBLEMS))
def test_the_warning_names_what_is_wrong_with_the_document(tmp_path: Path, case: str) -> None:
    path, doc, raw = _valid(tmp_path)
    path.write_bytes(CORRUPTIONS[case](doc, raw))
    with pytest.warns(PredictorStateWarning) as record:
        PredictorStore(tmp_path).load("support", nodes=NODES)
    message = str(record[0].message)
    assert PROBLEMS[case] in message
    assert "started learning afresh" in message  # and what happened to the learned state


FLOW = """
from agentwarm import node, END

@node(entry=True, next=["work"])
async def plan(ctx):
    return "work"

@node(next=[END])
async def work(ctx):
    return END
"""


def _cli_run(flow: Path, state_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AGENTWARM_NO_PROGRESS": "1"}
    cmd = [sys.executable, "-m", "agentwarm.cli", "run", str(flow), "--engine", "fake"]
    cmd += ["--runs", "2", "--json", "--state-dir", str(state_dir)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.slow
def test_cli_run_survives_an_overflowing_state_file(tmp_path: Path) -> None:
    """The reproduction of the issue: ``"observations": 1e4000``-style values crashed every
    later ``agentwarm run``. Now the run succeeds, says where the file went, learns afresh."""
    flow = tmp_path / "flow.py"
    flow.write_text(textwrap.dedent(FLOW))
    state_dir = tmp_path / "state"
    first = _cli_run(flow, state_dir)
    assert first.returncode == 0, first.stderr
    name = load_workflow(flow).name
    path = PredictorStore(state_dir).path_for(name)
    text = path.read_text()
    assert '"observations":4' in text
    path.write_text(text.replace('"observations":4', f'"observations":{HUGE}'))

    for _ in range(2):  # the first run sets the file aside, the next ones just work
        proc = _cli_run(flow, state_dir)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["runs"] == 2
    aside = list(state_dir.glob(f"{path.stem}.corrupt-*.json"))
    assert len(aside) == 1 and HUGE in aside[0].read_text()
    saved = json.loads(path.read_text())
    # Two runs of two steps, twice, afresh (the path experts' count: one per step).
    assert saved["predictor"]["path"]["observations"] == 8
