"""Property test of the open boundary (hypothesis): generated user data models, losses, attentions
and metrics with wrong shapes, dtypes, label sets, masks and non-finite values end in a ConfigError
(the documented refusal) or are used exactly as they came; never another exception, never another
number. What each case must give is decided by a numpy oracle written from the data-model docs
(``datamodels.protocol``, ``dynamics.parts.boundary``), not by the checks themselves.

A small derandomized budget in the default run; ``make stress`` runs a large one."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dynamics import parts
from dynamics.config.schema import ConfigError, DataConfig
from dynamics.core import rng
from dynamics.core.data import make_data
from dynamics.parts import boundary

SMALL = settings(max_examples=8, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
PARTS = settings(max_examples=12, derandomize=True, deadline=None, suppress_health_check=list(HealthCheck))
LARGE = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))

X_DTYPES = ["float32", "float16", "int32", "bool", "complex64"]
Y_DTYPES = ["float32", "int32", "bool", "complex64"]
MASKS = ["none", "bool", "per-feature", "float", "int", "wrong T", "1-D"]


@st.composite
def specs(draw) -> dict:
    """One hostile data model: what its sample returns for each n asked."""
    return dict(
        T=draw(st.sampled_from([2, 3])),
        d=draw(st.sampled_from([2, 3])),
        declare=draw(st.sampled_from(["none", "right", "wrong"])),
        n_off=draw(st.sampled_from([0, 0, 0, -1, 1])),
        x_dtype=draw(st.sampled_from(X_DTYPES)),
        x_bad=draw(st.sampled_from([None, None, np.nan, np.inf, -np.inf])),
        y_shape=draw(st.sampled_from(["n", "n", "n1", "short", "scalar"])),
        y_dtype=draw(st.sampled_from(Y_DTYPES)),
        y_values=draw(st.sampled_from(["pm1", "pm1", "01", "pm3", "real"])),
        y_bad=draw(st.sampled_from([None, None, np.nan, np.inf])),
        task=draw(st.sampled_from(["classification", "regression"])),
        mask=draw(st.sampled_from(MASKS)),
        seed=draw(st.integers(0, 2**16)),
    )


def arrays(spec: dict, n: int):
    """The numpy arrays the model returns when asked for n examples (n + n_off of them)."""
    g = np.random.default_rng([spec["seed"], n])
    m, T, d = n + spec["n_off"], spec["T"], spec["d"]
    X = g.normal(size=(m, T, d)).astype(np.float32)
    if spec["x_bad"] is not None:
        X[g.integers(m), g.integers(T), g.integers(d)] = spec["x_bad"]
    if spec["x_dtype"] in ("int32", "bool"):  # a NaN or inf has no integer value
        X = np.nan_to_num(X, nan=0.0, posinf=9.0, neginf=-9.0)
    X = X.astype(spec["x_dtype"])
    y = {"pm1": g.choice([-1.0, 1.0], m), "01": g.choice([0.0, 1.0], m), "pm3": g.choice([-3.0, 3.0], m)}.get(
        spec["y_values"], g.normal(size=m)
    )
    y[0] = 1.0 if spec["y_values"] != "real" else y[0]  # both labels present where it matters
    if spec["y_bad"] is not None:
        y[-1] = spec["y_bad"]
    y = y.astype(np.float32)
    y = {"n1": y[:, None], "short": y[:-1], "scalar": y[0]}.get(spec["y_shape"], y)
    if spec["y_dtype"] in ("int32", "bool"):
        y = np.nan_to_num(y, nan=0.0, posinf=9.0, neginf=-9.0)
    y = np.asarray(y).astype(spec["y_dtype"])
    pos = g.integers(T, size=m)
    one = np.arange(T)[None, :] == pos[:, None]  # (m, T)
    mask = {
        "none": None,
        "bool": one,
        "per-feature": np.stack([one, ~one], axis=1),  # (m, 2, T)
        "float": one.astype(np.float32) * 0.7,
        "int": one.astype(np.int32),
        "wrong T": np.ones((m, T + 1), bool),
        "1-D": one[:, 0],
    }[spec["mask"]]
    return X, y, mask


def oracle(spec: dict, n_train: int, n_test: int) -> bool:
    """Whether mhsim can simulate this model (the protocol's rules, in numpy)."""
    for n in (n_train, n_test):
        X, y, mask = arrays(spec, n)
        if spec["n_off"] != 0 or spec["declare"] == "wrong" or X.dtype.kind != "f":
            return False
        if np.shape(y) != (n,) or y.dtype.kind not in "fi":
            return False
        if mask is not None and (mask.dtype != bool or mask.shape not in [(n, spec["T"]), (n, 2, spec["T"])]):
            return False
        if not (np.all(np.isfinite(X.astype(np.float64))) and np.all(np.isfinite(y.astype(np.float64)))):
            return False
        if spec["task"] == "classification" and not np.all(np.isin(y, (-1, 1))):
            return False
    return True


def model_of(spec: dict):
    class Generated:
        """a generated data model"""

        task = spec["task"]
        if spec["declare"] != "none":
            sizes = {"T": spec["T"] + (spec["declare"] == "wrong"), "d": spec["d"]}

        def setup(self, key, params):
            return {}

        def sample(self, world, key, n):
            X, y, mask = arrays(spec, n)
            return jnp.asarray(X), jnp.asarray(y), None if mask is None else jnp.asarray(mask)

    return Generated()


def check_data_model(spec: dict) -> None:
    n_train, n_test = 5, 3
    name = parts.DATA_MODELS.adopt(model_of(spec))
    try:
        data, _ = make_data(DataConfig(model=name, n_train=n_train, n_test=n_test), rng.seed(0), 1)
    except ConfigError as err:
        assert not oracle(spec, n_train, n_test), f"refused a valid model: {err}"
        assert "\n" not in str(err)
        return
    assert oracle(spec, n_train, n_test), f"accepted {spec}"
    for key, n in (("train", n_train), ("test", n_test)):  # exactly the model's arrays, no cast but y's
        X, y, _ = arrays(spec, n)
        np.testing.assert_array_equal(np.asarray(getattr(data, f"X_{key}")[0]), X)
        got = np.asarray(getattr(data, f"y_{key}")[0])
        np.testing.assert_array_equal(got, y.astype(np.float32) if y.dtype.kind == "i" else y)


LOSSES = [  # (ℓ(z) with a parameter a, is it a loss mhsim can use)
    (lambda a: lambda z: a * z**2, True),
    (lambda a: lambda z: jnp.exp(-a * z), True),
    (lambda a: lambda z: jnp.logaddexp(0.0, -a * z), True),
    (lambda a: lambda z: jnp.maximum(0.0, 1.0 - a * z) ** 2, True),
    (lambda a: lambda z: jnp.mean(a * z), False),
    (lambda a: lambda z: a * z - jnp.mean(z), False),
    (lambda a: lambda z: a * jnp.cumsum(z), False),
    (lambda a: lambda z: a * jnp.sort(-z), False),
    (lambda a: lambda z: a * z[::-1], False),
    (lambda a: lambda z: jnp.sum(a * z**2, keepdims=True), False),
    (lambda a: lambda z: (a * z).astype(jnp.complex64), False),
    (lambda a: lambda z: a * z > 0, False),
]
ATTENTIONS = [  # (σ(scores) with a parameter a, is it an attention mhsim can use)
    (lambda a: lambda s: jax.nn.softmax(a * s, axis=-1), True),
    (lambda a: lambda s: jax.nn.sigmoid(a * s), True),
    (lambda a: lambda s: a * s, True),
    (lambda a: lambda s: jax.nn.relu(a * s) / (1.0 + jnp.sum(jax.nn.relu(a * s), -1, keepdims=True)), True),
    (lambda a: lambda s: jax.nn.softmax(a * s, axis=-1)[..., :-1], False),
    (lambda a: lambda s: jax.nn.softmax(a * s, axis=0), False),
    (lambda a: lambda s: jnp.exp(a * s) / jnp.sum(jnp.exp(a * s)), False),
    (lambda a: lambda s: jnp.sum(a * s, axis=-1), False),
    (lambda a: lambda s: jnp.swapaxes(a * s, 0, 1), False),
    (lambda a: lambda s: (a * s).astype(jnp.complex64), False),
]


def check_part(registry, table, index: int, a: float) -> None:
    make, usable = table[index]
    fn = make(a)
    try:
        name = registry.adopt(fn)
    except ConfigError as err:
        assert not usable, f"refused a usable part: {err}"
        assert str(err).startswith(registry.field) and "\n" not in str(err)
        return
    assert usable, f"accepted part {index} with a={a}"
    assert registry.get(name).load() is fn  # used as it came


def check_metric(dtype: str, shape: tuple[int, ...]) -> None:
    value = jnp.zeros(shape, dtype)
    try:
        boundary.check_metric("m", value)
    except ConfigError as err:
        assert dtype.startswith("complex"), f"refused a real metric: {err}"
        return
    assert not dtype.startswith("complex")


PARAMETER = st.floats(0.25, 3.0)
METRIC_DTYPES = st.sampled_from(["float32", "float16", "int32", "bool", "complex64"])
SHAPES = st.sampled_from([(), (3,), (2, 2)])


@SMALL
@given(specs())
def test_generated_data_models_are_refused_or_used_as_they_came(spec):
    check_data_model(spec)


@PARTS
@given(st.integers(0, len(LOSSES) - 1), PARAMETER, st.integers(0, len(ATTENTIONS) - 1), METRIC_DTYPES, SHAPES)
def test_generated_losses_attentions_and_metrics_are_refused_or_used(loss, a, attention, dtype, shape):
    check_part(parts.LOSSES, LOSSES, loss, a)
    check_part(parts.ACTIVATIONS, ATTENTIONS, attention, a)
    check_metric(dtype, shape)


@pytest.mark.stress
@LARGE
@given(specs())
def test_generated_data_models_large_budget(spec):
    check_data_model(spec)


@pytest.mark.stress
@LARGE
@given(st.integers(0, len(LOSSES) - 1), PARAMETER, st.integers(0, len(ATTENTIONS) - 1), METRIC_DTYPES, SHAPES)
def test_generated_parts_large_budget(loss, a, attention, dtype, shape):
    check_part(parts.LOSSES, LOSSES, loss, a)
    check_part(parts.ACTIVATIONS, ATTENTIONS, attention, a)
    check_metric(dtype, shape)
