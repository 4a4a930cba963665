"""A user metric's name is checked against the names the results already use: a column of a
result's frames (``heads``, ``lr``, ``trial``, ``step``, …) or a grid knob would be silently
overwritten, so it is refused, in one line, before anything compiles. The reserved names are
derived from the frames themselves (``reserved_columns``); the test checks them against the
columns of actual results, so the two cannot drift apart."""

import numpy as np
import pytest

from dynamics.config.grid_axes import GRID_KNOBS, resolve_grid
from dynamics.config.schema import Config, ConfigError, apply_overrides
from dynamics.sweeps.arguments import metric_refs
from dynamics.sweeps.grid_runner import run_grid_experiment
from dynamics.sweeps.sweep_result import reserved_columns

SMALL = {
    "data": {"n_train": 16, "n_test": 20, "T": 4, "d": 6},
    "optim": {"steps": 8},
    "sweep": {"heads": (1, 2), "trials": 1, "log_every": 4},
}


def never_called(params, data):
    raise AssertionError("a refused metric must not be traced")


def own_metric(params, data):
    import jax.numpy as jnp

    return jnp.sum(params["U"] ** 2)


@pytest.mark.parametrize("name", sorted(reserved_columns()))
def test_every_reserved_column_name_is_refused_in_one_line(name):
    with pytest.raises(ConfigError, match=f"metric name '{name}' is a column") as err:
        metric_refs(Config(), {name: never_called})
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["step", "trial", "lr", "heads", "noise"])
def test_run_sweep_refuses_a_column_name_before_compiling(name):
    from dynamics import run_sweep

    with pytest.raises(ConfigError, match=f"metric name '{name}'"):
        run_sweep(apply_overrides(Config(), SMALL, "test"), metrics={name: never_called}, progress=False)


def test_the_reserved_names_are_the_columns_of_actual_results():
    """Every column of an actual sweep's frames and an actual grid's summary frame that is not one
    of its curves is reserved, and every grid knob is; a user metric's own column is there."""
    from dynamics import run_sweep

    cfg = apply_overrides(Config(name="names"), SMALL, "test")
    result = run_sweep(cfg, metrics={"own_metric": own_metric}, progress=False)
    frames = {
        "to_dataframe": result.to_dataframe(),
        "head_frame": result.head_frame(),
        "emergence_frame": result.emergence_frame(),
        "summary_frame": result.summary_frame().reset_index(),
    }
    assert "own_metric" in frames["to_dataframe"].columns
    grid = run_grid_experiment(resolve_grid(cfg, {"lr": [0.5, 1.0]}), progress=False)
    frames["grid summary_frame"] = grid.summary_frame()
    reserved = reserved_columns()
    curves = set(result.curves) | set(grid.curves)
    per_head = {k.removeprefix("head_") for k in result.curves if k.startswith("head_")}
    for where, frame in frames.items():
        columns = {str(c) for c in frame.columns} - curves
        if where == "head_frame":  # the per-head curves' own columns (the name without head_, and _j)
            columns = {c for c in columns if c not in per_head and c.rsplit("_", 1)[0] not in per_head}
        assert columns <= reserved, (where, sorted(columns - reserved))
    assert set(GRID_KNOBS) <= reserved
    assert np.all(frames["to_dataframe"]["lr"] == cfg.optim.lr)
