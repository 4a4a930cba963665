"""The positional-semantic grid preset and its overlaps m = ‖Qᵀ1‖/d, θ = ‖Qᵀq*‖/d (Cui, Behrens,
Krzakala, Zdeborová 2024): the overlaps against float64 numpy, the preset's settings (the paper's
objective at d = 100), and a tiny grid run end to end whose overlaps are its own snapshots'."""

from __future__ import annotations

import numpy as np
import pytest

from dynamics.config.grid import grid_preset, resolve_grid
from dynamics.experiments import positional_semantic as ps


def test_the_overlaps_are_the_papers_at_rank_one():
    rs = np.random.default_rng(0)
    Q, teacher = rs.normal(size=(2, 3, 7, 1)), rs.normal(size=(2, 7))  # (trials, L, d, r = 1)
    m, theta = ps.overlaps(Q, teacher)
    for t in range(2):
        for step in range(3):
            q = Q[t, step, :, 0]
            assert np.isclose(m[t, step], abs(np.ones(7) @ q) / 7, rtol=1e-14)
            assert np.isclose(theta[t, step], abs(teacher[t] @ q) / 7, rtol=1e-14)
    positional = np.ones((1, 1, 7, 1)) / np.sqrt(7)  # the positional start: m = 1/√d, θ = |Σq*|/d^1.5
    m0, th0 = ps.overlaps(positional, teacher[:1])
    assert np.isclose(m0[0, 0], 1 / np.sqrt(7)) and np.isclose(th0[0, 0], abs(teacher[0].sum()) / 7**1.5)


def test_the_preset_is_the_papers_objective_at_d_100():
    grid = resolve_grid(*grid_preset(ps.NAME))
    assert dict(grid.axes) == {"n_train": (50, 100, 150, 200), "start": ("semantic", "positional")}
    cfg = grid.points[0]
    assert (cfg.data.model, cfg.data.T, cfg.data.d) == ("positional-semantic", 2, 100)
    assert (cfg.model.key_query, cfg.model.head_size, cfg.model.output) == ("tied", 1, "sequence")
    assert cfg.model.temperature == pytest.approx(1 / cfg.data.d)
    o = cfg.optim
    assert (o.optimizer, o.lr, o.reduction, o.weight_decay, o.loss) == ("gd", 0.15, "sum", 0.01, "mse")


@pytest.mark.slow  # two compiled grid points
def test_a_tiny_grid_adds_the_overlaps_of_its_own_snapshots():
    small = {"data": {"d": 6, "n_test": 8}, "model": {"temperature": 1 / 6}, "optim": {"steps": 6}}
    small["sweep"] = {"trials": 2, "log_points": None, "log_every": 3}
    r = ps.run(progress=False, axes={"n_train": (6,), "start": ("semantic", "positional")}, **small)
    assert r.curves[ps.M_POSITIONAL].shape == r.curves["param_Q"].shape[:-3] == (1, 1, 2, 2, 3)
    teacher = ps.teachers(r.grid.points[0])  # (trials, d), the same q* at both starts
    q0 = r.curves["param_Q"][0, 0, :, :, 0, 0, :, 0]  # (start, trials, d): Q(0)
    np.testing.assert_allclose(q0[0], teacher, rtol=1e-6)  # semantic: Q(0) = q*
    np.testing.assert_allclose(q0[1], np.ones((2, 6)) / np.sqrt(6), rtol=1e-6)  # positional: 1/√d
    np.testing.assert_allclose(r.curves[ps.M_POSITIONAL][0, 0, 1, :, 0], 1 / np.sqrt(6), rtol=1e-6)
    want = np.abs(teacher @ np.ones(6)) / 6**1.5
    np.testing.assert_allclose(r.curves[ps.THETA_SEMANTIC][0, 0, 1, :, 0], want, rtol=1e-5)
