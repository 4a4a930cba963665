"""The notebooks in JupyterLab in a real Chromium at projector size (1280 × 720), as a teacher uses
them: each notebook run from the Run menu, every control of its widget moved once (tiny
simulations: MHSIM_NOTEBOOK_QUICK=1), the widget's button pressed, JupyterLab started under
MPLBACKEND=Agg as a cluster's environment may set it. Under `make stress` (and CI),
bounded to a few minutes; Chromium is Debian's package (.ci/run installs it), and a missing
browser fails the test.

It asserts what the headless notebook test cannot see: the press drew a new figure, printed no
traceback and no widget error, and left a few lines of text under the figure (not a dump of the
result's arrays); and the figure is shown at its own size, not shrunk to fit the output area
(the font sizes of tests/test_widgets.py assume it). And what the headless test asserts of its
runs: a figure shown before the press, nothing written beside the notebook.
"""

from __future__ import annotations

import pytest
from jupyterlab_browser import NOTEBOOKS, browser_page, exercise_notebook, lab_server

# No importorskip: JupyterLab and Playwright are in the test extra, and this test must fail, not
# skip, where they or the browser are missing.

MAX_LINES = 8  # text under the figure after one press: a summary, not the result object


@pytest.fixture(scope="module")
def lab_page():
    # MPLBACKEND=Agg where JupyterLab starts, as on a cluster (and in CI): every notebook must
    # still show its figures and redraw them on a press (tests/test_notebooks.py runs these
    # notebooks headless under the inline backend only: this is their run under Agg)
    with lab_server(quick=True, mplbackend="Agg") as lab, browser_page() as page:
        yield lab, page


@pytest.mark.stress
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_in_a_real_browser(lab_page, name):
    lab, page = lab_page
    try:
        r = exercise_notebook(page, lab, name)
    finally:
        lab.shutdown_kernels()
    print(f"{name}: {r.seconds:.1f} s; moved {r.moved}")
    assert not r.errors, f"{name}: errors on the page: {r.errors}"
    assert not r.written, f"{name}: the notebook wrote {r.written} beside itself"
    assert r.images_before, f"{name}: no figure shown before the press"
    assert len(r.moved) >= 3, f"{name}: expected H, η and steps controls, moved {r.moved}"
    assert r.image_after and r.image_after not in r.images_before, f"{name}: the figure did not change"
    lines = [line for line in r.widget_text.splitlines() if line.strip()]
    assert len(lines) <= MAX_LINES and len(r.widget_text) < 2000, (
        f"{name}: {len(lines)} lines under the figure after one press:\n{r.widget_text[:1500]}"
    )
    natural, shown = r.image_px
    assert shown >= natural - 1, f"{name}: the {natural} px figure is shrunk to {shown:.0f} px"
    assert natural <= r.output_px, f"{name}: figure {natural} px wider than the output area {r.output_px}"
