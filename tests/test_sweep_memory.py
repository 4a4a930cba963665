"""One memory check for every way a sweep runs: ``run_sweep`` and ``run_grid`` from Python refuse
what the command line refuses, before anything is drawn, and a grid is sized by its largest point."""

from __future__ import annotations

import numpy as np
import pytest

from dynamics.config.grid import resolve_grid
from dynamics.config.schema import Config, ConfigError, apply_overrides, resolve
from dynamics.sweeps import memory
from dynamics.sweeps.grid import run_grid_experiment
from dynamics.sweeps.sweep import run_grid, run_sweep

SMALL = {
    "data": {"n_train": 24, "n_test": 30, "T": 6, "d": 8},
    "optim": {"steps": 4},
    "sweep": {"heads": (1, 2), "trials": 2, "log_every": 2},
}


def small() -> Config:
    return apply_overrides(Config(name="m"), SMALL, "test")


def needed(cfg: Config) -> int:
    exp = resolve(cfg)
    return sum(memory.sweep_bytes(exp.config, len(exp.steps)).values())


def test_run_sweep_and_run_grid_refuse_a_sweep_over_the_limit(monkeypatch):
    cfg = small()
    monkeypatch.setenv(memory.ENV, str(needed(cfg) - 1))  # one byte short
    with pytest.raises(ConfigError, match="this sweep needs about .* more than the limit"):
        run_sweep(cfg, progress=False)
    with pytest.raises(ConfigError, match="more than the limit"):
        run_grid(cfg, lrs=[0.1, 1.0], progress=False)
    monkeypatch.setenv(memory.ENV, str(needed(cfg)))  # exactly enough: it runs
    result = run_sweep(cfg, progress=False)
    assert np.isfinite(result.curves["train_loss"]).all()


def test_a_grid_is_sized_by_its_largest_point(monkeypatch):
    base = small()
    grid = resolve_grid(base, {"n_train": [24, 400]})
    first, largest = (needed(c) for c in grid.points)
    assert largest > first
    monkeypatch.setenv(memory.ENV, str(largest - 1))  # the first point fits, the largest does not
    with pytest.raises(ConfigError, match="the largest of these 2 grid points needs about"):
        run_grid_experiment(grid, progress=False)


def test_the_estimate_counts_the_declared_metrics():
    """The curves' part is the run's metrics (their registry), the per-head part each per-head
    metric's declared numbers per step: computed here by hand for H_max = 2, P = F = d = 8."""
    exp = resolve(apply_overrides(small(), {"sweep": {"head_metrics": "on"}}, "test"))
    parts = memory.sweep_bytes(exp.config, len(exp.steps))
    runs_steps = 2 * 2 * len(exp.steps) * 8  # heads × trials × L × float64
    assert parts["curves"] == runs_steps * 9  # a classification run's nine metrics
    # per head: attn_relevant, u_norm, key_norm, uk_cos (4·H); u_cos, key_cos (2·H·P);
    # attn_feature (H·F); the engine's float32 and the host's float32 (4 + 4 bytes); L_h = L here
    H, P = 2, 8
    runs_views = 2 * 2 * len(exp.steps)
    assert parts["per-head metrics"] == runs_views * 8 * (4 * H + 2 * H * P + H * P)
    # the head–head matrices (u_sim, key_sim, attn_sim: 3·H²) only with sweep.head_sims
    sims = resolve(apply_overrides(exp.config, {"sweep": {"head_sims": True}}, "test")).config
    got = memory.sweep_bytes(sims, len(exp.steps))["per-head metrics"]
    assert got == runs_views * 8 * (4 * H + 2 * H * P + H * P + 3 * H * H)


def test_the_per_head_view_is_counted_at_its_own_steps():
    """1000 steps logged every step: the per-head view (metrics, snapshots) at every 6th logged step
    and the last (168 of 1001, ``HEAD_POINTS`` = 200), or at every one with head_every = 1."""
    over = {"optim": {"steps": 1000}, "sweep": {"log_every": 1, "head_metrics": "on", "save_params": True}}
    cfg = resolve(apply_overrides(small(), over, "test")).config
    every = resolve(apply_overrides(cfg, {"sweep": {"head_every": 1}}, "test")).config
    default, full = memory.sweep_bytes(cfg, 1001), memory.sweep_bytes(every, 1001)
    assert len(range(0, 1001, 6)) + 1 == 168
    for part in ("per-head metrics", "parameter snapshots"):
        assert default[part] * 1001 == full[part] * 168
    assert default["curves"] == full["curves"]
