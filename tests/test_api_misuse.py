"""Misuse of the exported Python API: each case either gives the number of the correctly typed
call or one ValueError/TypeError (ConfigError is a ValueError) naming the argument; never a
silently wrong number, never a deep exception from JAX, numpy or pandas."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dynamics
from dynamics import Loss
from dynamics.core import rng

Z = jnp.array([0.5, -1.0, 2.0, 0.0])


# Losses: a string is the enum's name, anything else is refused (it used to be the squared hinge).


@pytest.mark.parametrize("name", ["logistic", "exp", "hinge2"])
def test_loss_names_are_the_enum(name):
    assert float(dynamics.mean_loss(Z, name)) == float(dynamics.mean_loss(Z, Loss(name)))
    np.testing.assert_array_equal(dynamics.margin_loss(Z, name), dynamics.margin_loss(Z, Loss(name)))


def test_logistic_by_name_is_not_the_squared_hinge():
    z = jnp.array([-0.25, 0.5])
    want = np.mean(np.log1p(np.exp(-np.array([-0.25, 0.5]))))
    assert float(dynamics.mean_loss(z, "logistic")) == pytest.approx(want, rel=1e-6)


@pytest.mark.parametrize("bad", ["Logistic", "log", None, 0, 1.5, Loss, ["exp"]])
def test_a_loss_that_is_not_one_is_refused(bad):
    with pytest.raises(ValueError, match="loss="):
        dynamics.mean_loss(Z, bad)
    with pytest.raises(ValueError, match="loss="):
        dynamics.margin_loss(Z, bad)


def test_nan_margins_are_errors():
    assert float(dynamics.error_rate(jnp.array([jnp.nan, jnp.nan]))) == 1.0
    assert float(dynamics.error_rate(jnp.array([1.0, jnp.nan, -1.0, 0.0]))) == 0.75


@pytest.mark.parametrize("bad", ["1,2", None, True, [], np.array([True, False])])
def test_margins_must_be_real_numbers(bad):
    with pytest.raises((TypeError, ValueError), match="z"):
        dynamics.error_rate(bad)
    with pytest.raises((TypeError, ValueError), match="z"):
        dynamics.mean_loss(bad, "logistic")


# The model: shapes, head counts and scales are checked before any einsum.

KEY = jax.random.PRNGKey(0)
X = jnp.asarray(np.random.default_rng(0).normal(size=(3, 4, 5)), jnp.float32)  # numpy: no compile


def params(H=2, d=5):
    return dynamics.init_params(KEY, H, d, init="normal")


# A valid teacher's key where the key is not the subject: jax.random.PRNGKey(0)'s typed key drawing
# with dynamics.core.rng's Threefry (the same numbers; JAX's own CPU hash compiles slowly op by op).
TEACHER_KEY = rng.wrap(rng.seed(0))


def test_logits_refuse_u_and_w_of_different_head_counts():
    p = params()
    with pytest.raises(ValueError, match="params\\['U'\\]"):
        dynamics.logits({"U": p["U"][:1], "W": p["W"]}, X)
    with pytest.raises(ValueError, match="params\\['U'\\]"):
        dynamics.logits({"U": p["U"], "W": p["W"][:1]}, X)


@pytest.mark.parametrize(
    "fn", [dynamics.logits, dynamics.head_outputs, dynamics.attention, dynamics.attention_scores]
)
def test_wrong_token_shapes_are_named(fn):
    for bad in (X[..., :3], X[0], X[None]):
        with pytest.raises(ValueError, match="X has shape"):
            fn(params(), bad)
    with pytest.raises(TypeError, match="X must be"):
        fn(params(), "tokens")
    with pytest.raises(TypeError, match="params"):
        fn([1, 2], X)
    with pytest.raises(ValueError, match="params has keys"):
        fn({"U": X}, X)


def test_weight_and_member_shapes_are_checked():
    with pytest.raises(ValueError, match="weight"):
        dynamics.logits(params(), X, weight=jnp.ones(3))
    with pytest.raises(ValueError, match="n_heads"):
        dynamics.logits(params(), X, member=jnp.ones((2, 2), bool), n_heads=jnp.ones(3))


@pytest.mark.parametrize("bad", [-4, 0, -0.5, math.nan, math.inf, True, "4", None])
def test_head_norm_needs_a_positive_head_count(bad):
    for norm in ("sqrt", "mean", "sum"):
        with pytest.raises((ValueError, TypeError), match="n_heads"):
            dynamics.head_norm(bad, norm)


def test_head_norm_of_good_counts():
    assert dynamics.head_norm(4, "sqrt") == 0.5 and dynamics.head_norm(4, "mean") == 0.25
    np.testing.assert_allclose(dynamics.head_norm(np.array([1.0, 4.0]), "sqrt"), [1.0, 0.5])


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0, 0.0, "1"])
def test_init_params_refuses_a_bad_scale(bad):
    with pytest.raises((ValueError, TypeError), match="scale"):
        dynamics.init_params(KEY, 2, 5, init="normal", scale=bad)


def test_init_params_refuses_arguments_without_effect():
    with pytest.raises(ValueError, match=r"^scale=2.0 has no effect with init='zero'"):
        dynamics.init_params(KEY, 2, 5, init="zero", scale=2.0)
    with pytest.raises(ValueError, match=r"^head_size=2 has no effect with key_query='full'"):
        dynamics.init_params(KEY, 2, 5, init="normal", head_size=2)
    with pytest.raises(ValueError, match=r"^head_size=2 has no effect"):
        dynamics.param_count(2, 5, "full", 2)
    assert dynamics.init_params(KEY, 2, 5, init="normal", scale=None)["U"].shape == (2, 5)  # None: default 1


@pytest.mark.parametrize(("H", "d"), [(0, 5), (2, 0), (2.0, 5), (True, 5), (2, "5"), (-1, 5)])
def test_init_params_refuses_bad_sizes(H, d):
    with pytest.raises(ValueError, match="n_heads|d="):
        dynamics.init_params(KEY, H, d)


def test_init_params_needs_a_key_to_draw():
    with pytest.raises(TypeError, match="key"):
        dynamics.init_params(None, 2, 5, init="normal")
    with pytest.raises(TypeError, match="key"):
        dynamics.init_params(3, 2, 5, init="normal")
    assert dynamics.init_params(jax.random.key(0), 2, 5, init="normal")["W"].shape == (2, 5, 5)


# Data models, overrides and figure helpers: a clear error at the boundary, not JAX's or an AttributeError.


@pytest.mark.parametrize("bad", [None, 0, "key", [1, 2], np.array([1, 2]), jnp.zeros(2)])
def test_data_models_need_a_prng_key(bad):
    import datamodels

    with pytest.raises(TypeError, match="key="):
        datamodels.dm1(bad, 4)
    with pytest.raises(TypeError, match="key="):
        datamodels.planted_teacher(bad, d=4)
    with pytest.raises(TypeError, match="key="):
        datamodels.planted(bad, 4, datamodels.planted_teacher(TEACHER_KEY, d=4))


def test_data_model_values_of_the_wrong_kind_are_refused():
    import datamodels

    with pytest.raises(ValueError, match="noise=True"):
        datamodels.tokenized_mixture(KEY, 4, noise=True)
    with pytest.raises(TypeError, match="teacher="):
        datamodels.planted(KEY, 4, (1, 2))
    with pytest.raises(TypeError, match="X="):
        datamodels.teacher_logits(datamodels.planted_teacher(TEACHER_KEY, d=4), "tokens")


def test_with_overrides_checks_the_values_it_sets():
    with pytest.raises(dynamics.ConfigError, match="optim.lr"):
        dynamics.with_overrides(None, lr=-1)
    with pytest.raises(dynamics.ConfigError, match="sweep.heads"):
        dynamics.with_overrides(None, heads=[])
    with pytest.raises(TypeError, match="cfg="):
        dynamics.with_overrides(42)
    assert dynamics.with_overrides(None, loss=Loss.EXP).optim.loss == "exp"  # an enum is its name


def test_figure_helpers_refuse_what_is_not_a_figure_or_a_sweep():
    import matplotlib.pyplot as plt

    from figures import plot_final_vs_heads, plot_loss_curves, save_figure, sweep_entry

    with pytest.raises(TypeError, match="fig="):
        save_figure(None, "f")
    with pytest.raises(TypeError, match="config="):
        sweep_entry(None)
    fig, ax = plt.subplots()
    with pytest.raises(ValueError, match="curves has no"):
        plot_loss_curves(ax, {}, {"train_loss": np.zeros((1, 1, 1))}, "train_loss", "l")
    with pytest.raises(ValueError, match="metric="):
        plot_loss_curves(ax, {}, {"heads": [1], "steps": [0], "diverged_at": [[-1]]}, "loss", "l")
    with pytest.raises(TypeError, match="curves="):
        plot_final_vs_heads(ax, ax, {}, np.zeros(3))
    plt.close(fig)


logits = jax.jit(dynamics.logits)  # one program for the clean and both poisoned calls


def test_a_weight_zero_head_is_never_read():
    """An empty slot (weight 0) holding a NaN or an inf does not reach Φ (0·inf would be NaN).

    θ entries N(0, 1/d) from numpy and Φ jitted: the op-by-op init and Φ compiled ~40 programs."""
    g = np.random.default_rng(1)
    p = {"U": g.normal(size=(3, 4)) / 2, "W": g.normal(size=(3, 4, 4)) / 2}
    p = {k: v.astype(np.float32) for k, v in p.items()}
    X = np.random.default_rng(2).normal(size=(2, 3, 4)).astype(np.float32)
    w = np.array([1.0, 0.0, 1.0], np.float32)
    want = np.asarray(logits(p, X, weight=w))
    assert np.all(np.isfinite(want))
    for bad in (np.inf, np.nan):
        U = p["U"].copy()
        U[1] = bad
        np.testing.assert_array_equal(np.asarray(logits({"U": U, "W": p["W"]}, X, weight=w)), want)
