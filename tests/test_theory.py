"""Diagnostics along training (dynamics.theory.replay): the logged curves against float64
references computed here from an independent H-head training loop (optax on the explicit H-head
model, dense jax.hessian, explicit Jacobians, numpy cosines); config, CLI and figure."""

import dataclasses
import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import cli_error
from jax.flatten_util import ravel_pytree

from dynamics.config.schema import Config, ConfigError, apply_overrides, load_toml, resolve
from dynamics.core import inits, model
from dynamics.core.engine import METRICS
from dynamics.sweeps.result_files import results_dict, write_results
from dynamics.sweeps.sweep import prepare_data, run_sweep
from dynamics.sweeps.trials import trial_data
from dynamics.theory import diagnostics as dg
from dynamics.theory import replay as theory
from dynamics.theory import svm

TINY = {
    "data": {"model": "mixture", "n_train": 12, "n_test": 8, "T": 4, "d": 4, "n_irrelevant": 2},
    "optim": {"steps": 6, "lr": 2.0},
    "sweep": {"heads": (2,), "trials": 1, "log_every": 1},
}


def tiny(name="tiny", **sections) -> Config:
    cfg = apply_overrides(Config(name=name), TINY, "test")
    return apply_overrides(cfg, sections, "test")


@functools.cache
def swept(cfg: Config):
    """run_sweep of ``cfg`` in float64 (cached: several tests read the same run)."""
    with jax.enable_x64(True):
        return run_sweep(cfg, progress=False)


def reference_states(cfg: Config, steps):
    """θ of the explicit H-head model (H stored heads, weight 1) at ``steps``: optax's own sgd or
    adam, float64, on the sweep's data and init keys; with X, y and the loss function."""
    cfg = resolve(cfg).config
    H, m, o = cfg.sweep.heads[0], cfg.model, cfg.optim
    data, _, keys = prepare_data(cfg)
    X, y = jnp.asarray(data.X_train[0], jnp.float64), jnp.asarray(data.y_train[0], jnp.float64)
    scale = {"scale": m.init_scale} if m.init == "normal" else {}  # the zero init takes no scale
    p = inits.init_params(jnp.asarray(keys[0]), H, X.shape[-1], init=m.init, **scale)
    p = {k: v.astype(jnp.float64) for k, v in p.items()}
    L = functools.partial(dg.training_loss, X=X, y=y, query=m.query, norm=m.norm, loss=o.loss)
    lr = o.lr * H if o.lr_scaling == "linear" else o.lr
    opt = optax.sgd(lr) if o.optimizer == "gd" else optax.adam(lr)
    state, states, t = opt.init(p), {}, 0
    update = jax.jit(lambda p, s: opt.update(jax.grad(L)(p), s))
    for s in steps:
        for _ in range(s - t):
            u, state = update(p, state)
            p = optax.apply_updates(p, u)
        t = s
        states[s] = p
    return states, X, y, L


CASES = [  # (optimizer, init, fast path): GD and Adam, zero and random init, fast path on and off
    ("gd", "zero", True),
    ("adam", "zero", False),
    ("gd", "normal", True),  # random init: the full path whatever the flag says
]


def case_config(optimizer, init, fast):
    """All three diagnostics on the fast path; the other cases (their own compiles) the sharpness,
    where the fast path's block decomposition is the one thing that differs."""
    lr = 2.0 if optimizer == "gd" else 0.1
    names = (
        ("sharpness", "kernel", "maxmargin") if CASES.index((optimizer, init, fast)) == 0 else ("sharpness",)
    )
    return tiny(
        optim={"optimizer": optimizer, "lr": lr},
        model={"init": init},
        sweep={"fast_path": fast, "diagnostics": names},
    )


@pytest.mark.slow
@pytest.mark.parametrize("optimizer,init,fast", CASES)
def test_logged_diagnostics_match_dense_references(x64, optimizer, init, fast):
    cfg = case_config(optimizer, init, fast)
    result = swept(cfg)
    dsteps = [int(s) for s in result.curves["diagnostic_steps"]]
    assert dsteps == list(range(7))  # 7 logged steps <= POINTS: every one
    assert result.extra["diagnostics"]["replay_gap"] < 1e-9  # the replay is the engine's run
    states, X, y, L = reference_states(cfg, dsteps)
    names = cfg.sweep.diagnostics
    hessian = jax.jit(jax.hessian(lambda f, p: L(ravel_pytree(p)[1](f))))
    K0, W_mm = None, _max_margin(cfg) if "maxmargin" in names else None
    for j, s in enumerate(dsteps):
        p = states[s]
        e = np.linalg.eigvalsh(np.asarray(hessian(ravel_pytree(p)[0], p)))
        radius = max(abs(e[0]), abs(e[-1]))
        assert abs(result.curves["sharpness"][0, 0, j] - e[-1]) <= 1e-8 * radius
        assert abs(result.curves["hessian_min"][0, 0, j] - e[0]) <= 1e-8 * radius
        lr = cfg.optim.lr
        np.testing.assert_allclose(result.curves["eos_ratio"][0, 0, j], lr * e[-1], rtol=1e-8)
        if names == ("sharpness",):
            continue
        K = _explicit_kernel(p, X, cfg)
        K0 = K if K0 is None else K0
        want = 1 - np.sum(K0 * K) / (np.linalg.norm(K0) * np.linalg.norm(K))
        assert abs(result.curves["kernel_distance"][0, 0, j] - want) < 1e-9
        W = np.asarray(p["W"]).sum(axis=0)
        got = result.curves["maxmargin_cos"][0, 0, j]
        if np.linalg.norm(W) == 0:  # zero init: W stays 0 for one step (U = 0 at step 0)
            assert np.isnan(got)
            continue
        cos = np.sum(W * W_mm) / (np.linalg.norm(W) * np.linalg.norm(W_mm))
        per_head = [np.sum(w * W_mm) / (np.linalg.norm(w) * np.linalg.norm(W_mm)) for w in np.asarray(p["W"])]
        assert abs(got - cos) < 1e-9
        assert abs(result.curves["maxmargin_cos_head"][0, 0, j] - max(per_head)) < 1e-9
    if names != ("sharpness",):
        assert np.isfinite(result.curves["maxmargin_cos"][0, 0, -1])
    else:
        assert "kernel_distance" not in result.curves and "maxmargin_cos" not in result.curves


def _max_margin(cfg):
    data = trial_data(cfg, 0)  # the tokens and relevant-token mask trial 0 trains on
    return svm.max_margin_direction(np.asarray(data.X_train), np.asarray(data.mask_train)).W


def _explicit_kernel(p, X, cfg) -> np.ndarray:
    """J Jᵀ with J = jax.jacfwd of Φ (m,) over every parameter of the H-head model."""
    m = resolve(cfg).config.model
    flat, unravel = ravel_pytree(p)
    J = jax.jacfwd(lambda f: model.logits(unravel(f), X, query=m.query, norm=m.norm))(flat)  # (m, P)
    return np.asarray(J) @ np.asarray(J).T


@pytest.mark.slow
def test_diagnostics_off_leaves_curves_unchanged():
    on = swept(case_config("gd", "zero", True))
    off = swept(dataclasses.replace(on.config, sweep=dataclasses.replace(on.config.sweep, diagnostics=())))
    per_head = {k for k in on.curves if k.startswith("head_")}
    assert set(off.curves) == set(METRICS) | per_head  # no new keys
    for k in METRICS:
        np.testing.assert_array_equal(off.curves[k], on.curves[k])  # same numbers, bit for bit
    doc = results_dict(off)
    assert "diagnostics" not in doc and "diagnostics" not in doc["config"]["sweep"]
    with jax.enable_x64(True):  # swept runs in float64: a float64 config (sweep.x64 is in the hash)
        assert off.config.hash() == resolve(tiny()).config.hash()  # the hash it had before the field existed
    assert on.config.hash() != off.config.hash()


@pytest.mark.slow
def test_diagnostics_figure_renders(tmp_path):
    pytest.importorskip("matplotlib")
    from figures.theory import plot_diagnostics

    result = swept(case_config("gd", "zero", True))
    write_results(result, tmp_path / "run")
    paths = plot_diagnostics(tmp_path / "run", tmp_path / "diag")
    assert [p.suffix for p in paths] == [".png", ".pdf"] and all(p.stat().st_size > 10_000 for p in paths)
    meta = json.loads((tmp_path / "run" / "results.json").read_text())
    assert meta["diagnostics"]["svm_status"] == ["optimal"]
    write_results(
        swept(
            dataclasses.replace(result.config, sweep=dataclasses.replace(result.config.sweep, diagnostics=()))
        ),
        tmp_path / "off",
    )
    with pytest.raises(ValueError, match="no diagnostics"):
        plot_diagnostics(tmp_path / "off", tmp_path / "none")


def test_diagnostic_steps_schedule():
    logged = resolve(tiny(optim={"steps": 10000}, sweep={"log_every": None, "log_points": 200})).steps
    picked = theory.diagnostic_steps(logged)
    assert len(picked) <= theory.POINTS + 2 and set(picked) <= set(logged)
    assert picked[0] == 0 and picked[-1] == 10000 and picked == sorted(set(picked))
    assert theory.diagnostic_steps([0, 1, 5]) == [0, 1, 5]


def test_diagnostics_config_toml_and_refusals(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('[sweep]\ndiagnostics = ["kernel", "sharpness"]\n')
    assert resolve(load_toml(toml)).config.sweep.diagnostics == ("kernel", "sharpness")
    assert resolve(tiny(sweep={"diagnostics": "all"})).config.sweep.diagnostics == theory.DIAGNOSTICS
    with pytest.raises(ConfigError, match="'sharpnes'.*did you mean 'sharpness'"):
        resolve(tiny(sweep={"diagnostics": "sharpnes"}))
    with pytest.raises(ConfigError, match="maxmargin.*relevant tokens.*'planted'"):
        resolve(
            apply_overrides(
                Config(), {"data": {"model": "planted"}, "sweep": {"diagnostics": "maxmargin"}}, "t"
            )
        )
    with pytest.raises(ConfigError, match="query='first'"):
        resolve(tiny(model={"query": "all"}, sweep={"diagnostics": "maxmargin"}))


def test_cli_refuses_maxmargin_without_relevant_tokens(tmp_path, capsys):
    line = cli_error(["--data-model", "planted", "--diagnostics", "maxmargin"], capsys, tmp_path)
    assert "maxmargin" in line and "planted" in line
