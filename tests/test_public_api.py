"""The top-level API: a small ``__all__`` of what users build with, every name resolving, and the
engines imported lazily so that ``import agentwarm`` stays light."""

from __future__ import annotations

import subprocess
import sys

import pytest

import agentwarm
import agentwarm.errors

ENGINES = {
    "FakeEngine": "agentwarm.engines.fake",
    "LocalEngine": "agentwarm.engines.local.engine",
    "MultiWorkerEngine": "agentwarm.engines.routing",
    "SGLangEngine": "agentwarm.engines.sglang.client",
    "VLLMEngine": "agentwarm.engines.vllm.client",
}


def _fresh(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout.strip()


def test_import_agentwarm_imports_no_engine_and_no_torch() -> None:
    loaded = _fresh(
        "import sys, agentwarm; "
        "print(' '.join(m for m in ('torch', 'transformers', 'httpx', 'agentwarm.engines.fake', "
        "'agentwarm.engines.local.engine', 'agentwarm.engines.sglang', "
        "'agentwarm.engines.vllm', 'agentwarm.engines.routing') if m in sys.modules))"
    )
    assert loaded == ""


def test_using_an_engine_imports_only_that_engine() -> None:
    loaded = _fresh(
        "import sys; from agentwarm import FakeEngine; FakeEngine(); "
        "print(' '.join(m for m in ('torch', 'agentwarm.engines.sglang') if m in sys.modules))"
    )
    assert loaded == ""


def test_every_name_in_all_resolves() -> None:
    for name in agentwarm.__all__:
        assert getattr(agentwarm, name) is not None, name
    assert set(agentwarm.__all__) <= set(dir(agentwarm))


def test_the_lazy_engines_are_the_real_classes() -> None:
    import importlib

    for name, module in ENGINES.items():
        real = getattr(importlib.import_module(module), name)
        assert getattr(agentwarm, name) is real
        assert name in agentwarm.__all__


def test_the_explicit_warms_resolve_to_the_warmup_package() -> None:
    from agentwarm.warmup.debounce import Debouncer
    from agentwarm.warmup.explicit import warm

    assert agentwarm.warm is warm
    assert agentwarm.Debouncer is Debouncer


def test_public_names_pinned() -> None:
    assert set(agentwarm.__all__) == {
        "END",
        "START",
        "Context",
        "Debouncer",
        "FakeEngine",
        "LocalEngine",
        "MultiWorkerEngine",
        "PrefetchPolicy",
        "RunResult",
        "SGLangEngine",
        "StepRecord",
        "VLLMEngine",
        "Workflow",
        "WorkflowGraph",
        "__version__",
        "load_workflow",
        "node",
        "warm",
        *agentwarm.errors.__all__,
    }


def test_all_holds_what_users_build_with_and_the_public_errors() -> None:
    users = {
        "node",
        "WorkflowGraph",
        "Workflow",
        "Context",
        "PrefetchPolicy",
        "RunResult",
        "StepRecord",
        "START",
        "END",
        "load_workflow",
    }
    assert users | set(ENGINES) | set(agentwarm.errors.__all__) <= set(agentwarm.__all__)
    # Types for writing an engine are in agentwarm.engines, not at the top level.
    for name in ("Engine", "Completion", "PrefillResult", "Priority", "NodeSpec"):
        assert name not in agentwarm.__all__


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchEngine"):
        agentwarm.NoSuchEngine  # noqa: B018
