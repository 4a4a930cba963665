"""The head-specialisation experiment: its preset, the takeover finder, a tiny run, and the
categorical grid knob (the attention activation) its grid needs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dynamics.config.grid_axes import parse_values, resolve_grid
from dynamics.config.schema import apply_overrides, preset, resolve
from dynamics.errors import ConfigError
from dynamics.experiments import specialisation as spec


def test_preset_validates_and_runs_each_activation():
    cfg = resolve(preset("specialisation")).config
    assert (cfg.data.model, cfg.data.d, cfg.data.T, cfg.data.strengths) == (
        "multi-location",
        64,
        10,
        (1.0, 0.7, 0.5),
    )
    assert (cfg.model.query, cfg.model.norm, cfg.sweep.heads) == ("learned", "sum", (4,))
    assert (cfg.optim.sampling, cfg.model.init) == ("online", "normal")
    cfgs = spec.configs()
    assert list(cfgs) == ["erf", "softmax", "softmax1"]
    assert [c.model.attention for c in cfgs.values()] == ["erf", "softmax", "softmax1"]
    assert cfgs["erf"].optim.lr == spec.LR["erf"] and cfgs["softmax"].optim.lr == cfg.optim.lr
    for c in cfgs.values():
        resolve(c)
    assert len({c.hash() for c in cfgs.values()}) == 3


def _ramp(L: int, start: int, top: float = 1.0) -> np.ndarray:
    """0.1 until ``start``, then ``top``."""
    return np.where(np.arange(L) >= start, top, 0.1)


def test_takeovers_on_synthetic_curves():
    L, H, F = 12, 4, 3
    steps = np.arange(L) * 10
    cos = np.full((L, H, F), 0.05)
    cos[:, 2, 0] = _ramp(L, 2)  # head 2 takes feature 0 at step 20
    cos[:, 0, 1] = _ramp(L, 5, 0.95)  # head 0 takes feature 1 at step 50
    cos[:, 0, 1][7] = 0.5  # ... drops below 0.9 (not below the onset) at 70, holds it again from 80
    cos[:, 3, 2] = _ramp(L, 9)  # head 3 takes feature 2 at step 90
    cos[:, 1, 0] = _ramp(L, 1, 0.92)  # head 1 also holds feature 0, but head 2 is closer at the end
    taken = spec.takeovers(cos, steps)
    assert [(t["head"], t["step"], t["onset"]) for t in taken] == [(2, 20, 20), (0, 80, 50), (3, 90, 90)]
    assert spec.holds_all(taken) and spec.in_strength_order(taken) is True
    cos[2:10, 2, 0] = 0.6  # feature 0 led by head 2 from step 20, held (≥ 0.9) only from step 100
    taken = spec.takeovers(cos, steps)
    assert (taken[0]["onset"], taken[0]["step"]) == (20, 100)
    assert spec.in_strength_order(taken) is True and spec.in_strength_order(taken, "step") is False
    cos[:, 3, 2] = _ramp(L, 1)  # the weakest feature first: not in order
    assert spec.in_strength_order(spec.takeovers(cos, steps)) is False


def test_takeovers_one_head_cannot_hold_two_features():
    steps = np.arange(3)
    cos = np.zeros((3, 2, 2))
    cos[:, 0, :] = 0.95  # head 0 close to both features; head 1 to none
    taken = spec.takeovers(cos, steps)
    assert sum(t["head"] is not None for t in taken) == 1 and not spec.holds_all(taken)
    assert spec.in_strength_order(taken) is None
    cos[-1] = np.nan  # a diverged run holds nothing
    assert all(t["head"] is None for t in spec.takeovers(cos, steps))


def test_numpy_attention_matches_the_engine():
    import jax.numpy as jnp

    from dynamics.core import activations

    s = np.random.default_rng(0).normal(0, 3, (5, 10, 2))
    for act in ("softmax", "softmax1", "erf"):
        engine = np.asarray(getattr(activations, act)(jnp.asarray(np.moveaxis(s, 1, -1))))
        np.testing.assert_allclose(spec._attention(s, act), np.moveaxis(engine, -1, 1), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_tiny_run_summarises_heads():
    from dynamics.sweeps.sweep import run_sweep

    cfg = apply_overrides(
        preset("specialisation"),
        {"data": {"d": 8, "n_test": 50}, "model": {"attention": "softmax1"}, "optim": {"steps": 20}},
        "test",
    )
    cfg = dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, trials=1, log_points=5))
    result = run_sweep(resolve(cfg), progress=False)
    summary = spec.summarise(result)
    (run,) = summary["runs"]
    assert summary["n_runs"] == 1 and len(run["takeovers"]) == 3 and not run["holds_all"]
    detail = run["heads_detail"]
    assert len(detail) == 4 and not any(h["holds"] for h in detail)
    assert all(0 < h["attention_total"] < 1 and h["u_norm"] > 0 and h["output_std"] > 0 for h in detail)


def test_attention_is_a_categorical_grid_knob():
    assert parse_values("erf, softmax,softmax1", "attention") == ("erf", "softmax", "softmax1")
    base = apply_overrides(preset("specialisation"), {"data": {"d": 8}, "optim": {"steps": 4}}, "test")
    grid = resolve_grid(base, {"attention": "softmax,softmax1", "lr": "0.01,0.02"})
    assert (
        grid.shape == (2, 2)
        and [c.model.attention for c in grid.points] == ["softmax"] * 2 + ["softmax1"] * 2
    )
    with pytest.raises(ConfigError, match="grid point attention=nope"):
        resolve_grid(base, {"attention": "softmax,nope"})
    with pytest.raises(ConfigError, match="empty"):
        parse_values(" , ", "attention")


@pytest.mark.stress  # long: `make stress` and CI run it
def test_tiny_grid_over_activations(tmp_path):
    from dynamics.sweeps.grid_runner import format_grid_table, run_grid_experiment, write_grid
    from dynamics.sweeps.sweep import run_sweep
    from figures.specialisation import plot_specialisation_grid

    base = apply_overrides(
        preset("specialisation"),
        {"data": {"d": 8, "n_test": 20}, "optim": {"steps": 6}, "sweep": {"heads": (2,), "trials": 2}},
        "test",
    )
    base = dataclasses.replace(base, sweep=dataclasses.replace(base.sweep, log_points=3, save_params=False))
    grid = resolve_grid(base, {"attention": "softmax,softmax1"})
    result = run_grid_experiment(grid, progress=False)
    result.extra.update(complete=True)
    alone = run_sweep(grid.points[1], progress=False)  # softmax1: its own program, not softmax's
    np.testing.assert_array_equal(result.point(1).curves["test_loss"], alone.curves["test_loss"])
    assert not np.array_equal(result.point(0).curves["test_loss"], alone.curves["test_loss"])
    write_grid(result, tmp_path)
    assert "softmax1" in format_grid_table(result, lambda s: f"{s['mean']:.3g}")
    from figures.phase import grid_data

    held, order = spec.held_fraction(*grid_data(tmp_path))
    assert held.shape == (1, 2) and np.all(held == 0) and np.all(np.isnan(order))
    assert all(p.exists() for p in plot_specialisation_grid(tmp_path, tmp_path / "grid"))
