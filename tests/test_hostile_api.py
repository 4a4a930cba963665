"""A hostile pass over the Python API, the user data boundary and the comma lists, one test per
class of finding: each case is either refused in one line (a ValueError or TypeError raised by
mhsim's own code, naming the value) or gives the number an independent computation gives; never
a silently dropped setting, a number computed under other settings than the run's, or a deep
exception from JAX, numpy or cvxpy. Sizes are tiny (n = 8, T = 3, d = 4, one H, 2 steps)."""

from __future__ import annotations

import traceback
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dynamics import api

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(steps=2, trials=1, heads=[1], n_train=8, n_test=8, progress=False)
MM = dict(SMALL, data_model="max-margin", tokens=3, width=4)


def refused(call, *names: str) -> str:
    """``call()`` raises one ValueError/TypeError of one line, raised in mhsim's code (not in JAX,
    numpy, cvxpy or Python's argument binding deep inside), naming each of ``names``."""
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    message = str(info.value)
    assert "\n" not in message, message
    last = traceback.extract_tb(info.value.__traceback__)[-1].filename
    assert any(part in last for part in ("/dynamics/", "/datamodels/", "/figures/")), (last, message)
    for name in names:
        assert name in message, (name, message)
    return message


class Toy:
    """A regression data model of one's own: y = x_1 · v."""

    sizes = {"T": 3, "d": 4}
    task = "regression"

    def setup(self, key, p):
        return {"v": jax.random.normal(key, (p.d,))}

    def sample(self, world, key, n):
        X = jax.random.normal(key, (n, 3, 4))
        return X, X[:, 0] @ world["v"], None


class OtherTestTargets(Toy):
    """Its test set has targets (n, 2), its training set (n,)."""

    def sample_test(self, world, key, n):
        X = jax.random.normal(key, (n, 3, 4))
        y = X[:, 0] @ world["v"]
        return X, jnp.stack([y, y], axis=1), None


class NegativeFloor(Toy):
    def noise_floor(self, world):
        return jnp.float32(-0.5)


class VectorTargets(Toy):
    """Vector targets y (n, 2) whose θ(0) gives U a (d,) vector: the run's U is (d, 2)."""

    def sample(self, world, key, n):
        X = jax.random.normal(key, (n, 3, 4))
        y = X[:, 0] @ world["v"]
        return X, jnp.stack([y, -y], axis=1), None

    def initial_params(self, world, shapes):
        return {"U": world["v"]}


TOY = Toy()
OTHER_TEST_TARGETS = OtherTestTargets()
NEGATIVE_FLOOR = NegativeFloor()
VECTOR_TARGETS = VectorTargets()


def _npz(tmp_path) -> str:
    rs = np.random.default_rng(0)
    path = tmp_path / "f.npz"
    np.savez(
        path,
        X_train=rs.normal(size=(8, 3, 4)).astype("f4"),
        y_train=np.where(rs.normal(size=8) > 0, 1.0, -1.0).astype("f4"),
        X_test=rs.normal(size=(6, 3, 4)).astype("f4"),
        y_test=np.where(rs.normal(size=6) > 0, 1.0, -1.0).astype("f4"),
    )
    return str(path)


# 1. A setting that changes nothing is refused, never dropped.

IDLE = {
    "object+data_model": lambda tmp: api.run_sweep(data=TOY, data_model="planted", **SMALL),
    "file+data_model": lambda tmp: api.run_sweep(data=_npz(tmp), data_model="emergence", steps=2),
    "file+config's data.model": lambda tmp: api.run_sweep(
        api.with_overrides(data_model="planted"), data=_npz(tmp), steps=2
    ),
}


@pytest.mark.parametrize("case", IDLE, ids=list(IDLE))
def test_a_setting_that_changes_nothing_is_refused(case, tmp_path):
    refused(lambda: IDLE[case](tmp_path), "data", "data_model" if "config" not in case else "data.model")


def test_the_file_with_its_own_data_model_runs(tmp_path):
    """The pair that is one setting (the file and the file's model) is not refused."""
    result = api.run_sweep(
        data=_npz(tmp_path), data_model="npz", steps=1, heads=[1], trials=1, progress=False
    )
    assert result.config.data.model == "npz"


# 2. A number computed under the run's settings, or refused at the door.


def _maxmargin_attention_is_the_runs():
    """maxmargin_attn at --temperature 3 is the softmax of 3·scores of the saved W, recomputed."""
    from dynamics.sweeps.trials import trial_data

    result = api.run_sweep(temperature=3.0, diagnostics="maxmargin", save_params=True, **MM)
    W = np.asarray(result.curves["param_W"], np.float64)[0, 0, -1, 0]  # the last logged step, head 0
    X = np.asarray(trial_data(result.config, 0).X_train, np.float64)
    s = 3.0 * np.einsum("ntd,de,ne->nt", X, W, X[:, 0])
    A = np.exp(s - s.max(axis=1, keepdims=True))
    A /= A.sum(axis=1, keepdims=True)
    want = A[np.arange(len(A)), np.argmax(A, axis=1)].mean()
    got = result.curves["maxmargin_attn"][0, 0][np.isfinite(result.curves["maxmargin_attn"][0, 0])][-1]
    np.testing.assert_allclose(got, want, rtol=1e-6)


SETTINGS = {
    "maxmargin attention at the run's temperature": _maxmargin_attention_is_the_runs,
    "test targets of another shape": lambda: refused(
        lambda: api.run_sweep(data=OTHER_TEST_TARGETS, **SMALL), "test set", "(8, 2)", "(8,)"
    ),
}


@pytest.mark.parametrize("case", SETTINGS, ids=list(SETTINGS))
def test_numbers_are_computed_under_the_runs_settings(case):
    SETTINGS[case]()


# 3. Ranges no wider than the quantity: refused where nothing could mean the value.


def _emergence_frame(**levels):
    from dynamics.sweeps import emergence

    steps = np.arange(5)
    curves = {"attn_relevant": np.linspace(0.2, 0.9, 5)[None], "test_loss": np.linspace(1.0, 0.1, 5)[None]}
    return emergence.times(steps, curves, **levels)


def _cli(argv):
    from dynamics.cli.run import build_parser, config_from_args

    return config_from_args(build_parser().parse_args(argv))


def _cli_refused(argv, *names):
    with pytest.raises(SystemExit) as info:
        _cli(argv)
    assert info.value.code == 2


def _emergence_config(**kw):
    from dynamics.experiments import emergence

    return emergence.config({}, copy_logits="free", optimizer="sgd", **{"trials": 1, "steps": 4, **kw})


RANGES = {
    "emergence threshold=50": lambda: refused(lambda: _emergence_frame(threshold=50), "threshold=50"),
    "emergence threshold=0": lambda: refused(lambda: _emergence_frame(threshold=0), "threshold=0"),
    "emergence fraction=50": lambda: refused(lambda: _emergence_frame(fraction=50), "fraction=50"),
    "takeover threshold=2": lambda: refused(
        lambda: __import__("dynamics.experiments.specialisation", fromlist=["x"]).takeovers(
            np.ones((2, 1, 1)), np.arange(2), threshold=2
        ),
        "threshold=2",
    ),
    "strengths keyword 1,,2": lambda: refused(
        lambda: api.with_overrides(data_model="multi-location", strengths="1,,2"), "strengths", "1,,2"
    ),
    "strengths flag 1,,2": lambda: _cli_refused(["--data-model", "multi-location", "--strengths", "1,,2"]),
    "strengths flag 1,2,": lambda: _cli_refused(["--data-model", "multi-location", "--strengths", "1,2,"]),
    "diagnostics a,,b": lambda: refused(
        lambda: api.with_overrides(diagnostics="sharpness,,kernel"), "diagnostics", "sharpness,,kernel"
    ),
    "figures --steps 0,,10": lambda: refused(
        lambda: __import__("dynamics.cli.figures", fromlist=["x"])._int_list("--steps", "0,,10"), "0,,10"
    ),
    "figures --at H=1,,trial=0": lambda: refused(
        lambda: __import__("dynamics.cli.figures", fromlist=["x"])._at("H=1,,trial=0"), "H=1,,trial=0"
    ),
    "emergence steps=2.7": lambda: refused(lambda: _emergence_config(steps=2.7), "steps=2.7"),
    "emergence trials=2.0": lambda: refused(lambda: _emergence_config(trials=2.0), "trials=2.0"),
    "keyword steps=2.7": lambda: refused(lambda: api.with_overrides(steps=2.7), "steps", "2.7"),
    "noise_floor function -0.5": lambda: refused(
        lambda: api.run_sweep(data=NEGATIVE_FLOOR, **SMALL), "noise_floor", "-0.5"
    ),
}


@pytest.mark.parametrize("case", RANGES, ids=list(RANGES))
def test_values_outside_what_the_quantity_can_be_are_refused(case):
    RANGES[case]()


def test_emergence_config_keeps_an_integer_as_given():
    assert _emergence_config(steps=np.int64(4), trials=2).optim.steps == 4


# 4. One line, never a deep traceback; a numpy scalar is the Python number it holds.


def _grid_fit(result, *args, **kw):
    from dynamics.sweeps.emergence import grid_fit

    return grid_fit(result, *args, **kw)


def _numpy_scalars():
    cfg = api.with_overrides(lr=np.float32(0.5), trials=np.int64(2), heads=np.array([1, 2]))
    assert type(cfg.optim.lr) is float and cfg.optim.lr == 0.5
    assert type(cfg.sweep.trials) is int and cfg.sweep.heads == (1, 2)
    assert cfg.hash() == api.with_overrides(lr=0.5, trials=2, heads=[1, 2]).hash()


DEEP = {
    "initial_params U without o": lambda: refused(
        lambda: api.run_sweep(data=VECTOR_TARGETS, **SMALL), "initial_params", "'U'", "(4, 2)"
    ),
    "grid_fit of a sweep": lambda: refused(lambda: _grid_fit(object(), "T"), "GridResult"),
    "grid_fit of None": lambda: refused(lambda: _grid_fit(None, "T"), "GridResult"),
    "grid_fit misspelt keyword": lambda: pytest.raises(TypeError, _grid_fit, None, "T", treshold=0.3),
    "fit_power_law of text": lambda: refused(
        lambda: __import__("dynamics.sweeps.emergence", fromlist=["x"]).fit_power_law("a", [1, 2]), "x and t"
    ),
    "numpy scalar keywords": _numpy_scalars,
}


@pytest.mark.parametrize("case", DEEP, ids=list(DEEP))
def test_misuse_is_one_line_never_a_deep_traceback(case):
    DEEP[case]()


# 5. The position query: θ(0) from a world, and the max-margin view of its logits.


def _position_on_max_margin_data():
    result = api.run_sweep(query="position", **MM)
    assert np.all(np.isfinite(result.curves["train_loss"]))


def _position_maxmargin_diagnostic():
    """The max-margin view of the position logits: a^mm, the least-norm logits that put the selected
    position 1 above the others (every example selects the same one: the logits do not read X)."""
    result = api.run_sweep(query="position", diagnostics="maxmargin", save_params=True, **MM)
    summary = result.extra["diagnostics"]
    assert summary["solution"].startswith("a^mm")
    a = np.asarray(result.curves["param_a"], np.float64)[0, 0, -1, 0]  # (T,)
    T = a.size
    sel = int(np.argmax(a))
    a_mm = np.full(T, -1.0 / T)
    a_mm[sel] = (T - 1.0) / T  # min ‖a‖ s.t. a_sel - a_t >= 1: the closed form
    want = a @ a_mm / (np.linalg.norm(a) * np.linalg.norm(a_mm))
    cos = result.curves["maxmargin_cos"][0, 0]
    np.testing.assert_allclose(cos[np.isfinite(cos)][-1], want, rtol=1e-5)


POSITION = {
    "world θ(0)": _position_on_max_margin_data,
    "maxmargin diagnostic": _position_maxmargin_diagnostic,
}


@pytest.mark.parametrize("case", POSITION, ids=list(POSITION))
def test_the_position_query_runs_where_it_failed(case):
    POSITION[case]()
