"""Grids over any knob: parsing, validation, sharing programs, files, resume, figures."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_same_numbers, child_env, cli_error, cli_run

from dynamics.config.grid_axes import load_toml_grid, parse_values, resolve_grid
from dynamics.config.schema import Config, ConfigError, apply_overrides
from dynamics.core import engine
from dynamics.infra import executables
from dynamics.sweeps.grid_runner import (
    load_points,
    run_grid_checkpointed,
    run_grid_experiment,
    summary_frame,
    write_grid,
)
from dynamics.sweeps.sweep import run_sweep

REPO = Path(__file__).resolve().parents[1]
SMALL = {
    "data": {"n_train": 24, "n_test": 30, "T": 6, "d": 8},
    "optim": {"steps": 13},
    "sweep": {"heads": (1, 3), "trials": 2, "log_every": 4},
}


def small(**sections) -> Config:
    cfg = apply_overrides(Config(name="g"), SMALL, "test")
    return apply_overrides(cfg, sections, "test")


def test_lists_and_the_log_shorthand_parse_against_numpy():
    assert parse_values("0.01, 0.1,1,10", "lr") == (0.01, 0.1, 1.0, 10.0)
    got = parse_values("1e-2:1e2:17", "lr")
    np.testing.assert_allclose(got, np.logspace(-2, 2, 17), rtol=1e-11)
    assert got[4] == 0.1 and got[8] == 1.0 and got[-1] == 100.0  # whole decades exactly
    assert parse_values("3:3:1", "noise") == (3.0,)
    # integer knobs round the log-spaced values and drop repeats
    assert parse_values("25:400:5", "n_train") == (25, 50, 100, 200, 400)
    assert parse_values("1:2:4", "n_train") == (1, 2)
    assert parse_values("50,100", "data.n_train") == (50, 100)


@pytest.mark.parametrize(
    "text, knob, says",
    [
        ("1:2", "lr", "a:b:k"),
        ("0:1:3", "lr", "a > 0"),
        ("1:10:0", "lr", "k >= 1"),
        ("a,b", "lr", "comma-separated"),
        ("1.5,2", "n_train", "ints"),
        ("inf,2", "n_train", "ints"),
        (",", "noise", "empty"),
        ("1,2", "steps", "cannot take several values"),
    ],
)
def test_bad_forms_are_one_line_errors(text, knob, says):
    with pytest.raises(ConfigError, match=says) as err:
        parse_values(text, knob)
    assert "\n" not in str(err.value)


def cli(args, cwd):
    env = child_env()
    cmd = [sys.executable, "-m", "dynamics.run", *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--lr", "1:x:3"], "--lr='1:x:3' is not a comma-separated list or a:b:k"),
        (["--noise=-1,1"], "grid point noise=-1.0: data.noise=-1.0 must be >= 0.0"),
        (["--lr", "1,1"], "repeated values"),
        (["--n-train", "1e6,2e6", "--steps", "100000", "--trials", "50"], "h of CPU simulation"),
    ],
)
def test_a_bad_grid_exits_2_in_one_line_and_writes_nothing(tmp_path, capsys, args, says):
    assert says in cli_error([*args, "--no-figure"], capsys, tmp_path)


def test_too_many_runs_are_refused_before_anything_runs():
    cfg = small(sweep={"heads": tuple(range(1, 101)), "trials": 100})
    with pytest.raises(ConfigError, match=r"grid 101 × 100 H × 100 trials = 1010000 runs"):
        resolve_grid(cfg, {"lr": "1e-3:1e3:101"})


def test_toml_takes_lists_and_the_shorthand(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text('[optim]\nlr = [0.1, 1]\nsteps = 5\n[data]\nnoise = "0.5:2:3"\nn_train = 40\n')
    cfg, axes = load_toml_grid(path, Config())
    assert cfg.optim.steps == 5 and cfg.data.n_train == 40
    assert axes["lr"] == (0.1, 1.0) and parse_values(axes["noise"], "noise") == (0.5, 1.0, 2.0)
    grid = resolve_grid(cfg, axes)
    assert grid.shape == (2, 3) and len(grid.points) == 6
    assert grid.points[4].optim.lr == 1.0 and grid.points[4].data.noise == 1.0  # C order


@pytest.mark.slow_cases("normal")
@pytest.mark.parametrize("init", ["zero", "normal"])
def test_a_grid_point_equals_its_configuration_run_alone(init):
    cfg = small(model={"init": init, **({"init_scale": 0.5} if init == "normal" else {})})
    axes = {"lr": [0.3, 3.0], "noise": [0.5, 1.5]}
    if init == "normal":
        axes["init_scale"] = [0.5, 1.0]
    grid = resolve_grid(cfg, axes)
    result = run_grid_experiment(grid, progress=False)
    assert result.curves["train_loss"].shape == (2, *grid.shape, 2, len(grid.base.steps))
    for k, point_cfg in enumerate(grid.points):
        alone, point = run_sweep(point_cfg, progress=False), result.point(k)
        np.testing.assert_array_equal(point.diverged_at, alone.diverged_at)
        for m in engine.METRICS:
            np.testing.assert_allclose(point.curves[m], alone.curves[m], rtol=2e-5, atol=1e-6, err_msg=m)


@pytest.mark.stress  # long: `make stress` and CI run it
def test_a_mixed_grid_compiles_one_program_per_shape():
    # n changes the data's shapes, σ and η do not: 2 shapes -> 2 programs for 8 grid points
    cfg = small(optim={"steps": 11})  # a step count no other test compiles
    grid = resolve_grid(cfg, {"n_train": [20, 28], "noise": [0.5, 1.0], "lr": [0.1, 1.0]})
    jitted = engine._JIT["cpu"]

    def programs():  # through jax.jit, or whole (dynamics.infra.executables: when the disk cache is on)
        return jitted._cache_size() + sum(key.startswith("engine.") for key in executables._loaded)

    before = programs()
    run_grid_experiment(grid, progress=False)
    assert programs() - before == 2


@pytest.mark.slow
def test_summary_csv_is_tidy_and_matches_the_curves(tmp_path):
    # σ = 1 (the default) and 1.5 as the grids below and above draw them: the same data programs
    grid = resolve_grid(small(optim={"loss": "exp"}), {"lr": [0.5, 1e5], "noise": [1.0, 1.5]})
    result = run_grid_experiment(grid, progress=False)
    result.extra["complete"] = True
    write_grid(result, tmp_path)
    import pandas as pd

    frame = pd.read_csv(tmp_path / "summary.csv")
    assert list(frame.columns[:5]) == ["H", "lr", "noise", "trials", "n_diverged"]
    assert len(frame) == 2 * 4  # one row per (H, grid point)
    meta = json.loads((tmp_path / "results.json").read_text())
    assert meta["grid"]["axes"] == ["lr", "noise"] and meta["grid"]["values"]["lr"] == [0.5, 1e5]
    with np.load(tmp_path / "curves.npz") as z:
        loss, div = z["train_loss"], z["diverged_at"]  # (H, lr, noise, trials, L), (H, lr, noise, trials)
        assert list(z["grid_axes"]) == ["lr", "noise"]
    for row in frame.itertuples():
        i, a, b = [1, 3].index(row.H), [0.5, 1e5].index(row.lr), [1.0, 1.5].index(row.noise)
        ok = div[i, a, b] < 0
        assert row.n_diverged == (~ok).sum() and row.trials == 2
        if ok.any():
            assert row.train_loss_mean == pytest.approx(loss[i, a, b, ok, -1].mean(), rel=1e-12)
        else:
            assert np.isnan(row.train_loss_mean)
    assert frame.n_diverged.sum() > 0  # η = 10⁵ with the exp loss diverges: the counts are exercised
    assert len(summary_frame(result)) == len(frame)


def interrupted_then_resumed(grid, out: Path, monkeypatch):
    """``run_grid_checkpointed`` interrupted after its first saved grid point, then resumed."""
    import dynamics.sweeps.grid_runner as gr

    real, saved = gr.save_point, []

    def interrupt_after_one(out, h, k, result):
        if saved:
            raise KeyboardInterrupt
        real(out, h, k, result)
        saved.append(k)

    monkeypatch.setattr(gr, "save_point", interrupt_after_one)
    with pytest.raises(KeyboardInterrupt):
        run_grid_checkpointed(grid, out, progress=False)
    monkeypatch.setattr(gr, "save_point", real)
    assert list(load_points(out, grid)) == saved
    resumed = run_grid_checkpointed(grid, out, resume=True, progress=False)
    assert resumed.extra["resumed_points"] == 1
    return resumed


@pytest.mark.slow
def test_a_grid_resumes_per_grid_point_to_the_same_numbers(tmp_path, monkeypatch):
    grid = resolve_grid(small(), {"lr": [0.2, 1.0, 5.0]})
    whole = run_grid_checkpointed(grid, tmp_path / "whole", progress=False)
    resumed = interrupted_then_resumed(grid, tmp_path / "cut", monkeypatch)
    with np.load(tmp_path / "whole" / "curves.npz") as a, np.load(tmp_path / "cut" / "curves.npz") as b:
        assert a.files == b.files
        for key in a.files:
            assert_same_numbers(a[key], b[key], err_msg=key)
    np.testing.assert_array_equal(whole.diverged_at, resumed.diverged_at)
    # a finished grid resumed again reuses every point from its complete results
    again = run_grid_checkpointed(grid, tmp_path / "cut", resume=True, progress=False)
    assert again.extra["resumed_points"] == 3
    np.testing.assert_array_equal(again.curves["test_loss"], resumed.curves["test_loss"])  # its own, exactly


def test_a_second_grid_run_on_the_same_out_is_refused(tmp_path):
    import filelock

    from dynamics.sweeps.checkpoint import LOCK

    out = tmp_path / "o"
    out.mkdir()
    with filelock.FileLock(out / LOCK):  # another process's run holds it
        with pytest.raises(ConfigError, match="in use by another run"):
            run_grid_checkpointed(resolve_grid(small(), {"lr": [0.2, 1.0]}), out, progress=False)
    assert sorted(p.name for p in out.iterdir()) == [LOCK]  # nothing computed, nothing written


def test_an_interrupt_message_says_what_is_on_disk(tmp_path):
    from dynamics.cli.run import _interrupted

    out = tmp_path / "o"
    assert "nothing to resume" in _interrupted({"out": out, "grid": True})
    (out / "points").mkdir(parents=True)
    (out / "points" / "G0.npz").write_bytes(b"")
    assert "grid points are in" in _interrupted({"out": out, "grid": True})
    assert "results.json is partial" in _interrupted({"out": out, "grid": False})


@pytest.mark.slow
def test_the_done_when_command_writes_the_table_summary_and_phase_diagram(tmp_path, capsys):
    args = ["--heads", "1,4", "--lr", "0.1,1,200", "--steps", "20", "--trials", "2", "--quiet"]
    code, stdout, stderr = cli_run([*args, "--out", str(tmp_path / "o")], capsys, tmp_path)
    assert code == 0, stderr
    table = stdout.split("\n")
    assert any(line.split()[:2] == ["4", "200"] for line in table), stdout
    for name in ("summary.csv", "figure.png", "figure-lines.png", "results.json", "curves.npz"):
        assert (tmp_path / "o" / name).stat().st_size > 0, name


def test_best_step_per_row_skips_diverged_cells():
    from figures.phase import best_columns

    loss = np.array([[0.5, 0.2, 0.1], [0.4, 0.3, np.nan], [np.nan, np.nan, np.nan]])
    n_div = np.array([[0, 0, 1], [0, 0, 2], [2, 2, 2]])
    assert best_columns(loss, n_div).tolist() == [1, 1, -1]


def fake_grid_folder(out: Path) -> Path:
    """A saved grid of H ∈ {1, 4} × η₀ × ε × n, written by the grid's writer from made-up curves (no
    simulation): a regression run (no error curves); at η₀ = 10 every trial diverged, at (H = 4,
    η₀ = 1, ε = 0.5, n = 24) one of two trials did. Test loss = η₀-independent base / H at ε = 0.5
    (heads help)."""
    from dynamics.config.grid_axes import resolve_grid
    from dynamics.sweeps.grid_runner import GridResult, write_grid

    heads, lrs, noises, ns, trials, L = [1, 4], [0.1, 1.0, 10.0], [0.5, 1.0], [24, 30], 2, 3
    shape = (2, 3, 2, 2, trials, L)
    rng = np.random.default_rng(0)
    test = np.broadcast_to(rng.uniform(0.2, 0.4, shape[1:]), shape).copy()
    test[1, :, 0] /= 4  # H = 4 at σ = 0.5: four times lower
    div = np.full(shape[:-1], -1)
    div[:, 2] = 1
    div[1, 1, 0, 0, 0] = 2
    curves = {"train_loss": test / 2, "test_loss": test}
    curves.update(
        {m: np.ones(shape) for m in ("excess_risk", "u_norm", "w_norm", "diversity", "attn_relevant")}
    )
    for v in curves.values():
        v[(div[..., None] >= 0) & (np.arange(L) >= np.maximum(div, 0)[..., None])] = np.nan
    axes = (("lr", tuple(lrs)), ("epsilon", tuple(noises)), ("n_train", tuple(ns)))
    sweep = {"heads": tuple(heads), "trials": trials, "log_every": 1, "head_metrics": "off"}
    base = small(data={"model": "single-location"}, sweep=sweep)
    grid = resolve_grid(apply_overrides(base, {"optim": {"steps": L - 1}}, "test"), axes)
    result = GridResult(grid, np.array(heads), np.arange(L), curves, div, wall_time_s=0.0)
    out.mkdir()
    write_grid(result, out)  # the real writer: its files check against their own records
    return out


def drawn_figures(monkeypatch) -> list:
    """The figures plot_grid draws, kept open (save_figure with close=False)."""
    import figures.facets
    import figures.phase
    from figures.sweep import save_figure

    figs = []

    def keep(fig, stem):
        figs.append(fig)
        return save_figure(fig, stem, close=False)

    monkeypatch.setattr(figures.phase, "save_figure", keep)
    monkeypatch.setattr(figures.facets, "save_figure", keep)
    return figs


def test_a_grid_over_knobs_draws_a_panel_per_h_the_gain_and_names_each_fixed_value(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from figures.phase import plot_grid

    folder, figs = fake_grid_folder(tmp_path / "g"), drawn_figures(monkeypatch)
    paths = plot_grid(folder, tmp_path / "f")
    fig = figs[-1]
    title = fig._suptitle.get_text()
    assert "one panel per H" in title and "fixed: ε = 0.5" in title and "η = η₀" in title, title
    axes = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    assert {"H = 1: test loss", "H = 4: test loss", "H = 1: train loss", "H = 4: train loss"} <= set(axes)
    assert not any("error" in t for t in axes)  # a run without error curves: none drawn
    norms = [axes[f"H = {h}: test loss"].images[0].norm for h in (1, 4)]
    assert norms[0].vmin == norms[1].vmin and norms[0].vmax == norms[1].vmax  # one scale across H
    gain = next(ax for t, ax in axes.items() if t.startswith("gain from heads"))
    ratio = gain.images[0].get_array()  # (n, η₀) at σ = 0.5: H = 4 four times lower
    np.testing.assert_allclose(ratio[:, 0], 0.25)
    assert ratio.mask[:, 2].all()  # η₀ = 10: every trial diverged, no ratio
    assert gain.images[0].norm.vmin * gain.images[0].norm.vmax == pytest.approx(1.0)  # centred at 1
    hatched = [p for p in axes["H = 1: test loss"].patches if p.get_hatch()]
    assert len(hatched) == 2  # η₀ = 10 at both n
    best = next(ax for t, ax in axes.items() if t.startswith("best η₀"))
    assert len(best.lines) == 2  # a line per n
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "all trials diverged (4)" in legend and "some diverged (1)" in legend, legend
    for fig in figs:
        plt.close(fig)
    data = paths[1].read_bytes()
    assert b"/Type3" not in data and b"/CIDFontType2" in data  # TrueType fonts in the PDF


@pytest.mark.slow
def test_grid_axes_and_fixed_values_are_chosen_and_checked(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from dynamics.cli.figures import main
    from figures.phase import plot_grid

    folder, figs = fake_grid_folder(tmp_path / "g"), drawn_figures(monkeypatch)
    plot_grid(folder, tmp_path / "a", axes=("lr", "epsilon"), at={"n_train": 30})
    assert "fixed: n (train) = 30" in figs[-1]._suptitle.get_text()
    plot_grid(folder, tmp_path / "b", axes="lr,n-train", at={"H": 4, "epsilon": 1.0})
    title = figs[-1]._suptitle.get_text()  # one H: its heatmaps alone, H named
    assert "H = 4" in title and "ε = 1" in title and "one panel per H" not in title, title
    plot_grid(folder, tmp_path / "c", axes=("epsilon",))
    assert "η = 0.1" in figs[-1]._suptitle.get_text()  # lines per H; η₀ at its first value
    for fig in figs:
        plt.close(fig)
    with pytest.raises(ValueError, match="'bogus' is not an axis of this grid; its axes: heads, lr"):
        plot_grid(folder, tmp_path / "d", axes=("lr", "bogus"))
    with pytest.raises(ValueError, match=r"epsilon=0.7 is not one of its values \['0.5', '1'\]"):
        plot_grid(folder, tmp_path / "d", at={"epsilon": 0.7})
    with pytest.raises(ValueError, match="'lr' is plotted"):
        plot_grid(folder, tmp_path / "d", axes=("lr", "epsilon"), at={"lr": 1.0})
    assert main(["--results", str(folder), "--axes", "lr,epsilon", "--at", "n_train=30"]) == 0
    assert (folder / "figure.png").stat().st_size > 10_000 and (folder / "figure.pdf").exists()
    assert main(["--results", str(folder), "--axes", "lr,sigma"]) == 2
    assert main(["fig2", "--axes", "lr"]) == 2  # not a grid figure


# Per-head curves and theory diagnostics: a grid point logs what its sweep logs

TINY = {
    "data": {"n_train": 12, "n_test": 8, "T": 4, "d": 8},
    "optim": {"steps": 6},
    "sweep": {"heads": (1, 2), "trials": 2, "log_every": 2},
}


def tiny(**sweep) -> Config:
    cfg = apply_overrides(Config(name="g"), TINY, "test")
    return apply_overrides(cfg, {"sweep": sweep}, "test")


def assert_same_point(point, alone, exact_seconds=False):
    """A grid point's SweepResult is its config's sweep: every curve bit for bit (NaN == NaN), the
    diagnostics' summary but for the seconds they took."""
    assert set(point.curves) == set(alone.curves)
    for m, v in alone.curves.items():
        np.testing.assert_array_equal(point.curves[m], v, err_msg=m)
    np.testing.assert_array_equal(point.diverged_at, alone.diverged_at)
    if "diagnostics" in alone.extra:
        mine, theirs = dict(point.extra["diagnostics"]), dict(alone.extra["diagnostics"])
        assert mine.pop("seconds") >= 0 and theirs.pop("seconds") >= 0
        assert mine == theirs


# One configuration with per-head curves (head–head included) and the three diagnostics: the tests
# below check different properties of its grids and share its compiled programs.
LOGGED = dict(head_metrics="on", head_sims=True, diagnostics=("sharpness", "kernel", "maxmargin"))


@pytest.mark.slow
def test_a_grid_keeps_the_per_head_curves_and_diagnostics_of_each_points_sweep_through_a_resume(
    tmp_path, monkeypatch
):
    from dynamics import load_results

    cfg = tiny(**LOGGED)
    grid = resolve_grid(cfg, {"noise": [0.5, 1.5]})
    whole = run_grid_checkpointed(grid, tmp_path / "whole", progress=False)
    L = len(grid.base.steps)
    assert whole.curves["head_u_norm"].shape == (2, 2, 2, L, 2)  # (H, noise, trials, L, H_max)
    assert whole.curves["head_u_sim"].shape == (2, 2, 2, L, 2, 2)  # head–head: H_max twice
    assert np.isnan(whole.curves["head_u_norm"][0, ..., 1]).all()  # H = 1 has no head 1
    assert whole.curves["sharpness"].shape == (2, 2, 2, L)
    assert len(whole.extra["diagnostics"]) == 2  # one summary per grid point
    meta = json.loads((tmp_path / "whole" / "results.json").read_text())
    assert meta["grid"]["head_curves_axes"] == ["heads", "noise", "trial", "step", "head"]
    assert [d["names"] for d in meta["diagnostics"]] == [list(cfg.sweep.diagnostics)] * 2
    resumed = interrupted_then_resumed(grid, tmp_path / "cut", monkeypatch)
    with np.load(tmp_path / "whole" / "curves.npz") as a, np.load(tmp_path / "cut" / "curves.npz") as b:
        assert a.files == b.files and "head_key_sim" in a.files and "kernel_distance" in a.files
        for key in a.files:
            assert_same_numbers(a[key], b[key], err_msg=key)
    for m, v in whole.curves.items():
        np.testing.assert_array_equal(resumed.curves[m], v, err_msg=m)
    backs = [load_results(tmp_path / folder) for folder in ("whole", "cut")]
    for k, point_cfg in enumerate(grid.points):
        alone = run_sweep(point_cfg, progress=False)
        assert any(m.startswith("head_") for m in alone.curves)
        assert "kernel_distance" in alone.curves and "diagnostic_steps" in alone.curves
        for point in (whole.point(k), resumed.point(k), *(back.point(k) for back in backs)):
            assert_same_point(point, alone)
    assert len(whole.point(1).head_frame()) == len(alone.head_frame())
    again = run_grid_checkpointed(
        grid, tmp_path / "cut", resume=True, progress=False
    )  # from complete results
    assert again.extra["resumed_points"] == 2
    for m, v in whole.curves.items():
        np.testing.assert_array_equal(again.curves[m], v, err_msg=m)


@pytest.mark.slow
def test_grid_figures_ignore_the_per_head_curves_and_diagnostics(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    from figures.phase import plot_grid

    grid = resolve_grid(tiny(**LOGGED), {"noise": [0.5, 1.5], "lr": [0.5, 1.0]})
    result = run_grid_experiment(grid, progress=False)
    assert "head_attn_sim" in result.curves and "kernel_distance" in result.curves
    result.extra["complete"] = True
    write_grid(result, tmp_path / "g")
    figs = drawn_figures(monkeypatch)
    for source in (tmp_path / "g", result):
        assert plot_grid(source, tmp_path / "f")
    titles = {ax.get_title() for fig in figs for ax in fig.axes}
    assert titles and not any(w in t for t in titles for w in ("head_", "kernel", "sharpness")), titles
    for fig in figs:
        plt.close(fig)


@pytest.mark.slow
def test_the_apis_run_grid_keeps_per_head_curves_and_diagnostics_as_run_sweep():
    import dataclasses

    from dynamics.sweeps.sweep import run_grid as run_lrs

    cfg = tiny(**LOGGED)
    (point,) = run_lrs(cfg, lrs=[0.5], progress=False)
    alone = run_sweep(dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, lr=0.5)), progress=False)
    assert "head_u_norm" in alone.curves and "kernel_distance" in alone.curves
    assert_same_point(point, alone)


@pytest.mark.stress  # long: `make stress` and CI run it
def test_the_command_line_runs_diagnostics_on_a_grid(tmp_path):
    r = cli(["--heads", "1,2", "--lr", "0.5,1", "--steps", "6", "--trials", "2", "--n-train", "12",
             "--n-test", "8", "--tokens", "4", "--width", "8", "--diagnostics", "kernel", "--quiet",
             "--out", str(tmp_path / "o")], tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "o" / "results.json").read_text())
    assert [d["lr"] for d in meta["diagnostics"]] == [[0.5, 0.5], [1.0, 1.0]]  # one per grid point
    assert (tmp_path / "o" / "figure.png").exists() and not (tmp_path / "o" / "diagnostics.png").exists()
    with np.load(tmp_path / "o" / "curves.npz") as z:
        assert z["kernel_distance"].shape[:2] == (2, 2) and "head_u_norm" in z.files


@pytest.mark.slow
def test_a_grids_snapshots_go_to_params_npz_and_load_back(tmp_path):
    from dynamics import load_results

    grid = resolve_grid(tiny(save_params=True, head_metrics="off"), {"noise": [0.5, 1.5]})
    run_grid_checkpointed(grid, tmp_path, progress=False)
    with np.load(tmp_path / "curves.npz") as z:
        assert not any(f.startswith("param_") for f in z.files)
    with np.load(tmp_path / "params.npz") as z:
        assert z["U"].shape[:3] == (2, 2, 2)  # (H, noise, trials, L, H_max, d)
    alone = run_sweep(grid.points[1], progress=False)
    assert alone.params and set(load_results(tmp_path).point(1).params) == set(alone.params)
    assert_same_point(load_results(tmp_path).point(1), alone)


@pytest.mark.slow
def test_a_grid_over_the_width_keeps_snapshots_of_every_width(tmp_path):
    """A grid over d with snapshots: each point's θ has its own shapes (W is d × d). They are kept,
    NaN-padded to the largest d, and each point's equals its configuration run alone (the grid
    once ran every point, then failed to store the second width and lost them all)."""
    from dynamics import load_results

    grid = resolve_grid(tiny(save_params=True, head_metrics="off"), {"d": [6, 8]})
    run_grid_checkpointed(grid, tmp_path, progress=False)
    with np.load(tmp_path / "params.npz") as z:
        assert z["W"].shape[-2:] == (8, 8) and z["U"].shape[-1] == 8  # (H, d, trials, L, H_max, d, d)
    back = load_results(tmp_path)
    for k, d in enumerate((6, 8)):
        alone = run_sweep(grid.points[k], progress=False)
        for name, theta in alone.params.items():
            got = back.point(k).params[name]
            cut = got[(..., *(slice(0, n) for n in theta.shape[4:]))] if theta.ndim > 4 else got
            np.testing.assert_array_equal(cut, theta, err_msg=f"d={d} {name}")
            padding = got.size - theta.size  # beyond this d: NaN, and nothing else is (heads past H were)
            assert np.isnan(got).sum() == np.isnan(theta).sum() + padding
