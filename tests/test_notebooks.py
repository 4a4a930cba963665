"""Every notebook in notebooks/ runs top to bottom headless (nbclient, a real kernel) at tiny sizes,
and is stored without outputs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import child_env, kernel_env
from jupyterlab_browser import NOTEBOOKS as IN_THE_BROWSER

REASON = "needs the notebook extra: pip install -e '.[notebook]'"

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# A kernel start, JAX's import and the compiles cost 10-25 s per notebook on a shared 2-core CPU:
# the default suite executes these, `make stress` (and CI) every notebook under both backends: the
# kernel's own (inline) and MPLBACKEND=Agg, which a user's environment may set (clusters do). The
# notebooks with a widget run under Agg in tests/test_browser.py (JupyterLab started under it,
# every cell run, the widget pressed): only the quickstart's is repeated here, in the default suite.
DEFAULT_RUN = (("quickstart", None), ("attention", None), ("quickstart", "Agg"))
BACKENDS = (None, "Agg")
RUN_PARAMS = [
    pytest.param(
        p,
        backend,
        id=f"{p.stem}-{backend or 'inline'}",
        marks=() if (p.stem, backend) in DEFAULT_RUN else pytest.mark.stress,
    )
    for p in NOTEBOOKS
    for backend in BACKENDS
    if (p.stem, backend) in DEFAULT_RUN or backend is None or p.stem not in IN_THE_BROWSER
]


def _read(path):
    """The notebook's cells as its JSON has them (cell_type, source, outputs, execution_count):
    the checks of the stored file need no nbformat, whose import (jsonschema) costs seconds."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        cell["source"] = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    return SimpleNamespace(cells=[SimpleNamespace(**cell) for cell in cells])


def _outputs(nb):
    return [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]


def test_there_is_a_quickstart_and_one_notebook_per_demo():
    from dynamics.demo import DEMOS

    names = {p.stem for p in NOTEBOOKS}
    assert "quickstart" in names
    assert {n.replace("-vs-", "_").replace("-", "_") for n in DEMOS} <= names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path):
    nb = _read(path)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name}: strip the outputs"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_shows_figures_whatever_the_backend(path):
    # MPLBACKEND=Agg in the environment JupyterLab starts from would show no figure (and made
    # plt.show(figure) a TypeError): every notebook picks the inline backend itself, first thing
    nb = _read(path)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "\n%matplotlib inline\n" in f"\n{first.source}\n", f"{path.name}: start with %matplotlib inline"
    for cell in nb.cells:
        shown = cell.source.replace("plt.show()", "")
        assert "plt.show(" not in shown, f"{path.name}: plt.show() takes no figure (a TypeError under Agg)"


@pytest.mark.slow
@pytest.mark.parametrize(("path", "backend"), RUN_PARAMS)
def test_notebook_runs_headless(path, backend, monkeypatch, tmp_path):
    nbformat = pytest.importorskip("nbformat", reason=REASON)
    nbclient = pytest.importorskip("nbclient", reason=REASON)
    pytest.importorskip("ipykernel", reason=REASON)
    monkeypatch.setenv("MHSIM_NOTEBOOK_QUICK", "1")
    # CI exports MPLBACKEND=Agg for the command lines; a notebook user's kernel picks the inline
    # backend, and a user's environment may set Agg: both must run and show their figures
    if backend is None:
        monkeypatch.delenv("MPLBACKEND", raising=False)
    else:
        monkeypatch.setenv("MPLBACKEND", backend)
    monkeypatch.setenv("PYTHONPATH", child_env()["PYTHONPATH"])
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the quickstart's temporary results folder
    # The kernel at the users' XLA level, its programs in the tests' cache folder: the quickstart
    # under its second backend loads the first one's programs (in one process, or when xdist runs
    # them one after the other), and so do the JupyterLab kernels of tests/test_browser.py.
    for name, value in kernel_env(dict(os.environ)).items():
        monkeypatch.setenv(name, value)
    nb = nbformat.read(path, as_version=4)
    resources = {"metadata": {"path": str(ROOT / "notebooks")}}  # where JupyterLab runs it
    listing = lambda: sorted(p.name for p in (ROOT / "notebooks").iterdir())  # noqa: E731
    before = listing()
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources=resources)
    client.execute()  # raises CellExecutionError, naming the cell, on any error
    assert listing() == before, "a notebook wrote into notebooks/"
    outputs = _outputs(nb)
    assert not [o for o in outputs if o.output_type == "error"]
    # the kernel's inline backend sends every drawn figure as a PNG (no module switched it to Agg)
    assert any("image/png" in o.get("data", {}) for o in outputs), f"{path.name} showed no figure"
