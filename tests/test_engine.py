"""The compiled engine against a plain Python loop, and the exact zero-init facts of docs/model.md
(the fast path against the full path, for every part: test_properties.py)."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import small

from dynamics.config.schema import Config, log_schedule
from dynamics.core import data as data_mod
from dynamics.core import engine, losses, model, update
from dynamics.core.data import make_data
from dynamics.sweeps import sweep
from dynamics.sweeps.sweep import run_sweep


def small_config(**sections) -> Config:
    """helpers.small, by section: ``small_config(optim=dict(lr=0.1))``."""
    return small(**{"lr": 0.5, **{k: v for values in sections.values() for k, v in values.items()}})


def loop_train(cfg: Config, H: int, key, data: data_mod.Data, steps: int):
    """The same updates as the engine, one plain eager step at a time: params after each step."""
    cfg = cfg.resolved()
    m = cfg.model
    params = model.init_params(
        key,
        H,
        data.X_train.shape[-1],
        init=m.init,
        scale=m.init_scale if m.init == "normal" else None,  # the zero init takes no scale
        key_query=m.key_query,
        head_size=m.head_size if m.key_query == "factored" else None,
    )
    opt = update.make_optimizer(cfg.optim.optimizer, sweep.step_size(cfg, H))
    state = opt.init(params)
    loss = losses.Loss(cfg.optim.loss)

    def objective(p):
        z = data.y_train * model.logits(p, data.X_train, query=m.query, norm=m.norm)
        return losses.mean_loss(z, loss)

    history = [params]
    for _ in range(steps):
        grads = jax.grad(objective)(params)
        updates, state = opt.update(grads, state, params)
        params = optax.apply_updates(params, updates)
        history.append(params)
    return history


def trial_data(data: data_mod.Data, i: int) -> data_mod.Data:
    return jax.tree_util.tree_map(lambda a: a[i], data)


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
    loss = losses.Loss(cfg.optim.loss)
    for hi, H in enumerate(cfg.sweep.heads):
        for trial in range(cfg.sweep.trials):
            d = trial_data(data, trial)
            history = loop_train(cfg, H, jax.random.fold_in(k_init, trial), d, cfg.optim.steps)
            for li, step in enumerate(result.steps):
                p = history[step]
                z = d.y_train * model.logits(p, d.X_train, query=cfg.model.query, norm=cfg.model.norm)
                want = float(losses.mean_loss(z, loss))
                got = result.curves["train_loss"][hi, trial, li]
                assert got == pytest.approx(want, rel=2e-5, abs=1e-6), (H, trial, step)
                zt = d.y_test * model.logits(p, d.X_test, query=cfg.model.query, norm=cfg.model.norm)
                assert result.curves["test_error"][hi, trial, li] == pytest.approx(
                    float(losses.error_rate(zt)), abs=1.5 / zt.shape[0]
                )


@pytest.mark.parametrize("optimizer", ["gd", "adam"])
@pytest.mark.parametrize("query", ["first", "last", "all"])
def test_zero_init_heads_stay_identical_to_the_last_bit(optimizer, query):
    cfg = small_config(
        optim=dict(optimizer=optimizer, lr=0.5 if optimizer == "gd" else 0.05), model=dict(query=query)
    )
    k_data, k_init = jax.random.split(jax.random.PRNGKey(0))
    data, _ = make_data(cfg.data, k_data, 1)
    history = loop_train(cfg, 4, k_init, trial_data(data, 0), 10)
    final = history[-1]
    assert float(jnp.abs(final["W"]).max()) > 0  # the heads did move
    for name, value in final.items():
        assert bool(jnp.all(value == value[:1])), name  # bitwise equal to head 0
    # ...and the engine's full computation reports diversity exactly 0 at every logged step.
    result = run_sweep(
        dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, fast_path=False, heads=(4,))),
        progress=False,
    )
    assert np.all(result.curves["diversity"] == 0.0)


def test_sqrt_norm_H_heads_equal_one_head_with_key_query_step_over_H():
    """docs/model.md: c_H = 1/√H, GD step η: Ũ = √H·U learns with η, W with η/H (one head, c = 1)."""
    H, eta, steps = 8, 0.7, 15
    cfg = small_config(optim=dict(lr=eta))
    k_data, k_init = jax.random.split(jax.random.PRNGKey(0))
    data, _ = make_data(cfg.data, k_data, 1)
    d = trial_data(data, 0)
    many = loop_train(cfg, H, k_init, d, steps)[-1]

    def objective(p):  # one head, c = 1
        return losses.mean_loss(d.y_train * model.logits(p, d.X_train, norm="sum"), losses.Loss.LOGISTIC)

    one = model.init_params(k_init, 1, d.X_train.shape[-1])
    for _ in range(steps):
        g = jax.grad(objective)(one)
        one = {"U": one["U"] - eta * g["U"], "W": one["W"] - (eta / H) * g["W"]}
    np.testing.assert_allclose(np.sqrt(H) * many["U"][0], one["U"][0], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(many["W"][0], one["W"][0], rtol=1e-5, atol=1e-8)


def test_divergence_is_detected_and_masked():
    cfg = small_config(optim=dict(lr=1e30, loss="exp", steps=20), sweep=dict(log_every=1))
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
