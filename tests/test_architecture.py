"""The layers of docs/architecture.md, checked on the code: every import in ``dynamics/``,
``datamodels/`` and ``figures/`` (at a file's top or inside a function, ``import x`` or
``from x import y``, relative ones resolved) reaches only the layers its own layer's row names,
and a function-level import never repeats a module its file already imports at top level (the
inner one defers nothing, and hides where the module really comes from); one in ``dynamics/`` says
why it is not at the top in a ``# lazy: <reason>`` comment on its line or the line above."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARCHITECTURE = ROOT / "docs" / "architecture.md"
LIBRARY = ("dynamics", "datamodels", "figures")
NOT_LIBRARY = ("benchmarks", "tests")  # they may import the library; the library imports neither
RULES_NAME = "docs/architecture.md, the import rules"
RULES = ("<!-- layer rules:", "<!-- end of the layer rules -->")
EXCEPTIONS = ("<!-- layer exceptions:", "<!-- end of the layer exceptions -->")

# Imports that break the rules, as (file, module): none. An entry here is a debt to pay off
# (test_the_known_violations_are_still_there says when it is paid).
KNOWN_VIOLATIONS: set[tuple[str, str]] = set()

# Function-level imports of a module the file already imports at top level, as (file, module): none.
KNOWN_REPEATED_IMPORTS: set[tuple[str, str]] = set()

# Modules under dynamics/ that share a file name, each the same idea seen from another layer (the
# registry of a kind of part and its math, a command line and its experiment, …). A debt, as above:
# a new module takes a name of its own, and test_the_known_shared_names_are_still_there says when
# an entry is paid off by a rename.
KNOWN_SHARED_NAMES: dict[str, frozenset[str]] = {
    "bottleneck.py": frozenset({"dynamics/cli/bottleneck.py", "dynamics/experiments/bottleneck.py"}),
    "common.py": frozenset({"dynamics/cli/common.py", "dynamics/demo/common.py"}),
    "data.py": frozenset({"dynamics/core/data.py", "dynamics/parts/data.py"}),
    "emergence.py": frozenset({"dynamics/experiments/emergence.py", "dynamics/sweeps/emergence.py"}),
    "icl.py": frozenset({"dynamics/experiments/icl.py", "dynamics/parts/icl.py"}),
    "knobs.py": frozenset({"dynamics/cli/knobs.py", "dynamics/parts/knobs.py"}),
    "model.py": frozenset({"dynamics/core/model.py", "dynamics/parts/model.py"}),
    "positional_semantic.py": frozenset(
        {"dynamics/experiments/positional_semantic.py", "dynamics/theory/positional_semantic.py"}
    ),
    "run.py": frozenset({"dynamics/cli/run.py", "dynamics/run.py"}),
}
LAZY = re.compile(r"#\s*lazy:\s*\S")  # the reason a function-level import is not at the top
PACKAGE_FILES = ("__init__.py", "__main__.py")  # every package has its own; they are never imported by name


@dataclass(frozen=True)
class Import:
    module: str  # the module it loads, resolved: `from a import b` is a.b when a/b is a module
    line: int
    in_function: bool
    type_checking: bool  # under `if TYPE_CHECKING:`, never run


def _is_module(name: str, root: Path = ROOT) -> bool:
    path = root.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _package(file: Path, root: Path = ROOT) -> str:
    """The package a relative import in ``file`` starts from."""
    parts = file.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1])


def imports_of(file: Path, root: Path = ROOT) -> list[Import]:
    """Every import statement of ``file``, wherever it stands, one entry per module it loads."""
    package = _package(file, root)
    found: list[Import] = []

    def visit(node: ast.AST, in_function: bool, type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            guarded = type_checking or (isinstance(child, ast.If) and _is_type_checking(child.test))
            if isinstance(child, ast.Import):
                found.extend(Import(a.name, child.lineno, inner, guarded) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    module = ".".join([*base, *([child.module] if child.module else [])])
                else:
                    module = child.module
                for alias in child.names:
                    sub = f"{module}.{alias.name}"
                    name = sub if alias.name != "*" and _is_module(sub, root) else module
                    found.append(Import(name, child.lineno, inner, guarded))
            visit(child, inner, guarded)

    visit(ast.parse(file.read_text(), str(file)), False, False)
    return list(dict.fromkeys(found))  # `from a import b, c` is one import of a


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _table(begin: str, end: str) -> list[list[str]]:
    """The rows of the marked table of docs/architecture.md, each a list of cells."""
    text = ARCHITECTURE.read_text()
    assert begin in text and end in text, f"docs/architecture.md lost the markers {begin!r} … {end!r}"
    block = text[text.index(begin) : text.index(end)]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in block.splitlines()]
    return [r for r in rows if r[0].startswith("`")]


def _paths(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def layer_rules() -> dict[str, list[str]]:
    """{layer: the layers it may import}, lowest layer first, from docs/architecture.md."""
    return {_paths(layer)[0]: _paths(allowed) for layer, allowed, *_ in _table(*RULES)}


def layer_exceptions() -> dict[str, list[str]]:
    """{file: the layers it may import besides its own layer's}, from docs/architecture.md."""
    return {_paths(file)[0]: _paths(allowed) for file, allowed, *_ in _table(*EXCEPTIONS)}


def layer_of(path: str, layers) -> str | None:
    """The layer a path of the repository (``dynamics/core/model.py``) belongs to: the longest row
    that is the path itself or a folder above it."""
    matches = [layer for layer in layers if path == layer or (layer.endswith("/") and path.startswith(layer))]
    return max(matches, key=len, default=None)


def module_path(module: str) -> str:
    """``dynamics.core.model`` -> ``dynamics/core/model.py``; a package -> its ``__init__.py``."""
    path = "/".join(module.split("."))
    return f"{path}/__init__.py" if (ROOT / path).is_dir() else f"{path}.py"


def library_files() -> list[Path]:
    return sorted(p for top in LIBRARY for p in (ROOT / top).rglob("*.py"))


def _rel(file: Path) -> str:
    return file.relative_to(ROOT).as_posix()


def layer_violations() -> list[tuple[str, str, str]]:
    """(file, module, message) for every import against the rules, known ones included."""
    rules, exceptions = layer_rules(), layer_exceptions()
    found = []
    for file in library_files():
        rel = _rel(file)
        layer = layer_of(rel, rules)
        if layer is None:
            found.append((rel, "", f"{rel} is in no layer: give it a row in {RULES_NAME}"))
            continue
        allowed = {layer, *rules[layer], *exceptions.get(rel, ())}
        for imp in imports_of(file):
            where = f"{rel}:{imp.line}: imports {imp.module}"
            top = imp.module.split(".")[0]
            if top in NOT_LIBRARY:
                found.append((rel, imp.module, f"{where}; the library imports no {top}/"))
            elif top in LIBRARY and (target := layer_of(module_path(imp.module), rules)) not in allowed:
                may = ", ".join(rules[layer]) or "nothing of mhsim"
                also = f" (and, as an exception, {', '.join(exceptions[rel])})" if rel in exceptions else ""
                rule = f"{layer} may import only {may}{also}"
                found.append((rel, imp.module, f"{where} (layer {target}), but {rule} ({RULES_NAME})"))
    return found


def test_the_rules_only_look_down():
    """Each layer's row names only layers below it (earlier in the table), so a lower layer never
    imports a higher one; every exception names a file that exists and layers that exist."""
    rules = layer_rules()
    assert rules, "docs/architecture.md's layer rules table is empty"
    order = list(rules)
    for i, (layer, allowed) in enumerate(rules.items()):
        assert (ROOT / layer).exists(), f"the layer rules name {layer}, which does not exist"
        for other in allowed:
            assert other in rules, f"{layer}'s row names {other}, which is not a layer of the table"
            assert order.index(other) < i, f"{layer} may import {other}, a layer above it in the table"
    for file, allowed in layer_exceptions().items():
        assert (ROOT / file).is_file(), f"the layer exceptions name {file}, which does not exist"
        assert layer_of(file, rules), f"the layer exception {file} is in no layer"
        assert all(a in rules for a in allowed), (file, allowed)


def test_every_import_follows_the_layer_rules():
    broken = [
        message for file, module, message in layer_violations() if (file, module) not in KNOWN_VIOLATIONS
    ]
    assert not broken, "imports against docs/architecture.md's layer rules:\n" + "\n".join(broken)


def test_the_known_violations_are_still_there():
    """An entry of KNOWN_VIOLATIONS whose import is gone is removed from the list, so that the
    rule holds for that file from then on."""
    present = {(file, module) for file, module, _ in layer_violations()}
    gone = sorted(KNOWN_VIOLATIONS - present)
    assert not gone, f"no longer imported, remove from KNOWN_VIOLATIONS: {gone}"


def repeated_imports() -> list[tuple[str, str, str]]:
    """(file, module, message) for each function-level import of a module that its file already
    imports at top level (outside ``if TYPE_CHECKING:``, which never runs)."""
    found = []
    for file in library_files():
        rel, imports = _rel(file), imports_of(file)
        top = {}
        for imp in imports:
            if not imp.in_function and not imp.type_checking:
                top.setdefault(imp.module, imp.line)
        for imp in (i for i in imports if i.in_function and i.module in top):
            why = f"line {top[imp.module]} already imports it (import the names there: this defers nothing)"
            found.append(
                (rel, imp.module, f"{rel}:{imp.line}: imports {imp.module} inside a function; {why}")
            )
    return found


def test_a_function_level_import_does_not_repeat_a_top_level_one():
    repeated = [m for file, module, m in repeated_imports() if (file, module) not in KNOWN_REPEATED_IMPORTS]
    assert not repeated, "\n".join(repeated)


def test_the_known_repeated_imports_are_still_there():
    present = {(file, module) for file, module, _ in repeated_imports()}
    gone = sorted(KNOWN_REPEATED_IMPORTS - present)
    assert not gone, f"no longer repeated, remove from KNOWN_REPEATED_IMPORTS: {gone}"


@pytest.fixture
def package(tmp_path):
    (tmp_path / "dynamics" / "core").mkdir(parents=True)
    for name in (
        "dynamics/__init__.py",
        "dynamics/core/__init__.py",
        "dynamics/core/model.py",
        "dynamics/errors.py",
    ):
        (tmp_path / name).write_text("")
    return tmp_path


def test_the_reader_sees_every_form_of_import(package):
    """Top level and inside functions, ``import``, ``from … import``, relative, ``TYPE_CHECKING``."""
    file = package / "dynamics" / "core" / "engine.py"
    file.write_text(
        "from typing import TYPE_CHECKING\n"
        "import dynamics.core.model\n"
        "from . import model\n"
        "from .. import errors\n"
        "from ..errors import ConfigError\n"
        "if TYPE_CHECKING:\n"
        "    from dynamics.config.schema import Config\n"
        "def f():\n"
        "    from dynamics.sweeps import sweep\n"
        "    class C:\n"
        "        def g(self):\n"
        "            import figures.sweep\n"
    )
    found = {(i.module, i.line, i.in_function, i.type_checking) for i in imports_of(file, package)}
    assert found == {
        ("typing", 1, False, False),
        ("dynamics.core.model", 2, False, False),
        ("dynamics.core.model", 3, False, False),
        ("dynamics.errors", 4, False, False),
        ("dynamics.errors", 5, False, False),
        ("dynamics.config.schema", 7, False, True),
        ("dynamics.sweeps", 9, True, False),
        ("figures.sweep", 12, True, False),
    }


def test_a_path_belongs_to_its_longest_layer():
    layers = ["dynamics/", "dynamics/core/", "dynamics/api.py", "figures/"]
    assert layer_of("dynamics/core/model.py", layers) == "dynamics/core/"
    assert layer_of("dynamics/api.py", layers) == "dynamics/api.py"
    assert layer_of("dynamics/apix.py", layers) == "dynamics/"
    assert layer_of("datamodels/npz.py", layers) is None


def shared_names(root: Path = ROOT) -> dict[str, frozenset[str]]:
    """{file name: the modules under dynamics/ that have it} for each name two or more modules share
    (``__init__.py`` and ``__main__.py`` aside)."""
    by_name: dict[str, set[str]] = {}
    for file in (root / "dynamics").rglob("*.py"):
        if file.name not in PACKAGE_FILES:
            by_name.setdefault(file.name, set()).add(file.relative_to(root).as_posix())
    return {name: frozenset(paths) for name, paths in by_name.items() if len(paths) > 1}


def test_no_two_modules_share_a_file_name():
    """A module's file name says its one job: ``checks.py`` or ``grid.py`` in three layers reads the
    same in a traceback, an editor's tab and ``git log --stat``."""
    new = {
        name: sorted(paths - KNOWN_SHARED_NAMES.get(name, frozenset()))
        for name, paths in shared_names().items()
        if not paths <= KNOWN_SHARED_NAMES.get(name, frozenset())
    }
    assert not new, f"modules under dynamics/ that share a file name (give each a name of its own): {new}"


def test_the_known_shared_names_are_still_there():
    present = shared_names()
    gone = {
        name: sorted(paths - present.get(name, frozenset())) for name, paths in KNOWN_SHARED_NAMES.items()
    }
    gone = {name: paths for name, paths in gone.items() if paths}
    assert not gone, f"no longer shared, remove from KNOWN_SHARED_NAMES: {gone}"


def test_the_shared_names_reader_sees_nested_modules(tmp_path):
    for name in (
        "dynamics/__init__.py",
        "dynamics/a/__init__.py",
        "dynamics/a/grid.py",
        "dynamics/b/c/grid.py",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "dynamics" / "b" / "other.py").write_text("")
    assert shared_names(tmp_path) == {"grid.py": frozenset({"dynamics/a/grid.py", "dynamics/b/c/grid.py"})}


def unexplained_imports(root: Path = ROOT) -> list[str]:
    """Each function-level import under dynamics/ (outside ``if TYPE_CHECKING:``) without a
    ``# lazy: <reason>`` comment (a heavy or optional import deferred, a cycle avoided, a start-up
    cost) on its first line or on a comment line just above it."""
    found = []
    for file in sorted((root / "dynamics").rglob("*.py")):
        lines = file.read_text().splitlines()
        for line in sorted({i.line for i in imports_of(file, root) if i.in_function and not i.type_checking}):
            above = lines[line - 2].strip() if line > 1 else ""
            if not (LAZY.search(lines[line - 1]) or (above.startswith("#") and LAZY.search(above))):
                found.append(f"{file.relative_to(root).as_posix()}:{line}: {lines[line - 1].strip()}")
    return found


def test_every_function_level_import_says_why_it_is_not_at_the_top():
    missing = unexplained_imports()
    assert not missing, (
        "function-level imports without a '# lazy: <reason>' comment on their line or the line above "
        "(move them to the top, or say what deferring them buys):\n" + "\n".join(missing)
    )


def test_the_lazy_reader_sees_each_form_of_marker(package):
    (package / "dynamics" / "core" / "engine.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "import json\n"
        "if TYPE_CHECKING:\n"
        "    from dynamics.core import model\n"
        "def f():\n"
        "    import dynamics.errors  # lazy: a start-up cost\n"
        "    # lazy: a cycle\n"
        "    from dynamics.core import model\n"
        "    import os\n"
        "    import sys  # lazy:\n"
        "    x = 1  # lazy: not a comment line above an import\n"
        "    import re\n"
    )
    assert unexplained_imports(package) == [
        "dynamics/core/engine.py:9: import os",
        "dynamics/core/engine.py:10: import sys  # lazy:",
        "dynamics/core/engine.py:12: import re",
    ]
