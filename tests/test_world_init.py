"""θ(0) from a data model's world (``initial_params``, datamodels.protocol): built-in (max-margin)
and user models alike, per trial, every head of a run; its output refused at the boundary."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dynamics import run_sweep
from dynamics.errors import ConfigError
from dynamics.parts import boundary
from dynamics.sweeps.trials import trial_data

SIZES = dict(T=4, d=3, n_train=6, n_test=6)
RUN = dict(heads=(1, 2), trials=2, steps=4, log_every=2, save_params=True, progress=False, **SIZES)


class UserWorld:
    """A user model whose world (a dict) draws a unit v and sets the readout U = v."""

    T, d = SIZES["T"], SIZES["d"]

    def __init__(self, out=None):
        self.out = out  # replaces initial_params' output (a hostile one), or None

    def setup(self, key, params):
        g = jax.random.normal(key, (params.d,), jnp.float32)
        return {"v": g / jnp.linalg.norm(g)}

    def sample(self, world, key, n):
        X = jax.random.normal(key, (n, self.T, self.d), jnp.float32)
        y = jnp.where(X[:, 0] @ world["v"] > 0, 1.0, -1.0)
        return X, y, None

    def initial_params(self, world, shapes):
        return {"U": world["v"]} if self.out is None else self.out(world, shapes)


@pytest.fixture(scope="module")
def builtin():  # the world sets every array θ(0) has (an init there would change nothing: refused)
    return run_sweep(data_model="max-margin", diagnostics=("kernel", "maxmargin"), **RUN)


@pytest.mark.stress
def test_builtin_world_sets_u_and_w_of_every_head_per_trial(builtin):
    """Step 0's U and W are the trial's world's v and W(0) exactly (float32), in every head of every
    run, and they differ between trials."""
    U = builtin.curves["param_U"][:, :, 0]  # (heads, trials, H, d)
    W = builtin.curves["param_W"][:, :, 0]
    for t in range(RUN["trials"]):
        world = trial_data(builtin.config, t).world.latents
        for i, H in enumerate(RUN["heads"]):
            assert np.array_equal(U[i, t, :H], np.broadcast_to(world["v"], (H, SIZES["d"])))
            assert np.array_equal(W[i, t, :H], np.broadcast_to(world["W0"], (H, SIZES["d"], SIZES["d"])))
        assert abs(np.linalg.norm(world["v"]) - 1) < 1e-6
        bound = 1 / np.sqrt(SIZES["d"])
        assert np.all(np.abs(world["W0"]) <= bound)
    assert not np.array_equal(U[0, 0], U[0, 1])


@pytest.mark.stress
def test_diagnostics_replay_from_the_worlds_theta0(builtin):
    """The diagnostics' replay starts where the engine did: its training loss matches the logged one."""
    gap = builtin.extra["diagnostics"]["replay_gap"]
    assert gap < 1e-5, gap


@pytest.mark.stress
def test_user_world_sets_u_and_the_init_draws_the_rest():
    """A user model's world sets U; W keeps the configured init (zero: the fast path stays)."""
    res = run_sweep(data=UserWorld(), **RUN)
    U, W = res.curves["param_U"][:, :, 0], res.curves["param_W"][:, :, 0]
    assert np.all(W[~np.isnan(W)] == 0)
    norms = np.linalg.norm(U[1], axis=-1)  # H = 2: both heads unit
    assert np.allclose(norms, 1, atol=1e-6)
    assert np.array_equal(U[1, :, 0], U[1, :, 1])
    assert not np.array_equal(U[1, 0, 0], U[1, 1, 0])


SHAPES = {"U": (3,), "W": (3, 3)}
V = jax.ShapeDtypeStruct((3,), jnp.float32)
BAD = {
    "not a dict": (V, "must return a dict"),
    "unknown name": ({"V": V}, "'V', not a parameter"),
    "wrong shape": ({"U": jax.ShapeDtypeStruct((2,), jnp.float32)}, "shape (2,)"),
    "integer": ({"U": jax.ShapeDtypeStruct((3,), jnp.int32)}, "dtype int32"),
    "not an array": ({"U": [1.0, 0.0, 0.0]}, "must be an array"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_initial_params_refused_in_one_line(case):
    out, message = BAD[case]
    with pytest.raises(ConfigError) as err:
        boundary.check_initial_params("m:x", out, SHAPES)
    text = str(err.value)
    assert message in text and "initial_params" in text and "'m:x'" in text and "\n" not in text


@pytest.mark.stress
def test_non_finite_initial_params_refused_before_any_run():
    """Through the sweep: the worlds' values are checked (an inf U is refused in one line)."""
    with pytest.raises(ConfigError, match=r"returned 'U' with 6 non-finite values .*θ\(0\) must be finite"):
        run_sweep(data=UserWorld(lambda w, s: {"U": w["v"] / 0.0}), **RUN)
