"""The emergence data model (single-location regression with in-context copies and cross-sample
repetition), a data model's own test distribution (``sample_test``) and tied position logits."""

import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FAST_COMPILE

from datamodels.emergence import EMERGENCE
from dynamics.config.schema import Config, DataConfig, ModelConfig, OptimConfig, SweepConfig
from dynamics.core import rng
from dynamics.core.data import draw_trial
from dynamics.errors import ConfigError
from dynamics.sweeps.trials import trial_data


def emergence_config(steps=40, heads=(1,), trials=1, query="position", **data) -> Config:
    data = dict(T=6, d=4, n_train=16, n_test=32) | data
    return Config(
        data=DataConfig(model="emergence", **data),
        model=ModelConfig(query=query, norm="sum" if max(heads) > 1 else "sqrt"),  # c_1 = 1 for any norm
        optim=OptimConfig(optimizer="gd", lr=0.5, loss="mse", steps=steps),
        sweep=SweepConfig(heads=heads, trials=trials, log_every=10),
    )


def test_sample_defining_properties():
    """Exact: the last B tokens are one token x_r, y = W* x_r with W* orthogonal, the mask marks the
    copies; p = 1 makes x_r the trial's x̄ for the training set, the test set (p = 0) never."""
    d = trial_data(emergence_config(copies=2, repetition=1.0))
    W, x_bar = (np.asarray(d.world.latents[k], np.float64) for k in ("W_star", "x_bar"))
    np.testing.assert_allclose(W @ W.T, np.eye(4), atol=1e-6)
    for *arrays, repeated in (
        (d.X_train, d.y_train, d.mask_train, True),
        (d.X_test, d.y_test, d.mask_test, False),
    ):
        X, y, mask = (np.asarray(a) for a in arrays)  # numpy: slicing a jax array compiles a program
        assert X.shape[1:] == (6, 4) and y.shape == (X.shape[0], 4)
        assert np.array_equal(mask, np.broadcast_to(np.arange(6) >= 4, mask.shape))
        assert np.array_equal(X[:, 4], X[:, 5])
        np.testing.assert_allclose(y, X[:, 5].astype(np.float64) @ W.T, rtol=1e-5, atol=1e-5)
        assert np.all(X[:, 5] == x_bar) == repeated and np.all(np.any(X[:, 5] != x_bar, axis=1)) != repeated


# one program a call (the model and config static) at XLA's backend optimisation level 0 on the CPU,
# where op by op the draws compiled a program each; the boundary's checks are static, refused in the trace
@functools.partial(jax.jit, static_argnums=(0, 1), compiler_options=FAST_COMPILE)
def _draw_trial(model, sizes: tuple, raw):
    """draw_trial(model, cfg, key) of the config (model, T, d, n_train, n_test), a raw key wrapped"""
    return draw_trial(model, types.SimpleNamespace(**dict(sizes)), rng.wrap(raw))


_emergence_setup = jax.jit(EMERGENCE.setup, static_argnums=1, compiler_options=FAST_COMPILE)


def test_a_data_models_test_distribution_is_its_own():
    """A user model's ``sample_test`` draws the test set (and only it), checked as ``sample`` is."""

    class Model:
        task = "regression"

        def setup(self, key, params):
            return {"w": jnp.ones(2)}

        def sample(self, world, key, n):
            return jax.random.normal(key, (n, 3, 2)), jnp.zeros(n), None

        def sample_test(self, world, key, n):
            return jax.random.normal(key, (n, 3, 2)), jnp.ones(n), None

    cfg = (("model", "user:m"), ("T", 3), ("d", 2), ("n_train", 4), ("n_test", 5))
    data = _draw_trial(Model(), cfg, rng.seed(0))  # jax.random.PRNGKey(0)'s key data
    assert np.all(np.asarray(data.y_train) == 0) and np.all(np.asarray(data.y_test) == 1)
    Model.sample_test = lambda self, world, key, n: (jnp.zeros((n, 3, 2)), jnp.ones(n + 1), None)
    with pytest.raises(ConfigError, match=r"the test set.*y of shape \(6,\)"):
        _draw_trial(Model(), cfg, rng.seed(0))


@pytest.mark.stress  # two compiled programs: `make stress` and CI run it
def test_tied_copies_share_one_logit():
    """Tied: the B copies read one logit (T − B + 1 logits); free: a logit per position, and the
    copies' logits, fed the same token, stay exactly equal from a zero init."""
    from dynamics.api import run_sweep

    tied = run_sweep(emergence_config(copies=3, copy_logits="tied"), progress=False, save_params=True)
    free = run_sweep(emergence_config(copies=3), progress=False, save_params=True)
    a_free = free.curves["param_a"][0, 0, -1, 0]  # (T,): head 0 at the last logged step
    assert np.all(a_free[3:] == a_free[3]) and not np.all(a_free == a_free[0])
    a_tied = tied.curves["param_a"][0, 0, -1, 0]
    assert np.all(a_tied[3:] == a_tied[3])
    # a tied logit moves B times as fast at the start: its gradient is the sum of the B copies'
    assert tied.curves["attn_relevant"][0, 0, 1] > free.curves["attn_relevant"][0, 0, 1]
    with pytest.raises(ConfigError, match="needs positional attention"):
        run_sweep(emergence_config(copies=3, copy_logits="tied", query="first"), progress=False)


@pytest.mark.parametrize(
    "data,match",
    [(dict(copies=7), "data.copies=7 must be <= data.T=6"), (dict(repetition=1.5), "data.repetition")],
)
def test_emergence_refusals(data, match):
    from dynamics.config.validation import validate

    with pytest.raises(ConfigError, match=match):
        validate(emergence_config(**data))


def test_noise_floor_and_defaults():
    cfg = DataConfig(model="emergence").resolved()
    assert (cfg.T, cfg.d, cfg.copies, cfg.copy_logits, cfg.repetition, cfg.test_repetition) == (
        16,
        16,
        1,
        "free",
        0,
        0,
    )
    world = _emergence_setup(
        rng.wrap(rng.seed(0)), DataConfig(model="emergence", target_noise=0.5).resolved()
    )
    assert float(world.noise_floor) == 0.25
