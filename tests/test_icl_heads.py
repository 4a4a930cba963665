"""icl-heads (He, Pan, Chen, Yang 2025): icl-linreg's isotropic inputs, task variance and label noise,
against float64 references computed from the same draws."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from helpers import FAST_COMPILE

from dynamics.config.schema import Config, ConfigError, DataConfig, validate
from dynamics.core.data import data_model


def _draw(n: int = 64, T: int = 6, d: int = 4, **knobs):
    """(X, y, noise floor) of one icl-linreg world and sample, as float64 numpy."""
    cfg = DataConfig(model="icl-linreg", T=T, d=d, **knobs).resolved()
    obj = data_model(cfg)

    def draw(k0, k1):
        world = obj.setup(k0, cfg)
        X, y, _ = obj.sample(world, k1, n)
        return X, y, world.noise_floor, world.latents["basis"], world.latents["eigenvalues"]

    out = jax.jit(draw, compiler_options=FAST_COMPILE)(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
    return [np.asarray(a, np.float64) for a in out]


def test_default_draws_are_unchanged_by_the_new_knobs_at_their_defaults():
    X0, y0, f0, *_ = _draw()
    X1, y1, f1, *_ = _draw(covariance="spectrum", task_variance=1.0, epsilon=0.0)
    np.testing.assert_array_equal(X0, X1)
    np.testing.assert_array_equal(y0, y1)
    assert f0 == f1 == 0.0
    assert "epsilon" not in DataConfig(model="icl-linreg").resolved().to_dict()  # old hashes kept


def test_identity_covariance_is_the_spectrum_draw_before_its_scaling():
    """x_spectrum = (z·√λ) B with z the identity draw (the same key), in float64."""
    Xs, *_, basis, lam = _draw()
    Xi, *_ = _draw(covariance="identity")
    D = basis.shape[0]
    ref = (Xi[:, :, :D] * np.sqrt(lam)) @ basis
    np.testing.assert_allclose(Xs[:, :, :D], ref, rtol=0, atol=1e-5)


def test_task_variance_scales_every_label_by_its_root_and_the_query_stays_hidden():
    Xa, ya, *_ = _draw(covariance="identity")
    Xb, yb, *_ = _draw(covariance="identity", task_variance=0.2)
    D = Xa.shape[2] - 1
    np.testing.assert_array_equal(Xa[:, :, :D], Xb[:, :, :D])
    np.testing.assert_allclose(Xb[:, :-1, D], np.sqrt(0.2) * Xa[:, :-1, D], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(yb, np.sqrt(0.2) * ya, rtol=1e-5, atol=1e-6)
    assert np.all(Xb[:, -1, D] == 0.0)  # the query's y is hidden


def test_label_noise_is_added_to_context_and_query_labels_with_its_floor():
    n = 4000
    X0, y0, *_ = _draw(n=n, covariance="identity")
    X1, y1, floor, *_ = _draw(n=n, covariance="identity", epsilon=0.5)
    X2, y2, *_ = _draw(n=n, covariance="identity", epsilon=1.0)
    D = X0.shape[2] - 1
    g_ctx = (X1[:, :-1, D] - X0[:, :-1, D]) / 0.5
    g_q = (y1 - y0) / 0.5
    np.testing.assert_allclose(X2[:, :-1, D] - X0[:, :-1, D], g_ctx, atol=1e-5)  # one g, scaled by ε
    np.testing.assert_allclose(y2 - y0, g_q, atol=1e-5)
    for g in (g_ctx.ravel(), g_q):
        assert abs(g.mean()) < 4 / np.sqrt(g.size) and abs(g.std() - 1.0) < 4 / np.sqrt(g.size)
    assert floor == pytest.approx(0.25, rel=1e-6)
    assert np.all(X1[:, -1, D] == 0.0)


def test_whiten_with_a_task_variance_is_refused():
    with pytest.raises(ConfigError, match="task_variance"):
        validate(Config(data=DataConfig(model="icl-linreg", whiten=True, task_variance=0.2)))
