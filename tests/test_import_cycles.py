"""No import cycles among the benchmark package's modules (read from the source with ``ast``).

Two graphs: module-level imports (executed when a module is imported; ``if TYPE_CHECKING:``
blocks excluded), and all imports, those inside functions (the lazy imports that keep
declarations torch-free) and under ``TYPE_CHECKING`` included. Neither may have a cycle, and no
import may run up the layers of the run stack (record analysis < training engine < protocols), or
from the record readers (records, report) to the code that writes records.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "benchmark"


def _modules() -> dict[str, Path]:
    mods = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements run at import: module body, including if/try blocks, not TYPE_CHECKING."""
    for stmt in body:
        if isinstance(stmt, ast.If) and "TYPE_CHECKING" in ast.unparse(stmt.test):
            continue
        if isinstance(stmt, ast.If):
            yield from _module_level(stmt.body)
            yield from _module_level(stmt.orelse)
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)):
                yield from _module_level(block)
        else:
            yield stmt


def _imported(node: ast.AST, module: str, mods: dict[str, Path]) -> set[str]:
    """The package modules ``node`` imports (``from pkg import sub`` names the submodule)."""
    names: list[str] = []
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            package = module.split(".")
            if mods[module].name != "__init__.py":
                package = package[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join(package + ([base] if base else []))
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    out = set()
    for name in names:
        while name and name not in mods:  # a name inside a module: the module
            name = name.rpartition(".")[0]
        if name and name != module:
            out.add(name)
    return out


def import_graph(module_level_only: bool) -> dict[str, set[str]]:
    """``{module: modules it imports}`` over ``benchmark/``."""
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        nodes = list(_module_level(tree.body)) if module_level_only else list(ast.walk(tree))
        graph[name] = set().union(*(_imported(n, name, mods) for n in nodes)) if nodes else set()
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    # The finder itself can fail: a planted two-module cycle and a self-contained chain.
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set(), "d": {"c"}}
    assert cycles(graph) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_graph_sees_the_package() -> None:
    graph = import_graph(module_level_only=True)
    assert graph["benchmark.metrics.registry"] >= {"benchmark.metrics.retrieval", "benchmark.registry"}
    assert graph["benchmark.protocol.dispatch"] >= {"benchmark.protocol.base", "benchmark.protocol.registry"}
    assert "benchmark.protocol.search_stage" in graph["benchmark.protocol.mlrc_run"]
    assert "benchmark.analysis.convergence" in graph["benchmark.engine.train"]


def test_no_module_level_import_cycles() -> None:
    assert cycles(import_graph(module_level_only=True)) == []


def test_no_import_cycles_at_all() -> None:
    # Function-level imports and `if TYPE_CHECKING:` ones included: the registries once made a
    # 10-module circle (registry -> plugins -> data/models/losses -> registry) through the lazy
    # import of plugin discovery, and the dataset registry one with data.base through a type.
    assert cycles(import_graph(module_level_only=False)) == []


def test_the_registry_imports_no_component() -> None:
    # The registry owns discovery; what a kind's plugin must be is given to it by the kind's own
    # registry module, so the generic registry never imports one. (benchmark.schema: the record
    # schema's read rules, which PluginSourceDoc's keys carry; it imports nothing of dmlbench.)
    graph = import_graph(module_level_only=False)
    allowed = {"benchmark.checks", "benchmark.errors", "benchmark.lazy", "benchmark.schema"}
    assert graph["benchmark.registry"] <= allowed
    assert graph["benchmark.schema"] == set()


#: The layers of the run stack, bottom first: a module of one may import its own layer and those
#: listed before it, never one after it (with function-level imports counted too).
LAYERS = ("benchmark.analysis", "benchmark.engine", "benchmark.protocol")
#: Packages that read records: they may use the record analysis, never the code that writes records
#: (the protocols register their record kinds in benchmark.records).
READERS = ("benchmark.report", "benchmark.records")
READABLE = ("benchmark.analysis",)


def _layer(module: str, layers: tuple[str, ...]) -> str | None:
    return next((p for p in layers if module == p or module.startswith(p + ".")), None)


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """``(importer, imported)`` pairs where a lower layer imports a higher one, or a record reader
    imports the engine or the protocols."""
    found = []
    for module, imports in sorted(graph.items()):
        own = _layer(module, LAYERS)
        for target in sorted(imports):
            theirs = _layer(target, LAYERS)
            if theirs is None:
                continue
            upward = own is not None and LAYERS.index(theirs) > LAYERS.index(own)
            reader_reaches_writer = _layer(module, READERS) is not None and _layer(target, READABLE) is None
            if upward or reader_reaches_writer:
                found.append((module, target))
    return found


def test_layer_checker_finds_an_upward_import() -> None:
    graph = {
        "benchmark.engine.train": {"benchmark.protocol.base", "benchmark.analysis.convergence"},
        "benchmark.report.tables": {"benchmark.engine.train", "benchmark.analysis.convergence"},
        "benchmark.protocol.base": {"benchmark.engine.train"},
    }
    assert upward_imports(graph) == [
        ("benchmark.engine.train", "benchmark.protocol.base"),
        ("benchmark.report.tables", "benchmark.engine.train"),
    ]


def test_no_import_runs_up_the_layers() -> None:
    assert upward_imports(import_graph(module_level_only=False)) == []
