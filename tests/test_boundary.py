"""The open boundary (``dynamics.parts.boundary``): what a user's data model, loss, attention, metric
or init file hands mhsim is refused in one ConfigError line naming the value and what is allowed,
before any compile, or used exactly as it came; ``trial_data`` is the run's data, bit for bit.

Each case was a silently wrong or mislabelled number (or a deep JAX error) before the checks."""

from __future__ import annotations

import dataclasses
import functools
import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_same_numbers

from dynamics import parts, run_sweep, trial_data
from dynamics.config.schema import (
    Config,
    ConfigError,
    DataConfig,
    IdenticalTrialsWarning,
    ModelConfig,
    OptimConfig,
    SweepConfig,
    identical_trials,
    validate,
)
from dynamics.core import rng
from dynamics.core.data import make_data
from dynamics.parts import boundary

N, T, D = 8, 4, 6


class Hostile:
    """declares T = 4, d = 6 and returns one chosen defect"""

    T, d = T, D
    relevant_tokens = True

    def __init__(self, defect: str | None = None, task: str = "classification", when: int | None = None):
        self.defect, self.task, self.when = defect, task, when

    def setup(self, key, params):
        return {"w": jax.random.normal(key, (D,), jnp.float32)}

    def sample(self, world, key, n):
        X = jax.random.normal(key, (n, T, D), jnp.float32)
        y = jnp.where(X[:, 0] @ world["w"] >= 0, 1.0, -1.0)  # (n,)
        mask = jnp.broadcast_to(jnp.arange(T)[None, :] == 0, (n, T))
        if self.when is not None and n != self.when:  # the defect only at this n
            return X, y, mask
        defect = self.defect
        if defect == "shape":
            X = jax.random.normal(key, (n, 5, 7), jnp.float32)
        elif defect == "fewer":
            X, y, mask = X[:-1], y[:-1], mask[:-1]
        elif defect == "y column":
            y = y[:, None]
        elif defect == "y short":
            y = y[:-1]
        elif defect == "0/1 labels":
            y = (y + 1) / 2
        elif defect == "±3 labels":
            y = 3 * y
        elif defect == "float mask":
            mask = jnp.full((n, T), 0.7, jnp.float32)
        elif defect == "mask shape":
            mask = jnp.ones((n, T + 1), bool)
        elif defect == "NaN in X":
            X = X.at[0, 1, 2].set(jnp.nan)
        elif defect == "inf in y":
            y = y.at[3].set(jnp.inf)
        elif defect == "integer X":
            X = jnp.round(X).astype(jnp.int32)
        elif defect == "complex y":
            y = y.astype(jnp.complex64)
        elif defect == "no mask":
            mask = None
        return X, y, mask


def _draw(model, n_train=N, n_test=N, trials=2):
    name = parts.DATA_MODELS.adopt(model)
    return make_data(DataConfig(model=name, n_train=n_train, n_test=n_test), rng.seed(0), trials)


DEFECTS = {  # each defect: the refusal's words (each names the value and what is allowed)
    "shape": r"X of shape \(8, 5, 7\), but the config has T=4, d=6: X must be \(n, T, d\) = \(8, 4, 6\)",
    "fewer": r"\(the training set\) returned 7 examples .*; it must return exactly n=8",
    "y column": r"returned y of shape \(8, 1\); y must be \(n,\) = \(8,\)",
    "y short": r"returned y of shape \(7,\); y must be \(n,\) = \(8,\)",
    "0/1 labels": r"y_train has labels \[0.0, 1.0\] .*classification labels must be -1 or \+1",
    "±3 labels": r"y_train has labels \[-3.0, 3.0\] .*classification labels must be -1 or \+1",
    "float mask": r"returned a mask of dtype float32; the mask must be bool",
    "mask shape": r"returned a mask of shape \(8, 5\); the mask must be \(n, T\) = \(8, 4\)",
    "NaN in X": r"X_train has 2 non-finite values \(e.g. nan\); X and y must be finite",
    "integer X": r"returned X of dtype int32; X must be a real floating array",
    "complex y": r"returned y of dtype complex64; y must be real",
    "no mask": r"says relevant_tokens=True but its sample returned mask None",
}


@pytest.mark.parametrize("defect", list(DEFECTS))
def test_a_data_model_output_mhsim_cannot_simulate_is_refused_in_one_line(defect):
    with pytest.raises(ConfigError, match=DEFECTS[defect]) as info:
        _draw(Hostile(defect))
    assert str(info.value).startswith("data.model=") and "\n" not in str(info.value)


def test_regression_targets_may_be_any_finite_number_but_not_inf():
    data, _ = _draw(Hostile("±3 labels", task="regression"))  # ±3 targets: a regression's own
    assert set(np.unique(np.asarray(data.y_train)).tolist()) <= {-3.0, 3.0}
    with pytest.raises(ConfigError, match=r"y_train has 2 non-finite values \(e.g. inf\)"):
        _draw(Hostile("inf in y", task="regression"))


def test_the_test_set_must_have_n_test_examples_too():
    with pytest.raises(ConfigError, match=r"sample\(world, key, n=5\) \(the test set\) returned 4 examples"):
        _draw(Hostile("fewer", when=5), n_test=5)


def test_an_online_batch_must_have_batch_size_examples():
    model = Hostile("fewer", when=4)
    with pytest.raises(
        ConfigError, match=r"sample\(world, key, n=4\) \(an online batch\) returned 3 examples"
    ):
        run_sweep(
            data=model, optimizer="sgd", sampling="online", batch_size=4, heads=[1], steps=2, trials=1,
            n_test=N, progress=False,
        )  # fmt: skip


def test_valid_output_is_used_exactly_as_it_came():
    model = Hostile()
    data, _ = _draw(model)
    # the same draws by hand: trial i's key fold_in(seed key, i), split into setup, train, test keys
    # (derived in numpy by dynamics.core.rng: jax.random's keys bit for bit, tests/test_rng.py)
    # whole arrays to numpy, then the trial: indexing a jax array op by op compiles a slice
    made = [np.asarray(a) for a in (data.X_train, data.y_train, data.mask_train, data.X_test)]
    for i in range(2):
        hand = _by_hand(rng.split(rng.fold_in(rng.seed(0), i), 3), model)  # X, y, mask, X_test
        for got, want in zip(made, hand, strict=True):
            np.testing.assert_array_equal(got[i], np.asarray(want))


@functools.partial(jax.jit, static_argnums=1)
def _by_hand(raw_keys, model):
    """setup, then the training and test samples of one trial, as one program for both trials (op
    by op, the draws compiled ~25 programs); make_data's program draws them jitted too."""
    k_setup, k_train, k_test = rng.wrap(raw_keys)
    world = model.setup(k_setup, None)
    X, y, mask = model.sample(world, k_train, N)
    return X, y, mask, model.sample(world, k_test, N)[0]


# T and d from one traced sample.


class Undeclared:
    """declares no sizes: T = 5 and d = 3 are what sample returns"""

    def setup(self, key, params):
        return {}

    def sample(self, world, key, n):
        X = jax.random.normal(key, (n, 5, 3), jnp.float32)
        return X, jnp.where(X[:, 0, 0] >= 0, 1.0, -1.0), None


def test_t_and_d_are_inferred_from_one_traced_sample_and_checked_when_given():
    name = parts.DATA_MODELS.adopt(Undeclared())
    cfg = validate(Config(data=DataConfig(model=name, n_train=N, n_test=N)))
    assert (cfg.data.T, cfg.data.d) == (5, 3)  # what results.json will state
    assert validate(Config(data=DataConfig(model=name, n_train=N, T=5))).data.d == 3
    with pytest.raises(
        ConfigError, match=r"returned X of shape \(8, 5, 3\), but the config has T=4: X must be"
    ):
        validate(Config(data=DataConfig(model=name, n_train=N, n_test=N, T=4)))
    with pytest.raises(ConfigError, match=r"returned X of shape \(8, 5, 3\), but the config has T=5, d=2"):
        make_data(DataConfig(model=name, n_train=N, n_test=N, T=5, d=2), rng.seed(0), 1)


# User parts: losses (elementwise), attentions (shape, per query), metrics (real).


def mean_of_margins(z):
    return jnp.mean(z)


def centred(z):
    return z - jnp.mean(z)


def half_square(z):
    return 0.5 * (1.0 - z) ** 2


def first_two(scores):
    return jax.nn.softmax(scores, axis=-1)[..., :2]


def over_everything(scores):
    return jnp.exp(scores) / jnp.sum(jnp.exp(scores))


def softmax_last(scores):
    return jax.nn.softmax(scores, axis=-1)


@pytest.mark.parametrize(
    ("registry", "fn", "message"),
    [
        ("LOSSES", mean_of_margins, r"returned shape \(\) for a vector of 7 margins; a loss is elementwise"),
        ("LOSSES", centred, r"is not elementwise: ℓ of a vector differs from ℓ of its entries"),
        ("ACTIVATIONS", first_two, r"returned weights of shape \(2, 3, 2\) for scores of shape \(2, 3, 5\)"),
        ("ACTIVATIONS", over_everything, r"mixes queries: a query's weights must depend on its own T scores"),
    ],
)
def test_a_user_loss_or_attention_that_is_not_one_is_refused_when_named(registry, fn, message):
    field = getattr(parts, registry).field
    with pytest.raises(ConfigError, match=rf"^{field}='.*{fn.__name__}' {message}"):
        getattr(parts, registry).adopt(fn)


def test_a_user_loss_and_attention_that_are_elementwise_and_per_query_are_accepted():
    loss = parts.LOSSES.get(parts.LOSSES.adopt(half_square))
    assert loss.load() is half_square
    assert parts.ACTIVATIONS.get(parts.ACTIVATIONS.adopt(softmax_last)).load() is softmax_last


def test_a_complex_metric_is_refused_not_cast_to_its_real_part():
    with pytest.raises(
        ConfigError, match=r"^metric 'phase' returned a complex array \(complex64\); metrics must be real"
    ):
        run_sweep(
            heads=[1], steps=2, trials=1, n_train=N, n_test=N, tokens=T, width=D, progress=False,
            metrics={"phase": lambda params, data: jnp.sum(params["U"]) * 1j},
        )  # fmt: skip
    # real jax arrays: accepted (put from numpy: jnp.zeros and jnp.asarray compiled a program each)
    boundary.check_metric("ok", jax.device_put(np.zeros(3, np.float32)))
    boundary.check_metric("ok", jax.device_put(np.zeros(3, bool)))


@pytest.mark.parametrize("value", [None, "value", {"a": 1}])
def test_a_metric_that_is_no_array_is_refused_naming_it(value):
    with pytest.raises(
        ConfigError, match=r"^metric 'm' returned .*; a metric must return a real numeric array"
    ):
        boundary.check_metric("m", value)
    boundary.check_metric("m", 2.5)  # a number: accepted, read as an array


@pytest.mark.parametrize("value", [-0.5, "tiny", float("inf"), True, [0.1, 0.2]])
def test_a_declared_noise_floor_outside_what_is_allowed_is_refused(value):
    with pytest.raises(
        ConfigError, match=r"^data\.model='m:x' has noise_floor=.*; allowed: a finite real >= 0"
    ):
        boundary.check_noise_floor("m:x", value)


@pytest.mark.parametrize("value", [None, 0, 0.25, np.float32(1.0), float("nan"), lambda world: 0.1])
def test_a_declared_noise_floor_that_is_allowed_passes(value):
    assert boundary.check_noise_floor("m:x", value) is None


def test_an_npz_key_like_a_known_one_misspelt_is_refused(tmp_path):
    from datamodels import load_npz
    from datamodels.npz import DataError

    X, y = np.zeros((4, 2, 3), np.float32), np.array([1.0, -1.0, 1.0, -1.0], np.float32)
    arrays = {"X_train": X, "y_train": y, "X_test": X, "y_test": y}
    np.savez(tmp_path / "typo.npz", **arrays, mask_tarin=np.ones((4, 2), bool))
    with pytest.raises(DataError, match=r"mask_tarin.*did you mean 'mask_train'.*allowed: X_train"):
        load_npz(tmp_path / "typo.npz")
    np.savez(tmp_path / "notes.npz", **arrays, notes=np.arange(3))  # an unrelated key: ignored
    assert load_npz(tmp_path / "notes.npz").X_train.shape == (4, 2, 3)


# --init-from beyond float32, identical trials.


def _init_cfg(path, trials=1, data=None, **model):
    return Config(
        data=data or DataConfig(model="dm1", T=T, d=D, n_train=N, n_test=N),
        model=ModelConfig(init_from=str(path), **model),
        sweep=SweepConfig(heads=(1,), trials=trials),
    )


def test_init_from_beyond_float32_is_refused_at_load(tmp_path):
    U, W = np.zeros((1, D)), np.zeros((1, D, D))
    U[0, 2] = -1e39  # float64 holds it; the simulation's float32 would start at -inf ("diverged at step 0")
    np.savez(tmp_path / "big.npz", U=U, W=W)
    with pytest.raises(ConfigError, match=r"'U' has 1 values beyond float32's range \(e.g. -1e\+39\)"):
        validate(_init_cfg(tmp_path / "big.npz"))
    U[0, 2] = 3.0e38  # within range: accepted
    np.savez(tmp_path / "ok.npz", U=U, W=W)
    assert validate(_init_cfg(tmp_path / "ok.npz")).model.init_from


def test_a_per_trial_init_file_does_not_warn_of_identical_trials(tmp_path):
    g = np.random.default_rng(0)
    arrays = {"X_train": g.normal(size=(N, T, D)), "y_train": g.choice([-1.0, 1.0], N)}
    arrays.update({"X_test": g.normal(size=(N, T, D)), "y_test": g.choice([-1.0, 1.0], N)})
    np.savez(tmp_path / "d.npz", **arrays)
    data = DataConfig(model="npz", path=str(tmp_path / "d.npz"))
    np.savez(tmp_path / "each.npz", U=g.normal(size=(2, 1, D)), W=g.normal(size=(2, 1, D, D)))
    np.savez(tmp_path / "shared.npz", U=g.normal(size=(1, D)), W=g.normal(size=(1, D, D)))
    assert identical_trials(validate(_init_cfg(tmp_path / "each.npz", 2, data))) is None  # they differ
    why = identical_trials(validate(_init_cfg(tmp_path / "shared.npz", 2, data)))
    assert why is not None and "starts every trial from the same θ(0)" in why
    with pytest.raises(ConfigError, match=r"model.init='normal' was given but has no effect: model.init_"):
        validate(_init_cfg(tmp_path / "shared.npz", 2, data, init="normal"))  # the file sets θ(0)
    sgd = dataclasses.replace(
        _init_cfg(tmp_path / "shared.npz", 2, data), optim=OptimConfig(optimizer="sgd", batch_size=4)
    )
    assert identical_trials(validate(sgd)) is None  # each trial its own batches
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdenticalTrialsWarning)
        identical_trials(validate(_init_cfg(tmp_path / "each.npz", 2, data)))


# trial_data: the run's own data; results whose direction names were reordered.


@pytest.mark.slow
def test_trial_data_is_what_the_run_trains_and_tests_on(tmp_path):
    cfg = Config(
        data=DataConfig(model="dm1", T=T, d=D, n_train=N, n_test=12),
        optim=OptimConfig(steps=6, lr=0.5),
        sweep=SweepConfig(heads=(1, 2), trials=2, seed=3, head_metrics="off"),  # not the subject here
    )
    result = run_sweep(cfg, progress=False)
    mine = trial_data(cfg, 1)
    assert mine.X_train.shape == (N, T, D) and mine.mask_test.shape == (12, T) and mine.world is not None
    mine.save(tmp_path / "trial1.npz")
    alone = run_sweep(
        dataclasses.replace(
            cfg, data=DataConfig(model="npz", path=str(tmp_path / "trial1.npz")),
            sweep=dataclasses.replace(cfg.sweep, trials=1),
        ),
        progress=False,
    )  # fmt: skip
    for name in ("train_loss", "test_loss", "train_error", "test_error", "margin", "attn_relevant"):
        assert_same_numbers(alone.curves[name][:, 0], result.curves[name][:, 1], err_msg=name)
    with pytest.raises(ConfigError, match=r"^trial=2 must be an integer in \[0, 2\)"):
        trial_data(cfg, 2)


def test_results_with_reordered_direction_names_are_refused(tmp_path):
    from dynamics import load_results
    from dynamics.sweeps.result_files import write_results

    cfg = Config(
        data=DataConfig(model="dm1", T=T, d=D, n_train=N, n_test=N),
        optim=OptimConfig(steps=2),
        sweep=SweepConfig(heads=(1,), trials=1, head_metrics="on"),
    )
    write_results(run_sweep(cfg, progress=False), tmp_path)
    names = load_results(tmp_path).extra["directions"]
    assert names[:3] == ["mu_minus", "mu_plus", "nu_0"]  # DM1's, in sorted order
    doc = json.loads((tmp_path / "results.json").read_text())
    doc["directions"] = [names[1], names[0], *names[2:]]  # the cosine columns would swap names
    (tmp_path / "results.json").write_text(json.dumps(doc))
    with pytest.raises(
        ConfigError, match=r"directions \['mu_plus', .* are not its data model's.*damaged or edited"
    ):
        load_results(tmp_path)
