"""icl-linear (Zhang, Singh, Latham, Saxe 2025): the preset, the closed-form plateau levels against
an independent Monte Carlo fit, the in-context init's invariants, the authors' whitening, and a
tiny staircase."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FAST_COMPILE

from dynamics import run_sweep
from dynamics.config.schema import Config, ConfigError, DataConfig, ModelConfig, preset, resolve, validate
from dynamics.core import inits, rng
from dynamics.core.data import data_model
from dynamics.experiments import icl

# The tests' draws compiled as one jitted program each, at XLA's backend optimisation level 0
# on the CPU: a program of random draws compiles 3-5x faster than at the default level, and
# eagerly each draw and op compiled a program of its own (compiling is this file's run time).
# The same traced functions; their float numbers may differ from the default level's in the
# last bit, which the tolerances allow (the masks' zeros are exact at any level).


def test_preset_is_the_papers_setting():
    cfg = resolve(preset("icl-linear")).config
    m, o, d = cfg.model, cfg.optim, cfg.data
    assert (d.model, d.T, d.d, d.n_train, d.whiten) == ("icl-linreg", 32, 5, 5000, False)
    assert (m.query, m.attention, m.norm, m.key_query, m.head_size) == (
        "last",
        "linear",
        "sum",
        "factored",
        1,
    )
    assert (m.init, m.init_scale) == ("icl", 0.1)
    assert (o.optimizer, o.lr, o.loss, o.task) == ("gd", 0.02, "mse", "regression")
    assert cfg.sweep.heads == (5,) and cfg.sweep.trials == 5
    full = resolve(icl.full_config()).config
    assert full.model.key_query == "full" and full.hash() != cfg.hash()
    assert "whiten" not in cfg.data.to_dict()  # the new parameter keeps old icl-linreg hashes
    assert DataConfig(model="icl-linreg", whiten=True).resolved().to_dict()["whiten"] is True


def test_plateau_levels_match_a_monte_carlo_least_squares_fit():
    """ℒ_m against the mse of the least-squares fit of y_q on the features z_i a_i of the m largest
    eigen-directions (z_i = v_iᵀ Σ_n x_n y_n, a_i = v_iᵀ x_q), drawn in float64 numpy."""
    D, N, n = 3, 15, 200_000
    lam = np.array([0.5, 0.2, 0.3])  # unsorted on purpose; trace 1
    rng = np.random.default_rng(1)
    x = rng.standard_normal((n, N + 1, D)) * np.sqrt(lam)
    w = rng.standard_normal((n, D))
    y = np.einsum("ntd,nd->nt", x, w)
    features = np.einsum("ntd,nt->nd", x[:, :N], y[:, :N]) * x[:, N]
    yq = y[:, N]
    fits = [np.mean(yq**2)]
    for m in range(1, D + 1):
        F = features[:, np.argsort(lam)[::-1][:m]]
        c, *_ = np.linalg.lstsq(F, yq, rcond=None)
        fits.append(np.mean((yq - F @ c) ** 2))
    levels = icl.plateau_levels(lam, N)
    assert levels[0] == pytest.approx(1.0) and np.all(np.diff(levels) < 0)
    np.testing.assert_allclose(levels, fits, rtol=0.02)
    # and one level by hand: ℒ_1 = 1 − 0.5 / (1 + (1 + 1/0.5)/15)
    assert levels[1] == pytest.approx(1 - 0.5 / (1 + 3 / 15), rel=1e-12)
    with pytest.raises(ValueError, match="N=0"):
        icl.plateau_levels(lam, 0)
    with pytest.raises(ValueError, match="eigenvalues"):
        icl.plateau_levels([0.5, -0.1], 4)


@pytest.mark.parametrize("key_query,head_size", [("factored", 2), ("full", None)])
def test_icl_init_masks_the_y_channel_and_scales_by_the_layer(key_query, head_size):
    H, d, scale = 7, 5, 0.01
    key = jax.random.PRNGKey(3)
    a = head_size or 0

    @functools.partial(jax.jit, compiler_options=FAST_COMPILE)  # both draws in one compiled program
    def draws(key):
        p = inits.init_params(
            key, H, d, init="icl", scale=scale, key_query=key_query, head_size=head_size, query="last"
        )
        return p, inits.init_heads(jnp.broadcast_to(key, (H, 2)), jnp.arange(H), d, math.sqrt(d), head_size)

    p, unit = draws(key)
    U = np.asarray(p["U"])
    np.testing.assert_array_equal(U[:, : d - 1], 0.0)  # the readout's x-part is 0
    assert np.all(U[:, d - 1] != 0)
    ctx = np.asarray(p["Q"] if key_query == "factored" else p["W"])
    np.testing.assert_array_equal(ctx[:, d - 1], 0.0)  # the context side never reads y_t
    # the variance, exactly: the normal init's unit draws times σ₀/√(entries of the whole layer)
    entries = {"U": H * d * d, "W": H * d * d, "Q": H * d * a, "K": H * d * a}
    for name, value in p.items():
        expect = np.asarray(unit[name]) * scale / math.sqrt(entries[name])
        if name == "U":
            expect[:, : d - 1] = 0.0
        elif name in ("Q", "W"):
            expect[:, d - 1] = 0.0
        np.testing.assert_allclose(np.asarray(value), expect, rtol=1e-6, atol=0)


@pytest.mark.slow
def test_icl_init_in_the_engine_is_init_params_and_refuses_a_learned_query():
    """Packed runs of H = 2 and 3 start exactly where ``init_params`` starts them: each run's
    variance reads its own H (the engine passes it), not the pack's slot count."""
    result = run_sweep(
        "icl-linear", n_train=20, n_test=10, tokens=6, steps=1, trials=2, heads=[2, 3], save_params=True
    )
    _, k_init = rng.split(rng.seed(0))
    for i, H in enumerate((2, 3)):
        for trial in range(2):
            key = jnp.asarray(rng.fold_in(k_init, trial))
            want = inits.init_params(
                key, H, 5, init="icl", scale=0.1, key_query="factored", head_size=1, query="last"
            )
            for name, value in want.items():
                got = result.params[name][i, trial, 0, :H]
                np.testing.assert_allclose(got, np.asarray(value), rtol=1e-6, atol=0)
                assert np.array_equal(got == 0, np.asarray(value) == 0)  # the masks, exactly
    model = ModelConfig(query="learned", attention="linear", init="icl")
    with pytest.raises(ConfigError, match="init='icl' needs a key-query matrix"):
        validate(Config(data=DataConfig(model="icl-linreg"), model=model))


def test_whiten_centres_inputs_and_whitens_task_vectors():
    cfg = DataConfig(model="icl-linreg", n_train=400, n_test=3, T=8, whiten=True).resolved()
    obj = data_model(cfg)
    # the world and the sample in one compiled program (eagerly, each op compiled on its own)
    sample = jax.jit(
        lambda k0, k1: obj.sample(obj.setup(k0, cfg), k1, 400)[:2], compiler_options=FAST_COMPILE
    )
    X, y = sample(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
    X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
    D = 4
    np.testing.assert_allclose(X[:, :, :D].mean(axis=0), 0.0, atol=1e-6)  # centred over the set
    ctx = X[:, :-1, :D]  # w of each sequence from its N = 7 context pairs (exact: no noise)
    rhs = np.einsum("ntd,nt->nd", ctx, X[:, :-1, D])[:, :, None]
    W = np.linalg.solve(ctx.transpose(0, 2, 1) @ ctx, rhs)[:, :, 0]
    np.testing.assert_allclose(W.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(np.cov(W.T), np.eye(D), atol=1e-3)
    np.testing.assert_allclose(y, np.einsum("nd,nd->n", X[:, -1, :D], W), atol=1e-3)


@pytest.mark.slow
def test_a_tiny_staircase_has_one_drop_per_eigenvalue_and_the_full_model_one():
    """D = 2, N = 15: the rank-one heads sit near ℒ_0, ℒ_1, ℒ_2 in turn (a finite set's levels
    scatter by a few %); the full key-query model goes from ℒ_0 to ℒ_2 without stopping at ℒ_1."""
    kw = dict(width=3, tokens=16, n_train=1000, n_test=10, heads=[3], trials=2, steps=2000, lr=0.05)
    kw.update(init_scale=0.05, log_points=200, whiten=True, head_metrics="off")
    levels = icl.plateau_levels(icl.eigenvalues(2), 15)
    rank1 = run_sweep("icl-linear", **kw)
    found = icl.measured_plateaus(rank1.steps, rank1.curves["train_loss"][0].mean(0), levels)
    assert np.all(np.isfinite(found)) and np.all(np.diff(found) < 0), (found, levels)
    np.testing.assert_allclose(found, levels, rtol=0.15)  # one set's levels scatter by ~7 % (std)
    kw.update(init_scale=0.001, lr=0.02, steps=1000)  # the full version's fast drop needs a small init
    full = run_sweep(icl.full_config(preset("icl-linear")), **kw)
    found = icl.measured_plateaus(full.steps, full.curves["train_loss"][0].mean(0), levels)
    assert np.isfinite(found[0]) and np.isfinite(found[2]) and np.isnan(found[1]), found
