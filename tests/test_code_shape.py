"""The shape of src/: no function over 50 lines, no module over 400, no import cycle between
mascot modules (imports inside functions count: a deferred import is still a dependency).

A module's edges are the mascot modules its `import` / `from ... import` statements name: `from
mascot.a import b` is an edge to `mascot.a.b` when that is a module, else to `mascot.a`. Importing
a submodule also runs its package's __init__, but that is not counted as an edge: packages that
re-export their submodules (mascot.cli, mascot.data) would otherwise always form a cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
MAX_FUNCTION_LINES = 50
MAX_MODULE_LINES = 400

# Known offenders, being reshaped elsewhere; this list is emptied when that work lands. Paths
# relative to src/. Nothing else belongs here.
KNOWN_OFFENDERS: set[str] = set()


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "mascot").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def allowed(path: Path) -> bool:
    return path.relative_to(SRC).as_posix() in KNOWN_OFFENDERS


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


def test_no_function_over_50_lines():
    long = []
    for name, path in modules().items():
        if allowed(path):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                long.append(f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines")
    assert not long, "functions over 50 lines: " + "; ".join(long)


def test_no_module_over_400_lines():
    big = [f"{n}: {len(p.read_text(encoding='utf-8').splitlines())} lines" for n, p in modules().items()
           if not allowed(p) and len(p.read_text(encoding="utf-8").splitlines()) > MAX_MODULE_LINES]
    assert not big, "modules over 400 lines: " + "; ".join(big)


def test_no_import_cycle_between_mascot_modules():
    known = modules()
    graph = {name: set() if allowed(path) else imported(name, path, known) for name, path in known.items()}
    for name in graph:
        graph[name] = {e for e in graph[name] if not allowed(known[e])}
    found = cycles(graph)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(g) for g in found)


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
