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


#: Each package's layer (DESIGN.md); a module may import its own layer and those below.
LAYERS = {
    "platform": 0, "axes": 0,
    "losses": 1,
    "networks": 2, "replay": 2, "envs": 2, "blocks": 2,
    "algos": 3,
    "parallel": 4, "presets": 4,
    "runner": 5,
    "cli": 6, "cli_use": 6, "failures": 6, "__main__": 6,
}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None  # None: the package's own __init__


def test_every_module_has_a_layer():
    assert {_layer(m) for m in import_graph()} - {None} <= set(LAYERS)


def test_imports_point_down_the_layers():
    """Building blocks know nothing of algorithms, algorithms nothing of the runtimes,
    the runtimes nothing of the runner."""
    up = [(m, e) for m, edges in import_graph().items() for e in edges
          if _layer(m) and _layer(e) and LAYERS[_layer(e)] > LAYERS[_layer(m)]]
    assert not up, up


def test_losses_import_only_jax_chex_and_optax():
    allowed = {"jax", "chex", "optax", "__future__", "typing", "collections", "math",
               "functools"}
    for path in sorted((ROOT / "losses").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                top = name.split(".")[0]
                assert top in allowed or name.startswith("jaxrl_par.losses"), (path, name)


def test_public_jax_api_only():
    """No ``jax._src``, no private attribute of a jax object, no patched lowering table:
    each breaks silently on a jax release."""
    import re

    private = re.compile(r"\bjax(lib)?(\.[A-Za-z]\w*)*\._\w+|_platform_specific_lowerings"
                         r"|\.dtype\._impl|\bfrom jax(lib)?\._src\b|\bimport jax(lib)?\._src\b")
    found = [f"{p.relative_to(ROOT.parent)}:{n}: {line.strip()}"
             for p in sorted(ROOT.rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1) if private.search(line)]
    assert not found, "\n".join(found)


def test_the_top_level_names_its_public_api():
    """``__all__`` is a static list; every name in it resolves (the runner's ``train`` is
    the function, not a module); ``dir()`` shows them."""
    import types

    tree = ast.parse((ROOT / "__init__.py").read_text())
    (value,) = [n.value for n in tree.body if isinstance(n, ast.Assign)
                and any(getattr(t, "id", None) == "__all__" for t in n.targets)]
    assert isinstance(value, ast.List) and all(isinstance(e, ast.Constant) for e in value.elts)
    for name in jaxrl_par.__all__:
        assert getattr(jaxrl_par, name) is not None, name
    assert callable(jaxrl_par.train) and not isinstance(jaxrl_par.train, types.ModuleType)
    from jaxrl_par import ppo, train  # noqa: F401  (the README's import)

    assert set(jaxrl_par.__all__) <= set(dir(jaxrl_par))
