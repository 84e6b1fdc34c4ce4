"""Load a workflow graph from a Python file: ``path/to/file.py[:WORKFLOW]``.

:func:`agentwarm.load_workflow` (the runtime's) wraps what this finds into a runnable workflow.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from agentwarm._spec import NodeSpec
from agentwarm.errors import ConfigError, GraphValidationError
from agentwarm.graphs._builder import GraphBuilder
from agentwarm.graphs._graph import CompiledGraph

__all__ = ("load_graph",)


def _import_file(path: Path) -> ModuleType:
    module_name = f"agentwarm_user_{path.stem}_{abs(hash(path.resolve())) & 0xFFFFFF:06x}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"{path}: cannot be imported as a Python module (is it a .py file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    # Like `python FILE.py`: the file's folder is importable, so examples can share helpers.
    folder = str(path.resolve().parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(module_name, None)
        raise ConfigError(f"{path}: importing it failed: {type(exc).__name__}: {exc}") from exc
    finally:
        if added:
            sys.path.remove(folder)
    return module


def _collected_name(module: ModuleType, path: Path) -> str:
    """The name of the workflow made of a module's top-level @nodes: its ``WORKFLOW_NAME``, else
    the file's stem."""
    return str(getattr(module, "WORKFLOW_NAME", path.stem))


def _collect(module: ModuleType, path: Path) -> GraphBuilder:
    if not any(isinstance(v, NodeSpec) for v in vars(module).values()):
        raise ConfigError(
            f"{path}: defines no @node functions and no workflow; decorate the workflow's "
            "steps with @node (from agentwarm import node)"
        )
    try:
        return GraphBuilder.from_module(module, name=_collected_name(module, path))
    except GraphValidationError as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def load_graph(spec: str | Path) -> CompiledGraph:
    """Compile the workflow named by ``spec``; a compiled workflow found as is.

    ``spec`` is ``FILE.py`` or ``FILE.py:NAME``. ``NAME`` names a module attribute that is a
    compiled workflow (:class:`CompiledGraph`, such as :class:`agentwarm.Workflow`) or a builder
    (:class:`GraphBuilder`, such as :class:`agentwarm.WorkflowGraph`, compiled by its own
    ``compile()``), or such an object's ``name`` (what ``agentwarm run`` prints). Without
    ``NAME``: the module's single such attribute if it has exactly one, else every top-level
    ``@node`` of the module, named by its ``WORKFLOW_NAME`` (default: the file's stem), which
    ``NAME`` may also give.
    """
    text = str(spec)
    name: str | None = None
    if ":" in text and not Path(text).exists():
        text, name = text.rsplit(":", 1)
    path = Path(text)
    if not path.exists():
        raise ConfigError(f"{path}: no such file; give the path of a Python file with @node steps")
    if path.is_dir():
        raise ConfigError(f"{path}: is a directory; give the path of a Python file")
    module = _import_file(path)
    found = {k: v for k, v in vars(module).items() if isinstance(v, CompiledGraph | GraphBuilder)}
    obj: CompiledGraph | GraphBuilder
    if name is not None:
        # NAME is an attribute, or the name a workflow reports (the one `agentwarm run` prints),
        # or the name the module's collected @node steps go by.
        by_name = {v.name: v for v in found.values()}
        if not found and _collected_name(module, path) == name:
            obj = _collect(module, path)
        elif name in found or name in by_name:
            obj = found.get(name) or by_name[name]
        else:
            names = sorted({*found, *by_name}) or [f"{_collected_name(module, path)} (its @nodes)"]
            raise ConfigError(
                f"{path}: has no workflow named '{name}' (workflows: {', '.join(names)}); "
                f"use {path}:NAME with one of them, or {path} alone"
            )
    elif len(found) == 1:
        obj = next(iter(found.values()))
    elif len(found) > 1:
        raise ConfigError(
            f"{path}: defines several workflows ({', '.join(sorted(found))}); "
            f"pick one with {path}:NAME"
        )
    else:
        obj = _collect(module, path)
    workflow = obj.compile() if isinstance(obj, GraphBuilder) else obj
    samples = getattr(module, "INPUTS", None)
    if isinstance(samples, list | tuple) and all(isinstance(s, str) for s in samples):
        workflow.sample_inputs = tuple(samples)
    return workflow
