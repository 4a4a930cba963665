"""Data models as setup(key, params) -> world and sample(world, key, n): the four paper models'
defining properties checked in float64 numpy, the Data fields, user parts by "module:attribute"
(data models, losses, activations), .npz masks, regression targets and the identical-trials
warning."""

from __future__ import annotations

import functools
import json
import math
import sys
import warnings
from pathlib import Path

import jax
import numpy as np
import pytest
from helpers import DEFAULT_CONFIG_HASH, FAST_COMPILE, assert_same_numbers, cli_run

from datamodels.npz import infer_task, load_npz
from dynamics import parts
from dynamics.config.schema import Config, ConfigError, DataConfig, IdenticalTrialsWarning, validate
from dynamics.core import rng
from dynamics.core.data import data_model, make_data

USER_DIR = Path(__file__).resolve().parent / "data"


@pytest.fixture
def user_path(monkeypatch):
    monkeypatch.syspath_prepend(str(USER_DIR))


def _draw(model: str, n: int = 400, seed: int = 0, **params):
    """One trial's world and n training examples, as make_data draws them (float64 numpy).

    The keys of jax.random.split(jax.random.PRNGKey(seed), 3), derived in numpy and drawing with
    dynamics.core.rng's Threefry as make_data's do: the same numbers (tests/test_rng.py), where JAX's
    own CPU hash took most of this file's op-by-op compile (~2.5x the seconds); setup and sample
    jitted together (``_setup_and_sample``)."""
    cfg = DataConfig(model=model, n_train=n, n_test=3, **params).resolved()
    world, (X, y, mask) = _setup_and_sample(rng.split(rng.seed(seed), 3)[:2], cfg)
    as64 = lambda a: None if a is None else np.asarray(a, np.float64)  # noqa: E731
    return cfg, world, as64(X), as64(y), None if mask is None else np.asarray(mask)


@functools.partial(jax.jit, static_argnums=1, compiler_options=FAST_COMPILE)
def _setup_and_sample(raw_keys, cfg: DataConfig):
    """The data model's setup and sample of n_train examples as one program (the config static) at
    XLA's backend optimisation level 0 on the CPU, where op by op they compiled ~40 programs a model;
    the properties are checked on the draws, whatever program drew them."""
    obj = data_model(cfg)
    k_setup, k_train = rng.wrap(raw_keys)
    world = obj.setup(k_setup, cfg)
    return world, obj.sample(world, k_train, cfg.n_train)


def _orthonormal_rows(V: np.ndarray) -> None:
    V = np.atleast_2d(np.asarray(V, np.float64))
    np.testing.assert_allclose(V @ V.T, np.eye(len(V)), atol=1e-5)


# The paper models, one defining property each.


@pytest.mark.slow
def test_sparse_token_positives_carry_theta_xi_on_r_tokens():
    cfg, world, X, y, mask = _draw("sparse-token", n=300)
    xi = np.asarray(world.latents["xi"], np.float64)
    assert X.shape == (300, 10, 1000) and mask.shape == (300, 10)
    _orthonormal_rows(world.planted["xi"])
    assert set(np.unique(y)) == {-1.0, 1.0}
    assert abs(np.mean(y > 0) - 0.2) < 0.08  # π = 0.2
    np.testing.assert_array_equal(mask.sum(axis=1), np.where(y > 0, 3, 0))  # R on positives, none else
    # the same draw without signal is Z: X − Z = θ·v ξᵀ exactly where v marks (float32 rounding)
    _, _, Z, _, _ = _draw("sparse-token", n=300, signal=0.0)
    np.testing.assert_allclose(X - Z, 6.0 * mask[:, :, None] * xi[None, None, :], atol=1e-5)
    assert abs(Z.std() - 1.0) < 0.01  # iid N(0, 1) entries, no 1/√d
    assert np.isnan(float(world.noise_floor))


def test_single_location_target_is_x_dot_v_star_plus_noise():
    eps = 0.1
    cfg, world, X, y, mask = _draw("single-location", n=2000)
    k, v = (np.asarray(world.latents[n], np.float64) for n in ("k_star", "v_star"))
    _orthonormal_rows(np.stack([k, v]))
    np.testing.assert_array_equal(mask.sum(axis=1), 1)
    x = X[mask]  # (n, d) the relevant tokens
    resid = y - x @ v
    assert abs(resid.std() / eps - 1) < 0.05 and abs(resid.mean()) < 0.01  # ε·g
    centred = x - math.sqrt(80 / 2) * k
    assert abs(centred.std() - math.sqrt(0.5)) < 0.01  # N(√(d/2)k*, γ²I), γ² = ½
    assert abs(X[~mask].std() - 1) < 0.01 and abs(X[~mask].mean()) < 0.01  # the others N(0, I)
    assert float(world.noise_floor) == pytest.approx(eps**2)
    assert np.bincount(np.argmax(mask, axis=1), minlength=10).min() > 120  # uniform positions
    _, _, _, y0, _ = _draw("single-location", n=2000, epsilon=0.0)
    np.testing.assert_allclose(y0, x @ v, atol=1e-4)  # same draw without noise: exactly xᵀv*


@pytest.mark.slow
def test_multi_location_target_is_the_strength_weighted_sum():
    c = (1.0, 0.7, 0.5)
    cfg, world, X, y, mask = _draw("multi-location", n=500, gamma=0.3, epsilon=0.0)
    K, V = (np.asarray(world.planted[n], np.float64) for n in ("k_star", "v_star"))
    assert K.shape == V.shape == (3, 64)
    _orthonormal_rows(np.concatenate([K, V]))
    assert mask.shape == (500, 3, 10)  # per feature: mask[i, f] marks the token carrying k*_f
    np.testing.assert_array_equal(mask.sum(axis=2), 1)
    np.testing.assert_array_equal(mask.any(axis=1).sum(axis=1), 3)  # at distinct positions
    expected = np.zeros(500)
    for i in range(500):
        tokens = np.stack([X[i, mask[i, f]][0] for f in range(3)])  # (F, d): feature f's token
        feature = np.argmax(tokens @ K.T, axis=1)  # which k*_f each is centred on (√32 vs γ = 0.3)
        np.testing.assert_array_equal(feature, [0, 1, 2])  # the mask names each token's feature
        expected[i] = sum(c[f] * tokens[f] @ V[f] for f in range(3))
    np.testing.assert_allclose(y, expected, atol=1e-4)
    assert float(world.noise_floor) == 0.0  # ε = 0


def test_icl_linreg_query_last_and_targets_linear_in_context():
    cfg, world, X, y, mask = _draw("icl-linreg", n=300)
    D = 4
    assert X.shape == (300, 32, 5) and mask is None
    np.testing.assert_array_equal(X[:, -1, D], 0.0)  # the query's y channel is hidden
    for i in range(20):  # w from the N = 31 context pairs (exact: no noise), then y_q = wᵀx_q
        w, *_ = np.linalg.lstsq(X[i, :-1, :D], X[i, :-1, D], rcond=None)
        assert y[i] == pytest.approx(X[i, -1, :D] @ w, abs=1e-4)
    eig = np.asarray(world.planted["eigvecs"], np.float64)
    assert eig.shape == (4, 5)
    np.testing.assert_array_equal(eig[:, D], 0.0)
    _orthonormal_rows(eig)
    lam = np.arange(1, 5) / 10.0  # ∝ 1..D, trace 1
    B = eig[:, :D]
    cov = np.cov(X[:, :, :D].reshape(-1, D).T)
    np.testing.assert_allclose(B @ cov @ B.T, np.diag(lam), atol=0.02)
    assert float(world.noise_floor) == 0.0
    _, world_id, *_ = _draw("icl-linreg", n=300, basis="identity")  # n = 300: the shapes compiled above
    np.testing.assert_array_equal(np.asarray(world_id.latents["basis"]), np.eye(4))


@pytest.mark.parametrize("model", ["sparse-token", "single-location", "multi-location", "icl-linreg"])
def test_new_models_are_deterministic_with_fresh_worlds_per_trial(model):
    cfg = DataConfig(model=model, n_train=5, n_test=7, d=16 if model != "icl-linreg" else None)
    a, shared = make_data(cfg, rng.seed(1), 2)
    b, _ = make_data(cfg, rng.seed(1), 2)
    assert not shared
    for x, z in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(z))
    latents = jax.tree_util.tree_leaves(a.world.latents)
    assert any(not np.array_equal(np.asarray(v)[0], np.asarray(v)[1]) for v in latents)  # new world
    assert a.noise_floor.shape == (2,)
    task = parts.DATA_MODELS[model].task
    assert task == ("classification" if model == "sparse-token" else "regression")
    if parts.DATA_MODELS[model].relevant_tokens:
        assert a.mask_train.shape == (2, 5, cfg.resolved().T) and a.mask_test.shape[:2] == (2, 7)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"model": "multi-location", "d": 5}, r"^data.d=5 must be >= 2F = 6"),
        ({"model": "multi-location", "T": 2}, r"^data.strengths has F=3 features but data.T=2"),
        ({"model": "multi-location", "strengths": ()}, r"^data.strengths=\(\) is empty"),
        ({"model": "icl-linreg", "basis": "eye"}, r"^data.basis='eye' is not one of 'random', 'identity'"),
        ({"model": "sparse-token", "r": 11}, r"^data.r=11 must be <= data.T=10"),
        ({"model": "sparse-token", "positive_rate": 1.5}, r"^data.positive_rate=1.5 must be <= 1.0"),
        ({"model": "single-location", "epsilon": -1.0}, r"^data.epsilon=-1.0 must be >= 0.0"),
    ],
)
def test_new_models_refuse_bad_parameters_in_one_line(fields, message):
    with pytest.raises(ConfigError, match=message) as info:
        validate(Config(data=DataConfig(**fields)))
    assert "\n" not in str(info.value)


def test_strengths_from_a_list_and_the_flag():
    assert DataConfig(model="multi-location", strengths=[1, 0.5]).strengths == (1, 0.5)
    from dynamics.cli.run import build_parser, config_from_args

    args = build_parser().parse_args(["--data-model", "multi-location", "--strengths", "1,0.5"])
    assert config_from_args(args).config.data.strengths == (1.0, 0.5)


def test_builtin_hashes_unchanged():
    assert Config().hash() == DEFAULT_CONFIG_HASH
    assert "sources" not in Config().to_dict()


# User parts by "module:attribute".


def test_user_data_model_runs_from_python_with_fresh_worlds(user_path):
    import dataclasses

    import user_parts

    from dynamics.sweeps.sweep import run_sweep

    cfg = validate(Config(data=DataConfig(model="user_parts:toy", n_train=10, n_test=10)))
    cfg = dataclasses.replace(
        cfg,
        optim=dataclasses.replace(cfg.optim, steps=5),
        sweep=dataclasses.replace(cfg.sweep, heads=(1, 2), trials=2),
    )
    data, _ = make_data(cfg.data, rng.seed(0), 2)
    assert not np.array_equal(np.asarray(data.world["w"][0]), np.asarray(data.world["w"][1]))
    result = run_sweep(
        dataclasses.replace(cfg, data=DataConfig(n_train=10, n_test=10)), data=user_parts.toy, progress=False
    )
    assert result.config.data.model == "user_parts:toy" and result.config.data.T == 4
    assert np.all(np.isfinite(result.curves["train_loss"]))
    doc = result.config.to_dict()
    assert doc["sources"]["data.model"]["path"] == str(USER_DIR / "user_parts.py")
    assert doc["data"]["model"] == "user_parts:toy"


@pytest.mark.slow
def test_user_data_model_from_the_command_line_equals_the_same_arrays_in_npz(tmp_path, capsys, user_path):
    """The command line in this process, the user's module on sys.path (as PYTHONPATH puts it)."""
    import importlib

    fixed = importlib.import_module("user_parts").FIXED
    np.savez(tmp_path / "fixed.npz", **fixed)
    common = ["--steps", "5", "--heads", "1,2", "--trials", "1", "--no-figure", "--quiet"]
    runs = {
        "user": ["--data-model", "user_parts:fixed", "--n-train", "8", "--n-test", "12"],
        "npz": ["--data", str(tmp_path / "fixed.npz")],
    }
    curves = {}
    for name, flags in runs.items():
        out = tmp_path / name
        code, _, stderr = cli_run([*flags, *common, "--out", str(out)], capsys, tmp_path)
        assert code == 0, stderr[-2000:]
        curves[name] = np.load(out / "curves.npz")
    doc = json.loads((tmp_path / "user" / "results.json").read_text())
    assert doc["config"]["data"]["model"] == "user_parts:fixed"
    assert doc["config"]["sources"]["data.model"]["sha256"]
    for key in ("train_loss", "test_loss", "train_error", "test_error"):
        assert_same_numbers(curves["user"][key], curves["npz"][key])


def test_user_loss_and_activation_parts(user_path):
    loss = parts.LOSSES.get("user_parts:half_square")
    assert isinstance(loss, parts.Loss) and loss.task == "classification"
    assert loss.load()(np.float64(0.0)) == 0.5
    act = parts.ACTIVATIONS.get("user_parts:relu_attention")
    assert isinstance(act, parts.Activation) and act.normalises is False
    assert "user_parts:relu_attention" in parts.ACTIVATIONS
    assert "user_parts:relu_attention" not in parts.ACTIVATIONS.names  # not listed in --help
    assert loss.fingerprint() is not None and act.fingerprint() != loss.fingerprint()
    with pytest.raises(ConfigError, match=r"^optim.loss='nope_mod:f' cannot be loaded \(ModuleNotFoundError"):
        parts.LOSSES.get("nope_mod:f")
    assert "nope_mod:f" not in parts.LOSSES


def test_user_part_fingerprint_follows_its_source(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    src = tmp_path / "fp_mod.py"
    src.write_text("def loss(z):\n    return 1.0 - z\n")
    first = parts.LOSSES.get("fp_mod:loss").fingerprint()
    src.write_text("def loss(z):\n    return 2.0 - z\n")
    import importlib

    importlib.reload(sys.modules["fp_mod"])
    assert parts.LOSSES.get("fp_mod:loss").fingerprint() not in (None, first)


def test_unreadable_user_part_is_never_kept_on_disk():
    from dynamics.infra import executables

    namespace: dict = {}
    exec(
        "class Prompt:\n    def setup(self, key, p): return {}\n    def sample(self, w, k, n): return 0",
        namespace,
    )
    obj = namespace["Prompt"]()
    name = parts.DATA_MODELS.adopt(obj)
    assert parts.DATA_MODELS.get(name).fingerprint() is None
    cfg = DataConfig(model=name, T=2, d=2)
    assert executables.program_key("data.synthetic_trials", {"cfg": cfg}, {"raw": np.zeros(2)}) is None


def test_user_data_model_without_sizes_asks_for_them(user_path):
    import user_parts

    class NoSizes:
        setup, sample = user_parts.Toy.setup, user_parts.Toy.sample

    name = parts.DATA_MODELS.adopt(NoSizes())  # its setup reads params.d: one traced sample cannot tell
    with pytest.raises(
        ConfigError,
        match=r"^data.T=None: data model .* has no default T and d; give data.T \(--tokens\) and data.d "
        r"\(--width\), .*one traced sample did not give them \(TypeError",
    ):
        validate(Config(data=DataConfig(model=name)))


# .npz: masks, regression targets, identical trials.


def _arrays(n=6, m=4, T=5, d=3, labels=(-1.0, 1.0)):
    g = np.random.default_rng(0)
    return {
        "X_train": g.normal(size=(n, T, d)),
        "y_train": g.choice(labels, size=n),
        "X_test": g.normal(size=(m, T, d)),
        "y_test": g.choice(labels, size=m),
    }


def test_npz_masks_are_loaded_checked_and_used(tmp_path):
    a = _arrays()
    a["mask_test"] = np.zeros((4, 5), bool)
    a["mask_test"][:, 0] = True
    np.savez(tmp_path / "m.npz", **a)
    u = load_npz(tmp_path / "m.npz")
    assert u.mask_train is None and u.mask_test.dtype == bool and u.task == "classification"
    data, shared = make_data(DataConfig(model="npz", path=str(tmp_path / "m.npz")), rng.seed(0), 1)
    assert shared and np.array_equal(np.asarray(data.mask_test), a["mask_test"])
    a["mask_train"] = np.ones((6, 4), bool)
    np.savez(tmp_path / "bad.npz", **a)
    from datamodels.npz import DataError

    with pytest.raises(DataError, match=r"key 'mask_train': must have shape \(n, T\) = \(6, 5\)"):
        load_npz(tmp_path / "bad.npz")


def test_npz_attention_metric_reads_the_mask(tmp_path):
    from dynamics.sweeps.sweep import run_sweep

    a = _arrays()
    np.savez(tmp_path / "plain.npz", **a)
    a["mask_test"] = np.ones((4, 5), bool)  # every token relevant: all the attention mass
    np.savez(tmp_path / "masked.npz", **a)
    sweep = Config().sweep.__class__(heads=(1,), trials=1, head_metrics="off")  # the run-level metric only
    base = Config(data=DataConfig(model="npz"), sweep=sweep)
    import dataclasses

    out = {}
    for name in ("plain", "masked"):
        cfg = dataclasses.replace(base, data=DataConfig(model="npz", path=str(tmp_path / f"{name}.npz")))
        cfg = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, steps=3))
        out[name] = run_sweep(cfg, progress=False).curves["attn_relevant"]
    assert np.all(np.isnan(out["plain"]))
    np.testing.assert_allclose(out["masked"], 1.0, rtol=1e-6)


def test_npz_real_targets_are_regression(tmp_path):
    a = _arrays(labels=(0.0, 2.0, 0.5))
    np.savez(tmp_path / "r.npz", **a)
    u = load_npz(tmp_path / "r.npz")
    assert u.task == "regression"
    np.testing.assert_array_equal(u.y_train, a["y_train"].astype(np.float32))  # kept as they are
    assert parts.data.data_task(DataConfig(model="npz", path=str(tmp_path / "r.npz"))) == "regression"
    np.savez(tmp_path / "c.npz", **_arrays(labels=(0.0, 1.0)))
    assert load_npz(tmp_path / "c.npz").task == "classification"
    # each array on its own: 0/1 training labels with ±1 test labels are labels; -1/0/1 in one is not
    mixed = _arrays(labels=(0.0, 1.0))
    mixed["y_test"] = np.where(mixed["y_test"] == 1, 1.0, -1.0)
    np.savez(tmp_path / "m.npz", **mixed)
    u = load_npz(tmp_path / "m.npz")
    assert u.task == infer_task(tmp_path / "m.npz") == "classification"
    np.testing.assert_array_equal(u.y_train, np.where(mixed["y_train"] == 1, 1.0, -1.0))
    np.testing.assert_array_equal(u.y_test, mixed["y_test"])
    mixed["y_train"][:3] = (-1.0, 0.0, 1.0)
    np.savez(tmp_path / "m3.npz", **mixed)
    assert load_npz(tmp_path / "m3.npz").task == infer_task(tmp_path / "m3.npz") == "regression"


def test_npz_identical_trials_warn(tmp_path):
    import dataclasses

    from dynamics.sweeps.sweep import run_sweep

    np.savez(tmp_path / "w.npz", **_arrays())
    cfg = Config(data=DataConfig(model="npz", path=str(tmp_path / "w.npz")))
    cfg = dataclasses.replace(
        cfg,
        optim=dataclasses.replace(cfg.optim, steps=3),  # the one-trial run: the attention test's program
        sweep=dataclasses.replace(cfg.sweep, heads=(1,), trials=2, head_metrics="off"),  # not the subject
    )
    with pytest.warns(IdenticalTrialsWarning, match=r"the 2 trials repeat the same run"):
        run_sweep(cfg, progress=False)
    one = dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, trials=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdenticalTrialsWarning)
        run_sweep(one, progress=False)


def test_a_redefined_object_under_the_same_name_is_drawn_anew():
    class Const:
        sizes = {"T": 2, "d": 2}

        def __init__(self, value):
            self.value = value

        def setup(self, key, params):
            return {}

        def sample(self, world, key, n):
            X = jax.numpy.full((n, 2, 2), self.value, jax.numpy.float32)
            return X, jax.numpy.ones((n,), jax.numpy.float32), None

    draws = []
    for value in (1.0, 2.0):
        name = parts.DATA_MODELS.adopt(Const(value))
        data, _ = make_data(DataConfig(model=name, n_train=3, n_test=3), rng.seed(0), 1)
        draws.append(float(np.asarray(data.X_train).max()))
    assert draws == [1.0, 2.0]
