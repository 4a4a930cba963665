"""Positional attention (``query="position"``): scores from a learned logit per head and position,
independent of the tokens' content, with the activations and the temperature of every query;
against an independent float64 reference, and the engine's GD against a numpy loop."""

import functools
import math

import jax
import numpy as np
import pytest
from helpers import BITWISE, fd_grad, logits_and_mse_grad

from dynamics.api import run_sweep
from dynamics.core import inits, model
from dynamics.errors import ConfigError
from tests.test_vector_targets import vector_config, vector_file

SIGMA = {
    "softmax": lambda s: np.exp(s - s.max()) / np.exp(s - s.max()).sum(),
    "sigmoid": lambda s: 1 / (1 + np.exp(-s)),
}


def ref_position_logits(params, X, norm, activation, beta):
    """Φ(X) by loops, float64: head h attends σ(β a_h) over positions, whatever the tokens."""
    U, a = params["U"], params["a"]
    H = U.shape[0]
    c = {"sqrt": 1 / math.sqrt(H), "sum": 1.0}[norm]
    out = np.zeros((X.shape[0], *U.shape[2:]))
    for i, x in enumerate(X):
        for h in range(H):
            w = SIGMA[activation](beta * a[h])
            for t in range(X.shape[1]):
                out[i] += c * w[t] * (x[t] @ U[h])
    return out


@pytest.mark.parametrize("activation,beta,o", [("softmax", 1.0, 1), ("sigmoid", 0.7, 3)])
def test_position_model_and_gradient_match_reference(x64, activation, beta, o):
    rng = np.random.default_rng(5)
    H, T, d, n = 2, 4, 3, 5
    U = rng.normal(size=(H, d) if o == 1 else (H, d, o))
    params = {"U": U, "a": rng.normal(size=(H, T))}
    X = rng.normal(size=(n, T, d))
    y = rng.normal(size=(n,) if o == 1 else (n, o))
    norm = "sqrt" if o == 1 else "sum"

    def ref_objective(p):
        return float(np.mean((ref_position_logits(p, X, norm, activation, beta) - y) ** 2))

    phi, (_, got) = logits_and_mse_grad(
        params, X, y, query="position", norm=norm, activation=activation, beta=beta
    )
    want = ref_position_logits(params, X, norm, activation, beta)
    np.testing.assert_allclose(np.asarray(phi), want, rtol=1e-12, atol=1e-12)
    fd = fd_grad(ref_objective, params)
    for name in params:
        np.testing.assert_allclose(np.asarray(got[name]), fd[name], rtol=1e-6, atol=1e-8, err_msg=name)


_position_attention = jax.jit(
    functools.partial(model.attention, query="position", activation="softmax", beta=2.0)
)
_softmax_2a = jax.jit(lambda a: jax.nn.softmax(2.0 * a, axis=-1))


def test_scores_ignore_the_tokens_content():
    """Exact: the scores are a_h whatever X holds (two unrelated X give the same attention)."""
    # init_params' arrays as shapes and dtypes, then drawn by numpy (op by op, JAX's draws
    # compiled some 15 programs, the Gaussian samplers of a second each; test_api_misuse runs
    # them); the attention and jax.nn.softmax each one compiled program
    init = jax.eval_shape(
        lambda: inits.init_params(jax.random.PRNGKey(1), 2, 3, init="normal", query="position", tokens=4)
    )
    assert init["a"].shape == (2, 4) and init["U"].shape == (2, 3)
    rng = np.random.default_rng(1)
    p = {k: rng.normal(size=v.shape).astype(v.dtype) for k, v in init.items()}
    X1, X2 = np.random.default_rng(2).normal(size=(2, 5, 4, 3)).astype(np.float32)
    # a GPU may fuse two programs apart (the bit-for-bit comparison): there op by op as before
    attention, softmax_2a = (
        (_position_attention, _softmax_2a)
        if BITWISE
        else (_position_attention.__wrapped__, _softmax_2a.__wrapped__)
    )
    A1, A2 = (attention(p, X) for X in (X1, X2))
    assert np.array_equal(np.asarray(A1), np.asarray(A2))
    assert np.array_equal(np.asarray(A1)[0], np.asarray(softmax_2a(p["a"])))
    assert inits.param_count(2, 3, query="position", tokens=4) == 2 * 3 + 2 * 4
    with pytest.raises(ValueError, match="query='position' needs tokens=T"):
        inits.init_params(None, 2, 3, query="position")
    with pytest.raises(ValueError, match="has 4 positions; X has T=5"):
        model.attention(p, np.zeros((1, 5, 3), np.float32), "position")


def numpy_position_gd(X, y, steps, lr, log):
    """Full-batch GD from θ = 0 of one head with position logits a and U (d, o), float64."""
    n, T, d = X.shape
    U, a, out = np.zeros((d, y.shape[1])), np.zeros(T), []
    for t in range(steps + 1):
        w = np.exp(a - a.max())
        w /= w.sum()
        xbar = np.einsum("t,ntd->nd", w, X)
        r = xbar @ U - y
        if t in log:
            out.append(np.mean(r**2))
        g = 2 * r / r.size
        v = np.einsum("ntd,do,no->t", X, U, g)  # ∂L/∂w_t
        U, a = U - lr * xbar.T @ g, a - lr * w * (v - w @ v)
    return np.array(out)


def test_engine_gd_matches_a_numpy_loop(tmp_path):
    path = vector_file(tmp_path)
    result = run_sweep(vector_config(path, trials=1, heads=(1,), query="position"), progress=False)
    data = np.load(path)
    want = numpy_position_gd(
        data["X_train"].astype(float), data["y_train"].astype(float), 12, 0.2, result.steps
    )
    np.testing.assert_allclose(result.curves["train_loss"][0, 0], want, rtol=2e-5)
    assert np.all(np.isnan(result.curves["head_uk_cos"]))  # a_h is not a token direction


@pytest.mark.parametrize("knobs,match", [(dict(key_query="factored"), "a logit per position")])
def test_position_refusals(tmp_path, knobs, match):
    with pytest.raises(ConfigError, match=match):
        run_sweep(
            vector_config(vector_file(tmp_path), query="position", init="normal", **knobs), progress=False
        )
