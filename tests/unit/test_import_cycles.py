"""No import circle among the modules of ``scripts/``, ``stacks/`` and ``benchmarks/``.

Read from the source with ``ast`` (nothing is imported). An edge is every ``import`` a module
makes of another module of these folders, at any level of the file: an import inside a function
counts as much as one at the top, because it closes the same circle the moment it runs. ``from
package import name`` is an edge to ``package.name`` where that is a module, else to ``package``;
relative imports are resolved. A package's ``__init__`` that its submodules pass through is not an
edge of theirs (none of these ``__init__`` files imports anything).

Run as ``python -m tests.unit.test_import_cycles`` to print the circles (nothing when there are none).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, Mapping

ROOT = Path(__file__).resolve().parents[2]

FOLDERS = ("scripts", "stacks", "benchmarks")


def module_files(root: Path = ROOT, folders: tuple[str, ...] = FOLDERS) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``folders``."""
    found = {}
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(module: str, path: Path) -> Iterator[str]:
    """Every dotted name ``path`` imports, relative imports made absolute."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *([node.module] if node.module else [])])
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(files: Mapping[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules among ``files`` it imports (the longest known prefix of each name)."""
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = set()
        for name in _imported(module, path):
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted, the list sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_import_circle_in_scripts_stacks_or_benchmarks():
    found = cycles(import_graph(module_files()))
    assert found == [], "import circles (move the shared piece to a lower module): " + "; ".join(
        " <-> ".join(group) for group in found
    )


def test_a_circle_through_a_lazy_relative_import_is_found(tmp_path):
    (tmp_path / "scripts" / "pkg").mkdir(parents=True)
    (tmp_path / "scripts" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "scripts" / "pkg" / "low.py").write_text("X = 1\n")
    (tmp_path / "scripts" / "pkg" / "a.py").write_text("from scripts.pkg.b import f\nfrom .low import X\n")
    (tmp_path / "scripts" / "pkg" / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    files = module_files(tmp_path, ("scripts",))
    graph = import_graph(files)
    assert graph["scripts.pkg.a"] == {"scripts.pkg.b", "scripts.pkg.low"}
    assert cycles(graph) == [["scripts.pkg.a", "scripts.pkg.b"]]


if __name__ == "__main__":
    for group in cycles(import_graph(module_files())):
        print(" <-> ".join(group))
