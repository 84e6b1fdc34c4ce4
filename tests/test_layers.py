"""The package's layering, read from its source with ``ast``: no import cycle, no upward import.

Every ``import``/``from ... import`` anywhere in a module counts, including ``TYPE_CHECKING``
blocks and imports inside functions. ``import agentwarm.x.y`` is an edge to the module
``agentwarm.x.y`` only; ``from agentwarm.x import y`` is an edge to ``agentwarm.x.y`` when that is
a module, else to ``agentwarm.x``. A package's ``__init__`` may import its own submodules (to
re-export them); those edges are left out of the cycle check.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1] / "agentwarm"

#: The package's layers, lowest first. A module may import modules of lower layers only: not
#: its own layer's other packages (siblings stay independent) and never a higher layer. The
#: helpers of layer 0 are the exception: they may import each other (the cycle check still
#: applies). A name stands for a module and its submodules; ``agentwarm`` alone is the
#: top-level ``__init__`` (the public API). Every module must fall in a layer.
LAYERS: tuple[tuple[str, ...], ...] = (
    # 0: shared words and small helpers
    (
        "agentwarm._spec",
        "agentwarm.errors",
        "agentwarm._fmt",
        "agentwarm._jsonfile",
        "agentwarm.redact",
    ),
    # 1: names and formats: telemetry names, chat templates, bundled data
    ("agentwarm.telemetry", "agentwarm.chat", "agentwarm.data"),
    # 2: the independent parts: workflow graphs, predictors, engines, figures
    ("agentwarm.graphs", "agentwarm.predictors", "agentwarm.engines", "agentwarm.stats"),
    # 3: running workflows on them
    ("agentwarm.runtime",),
    # 4: warm-ups (plans mined from traffic, warmed on engines), which the servers use
    ("agentwarm.warmup",),
    # 5: what is built on the runtime or the engines
    ("agentwarm.bench", "agentwarm.viz", "agentwarm.server"),
    # 6: the gateway (an OpenAI endpoint in front of servers: the server's HTTP pieces and the
    # runtime's prefetch policy)
    ("agentwarm.gateway",),
    # 7: the public API, then the command line
    ("agentwarm",),
    ("agentwarm.cli",),
)


def layer_of(module: str, layers: tuple[tuple[str, ...], ...] = LAYERS) -> tuple[int, str] | None:
    """``(layer index, part)`` of ``module``; the longest matching name wins (``agentwarm``
    itself matches the top-level module only)."""
    best: tuple[int, str] | None = None
    for index, names in enumerate(layers):
        for name in names:
            hit = module == name or (name != "agentwarm" and module.startswith(name + "."))
            if hit and (best is None or len(name) > len(best[1])):
                best = (index, name)
    return best


#: Cycles that other parts of issue 11 still have to break (none left). A listed cycle that is
#: gone fails the test as well, so this list only shrinks: delete the entry then.
PENDING_CYCLES: list[list[str]] = []


def _module_name(root: Path, path: Path) -> tuple[str, bool]:
    """The dotted name of ``path`` under ``root`` (named ``agentwarm``), and whether it is a
    package's ``__init__``."""
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def _imported(
    tree: ast.AST, module: str, is_package: bool, modules: set[str]
) -> set[tuple[str, int]]:
    """The agentwarm modules ``tree`` imports, with the line of each import."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[tuple[str, int]] = set()
    for item in ast.walk(tree):
        if isinstance(item, ast.Import):
            found |= {(alias.name, item.lineno) for alias in item.names}
        elif isinstance(item, ast.ImportFrom):
            if item.level:
                base_parts = package.split(".")
                base_parts = base_parts[: len(base_parts) - (item.level - 1)]
                base = ".".join([*base_parts, item.module] if item.module else base_parts)
            else:
                base = item.module or ""
            for alias in item.names:
                sub = f"{base}.{alias.name}"
                found.add((sub if sub in modules else base, item.lineno))
    return {(name, line) for name, line in found if name.split(".")[0] == "agentwarm"}


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    """Module → module import edges of the package at ``root``; each edge has the ``lines``
    of its imports. Edges from a package to its own submodules are left out."""
    files = sorted(root.rglob("*.py"))
    names = {path: _module_name(root, path) for path in files}
    modules = {name for name, _ in names.values()}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for path in files:
        module, is_package = names[path]
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for target, line in _imported(tree, module, is_package, modules):
            if target == module or (is_package and target.startswith(module + ".")):
                continue
            if not graph.has_edge(module, target):
                graph.add_edge(module, target, lines=[])
            graph.edges[module, target]["lines"].append(line)
    return graph


def cycles(graph: nx.DiGraph) -> list[list[str]]:
    """Every strongly connected group of more than one module, sorted."""
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def upward_imports(graph: nx.DiGraph, layers: tuple[tuple[str, ...], ...] = LAYERS) -> list[str]:
    """``importer:line -> imported`` for every import into the same or a higher layer (between
    different parts), and ``module: in no layer`` for a module no layer names."""
    bad = [f"{m}: in no layer" for m in sorted(graph) if layer_of(m, layers) is None]
    for source, target, data in graph.edges(data=True):
        a, b = layer_of(source, layers), layer_of(target, layers)
        if a is None or b is None or a[1] == b[1] or (a[0] == b[0] == 0):
            continue
        if b[0] >= a[0]:
            lines = ",".join(map(str, sorted(data["lines"])))
            bad.append(f"{source}:{lines} -> {target}")
    return sorted(bad)


def test_graph_sees_every_kind_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "agentwarm"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from agentwarm.sub import thing\n")
    (pkg / "low.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from agentwarm.sub.high import X\n"
        "def f():\n"
        "    import agentwarm.other\n"
    )
    (pkg / "other.py").write_text("from . import low\n")
    (pkg / "sub" / "__init__.py").write_text("from .high import thing\n")
    (pkg / "sub" / "high.py").write_text("from ..low import f\nthing = 1\n")
    graph = import_graph(pkg)
    # The packages' imports of their own submodules are left out.
    assert set(graph.edges) == {
        ("agentwarm.low", "agentwarm.sub.high"),
        ("agentwarm.low", "agentwarm.other"),
        ("agentwarm.other", "agentwarm.low"),
        ("agentwarm.sub.high", "agentwarm.low"),
    }
    assert cycles(graph) == [["agentwarm.low", "agentwarm.other", "agentwarm.sub.high"]]


@pytest.fixture(scope="module")
def package() -> nx.DiGraph:
    return import_graph()


def test_no_import_cycle(package: nx.DiGraph) -> None:
    found = cycles(package)
    new = [c for c in found if c not in PENDING_CYCLES]
    assert not new, "import cycles between agentwarm modules:\n" + "\n".join(map(str, new))
    gone = [c for c in PENDING_CYCLES if c not in found]
    assert not gone, f"no longer cycles, delete them from PENDING_CYCLES: {gone}"


def test_the_layer_check_catches_sideways_upward_and_unplaced_imports() -> None:
    graph = nx.DiGraph()
    edges = [
        ("agentwarm.runtime.run", "agentwarm.cli.run"),  # upward
        ("agentwarm.graphs._node", "agentwarm.predictors.base"),  # sideways, layer 2
        ("agentwarm.engines.base", "agentwarm.stats.definitions"),  # sideways, layer 2
        ("agentwarm._spec", "agentwarm.engines"),  # upward from the ground
        ("agentwarm.runtime.run", "agentwarm.engines.base"),  # allowed
        ("agentwarm.runtime.run", "agentwarm.runtime.prompt"),  # same part: allowed
        ("agentwarm._jsonfile", "agentwarm.errors"),  # ground helpers: allowed
        ("agentwarm.cli", "agentwarm"),  # the CLI on the public API: allowed
        ("agentwarm.stranger", "agentwarm.errors"),  # in no layer
    ]
    for a, b in edges:
        graph.add_edge(a, b, lines=[1])
    assert upward_imports(graph) == [
        "agentwarm._spec:1 -> agentwarm.engines",
        "agentwarm.engines.base:1 -> agentwarm.stats.definitions",
        "agentwarm.graphs._node:1 -> agentwarm.predictors.base",
        "agentwarm.runtime.run:1 -> agentwarm.cli.run",
        "agentwarm.stranger: in no layer",
    ]


def test_no_upward_import(package: nx.DiGraph) -> None:
    found = upward_imports(package)
    assert not found, "imports from a lower layer into a higher one:\n" + "\n".join(found)


def package_graph(graph: nx.DiGraph) -> nx.DiGraph:
    """``graph`` collapsed to the package's parts (``agentwarm.runtime``, ``agentwarm.engines``,
    ...; a top-level module stands for itself): an edge when any module of one imports any
    module of the other."""

    def part(module: str) -> str:
        return ".".join(module.split(".")[:2])

    collapsed = nx.DiGraph()
    collapsed.add_nodes_from(part(m) for m in graph)
    collapsed.add_edges_from((part(a), part(b)) for a, b in graph.edges if part(a) != part(b))
    return collapsed


def layers(parts: nx.DiGraph, root: Path = ROOT) -> nx.DiGraph:
    """The subpackages of ``parts`` and ``agentwarm._spec`` (helpers such as ``errors`` and
    ``_fmt`` left out), with only the edges not implied by others (transitive reduction)."""
    keep = [p for p in parts if p == "agentwarm._spec" or (root / p.split(".", 1)[-1]).is_dir()]
    return nx.transitive_reduction(parts.subgraph(keep))


def mermaid(graph: nx.DiGraph) -> str:
    """A Mermaid flowchart of ``graph``'s edges, importer above imported, sorted."""
    short = {n: n.removeprefix("agentwarm.") for n in graph}
    lines = ["flowchart TD"]
    lines += [f"    {short[a]} --> {short[b]}" for a, b in sorted(graph.edges)]
    return "\n".join(lines)


def test_the_package_graph_is_acyclic_and_drawn(package: nx.DiGraph) -> None:
    parts = package_graph(package)
    assert nx.is_directed_acyclic_graph(parts), list(nx.simple_cycles(parts))
    drawn = mermaid(layers(parts)).splitlines()
    assert drawn[0] == "flowchart TD"
    # runtime imports engines directly, and through nothing else that imports engines
    assert "    runtime --> engines" in drawn
    # cli imports engines too, but also runtime, which imports engines: the edge is implied
    assert parts.has_edge("agentwarm.cli", "agentwarm.engines")
    assert "    cli --> engines" not in drawn
    assert not any(line.startswith("    engines -->") and "runtime" in line for line in drawn)
    assert not any(line.endswith("--> errors") for line in drawn)


def test_the_architecture_doc_shows_the_current_diagram(package: nx.DiGraph) -> None:
    doc = (ROOT.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    drawn = mermaid(layers(package_graph(package)))
    assert f"```mermaid\n{drawn}\n```" in doc, (
        "docs/ARCHITECTURE.md's diagram is out of date: paste the output of "
        "`python tests/test_layers.py` into it"
    )


if __name__ == "__main__":  # python tests/test_layers.py: the layer diagram of docs/ARCHITECTURE.md
    print(mermaid(layers(package_graph(import_graph()))))
