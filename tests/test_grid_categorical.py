"""Categorical grid axes: every knob that names a part, and the data model, takes a list of names on
every surface (flags, TOML, keywords); a knob without effect at some grid points is judged per
point; each point equals its configuration run alone bit for bit; the files keep the names; the
figures draw one set of files per name on shared scales."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_same_numbers, cli_error, cli_run

import dynamics
from dynamics.cli.run import build_parser, config_from_args
from dynamics.config.grid_axes import GRID_KNOBS, load_toml_grid, resolve_grid
from dynamics.config.schema import Config, ConfigError, apply_overrides, resolve
from dynamics.sweeps.grid_runner import GridResult, write_grid
from dynamics.sweeps.sweep import run_sweep

TINY = {
    "data": {"n_train": 12, "n_test": 8, "T": 4, "d": 8},
    "optim": {"steps": 6},
    "sweep": {"heads": (1, 2), "trials": 1, "log_every": 2, "head_metrics": "off"},
}


def tiny(**sections) -> Config:
    return apply_overrides(apply_overrides(Config(name="cat"), TINY, "test"), sections, "test")


# axis -> (the base's other settings, two names): every categorical knob the declarations make one
CASES = {
    "optimizer": ({}, ["gd", "adam"]),
    "loss": ({}, ["logistic", "exp"]),
    "lr_scaling": ({"model": {"init": "normal"}}, ["constant", "linear"]),  # packed runs: slots
    "query": ({}, ["first", "all"]),
    "key_query": ({"model": {"init": "normal"}}, ["full", "factored"]),
    "init": ({}, ["zero", "normal"]),
    "norm": ({}, ["sqrt", "sum"]),
    "sampling": ({"optim": {"optimizer": "sgd", "batch_size": 4}}, ["epoch", "replace"]),
    "constraint": ({"model": {"query": "learned", "init": "sphere"}}, ["none", "sphere"]),
    "attention": ({"model": {"init": "normal"}}, ["softmax", "erf"]),
    "data_model": ({}, ["dm1", "planted"]),
    "reduction": ({}, ["mean", "sum"]),
    "start": (
        {
            "data": {"model": "positional-semantic", "T": 2},
            "model": {"key_query": "tied", "head_size": 1, "query": "all", "output": "sequence"},
            "optim": {"loss": "mse"},
        },
        ["semantic", "positional"],
    ),
    "readout": ({"model": {"init": "normal"}}, ["direct", "factored"]),
    "output": (
        {
            "data": {"model": "positional-semantic", "T": 2},
            "model": {"query": "all"},
            "optim": {"loss": "mse"},
        },
        ["sequence", "pooled"],
    ),
    "geometry": ({}, ["antipodal", "orthogonal"]),
    "basis": ({"data": {"model": "icl-linreg"}, "optim": {"loss": "mse"}}, ["random", "identity"]),
    "covariance": ({"data": {"model": "icl-linreg"}, "optim": {"loss": "mse"}}, ["spectrum", "identity"]),
    "copy_logits": (
        {"data": {"model": "emergence", "T": 8}, "model": {"query": "position"}},
        ["free", "tied"],
    ),
}


def test_the_cases_cover_every_categorical_axis():
    assert set(CASES) == {name for name, (_, _, kind) in GRID_KNOBS.items() if kind is str}


@pytest.mark.slow  # 12 × two programs compiled: about 2 minutes
@pytest.mark.parametrize("axis", list(CASES))
def test_a_categorical_grid_point_equals_its_configuration_run_alone_bit_for_bit(axis):
    over, names = CASES[axis]
    result = dynamics.run_grid(tiny(**over), progress=False, **{axis: names})  # the API's keyword
    assert isinstance(result, GridResult) and result.grid.axes == ((axis, tuple(names)),)
    for k, point_cfg in enumerate(result.grid.points):
        section, field, _ = GRID_KNOBS[axis]
        assert getattr(getattr(point_cfg, section), field) == names[k]
        alone, point = run_sweep(point_cfg, progress=False), result.point(k)
        assert set(point.curves) == set(alone.curves)
        for m, v in alone.curves.items():
            assert_same_numbers(point.curves[m], v, err_msg=f"{axis}={names[k]}: {m}")
        np.testing.assert_array_equal(point.diverged_at, alone.diverged_at)


def test_the_flags_toml_and_keywords_take_lists_of_names(tmp_path):
    parse = build_parser().parse_args
    grid = config_from_args(parse(["--optimizer", "gd,adam", "--lr", "0.1,1", "--data-model", "dm1,planted"]))
    assert dict(grid.axes) == {
        "optimizer": ("gd", "adam"),
        "lr": (0.1, 1.0),
        "data_model": ("dm1", "planted"),
    }
    assert grid.shape == (2, 2, 2) and grid.points[-1].data.model == "planted"
    assert grid.points[-1].optim.optimizer == "adam" and grid.points[-1].optim.lr == 1.0
    single = config_from_args(parse(["--optimizer", "adam", "--steps", "2"]))
    assert single.config.optim.optimizer == "adam" and not hasattr(single, "axes")  # one name: a sweep
    path = tmp_path / "g.toml"
    path.write_text(
        '[optim]\noptimizer = ["gd", "adam"]\nloss = "exp,logistic"\n[data]\nmodel = ["dm1", "planted"]\n'
    )
    cfg, axes = load_toml_grid(path, Config())
    assert axes == {"optimizer": ("gd", "adam"), "loss": "exp,logistic", "data_model": ("dm1", "planted")}
    assert resolve_grid(cfg, axes).shape == (2, 2, 2)
    path.write_text('[model]\nattention = "tests.data.user_parts:name"\n')  # one user part, not an axis
    assert load_toml_grid(path, Config())[1] == {}
    for name in ("optim.optimizer", "optimizer", "data.model", "data-model", "data_model"):
        assert resolve_grid(
            Config(), {name: ["dm1", "planted"] if "model" in name else ["gd", "adam"]}
        ).shape == (2,)


def test_a_bad_name_is_refused_at_its_grid_point_in_one_line(tmp_path, capsys):
    with pytest.raises(
        ConfigError, match=r"grid point optimizer=adamw: optim.optimizer='adamw' is not one of"
    ):
        resolve_grid(tiny(), {"optimizer": ["gd", "adamw"]})
    line = cli_error(["--loss", "logistic,nope", "--no-figure"], capsys, tmp_path)
    assert "--loss: optim.loss='nope' is not one of 'logistic', 'exp'" in line  # as the flag is read
    path = tmp_path / "g.toml"
    path.write_text('[optim]\nloss = ["logistic", "nope"]\n')  # from a file: at its grid point
    line = cli_error(["--config", str(path), "--no-figure"], capsys, tmp_path)
    assert "grid point loss=nope: optim.loss='nope' is not one of" in line


def test_a_knob_idle_at_some_points_is_allowed_and_idle_at_every_point_refused_as_alone():
    cfg = dataclasses.replace(tiny(optim={"batch_size": 4}), given=frozenset({"optim.batch_size"}))
    grid = resolve_grid(cfg, {"optimizer": ["gd", "sgd"]})  # B acts at the sgd point
    assert [p.optim.batch_size for p in grid.points] == [4, 4]
    with pytest.raises(ConfigError) as alone:
        resolve(cfg)  # the single run at gd: B has no effect
    with pytest.raises(ConfigError) as err:
        resolve_grid(cfg, {"optimizer": ["gd", "adam"]})  # at no point
    assert str(err.value) == f"grid point optimizer=gd: {alone.value}" and "has no effect" in str(err.value)
    # an axis acting at some points only: allowed (the gd points are the same run twice)
    grid = resolve_grid(cfg, {"optimizer": ["gd", "sgd"], "sampling": ["epoch", "replace"]})
    assert grid.shape == (2, 2)
    with pytest.raises(ConfigError, match="optim.sampling='epoch' was given but has no effect"):
        resolve_grid(tiny(), {"sampling": ["epoch", "replace"]})  # gd everywhere


def test_a_data_model_axis_takes_only_the_parameters_its_models_share(tmp_path, capsys):
    grid = resolve_grid(tiny(), {"data_model": ["dm1", "planted"], "n_train": [12, 16]})
    assert [(p.data.model, p.data.n_train) for p in grid.points][1:3] == [("dm1", 16), ("planted", 12)]
    with pytest.raises(ConfigError, match=r"'planted' has no parameter data.noise; a data-model axis"):
        resolve_grid(tiny(data={"noise": 0.5}), {"data_model": ["dm1", "planted"]})
    with pytest.raises(ConfigError, match=r"'dm1' has no parameter data.label_noise"):
        resolve_grid(tiny(), {"data_model": ["dm1", "planted"], "label_noise": [0.0, 0.1]})
    shared = resolve_grid(tiny(data={"noise": 0.5}), {"data_model": ["dm1", "mixture"]})
    assert [p.data.noise for p in shared.points] == [0.5, 0.5]
    line = cli_error(["--data", "x.npz", "--data-model", "dm1,planted"], capsys, tmp_path)
    assert "cannot be combined with a data-model axis" in line
    with pytest.raises(ConfigError, match="both name the data model"):
        dynamics.run_grid(tiny(), data="x.npz", data_model=["dm1", "planted"])


def test_names_enter_the_grid_hash_and_numeric_grids_keep_theirs():
    cfg = tiny()
    numeric = resolve_grid(cfg, {"lr": [0.5, 1.0]})
    for k, lr in enumerate((0.5, 1.0)):  # a point's hash is its configuration's, set without a grid
        assert (
            numeric.points[k].hash()
            == resolve(apply_overrides(cfg, {"optim": {"lr": lr}}, "t")).config.hash()
        )
    hashes = {
        resolve_grid(cfg, axes).hash()
        for axes in (
            {"lr": [0.5, 1.0]},
            {"optimizer": ["gd", "adam"]},
            {"optimizer": ["adam", "gd"]},
            {"optimizer": ["gd", "adam"], "lr": [0.5, 1.0]},
        )
    }
    assert len(hashes) == 4
    adam = resolve_grid(cfg, {"optimizer": ["gd", "adam"]}).points[1]
    assert adam.hash() == resolve(apply_overrides(cfg, {"optim": {"optimizer": "adam"}}, "t")).config.hash()


def fake_categorical_folder(out, axes=None, base=None):
    """A saved grid over ``axes`` (default optimizer ∈ {gd, adam} × η₀ ∈ {0.1, 1, 10}) × H ∈ {1, 4},
    written by the grid's writer from made-up curves (no simulation): the second name's losses ten
    times the first's."""
    heads, trials, L = [1, 4], 2, 3
    sweep = {"heads": (1, 4), "trials": trials, "log_every": 1}
    grid = resolve_grid(
        base or tiny(optim={"steps": L - 1}, sweep=sweep),
        axes or {"optimizer": ["gd", "adam"], "lr": [0.1, 1.0, 10.0]},
    )
    shape = (2, *grid.shape, trials, L)
    base = np.random.default_rng(0).uniform(0.2, 0.4, shape)
    base[:, 1] *= 10  # adam
    curves = {"train_loss": base / 2, "test_loss": base, "train_error": base / 4, "test_error": base / 3}
    curves.update({m: np.ones(shape) for m in ("margin", "u_norm", "w_norm", "diversity", "attn_relevant")})
    result = GridResult(grid, np.array(heads), np.arange(L), curves, np.full(shape[:-1], -1))
    result.extra["complete"] = True
    out.mkdir()
    write_grid(result, out)
    return out


def test_a_data_model_grid_loads_back_with_each_models_own_defaults(tmp_path):
    # T, d, the task and the loss left to the data: each model's own at its points, not the first's
    base = apply_overrides(Config(name="dm"), {"optim": {"steps": 2}, "sweep": {"log_every": 1}}, "test")
    base = apply_overrides(base, {"data": {"n_train": 12, "n_test": 8}}, "test")
    grid = resolve_grid(base, {"data_model": ["dm1", "planted"]})
    assert [(p.data.model, p.data.d) for p in grid.points] == [("dm1", 32), ("planted", 16)]
    sweep = {"heads": (1, 4), "trials": 2, "log_every": 1}
    folder = fake_categorical_folder(
        tmp_path / "g", {"data_model": ["dm1", "planted"]}, apply_overrides(base, {"sweep": sweep}, "t")
    )
    meta = json.loads((folder / "results.json").read_text())
    assert meta["config"]["data"]["model"] == "dm1" and "source_config" in meta["grid"]
    back = dynamics.load_results(folder)
    assert back.grid.points == grid_of(base, sweep).points and back.grid.hash() == grid_of(base, sweep).hash()
    assert back.point(1).config.data.model == "planted" and back.point(1).config.data.d == 16
    numeric = json.loads((fake_categorical_folder(tmp_path / "n") / "results.json").read_text())
    assert "source_config" not in numeric["grid"]  # only a data-model axis writes it


def grid_of(base, sweep):
    return resolve_grid(apply_overrides(base, {"sweep": sweep}, "t"), {"data_model": ["dm1", "planted"]})


def test_the_files_keep_the_names_and_load_back(tmp_path):
    import pandas as pd

    folder = fake_categorical_folder(tmp_path / "g")
    frame = pd.read_csv(folder / "summary.csv")
    assert list(frame.columns[:3]) == ["H", "optimizer", "lr"]
    assert frame.optimizer.tolist()[:2] == ["gd", "gd"] and set(frame.optimizer) == {"gd", "adam"}
    meta = json.loads((folder / "results.json").read_text())
    assert meta["grid"]["values"]["optimizer"] == ["gd", "adam"]
    with np.load(folder / "curves.npz") as z:  # no pickle: a plain unicode array
        assert z["optimizer"].tolist() == ["gd", "adam"] and z["optimizer"].dtype.kind == "U"
    back = dynamics.load_results(folder)  # the grid files' checks: the names, the hash, the shapes
    assert back.grid.axes == (("optimizer", ("gd", "adam")), ("lr", (0.1, 1.0, 10.0)))
    assert back.point(3).config.optim.optimizer == "adam" and back.point(3).config.optim.lr == 0.1
    np.testing.assert_array_equal(back.curves["test_loss"], np.load(folder / "curves.npz")["test_loss"])
    meta["grid"]["values"]["optimizer"] = ["gd", "sgd"]  # an edited name: another grid's hash
    (folder / "results.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="results.json"):
        dynamics.load_results(folder)


def test_a_figure_per_name_on_shared_colour_scales(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    import figures.phase
    from dynamics.cli.figures import _at
    from figures.phase import plot_grid

    figs = []

    def keep(fig, stem):  # the figure kept open, not written (what it would write named)
        figs.append(fig)
        return [Path(f"{stem}.png"), Path(f"{stem}.pdf")]

    monkeypatch.setattr(figures.phase, "save_figure", keep)
    folder = fake_categorical_folder(tmp_path / "g")
    paths = plot_grid(folder, tmp_path / "f")
    names = sorted(p.name for p in paths if p.suffix == ".png")
    assert names == sorted(f"f-optimizer-{o}{s}.png" for o in ("gd", "adam") for s in ("", "-lines"))
    gd, gd_lines, adam, adam_lines = figs
    assert "GD η = η₀" in gd._suptitle.get_text() and "Adam η = η₀" in adam._suptitle.get_text()
    for metric in ("final test loss", "final train error"):
        (a,) = [ax for ax in gd.axes if ax.get_title() == metric]
        (b,) = [ax for ax in adam.axes if ax.get_title() == metric]
        na, nb = a.images[0].norm, b.images[0].norm
        assert (na.vmin, na.vmax) == (nb.vmin, nb.vmax)  # one scale across the names
    (la,) = [ax for ax in gd_lines.axes if ax.get_title() == "final test loss"]
    (lb,) = [ax for ax in adam_lines.axes if ax.get_title() == "final test loss"]
    assert la.get_ylim() == lb.get_ylim()
    assert _at("optimizer=adam,lr=1") == {"optimizer": "adam", "lr": 1.0}  # --at takes a name too
    at = plot_grid(folder, tmp_path / "one", at={"optimizer": "adam"})  # a name chosen: its files alone
    assert sorted(p.name for p in at if p.suffix == ".png") == ["one-lines.png", "one.png"]
    for fig in figs:
        plt.close(fig)


@pytest.mark.slow
def test_the_command_line_runs_a_grid_over_optimisers(tmp_path, capsys):
    args = ["--optimizer", "gd,adam", "--lr", "0.1,1", "--heads", "1,2", "--steps", "6", "--trials", "1"]
    args += ["--n-train", "12", "--n-test", "8", "--tokens", "4", "--width", "8", "--quiet"]
    code, stdout, stderr = cli_run([*args, "--out", str(tmp_path / "o")], capsys, tmp_path)
    assert code == 0, stderr
    assert any(line.split()[:3] == ["2", "adam", "1"] for line in stdout.splitlines()), stdout
    for name in ("summary.csv", "figure-optimizer-gd.png", "figure-optimizer-adam-lines.png"):
        assert (tmp_path / "o" / name).stat().st_size > 0, name
