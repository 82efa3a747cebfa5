"""The project's import graph as its source says it: which module imports which, found by parsing every file, and
the circles in it (``tests/test_import_graph.py`` fails on them and on arrows the layout forbids).

An arrow is any import a module runs: at module level or inside a function (a function-level import hides a
circle, it does not open one), ``import a.b``, ``from a import b`` (``a.b`` when it is a module, else ``a``),
relative ones, and ``importlib.import_module("a.b")`` with a literal name. Imports under ``if TYPE_CHECKING:`` are
not arrows: they never run. Only the module named is imported, not its parent packages' ``__init__`` (a package
named on its own, ``import a``, is its ``__init__``).

Run as ``python -m testkit.import_graph [root]`` (``tests/`` on ``sys.path``) for the figures: modules, arrows,
circles and their members.
"""

from __future__ import annotations

import ast
import itertools
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# (the folder module names start from, the folder whose files are modules): the engine and the jobs are packages
# at the top; Airflow puts plugins/ and dags/ on sys.path, so their modules are named from there
SOURCE_ROOTS = ((".", "cdc_core"), (".", "spark_jobs"), ("plugins", "plugins"), ("dags", "dags"))


@dataclass(frozen=True)
class Arrow:
    """One import: ``source`` runs ``import target`` at ``path:line``."""

    source: str
    target: str
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.path}:{self.line})"


@dataclass
class ImportGraph:
    """The modules (name -> file) and the arrows between them, each pair once with where it is first imported."""

    modules: dict[str, Path]
    arrows: dict[tuple[str, str], Arrow] = field(default_factory=dict)

    def successors(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {name: [] for name in self.modules}
        for source, target in self.arrows:
            out[source].append(target)
        return out

    def components(self) -> list[list[str]]:
        """The strongly connected components of more than one module (each holds at least one circle), sorted."""
        return sorted(sorted(c) for c in strongly_connected(self.successors()) if len(c) > 1)

    def circles(self) -> list[list[Arrow]]:
        """Circles that between them use every arrow inside a component: for each arrow not yet shown, the arrow
        and the shortest way back within its component."""
        found: list[list[Arrow]] = []
        succ = self.successors()
        for component in self.components():
            members = set(component)
            seen: set[tuple[str, str]] = set()
            for source in component:
                for target in sorted(succ[source]):
                    if target not in members or (source, target) in seen:
                        continue
                    back = shortest_path(succ, target, source, members)
                    cycle = [source, *back]
                    pairs = list(itertools.pairwise(cycle))
                    seen.update(pairs)
                    found.append([self.arrows[p] for p in pairs])
        return found


def module_files(root: Path, roots: Iterable[tuple[str, str]] = SOURCE_ROOTS) -> dict[str, Path]:
    """Every ``.py`` file under each source root, by its module name (a package by its ``__init__``)."""
    modules: dict[str, Path] = {}
    for base, folder in roots:
        base_dir = root / base
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(base_dir).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            if parts and all(p.isidentifier() for p in parts):
                modules[".".join(parts)] = path
    return modules


def build(root: Path, roots: Iterable[tuple[str, str]] = SOURCE_ROOTS) -> ImportGraph:
    """The graph of the project under ``root``: its modules and every import among them."""
    graph = ImportGraph(module_files(root, roots))
    for name, path in graph.modules.items():
        for target, line in imports_of(name, path, graph.modules):
            if target != name:
                graph.arrows.setdefault((name, target), Arrow(name, target, path.relative_to(root), line))
    return graph


def imports_of(name: str, path: Path, modules: Mapping[str, Path]) -> Iterator[tuple[str, int]]:
    """The project modules the file imports, with the line of each import."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in _run_time_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if (target := _deepest(alias.name, modules)) is not None:
                    yield target, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            if base is None:
                continue
            for alias in node.names:
                # `from a import b`: the submodule a.b when there is one, else a name defined in a
                full = f"{base}.{alias.name}"
                target = full if full in modules else _deepest(base, modules)
                if target is not None:
                    yield target, node.lineno
        elif isinstance(node, ast.Call) and _is_import_module(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                if (target := _deepest(first.value, modules)) is not None:
                    yield target, node.lineno


def _run_time_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of the tree except those under ``if TYPE_CHECKING:`` (its ``else:`` runs)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        and isinstance(test.value, ast.Name) and test.value.id == "typing")


def _is_import_module(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "import_module"
            and isinstance(func.value, ast.Name) and func.value.id == "importlib") or (
        isinstance(func, ast.Name) and func.id in ("import_module", "__import__"))


def _absolute(module: str | None, level: int, package: str) -> str | None:
    """The absolute name ``from <level dots><module>`` means in ``package`` (None: above the top)."""
    if level == 0:
        return module
    parts = package.split(".") if package else []
    if level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (level - 1)]
    if module:
        base.append(module)
    return ".".join(base) or None


def _deepest(name: str, modules: Mapping[str, Path]) -> str | None:
    """The project module ``name`` or the deepest package above it that is one (None: not the project's)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def strongly_connected(succ: Mapping[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit on a long chain)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in succ:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(succ[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(succ[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(component)
    return components


def shortest_path(succ: Mapping[str, list[str]], start: str, goal: str, within: set[str]) -> list[str]:
    """The modules from ``start`` to ``goal`` (both included) by the fewest arrows, staying ``within``."""
    came_from: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while (prev := came_from[path[-1]]) is not None:
                path.append(prev)
            return path[::-1]
        for child in sorted(succ[node]):
            if child in within and child not in came_from:
                came_from[child] = node
                queue.append(child)
    raise ValueError(f"no path from {start} to {goal}")


def describe(circle: list[Arrow]) -> str:
    """``a -> b -> a`` and where each arrow is imported."""
    names = " -> ".join([circle[0].source, *(a.target for a in circle)])
    return names + "".join(f"\n    {a.source} imports {a.target} at {a.path}:{a.line}" for a in circle)


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[2]
    graph = build(root)
    components = graph.components()
    print(f"{len(graph.modules)} modules, {len(graph.arrows)} arrows, {len(components)} circles (components of sizes "
          f"{[len(c) for c in components]})")
    for component in components:
        print("  " + ", ".join(component))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
