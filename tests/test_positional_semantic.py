"""The positional-semantic grid preset and its overlaps m = ‖Qᵀ1‖/d, θ = ‖Qᵀq*‖/d (Cui, Behrens,
Krzakala, Zdeborová 2024): the overlaps against float64 numpy, the preset's settings (the paper's
objective at d = 100), and a tiny grid run end to end whose overlaps are its own snapshots'."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dynamics.api import load_results
from dynamics.config.grid_axes import grid_preset, resolve_grid
from dynamics.experiments import positional_semantic as ps
from dynamics.sweeps.grid_runner import write_grid
from dynamics.sweeps.trials import every_trial
from figures.positional_semantic import positional_semantic_figure
from figures.registry import FIGURES


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


def test_the_crossing_interpolates_the_first_change_of_sign():
    alphas = [0.5, 1.0, 1.5, 2.0]
    assert ps.crossing(alphas, [3.0, 1.0, -1.0, -2.0]) == pytest.approx(1.25)  # halfway 1 → −1
    assert ps.crossing(alphas, [4.0, 3.0, -1.0, -2.0]) == pytest.approx(1.0 + 0.5 * 3 / 4)
    assert ps.crossing(alphas, [1.0, 0.0, -1.0, 2.0]) == 1.0  # a zero at a grid point
    assert np.isnan(ps.crossing(alphas, [1.0, 2.0, 0.5, 0.1]))  # one sign throughout
    assert np.isnan(ps.crossing(alphas, [1.0, np.nan, -1.0, -2.0]))  # no crossing read through a NaN


def _fake_grid(objectives, axes):
    """A grid result with (1, A, 2, trials, 1) curves in the layout of ``axes``, for ``compare``."""
    cfg = SimpleNamespace(data=SimpleNamespace(d=10))
    curves = {name: objectives for name in (ps.OBJECTIVE, "test_loss", ps.M_POSITIONAL, ps.THETA_SEMANTIC)}
    return SimpleNamespace(curves=curves, grid=SimpleNamespace(axes=axes, points=[cfg]))


def test_compare_pairs_the_starts_per_trial_and_marks_the_lower_objective():
    # objective[α, start, trial]: the semantic start (index 0) is higher at α = 0.5, lower after
    obj = np.array([[[2.0, 4.0], [1.0, 1.0]], [[1.0, 3.0], [2.0, 2.0]], [[0.0, 1.0], [3.0, 3.0]]])
    axes = (("n_train", (5, 10, 15)), ("start", ("semantic", "positional")))
    out = ps.compare(_fake_grid(obj[None, ..., None], axes))
    np.testing.assert_allclose(out["alpha"], [0.5, 1.0, 1.5])
    np.testing.assert_allclose(out["difference"], [2.0, 0.0, -2.5])
    assert list(out["better"]) == ["positional", "positional", "semantic"]  # a tie is not semantic's
    assert out["crossing"] == 1.0
    np.testing.assert_allclose(out["semantic"]["objective"], [3.0, 2.0, 0.5])
    # the same grid with its axes the other way round: the same answer
    swapped = np.moveaxis(obj, (0, 1), (1, 0))[::-1]  # (start, α, trials), positional first
    axes2 = (("start", ("positional", "semantic")), ("n_train", (5, 10, 15)))
    again = ps.compare(_fake_grid(swapped[None, ..., None], axes2))
    np.testing.assert_allclose(again["difference"], out["difference"])
    with pytest.raises(ValueError, match="n_train × start"):
        ps.compare(_fake_grid(obj[None, ..., None], (("n_train", (5, 10, 15)), ("lr", (0.1, 0.2)))))


def _tied_outputs(X, Q, d):
    """float64 f(X) = softmax((XQ)(XQ)ᵀ/d) X of tokens X (n, T, d), Q (d, 1)."""
    h = X @ Q[:, 0]  # (n, T)
    s = h[:, :, None] * h[:, None, :] / d
    a = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("nst,ntd->nsd", a / a.sum(-1, keepdims=True), X)


@pytest.mark.slow  # four compiled grid points
def test_the_objective_is_the_papers_at_the_final_q_and_the_starts_share_their_data(tmp_path):
    d, lam = 8, 0.01  # the paper's λ: the stored replica curve is drawn only for its own problem
    small = {"data": {"d": d, "n_test": 8}, "model": {"temperature": 1 / d}, "optim": {"steps": 6}}
    small["optim"]["weight_decay"] = lam
    small["sweep"] = {"trials": 2, "log_points": None, "log_every": 3}
    r = ps.run(progress=False, axes={"n_train": (4, 12), "start": ("semantic", "positional")}, **small)
    for k, cfg in enumerate(r.grid.points):
        a, s = np.unravel_index(k, r.grid.shape)
        paired = every_trial(r.grid.points[k - s])  # the semantic start's point at this α
        for t, data in enumerate(every_trial(cfg)):
            np.testing.assert_array_equal(data.X_train, paired[t].X_train)  # one draw for both starts
            np.testing.assert_array_equal(data.y_train, paired[t].y_train)
            np.testing.assert_array_equal(data.world.latents["teacher"], paired[t].world.latents["teacher"])
            Q = np.asarray(r.curves["param_Q"][0, a, s, t, -1, 0], np.float64)  # (d, 1), the final Q
            X, y = np.asarray(data.X_train, np.float64), np.asarray(data.y_train, np.float64)
            resid = _tied_outputs(X, Q, d).reshape(len(X), -1) - y
            want = np.sum(resid**2) / (2 * d) + lam / 2 * np.sum(Q**2)
            assert r.curves[ps.OBJECTIVE][0, a, s, t, -1] == pytest.approx(want, rel=1e-5)
    out = ps.compare(r)
    np.testing.assert_allclose(out["alpha"], [0.5, 1.5])
    final = r.curves[ps.OBJECTIVE][0, :, :, :, -1]  # (α, start, trials)
    np.testing.assert_allclose(out["difference"], np.mean(final[:, 0] - final[:, 1], axis=-1))
    base = r.curves[ps.BASELINE]  # (H, α, start, trials): one baseline per trial, the same at both starts
    assert base.shape == (1, 2, 2, 2) and np.all(np.isfinite(base))
    np.testing.assert_array_equal(base[:, :, 0], base[:, :, 1])
    np.testing.assert_allclose(out["baseline"], base[0, :, 0].mean(-1))
    # saved as the figures' producer saves it, loaded and drawn: the same comparison from the files
    write_grid(r, tmp_path / "ps")
    loaded = ps.compare(load_results(tmp_path / "ps"))
    np.testing.assert_array_equal(loaded["difference"], out["difference"])
    assert list(loaded["better"]) == list(out["better"])
    fig = positional_semantic_figure(load_results(tmp_path / "ps"))
    err, _, diff_ax = fig.axes
    np.testing.assert_allclose(diff_ax.lines[0].get_ydata(), out["difference"])
    (line,) = [ln for ln in err.lines if ln.get_label().startswith("linear baseline")]
    np.testing.assert_allclose(line.get_ydata(), out["baseline"])
    filled = [c for c in err.collections if len(c.get_offsets())]  # each start's better points filled
    assert sum(len(c.get_offsets()) for c in filled) == 2 * len(out["alpha"])
    # the replica theory beside it, in the simulation's units at the grid's d
    th = ps.theory(int(r.grid.points[0].data.d))
    (line,) = [ln for ln in err.lines if ln.get_label() == "theory, semantic"]
    np.testing.assert_allclose(line.get_ydata(), th["semantic"]["test_loss"])
    (line,) = [ln for ln in diff_ax.lines if ln.get_label() == "theory, semantic − positional"]
    np.testing.assert_allclose(line.get_ydata(), th["difference"])


def test_the_figure_is_registered_with_the_presets_grid():
    assert FIGURES[ps.NAME].key() == resolve_grid(*grid_preset(ps.NAME)).hash() == ps.key()


def test_the_mixing_gradient_is_the_objectives_by_finite_differences():
    rs = np.random.default_rng(1)
    Z, y, B = rs.normal(size=(5, 2, 4)), rs.normal(size=(5, 2, 4)), rs.normal(size=(2, 2))
    value, grad = ps.mixing_gradient(B, Z, y)
    assert value == pytest.approx(sum(np.sum((y[i] - B @ Z[i]) ** 2) for i in range(5)) / 8, rel=1e-12)
    for s, t in np.ndindex(2, 2):
        e = np.zeros((2, 2))
        e[s, t] = 1e-6
        fd = (ps.mixing_gradient(B + e, Z, y)[0] - ps.mixing_gradient(B - e, Z, y)[0]) / 2e-6
        assert grad[s, t] == pytest.approx(fd, rel=1e-6)


def test_the_linear_baseline_recovers_a_pure_mixing_target():
    rs = np.random.default_rng(2)
    A = np.array([[0.6, 0.4], [0.4, 0.6]])
    Z = 0.5 * rs.normal(size=(40, 2, 16))
    y = np.einsum("st,ntd->nsd", A, Z)  # ω = 1: the target is A Z
    B = ps.linear_baseline(Z, y, np.random.default_rng(0))
    np.testing.assert_allclose(B, A, atol=5e-3)
    B0 = np.random.default_rng(0).normal(size=(2, 2))  # B(0) ~ N(0, 1), far from A
    assert np.abs(B0 - A).max() > 0.1
    short = ps.linear_baseline(Z, y, np.random.default_rng(0), steps=1)
    assert np.abs(short - A).max() > np.abs(B - A).max()  # the steps move it towards A
