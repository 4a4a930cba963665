"""The attention activations and the temperature: Φ and its gradient against an independent float64
numpy reference for every activation, query and temperature; the engine's temperature schedule
against a plain loop; the zero-init saddles refused; old configs' hashes unchanged."""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import numpy as np
import pytest
from helpers import DEFAULT_CONFIG_HASH, FAST_COMPILE

from dynamics import parts
from dynamics.config.schema import (
    Config,
    ConfigError,
    DataConfig,
    ModelConfig,
    OptimConfig,
    SweepConfig,
    validate,
)
from dynamics.core import activations, inits, losses, model, update
from dynamics.core.data import make_data
from dynamics.sweeps.sweep import run_sweep

ACTIVATIONS = list(parts.ACTIVATIONS)
_erf = np.vectorize(math.erf)

# Φ and its gradient as jitted programs (the activation and query static, β a traced argument,
# so both temperatures share one program), compiled at XLA's backend optimisation level 0 on the
# CPU: op by op, each primitive compiled a program of its own, and compiling is this file's run
# time. The same traced model.logits; float64 numbers against the float64 references' tolerances.


@functools.partial(jax.jit, static_argnames=("query", "activation"), compiler_options=FAST_COMPILE)
def _logits(params, X, beta, *, query, activation):
    return model.logits(params, X, query=query, activation=activation, beta=beta)


@functools.partial(jax.jit, static_argnames=("activation",), compiler_options=FAST_COMPILE)
def _loss_gradient(params, X, y, beta, *, activation):
    def loss(p):
        z = y * model.logits(p, X, activation=activation, beta=beta)
        return losses.mean_loss(z, "logistic")

    return jax.grad(loss)(params)


def sigma_ref(name: str, s: np.ndarray) -> np.ndarray:
    """σ over the last axis, written out in float64."""
    if name == "softmax":
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    if name == "softmax1":
        e = np.exp(s)
        return e / (1.0 + e.sum(axis=-1, keepdims=True))
    if name == "linear":
        return s
    if name == "sigmoid":
        return 1.0 / (1.0 + np.exp(-s))
    assert name == "erf"
    return _erf(s)


def phi_ref(U, W, X, query: str, activation: str, beta: float, norm_c: float, b: float = 0.0) -> np.ndarray:
    """Φ(X) = c_H Σ_h Σ_t σ(β s_h)_t U_hᵀ x_t + b, example by example and head by head; for the
    learned query ``W`` is the vectors k (H, d) and s_h,t = x_tᵀ k_h; for the position query the
    logits a (H, T) and s_h,t = a_h,t; for the query outside the keys x_T queries tokens 1..T-1."""
    n, T, _ = X.shape
    if query == "outside":  # the context tokens are the keys; x_T queries them from outside
        T -= 1  # the loops below over t < T read the keys only
    out = np.zeros(n)
    for i in range(n):
        for h in range(U.shape[0]):
            queries = {"first": [X[i, 0]], "last": [X[i, -1]], "all": list(X[i]), "learned": [None]}
            queries["position"] = ["position"]
            queries["outside"] = [X[i, -1]]
            f = 0.0
            for xq in queries[query]:
                if isinstance(xq, str):  # the position logits a_h (T,): the tokens' content unread
                    s = np.array([W[h][t] for t in range(T)])
                elif xq is None:
                    s = np.array([X[i, t] @ W[h] for t in range(T)])
                else:
                    s = np.array([X[i, t] @ W[h] @ xq for t in range(T)])
                a = sigma_ref(activation, beta * s)
                f += sum(a[t] * (U[h] @ X[i, t]) for t in range(T))
            out[i] += f / len(queries[query])
    return norm_c * out + b


def problem(seed=0, n=5, T=4, d=3, H=2, query="first"):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, T, d))
    y = np.where(rng.normal(size=n) > 0, 1.0, -1.0)
    if query == "learned":
        return {"U": rng.normal(size=(H, d)), "k": 0.7 * rng.normal(size=(H, d))}, X, y
    if query == "position":
        return {"U": rng.normal(size=(H, d)), "a": 0.7 * rng.normal(size=(H, T))}, X, y
    return {"U": rng.normal(size=(H, d)), "W": 0.7 * rng.normal(size=(H, d, d))}, X, y


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("query", list(parts.QUERIES))
@pytest.mark.parametrize("beta", [1.0, 0.3])
def test_phi_matches_a_float64_reference(activation, query, beta):
    params, X, _ = problem(query=query)
    key_part = params.get("W", params.get("k", params.get("a")))
    want = phi_ref(params["U"], key_part, X, query, activation, beta, 1 / math.sqrt(2))
    with jax.enable_x64(True):
        got = _logits(params, X, beta, query=query, activation=activation)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("activation", ACTIVATIONS)
def test_gradient_matches_finite_differences_of_the_reference(activation):
    params, X, y = problem(seed=1)
    beta, c = 0.8, 1 / math.sqrt(2)

    def loss_ref(p):
        z = y * phi_ref(p["U"], p["W"], X, "first", activation, beta, c)
        return np.mean(np.logaddexp(0.0, -z))

    with jax.enable_x64(True):
        grads = jax.tree_util.tree_map(np.asarray, _loss_gradient(params, X, y, beta, activation=activation))
    eps = 1e-6
    for name, value in params.items():
        for index in np.ndindex(value.shape):
            up = {k: v.copy() for k, v in params.items()}
            down = {k: v.copy() for k, v in params.items()}
            up[name][index] += eps
            down[name][index] -= eps
            fd = (loss_ref(up) - loss_ref(down)) / (2 * eps)
            assert float(grads[name][index]) == pytest.approx(fd, rel=1e-6, abs=1e-9), (name, index)


def test_softmax1_is_stable_and_may_attend_to_nothing():
    s = np.array([[1000.0, 999.0], [-1000.0, -999.0]])
    with jax.enable_x64(True):
        a = np.asarray(activations.softmax1(jax.numpy.asarray(s)))
    assert np.all(np.isfinite(a))
    np.testing.assert_allclose(a[0], np.exp([0.0, -1.0]) / (np.exp(-1000.0) + 1 + np.exp(-1.0)), rtol=1e-12)
    assert a[1].sum() < 1e-300  # every score very negative: the head attends to nothing


def tiny(**model_kw) -> Config:
    return Config(
        data=DataConfig(n_train=20, n_test=24, T=5, d=6, n_irrelevant=2),
        model=ModelConfig(**model_kw),
        optim=OptimConfig(optimizer="gd", lr=0.5, steps=12),
        sweep=SweepConfig(heads=(2,), trials=2, log_every=4),
    )


@pytest.mark.slow
@pytest.mark.parametrize("activation", ["sigmoid", "erf"])
def test_the_engines_temperature_schedule_matches_a_plain_loop(activation):
    """β_t = β₀/(1 + c·t) at update t, and a logged step evaluated at its last update's β."""
    beta0, c = 1.5, 0.2
    cfg = tiny(init="normal", attention=activation, temperature=beta0, temperature_decay=c)
    k_data, k_init = jax.random.split(jax.random.PRNGKey(cfg.sweep.seed))
    data, _ = make_data(cfg.data, k_data, cfg.sweep.trials)
    with jax.enable_x64(True):
        result = run_sweep(cfg, progress=False)
        d = jax.tree_util.tree_map(lambda a: np.asarray(a[1], np.float64), data)
        p = inits.init_params(jax.random.fold_in(k_init, 1), 2, 6, init="normal")
        opt = update.make_optimizer("gd", cfg.optim.lr)
        state = opt.init(p)

        def objective(p, beta):
            phi = model.logits(p, d.X_train, activation=activation, beta=beta)
            return losses.mean_loss(d.y_train * phi, "logistic")

        # compiled once (β a traced argument) rather than dispatched op by op at every step
        loss_at, grad_at, update_at = jax.jit(objective), jax.jit(jax.grad(objective)), jax.jit(opt.update)
        want = []
        for t in range(cfg.optim.steps + 1):
            if t % 4 == 0:
                want.append(float(loss_at(p, beta0 / (1 + c * max(t - 1, 0)))))
            g = grad_at(p, beta0 / (1 + c * t))
            u, state = update_at(g, state, p)
            p = jax.tree_util.tree_map(lambda a, b: a + b, p, u)
    np.testing.assert_allclose(result.curves["train_loss"][0, 1], want, rtol=1e-12)


@pytest.mark.parametrize("activation", [a for a, p in parts.ACTIVATIONS.items() if p.saddle_at_zero])
def test_a_zero_init_at_a_saddle_is_refused(activation):
    with pytest.raises(ConfigError, match=rf"^model.attention='{activation}' needs model.init='normal'"):
        validate(tiny(attention=activation))
    validate(tiny(attention=activation, init="normal"))


def test_bad_values_and_the_hash_of_old_configs():
    for bad, match in [
        (dict(attention="relu"), r"model.attention='relu' is not one of"),
        (dict(temperature=0.0), r"model.temperature=0.0 must be > 0"),
        (dict(temperature_decay=-1.0), r"model.temperature_decay=-1.0 must be >= 0"),
    ]:
        with pytest.raises(ConfigError, match=match):
            validate(tiny(**bad))
    with pytest.raises(ConfigError, match=r"diagnostics needs the papers' model \(a key-query"):
        validate(dataclasses.replace(tiny(attention="sigmoid"), sweep=SweepConfig(diagnostics=("kernel",))))
    # the new fields are left out of results.json and the hash at their defaults
    assert "attention" not in Config().to_dict()["model"]
    assert Config().hash() == DEFAULT_CONFIG_HASH
    assert tiny(attention="sigmoid").hash() != tiny().hash()
