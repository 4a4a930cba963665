"""icl-heads (He, Pan, Chen, Yang 2025): icl-linreg's isotropic inputs, task variance and label noise,
against float64 references computed from the same draws."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from helpers import FAST_COMPILE

from dynamics.config.schema import Config, ConfigError, DataConfig, validate
from dynamics.core.data import data_model


def _draw(n: int = 64, T: int = 6, d: int = 4, **knobs):
    """(X, y, noise floor) of one icl-linreg world and sample, as float64 numpy."""
    cfg = DataConfig(model="icl-linreg", T=T, d=d, **knobs).resolved()
    obj = data_model(cfg)

    def draw(k0, k1):
        world = obj.setup(k0, cfg)
        X, y, _ = obj.sample(world, k1, n)
        return X, y, world.noise_floor, world.latents["basis"], world.latents["eigenvalues"]

    out = jax.jit(draw, compiler_options=FAST_COMPILE)(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
    return [np.asarray(a, np.float64) for a in out]


def test_default_draws_are_unchanged_by_the_new_knobs_at_their_defaults():
    X0, y0, f0, *_ = _draw()
    X1, y1, f1, *_ = _draw(covariance="spectrum", task_variance=1.0, epsilon=0.0)
    np.testing.assert_array_equal(X0, X1)
    np.testing.assert_array_equal(y0, y1)
    assert f0 == f1 == 0.0
    assert "epsilon" not in DataConfig(model="icl-linreg").resolved().to_dict()  # old hashes kept


def test_identity_covariance_is_the_spectrum_draw_before_its_scaling():
    """x_spectrum = (z·√λ) B with z the identity draw (the same key), in float64."""
    Xs, *_, basis, lam = _draw()
    Xi, *_ = _draw(covariance="identity")
    D = basis.shape[0]
    ref = (Xi[:, :, :D] * np.sqrt(lam)) @ basis
    np.testing.assert_allclose(Xs[:, :, :D], ref, rtol=0, atol=1e-5)


def test_task_variance_scales_every_label_by_its_root_and_the_query_stays_hidden():
    Xa, ya, *_ = _draw(covariance="identity")
    Xb, yb, *_ = _draw(covariance="identity", task_variance=0.2)
    D = Xa.shape[2] - 1
    np.testing.assert_array_equal(Xa[:, :, :D], Xb[:, :, :D])
    np.testing.assert_allclose(Xb[:, :-1, D], np.sqrt(0.2) * Xa[:, :-1, D], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(yb, np.sqrt(0.2) * ya, rtol=1e-5, atol=1e-6)
    assert np.all(Xb[:, -1, D] == 0.0)  # the query's y is hidden


def test_label_noise_is_added_to_context_and_query_labels_with_its_floor():
    n = 2000
    X0, y0, *_ = _draw(n=n, covariance="identity")
    X1, y1, floor, *_ = _draw(n=n, covariance="identity", epsilon=0.5)
    X2, y2, *_ = _draw(n=n, covariance="identity", epsilon=1.0)
    D = X0.shape[2] - 1
    g_ctx = (X1[:, :-1, D] - X0[:, :-1, D]) / 0.5
    g_q = (y1 - y0) / 0.5
    np.testing.assert_allclose(X2[:, :-1, D] - X0[:, :-1, D], g_ctx, atol=1e-5)  # one g, scaled by ε
    np.testing.assert_allclose(y2 - y0, g_q, atol=1e-5)
    for g in (g_ctx.ravel(), g_q):
        assert abs(g.mean()) < 4 / np.sqrt(g.size) and abs(g.std() - 1.0) < 4 / np.sqrt(g.size)
    assert floor == pytest.approx(0.25, rel=1e-6)
    assert np.all(X1[:, -1, D] == 0.0)


def test_whiten_with_a_task_variance_is_refused():
    with pytest.raises(ConfigError, match="task_variance"):
        validate(Config(data=DataConfig(model="icl-linreg", whiten=True, task_variance=0.2)))


# --------------------------------------------------------------------------- the query outside the keys


def _outside_ref(U, W, X, beta=1.0):
    """Φ = Σ_h U_hᵀ Σ_{t<T} softmax_t(β x_tᵀ W_h x_T) x_t in float64 numpy (c_H = 1)."""
    U, W, X = (np.asarray(a, np.float64) for a in (U, W, X))
    keys, q = X[:, :-1], X[:, -1]  # (n, T-1, d), (n, d)
    s = beta * np.einsum("ntd,hde,ne->nht", keys, W, q)
    A = np.exp(s - s.max(-1, keepdims=True))
    A /= A.sum(-1, keepdims=True)
    return np.einsum("nht,ntd,hd->n", A, keys, U)


def test_outside_query_is_cross_attention_over_the_context_tokens():
    from dynamics.core import model as mdl

    rng = np.random.default_rng(0)
    H, n, T, d = 3, 7, 5, 4
    U, W = rng.standard_normal((H, d)), rng.standard_normal((H, d, d)) / 2
    X = rng.standard_normal((n, T, d))
    params = {"U": jax.numpy.asarray(U, "float32"), "W": jax.numpy.asarray(W, "float32")}
    Xj = jax.numpy.asarray(X, "float32")
    phi = mdl.logits(params, Xj, query="outside", norm="sum", beta=0.7)
    np.testing.assert_allclose(np.asarray(phi, np.float64), _outside_ref(U, W, X, 0.7), rtol=1e-5, atol=1e-5)
    A = mdl.attention(params, Xj, "outside")
    assert A.shape == (n, H, T - 1)  # the query is no key
    last = mdl.logits(params, Xj, query="last", norm="sum")  # the query among the keys differs
    assert np.max(np.abs(np.asarray(last) - np.asarray(phi))) > 1e-3
    with pytest.raises(ValueError, match="T >= 2"):
        mdl.attention(params, Xj[:, :1], "outside")


@pytest.mark.slow
def test_outside_query_in_the_engine_matches_the_reference_test_loss():
    from dynamics import run_sweep, trial_data

    kw = dict(
        data_model="icl-linreg", tokens=6, n_train=16, n_test=20, query="outside", init="normal",
        heads=[2], trials=1, steps=2, lr=0.05, save_params=True, head_metrics="on", covariance="identity",
    )  # fmt: skip
    result = run_sweep(progress=False, **kw)
    data = trial_data(result.config, 0)
    for i in (0, -1):  # θ(0) and θ after the last update, the run's own snapshots
        U = result.params["U"][0, 0, i, :2]
        W = result.params["W"][0, 0, i, :2]
        ref = np.mean((_outside_ref(U, W, data.X_test) / np.sqrt(2) - data.y_test) ** 2)
        assert result.curves["test_loss"][0, 0, i] == pytest.approx(ref, rel=1e-5)


def test_outside_query_is_refused_with_one_token_and_read_by_the_max_margin_view():
    from dynamics.config.schema import ModelConfig, SweepConfig

    with pytest.raises(ConfigError, match=r"needs data.T >= 2"):
        validate(Config(data=DataConfig(model="dm1", T=1), model=ModelConfig(query="outside")))
    cfg = Config(
        data=DataConfig(model="dm1", T=4, d=8),
        model=ModelConfig(query="outside"),
        sweep=SweepConfig(diagnostics=("maxmargin",), save_params=True),
    )
    validate(cfg)  # x_T queries the keys x_1…x_{T−1}: the view poses W^mm on those (test_max_margin_outside)
    every = dataclasses.replace(cfg, model=ModelConfig(query="all"))
    with pytest.raises(ConfigError, match="one query per example"):
        validate(every)


# --------------------------------------------------------------------------- the factored readout


def _adam_reference(theta, X, y, X_test, y_test, steps, lr, c):
    """Adam (optax's defaults) on the mse of Φ = c Σ_h O_h V_h Σ_{t<T} softmax_t(x_tᵀ W_h x_T) x_t, in
    float64: the test mse before each update and after the last."""
    import jax.numpy as jnp

    def phi(p, X):
        keys, q = X[:, :-1], X[:, -1]
        A = jax.nn.softmax(jnp.einsum("ntd,hde,ne->nht", keys, p["W"], q), axis=-1)
        return c * jnp.einsum("nht,ntd,hed,he->n", A, keys, p["V"], p["O"])

    def loss(p, X, y):
        return jnp.mean((phi(p, X) - y) ** 2)

    with jax.enable_x64(True):
        p = {k: jnp.asarray(v, jnp.float64) for k, v in theta.items()}
        X, y, X_test, y_test = (jnp.asarray(a, jnp.float64) for a in (X, y, X_test, y_test))
        m = {k: jnp.zeros_like(v) for k, v in p.items()}
        v2 = {k: jnp.zeros_like(v) for k, v in p.items()}
        out = []
        for t in range(steps + 1):
            out.append(float(loss(p, X_test, y_test)))
            g = jax.grad(loss)(p, X, y)
            m = {k: 0.9 * m[k] + 0.1 * g[k] for k in g}
            v2 = {k: 0.999 * v2[k] + 0.001 * g[k] ** 2 for k in g}
            p = {
                k: p[k]
                - lr * (m[k] / (1 - 0.9 ** (t + 1))) / (jnp.sqrt(v2[k] / (1 - 0.999 ** (t + 1))) + 1e-8)
                for k in p
            }
    return np.array(out)


@pytest.mark.slow
def test_factored_readout_trains_as_the_float64_adam_reference_and_not_as_its_product(tmp_path):
    from dynamics import run_sweep, trial_data

    kw = dict(
        data_model="icl-linreg", tokens=6, n_train=16, n_test=20, query="outside", init="normal",
        heads=[2], trials=1, steps=4, lr=0.05, optimizer="adam", save_params=True, covariance="identity",
        log_every=1, head_every=1,
    )  # fmt: skip
    result = run_sweep(progress=False, readout="factored", **kw)
    assert sorted(result.params) == ["O", "V", "W"]
    data = trial_data(result.config, 0)
    theta = {k: result.params[k][0, 0, 0, :2] for k in ("V", "O", "W")}
    want = _adam_reference(
        theta, data.X_train, data.y_train, data.X_test, data.y_test, 4, 0.05, 1 / np.sqrt(2)
    )
    np.testing.assert_allclose(result.curves["test_loss"][0, 0], want, rtol=2e-5)
    U = np.einsum("he,hed->hd", theta["O"], theta["V"])  # U_h = V_hᵀ O_h
    assert result.curves["u_norm"][0, 0, 0] == pytest.approx(np.sqrt(np.sum(U**2)), rel=1e-5)
    # the same function at θ(0) with U learned directly: equal at step 0, Adam then moves it elsewhere
    np.savez(tmp_path / "theta.npz", U=U, W=theta["W"])
    kw.pop("init")
    direct = run_sweep(progress=False, init_from=str(tmp_path / "theta.npz"), **kw)
    assert direct.curves["test_loss"][0, 0, 0] == pytest.approx(want[0], rel=1e-5)
    assert abs(direct.curves["test_loss"][0, 0, -1] - want[-1]) > 1e-3 * want[-1]


@pytest.mark.slow
def test_factored_readout_with_vector_targets_from_a_file_is_refused(tmp_path):
    from dynamics import run_sweep

    rng = np.random.default_rng(0)
    X = rng.standard_normal((6, 3, 4)).astype(np.float32)
    y = rng.standard_normal((6, 2)).astype(np.float32)
    np.savez(tmp_path / "v.npz", X_train=X, y_train=y, X_test=X, y_test=y)
    with pytest.raises(ConfigError, match="readout='factored'"):
        run_sweep(data=str(tmp_path / "v.npz"), readout="factored", init="normal", steps=1, progress=False)


def test_factored_readout_is_refused_where_it_has_no_factors_to_draw():
    from dynamics.config.schema import ModelConfig
    from dynamics.core import inits

    icl = DataConfig(model="icl-linreg")
    for model, match in (
        (ModelConfig(readout="factored"), "saddle of V_hᵀ O_h"),
        (ModelConfig(readout="factored", init="icl"), "reads U_h as one vector"),
        (ModelConfig(readout="factored", init_from="theta.npz"), "init_from holds U"),
        (ModelConfig(readout="spam"), "readout"),
    ):
        with pytest.raises(ConfigError, match=match):
            validate(Config(data=icl, model=model))
    emergence = DataConfig(model="emergence")
    with pytest.raises(ConfigError, match="vector targets need 'direct'"):
        validate(Config(data=emergence, model=ModelConfig(readout="factored", init="normal")))
    with pytest.raises(ValueError, match="one output row"):
        inits.head_shapes(4, None, False, 2, None, factored_readout=True)
    p = inits.init_params(jax.random.PRNGKey(0), 3, 4, init="normal", readout="factored")
    assert {k: v.shape for k, v in p.items()} == {"W": (3, 4, 4), "V": (3, 4, 4), "O": (3, 4)}
    with pytest.raises(ValueError, match="saddle"):
        inits.init_params(jax.random.PRNGKey(0), 3, 4, readout="factored")


# --------------------------------------------------------------------------- PyTorch's default init


def test_torch_init_is_uniform_within_one_over_root_fan_in_per_factor():
    from dynamics.core import inits

    H, d = 4, 6
    p = inits.init_params(
        jax.random.PRNGKey(3), H, d, init="torch", key_query="factored", head_size=d, readout="factored"
    )
    bounds = {"Q": 1 / np.sqrt(d), "K": 1 / np.sqrt(d), "V": 1 / np.sqrt(d), "O": 1 / np.sqrt(H * d)}
    assert {k: v.shape for k, v in p.items()} == {"Q": (H, d, d), "K": (H, d, d), "V": (H, d, d), "O": (H, d)}
    for name, bound in bounds.items():
        x = np.asarray(p[name], np.float64).ravel()
        assert np.max(np.abs(x)) <= bound  # inside ±1/√fan_in
        assert np.max(np.abs(x)) > (0.8 if name == "O" else 0.95) * bound  # and filling it
        assert abs(np.mean(x**2) - bound**2 / 3) < 4 * bound**2 / np.sqrt(x.size)  # uniform's variance
    half = inits.init_params(
        jax.random.PRNGKey(3), H, d, init="torch", scale=0.5, key_query="factored", head_size=d,
        readout="factored",
    )  # fmt: skip
    for name in p:
        np.testing.assert_allclose(np.asarray(half[name]), 0.5 * np.asarray(p[name]), rtol=1e-6)


@pytest.mark.parametrize(
    "model,match",
    [
        (dict(key_query="full", readout="factored"), "free W_h"),
        (dict(key_query="factored", readout="direct"), "U_h = V_hᵀ O_h is no linear layer"),
        (dict(query="learned", readout="factored"), "no key-query matrix"),
    ],
)
def test_torch_init_is_refused_where_a_matrix_has_no_fan_in(model, match):
    from dynamics.config.schema import ModelConfig

    with pytest.raises(ConfigError, match=match):
        validate(Config(data=DataConfig(model="icl-linreg"), model=ModelConfig(init="torch", **model)))


@pytest.mark.slow
def test_torch_init_in_the_engine_is_init_params_for_each_runs_h():
    """Packed runs of H = 1 and 2 start where ``init_params`` starts them (O's fan-in reads each
    run's own H)."""
    from dynamics import run_sweep
    from dynamics.core import inits, rng

    result = run_sweep(
        data_model="icl-linreg", tokens=5, width=4, n_train=8, n_test=8, query="outside", init="torch",
        key_query="factored", head_size=4, readout="factored", heads=[1, 2], trials=1, steps=1,
        save_params=True, progress=False,
    )  # fmt: skip
    _, k_init = rng.split(rng.seed(0))
    for i, H in enumerate((1, 2)):
        key = jax.numpy.asarray(rng.fold_in(k_init, 0))
        want = inits.init_params(
            key, H, 4, init="torch", key_query="factored", head_size=4, readout="factored", query="outside"
        )
        for name, value in want.items():
            np.testing.assert_allclose(result.params[name][i, 0, 0, :H], np.asarray(value), rtol=1e-6, atol=0)


# --------------------------------------------------------------------------- the icl-heads preset


def test_preset_is_the_papers_setting():
    from dynamics.config.presets import ICL_HEADS_FULL_STEPS
    from dynamics.config.schema import preset, resolve

    cfg = resolve(preset("icl-heads")).config
    d, m, o = cfg.data, cfg.model, cfg.optim
    assert (d.model, d.T, d.d, d.covariance, d.task_variance) == ("icl-linreg", 41, 6, "identity", 0.2)
    assert d.epsilon**2 == pytest.approx(0.1, rel=1e-12)
    assert (m.query, m.norm, m.key_query, m.head_size, m.readout, m.init) == (
        "outside", "sum", "factored", 6, "factored", "torch",
    )  # fmt: skip
    assert m.temperature == pytest.approx(6**-0.5, rel=1e-12) and m.attention == "softmax"
    assert (o.optimizer, o.sampling, o.batch_size, o.lr, o.loss) == (
        "adam-minibatch",
        "online",
        256,
        1e-3,
        "mse",
    )
    assert cfg.sweep.heads == (1, 2, 4, 8) and cfg.sweep.save_params
    assert ICL_HEADS_FULL_STEPS == 500_001 and o.steps < ICL_HEADS_FULL_STEPS


def test_one_gd_step_closed_form_is_the_monte_carlo_of_its_best_step():
    from dynamics.experiments import icl_heads

    D, L, s2, v, n = 5, 40, 0.1, 0.2, 100_000
    rng = np.random.default_rng(5)
    x, y, xq, yq = icl_heads._draw(rng, n, D, L, s2, v)
    g = np.einsum("nl,nld->nd", y, x) / L
    eta = v * D / (v * D + ((D + 1) * v * D + s2 * D) / L)  # the closed form's best step
    sq = (eta * np.einsum("nd,nd->n", g, xq) - yq) ** 2
    se = sq.std() / np.sqrt(n)
    assert abs(sq.mean() - icl_heads.gd_step_mse(D, L, s2, v)) < 4 * se
    for other in (0.8 * eta, 1.2 * eta):  # and it is the best step
        assert np.mean((other * np.einsum("nd,nd->n", g, xq) - yq) ** 2) > sq.mean()


def test_reference_predictors_are_ordered_and_paired_heads_approach_one_gd_step(monkeypatch):
    from dynamics.experiments import icl_heads

    monkeypatch.setattr(icl_heads, "MC_SEQUENCES", 20_000)
    monkeypatch.setattr(icl_heads, "FIT_SEQUENCES", 4000)
    refs = icl_heads.reference_predictors.__wrapped__(5, 40, 0.1, 0.2, seed=3)
    mse = {k: r["mse"] for k, r in refs.items()}
    assert 0.1 < mse["ridge"] < mse["gd_step"] < mse["single_kernel"] < 0.6  # the Bayes predictor first
    assert abs(mse["paired_heads"] - mse["gd_step"]) < 0.02  # two opposite heads ≈ a GD step
    assert refs["gd_step"]["se"] is None and all(refs[k]["se"] > 0 for k in ("ridge", "single_kernel"))
    with pytest.raises(ValueError, match="v > 0"):
        icl_heads.reference_predictors.__wrapped__(5, 40, 0.1, 0.0)


def test_reference_predictors_size_argument_is_the_default_sample_at_the_default(monkeypatch):
    """``sequences``/``fit_sequences`` given as the module's sizes draw the very same numbers as the
    default call (so the preset's headline is unchanged); another size draws other numbers; a size
    that cannot give a standard error is refused in one line."""
    from dynamics.experiments import icl_heads

    monkeypatch.setattr(icl_heads, "MC_SEQUENCES", 3000)
    monkeypatch.setattr(icl_heads, "FIT_SEQUENCES", 1000)
    refs = icl_heads.reference_predictors.__wrapped__
    default = refs(4, 10, 0.1, 0.25)
    assert refs(4, 10, 0.1, 0.25, sequences=3000, fit_sequences=1000) == default
    smaller = refs(4, 10, 0.1, 0.25, sequences=2000, fit_sequences=1000)
    assert smaller["gd_step"] == default["gd_step"]  # the closed form reads no sample
    for name in ("ridge", "single_kernel", "paired_heads"):
        assert smaller[name]["mse"] != default[name]["mse"]
        assert smaller[name]["se"] > default[name]["se"]  # fewer sequences, a larger standard error
    assert (
        refs(4, 10, 0.1, 0.25, fit_sequences=500)["single_kernel"]["omega"]
        != default["single_kernel"]["omega"]
    )
    for bad in (1, 0, 2.5, True):
        with pytest.raises(ConfigError, match=r"sequences=.*integer >= 2"):
            refs(4, 10, 0.1, 0.25, sequences=bad)
    with pytest.raises(ConfigError, match="fit_sequences=-3"):
        refs(4, 10, 0.1, 0.25, fit_sequences=-3)


def test_head_structure_of_built_heads():
    from dynamics.experiments import icl_heads

    D = 3
    W = np.zeros((2, D + 1, D + 1))
    W[0, :D, :D] = np.diag([1.0, 2.0, 3.0])  # head 0: diagonal, reads y only
    W[1, :D, :D] = [[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]]  # head 1: share 2/3
    W[1, D, :] = 5.0  # the key's y row is outside the x–x block
    U = np.array([[0, 0, 0, 2.0], [1.0, 0, 0, 1.0]])  # y-shares 1 and 1/2
    diag, yshare = icl_heads.head_structure({"W": W, "U": U}, D)
    np.testing.assert_allclose(diag, [1.0, 2 / 3], rtol=1e-12)
    np.testing.assert_allclose(yshare, [1.0, 0.5], rtol=1e-12)
    # the factored forms give the same: W = Q Kᵀ, U = Vᵀ O
    Q, K = W, np.broadcast_to(np.eye(D + 1), W.shape)
    V = np.broadcast_to(np.eye(D + 1), W.shape)
    diag2, yshare2 = icl_heads.head_structure({"Q": Q, "K": K, "V": V, "O": U}, D)
    np.testing.assert_allclose(diag2, diag, rtol=1e-12)
    np.testing.assert_allclose(yshare2, yshare, rtol=1e-12)


@pytest.mark.slow
def test_a_tiny_run_has_the_headline_and_the_figure(tmp_path, monkeypatch):
    from dynamics import run_sweep, save_results
    from dynamics.experiments import icl_heads
    from figures.icl_heads import plot_icl_heads

    monkeypatch.setattr(icl_heads, "MC_SEQUENCES", 4000)
    monkeypatch.setattr(icl_heads, "FIT_SEQUENCES", 2000)
    monkeypatch.setattr(icl_heads, "LENGTH_SEQUENCES", 500)
    icl_heads.reference_predictors.cache_clear()
    result = run_sweep("icl-heads", steps=30, n_test=500, heads=[1, 2], log_points=5, progress=False)
    head = result.headline()
    for h in (1, 2):
        assert head[f"final_mse_H{h}"]["value"] == pytest.approx(
            result.curves["test_loss"][result.heads.tolist().index(h), 0, -1]
        )
        assert 0 <= head[f"kq_diag_share_H{h}"]["value"] <= 1 and 0 <= head[f"ov_y_share_H{h}"]["value"] <= 1
        assert all(head[f"mse_L{L}_H{h}"]["value"] > 0.1 for L in icl_heads.LENGTHS)
    # the length curve at the trained L is the run's own test mse, up to the test sets' sampling
    trained = head["mse_L40_H2"]["value"]
    assert trained == pytest.approx(head["final_mse_H2"]["value"], rel=0.2)
    save_results(result, tmp_path / "run")
    paths = plot_icl_heads(tmp_path / "run", tmp_path / "fig")
    assert all(p.stat().st_size > 1000 for p in paths)
    icl_heads.reference_predictors.cache_clear()
