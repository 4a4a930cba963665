"""Vector targets y ∈ R^o with a matrix readout U_h ∈ R^{d×o}: the model, the mse (mean over
examples and outputs, no ½) and its gradient against an independent float64 reference written with
loops; the engine's GD run against a float64 numpy loop; the fast path against the full path; and
the refusals."""

import dataclasses
import functools
import math

import jax
import numpy as np
import pytest
from helpers import fd_grad, logits_and_mse_grad

from dynamics.api import run_sweep
from dynamics.config.schema import DataConfig
from dynamics.core import inits, model
from dynamics.errors import ConfigError
from tests.helpers import small


def ref_vector_logits(params: dict, X: np.ndarray, query: str, norm: str) -> np.ndarray:
    """Φ(X) ∈ R^o by loops over examples, heads, queries and tokens, float64: U (H, d, o)."""
    U, W = params["U"], params["W"]
    H, T, o = U.shape[0], X.shape[1], U.shape[2]
    c = {"sqrt": 1 / math.sqrt(H), "mean": 1 / H, "sum": 1.0}[norm]
    out = np.zeros((X.shape[0], o))
    for i, x in enumerate(X):
        for h in range(H):
            rows = {"first": [0], "last": [T - 1], "all": range(T)}[query]
            for s in rows:
                scores = np.array([x[t] @ W[h] @ x[s] for t in range(T)])
                a = np.exp(scores - scores.max())
                a /= a.sum()
                for t in range(T):
                    out[i] += c * a[t] * (x[t] @ U[h]) / len(rows)
    return out


def vector_params(rng, H=2, d=4, o=3) -> dict:
    return {"U": rng.normal(size=(H, d, o)), "W": rng.normal(size=(H, d, d)) / d}


@pytest.mark.slow_cases("last-mean")
@pytest.mark.parametrize("query,norm", [("first", "sqrt"), ("last", "mean"), ("all", "sum")])
def test_vector_model_loss_and_gradient_match_reference(x64, query, norm):
    rng = np.random.default_rng(3)
    params = vector_params(rng)
    X, y = rng.normal(size=(5, 3, 4)), rng.normal(size=(5, 3))

    def ref_objective(p):  # mse: the mean over examples and outputs, without ½
        return float(np.mean((ref_vector_logits(p, X, query, norm) - y) ** 2))

    phi, (loss, got) = logits_and_mse_grad(params, X, y, query=query, norm=norm)
    np.testing.assert_allclose(
        np.asarray(phi), ref_vector_logits(params, X, query, norm), rtol=1e-12, atol=1e-12
    )
    assert np.isclose(float(loss), ref_objective(params), rtol=1e-12)
    want = fd_grad(ref_objective, params)
    for name in params:
        np.testing.assert_allclose(np.asarray(got[name]), want[name], rtol=1e-6, atol=1e-8, err_msg=name)


_logits = jax.jit(functools.partial(model.logits, query="first", norm="sqrt"))


def test_each_output_is_the_scalar_model_of_its_column(x64):
    """Output j of the matrix readout is the scalar model with U_h = U[h, :, j] (same attention)."""
    rng = np.random.default_rng(4)
    params = vector_params(rng, H=3)
    X = rng.normal(size=(6, 5, 4))
    phi = np.asarray(_logits(params, X))
    assert phi.shape == (6, 3)
    for j in range(3):  # one compiled program for the three columns (op by op, some 24 programs)
        scalar = _logits({"U": params["U"][..., j], "W": params["W"]}, X)
        np.testing.assert_allclose(phi[:, j], np.asarray(scalar), rtol=1e-13, atol=1e-14)


def test_init_and_param_count_of_a_matrix_readout():
    # the shapes of the arrays init_params returns, without drawing them (op by op, the draws
    # compiled some 15 programs, two of them Gaussian samplers of seconds each; the eager draws of
    # a random init are run in test_api_misuse)
    p = jax.eval_shape(lambda: inits.init_params(jax.random.PRNGKey(0), 2, 4, init="normal", outputs=3))
    assert p["U"].shape == (2, 4, 3) and p["W"].shape == (2, 4, 4)
    assert inits.param_count(2, 4, outputs=3) == 2 * 4 * 3 + 2 * 16
    assert inits.init_params(None, 2, 4, outputs=1)["U"].shape == (2, 4)  # o = 1: today's shapes
    with pytest.raises(ValueError, match="init='sphere' has no matrix readout"):
        inits.init_params(jax.random.PRNGKey(0), 2, 4, init="sphere", query="learned", outputs=3)
    with pytest.raises(ValueError, match="bias=True is one scalar"):
        inits.init_params(None, 2, 4, bias=True, outputs=3)


def vector_file(folder, o=3, T=5, d=8) -> str:
    """A small .npz of vector targets y = x_Tᵀ M (24 training, 30 test examples)."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(54, T, d)).astype(np.float32)
    y = (X[:, -1] @ rng.normal(size=(d, o)) / math.sqrt(d)).astype(np.float32)
    path = f"{folder}/vector.npz"
    np.savez(path, X_train=X[:24], y_train=y[:24], X_test=X[24:], y_test=y[24:])
    return path


def vector_config(path, **knobs):
    cfg = small(loss="mse", lr=0.2, **knobs)
    return dataclasses.replace(cfg, data=DataConfig(model="npz", path=path))


def numpy_gd(X, y, steps, lr, H, log):
    """Full-batch GD of the H-head vector model from θ = 0 (query first, c_H = 1/√H, heads equal),
    float64, the analytic gradient of one head: the train loss at the logged steps."""
    n, T, d = X.shape
    o = y.shape[1]
    U, W = np.zeros((d, o)), np.zeros((d, d))
    c, out = 1 / math.sqrt(H), []
    for t in range(steps + 1):
        s = np.einsum("ntd,de,ne->nt", X, W, X[:, 0])
        a = np.exp(s - s.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)  # (n, T)
        xbar = np.einsum("nt,ntd->nd", a, X)
        phi = c * H * xbar @ U  # (n, o): H equal heads
        r = phi - y
        if t in log:
            out.append(np.mean(r**2))
        g = 2 * r / r.size  # dL/dΦ
        gU = c * xbar.T @ g  # one head's gradient
        v = X @ U  # (n, T, o): U_hᵀ x_t
        ds = a * np.einsum("nto,no->nt", v - (a[:, :, None] * v).sum(1, keepdims=True), c * g)
        gW = np.einsum("nt,ntd,ne->de", ds, X, X[:, 0])
        U, W = U - lr * gU, W - lr * gW
    return np.array(out)


def test_engine_gd_matches_a_numpy_loop(tmp_path):
    path = vector_file(tmp_path)
    result = run_sweep(vector_config(path, trials=1), progress=False)
    data = np.load(path)
    for i, H in enumerate(result.heads):
        want = numpy_gd(
            data["X_train"].astype(np.float64), data["y_train"].astype(np.float64), 12, 0.2, H, result.steps
        )
        np.testing.assert_allclose(result.curves["train_loss"][i, 0], want, rtol=2e-5)


@pytest.mark.stress  # two compiled programs: `make stress` and CI run it
def test_fast_path_equals_the_full_path(tmp_path):
    """Zero init: one stored head of weight H is the H-head model, for a matrix readout too."""
    path = vector_file(tmp_path)
    fast = run_sweep(vector_config(path, trials=1, heads=(3,)), progress=False)
    full = run_sweep(vector_config(path, trials=1, heads=(3,), fast_path=False), progress=False)
    for name in ("train_loss", "test_loss", "u_norm", "w_norm"):
        np.testing.assert_allclose(fast.curves[name], full.curves[name], rtol=1e-5, err_msg=name)


@pytest.mark.parametrize(
    "knobs,match",
    [
        (dict(init="normal", bias=True), "no bias"),
        (dict(loss="square"), "classification loss"),
    ],
)
def test_vector_targets_refusals(tmp_path, knobs, match):
    cfg = vector_config(vector_file(tmp_path))
    with pytest.raises(ConfigError, match=match):
        run_sweep(cfg, progress=False, **knobs)


def test_npz_vector_targets_shapes(tmp_path):
    from datamodels import DataError, load_npz

    u = load_npz(vector_file(tmp_path))
    assert u.task == "regression" and u.y_train.shape == (24, 3)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4, 2, 3))
    np.savez(tmp_path / "col.npz", X_train=X, y_train=np.ones((4, 1)), X_test=X, y_test=np.ones((4, 1)))
    with pytest.raises(DataError, match=r"must be 1-D \(n,\), \(n, o\) vector targets"):
        load_npz(tmp_path / "col.npz")
    np.savez(tmp_path / "mix.npz", X_train=X, y_train=np.ones((4, 2)), X_test=X, y_test=np.ones((4, 3)))
    with pytest.raises(DataError, match="y_test"):
        load_npz(tmp_path / "mix.npz")


def test_npz_sequence_targets_are_one_vector_per_token_flattened_token_by_token(tmp_path):
    """y (n, T, d) beside X (n, T, d) is read as the (n, T·d) targets a data model's sequence
    targets are; a sequence run on it gives the numbers of the same file written flattened."""
    from datamodels import DataError, load_npz
    from datamodels.npz import read_header

    rng = np.random.default_rng(1)
    X, Xt = rng.normal(size=(12, 3, 4)), rng.normal(size=(6, 3, 4))
    Y, Yt = X[:, ::-1] * 0.5, Xt[:, ::-1] * 0.5  # each token's target: the mirrored token
    np.savez(tmp_path / "seq.npz", X_train=X, y_train=Y, X_test=Xt, y_test=Yt)
    flat = dict(X_train=X, y_train=Y.reshape(12, -1), X_test=Xt, y_test=Yt.reshape(6, -1))
    np.savez(tmp_path / "flat.npz", **flat)
    u = load_npz(tmp_path / "seq.npz")
    assert u.y_train.shape == (12, 12) and read_header(tmp_path / "seq.npz").outputs == 12
    np.testing.assert_array_equal(u.y_train[3], np.float32(Y[3]).ravel())  # token 0's d, then token 1's
    knobs = dict(output="sequence", query="all", key_query="tied", head_size=2, init="normal", loss="mse")
    knobs |= dict(heads=[1, 2], steps=6, trials=1, log_every=2)
    seq = run_sweep(data=str(tmp_path / "seq.npz"), progress=False, **knobs)
    same = run_sweep(data=str(tmp_path / "flat.npz"), progress=False, **knobs)
    for k, v in same.curves.items():
        np.testing.assert_array_equal(seq.curves[k], v, err_msg=k)
    np.savez(tmp_path / "bad.npz", X_train=X, y_train=Y[:, :2], X_test=Xt, y_test=Yt)  # (n, 2, 4): not T
    for path in (tmp_path / "bad.npz",):
        with pytest.raises(DataError, match=r"y_train': .*\(n, T, d\) = \(n, 3, 4\) sequence targets"):
            read_header(path)
        with pytest.raises(DataError, match=r"got shape \(12, 2, 4\)"):
            load_npz(path)
