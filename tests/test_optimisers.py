"""The optimisers' rules, each against an independent float64 reference written here (a plain
loop over jax.grad of the model written out): SGD's batches (per trial, shared in a pack, the
full batch is GD), normalised GD's norm per run, the parameter groups' step factors, ranges
and weight decay (coupled for GD, decoupled for Adam), the sphere init and constraint, and
the one-line refusals of the settings."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FAST_COMPILE

from dynamics import parts
from dynamics.cli.run import build_parser, config_from_args
from dynamics.config.schema import (
    Config,
    ConfigError,
    DataConfig,
    ModelConfig,
    OptimConfig,
    SweepConfig,
    apply_overrides,
    validate,
)
from dynamics.core import inits, rng, sampling
from dynamics.core import update as upd
from dynamics.core.data import Data
from dynamics.sweeps.sweep import prepare_data, run_sweep, trial_keys

N, STEPS = 24, 12


def config(init="normal", heads=(3,), steps=STEPS, log_every=None, **optim) -> Config:
    optim = {"lr": 0.5, "steps": steps, **optim}
    return Config(
        data=DataConfig(n_train=N, n_test=30, T=5, d=6, n_irrelevant=2),
        model=ModelConfig(init=init),
        optim=OptimConfig(**optim),
        # no per-head metrics: no test here reads one, and they make every engine program bigger
        sweep=SweepConfig(
            heads=heads, trials=2, log_every=log_every or steps, fast_path=True, head_metrics="off"
        ),
    )


# The reference: the model written out (query x_1, softmax, c_H = 1/√H, logistic loss), every
# rule of dynamics.core.update redone by hand on a dict of float64 arrays.


def ref_loss(p, X, y, H):
    scores = jnp.einsum("ntd,hde,ne->nht", X, p["W"], X[:, 0])
    A = jax.nn.softmax(scores, axis=-1)
    phi = jnp.einsum("nht,ntd,hd->n", A, X, p["U"]) / jnp.sqrt(H)
    return jnp.mean(jnp.logaddexp(0.0, -y * phi))


# Jitted (H static): one compiled program per batch shape, where the op-by-op grad compiled every
# primitive of it; float64 inside ``jax.enable_x64`` (a program of its own).
# The loss and its gradient in one program: the full-batch steps and the final loss share it.
ref_grad = jax.jit(jax.value_and_grad(ref_loss), static_argnums=3)
ref_loss_jit = jax.jit(ref_loss, static_argnums=3)


def ref_batches(cfg: Config, trial: int, steps: int) -> list[np.ndarray]:
    """SGD's indices per update, from jax.random's own keys (not the engine's Threefry copy)."""
    B, n = cfg.optim.batch_size, cfg.data.n_train
    key = jax.random.fold_in(
        jax.random.wrap_key_data(jnp.asarray(trial_keys(cfg)[trial])), sampling.MINIBATCH_STREAM
    )
    out = []
    for t in range(steps):
        if cfg.optim.sampling == "epoch":
            e, i = divmod(t, n // B)
            out.append(np.asarray(jax.random.permutation(jax.random.fold_in(key, e), n))[i * B : (i + 1) * B])
        else:
            out.append(
                np.asarray(jax.random.randint(jax.random.fold_in(key, t), (B,), 0, n, dtype=jnp.int32))
            )
    return out


def ref_train(cfg: Config, trial: int, H: int, **rules) -> float:
    """The final full-training-set loss of run (trial, H), by hand in float64."""
    with jax.enable_x64(True):
        return _ref_train(cfg, trial, H, **rules)


def _ref_train(cfg: Config, trial: int, H: int, *, adam=False, normalise=False, sphere=False) -> float:
    decay = cfg.optim.weight_decay  # on every parameter, in the gradient for every optimiser
    summed = cfg.optim.reduction == "sum"  # the objective Σ_i ℓ_i: n (or B) times the mean's gradient
    data, _, init_keys = prepare_data(cfg)
    # whole arrays to numpy, then the trial: indexing a jax array op by op compiles a slice
    X, y = (np.asarray(a, np.float64)[trial] for a in (data.X_train, data.y_train))
    d, o = X.shape[-1], cfg.optim
    # one jitted program for both inits (op by op, the draws compiled ~20 programs), from the trial's key
    # wrapped for dynamics.core.rng's Threefry: jax.random's numbers (tests/test_rng.py)
    p = ref_inits(np.asarray(init_keys[trial]), H, d)[cfg.model.init]
    p = {k: np.asarray(v, np.float64) for k, v in p.items()}
    group = {"U": "readout", "W": "attention"}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v2 = {k: np.zeros_like(v) for k, v in p.items()}
    batches = ref_batches(cfg, trial, o.steps) if o.optimizer == "sgd" else None
    for t in range(o.steps):
        idx = batches[t] if batches is not None else np.arange(len(y))
        g = {k: np.asarray(v) for k, v in ref_grad(p, X[idx], y[idx], H)[1].items()}
        g = {k: g[k] * len(idx) if summed else g[k] for k in p}
        g = {k: g[k] + decay * p[k] for k in p}
        rule = {k: _group(o, group[k]) for k in p}
        moving = {k: r[1] <= t < r[2] for k, r in rule.items()}
        if not adam:
            g = {k: g[k] + rule[k][3] * p[k] for k in p}
        g = {k: g[k] if moving[k] else 0.0 * g[k] for k in p}
        if sphere:
            u = p["U"] / np.linalg.norm(p["U"], axis=1, keepdims=True)
            g["U"] = g["U"] - np.sum(g["U"] * u, axis=1, keepdims=True) * u
        if normalise:
            norm = np.sqrt(sum(np.sum(x**2) for x in g.values()))
            g = {k: x / norm for k, x in g.items()}
        if adam:
            b1, b2, eps = 0.9, 0.999, 1e-8
            m = {k: b1 * m[k] + (1 - b1) * g[k] for k in p}
            v2 = {k: b2 * v2[k] + (1 - b2) * g[k] ** 2 for k in p}
            g = {k: (m[k] / (1 - b1 ** (t + 1))) / (np.sqrt(v2[k] / (1 - b2 ** (t + 1))) + eps) for k in p}
            g = {k: g[k] + rule[k][3] * p[k] for k in p}
        p = {k: p[k] - o.lr * rule[k][0] * g[k] if moving[k] else p[k] for k in p}
        if sphere:
            p["U"] = p["U"] / np.linalg.norm(p["U"], axis=1, keepdims=True)
    return float(ref_grad(p, X, y, H)[0])  # the loss: the full batch's program (GD's steps ran it)


@functools.partial(jax.jit, static_argnums=(1, 2))
def ref_inits(raw, H: int, d: int):
    """θ(0) of the reference, normal and sphere (the references' two inits) in one program: the
    engine's init_params, jitted as the engine's program runs it (at XLA's default optimisation
    level: level 0 changed the float64 draws' last bits here)."""
    key = rng.wrap(raw)
    return {init: inits.init_params(key, H, d, init=init, scale=1.0) for init in ("normal", "sphere")}


def _group(o: OptimConfig, g: str):
    start, stop = getattr(o, f"{g}_steps") or (0, None)
    stop = 10**9 if stop is None else stop
    return getattr(o, f"{g}_lr_factor"), start, stop, getattr(o, f"{g}_weight_decay")


def engine_final(cfg: Config) -> np.ndarray:
    """The engine's final train loss, (heads, trials), in float64."""
    with jax.enable_x64(True):
        return run_sweep(cfg, progress=False).curves["train_loss"][:, :, -1]


REFERENCE_CASES = {
    "sgd-replace": dict(optimizer="sgd", batch_size=5, sampling="replace"),
    "normalized-gd": dict(optimizer="normalized-gd", lr=0.2, readout_weight_decay=0.3),
    "gd-groups": dict(readout_lr_factor=2.0, attention_steps=(2, 7), attention_weight_decay=0.5),
    "sgd-groups": dict(optimizer="sgd", batch_size=6, readout_steps=(0, 5), readout_weight_decay=0.2),
    "adamw-groups": dict(optimizer="adam", lr=0.05, attention_steps=(0, 4), readout_weight_decay=0.3),
    "normalized-frozen": dict(optimizer="normalized-gd", lr=0.2, readout_steps=(3, None)),
    "gd-decay": dict(weight_decay=0.3, attention_weight_decay=0.2),
    "adam-coupled-decay": dict(optimizer="adam", lr=0.05, weight_decay=0.4, readout_weight_decay=0.1),
    "sgd-decay-all": dict(optimizer="sgd", batch_size=6, weight_decay=0.25),
    "gd-sum-decay": dict(lr=0.02, reduction="sum", weight_decay=0.01),
    "adam-sum": dict(optimizer="adam", lr=0.05, reduction="sum", attention_weight_decay=0.1),
}


# normalised GD: make stress, and test_saturation
@pytest.mark.slow_cases("gd-groups", "adamw-groups", "adam-coupled-decay", "gd-sum-decay")
@pytest.mark.parametrize("case", list(REFERENCE_CASES))
def test_the_engine_makes_the_reference_steps(case):
    cfg = config(**REFERENCE_CASES[case])
    got = engine_final(cfg)
    kw = dict(adam=cfg.optim.optimizer == "adam", normalise=cfg.optim.optimizer == "normalized-gd")
    want = [ref_train(validate(cfg), trial, 3, **kw) for trial in range(2)]
    np.testing.assert_allclose(got[0], want, rtol=1e-9, err_msg=case)


@pytest.mark.slow
def test_sgd_with_the_full_batch_in_epochs_is_gd():
    gd = config(steps=100, log_every=10)
    sgd = config(steps=100, log_every=10, optimizer="sgd", batch_size=N)
    with jax.enable_x64(True):
        a, b = run_sweep(gd, progress=False), run_sweep(sgd, progress=False)
    for name in ("train_loss", "test_loss", "u_norm", "w_norm"):
        np.testing.assert_allclose(b.curves[name], a.curves[name], rtol=1e-6, err_msg=name)
    assert not np.array_equal(b.curves["w_norm"], a.curves["w_norm"])  # another summation order


@jax.jit
def trial_epoch_batch(data: Data, data_key, t):
    """SGD's batch (B = 6) of update t for the trial of ``data_key``, as the engine's scan draws it:
    the trial's batch key and t traced, one compiled program (not every primitive op by op)."""
    return sampling.epoch_batch(data, sampling.minibatch_key(data_key), t, 6)


def test_sgd_batches_depend_on_the_trial_and_the_step_alone():
    examples = np.arange(24.0, dtype=np.float32)  # numpy: no op-by-op programs for the inputs
    data = Data(examples[:, None, None], examples, None, None, None)  # type: ignore[arg-type]
    key = np.array([1, 2], np.uint32)
    seen = np.concatenate([np.asarray(trial_epoch_batch(data, key, t)[1]) for t in range(4)])
    assert sorted(seen.tolist()) == list(range(24))  # an epoch shows every example once
    again = np.asarray(trial_epoch_batch(data, key, 2)[1])
    np.testing.assert_array_equal(again, seen[12:18])
    other = np.array([1, 3], np.uint32)  # another trial: other batches
    assert not np.array_equal(np.asarray(trial_epoch_batch(data, other, 0)[1]), seen[:6])
    assert not np.array_equal(np.asarray(trial_epoch_batch(data, key, 4)[1]), seen[:6])  # new epoch


def test_normalised_gd_has_no_fast_path_and_takes_unit_steps_per_run():
    assert not parts.uses_fast_path(config(init="zero", optimizer="normalized-gd"))
    # numpy inputs (float32, as the engine's): no op-by-op programs to build them
    g = {
        "U": np.array([[3.0, 0.0], [0.0, 4.0], [1.0, 0.0]], np.float32),
        "W": np.zeros((3, 2, 2), np.float32),
    }
    member = np.array([[True, False], [True, False], [False, True]])  # slots 0, 1: run 0; 2: run 1
    normalise = jax.jit(upd.normalise)  # as the engine's step calls it: one program a shape
    out = normalise(g, member)
    np.testing.assert_allclose(out["U"], [[0.6, 0.0], [0.0, 0.8], [1.0, 0.0]])
    # the zero and the bias cases have the same shapes: one compiled program for both
    zero = normalise({"U": np.zeros((2, 1), np.float32), "b": np.zeros(2, np.float32)}, np.eye(2, dtype=bool))
    assert all(np.array_equal(v, np.zeros_like(v)) for v in zero.values())  # 0, not NaN
    with_b = normalise(
        {"U": np.array([[3.0], [1.0]], np.float32), "b": np.array([4.0, 0.0], np.float32)},
        np.eye(2, dtype=bool),
    )
    np.testing.assert_allclose(with_b["U"][:, 0], [0.6, 1.0])
    np.testing.assert_allclose(with_b["b"], [0.8, 0.0])


@pytest.mark.slow
def test_a_frozen_group_does_not_move_at_all():
    cfg = config(optimizer="adam", lr=0.05, attention_steps=(0, 2), readout_steps=(4, None), log_every=1)
    r = run_sweep(cfg, progress=False)
    w, u = r.curves["w_norm"][0], r.curves["u_norm"][0]  # (trials, L), L = steps + 1
    assert np.all(w[:, 3:] == w[:, 2:3]) and not np.all(w[:, 1] == w[:, 0])
    assert np.all(u[:, :5] == u[:, :1]) and not np.all(u[:, 5] == u[:, 4])


@pytest.mark.slow_cases("normalized-gd")
@pytest.mark.parametrize("optimizer", ["sgd", "normalized-gd"])
def test_lr_scaling_applies_to_every_optimiser(optimizer):
    extra = {"batch_size": 8} if optimizer == "sgd" else {}
    scaled = config(optimizer=optimizer, lr=0.1, lr_scaling="linear", **extra)
    plain = config(optimizer=optimizer, lr=0.3, **extra)  # η(3) = 0.1·3
    a, b = run_sweep(scaled, progress=False), run_sweep(plain, progress=False)
    np.testing.assert_allclose(a.curves["train_loss"], b.curves["train_loss"], rtol=1e-6)


# The sphere: its init, the Riemannian gradient and the projection.


@functools.partial(jax.jit, compiler_options=FAST_COMPILE)
def sphere_and_normal_inits(raw):
    """The four inits the sphere init test compares, in one program at XLA's backend optimisation
    level 0 on the CPU (op by op they compiled ~86 programs, 7.6 s here; this one 3.2 s)."""
    key = rng.wrap(raw)
    return (
        inits.init_params(key, 4, 6, init="sphere", scale=0.5),
        inits.init_params(key, 4, 6, init="normal", scale=0.5),
        inits.init_params(key, 2, 6, init="sphere"),
        inits.init_params(key, 4, 6, init="sphere"),
    )


def test_the_sphere_init_draws_unit_readouts_and_normal_attention():
    # jax.random.PRNGKey(3)'s key, drawing with dynamics.core.rng's Threefry: the same numbers
    sphere, normal, sphere2, sphere4 = jax.tree_util.tree_map(
        np.asarray, sphere_and_normal_inits(rng.seed(3))
    )
    np.testing.assert_allclose(np.linalg.norm(sphere["U"], axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(sphere["W"], normal["W"])
    u = np.asarray(normal["U"], np.float64)
    np.testing.assert_allclose(sphere["U"], u / np.linalg.norm(u, axis=1, keepdims=True), rtol=1e-6)
    np.testing.assert_array_equal(sphere2["U"], sphere4["U"][:2])


@jax.jit
def tangent_U(U, g):
    return upd.tangent({"U": U}, {"U": g}, ("U",))["U"]


project_sphere = jax.jit(upd.project_sphere)  # one program a call shape, not every op


def test_the_tangent_gradient_and_the_projection_match_a_float64_reference():
    rs = np.random.default_rng(0)
    with jax.enable_x64(True):
        U = rs.normal(size=(3, 5))
        U /= np.linalg.norm(U, axis=1, keepdims=True)
        g = rs.normal(size=(3, 5))
        got = np.asarray(tangent_U(U, g))
        want = np.stack([gi - np.dot(gi, ui) * ui for gi, ui in zip(g, U, strict=True)])
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(np.sum(got * U, axis=1), 0.0, atol=1e-14)  # no radial part left
        moved = project_sphere({"U": U - 0.7 * got, "W": np.ones((3, 2, 2))})
        np.testing.assert_allclose(np.linalg.norm(moved["U"], axis=1), 1.0, rtol=1e-12)
        assert np.array_equal(moved["W"], np.ones((3, 2, 2)))
        assert np.array_equal(project_sphere({"U": np.zeros((1, 5))})["U"], np.zeros((1, 5)))


def test_the_sphere_constraint_trains_on_the_sphere(monkeypatch):
    # The reference below is written for a key-query matrix: let query "first" stand in (U_h on the sphere).
    monkeypatch.setattr(parts.model, "SPHERE_QUERY", "first")
    cfg = dataclasses.replace(
        config(optimizer="gd", log_every=1, constraint="sphere"),
        model=ModelConfig(init="sphere", query="first"),
    )
    with jax.enable_x64(True):
        r = run_sweep(cfg, progress=False)
    np.testing.assert_allclose(r.curves["u_norm"][0], np.sqrt(3.0), rtol=1e-6)  # ‖U_h‖ = 1 for 3 heads
    want = [ref_train(validate(cfg), trial, 3, sphere=True) for trial in range(2)]
    np.testing.assert_allclose(r.curves["train_loss"][0, :, -1], want, rtol=1e-9)


# Settings: one-line refusals naming the value and what is allowed.

REFUSED = [
    (dict(optimizer="sgd"), r"optim.optimizer='sgd' needs optim.batch_size"),
    (dict(optimizer="sgd", batch_size=25), r"optim.batch_size=25 is more than the data.n_train=24"),
    (dict(optimizer="sgd", batch_size=7), r"optim.batch_size=7 does not divide data.n_train=24"),
    (dict(optimizer="sgd", batch_size=0), r"optim.batch_size=0 must be"),
    (dict(optimizer="sgd", batch_size=8, sampling="fresh"), r"optim.sampling='fresh' is not one of"),
    (dict(readout_lr_factor=-1.0), r"optim.readout_lr_factor=-1.0"),
    (dict(attention_weight_decay=float("nan")), r"optim.attention_weight_decay=nan"),
    (dict(attention_steps=(5, 2)), r"optim.attention_steps=\[5, 2\] is empty"),
    (dict(readout_steps=(-1, 2)), r"optim.readout_steps start=-1"),
    (dict(constraint="ball"), r"optim.constraint='ball' is not one of"),
    (dict(constraint="sphere"), r"optim.constraint='sphere' needs model.query='learned'"),
]


@pytest.mark.parametrize("optim,message", REFUSED)
def test_bad_optimiser_settings_are_refused_in_one_line(optim, message):
    with pytest.raises(ConfigError, match=message) as err:
        validate(config(**optim))
    assert "\n" not in str(err.value)


def test_settings_without_effect_or_without_a_sphere_are_refused():
    for given, message in (
        (
            {"optim": {"batch_size": 8}},
            r"optim.batch_size=8 was given but has no effect: optim.optimizer='gd'",
        ),
        ({"optim": {"optimizer": "adam", "sampling": "replace"}}, r"optim.sampling='replace' was given"),
        ({"model": {"init": "sphere"}}, r"model.init='sphere' needs model.query='learned'"),
        ({"optim": {"attention_steps": "a:b"}}, r"optim.attention_steps='a:b' must be START:STOP"),
    ):
        with pytest.raises(ConfigError, match=message):
            validate(apply_overrides(config(), given, "test"))
    sgd = config(optimizer="sgd", batch_size=8)
    with pytest.raises(ConfigError, match=r"sweep.diagnostics replays full-batch GD or Adam"):
        validate(dataclasses.replace(sgd, sweep=dataclasses.replace(sgd.sweep, diagnostics=("kernel",))))


def test_the_flags_read_well_and_old_hashes_stay():
    args = build_parser().parse_args(
        ["--optimizer", "sgd", "--batch-size", "10", "--sampling", "replace", "--attention-steps", "0:2",
         "--readout-steps", "100:", "--readout-lr-factor", "2", "--attention-weight-decay", "0.1"]
    )  # fmt: skip
    o = config_from_args(args).config.optim
    assert (o.batch_size, o.sampling, o.attention_steps, o.readout_steps) == (
        10,
        "replace",
        (0, 2),
        (100, None),
    )
    assert (o.readout_lr_factor, o.attention_weight_decay) == (2.0, 0.1)
    assert (
        config_from_args(build_parser().parse_args(["--attention-steps", "all"])).config.optim.attention_steps
        is None
    )
    helps = build_parser().format_help()
    for flag in ("--batch-size", "--sampling", "--readout-lr-factor", "--attention-steps", "--constraint"):
        assert flag in helps
    doc = Config().to_dict()["optim"]
    assert set(doc) == {"optimizer", "lr", "lr_scaling", "loss", "steps"}  # new fields left out at default
    changed = apply_overrides(Config(), {"optim": {"readout_lr_factor": 2.0}}, "test")
    assert changed.hash() != Config().hash() and changed.to_dict()["optim"]["readout_lr_factor"] == 2.0


# Online SGD: fresh examples of the trial's world at every update.


def online(**kw) -> Config:
    cfg = config(**{"optimizer": "sgd", "batch_size": 5, "sampling": "online", **kw})
    return dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, save_params=True, log_every=4))


@pytest.mark.slow
def test_online_batches_are_the_data_models_samples_of_the_trials_world():
    import datamodels
    from dynamics.sweeps.sweep import program_for

    cfg = online()
    data, _, _ = prepare_data(cfg)
    prog = program_for(cfg, 1, 6, [0, STEPS])
    one = jax.tree_util.tree_map(lambda a: a[1], data)  # trial 1, its world included
    key = sampling.minibatch_key(trial_keys(cfg)[1])
    X3, y3 = sampling.fresh_batch(prog, one, key, 3)
    # the same draw through jax.random's own typed keys and the data model object itself
    typed = jax.random.fold_in(
        jax.random.wrap_key_data(jnp.asarray(trial_keys(cfg)[1])), sampling.MINIBATCH_STREAM
    )
    X_ref, y_ref, _ = datamodels.MIXTURE.sample(one.world, jax.random.fold_in(typed, 3), 5)
    np.testing.assert_array_equal(X3, X_ref)
    np.testing.assert_array_equal(y3, y_ref)
    X4, _ = sampling.fresh_batch(prog, one, key, 4)
    assert not np.allclose(X3, X4)  # another update, other examples
    assert not any(np.allclose(X3[0], x) for x in np.asarray(one.X_train))  # not the training set


@pytest.mark.slow
def test_online_sgd_learns():
    """From log 2 at θ = 0 to below 0.75 of it (a packed online run's batches: test_properties.py)."""
    test = run_sweep(online(heads=(1, 3), steps=60, lr=0.5), progress=False).curves["test_loss"]
    assert np.all(test[:, :, -1] < 0.75 * test[:, :, 0])


@pytest.mark.slow
def test_online_logs_the_training_loss_of_the_next_updates_batch():
    from dynamics.sweeps.sweep import program_for

    cfg = online(heads=(3,), steps=8)
    with jax.enable_x64(True):
        result = run_sweep(cfg, progress=False)
        data, _, _ = prepare_data(cfg)
    prog = program_for(cfg, 1, 6, [0, 8])
    for t in range(2):
        one = jax.tree_util.tree_map(lambda a, t=t: a[t], data)
        key = sampling.minibatch_key(trial_keys(cfg)[t])
        for j, step in enumerate(result.steps):
            X, y = (np.asarray(a, np.float64) for a in sampling.fresh_batch(prog, one, key, int(step)))
            theta = {k: jnp.asarray(v[0, t, j, :3]) for k, v in result.params.items()}
            with jax.enable_x64(True):
                want = float(ref_loss_jit(theta, jnp.asarray(X), jnp.asarray(y), 3))
            assert result.curves["train_loss"][0, t, j] == pytest.approx(want, rel=1e-5)


def test_online_sampling_needs_a_data_model_with_a_world(tmp_path):
    g = np.random.default_rng(0)
    arrays = {"X_train": g.normal(size=(6, 4, 3)), "y_train": g.choice([-1.0, 1.0], 6)}
    np.savez(tmp_path / "d.npz", **arrays, X_test=arrays["X_train"], y_test=arrays["y_train"])
    cfg = Config(
        data=DataConfig(model="npz", path=str(tmp_path / "d.npz")),
        optim=OptimConfig(optimizer="sgd", batch_size=2, sampling="online"),
    )
    with pytest.raises(
        ConfigError, match=r"optim.sampling='online' draws fresh examples.*'epoch' or 'replace'"
    ):
        validate(cfg)
    assert validate(online(batch_size=50)).optim.batch_size == 50  # B may exceed n: nothing is taken from it
