"""The package's layering (DESIGN.md): its modules import each other without cycles."""

from __future__ import annotations

import ast
import pathlib

import jaxrl_par

ROOT = pathlib.Path(jaxrl_par.__file__).parent


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """``module -> {modules of the package it imports}``, read from the source: every
    ``import`` and ``from ... import`` statement, function-local ones too. ``from P import
    x`` counts as importing ``P.x`` where that is a module, else ``P`` (a name that ``P``'s
    ``__init__`` defines or re-exports)."""
    paths = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in paths}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                if base in paths:
                    edges |= {f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base
                              for a in node.names}
        graph[name] = edges - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as the modules along it (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_graph_sees_function_local_and_package_imports():
    graph = import_graph()
    assert "jaxrl_par.runner.training" in graph["jaxrl_par.cli"]  # a function-local import
    assert "jaxrl_par.algos.base" in graph["jaxrl_par.algos"]  # the package's __init__
    assert "jaxrl_par.algos" in graph["jaxrl_par.runner.runs"]  # the registry, in __init__
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)
