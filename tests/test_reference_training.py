"""Training with every activation, the first, last and learned queries, the bias and the logistic,
square and mse losses, from the same θ(0) (``--init-from``), against an independent float64
reference: Φ written head by head with its own einsums, ``jax.grad`` of it, and a plain GD loop.
The engine runs in float64 (x64); train and test loss agree to 1e-5 relative at every step."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dynamics import parts
from dynamics.config.schema import Config, DataConfig, ModelConfig, OptimConfig, SweepConfig
from dynamics.sweeps.sweep import run_sweep

N, M, T, D, H, STEPS, LR = 12, 9, 4, 3, 2, 40, 0.1


def write_problem(folder, query: str, bias: bool, regression: bool, seed: int = 0):
    """An .npz of data (±1 labels, or real targets) and one of θ(0): (data path, init path)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N + M, T, D)).astype(np.float32)
    if regression:
        y = (X[:, 0, 0] - 0.5 * X[:, -1, 1] + 0.1 * rng.normal(size=N + M)).astype(np.float32)
    else:
        y = np.where(X[:, :, 0].sum(axis=1) > 0, 1.0, -1.0).astype(np.float32)
    data = folder / "data.npz"
    np.savez(data, X_train=X[:N], y_train=y[:N], X_test=X[N:], y_test=y[N:])
    theta = {"U": 0.5 * rng.normal(size=(H, D))}
    if query == "learned":
        theta["k"] = 0.5 * rng.normal(size=(H, D))
    else:
        theta["W"] = 0.5 * rng.normal(size=(H, D, D))
    if bias:
        theta["b"] = np.float64(0.2)
    init = folder / "theta.npz"
    np.savez(init, **theta)
    return data, init


SIGMA = {
    "softmax": lambda s: jnp.exp(s - s.max()) / jnp.sum(jnp.exp(s - s.max())),
    "softmax1": lambda s: jnp.exp(s) / (1.0 + jnp.sum(jnp.exp(s))),
    "linear": lambda s: s,
    "sigmoid": lambda s: 1.0 / (1.0 + jnp.exp(-s)),
    "erf": jax.scipy.special.erf,
}
LOSS = {
    "logistic": lambda phi, y: jnp.mean(jnp.log1p(jnp.exp(-y * phi))),
    "square": lambda phi, y: jnp.mean((1.0 - y * phi) ** 2),
    "mse": lambda phi, y: jnp.mean((phi - y) ** 2),
}


def phi_reference(theta, X, query: str, activation: str, beta: float):
    """Φ(X) = (1/√H) Σ_h Σ_t σ(β s_h)_t U_hᵀ x_t + b, one example and one head at a time."""

    def one(x):  # x (T, D)
        total = 0.0
        for h in range(H):
            if query == "learned":
                s = x @ theta["k"][h]
            else:
                q = x[0] if query == "first" else x[-1]
                s = x @ (theta["W"][h] @ q)
            a = SIGMA[activation](beta * s)
            total = total + a @ (x @ theta["U"][h])
        return total / np.sqrt(H) + theta.get("b", 0.0)

    return jax.vmap(one)(X)


def reference_curves(data, init, query, activation, loss, beta):
    """Train and test loss at steps 0..STEPS of plain GD in float64."""
    with jax.enable_x64(True):
        z = np.load(data)
        Xtr, ytr, Xte, yte = (
            jnp.asarray(z[k], jnp.float64) for k in ("X_train", "y_train", "X_test", "y_test")
        )
        theta = {k: jnp.asarray(v, jnp.float64) for k, v in np.load(init).items()}

        def risk(th, X, y):
            return LOSS[loss](phi_reference(th, X, query, activation, beta), y)

        grad = jax.jit(jax.grad(risk))
        train, test = [], []
        for _ in range(STEPS + 1):
            train.append(float(risk(theta, Xtr, ytr)))
            test.append(float(risk(theta, Xte, yte)))
            g = grad(theta, Xtr, ytr)
            theta = {k: theta[k] - lr_of(activation) * g[k] for k in theta}
    return np.array(train), np.array(test)


def config(data, init, query, activation, loss, bias, beta) -> Config:
    return Config(
        data=DataConfig(model="npz", path=str(data)),
        model=ModelConfig(
            query=query, attention=activation, bias=bias, temperature=beta, init_from=str(init)
        ),
        optim=OptimConfig(lr=lr_of(activation), steps=STEPS, loss=loss),
        sweep=SweepConfig(heads=(H,), trials=1, log_every=1),
    )


def lr_of(activation: str) -> float:
    return LR / 5 if activation == "linear" else LR  # Φ cubic in θ: a smaller step stays finite


# every activation with every query; the losses and the bias rotate over them
CASES = [
    (query, activation, ["logistic", "square", "mse"][i % 3], bool(i % 2), [1.0, 0.7][i % 4 == 3])
    for i, (query, activation) in enumerate(
        itertools.product(["first", "last", "learned"], parts.ACTIVATIONS)
    )
]


@pytest.mark.parametrize("query,activation,loss,bias,beta", CASES)
def test_training_agrees_with_a_float64_reference(tmp_path, query, activation, loss, bias, beta):
    data, init = write_problem(tmp_path, query, bias, regression=loss == "mse")
    want_train, want_test = reference_curves(data, init, query, activation, loss, beta)
    with jax.enable_x64(True):
        result = run_sweep(config(data, init, query, activation, loss, bias, beta), progress=False)
    assert result.config.optim.task == ("regression" if loss == "mse" else "classification")
    np.testing.assert_allclose(result.curves["train_loss"][0, 0], want_train, rtol=1e-5)
    np.testing.assert_allclose(result.curves["test_loss"][0, 0], want_test, rtol=1e-5)
    assert want_train[-1] < 0.9 * want_train[0]  # it trained: the comparison is of a moving run


def test_the_command_line_agrees_with_the_reference(tmp_path):
    data, init = write_problem(tmp_path, "learned", True, regression=True, seed=3)
    want_train, _ = reference_curves(data, init, "learned", "erf", "mse", 1.0)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "dynamics.run", "--data", str(data), "--init-from", str(init)]
    cmd += ["--heads", "2", "--steps", "40", "--lr", str(LR), "--query", "learned", "--bias"]
    cmd += ["--attention", "erf", "--log-every", "1", "--x64", "--out", str(out), "--no-figure", "--quiet"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    got = np.load(out / "curves.npz")["train_loss"][0, 0]
    np.testing.assert_allclose(got, want_train, rtol=1e-5)
    record = json.loads((out / "results.json").read_text())["config"]
    assert record["optim"]["loss"] == "mse" and record["optim"]["task"] == "regression"
    assert record["model"]["bias"] is True and record["model"]["query"] == "learned"
