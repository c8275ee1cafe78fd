"""The shape of src/: no function over 80 lines, no module over 700, no import cycle between
mascot modules nor between its packages (imports inside functions count: a deferred import is
still a dependency); the command line (`mascot.cli`) is imported by nothing in the library, and the
test doubles (`mascot.testing`) by nothing but the scripted provider's registration.

A module's edges are the mascot modules its `import` / `from ... import` statements name: `from
mascot.a import b` is an edge to `mascot.a.b` when that is a module, else to `mascot.a`. Importing
a submodule also runs its package's __init__, but that is not counted as an edge: packages that
re-export their submodules (mascot.cli, mascot.data) would otherwise always form a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 700

# Nothing outside mascot.testing imports it: the `scripted` provider finds its players by name
# (mascot.llm.providers.SCRIPTED_PLAYERS), as a plug-in would be found.
TESTING_IMPORTERS: set[str] = set()


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "mascot").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The mascot modules that `name` imports anywhere in its body."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    edges = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            edges.update(alias.name for alias in node.names if alias.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                kept = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(kept + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                edges.add(sub if sub in known else base)
    return {e for e in edges if e in known and e != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def test_no_function_over_80_lines():
    long = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                long.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: " + "; ".join(long)


def test_no_module_over_700_lines():
    big = [
        f"{n}: {len(p.read_text(encoding='utf-8').splitlines())} lines"
        for n, p in modules().items()
        if len(p.read_text(encoding="utf-8").splitlines()) > MAX_MODULE_LINES
    ]
    assert not big, f"modules over {MAX_MODULE_LINES} lines: " + "; ".join(big)


def module_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imported(name, path, known) for name, path in known.items()}


def package_of(module: str) -> str:
    """mascot.judge.panel -> mascot.judge; a top-level module (mascot.settings) is its own."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for module, edges in graph.items():
        mine = package_of(module)
        packages.setdefault(mine, set()).update(p for p in map(package_of, edges) if p != mine)
    return packages


def test_no_import_cycle_between_mascot_modules():
    found = cycles(module_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(g) for g in found)


def test_no_import_cycle_between_mascot_packages():
    found = cycles(package_graph(module_graph()))
    assert not found, "package cycles: " + "; ".join(" <-> ".join(g) for g in found)


def importers_of(package: str) -> set[str]:
    return {m for m, edges in module_graph().items() if package_of(m) != package and any(package_of(e) == package for e in edges)}


def test_the_command_line_is_imported_by_nothing_in_the_library():
    assert importers_of("mascot.cli") <= {"mascot.__main__"}


def test_the_test_doubles_are_imported_only_by_the_scripted_provider():
    assert importers_of("mascot.testing") <= TESTING_IMPORTERS


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert package_graph({"mascot.a.x": {"mascot.b.y"}, "mascot.b.y": {"mascot.a.z"}, "mascot.a.z": set()}) == {
        "mascot.a": {"mascot.b"},
        "mascot.b": {"mascot.a"},
    }
