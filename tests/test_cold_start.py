"""Time to first result: the persistent compilation cache, the phase timers, lazy imports and
figures drawn at the resolution they can show. (Speed itself is measured in
benchmarks/cold_start.py, never asserted here.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import child_env

from dynamics.infra import cache
from dynamics.infra.timings import PHASES, Timings

ROOT = Path(__file__).resolve().parents[1]
PLOTTING = ("matplotlib", "seaborn", "figures", "PIL", "pandas")
TINY = [
    *("--heads", "1,2", "--steps", "6", "--trials", "2", "--n-train", "16", "--n-test", "20"),
    *("--log-every", "2", "--quiet"),
]
# dynamics.run's main in a fresh interpreter, reporting what it imported.
PROBE = """
import json, sys
from dynamics.cli.run import main
try:
    rc = main(sys.argv[1:])
except SystemExit as e:
    rc = e.code
loaded = sorted({m.split(".")[0] for m in sys.modules})
print(json.dumps({"rc": rc, "modules": loaded}))
"""


def probe(args: list[str], cwd: Path, cache_dir: str) -> dict:
    env = child_env(**{cache.ENV: cache_dir})
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_help_imports_neither_jax_nor_plotting(tmp_path):
    seen = probe(["--help"], tmp_path, "off")
    assert seen["rc"] == 0
    assert not {"jax", "jaxlib", "optax", *PLOTTING} & set(seen["modules"])


@pytest.mark.slow
def test_second_process_loads_every_program_from_the_cache(tmp_path):
    """Two identical runs sharing a cache folder: the first compiles and fills it, the second
    compiles nothing (JAX's compile events and dynamics.infra.executables' loads, recorded in
    results.json's timings) and computes the same numbers, to the bit; --no-figure imports no
    plotting library."""
    folder = tmp_path / "jax-cache"
    runs = []
    for i in range(2):
        out = tmp_path / f"run{i}"
        seen = probe([*TINY, "--no-figure", "--out", str(out)], tmp_path, str(folder))
        assert seen["rc"] == 0 and "jax" in seen["modules"]
        assert not set(PLOTTING) & set(seen["modules"])
        runs.append(json.loads((out / "results.json").read_text())["timings"])
    first, second = runs
    assert first["compiled"] >= 2 and first["cache_hits"] == 0  # the data and the engine, at least
    kept = list((folder / "executables").glob("*.xla"))  # whole programs (dynamics.infra.executables)
    assert len(kept) == first["compiled"]
    assert second["compiled"] == 0 and second["cache_hits"] == second["programs"] == first["programs"]
    curves = [np.load(tmp_path / f"run{i}" / "curves.npz") for i in range(2)]
    for name in curves[0].files:
        np.testing.assert_array_equal(curves[0][name], curves[1][name])
    for t in runs:
        assert set(PHASES) <= set(t) and all(t[k] >= 0 for k in (*PHASES, "other", "total"))
        assert sum(t[k] for k in (*PHASES, "other")) == pytest.approx(t["total"], abs=1e-3)


def test_cache_dir_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(cache.ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache.default_dir() == tmp_path / "xdg" / "mhsim" / "jax"
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert cache.default_dir() == Path.home() / ".cache" / "mhsim" / "jax"
    for off in ("", " off ", "off"):
        monkeypatch.setenv(cache.ENV, off)
        assert cache.default_dir() is None
    monkeypatch.setenv(cache.ENV, str(tmp_path / "mine"))
    assert cache.default_dir() == tmp_path / "mine"


def test_no_cache_flag_turns_the_cache_off(monkeypatch, tmp_path):
    from jax.experimental.compilation_cache import compilation_cache as cc

    monkeypatch.setenv(cache.ENV, str(tmp_path / "c"))
    try:
        assert cache.apply(type("Args", (), {"no_cache": True})()) is None
        assert jax.config.jax_enable_compilation_cache is False
        assert cache.apply(type("Args", (), {"no_cache": False})()) == tmp_path / "c"
        assert jax.config.jax_enable_compilation_cache is True
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "c")
    finally:  # the rest of the test session compiles without a persistent cache, as before
        cc.reset_cache()
        jax.config.update("jax_enable_compilation_cache", False)
        jax.config.update("jax_compilation_cache_dir", None)


def test_timings_nest_phases_and_take_compiles_out():
    t = Timings().start()
    t.listen()
    try:
        with t.phase("data"):
            time.sleep(0.05)
            with t.phase("writing"):
                time.sleep(0.05)
        with t.phase("simulation"):
            f = jax.jit(lambda x: jax.numpy.sin(x) * 3.0 + 0.123456)  # a program never seen before
            f(np.arange(7.0)).block_until_ready()
    finally:
        t.stop()
    s = t.seconds()
    assert s["data"] >= 0.05 and s["writing"] >= 0.05
    assert s["data"] < s["total"] - 0.05  # the nested writing time is not counted twice
    assert t.programs >= 1 and s["compile"] > 0
    assert sum(s[k] for k in (*PHASES, "other")) == pytest.approx(s["total"], abs=1e-6)
    assert "programs:" in t.report() and t.to_dict()["programs"] == t.programs


@pytest.mark.parametrize("log", [True, False])
def test_display_points_spread_over_the_axis(log):
    from figures.sweep import display_points

    x = np.arange(1, 10001)
    idx = display_points(x, log, max_points=300)
    assert len(idx) <= 300 and idx[0] == 0 and idx[-1] == len(x) - 1
    assert np.all(np.diff(idx) > 0)
    if log:  # the first decade keeps every step, the last is thinned
        assert set(range(10)) <= set(idx) and np.sum(x[idx] > 1000) < 150
    else:
        assert np.ptp(np.diff(x[idx])) <= 1
    assert list(display_points(x[:50], log, max_points=300)) == list(range(50))


def test_loss_curves_are_drawn_thinned_and_saved_whole(tmp_path):
    import matplotlib.pyplot as plt

    from dynamics.config.schema import Config, SweepConfig
    from dynamics.sweeps.result_files import load_results, write_results
    from dynamics.sweeps.sweep_result import SweepResult
    from figures.sweep import DISPLAY_POINTS, plot_loss_curves

    steps = np.arange(0, 5001)
    heads, trials = np.array([1, 4]), 2
    shape = (len(heads), trials, len(steps))
    curves = {k: np.full(shape, 0.5) / (1.0 + steps) for k in ("train_loss", "test_loss")}
    curves |= {k: np.zeros(shape) for k in ("train_error", "test_error")}
    div = np.full((len(heads), trials), -1)
    div[1, 0] = 3001  # a diverged trial: NaN from its divergence on
    curves["train_loss"][1, 0, 3001:] = np.nan
    cfg = Config(sweep=SweepConfig(heads=(1, 4), trials=trials))
    write_results(SweepResult(cfg, heads, steps, curves, div), tmp_path)
    meta, saved = load_results(tmp_path)
    assert saved["train_loss"].shape == shape  # the file keeps every logged step
    fig, ax = plt.subplots()
    plot_loss_curves(ax, meta, saved, "train_loss", "train loss")
    xs = [line.get_xdata() for line in ax.lines]
    assert all(len(x) <= DISPLAY_POINTS for x in xs)
    assert xs[0][0] == 1 and xs[0][-1] == 5000  # each mean line spans the run (t = 0 is off a log axis)
    dashed = [line for line in ax.lines if line.get_linestyle() == "--"]
    assert len(dashed) == 1 and dashed[0].get_xdata()[-1] == 3000  # up to the last finite point
    plt.close(fig)


def test_theme_is_seaborns(monkeypatch):
    """figures.theme copies seaborn's whitegrid/notebook theme and its flare colormap."""
    import matplotlib as mpl
    import seaborn as sns

    from figures import theme

    with mpl.rc_context():
        mpl.rcdefaults()  # from matplotlib's defaults, whatever an earlier test in this process set
        sns.set_theme(context="notebook", style="whitegrid")
        want = dict(mpl.rcParams)
        codes = {c: mpl.colors.colorConverter.colors[c] for c in "bgrmyck"}
    with mpl.rc_context():
        mpl.rcdefaults()
        mpl.colors.colorConverter.colors.update(mpl.colors.BASE_COLORS)  # matplotlib's own codes
        theme.set_theme()
        got = dict(mpl.rcParams)
        assert {c: mpl.colors.colorConverter.colors[c] for c in "bgrmyck"} == codes
    differ = {k for k in want if want[k] != got[k]}
    # seaborn's "rocket" (registered by seaborn only, unused here), and TrueType fonts in PDFs
    assert differ == {"image.cmap", *theme.EMBEDDED_FONTS}
    assert {k: got[k] for k in theme.EMBEDDED_FONTS} == {"pdf.fonttype": 42, "ps.fonttype": 42}
    grid = np.linspace(0, 1, 97)
    np.testing.assert_array_equal(theme.flare()(grid), sns.color_palette("flare", as_cmap=True)(grid))


def test_invisible_minor_ticks_are_dropped_with_the_same_pixels(tmp_path):
    """save_figure drops the minor ticks of log axes that draw nothing (a speed-up of the
    layout): the PNG is the same pixel for pixel; an axis whose minor ticks carry labels (less
    than a decade) keeps them."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    from figures.sweep import save_figure
    from figures.theme import set_theme

    def figure():
        set_theme()
        fig, (wide, narrow) = plt.subplots(1, 2, figsize=(6, 3), layout="constrained")
        t = np.arange(1, 10001)
        wide.loglog(t, 1.0 / t)  # four decades on both axes: minor ticks unlabelled
        narrow.semilogy(t, 0.2 + 0.05 * np.sin(t / 900.0))  # within a decade: minor labels
        return fig, wide, narrow

    fig, wide, narrow = figure()
    save_figure(fig, tmp_path / "trimmed", close=False)
    assert isinstance(wide.xaxis.get_minor_locator(), NullLocator)
    assert isinstance(wide.yaxis.get_minor_locator(), NullLocator)
    assert not isinstance(narrow.yaxis.get_minor_locator(), NullLocator)
    plt.close(fig)
    fig, *_ = figure()
    fig.savefig(tmp_path / "whole.png", dpi=130)  # every minor tick kept
    plt.close(fig)
    trimmed = plt.imread(tmp_path / "trimmed.png")
    np.testing.assert_array_equal(trimmed, plt.imread(tmp_path / "whole.png"))
