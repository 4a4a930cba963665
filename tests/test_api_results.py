"""Misuse of the sweep, grid, loader and figure functions of the Python API: each case used to give
a silently wrong result (or a deep exception) and now gives the right one or one clear error."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import dynamics
from dynamics import ConfigError, load_results, run_grid, run_sweep
from dynamics.sweeps.result_files import write_results
from dynamics.sweeps.sweep_result import SweepResult

# The shapes of tests/test_api.py's sweep: its compiled program is reused where a worker ran it.
SMALL = dict(heads=[1, 3], steps=6, trials=2, n_train=12, n_test=10, tokens=4, width=8, irrelevant_means=2)


@pytest.fixture(scope="module")
def result():
    return run_sweep("fig2", progress=False, **SMALL)


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("packs_per_call", -1),
        ("packs_per_call", 0),
        ("chunk", -2),
        ("slots", 0),
        ("chunk", 1.5),
        ("slots", True),
    ],
)
def test_layout_keywords_below_one_are_refused(key, bad):
    with pytest.raises(ValueError, match=f"{key}="):
        run_sweep("fig2", progress=False, **SMALL, **{key: bad})
    with pytest.raises(ValueError, match=f"{key}="):
        run_grid(dynamics.with_overrides("fig2", **SMALL), lrs=[0.5], progress=False, **{key: bad})


def test_engine_keywords_of_the_wrong_kind_are_refused():
    with pytest.raises(TypeError, match="progress"):
        run_sweep("fig2", progress="no", **SMALL)
    with pytest.raises((TypeError, ValueError), match="devices"):
        run_sweep("fig2", progress=False, devices="cpu", **SMALL)
    with pytest.raises(TypeError, match="on_point"):
        run_sweep("fig2", progress=False, on_point=3, **SMALL)
    with pytest.raises(TypeError, match="skip_heads"):
        run_sweep("fig2", progress=False, skip_heads=[1], **SMALL)


def test_on_point_receives_h_values_and_results_are_in_ascending_h(result):
    seen = []
    cfg = dynamics.with_overrides("fig2", **{**SMALL, "heads": [3, 1]})
    got = run_sweep(cfg, progress=False, on_point=lambda hs, m, d: seen.append((list(hs), m)))
    assert list(got.heads) == [1, 3]
    for hs, metrics in seen:
        for j, h in enumerate(hs):  # H = 3's curve is filed under H = 3, whatever the order given
            np.testing.assert_array_equal(
                metrics["train_loss"][j], result.curves["train_loss"][[1, 3].index(h)]
            )
    assert sorted(h for hs, _ in seen for h in hs) == [1, 3]


def test_bottleneck_presets_are_not_run_as_the_default_sweep():
    for name in ("bottleneck-expressivity", "bottleneck-heads"):
        with pytest.raises(ConfigError, match="run_expressivity|run_heads"):
            run_sweep(name, progress=False)
        with pytest.raises(ConfigError, match="run_expressivity|run_heads"):
            run_grid(name, progress=False)
    for name, fn in (("bottleneck-expressivity", "run_expressivity"), ("bottleneck-heads", "run_heads")):
        with pytest.raises(ConfigError, match=fn):  # the preset's Config: its name, a sweep's settings
            run_sweep(dynamics.preset(name), progress=False)


@pytest.mark.parametrize(
    ("first", "second"), [("d", "width"), ("width", "d"), ("T", "tokens"), ("tokens", "T")]
)
def test_two_names_of_one_field_are_refused_whichever_comes_last(first, second):
    with pytest.raises(ConfigError, match=f"{first}= and {second}= both set data"):
        dynamics.with_overrides(None, **{first: 8, second: 16})
    field = "d" if "d" in (first, second) else "T"
    assert getattr(dynamics.with_overrides(None, **{first: 8}).data, field) == 8  # one name alone is taken


@pytest.mark.parametrize(("single", "swept"), [("lr", "lrs"), ("init_scale", "init_scales")])
def test_run_grid_refuses_a_value_its_swept_values_would_replace(single, swept):
    with pytest.raises(ConfigError, match=f"{single}=0.1 and {swept}= both give the {single}"):
        run_grid(None, **{single: 0.1, swept: [0.5]}, steps=2, trials=1, progress=False)


def test_a_data_parameter_named_directly_replaces_the_one_in_params():
    """As documented: the name wins (dataclasses.replace, and so every grid point, relies on it)."""
    data = dynamics.DataConfig(model="mixture", zeta=0.3, params={"zeta": 0.5})
    assert data.params == (("zeta", 0.3),)
    assert dataclasses.replace(data, zeta=0.7).zeta == 0.7


def test_run_grid_takes_what_run_sweep_takes_and_refuses_empty_lists(result):
    with pytest.raises(ConfigError, match="lrs"):
        run_grid("fig2", lrs=[], progress=False)
    with pytest.raises(ConfigError, match="init_scales"):
        run_grid("fig2", init_scales=[], progress=False)
    with pytest.raises(ConfigError, match="lrs"):
        run_grid("fig2", lrs=["a"], progress=False)
    with pytest.raises(ConfigError, match="unknown preset"):
        run_grid("fig-2", progress=False)
    with pytest.raises(TypeError, match="cfg"):
        run_grid(42, progress=False)
    cfg = dynamics.with_overrides("fig2", **SMALL)
    (by_name,) = run_grid(cfg, lrs="1.0", progress=False)
    np.testing.assert_array_equal(by_name.curves["train_loss"], result.curves["train_loss"])


def test_a_result_file_path_loads_its_folder(result, tmp_path):
    write_results(result, tmp_path)
    back = load_results(tmp_path / "results.json")
    np.testing.assert_array_equal(back.curves["train_loss"], result.curves["train_loss"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_results(tmp_path / "nowhere")
    with pytest.raises(TypeError, match="folder"):
        load_results(3)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no results.json"):
        load_results(tmp_path / "empty")


@pytest.mark.slow
def test_an_interrupted_run_loads_as_partial_and_its_figure_says_so(result, tmp_path, monkeypatch):
    import dynamics.sweeps.sweep
    from dynamics.sweeps.checkpoint import run_checkpointed
    from figures import sweep_figure

    real = dynamics.sweeps.sweep.run_sweep

    def fails_after_one_point(exp, *, on_point, **kw):
        def first_then_fail(*a):
            on_point(*a)
            raise KeyboardInterrupt

        return real(exp, on_point=first_then_fail, packs_per_call=1, slots=3, **kw)

    monkeypatch.setattr(dynamics.sweeps.sweep, "run_sweep", fails_after_one_point)
    cfg = dynamics.with_overrides("fig2", **{**SMALL, "init": "normal"})  # one point per H
    with pytest.raises(KeyboardInterrupt):
        run_checkpointed(cfg, tmp_path, progress=False)
    partial = load_results(tmp_path)
    assert partial.complete is False and len(partial.heads) == 1
    assert partial.extra["heads_todo"] and result.complete is True
    for source in (tmp_path, partial):
        fig = sweep_figure(source)
        assert "PARTIAL" in fig._suptitle.get_text()


def test_diagnostics_survive_loading_and_the_dataframe(result, tmp_path):
    L = len(result.steps)
    diag = np.full((2, 2, L), np.nan)
    diag[..., [0, -1]] = 1.5
    with_diag = SweepResult(
        config=result.config,
        heads=result.heads,
        steps=result.steps,
        curves={**result.curves, "sharpness": diag, "diagnostic_steps": np.array([0, result.steps[-1]])},
        diverged_at=result.diverged_at,
        extra={"diagnostics": {"names": ["sharpness"], "steps": [0, int(result.steps[-1])]}},
    )
    df = with_diag.to_dataframe()
    assert len(df) == 2 * 2 * L and "sharpness" in df and "diagnostic_steps" not in df
    write_results(with_diag, tmp_path)
    back = load_results(tmp_path)
    np.testing.assert_array_equal(back.curves["sharpness"], diag)
    np.testing.assert_array_equal(back.curves["diagnostic_steps"], [0, result.steps[-1]])
    assert back.extra["diagnostics"]["names"] == ["sharpness"]
    assert len(back.to_dataframe()) == len(df)


@pytest.mark.slow
def test_a_diagnostics_run_loads_back_whole(tmp_path):
    """``--diagnostics all`` as the command line runs it (run_checkpointed, its ``finish`` putting the
    timings into the result before its one write): load_results gives every curve, the diagnostics'
    included, equal to run_sweep's (NaN-aware), its diagnostics summary, and every field the run
    put in results.json."""
    from dynamics.sweeps.checkpoint import run_checkpointed

    tiny = dict(heads=[2], steps=4, trials=1, n_train=12, n_test=8, tokens=4, width=4, irrelevant_means=2)
    cfg = dynamics.with_overrides(None, data_model="mixture", log_every=1, diagnostics="all", **tiny)

    def finish(result):
        result.extra["timings"] = {"total": 1.0}

    ran = run_checkpointed(cfg, tmp_path, progress=False, finish=finish)  # with complete and device
    back = load_results(tmp_path)
    assert {"sharpness", "kernel_distance", "maxmargin_cos", "diagnostic_steps"} <= set(back.curves)
    assert set(back.curves) == set(ran.curves)
    for name, curve in ran.curves.items():
        np.testing.assert_array_equal(back.curves[name], curve, err_msg=name)  # NaN == NaN here
    np.testing.assert_array_equal(back.diverged_at, ran.diverged_at)
    assert back.extra == ran.extra and ran.extra["timings"] == {"total": 1.0}  # complete, device, …
    assert back.extra["diagnostics"]["svm_status"] == ["optimal"]


def test_a_grid_folder_loads_as_the_grid(tmp_path):
    from dynamics.config.grid_axes import resolve_grid
    from dynamics.sweeps.grid_runner import GridResult, run_grid_checkpointed

    cfg = dynamics.with_overrides("fig2", **SMALL)
    grid = resolve_grid(cfg, {"lr": [0.5, 1.0]})
    done = run_grid_checkpointed(grid, tmp_path, progress=False)
    back = load_results(tmp_path)
    assert isinstance(back, GridResult) and back.grid.hash() == grid.hash()
    assert back.grid.axes == (("lr", (0.5, 1.0)),)
    for k in range(2):
        assert back.point(k).config.optim.lr == (0.5, 1.0)[k]
        np.testing.assert_array_equal(back.point(k).curves["test_loss"], done.point(k).curves["test_loss"])
    with pytest.raises(ValueError, match="grid"):
        from figures import sweep_figure

        sweep_figure(tmp_path)


def test_ensure_results_leaves_no_stale_grid_summary(result, tmp_path):
    from dynamics.config.grid_axes import resolve_grid
    from dynamics.sweeps.grid_runner import run_grid_checkpointed
    from figures import Entry, ensure_results

    cfg = dynamics.with_overrides("fig2", **SMALL)
    run_grid_checkpointed(resolve_grid(cfg, {"lr": [0.5, 1.0]}), tmp_path, progress=False)
    assert (tmp_path / "summary.csv").exists()
    entry = Entry("a sweep", result.config.hash, lambda d, p: write_results(result, d), lambda d, s: [])
    assert ensure_results(entry, tmp_path, progress=False) == "replaced"
    assert not (tmp_path / "summary.csv").exists()  # the grid's table no longer sits beside a sweep
    assert isinstance(load_results(tmp_path), SweepResult)
    with pytest.raises(TypeError, match="entry"):
        ensure_results("fig2", tmp_path)


def test_a_stem_with_a_dot_keeps_its_name(tmp_path):
    import matplotlib.pyplot as plt

    from figures import save_figure

    paths = [save_figure(plt.figure(), tmp_path / f"s_lr{lr}") for lr in (0.5, 0.25)]
    names = sorted(p.name for ps in paths for p in ps)
    assert names == ["s_lr0.25.pdf", "s_lr0.25.png", "s_lr0.5.pdf", "s_lr0.5.png"]
    assert [p.name for p in save_figure(plt.figure(), tmp_path / "f.png")] == ["f.png", "f.pdf"]
    with pytest.raises(ValueError, match="does not exist"):
        save_figure(plt.figure(), tmp_path / "no" / "f")


def test_adam_titles_follow_lr_scaling():
    from figures.sweep import describe

    adam = {"data": {"model": "dm1", "n_train": 10, "n_test": 5}}
    titles = {
        s: describe({**adam, "optim": {"optimizer": "adam", "lr": 0.06, "lr_scaling": s}})
        for s in ("constant", "sqrt", "linear")
    }
    assert len(set(titles.values())) == 3 and titles["linear"].endswith("η = 0.06·H")


def test_bottleneck_figures_refuse_the_wrong_run(result, tmp_path):
    from figures import bottleneck_heads_figure, expressivity_figure

    write_results(result, tmp_path)
    for fig in (expressivity_figure, bottleneck_heads_figure):
        with pytest.raises(ValueError, match="needs a bottleneck"):
            fig(tmp_path)
        with pytest.raises((TypeError, ValueError)):
            fig(result)
        with pytest.raises(ValueError, match="'results' and 'arrays'"):
            fig({"summary": []})
    fake = {"results": json.loads((tmp_path / "results.json").read_text()), "arrays": {}}
    with pytest.raises(ValueError, match="needs a bottleneck"):
        expressivity_figure(fake)


def test_heads_config_checks_itself_before_the_model_does():
    with pytest.raises(ConfigError, match="width"):
        dynamics.run_heads(dynamics.HeadsConfig(width=4, heads=(1, 8)), progress=False)
    with pytest.raises(ConfigError, match="trials"):
        dynamics.run_heads(dynamics.HeadsConfig(trials=0), progress=False)
    with pytest.raises(TypeError, match="HeadsConfig"):
        dynamics.run_heads(None)


@pytest.mark.parametrize(
    ("knob", "value", "allowed"),
    [
        ("lr", 1e-50, "give a value of at least that size"),  # 0 in float32: the run would never move
        ("lr", 1e-39, "give a value of at least that size"),  # subnormal: its digits lost
        ("weight_decay", 1e-39, "give 0 or a value of at least that size"),
    ],
)
def test_a_value_below_the_smallest_normal_float32_is_refused(knob, value, allowed):
    with pytest.raises(
        ConfigError, match=f"{value!r} is below 1.175e-38, the smallest normal float32.*{allowed}"
    ):
        dynamics.with_overrides(None, **{knob: value})
    assert dynamics.with_overrides(None, **{knob: 2e-38}).optim.__dict__[knob] == 2e-38  # a normal float32
    assert (
        dynamics.with_overrides(None, **{knob: value}, x64=True).optim.__dict__[knob] == value
    )  # float64 holds it


@pytest.fixture(scope="module")
def params_folder(tmp_path_factory):
    """A tiny random-init run with its parameters saved (H = 1 and 3: slots beyond a run's H stay NaN)."""
    folder = tmp_path_factory.mktemp("params") / "run"
    cfg = dict(heads=[1, 3], steps=2, trials=1, n_train=8, n_test=8, init="normal", save_params=True)
    dynamics.save_results(run_sweep(None, **cfg, progress=False), folder)
    return folder


@pytest.mark.parametrize(
    ("edit", "named"),
    [
        (lambda a: a.__setitem__("U", np.full_like(a["U"], np.nan)), "'U' is not finite where H=1"),
        (lambda a: a.__setitem__("U", a["U"][:, :, :, :2]), r"'U' has shape \(2, 1, 3, 2, 32\) of float32"),
        (lambda a: a.__setitem__("W", a["W"].astype(np.int64)), "'W' has shape .* of int64, expected"),
        (lambda a: a.clear(), "params.npz has no parameters"),
        (lambda a: a.__setitem__("W", a["W"] * np.inf), "'W' is not finite where H=1"),
    ],
)
def test_a_damaged_params_file_is_refused(params_folder, tmp_path, edit, named):
    import shutil

    assert np.isfinite(dynamics.load_results(params_folder).params["U"][0, 0, :, :1]).all()  # intact: loads
    folder = tmp_path / "run"
    shutil.copytree(params_folder, folder)
    with np.load(folder / "params.npz") as z:
        arrays = dict(z)
    with np.errstate(invalid="ignore"):
        edit(arrays)
    np.savez(folder / "params.npz", **arrays)
    with pytest.raises(ConfigError, match=f"{named}.*damaged or edited"):
        dynamics.load_results(folder)


def test_a_curve_of_integers_is_refused_naming_its_dtype(params_folder, tmp_path):
    import shutil

    folder = tmp_path / "run"
    shutil.copytree(params_folder, folder)
    with np.load(folder / "curves.npz") as z:
        arrays = dict(z)
    arrays["train_loss"] = arrays["train_loss"].astype(np.int64)
    np.savez(folder / "curves.npz", **arrays)
    with pytest.raises(
        ConfigError, match=r"'train_loss' has shape \(2, 1, 3\) of int64, expected shape .* of floats"
    ):
        dynamics.load_results(folder)


def test_trial_data_refuses_what_is_no_config():
    for bad in (5, [1], object()):
        with pytest.raises(TypeError, match="must be a Config, a preset's name or None"):
            dynamics.trial_data(bad, 0)


@pytest.mark.parametrize("keyword", ["metrics", "on_point", "skip_heads"])
def test_run_grid_names_the_sweep_keywords_it_does_not_take(keyword):
    with pytest.raises(ConfigError, match=f"run_grid does not take {keyword}= \\(run_sweep does\\)"):
        run_grid(None, **{keyword: {}}, steps=2, trials=1, progress=False)
