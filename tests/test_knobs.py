"""The knobs' declarations: one per field, and every surface generated from them (flags, API
keywords, grid axes, docs/grids.md); a knob's own checks (a switch takes a bool, a value with no
effect is refused) apply wherever the value comes from."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from dynamics import parts
from dynamics.api import with_overrides
from dynamics.cli.knobs import knob_flags
from dynamics.cli.run import build_parser, config_from_args, format_table
from dynamics.config.grid_axes import GRID_KNOBS, axis_name
from dynamics.config.schema import (
    SECTIONS,
    Config,
    ConfigError,
    apply_overrides,
    declared,
    load_toml,
    part_fields,
    validate,
)
from dynamics.parts.knobs import grid_knob_list

ROOT = Path(__file__).resolve().parent.parent


def test_every_field_is_a_declared_knob_with_help():
    keys = {k.key for k in declared()}
    for section, cls in SECTIONS.items():
        import dataclasses

        for f in dataclasses.fields(cls):
            assert f.name == "params" or f"{section}.{f.name}" in keys, f"{section}.{f.name} is not declared"
    for model in parts.DATA_MODELS.values():
        for name in model.parameters:
            assert f"data.{name}" in keys
    assert all(k.help for k in declared() if k.flag and k.spec.choices is None)


def test_a_shared_parameter_name_is_one_flag_naming_each_model():
    (r,) = [k for k in declared() if k.key == "data.r"]
    owners = [models for models, _ in r.variants]
    assert ("dm1", "mixture") in owners and ("sparse-token",) in owners and r.flag == "--relevant"
    assert "sparse-token: R marked positions" in r.help and "dm1, mixture: number of relevant" in r.help
    flags = [k.flag for k in knob_flags()]
    assert len(flags) == len(set(flags))  # one flag per knob


def test_first_relevant_has_a_flag_and_a_keyword():
    args = build_parser().parse_args(["--first-relevant", "--steps", "2", "--heads", "1"])
    assert config_from_args(args).config.data.first_relevant is True
    assert with_overrides(None, first_relevant=True).data.first_relevant is True


def test_every_knob_of_a_run_is_a_grid_axis_or_says_why_not():
    """A knob of the data, the model or the optimiser that takes one value is a grid axis
    (``grid=``), or its declaration says why it is not (``single=``); a switch is on or off. The
    sweep section's knobs describe the set of runs itself (H, trials, logging), none an axis."""
    undeclared = [
        k.key
        for k in declared()
        if k.flag and k.section != "sweep" and k.spec.grid is None and not k.spec.single and not k.spec.switch
    ]
    assert undeclared == []
    both = [k.key for k in declared() if k.spec.grid is not None and k.spec.single]
    assert both == []


def test_a_knob_that_takes_one_value_says_why_when_given_several(capsys, tmp_path):
    from helpers import cli_error

    says = cli_error(["--steps", "100,200"], capsys, tmp_path)
    assert "--steps takes one value (every grid point logs the same steps)" in says


def test_grid_knobs_are_the_declared_ones_and_the_docs_list_them():
    expected = {axis_name(k) for k in declared() if k.spec.grid is not None}
    assert set(GRID_KNOBS) == expected and "temperature" in GRID_KNOBS
    assert "data_model" in GRID_KNOBS and GRID_KNOBS["data_model"] == ("data", "model", str)
    # every knob that names a part (its choices a registry) is a categorical axis, declared so
    parts_knobs = [k for k in declared() if isinstance(k.spec.choices, parts.Registry)]
    assert {k.key for k in parts_knobs} == set(part_fields())
    assert [k.key for k in parts_knobs if k.spec.grid is not str] == []
    text = (ROOT / "docs" / "grids.md").read_text()
    listed = re.search(r"<!-- grid-knobs -->(.*?)<!-- /grid-knobs -->", text, re.S).group(1)
    assert " ".join(listed.split()) == grid_knob_list(knob_flags()), (
        "docs/grids.md's grid-knob list differs from the declarations: paste "
        "dynamics.parts.knobs.grid_knob_list(dynamics.cli.knobs.knob_flags()) between its markers"
    )


@pytest.mark.parametrize(
    "kw",
    [dict(bias="False"), dict(save_params="no"), dict(whiten="0", data_model="icl-linreg"), dict(bias=1)],
)
def test_a_switch_takes_a_bool_and_refuses_anything_else(kw):
    name = next(k for k in kw if k != "data_model")
    with pytest.raises(ConfigError, match=rf"{name}={kw[name]!r} must be True or False"):
        with_overrides(None, **kw)
    with pytest.raises(ConfigError, match="must be True or False"):
        apply_overrides(Config(), {"model": {"bias": "False"}}, "test")


def test_a_parameter_given_twice_in_a_toml_file_is_refused(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[data]\nmodel = "mixture"\nzeta = 0.3\n[data.params]\nzeta = 0.5\n')
    with pytest.raises(
        ConfigError, match=r"data.zeta is given twice, 0.3 in \[data\] and 0.5 in \[data.params\]"
    ):
        load_toml(path)
    path.write_text('[data]\nmodel = "mixture"\nzeta = 0.3\n[data.params]\nzeta = 0.3\n')
    assert load_toml(path).data.zeta == 0.3  # the same value twice is one value


@pytest.mark.parametrize(
    "overrides, field",
    [
        (
            {"optim": {"optimizer": "sgd", "batch_size": 4, "sampling": "online"}, "data": {"n_train": 40}},
            "data.n_train",
        ),
        ({"model": {"query": "learned", "init": "sphere", "init_scale": 0.5}}, "model.init_scale"),
        (
            {
                "model": {"query": "learned", "init": "sphere"},
                "optim": {"constraint": "sphere", "readout_weight_decay": 0.1},
            },
            "optim.readout_weight_decay",
        ),
    ],
)
def test_a_knob_without_effect_is_refused(overrides, field):
    with pytest.raises(ConfigError, match=rf"{re.escape(field)}=.* was given but has no effect"):
        validate(apply_overrides(Config(), overrides, "test"))


def test_readout_decay_under_the_sphere_counts_for_adam_and_the_bias():
    base = {"model": {"query": "learned", "init": "sphere"}, "optim": {"constraint": "sphere"}}
    adam = {**base, "optim": {**base["optim"], "optimizer": "adam", "lr": 0.01, "readout_weight_decay": 0.1}}
    validate(apply_overrides(Config(), adam, "test"))  # decoupled: θ(1 − ηλ) then normalised, an effect
    bias = {"model": {**base["model"], "bias": True}, "optim": {**base["optim"], "readout_weight_decay": 0.1}}
    validate(apply_overrides(Config(), bias, "test"))  # b is not on the sphere


@pytest.mark.slow
def test_run_sweep_takes_a_file_path_and_x64(tmp_path):
    import jax.numpy as jnp

    from dynamics.api import run_sweep

    rng = np.random.default_rng(0)
    arrays = {
        "X_train": rng.normal(size=(8, 3, 4)).astype(np.float32),
        "y_train": np.array([1.0, -1.0] * 4, np.float32),
        "X_test": rng.normal(size=(6, 3, 4)).astype(np.float32),
        "y_test": np.array([1.0, -1.0] * 3, np.float32),
    }
    path = tmp_path / "d.npz"
    np.savez(path, **arrays)
    # no per-head metrics: the property is the training loss's, and they make the programs bigger
    kw = dict(heads=[1], trials=1, steps=2, log_every=1, progress=False, init="normal", head_metrics="off")
    r32 = run_sweep(None, data=str(path), **kw)
    assert r32.config.data.model == "npz" and r32.config.data.n_train == 8
    r64 = run_sweep(None, data=path, x64=True, **kw)
    assert (
        r64.curves["train_loss"].dtype == jnp.float64
        or np.asarray(r64.curves["train_loss"]).dtype == np.float64
    )
    np.testing.assert_allclose(r64.curves["train_loss"], r32.curves["train_loss"], rtol=1e-5)


def test_the_table_says_n_a_not_diverged_for_a_metric_without_value(monkeypatch):
    from dynamics.api import run_sweep

    monkeypatch.syspath_prepend(str(ROOT / "tests" / "data"))
    result = run_sweep(
        None,
        data_model="user_regression:linear",
        loss="mse",
        heads=[1],
        trials=1,
        steps=2,
        n_train=8,
        n_test=8,
        progress=False,
        head_metrics="off",  # the table shows run metrics only: per-head ones only grow the program
    )
    table = format_table(result)
    assert "diverged" not in table.split("\n", 2)[2].rsplit("  ", 1)[0] and "n/a" in table
    assert table.rstrip().endswith("0/1")


def test_the_user_guide_knob_table_names_each_flag_with_its_field_and_default():
    text = (ROOT / "docs" / "user-guide.md").read_text()
    table = text.split("| flag | config (`[optim]`) | default |", 1)[1].split("\n\n", 1)[0]
    by_flag = {k.flag: k for k in declared() if k.flag}
    words = {"none": None, "all updates": None, "false": False}
    rows = [line.split(" | ") for line in table.strip().splitlines()[1:]]
    assert rows
    for cells in rows:
        flags = re.findall(r"`(--[a-z-]+)", cells[0])
        fields = re.findall(r"`([a-z_]+)`", cells[1])
        assert [by_flag[f].key for f in flags] == [f"optim.{f}" for f in fields]
        shown = cells[2].rstrip(" |").split(";")[0].strip()
        if shown.startswith("`"):  # a name, as written
            default = shown.strip("`")
        else:
            default = words[shown] if shown in words else float(shown)
        assert all(by_flag[f].default == default for f in flags), (flags, default)


def test_a_data_model_parameter_may_be_named_by_its_model(tmp_path):
    cfg = with_overrides(None, data_model="sparse-token", **{"sparse-token.signal": 3.0})
    assert cfg.data.signal == 3.0 and cfg == with_overrides(None, data_model="sparse-token", signal=3.0)
    path = tmp_path / "c.toml"
    path.write_text('[data]\nmodel = "mixture"\n[data.mixture]\nr = 2\nzeta = 0.2\n')
    assert dict(load_toml(path).data.params) == {"r": 2, "zeta": 0.2}
    with pytest.raises(
        ConfigError, match=r"data.sparse-token.signal is a parameter of data model 'sparse-token'"
    ):
        with_overrides(
            None, **{"sparse-token.signal": 3.0}
        )  # the model is dm1: the name says which it is for
    with pytest.raises(ConfigError, match=r"data model 'mixture' has no parameter 'positive_rate'"):
        with_overrides(None, data_model="mixture", **{"mixture.positive_rate": 0.5})
    with pytest.raises(ConfigError, match=r"data.r is given twice, 3 and 2"):
        apply_overrides(Config(), {"data": {"model": "mixture", "r": 3, "mixture": {"r": 2}}}, "test")


# The config hashes the results files written before the knobs' declarations carry (computed on
# the code before them): the one hash rule keeps every one, so old results resume and stay cached.
KEPT_HASHES = {
    "default": "a30e7261bc7b1318",
    "fig2": "91e1a636d3be58ec",
    "planted-gd": "66b7935bda7212ca",
    "theory-dm1": "83ad2501a1840d66",
    "icl-linear": "7ae3dc9818e2d8a7",
    "specialisation": "3da193959eac1502",
    "single-location": "5a83a050e765396e",
}
KEPT_OVERRIDES = {
    "a30e7261bc7b1318": {"optim": {"task": "classification"}, "model": {"temperature_decay": 0}},
    "05f23444383234d9": {"data": {"model": "planted", "teacher_heads": 2}},
    "62f7a3651b4f0ceb": {"data": {"model": "sparse-token", "r": 2}},
    "bab6053533cd1dda": {"data": {"model": "icl-linreg", "whiten": True}, "optim": {"loss": "mse"}},
    "cdd268a2db5648ed": {
        "model": {
            "attention": "erf",
            "temperature": 2.0,
            "temperature_decay": 0.1,
            "bias": True,
            "init": "normal",
            "init_scale": 0.5,
            "key_query": "factored",
            "head_size": 2,
        }
    },
    "c660089cd221d01f": {
        "optim": {
            "optimizer": "sgd",
            "batch_size": 10,
            "sampling": "replace",
            "readout_lr_factor": 0.5,
            "attention_steps": "0:5",
            "readout_weight_decay": 0.1,
        }
    },
    "a56eabea63284d93": {
        "sweep": {"head_metrics": "on", "save_params": True, "log_every": 3, "seed": 4, "fast_path": False}
    },
}


def test_the_hash_rule_keeps_every_old_config_hash(monkeypatch):
    """The hashes below were computed before the declarations, at NUMERICS_VERSION 2; the version
    is part of every hash by design (bumped when numbers move), the rule is what is checked here."""
    from dynamics.config import identity
    from dynamics.config.schema import preset

    monkeypatch.setattr(identity, "NUMERICS_VERSION", 2)
    assert {name: preset(name).hash() for name in KEPT_HASHES} == KEPT_HASHES
    for expected, overrides in KEPT_OVERRIDES.items():
        assert apply_overrides(Config(), overrides, "test").hash() == expected, overrides


def test_the_command_line_routes_by_the_preset_named_not_by_a_substring():
    from dynamics.cli.run import requested_preset
    from dynamics.config.schema import OWN_RUNNERS

    assert requested_preset(["--preset", "bottleneck-heads", "--quick"]) == "bottleneck-heads"
    assert requested_preset(["--preset=bottleneck-expressivity"]) == "bottleneck-expressivity"
    assert (
        requested_preset(["--out", "runs/bottleneck-heads", "--name", "x"]) is None
    )  # a path is not a preset
    assert requested_preset(["--preset"]) is None  # the full parser reports it
    assert set(OWN_RUNNERS) == {"bottleneck-expressivity", "bottleneck-heads"}
