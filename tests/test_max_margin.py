"""The max-margin data model and presets (Tarzanagh et al. 2023) against an independent float64
numpy reference of normalised GD (benchmarks.max_margin), and the max-margin view's figure."""

from __future__ import annotations

import dataclasses
import types

import jax
import numpy as np
import pytest

from benchmarks.max_margin import corr, gradient, reference
from datamodels.max_margin import MAX_MARGIN
from dynamics import run_sweep
from dynamics.sweeps.trials import trial_data
from dynamics.theory import svm
from dynamics.theory.maxmargin import alignment


def _config(**kw):
    from dynamics.api import with_overrides

    knobs = {k: v for k, v in {**SMALL, **kw}.items() if k not in ("progress", "diagnostics")}
    return with_overrides(None, **knobs)


@pytest.mark.stress
def test_local_setting_draws_unit_tokens_labels_and_the_optimal_token():
    data = trial_data(_config(), 1)  # the small run's own data (one compiled draw for both)
    X, y, mask, world = data.X_train, data.y_train, data.mask_train, data.world
    v, W0 = (np.asarray(world.latents[k]) for k in ("v", "W0"))
    assert np.allclose(np.linalg.norm(X, axis=-1), 1, atol=1e-6) and abs(np.linalg.norm(v) - 1) < 1e-6
    assert set(np.unique(y)) <= {-1.0, 1.0}
    assert np.array_equal(np.argmax(mask, 1), np.argmax(y[:, None] * (X @ v), 1)) and np.all(mask.sum(1) == 1)
    assert np.all(np.abs(W0) <= 1 / np.sqrt(3)) and np.abs(W0).max() > 0.3 / np.sqrt(3)
    assert set(MAX_MARGIN.initial_params(world, {"U": (3,), "W": (3, 3)})) == {"U", "W"}
    assert set(MAX_MARGIN.initial_params(world, {"U": (3,), "k": (3,)})) == {"U", "k"}
    assert set(MAX_MARGIN.initial_params(world, {"U": (3,), "Q": (3, 1), "K": (3, 1)})) == {"U"}


@pytest.mark.stress
def test_prompt_setting_has_the_score_coordinate_and_token_1_optimal():
    data = trial_data(_config(setting="prompt", T=7, n_train=3, n_test=3, query="learned"), 0)
    X, y, mask = data.X_train, data.y_train, data.mask_train
    assert np.array_equal(np.asarray(data.world.latents["v"]), [0.0, 0.0, 1.0]) and np.all(y == 1)
    assert np.all(X[:, 0, 2] == 1.0) and np.all(X[:, 1:, 2] == 0.5) and np.all(mask[:, 0]) and mask.sum() == 3
    assert np.allclose(X[:, 1:4, :2].mean(axis=(0, 1)), [-1, 1], atol=0.3)


@pytest.mark.parametrize("query", ["first", "last", "learned"])
def test_reference_gradient_is_the_loss_derivative(query):
    """The reference's cancellation-free gradient equals central differences of the loss."""
    rng = np.random.default_rng(0)
    X, y, v = rng.normal(size=(5, 4, 3)), np.sign(rng.normal(size=5)), rng.normal(size=3)
    theta = rng.normal(size=(3,) if query == "learned" else (3, 3))

    def loss(th):
        x_q = X[:, 0] if query == "first" else X[:, -1]
        s = X @ th if query == "learned" else np.einsum("ntd,de,ne->nt", X, th, x_q)
        a = np.exp(s - s.max(1, keepdims=True))
        f = np.sum(a / a.sum(1, keepdims=True) * (X @ v), 1)
        return np.mean(np.log1p(np.exp(-y * f)))

    g = gradient(theta, X, y, v, query)
    fd = np.zeros_like(theta)
    for i in np.ndindex(theta.shape):
        e = np.zeros_like(theta)
        e[i] = 1e-6
        fd[i] = (loss(theta + e) - loss(theta - e)) / 2e-6
    assert np.allclose(g, fd, rtol=1e-7, atol=1e-10)


SMALL = dict(
    data_model="max-margin", T=4, d=3, n_train=4, n_test=4, query="first",  # one head: c_1 = 1, any norm
    optimizer="normalized-gd", lr=0.1, loss="logistic", steps=300, readout_lr_factor=0.0, heads=(1,),
    trials=2, log_every=10,
    save_params=True, diagnostics=("maxmargin",), progress=False,
)  # fmt: skip


@pytest.mark.stress  # about 20 s here (compiles, cvxpy): over the default suite's budget
def test_small_run_follows_exact_normalised_gd():
    """float32 mhsim against the float64 reference on the same data and θ(0) (the world's): corr of
    W ≥ 0.9999 at every logged step, ‖W‖ within 1e-5 relative (each step moves exactly η = 0.1)."""
    res = run_sweep(**SMALL)
    W = np.asarray(res.curves["param_W"], np.float64)[0, :, :, 0]
    assert np.array_equal(res.curves["param_U"][0, :, -1, 0], res.curves["param_U"][0, :, 0, 0])  # frozen
    for t in range(2):
        data = trial_data(res.config, t)
        lat = data.world.latents
        X, y, mask = data.X_train, data.y_train, data.mask_train  # the local setting's data
        assert np.allclose(np.linalg.norm(X, axis=-1), 1, atol=1e-6) and set(np.unique(y)) <= {-1.0, 1.0}
        assert np.array_equal(np.argmax(mask, 1), np.argmax(y[:, None] * (X @ lat["v"]), 1))
        ref = reference(data.X_train, data.y_train, lat["v"], lat["W0"], lr=0.1, steps=300, every=10)
        flat, rflat = W[t].reshape(len(ref), -1), ref.reshape(len(ref), -1)
        between = np.sum(flat * rflat, 1) / (np.linalg.norm(flat, axis=1) * np.linalg.norm(rflat, axis=1))
        assert between.min() >= 0.9999, between.min()
        rel = np.abs(np.linalg.norm(flat, axis=1) - np.linalg.norm(rflat, axis=1)) / np.linalg.norm(
            rflat, axis=1
        )
        assert rel.max() < 1e-5, rel.max()
    # the maxmargin diagnostic, under normalised GD, a frozen readout and the world's θ(0) (which
    # the replayed diagnostic refuses): the view of the engine's own W at every logged step
    view = alignment(res)
    summary = res.extra["diagnostics"]
    assert summary["source"] == "snapshots" and summary["selection"] == "the model's final argmax"
    assert np.array_equal(res.curves["maxmargin_cos"][0], view.corr)
    assert np.array_equal(res.curves["maxmargin_norm"][0], view.norm)
    assert np.all(res.curves["maxmargin_attn"][0] <= 1) and np.all(res.curves["maxmargin_attn"][0] > 0)
    assert view.selection == "final" and view.corr.shape == (2, 31) and view.parameter == "W"
    assert np.allclose(view.norm, np.linalg.norm(W.reshape(2, 31, -1), axis=2))
    data = trial_data(res.config, 0)
    mm = svm.max_margin_W(np.asarray(data.X_train, np.float64), view.selected[0]).W
    assert np.allclose(view.corr[0], corr(W[0], mm))


@pytest.mark.stress
@pytest.mark.parametrize("x64", [False, True])
def test_preset_mean_corr_matches_exact_normalised_gd_over_30_data_sets(x64):
    """The ``max-margin`` preset: mean corr(W(2000), W^mm) over its 30 data sets within 0.001 of the
    reference's, corr(W_mhsim, W_ref) ≥ 0.9999 at every logged step, ‖W‖ within 1e-3."""
    from benchmarks.max_margin import preset_against_reference

    try:
        r = preset_against_reference("max-margin", x64=x64)
    finally:
        jax.config.update("jax_enable_x64", False)
    assert r["corr_ref"].shape[0] == 30
    assert abs(r["corr_mhsim"][:, -1].mean() - r["corr_ref"][:, -1].mean()) < 1e-3
    assert np.nanmin(r["corr_between"]) >= 0.9999
    assert (np.abs(r["norm_mhsim"] - r["norm_ref"]) / r["norm_ref"]).max() < 1e-3


@pytest.mark.stress
def test_prompt_preset_corr_within_1e3_of_the_reference_at_every_logged_step():
    from benchmarks.max_margin import preset_against_reference

    r = preset_against_reference("max-margin-prompt", x64=True)
    jax.config.update("jax_enable_x64", False)
    assert np.abs(r["corr_mhsim"] - r["corr_ref"]).max() < 1e-3


@pytest.mark.stress
def test_preset_runs_and_draws_its_figure(tmp_path):
    from dynamics.cli.run import main

    assert main(["--preset", "max-margin-prompt", "--out", str(tmp_path / "p")]) == 0
    assert (tmp_path / "p" / "max-margin.png").stat().st_size > 10_000


def test_alignment_refuses_a_sweep_it_cannot_read():
    from dynamics.config.schema import preset

    cfg = preset("max-margin")
    two = dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, heads=(1, 2)))
    with pytest.raises(ValueError, match="reads a sweep of one H"):
        alignment(types.SimpleNamespace(curves={}, config=two))
    with pytest.raises(ValueError, match="selection='argmax'; allowed: final, mask"):
        alignment(types.SimpleNamespace(curves={}, config=cfg), selection="argmax")


def test_the_replayed_diagnostics_refusal_names_the_snapshot_route():
    from dynamics.api import with_overrides

    with pytest.raises(ValueError, match="'maxmargin' alone with sweep.save_params reads the run's own θ"):
        with_overrides("max-margin", diagnostics=("maxmargin",), save_params=False)


@pytest.mark.stress
def test_authors_data_mhsim_follows_the_reference_in_float32_and_x64():
    """Their three local-convergence data sets (their generator and seeds, via --data and
    --init-from): corr(W_mhsim(t), W_ref(t)) ≥ 0.9999 every 10 steps to t = 2000, ‖W‖ within 1e-3;
    their own code is run too where its checkout is given (MAX_MARGIN_CHECKOUT), else torch alone
    is needed for their generator."""
    import os

    pytest.importorskip("torch")
    from benchmarks import max_margin as mm

    checkout = os.environ.get("MAX_MARGIN_CHECKOUT")
    if checkout is None:
        pytest.skip("MAX_MARGIN_CHECKOUT (the authors' checkout) not set")
    for row in mm.authors_comparison(checkout):
        for name in ("mhsim_f32", "mhsim_x64"):
            assert row[name]["min_corr_to_ref"] >= 0.9999, (row["seed"], name, row[name])
            assert row[name]["max_norm_rel_gap"] < 1e-3, (row["seed"], name, row[name])


@pytest.mark.stress
@pytest.mark.parametrize("x64", [False, True])
def test_authors_prompt_data_corr_within_1e3_of_the_reference(x64):
    pytest.importorskip("torch")
    from benchmarks import max_margin as mm

    assert mm.prompt_comparison(x64=x64)["max_gap"] < 1e-3


@pytest.mark.slow  # three runs' compiles and their SVMs
def test_the_view_reads_thinned_snapshots_alone_and_in_a_command_line_grid(tmp_path, capsys):
    """Snapshots every 2nd logged step (``head_every``; past ``HEAD_POINTS`` logged steps the default
    thins them too): the view at those steps equals the view of a run with a snapshot at every
    logged step, NaN between; a command-line grid over η gives each point the curves of its
    configuration run alone (this failed: a 2000-step preset, 201 logged steps, 101 snapshots)."""
    from helpers import cli_run

    from dynamics.api import load_results

    small = {**SMALL, "steps": 60}
    every, thinned = run_sweep(**small, head_every=1), run_sweep(**small, head_every=2)
    at = [0, 2, 4, 6]  # steps 0, 20, 40, 60 of the 7 logged
    assert list(thinned.curves["diagnostic_steps"]) == [0, 20, 40, 60]
    for name in ("maxmargin_cos", "maxmargin_attn", "maxmargin_norm"):
        np.testing.assert_allclose(thinned.curves[name][..., at], every.curves[name][..., at], rtol=1e-12)
        assert np.all(np.isnan(thinned.curves[name][..., [1, 3, 5]]))
    assert np.array_equal(alignment(thinned).steps, [0, 20, 40, 60])
    args = ["--data-model", "max-margin", "--tokens", "4", "--width", "3", "--n-train", "4", "--n-test", "4"]
    args += ["--optimizer", "normalized-gd", "--loss", "logistic", "--steps", "60"]
    args += ["--readout-lr-factor", "0", "--trials", "2", "--log-every", "10", "--save-params"]
    args += ["--diagnostics", "maxmargin", "--head-every", "2", "--heads", "1", "--no-figure", "--quiet"]
    code, _, err = cli_run([*args, "--lr", "0.05,0.1", "--out", "grid"], capsys, tmp_path)
    assert code == 0, err
    point = load_results(tmp_path / "grid").point(1)  # η = 0.1
    for name in ("maxmargin_cos", "maxmargin_norm"):
        np.testing.assert_allclose(point.curves[name], thinned.curves[name], rtol=1e-6)
