"""The project's import graph, read from the source with ``ast``: no cycle between modules, not even
through an import inside a function (a deferred import hides a loop from Python, not from a
reader), and ``dynamics.infra`` a leaf that imports nothing of mhsim outside itself.

An edge A → B is any ``import B`` or ``from B import …`` in A, at any depth, except under
``if TYPE_CHECKING:`` (never executed). ``from package import name`` points at the submodule
``package.name`` when there is one, else at the package. The implicit import of a module's parent
packages is not an edge (every module would otherwise import its package's ``__init__``).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dynamics", "datamodels", "figures")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node, at any depth, outside ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that module ``name`` (at ``path``) imports."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base + "." + a.name if f"{base}.{a.name}" in modules else base for a in node.names]
        out |= {t for t in targets if t in modules and t != name}
    return out


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: imported(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
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


def test_the_reader_sees_deferred_imports_and_finds_a_cycle(tmp_path):
    """The checker itself: an import inside a function is an edge, and a two-module loop is found."""
    a = "def f():\n    from pkg import b\n"
    tree_edges = [n.module for n in _imports(ast.parse(a))]
    assert tree_edges == ["pkg"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_modules_even_through_deferred_imports():
    graph = import_graph()
    assert len(graph) > 50  # the whole project was read
    found = cycles(graph)
    shown = "; ".join(" ↔ ".join(c) for c in found)
    assert not found, f"import cycles (deferred imports counted): {shown}"


def test_infra_is_a_leaf():
    graph = import_graph()
    outside = {
        (name, target)
        for name, targets in graph.items()
        if name.startswith("dynamics.infra")
        for target in targets
        if not target.startswith("dynamics.infra")
    }
    assert not outside, f"dynamics.infra imports mhsim outside itself: {sorted(outside)}"


def test_the_figures_do_not_import_the_command_lines():
    """The command lines draw figures (``dynamics.cli`` imports ``figures``), so ``figures`` imports
    no command line back; ``figures.__main__``, the entry point of ``python -m figures`` that
    nothing imports, hands over to ``dynamics.cli.figures``."""
    graph = import_graph()
    back = {
        (name, target)
        for name, targets in graph.items()
        if name.startswith("figures") and name != "figures.__main__"
        for target in targets
        if target.startswith("dynamics.cli")
    }
    assert not back, f"figures imports the command line: {sorted(back)}"
    assert not any(("figures.__main__" in targets) for targets in graph.values())


def test_the_core_imports_nothing_of_the_config():
    """``dynamics.core`` (the model, the data arrays, the engine) imports nothing of the config layer,
    not even for annotations under ``if TYPE_CHECKING:``: the config layer builds on it."""
    found = []
    for path in sorted((ROOT / "dynamics" / "core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
            if any(n == "dynamics.config" or n.startswith("dynamics.config.") for n in names):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"dynamics.core imports the config layer: {found}"
