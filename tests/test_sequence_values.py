"""Learned values for sequence outputs (``model.readout='value'``): f(X)_s = c_H Σ_h Σ_t σ_st V_hᵀ x_t
with V_h ∈ R^{d×d} per head. The forward and the gradient against float64 numpy (the gradient by
finite differences), θ = 0 not a saddle, the engine against a plain float64 GD loop, every optimiser,
the fast path, the grid axis and the snapshots, and what is refused."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_same_numbers, fd_grad, replace

import dynamics
from dynamics import parts, with_overrides
from dynamics.config.schema import ConfigError, validate
from dynamics.core import inits, model
from dynamics.sweeps.sweep import prepare_data, run_sweep


def np_softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def np_sequence(p, X, beta=1.0):
    """f(X) (n, T·d), float64, one example and one head at a time: A_st = softmax_t(β x_tᵀ W_h x_s),
    f(X)_s = (1/√H) Σ_h Σ_t A_st V_hᵀ x_t (the value of token t: row t of X V_h)."""
    W = p["W"] if "W" in p else np.einsum("hda,hea->hde", p["Q"], p["Q"])  # tied: Q_h Q_hᵀ
    H, (n, T, d) = len(W), X.shape
    out = np.zeros((n, T, d))
    for i in range(n):
        for h in range(H):
            scores = X[i] @ W[h].T @ X[i].T  # [s, t] = x_tᵀ W_h x_s
            out[i] += np_softmax(beta * scores) @ (X[i] @ p["V"][h])  # (s, d)
    return out.reshape(n, T * d) / np.sqrt(H)


LAYOUTS = [dict(key_query="full"), dict(key_query="tied", head_size=2)]


@pytest.mark.parametrize("layout", LAYOUTS, ids=["full", "tied"])
def test_the_forward_and_gradient_are_the_float64_references(layout):
    rs = np.random.default_rng(0)
    X, y = rs.normal(size=(3, 4, 3)), rs.normal(size=(3, 12))
    p = inits.init_params(jax.random.PRNGKey(1), 2, 3, init="normal", query="all", readout="value", **layout)
    assert {k: v.shape for k, v in p.items()}["V"] == (2, 3, 3) and "U" not in p and "O" not in p
    p = {k: np.asarray(v, np.float64) for k, v in p.items()}
    with jax.enable_x64(True):

        @jax.jit  # one program, not op by op
        def value_and_grad(q):
            f = model.logits(q, X, query="all", beta=0.7)
            return f, jax.grad(lambda r: jnp.mean((model.logits(r, X, query="all", beta=0.7) - y) ** 2))(q)

        f, grad = value_and_grad({k: jnp.asarray(v) for k, v in p.items()})
    np.testing.assert_allclose(f, np_sequence(p, X, 0.7), rtol=1e-12, atol=1e-13)
    want = fd_grad(lambda q: np.mean((np_sequence(q, X, 0.7) - y) ** 2), p)
    for name in p:
        np.testing.assert_allclose(grad[name], want[name], rtol=1e-6, atol=1e-9, err_msg=name)


def test_theta_zero_is_no_saddle_with_a_learned_value():
    """At W = V = 0 the softmax weighs every token 1/T, so V gets a gradient; W gets one once V ≠ 0.
    Where σ(0) = 0 (linear, erf) neither moves, and the zero init is refused as before."""
    rs = np.random.default_rng(2)
    X, y = rs.normal(size=(5, 3, 4)).astype(np.float32), rs.normal(size=(5, 12)).astype(np.float32)
    zero = inits.init_params(None, 2, 4, query="all", readout="value")
    assert all(np.all(v == 0) for v in zero.values())

    @functools.partial(jax.jit, static_argnames="activation")  # one program, not op by op
    def grad(p, activation="softmax"):
        def objective(q):
            return jnp.mean((model.logits(q, X, query="all", activation=activation) - y) ** 2)

        return jax.grad(objective)(p)

    g = grad(zero)
    assert np.abs(g["V"]).max() > 1e-3 and np.all(g["W"] == 0)
    stepped = {**zero, "V": zero["V"] - 0.1 * g["V"]}
    assert np.abs(grad(stepped)["W"]).max() > 1e-6  # the attention learns from the second step
    g = grad(zero, "erf")
    assert np.all(g["V"] == 0) and np.all(g["W"] == 0)  # σ(0) = 0: a saddle
    with pytest.raises(ConfigError, match=r"model.attention='erf' needs model.init='normal'"):
        validate(possem(key_query="full", head_size=None, attention="erf"))


D, STEPS, LR, DECAY = 5, 6, 0.1, 0.01


def possem(**knobs):
    base = dict(
        data_model="positional-semantic", width=D, n_train=7, n_test=5, key_query="tied", head_size=1,
        query="all", output="sequence", readout="value", temperature=1.0 / D, loss="mse", heads=[2],
        trials=1, lr=LR, steps=STEPS, reduction="sum", weight_decay=DECAY, log_every=STEPS,
    )  # fmt: skip
    return with_overrides(None, **{k: v for k, v in {**base, **knobs}.items() if v is not None})


@pytest.mark.parametrize(
    "knobs,message",
    [
        (
            dict(
                data_model="dm1",
                output=None,
                query=None,
                loss=None,
                reduction=None,
                temperature=None,
                key_query=None,
                head_size=None,
                width=None,
                weight_decay=None,
                n_train=None,
                n_test=None,
            ),
            r"model.readout='value' gives each token its own output through V_h; the pooled Φ .*: "
            r"model.output='pooled' does not take it",
        ),  # fmt: skip
        (
            dict(readout="factored", init="normal", key_query="full", head_size=None),
            r"model.readout='factored' reads the attended token through V_h and O_h; .*"
            r"model.output='sequence' does not take it",
        ),
        (dict(head_metrics="on"), r"model.output='sequence' .* does not take sweep.head_metrics='on'"),
        (dict(bias=True), r"does not take model.bias=True"),
    ],
    ids=["value-pooled", "factored-sequence", "head-metrics", "bias"],
)
def test_a_readout_its_output_does_not_take_is_refused_in_one_line(knobs, message):
    with pytest.raises(ConfigError, match=message) as err:
        validate(possem(**knobs))
    assert "\n" not in str(err.value)


def test_the_value_is_drawn_and_hashed_only_where_asked():
    value, identity = validate(possem()), validate(possem(readout="direct"))
    assert value.hash() != identity.hash()
    assert identity.hash() == validate(possem(readout=None)).hash()  # the default left out of the hash
    assert parts.rules.drawn_params(value) == {"Q", "V"} and parts.rules.drawn_params(identity) == {"Q"}
    # the init draws V beside the world's Q (so it is not idle), and zero init is allowed there
    assert validate(possem(init="normal")).model.init == "normal"
    with pytest.raises(ConfigError, match=r"model.init='normal' was given but has no effect"):
        validate(possem(readout="direct", init="normal"))


def np_objective(q, V, X, y, decay=DECAY):
    """Σ_i ‖y_i − f(X_i)‖²/(T·d) + λ/2 (‖Q‖² + ‖V‖²) of the tied rank-1 heads (q (H, d)), float64."""
    f = np_sequence({"Q": q[:, :, None], "V": V}, X, beta=1.0 / D)
    return np.sum((f - y) ** 2) / y.shape[1] + 0.5 * decay * (np.sum(q * q) + np.sum(V * V))


@pytest.mark.slow  # one engine program compiled (~10 s here), then a finite-difference loop
def test_the_engine_trains_as_a_float64_gd_loop_and_saves_the_value():
    r = run_sweep(possem(init="normal", save_params=True), progress=False)
    assert set(r.params) == {"Q", "V"}  # --save-params exports V under its name
    data, _, _ = prepare_data(validate(possem(init="normal")))
    X, y = (np.asarray(a, np.float64)[0] for a in (data.X_train, data.y_train))
    q, V = (np.asarray(r.params[k][0, 0, 0], np.float64) for k in ("Q", "V"))  # θ(0): step 0's snapshot
    q = q[:, :, 0]  # (H, d)
    np.testing.assert_array_equal(q, np.broadcast_to(np.asarray(data.world_init["Q"][0])[:, 0], q.shape))
    assert np.abs(V).max() > 0.1  # drawn N(0, 1/d), not the world's
    for _ in range(STEPS):  # plain GD on the hand objective, its gradient by central differences
        g = fd_grad(lambda p: np_objective(p["q"], p["V"], X, y), {"q": q, "V": V})
        q, V = q - LR * g["q"], V - LR * g["V"]
    np.testing.assert_allclose(r.params["V"][0, 0, -1], V, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r.params["Q"][0, 0, -1][:, :, 0], q, rtol=1e-4, atol=1e-5)
    mean = np_objective(q, V, X, y, decay=0.0) / len(X)  # the logged train loss: the mean
    np.testing.assert_allclose(r.curves["train_loss"][0, 0, -1], mean, rtol=1e-4)
    assert r.curves["train_loss"][0, 0, -1] < 0.9 * r.curves["train_loss"][0, 0, 0]  # it trained


@pytest.mark.slow  # one program per optimiser
@pytest.mark.parametrize("optimizer", parts.OPTIMIZERS.names)
def test_every_optimiser_trains_the_value(optimizer):
    knobs = dict(
        optimizer=optimizer, save_params=True, init="normal", reduction=None, weight_decay=None, n_train=8
    )
    if parts.OPTIMIZERS[optimizer].minibatch:
        knobs["batch_size"] = 4
    r = run_sweep(possem(**knobs), progress=False)
    V = r.params["V"][0, 0]  # (L, H, d, d)
    assert np.isfinite(r.curves["train_loss"]).all()
    assert np.abs(V[-1] - V[0]).max() > 1e-4, optimizer  # V moved
    assert r.curves["train_loss"][0, 0, -1] < r.curves["train_loss"][0, 0, 0], optimizer


FULL = dict(key_query="full", head_size=None, heads=[1, 3], save_params=True)


@pytest.mark.slow  # four programs
def test_the_fast_path_and_the_grid_axis_give_the_runs_own_numbers():
    """Zero init with a free W (heads equal: the fast path) equals the full path; a grid over the
    readout equals each readout run alone, bit for bit."""
    assert parts.uses_fast_path(validate(possem(**FULL)))
    fast = run_sweep(possem(**FULL), progress=False)
    full = run_sweep(replace(possem(**FULL), fast_path=False), progress=False)
    np.testing.assert_allclose(fast.curves["train_loss"], full.curves["train_loss"], rtol=1e-5)
    assert np.abs(full.params["V"][1, 0, -1]).max() > 1e-3  # the values learned
    grid = dynamics.run_grid(possem(), progress=False, readout=["direct", "value"])
    for k, point_cfg in enumerate(grid.grid.points):
        alone = run_sweep(point_cfg, progress=False)
        for m, v in alone.curves.items():
            assert_same_numbers(grid.point(k).curves[m], v, err_msg=f"readout={point_cfg.model.readout}: {m}")
