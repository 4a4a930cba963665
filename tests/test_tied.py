"""The tied key-query W_h = Q_h Q_hᵀ (``model.key_query='tied'``, rank r = ``model.head_size``):
Φ and its gradient against float64 numpy (an analytic gradient, itself checked against finite
differences), the engine's GD against a float64 numpy loop (with the coupled weight decay and the
summed objective the positional-semantic setting trains with), its shapes, and its init rules
(θ = 0 is a saddle: zero init refused)."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from helpers import fd_grad, logits_and_mse_grad

from dynamics import parts, with_overrides
from dynamics.config.schema import (
    Config,
    ConfigError,
    DataConfig,
    ModelConfig,
    OptimConfig,
    SweepConfig,
    validate,
)
from dynamics.core import inits, rng
from dynamics.core import model as mdl
from dynamics.sweeps.sweep import prepare_data, run_sweep


def np_scores(Q, X, query):
    """x_tᵀ Q_h Q_hᵀ x_q: (n, h, t) for query "first", (n, h, s, t) for "all"."""
    XQ = np.einsum("ntd,hda->nhta", X, Q)  # (n, h, t, a)
    if query == "first":
        return np.einsum("nhta,nha->nht", XQ, XQ[:, :, 0])
    return np.einsum("nhta,nhsa->nhst", XQ, XQ)


def np_softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def np_phi(p, X, query="first"):
    """Φ = (1/√H) Σ_h U_hᵀ Xᵀ softmax(X Q_h Q_hᵀ x_q) (query "all": mean over the T queries)."""
    A = np_softmax(np_scores(p["Q"], X, query))
    v = np.einsum("ntd,hd->nht", X, p["U"])  # U_hᵀ x_t
    H = p["U"].shape[0]
    if query == "first":
        return np.einsum("nht,nht->n", A, v) / np.sqrt(H)
    return np.einsum("nhst,nht->n", A, v) / (np.sqrt(H) * X.shape[1])


def np_logistic_grad(p, X, y, decay=0.0, summed=False):
    """The loss (1/n or 1)·Σ_i log(1 + e^{-y_i Φ_i}) + λ/2‖θ‖² and its gradient, by hand (query first)."""
    n, H = len(y), p["U"].shape[0]
    A = np_softmax(np_scores(p["Q"], X, "first"))  # (n, h, t)
    v = np.einsum("ntd,hd->nht", X, p["U"])
    phi = np.einsum("nht,nht->n", A, v) / np.sqrt(H)
    scale = 1.0 if summed else 1.0 / n
    loss = scale * np.sum(np.logaddexp(0.0, -y * phi))
    delta = scale * (-y / (1.0 + np.exp(y * phi))) / np.sqrt(H)  # dL/dΦ_i · c_H
    gU = np.einsum("n,nht,ntd->hd", delta, A, X)
    ds = delta[:, None, None] * A * (v - np.sum(A * v, axis=-1, keepdims=True))  # dL/ds (n, h, t)
    G = np.einsum("nht,ntd,ne->hde", ds, X, X[:, 0])  # dL/dW_h
    gQ = np.einsum("hde,hea->hda", G + np.swapaxes(G, 1, 2), p["Q"])  # W = Q Qᵀ
    loss += 0.5 * decay * sum(np.sum(a * a) for a in p.values())
    return loss, {"U": gU + decay * p["U"], "Q": gQ + decay * p["Q"]}


def _random(H=2, d=5, r=2, n=6, T=3, seed=0):
    rs = np.random.default_rng(seed)
    p = {"U": rs.normal(size=(H, d)), "Q": rs.normal(size=(H, d, r)) / np.sqrt(d)}
    return p, rs.normal(size=(n, T, d)), rs.choice([-1.0, 1.0], size=n)


@pytest.mark.parametrize("query", ["first", "all"])
def test_phi_and_its_gradient_match_float64_numpy(query):
    p, X, y = _random()
    with jax.enable_x64(True):
        phi, (_, grads) = logits_and_mse_grad(p, X, y, query=query, norm="sqrt")
        W = np.asarray(mdl.key_query_matrix(p))
    np.testing.assert_allclose(W, np.einsum("hda,hea->hde", p["Q"], p["Q"]), rtol=1e-13)
    np.testing.assert_allclose(np.asarray(phi), np_phi(p, X, query), rtol=1e-12)
    want = fd_grad(lambda q: np.mean((np_phi(q, X, query) - y) ** 2), p)
    assert set(grads) == {"U", "Q"}
    for k in want:
        np.testing.assert_allclose(np.asarray(grads[k]), want[k], rtol=1e-6, atol=1e-8, err_msg=k)


@pytest.mark.parametrize("query", ["first", "last", "all", "outside"])
def test_tied_scores_through_the_factor_are_the_queries_own_scores_on_w(query):
    """Tied heads score through Q_h alone, (x_t Q_h)·(x_q Q_h); each query part's own scores on the
    formed W_h = Q_h Q_hᵀ are the same numbers (float64), and its gradient in Q the same."""
    p, X, _ = _random(H=3, d=7, r=2, n=5, T=4)
    part = parts.QUERIES.get(query)
    with jax.enable_x64(True):
        via_w = lambda q: part.load()(mdl.key_query_matrix({"Q": q}), X)  # noqa: E731
        tied = mdl.attention_scores({"U": p["U"], "Q": p["Q"]}, X, query)
        np.testing.assert_allclose(np.asarray(tied), np.asarray(via_w(p["Q"])), rtol=1e-12, atol=1e-13)
        weights = np.random.default_rng(1).normal(size=tied.shape)
        g_tied = jax.grad(lambda q: jax.numpy.sum(weights * mdl.scores_tied(q, X, part)))(p["Q"])
        g_w = jax.grad(lambda q: jax.numpy.sum(weights * via_w(q)))(p["Q"])
        np.testing.assert_allclose(np.asarray(g_tied), np.asarray(g_w), rtol=1e-11, atol=1e-12)


def test_the_hand_gradient_is_the_finite_differences_one():
    p, X, y = _random(seed=1)
    _, got = np_logistic_grad(p, X, y, decay=0.3, summed=True)
    want = fd_grad(lambda q: np_logistic_grad(q, X, y, decay=0.3, summed=True)[0], p)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=1e-8, err_msg=k)


STEPS, LR, DECAY = 10, 0.05, 0.05


def tied_config(**optim) -> Config:
    return Config(
        data=DataConfig(n_train=16, n_test=8, T=4, d=6, n_irrelevant=2),
        model=ModelConfig(key_query="tied", head_size=2, init="normal"),
        optim=OptimConfig(lr=LR, steps=STEPS, **optim),
        sweep=SweepConfig(heads=(2,), trials=2, log_every=STEPS, head_metrics="off"),
    )


@functools.partial(jax.jit, static_argnums=(1, 2))
def _init(raw, H: int, d: int):
    return inits.init_params(rng.wrap(raw), H, d, init="normal", scale=1.0, key_query="tied", head_size=2)


@pytest.mark.slow  # an x64 engine program: about 14 s to compile here
def test_the_engine_makes_the_float64_gd_steps_with_decay_and_the_summed_objective():
    cfg = tied_config(weight_decay=DECAY, reduction="sum")
    with jax.enable_x64(True):
        got = run_sweep(cfg, progress=False).curves["train_loss"][0, :, -1]  # (trials,), the mean loss
    data, _, init_keys = prepare_data(validate(cfg))
    for trial in range(2):
        X, y = (np.asarray(a, np.float64)[trial] for a in (data.X_train, data.y_train))
        with jax.enable_x64(True):
            p = {k: np.asarray(v, np.float64) for k, v in _init(np.asarray(init_keys[trial]), 2, 6).items()}
        assert set(p) == {"U", "Q"} and p["Q"].shape == (2, 6, 2)
        for _ in range(STEPS):
            _, g = np_logistic_grad(p, X, y, decay=DECAY, summed=True)
            p = {k: p[k] - LR * g[k] for k in p}
        want = np.mean(np.logaddexp(0.0, -y * np_phi(p, X)))
        np.testing.assert_allclose(got[trial], want, rtol=1e-9, err_msg=f"trial {trial}")


def test_the_tied_layout_has_one_array_and_counts_it_once():
    with jax.enable_x64(True):
        p = inits.init_params(rng.seed(0), 3, 8, init="normal", key_query="tied", head_size=2)
    assert {k: v.shape for k, v in p.items()} == {"U": (3, 8), "Q": (3, 8, 2)}
    assert inits.param_count(3, 8, "tied", 2) == 3 * 8 + 3 * 8 * 2
    assert inits.param_count(3, 8, "factored", 2) == 3 * 8 + 2 * 3 * 8 * 2


@pytest.mark.parametrize(
    "given,message",
    [
        (
            dict(key_query="tied"),
            r"model.key_query='tied' needs model.init='normal': θ = 0 is a saddle point of Q Qᵀ",
        ),
        (
            dict(key_query="tied", init="normal", head_size=9, width=8),
            r"head_size=9 must be <= data.d=8: Q Qᵀ",
        ),
        (
            dict(key_query="tied", init="normal", query="learned"),
            r"model.key_query='tied' was given but has no effect",
        ),
    ],
)
def test_a_tied_setting_that_cannot_run_is_refused_in_one_line(given, message):
    with pytest.raises(ConfigError, match=message) as err:
        validate(with_overrides(None, **given))
    assert "\n" not in str(err.value)


def test_zero_tied_heads_get_no_gradient():
    """Why zero init is refused: at Q = 0 the gradient (G + Gᵀ)Q is exactly 0 whatever U."""
    p, X, y = _random(seed=2)
    p["Q"] = np.zeros_like(p["Q"])
    _, g = np_logistic_grad(p, X, y)
    assert np.all(g["Q"] == 0.0) and np.any(g["U"] != 0.0)
