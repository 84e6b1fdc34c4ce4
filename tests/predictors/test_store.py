from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from agentwarm.errors import PredictorStateError
from agentwarm.predictors import (
    END,
    FORMAT_VERSION,
    ContentPredictor,
    FirstOrderPredictor,
    MarkovPredictor,
    PredictorStateWarning,
    PredictorStore,
    StepContext,
    default_predictor,
    default_state_dir,
    node_fingerprint,
    path_predictor,
)

NODES = ["triage", "billing", "refund", END]


def trained() -> MarkovPredictor:
    """A path model (kind "markov", as the default before the content predictor saved)."""
    model = MarkovPredictor()
    for _ in range(10):
        model.observe(["triage"], "billing")
        model.observe(["triage", "billing"], END)
    for _ in range(3):
        model.observe(["triage"], "refund")
        model.observe(["triage", "refund"], "triage")
    return model


PATHS = [["triage"], ["triage", "refund", "triage"], ["triage", "billing"], []]


def test_save_then_load_in_a_new_store_predicts_identically(tmp_path: Path) -> None:
    """The store's round trip, for the predictor class the factory names."""
    model = trained()
    path = PredictorStore(tmp_path).save("support", model, nodes=NODES)
    assert path == tmp_path / "support.json"
    # No temp file left behind; the hidden lock file of concurrent saves stays.
    assert sorted(os.listdir(tmp_path)) == [".support.lock", "support.json"]
    doc = json.loads(path.read_text())
    assert doc["version"] == FORMAT_VERSION
    assert doc["nodes"] == sorted(NODES)
    assert doc["fingerprint"] == node_fingerprint(reversed(NODES))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = PredictorStore(tmp_path).load(
            "support", nodes=reversed(NODES), factory=MarkovPredictor
        )
    assert isinstance(loaded, MarkovPredictor)
    for p in PATHS:
        assert loaded.predict(p, candidates=NODES) == model.predict(p, candidates=NODES)
    assert loaded.to_dict() == model.to_dict()


def test_missing_file_gives_a_fresh_predictor_without_creating_anything(tmp_path: Path) -> None:
    store = PredictorStore(tmp_path / "not-yet")
    assert not store.exists("support")
    fresh = store.load("support", nodes=NODES, factory=lambda: MarkovPredictor(max_order=2))
    assert isinstance(fresh, MarkovPredictor)
    assert (fresh.max_order, fresh.observations) == (2, 0)
    assert not (tmp_path / "not-yet").exists()


def test_factory_chooses_the_predictor_class(tmp_path: Path) -> None:
    store = PredictorStore(tmp_path)
    first = FirstOrderPredictor()
    first.observe(["triage"], "refund")
    store.save("support", first, nodes=NODES)
    loaded = store.load("support", nodes=NODES, factory=FirstOrderPredictor)
    assert loaded.to_dict() == first.to_dict()


def _valid_document(tmp_path: Path) -> dict[str, object]:
    path = PredictorStore(tmp_path).save("support", trained(), nodes=NODES)
    return json.loads(path.read_text())


CORRUPTIONS = {
    "garbage": lambda doc, raw: b"\x00\xffnot json at all",
    "truncated": lambda doc, raw: raw[: len(raw) // 2],
    "empty": lambda doc, raw: b"",
    "not an object": lambda doc, raw: b"[1, 2, 3]",
    "other format": lambda doc, raw: json.dumps({**doc, "format": "x"}).encode(),
    "other version": lambda doc, raw: json.dumps({**doc, "version": FORMAT_VERSION + 1}).encode(),
    "other node set": lambda doc, raw: json.dumps(
        {**doc, "nodes": ["triage", "sales"], "fingerprint": node_fingerprint(["triage", "sales"])}
    ).encode(),
    "fingerprint mismatch": lambda doc, raw: json.dumps({**doc, "fingerprint": "0" * 64}).encode(),
    "other kind": lambda doc, raw: json.dumps(
        {**doc, "predictor": FirstOrderPredictor().to_dict()}
    ).encode(),
    "bad counts": lambda doc, raw: json.dumps(
        {**doc, "predictor": {**doc["predictor"], "contexts": [[["triage"], {"billing": -3}]]}}  # type: ignore[dict-item]
    ).encode(),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_unusable_file_is_moved_aside_with_a_warning_and_learning_restarts(
    tmp_path: Path, case: str
) -> None:
    doc = _valid_document(tmp_path)
    path = tmp_path / "support.json"
    bad = CORRUPTIONS[case](doc, path.read_bytes())
    path.write_bytes(bad)

    store = PredictorStore(tmp_path)
    with pytest.warns(PredictorStateWarning, match="support.json") as record:
        fresh = store.load("support", nodes=NODES)
    assert "support.corrupt-" in str(record[0].message)
    # A file of the old default (kind "markov") read for the new one: set aside all the same.
    assert isinstance(fresh, ContentPredictor) and fresh.observations == 0
    assert fresh.path.observations == 0
    assert not path.exists()
    aside = sorted(tmp_path.glob("support.corrupt-*.json"))
    assert len(aside) == 1
    assert aside[0].read_bytes() == bad  # nothing lost

    fresh.observe(["triage"], "refund")
    store.save("support", fresh, nodes=NODES)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = store.load("support", nodes=NODES)
    assert again.to_dict() == fresh.to_dict()


def test_repeated_corruption_keeps_every_copy(tmp_path: Path) -> None:
    store = PredictorStore(tmp_path)
    for i in range(3):
        (tmp_path / "support.json").write_text(f"broken {i}")
        with pytest.warns(PredictorStateWarning):
            store.load("support", nodes=NODES)
    copies = sorted(p.read_text() for p in tmp_path.glob("support.corrupt-*.json"))
    assert copies == ["broken 0", "broken 1", "broken 2"]


def test_unwritable_directory_raises_with_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    store = PredictorStore(blocker / "state")
    with pytest.raises(PredictorStateError, match="a-file") as info:
        store.save("support", trained(), nodes=NODES)
    assert "AGENTWARM_STATE_DIR" in str(info.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_raises(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(PredictorStateError, match=str(tmp_path)):
            PredictorStore(tmp_path).save("support", trained(), nodes=NODES)
    finally:
        tmp_path.chmod(0o700)


def test_failed_write_keeps_the_old_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = PredictorStore(tmp_path)
    old = trained()
    store.save("support", old, nodes=NODES)
    before = (tmp_path / "support.json").read_bytes()

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    newer = trained()
    newer.observe(["triage"], "billing")
    with pytest.raises(PredictorStateError, match="No space left"):
        store.save("support", newer, nodes=NODES)
    assert (tmp_path / "support.json").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == [".support.lock", "support.json"]


def test_unreadable_file_raises_instead_of_discarding(tmp_path: Path) -> None:
    (tmp_path / "support.json").mkdir()
    with pytest.raises(PredictorStateError, match="cannot read"):
        PredictorStore(tmp_path).load("support", nodes=NODES)
    assert (tmp_path / "support.json").is_dir()


def test_file_that_cannot_be_moved_aside_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "support.json").write_text("garbage")

    def broken_rename(src: str, dst: str) -> None:
        raise OSError(13, "Permission denied")

    monkeypatch.setattr(os, "rename", broken_rename)
    with pytest.raises(PredictorStateError, match="cannot be moved aside"):
        PredictorStore(tmp_path).load("support", nodes=NODES)
    assert (tmp_path / "support.json").read_text() == "garbage"


def test_workflow_names_map_to_distinct_safe_files(tmp_path: Path) -> None:
    store = PredictorStore(tmp_path)
    assert store.path_for("support_bot") == tmp_path / "support_bot.json"
    odd = [
        "examples/support_bot.py:main",
        "examples_support_bot.py_main",
        "../escape",
        ".hidden",
        "",
    ]
    paths = [store.path_for(name) for name in odd]
    assert len(set(paths)) == len(odd)
    assert all(p.parent == tmp_path and not p.name.startswith(".") for p in paths)
    store.save(odd[0], trained(), nodes=NODES)
    assert store.exists(odd[0]) and not store.exists(odd[1])


def test_default_state_dir_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AGENTWARM_STATE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_state_dir() == tmp_path / "explicit"
    assert PredictorStore().state_dir == tmp_path / "explicit"
    monkeypatch.setenv("AGENTWARM_STATE_DIR", "")
    assert default_state_dir() == tmp_path / "xdg" / "agentwarm"
    monkeypatch.delenv("AGENTWARM_STATE_DIR")
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_state_dir() == tmp_path / "home" / ".local" / "state" / "agentwarm"


def test_default_predictor_round_trips_through_the_store(tmp_path: Path) -> None:
    model = default_predictor()
    assert isinstance(model, ContentPredictor)
    asked = StepContext(first_user="refund please", last_user="refund please")
    answered = StepContext(first_user="refund please", last_tool_result="error: no order")
    for _ in range(4):
        model.observe_in(["triage"], "refund", asked)
        model.observe_in(["triage", "refund"], "triage", answered)
        model.observe(["triage", "refund", "triage"], "billing")
        model.observe(["triage", "refund", "triage", "billing"], END)
    store = PredictorStore(tmp_path)
    store.save("support", model, nodes=NODES)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = store.load("support", nodes=NODES)
    assert isinstance(loaded, ContentPredictor)
    assert loaded.path.experts == model.path.experts
    assert (loaded.observations, loaded.path.observations) == (8, 16)
    assert loaded.to_dict() == model.to_dict()
    for p in [*PATHS, ["triage", "refund", "triage", "billing"]]:
        assert loaded.predict(p, candidates=NODES) == model.predict(p, candidates=NODES)
        for context in (asked, answered):
            expected = model.predict_in(p, context, candidates=NODES)
            assert loaded.predict_in(p, context, candidates=NODES) == expected


def test_a_file_of_the_old_default_loads_into_the_new_one(tmp_path: Path) -> None:
    """A state the path-only default saved (kind "markov") is wrapped, nothing learned lost:
    the content predictor then predicts exactly as the saved path model, and saves as itself."""
    model = trained()
    store = PredictorStore(tmp_path)
    store.save("support", model, nodes=NODES)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = PredictorStore(tmp_path).load("support", nodes=NODES)
    assert isinstance(loaded, ContentPredictor)
    assert loaded.path.to_dict() == model.to_dict() and loaded.observations == 0
    context = StepContext(last_user="refund please")
    for p in PATHS:
        assert loaded.predict(p, candidates=NODES) == model.predict(p, candidates=NODES)
        # In context, before any content is learned: the path model's, up to rounding.
        expected = dict(model.predict(p, candidates=NODES))
        assert dict(loaded.predict_in(p, context, candidates=NODES)) == pytest.approx(expected)
    PredictorStore(tmp_path).save("support", loaded, nodes=NODES)
    saved = json.loads((tmp_path / "support.json").read_text())["predictor"]
    assert saved["kind"] == "content" and saved["path"] == model.to_dict()


def test_version_1_file_is_set_aside_for_the_new_default(tmp_path: Path) -> None:
    """Files written before the mixture experts (format version 1) restart learning with
    the current default predictor."""
    doc = _valid_document(tmp_path)
    path = tmp_path / "support.json"
    path.write_text(json.dumps({**doc, "version": 1}))
    assert FORMAT_VERSION == 2
    with pytest.warns(PredictorStateWarning, match="format version 1, this agentwarm reads 2"):
        fresh = PredictorStore(tmp_path).load("support", nodes=NODES)
    assert isinstance(fresh, ContentPredictor)
    assert fresh.path.experts == path_predictor().experts and fresh.path.observations == 0
    assert len(list(tmp_path.glob("support.corrupt-*.json"))) == 1


def test_state_written_before_the_experts_still_loads(tmp_path: Path) -> None:
    """A Markov state without the expert fields (as written before they existed) loads as the
    plain Markov model without a context bound, and predicts as the model that wrote it."""
    model = trained()
    doc = _valid_document(tmp_path)
    experts = ("features", "recent_half_life", "share", "max_contexts", "weights")
    experts += ("recent_contexts", "feature_contexts")
    old = {k: v for k, v in model.to_dict().items() if k not in experts}
    (tmp_path / "support.json").write_text(json.dumps({**doc, "predictor": old}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = PredictorStore(tmp_path).load("support", nodes=NODES, factory=MarkovPredictor)
    assert isinstance(loaded, MarkovPredictor)
    assert (loaded.experts, loaded.max_contexts, loaded.observations) == (("markov",), None, 26)
    for p in PATHS:
        assert loaded.predict(p, candidates=NODES) == model.predict(p, candidates=NODES)
