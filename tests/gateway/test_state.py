"""The gateway's learned state file: round trip, an unusable file set aside with a warning,
tenants kept by tag (never a salt) with their heads' ownership validated, older files read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentwarm.engines.namespace import tenant_tag
from agentwarm.gateway.heads import HeadRegistry
from agentwarm.gateway.prompts import Shape, Shapes
from agentwarm.gateway.state import GatewayState, load_state, save_state, state_path
from agentwarm.gateway.tenants import Learned
from agentwarm.gateway.toolhints import ToolHints
from agentwarm.predictors import PredictorStateWarning, default_predictor


def learned() -> GatewayState:
    heads = HeadRegistry()
    a, _ = heads.identify([{"role": "system", "content": "Route the customer."}], None)
    b, _ = heads.identify([{"role": "system", "content": "Handle baggage."}], None)
    predictor = default_predictor()
    for _ in range(3):
        predictor.observe([], a.name)
        predictor.observe([a.name], b.name)
    shapes = Shapes()
    shapes.observe(b.name, Shape.CONTINUE)
    hints = ToolHints()
    hints.observe("transfer_to_baggage", b.name)
    return GatewayState(heads, predictor, shapes, hints)


def test_saved_state_loads_back_and_predicts_alike(tmp_path: Path) -> None:
    state = learned()
    path = save_state(tmp_path / "state", state)
    assert path == state_path(tmp_path / "state")
    loaded = load_state(tmp_path / "state", default_predictor)
    assert loaded is not None
    assert [h.name for h in loaded.heads] == [h.name for h in state.heads]
    first = next(iter(state.heads)).name
    assert loaded.predictor.predict([first]) == state.predictor.predict([first])
    assert loaded.shapes.to_dict() == state.shapes.to_dict()
    assert loaded.tool_hints.to_dict() == state.tool_hints.to_dict()
    assert load_state(tmp_path / "none", default_predictor) is None


@pytest.mark.parametrize(
    "text", ["{not json", '{"format": "other"}', '{"format": "agentwarm.gateway", "version": 9}']
)
def test_an_unusable_file_is_set_aside_and_learning_restarts(tmp_path: Path, text: str) -> None:
    path = state_path(tmp_path)
    path.write_text(text, encoding="utf-8")
    with pytest.warns(PredictorStateWarning, match="moved to"):
        assert load_state(tmp_path, default_predictor) is None
    assert not path.exists()
    (moved,) = tmp_path.glob("gateway.corrupt-*.json")
    assert moved.read_text(encoding="utf-8") == text  # nothing lost
    save_state(tmp_path, learned())  # and the next save works
    assert load_state(tmp_path, default_predictor) is not None


def test_tenants_are_saved_as_tags_and_their_ownership_validated_on_load(tmp_path: Path) -> None:
    state = learned()
    tag = tenant_tag("secret-salt")
    head, _ = state.heads.identify([{"role": "system", "content": "Only mine."}], None, tenant=tag)
    state.tenants[tag] = Learned(default_predictor(), Shapes(), ToolHints())
    state.tenants[tag].predictor.observe([], head.name)
    save_state(tmp_path, state)
    text = state_path(tmp_path).read_text(encoding="utf-8")
    assert "secret-salt" not in text and tag in text
    loaded = load_state(tmp_path, default_predictor)
    assert loaded is not None
    assert loaded.heads.owns(tag, head.name) and not loaded.heads.owns("", head.name)
    assert all(loaded.heads.owns("", h.name) for h in loaded.heads if h.name != head.name)
    assert loaded.tenants[tag].predictor.predict([]) == state.tenants[tag].predictor.predict([])
    # An owner that is not a tag (a salt in clear, say) makes the file unusable: set aside.
    doc = json.loads(text)
    doc["heads"]["heads"][-1]["owners"] = ["secret-salt"]
    state_path(tmp_path).write_text(json.dumps(doc), encoding="utf-8")
    with pytest.warns(PredictorStateWarning, match="is not a tenant tag"):
        assert load_state(tmp_path, default_predictor) is None


def test_a_file_from_before_tenants_loads_with_heads_owned_by_nobody(tmp_path: Path) -> None:
    save_state(tmp_path, learned())
    doc = json.loads(state_path(tmp_path).read_text(encoding="utf-8"))
    doc["version"] = 1
    del doc["tenants"]
    for head in doc["heads"]["heads"]:
        del head["owners"]
    state_path(tmp_path).write_text(json.dumps(doc), encoding="utf-8")
    loaded = load_state(tmp_path, default_predictor)
    assert loaded is not None and len(loaded.heads) == 2 and loaded.tenants == {}
    assert not any(loaded.heads.owns("", h.name) for h in loaded.heads)  # until sent again


def _doc(tmp_path: Path) -> dict[str, Any]:
    save_state(tmp_path, learned())
    doc: dict[str, Any] = json.loads(state_path(tmp_path).read_text())
    return doc


@pytest.mark.parametrize("value", [1e-320, float("nan"), float("inf")])
def test_a_state_with_an_unusable_predictor_count_is_refused_naming_the_field(
    tmp_path: Path, value: float
) -> None:
    """Issue 23 item 11: the predictor's counts in the gateway's file are validated as the
    runtime store's are (a subnormal once made every prediction NaN)."""
    doc = _doc(tmp_path)
    table = doc["predictor"]["path"]["contexts"][0][1]
    table[next(iter(table))] = value
    state_path(tmp_path).write_text(json.dumps(doc))
    with pytest.warns(PredictorStateWarning, match=r"field 'path\.contexts\.0\.1\.") as caught:
        assert load_state(tmp_path, default_predictor) is None
    assert len(caught) == 1
    assert len(list(tmp_path.glob("gateway.corrupt-*.json"))) == 1


@pytest.mark.parametrize(
    ("section", "value", "field"),
    [
        ("tool_hints", 1e-320, "tool_hints['transfer_to_baggage']"),
        ("tool_hints", 2**64, "tool_hints['transfer_to_baggage']"),
        ("shapes", float("nan"), "shapes["),
        ("shapes", -1, "shapes["),
    ],
)
def test_unusable_shape_and_tool_hint_counts_are_refused_naming_the_field(
    tmp_path: Path, section: str, value: Any, field: str
) -> None:
    doc = _doc(tmp_path)
    table = next(iter(doc[section].values()))
    table[next(iter(table))] = value
    state_path(tmp_path).write_text(json.dumps(doc))
    with pytest.warns(PredictorStateWarning) as caught:
        assert load_state(tmp_path, default_predictor) is None
    (message,) = [str(w.message) for w in caught]
    assert field in message, message


def test_a_non_finite_state_is_not_saved_and_the_old_file_is_kept(tmp_path: Path) -> None:
    """Issue 23 item 11: never save a non-finite value (the next start would set the file
    aside and lose everything): refuse, naming the field, and keep the previous file."""
    from agentwarm.errors import PredictorStateError

    save_state(tmp_path, learned())
    before = state_path(tmp_path).read_bytes()
    state = learned()
    table = next(iter(state.predictor.path._counts.values()))  # type: ignore[attr-defined]
    table[next(iter(table))] = float("nan")
    with pytest.raises(PredictorStateError, match=r"path\.contexts.*kept"):
        save_state(tmp_path, state)
    assert state_path(tmp_path).read_bytes() == before
    assert load_state(tmp_path, default_predictor) is not None
