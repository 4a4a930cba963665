"""The documentation against the code and the files: the generated parts table of
docs/architecture.md equals the registries, every relative link (and its #anchor) resolves, the
layer table names every package, and no page cites anything outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import docs_tables
import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", ROOT / "benchmarks" / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def test_the_parts_table_is_the_registries():
    text = docs_tables.ARCHITECTURE.read_text()
    block = docs_tables.current_block(text)
    assert block is not None, f"docs/architecture.md lost the markers of its parts table: {docs_tables.BEGIN}"
    assert block == docs_tables.generated_block(), (
        "docs/architecture.md's table of parts differs from the registries of dynamics.parts "
        f"(a part was added, removed or renamed); regenerate it: {docs_tables.REGENERATE}"
    )


def test_the_parts_table_lists_every_registered_part():
    """Independently of how the table is generated: every registry of ``dynamics.parts.REGISTRIES``
    is a row, and that row names each of its parts and nothing else."""
    from dynamics.parts import REGISTRIES

    rows = {
        cells[0]: cells
        for line in docs_tables.current_block(docs_tables.ARCHITECTURE.read_text()).splitlines()
        if line.startswith("| `") and len(cells := [c.strip() for c in line.strip("|").split("|")]) == 4
    }
    by_field = {cells[1].strip("`"): cells for cells in rows.values()}
    for kind, registry in REGISTRIES.items():
        assert registry.field in by_field, (
            f"no row for the {kind} registry ({registry.field}): {docs_tables.REGENERATE}"
        )
        listed = re.findall(r"`([^`]+)`", by_field[registry.field][2])
        assert listed == list(registry.names), (kind, listed, registry.names)


def test_the_layer_table_names_every_package():
    text = (ROOT / "docs" / "architecture.md").read_text()
    packages = [p.parent for p in (ROOT / "dynamics").glob("*/__init__.py")]
    packages += [ROOT / name for name in ("datamodels", "figures", "benchmarks")]
    for package in packages:
        name = package.relative_to(ROOT).as_posix() + "/"
        assert f"| `{name}` |" in text, f"docs/architecture.md's layer table has no row for {name}"


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", text, re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page):
    """Each relative link or image of the page names a file that exists, and its #anchor a heading of it."""
    links = LINK.findall(FENCE.sub("", page.read_text()))
    for target in links:
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.relative_to(ROOT)}: {target} does not exist"
        if anchor and file.suffix == ".md":
            assert anchor in _anchors(file), f"{page.relative_to(ROOT)}: {target} has no heading #{anchor}"


HISTORY = {
    "a reference outside the repository": re.compile(r"\.\./shared"),
    "an issue number": re.compile(r"\bissues? ?#?\d+", re.I),
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
    "a date": re.compile(r"\b20\d\d-\d\d-\d\d\b"),
}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_pages_describe_the_code_not_its_history(page):
    """Pages say what the code does; where it came from is in git (no commits, dates or issues)."""
    text = page.read_text()
    for what, pattern in HISTORY.items():
        found = pattern.search(text)
        assert found is None, f"{page.relative_to(ROOT)} cites {what}: {found.group(0)!r}"


def test_the_tests_a_page_names_exist():
    """A page that says which test checks a guarantee names a test that is there (a test file, or
    a test function: a name of three words or more, so that metrics such as test_loss are not read
    as tests)."""
    defined = set()
    for file in (ROOT / "tests").glob("*.py"):
        defined.update(re.findall(r"^(?:async )?def (test_\w+)", file.read_text(), re.M))
        defined.add(file.name)
    for page in PAGES:
        for name in re.findall(r"\b(test_\w+\.py|test_[A-Za-z0-9]+_\w+)", page.read_text()):
            assert name in defined, f"{page.relative_to(ROOT)} names {name}, which tests/ does not define"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_page_does_not_repeat_its_title(page):
    text = FENCE.sub("", page.read_text())
    title, *sections = re.findall(r"^#+ (.+)$", text, re.M)
    assert _slug(title) not in {_slug(s) for s in sections}, f"{page.relative_to(ROOT)} repeats its title"


def test_the_data_model_table_is_the_registry():
    """docs/model.md's data-model table: one row per registered data model, in order, and each
    row's defaults are the model's declared sizes and parameter defaults."""
    text = docs_tables.MODEL_DOC.read_text()
    block = docs_tables.current_block(text, docs_tables.DM_BEGIN, docs_tables.DM_END)
    assert block is not None, f"docs/model.md lost its data-model table's markers: {docs_tables.DM_BEGIN}"
    assert block == docs_tables.data_model_block(text), (
        f"docs/model.md's data-model table differs from dynamics.parts.DATA_MODELS: {docs_tables.REGENERATE}"
    )


def test_the_data_model_table_names_each_model_and_its_defaults():
    """Independently of the generator: the rows are the registry's names, and each declared
    parameter default appears in its row."""
    import dataclasses

    from dynamics.parts import DATA_MODELS

    text = docs_tables.MODEL_DOC.read_text()
    block = docs_tables.current_block(text, docs_tables.DM_BEGIN, docs_tables.DM_END)
    lines = block.splitlines()[4:]  # the marker, a blank line, the header and its rule
    rows = {docs_tables._row_name(line): line for line in lines if docs_tables._row_name(line)}
    assert list(rows) == list(DATA_MODELS.names)
    for name in DATA_MODELS.names:
        model = DATA_MODELS[name]
        defaults = rows[name].rsplit("|", 2)[1]
        for key, size in model.sizes.items():
            assert f"{key}={size}" in defaults, (name, key)
        for f in dataclasses.fields(model.schema) if model.schema else ():
            if isinstance(f.default, str | int) and not isinstance(f.default, bool):
                assert f"={f.default}" in defaults, (name, f.name, defaults)


def test_results_format_names_every_metric():
    """Every registered metric is named in docs/results-format.md (a parameter snapshot by the
    file that holds them, params.npz)."""
    from dynamics.parts.metrics import REGISTRY

    text = (ROOT / "docs" / "results-format.md").read_text()
    missing = [m.name for m in REGISTRY.values() if not m.snapshot and f"`{m.name}`" not in text]
    assert not missing, f"docs/results-format.md does not name the metrics {missing}"
    if any(m.snapshot for m in REGISTRY.values()):
        assert "`params.npz`" in text
