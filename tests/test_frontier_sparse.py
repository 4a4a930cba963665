"""The sparse-token experiment (Barnfield, Cui, Lu 2025): its grid presets, the first step leaving
the learned query at 0 exactly, the first two GD steps against an independent float64 numpy
version (the gradient written by hand), and the signed cosines with ξ."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import numpy as np
import pytest

from dynamics.config.grid_axes import grid_preset, resolve_grid
from dynamics.config.schema import apply_overrides, resolve
from dynamics.experiments import sparse_token as st
from dynamics.sweeps.sweep import planted_directions, prepare_data, run_sweep


def small(n_train=40, d=24, trials=2, **data):
    """The preset's base config at a small size (one sweep, no grid)."""
    cfg, _ = grid_preset(st.NAME)
    section = {"n_train": n_train, "n_test": 30, "d": d, **data}
    return apply_overrides(cfg, {"data": section, "sweep": {"trials": trials}}, "test")


def test_the_presets_are_the_papers_setting():
    grid = resolve_grid(*grid_preset(st.NAME))
    cfg = grid.base.config
    assert (cfg.data.model, cfg.data.T, cfg.data.d, cfg.data.n_test) == ("sparse-token", 10, 1000, 1000)
    assert (cfg.data.r, cfg.data.positive_rate, cfg.data.signal) == (3, 0.2, 6.0)
    m, o = cfg.model, cfg.optim
    assert (m.query, m.attention, m.bias, m.init, cfg.sweep.heads) == (
        "learned",
        "softmax",
        True,
        "zero",
        (1,),
    )
    assert (o.optimizer, o.lr, o.loss, o.steps, cfg.sweep.trials) == ("gd", 0.5, "logistic", 2, 10)
    assert grid.base.steps == (0, 1, 2) and cfg.sweep.save_params
    assert [p.data.n_train / p.data.d for p in grid.points] == [0.25, 0.5, 1.0, 2.0, 4.0]
    theta = resolve_grid(*grid_preset(st.THETA))
    assert theta.shape == (5, 5) and [n for n, _ in theta.axes] == ["n_train", "signal"]
    from figures.registry import FIGURES

    assert FIGURES[st.NAME].key() == grid.hash() and st.THETA in FIGURES


@pytest.fixture(scope="module")
def two_steps():
    """The preset's two steps at a small size, one trial, float32: (experiment, result)."""
    exp = resolve(small(trials=1))
    return exp, run_sweep(exp, progress=False)


@pytest.mark.slow
def test_the_first_step_moves_w_and_b_and_leaves_q_at_zero_exactly(two_steps):
    _, result = two_steps
    k, U = (result.curves[f"param_{n}"][0, :, :, 0] for n in ("k", "U"))  # (trials, L, d)
    b = result.curves["param_b"][0]  # (trials, L)
    assert np.all(k[:, 1] == 0.0)  # ∂Φ/∂q vanishes at w = 0: exactly, not to rounding
    assert np.all(np.linalg.norm(U[:, 1], axis=-1) > 0) and np.all(b[:, 1] != 0)
    assert np.all(np.linalg.norm(k[:, 2], axis=-1) > 0)  # the second step moves q
    assert np.all(np.isnan(result.curves["head_key_cos"][0, :, 1]))  # q = 0 has no direction


@pytest.mark.slow
@pytest.mark.parametrize("x64", [False, True])
def test_two_steps_agree_with_a_float64_numpy_reference(x64, two_steps):
    cfg, result = two_steps
    if x64:
        with jax.enable_x64(True):
            result = run_sweep(cfg, progress=False)
    data, _, _ = prepare_data(cfg.config)
    X, y = np.asarray(data.X_train[0], np.float64), np.asarray(data.y_train[0], np.float64)
    ref = st.two_steps_reference(X, y, lr=0.5)
    for step, theta in ((1, ref[0]), (2, ref[1])):
        got = {n: result.curves[f"param_{p}"][0, 0, step] for n, p in (("w", "U"), ("q", "k"), ("b", "b"))}
        for name in ("w", "q"):
            scale = np.max(np.abs(theta[name])) if step == 2 or name == "w" else 1.0
            assert np.max(np.abs(got[name][0] - theta[name])) <= 1e-5 * scale, (step, name)
        assert abs(float(got["b"]) - float(theta["b"])) <= 1e-5 * abs(float(theta["b"]))


def test_the_signed_cosines_are_those_of_the_snapshots_with_each_trials_xi(two_steps):
    exp, sweep = two_steps
    cfg = exp.config  # the sweep as a one-point grid (its curves with a grid axis of length 1)
    curves = {k: sweep.curves[k][:, None] for k in ("train_loss", "param_U", "param_k", "head_u_cos")}
    result = SimpleNamespace(grid=SimpleNamespace(shape=(1,), points=[cfg]), curves=curves)
    cos = st.signed_cosines(result)
    xi = st.signal_directions(cfg)  # drawn at n = 1
    np.testing.assert_array_equal(xi, planted_directions(prepare_data(cfg))["xi"])  # as with its own n
    q = curves["param_k"][0, 0, :, 2, 0]  # (trials, d) at step 2
    want = np.sum(q * xi, axis=1) / np.linalg.norm(q, axis=1)
    np.testing.assert_allclose(cos[st.COS_Q][0, 0, :, 2], want, rtol=1e-6)
    assert np.all(want > 0)  # q⁽²⁾ turns towards +ξ, not away
    got = np.abs(cos[st.COS_W][0, ..., 1:])  # |signed| is the per-head |cos| (steps 1, 2)
    np.testing.assert_allclose(got, curves["head_u_cos"][0, ..., 1:, 0, 0], atol=1e-6)
    assert np.all(np.isnan(cos[st.COS_Q][0, 0, :, :2]))  # q = 0 at steps 0 and 1: no direction
    with pytest.raises(ValueError, match="no parameter snapshots"):
        st.signed_cosines(SimpleNamespace(grid=result.grid, curves={"train_loss": curves["train_loss"]}))


def test_the_w1_limit_is_the_closed_form():
    s = 0.2 * 6 * 3 / 10
    assert st.cos_w1_limit(1.0) == pytest.approx(s / np.sqrt(s**2 + 0.1))
    assert np.all(np.diff(st.cos_w1_limit(np.array([0.25, 1, 4]))) > 0)
