"""Sequence outputs (``model.output='sequence'``: every token queries and has its own output,
value identity, no readout U) and the positional-semantic data model, each against float64 numpy:
the value-identity readout, the data model's targets and starts, and the engine's GD with the tied
key-query, the summed objective and the coupled decay (the paper's training) against a float64
loop whose gradient is itself checked against finite differences."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from helpers import fd_grad

from dynamics import with_overrides
from dynamics.config.schema import ConfigError, validate
from dynamics.core import sequence
from dynamics.sweeps.sweep import prepare_data, run_sweep
from dynamics.sweeps.trials import trial_data


def np_softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_the_value_identity_readout_is_each_querys_weighted_tokens():
    rs = np.random.default_rng(0)
    X, A = rs.normal(size=(3, 4, 5)), np_softmax(rs.normal(size=(3, 2, 4, 4)))
    with jax.enable_x64(True):
        every = np.asarray(sequence.identity_values(A, X))
        one = np.asarray(sequence.identity_values(A[:, :, 0], X))
    want = np.stack([[A[i, h] @ X[i] for h in range(2)] for i in range(3)])  # (n, h, s, d)
    np.testing.assert_allclose(every, want.reshape(3, 2, 20), rtol=1e-13)
    np.testing.assert_allclose(one, want[:, :, 0], rtol=1e-13)


D, STEPS, LR, DECAY = 6, 8, 0.15, 0.01


def possem(**knobs):
    base = dict(
        data_model="positional-semantic", width=D, n_train=9, n_test=7, key_query="tied", head_size=1,
        query="all", output="sequence", temperature=1.0 / D, loss="mse", heads=[1], trials=2,
        lr=LR, steps=STEPS, reduction="sum", weight_decay=DECAY, log_every=STEPS,
    )  # fmt: skip
    return with_overrides(None, **{**base, **knobs})


def np_targets(X, teacher, omega=0.3, mixing=((0.6, 0.4), (0.4, 0.6))):
    """The teacher of the semantic parts Z = X − P, float64: (n, T·d)."""
    d = X.shape[-1]
    P = np.stack([np.ones(d), -np.ones(d)]) / np.sqrt(d)
    Z = X - P[None]
    h = Z @ teacher
    y = (1 - omega) * np_softmax(h[:, :, None] * h[:, None, :] / d) @ Z + omega * np.asarray(mixing) @ Z
    return y.reshape(len(X), -1)


@pytest.mark.slow_cases("positional")
@pytest.mark.parametrize("start", ["semantic", "positional"])
def test_the_data_models_targets_codes_and_starts_are_the_papers(start):
    cfg = validate(possem(start=start))
    data, _, _ = prepare_data(cfg)
    one = trial_data(cfg, 1)
    X = np.asarray(one.X_train, np.float64)
    teacher = np.asarray(one.world.latents["teacher"], np.float64)
    np.testing.assert_allclose(
        np.asarray(one.y_train, np.float64), np_targets(X, teacher), rtol=2e-5, atol=2e-6
    )
    Z = X - np.asarray(one.world.latents["codes"])[None]
    assert abs(Z.std() - 0.5) < 0.1  # σ = 0.5 semantic noise around the codes ±1_d/√d
    q0 = np.asarray(data.world_init["Q"][1])[:, 0]
    want = teacher if start == "semantic" else np.ones(D) / np.sqrt(D)
    np.testing.assert_allclose(q0, want, rtol=1e-6)


def np_objective(q, X, y, decay=DECAY):
    """Σ_i ‖y_i − f(X_i)‖²/(T·d) + λ/2‖q‖², f(X) = softmax((Xq)(Xq)ᵀ/d) X, and its gradient by hand."""
    n, T, d = X.shape
    h = X @ q  # (n, T)
    A = np_softmax(h[:, :, None] * h[:, None, :] / d)
    r = A @ X - y.reshape(n, T, d)  # (n, s, d)
    loss = np.sum(r * r) / (T * d) + 0.5 * decay * q @ q
    dA = np.einsum("nsd,ntd->nst", 2 * r / (T * d), X)  # dL/dA_st
    ds = A * (dA - np.sum(A * dA, axis=-1, keepdims=True)) / d  # dL/d(h_s h_t)
    dh = np.einsum("nst,nt->ns", ds, h) + np.einsum("nst,ns->nt", ds, h)
    return loss, np.einsum("ns,nsd->d", dh, X) + decay * q


def test_the_hand_gradient_is_the_finite_differences_one():
    rs = np.random.default_rng(3)
    X, y, q = rs.normal(size=(4, 2, D)), rs.normal(size=(4, 2 * D)), rs.normal(size=D)
    want = fd_grad(lambda p: np_objective(p["q"], X, y)[0], {"q": q})["q"]
    np.testing.assert_allclose(np_objective(q, X, y)[1], want, rtol=1e-6, atol=1e-9)


@pytest.mark.slow  # an x64 engine program: ~10 s to compile here
def test_the_engine_trains_the_papers_objective_as_a_float64_gd_loop():
    cfg = possem(start="positional", save_params=True)
    with jax.enable_x64(True):
        r = run_sweep(cfg, progress=False)
    data, _, _ = prepare_data(validate(cfg))
    for trial in range(2):
        X, y = (np.asarray(a, np.float64)[trial] for a in (data.X_train, data.y_train))
        q = np.asarray(data.world_init["Q"][trial], np.float64)[:, 0]
        for _ in range(STEPS):
            q = q - LR * np_objective(q, X, y)[1]
        got = r.params["Q"][0, trial, -1, 0, :, 0]  # the last snapshot of Q (d,)
        np.testing.assert_allclose(
            got, q, rtol=1e-5, atol=1e-6, err_msg=f"trial {trial}"
        )  # float32 snapshots
        mean = (np_objective(q, X, y, decay=0.0)[0]) / len(X)  # the logged train loss: the mean
        np.testing.assert_allclose(r.curves["train_loss"][0, trial, -1], mean, rtol=1e-9)
    assert np.all(np.isnan(r.curves["u_norm"]))  # no readout U: its norm is NaN, not a number


@pytest.mark.parametrize(
    "given,message",
    [
        (dict(query="first"), r"model.output='sequence' .* does not take model.query='first'"),
        (dict(head_metrics="on"), r"does not take sweep.head_metrics='on'"),
        (
            dict(data_model="single-location", key_query="factored", temperature=1.0, init="normal"),
            r"model.output='sequence' gives every token its own output, T·d = 60 numbers .* targets of o=1",
        ),
        (dict(width=6, tokens=3), r"data.T=3: positional-semantic has T = 2"),
        (dict(mixing=(1.0, 0.0)), r"data.mixing has 2 numbers; the mixing matrix A is T×T = 4"),
        (dict(start="random"), r"data.start='random'"),
        # no readout parameters (value identity): a readout group's knob would change nothing
        (dict(readout_lr_factor=0.0), r"readout_lr_factor=0.0 was given but has no effect: .* no readout"),
        (dict(readout_weight_decay=0.1), r"readout_weight_decay=0.1 was given but has no effect"),
        (dict(readout_steps="0:2"), r"readout_steps=\(0, 2\) was given but has no effect"),
        # the start is a tied Q(0): a free W never read it (it ran as if the start had been set)
        (
            dict(key_query="full", head_size="split", start="positional"),
            r"data.start='positional' was given but has no effect: .* has no tied Q",
        ),
    ],
)
def test_a_sequence_setting_that_cannot_run_is_refused_in_one_line(given, message):
    with pytest.raises(ConfigError, match=message) as err:
        run_sweep(possem(**given), progress=False)
    assert "\n" not in str(err.value)
