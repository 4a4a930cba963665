"""The compiled engine against a plain Python loop, and the exact zero-init facts of docs/model.md
(the fast path against the full path, for every part: test_properties.py)."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import small

from dynamics.config.schema import Config, log_schedule
from dynamics.core import data as data_mod
from dynamics.core import engine, inits, losses, model, update
from dynamics.core.data import make_data
from dynamics.sweeps import sweep
from dynamics.sweeps.sweep import run_sweep


def small_config(**sections) -> Config:
    """helpers.small, by section: ``small_config(optim=dict(lr=0.1))``."""
    return small(**{"lr": 0.5, **{k: v for values in sections.values() for k, v in values.items()}})


def loop_train(cfg: Config, H: int, key, data: data_mod.Data, steps: int):
    """The same updates as the engine, one plain step at a time (each step a jitted function, the
    loop in Python, no scan): params after each step."""
    cfg = cfg.resolved()
    m = cfg.model
    params = _init(
        key,
        H,
        data.X_train.shape[-1],
        init=m.init,
        scale=m.init_scale if m.init == "normal" else None,  # the zero init takes no scale
        key_query=m.key_query,
        head_size=m.head_size if m.key_query == "factored" else None,
    )
    knobs = dict(optimizer=cfg.optim.optimizer, loss=cfg.optim.loss, query=m.query, norm=m.norm)
    lr = sweep.step_size(cfg, H)
    state = _opt_init(params, optimizer=cfg.optim.optimizer)
    history = [params]
    for _ in range(steps):
        params, state = _plain_step(params, state, lr, data.X_train, data.y_train, **knobs)
        history.append(params)
    return history


# Compiled once per process for every config with the same knobs and shapes (an eager op-by-op
# loop compiled each primitive per new shape: ~180 compiles a case); the step size is an argument.
_init = jax.jit(
    inits.init_params, static_argnums=(1, 2), static_argnames=("init", "scale", "key_query", "head_size")
)


@functools.partial(jax.jit, static_argnames=("optimizer",))
def _opt_init(params, *, optimizer):
    return update.make_optimizer(optimizer, 1.0).init(params)  # the state does not depend on η


@functools.partial(jax.jit, static_argnames=("optimizer", "loss", "query", "norm"))
def _plain_step(params, state, lr, X, y, *, optimizer, loss, query, norm):
    def objective(p):
        return losses.mean_loss(y * model.logits(p, X, query=query, norm=norm), losses.Loss(loss))

    grads = jax.grad(objective)(params)
    updates, state = update.make_optimizer(optimizer, lr).update(grads, state, params)
    return optax.apply_updates(params, updates), state


@functools.partial(jax.jit, static_argnames=("loss", "query", "norm"))
def _evaluate(p, d: data_mod.Data, *, loss, query, norm):
    """The training loss and the test error of params ``p`` on one trial's data."""
    z = d.y_train * model.logits(p, d.X_train, query=query, norm=norm)
    zt = d.y_test * model.logits(p, d.X_test, query=query, norm=norm)
    return losses.mean_loss(z, losses.Loss(loss)), losses.error_rate(zt)


def trial_data(data: data_mod.Data, i: int) -> data_mod.Data:
    return jax.tree_util.tree_map(lambda a: a[i], data)


@pytest.mark.slow_cases("adam-zero-full-False", "gd-normal-full-False")
@pytest.mark.parametrize(
    "optimizer,init,key_query,fast",
    [
        # (the fast path: equal to the full path, test_properties.py, hence to this loop)
        ("gd", "zero", "full", False),
        ("adam", "zero", "full", False),
        ("gd", "normal", "full", False),
        ("adam", "normal", "factored", False),
    ],
)
def test_engine_matches_plain_loop(optimizer, init, key_query, fast):
    cfg = small_config(
        optim=dict(optimizer=optimizer, lr=0.5 if optimizer == "gd" else 0.05),
        model=dict(init=init, key_query=key_query, init_scale=1.0),
        sweep=dict(fast_path=fast),
    )
    result = run_sweep(cfg, progress=False)
    k_data, k_init = jax.random.split(jax.random.PRNGKey(cfg.sweep.seed))
    data, _ = make_data(cfg.data, k_data, cfg.sweep.trials)
    knobs = dict(loss=cfg.optim.loss, query=cfg.model.query, norm=cfg.model.norm)
    for hi, H in enumerate(cfg.sweep.heads):
        for trial in range(cfg.sweep.trials):
            d = trial_data(data, trial)
            history = loop_train(cfg, H, jax.random.fold_in(k_init, trial), d, cfg.optim.steps)
            for li, step in enumerate(result.steps):
                want, error = (float(v) for v in _evaluate(history[step], d, **knobs))
                got = result.curves["train_loss"][hi, trial, li]
                assert got == pytest.approx(want, rel=2e-5, abs=1e-6), (H, trial, step)
                assert result.curves["test_error"][hi, trial, li] == pytest.approx(
                    error, abs=1.5 / d.y_test.shape[0]
                )


@pytest.mark.slow_cases("first-adam", "first-gd")
@pytest.mark.parametrize("optimizer", ["gd", "adam"])
@pytest.mark.parametrize("query", ["first", "last", "all"])
def test_zero_init_heads_stay_identical_to_the_last_bit(optimizer, query):
    cfg = small_config(
        optim=dict(optimizer=optimizer, lr=0.5 if optimizer == "gd" else 0.05), model=dict(query=query)
    )
    k_data, k_init = jax.random.split(jax.random.PRNGKey(0))
    data, _ = make_data(cfg.data, k_data, cfg.sweep.trials)  # the draw the other tests compile
    history = loop_train(cfg, 3, k_init, trial_data(data, 0), 10)
    final = history[-1]
    assert float(jnp.abs(final["W"]).max()) > 0  # the heads did move
    for name, value in final.items():
        assert bool(jnp.all(value == value[:1])), name  # bitwise equal to head 0
    # ...and the engine's full computation reports diversity exactly 0 at every logged step (the
    # config's H = 1 and 3: with query "first" the program test_engine_matches_plain_loop compiles).
    result = run_sweep(
        dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, fast_path=False)), progress=False
    )
    assert result.curves["diversity"].shape[0] == 2 and not np.isnan(result.curves["diversity"]).any()
    assert np.all(result.curves["diversity"] == 0.0)


def test_sqrt_norm_H_heads_equal_one_head_with_key_query_step_over_H():
    """docs/model.md: c_H = 1/√H, GD step η: Ũ = √H·U learns with η, W with η/H (one head, c = 1)."""
    H, eta, steps = 8, 0.7, 15
    cfg = small_config(optim=dict(lr=eta))
    k_data, k_init = jax.random.split(jax.random.PRNGKey(0))
    data, _ = make_data(cfg.data, k_data, cfg.sweep.trials)
    d = trial_data(data, 0)
    many = loop_train(cfg, H, k_init, d, steps)[-1]

    def objective(p):  # one head, c = 1
        return losses.mean_loss(d.y_train * model.logits(p, d.X_train, norm="sum"), losses.Loss.LOGISTIC)

    @jax.jit  # one compiled step instead of op-by-op dispatch; the loop stays in Python
    def step(one):
        g = jax.grad(objective)(one)
        return {"U": one["U"] - eta * g["U"], "W": one["W"] - (eta / H) * g["W"]}

    one = _init(k_init, 1, d.X_train.shape[-1])
    for _ in range(steps):
        one = step(one)
    np.testing.assert_allclose(np.sqrt(H) * many["U"][0], one["U"][0], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(many["W"][0], one["W"][0], rtol=1e-5, atol=1e-8)


def test_divergence_is_detected_and_masked():
    cfg = small_config(optim=dict(lr=1e15, loss="exp", steps=20), sweep=dict(log_every=1))
    result = run_sweep(cfg, progress=False)
    assert (result.diverged_at >= 0).all()
    for hi in range(len(cfg.sweep.heads)):
        for trial in range(cfg.sweep.trials):
            at = result.diverged_at[hi, trial]
            after = result.steps >= at
            assert np.isnan(result.curves["train_loss"][hi, trial, after]).all()
            assert np.isfinite(result.curves["train_loss"][hi, trial, ~after]).all()
    row = result.summary()[0]
    assert row["diverged"] and row["n_diverged"] == cfg.sweep.trials and row["train_loss"]["mean"] is None


def test_same_seed_same_numbers_and_seed_matters():
    cfg = small_config()
    a, b = run_sweep(cfg, progress=False), run_sweep(cfg, progress=False)
    for name in engine.METRICS:
        np.testing.assert_array_equal(a.curves[name], b.curves[name])
    c = run_sweep(dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, seed=1)), progress=False)
    assert not np.array_equal(a.curves["train_loss"], c.curves["train_loss"])


@pytest.mark.parametrize(
    "steps,every,points,want",
    [
        (10, 1, None, list(range(11))),
        (10, 4, None, [0, 4, 8, 10]),
        (1000, None, 4, [0, 1, 10, 100, 1000]),
    ],
)
def test_log_schedule(steps, every, points, want):
    got = log_schedule(steps, every, points)
    assert set(want) <= set(got) and got[0] == 0 and got[-1] == steps
    if every is not None:
        assert got == want
