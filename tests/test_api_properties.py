"""Property-based misuse of the public API (hypothesis): arguments of every wrong kind give one
ValueError/TypeError (ConfigError is a ValueError) or exactly the result of the correctly typed
call, never another number and never a deep exception.

Each property runs twice: a small bounded set in the default suite (derandomized under
HYPOTHESIS_PROFILE=ci), and a long run under the ``stress`` marker (``make stress``). Sizes are
tiny and fixed, so the examples reuse the same compiled programs.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dynamics
from dynamics import Loss

FAST = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
LONG = settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
CLEAR = (ValueError, TypeError)  # ConfigError and DataError are ValueErrors


def both(**strategies):
    """The property as two tests: ``test_x`` (FAST, default suite) and ``test_x_long`` (stress)."""

    def wrap(fn):
        fast = FAST(given(**strategies)(fn))
        long = pytest.mark.stress(LONG(given(**strategies)(fn)))
        return fast, long

    return wrap


# Values of every kind a careless call might pass.
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 6),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["logistic", "exp", "hinge2", "sqrt", "mean", "sum", "first", "all", "zero", "normal"]),
    st.sampled_from(["full", "factored", "split", "1", "2.0", "nan", "-1", " 1"]),
    st.lists(st.integers(-2, 4), max_size=3),
    st.tuples(st.integers(1, 3)),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.sampled_from([np.int64(2), np.float32(0.5), np.array(2), np.array([1.0, 2.0]), object()]),
    st.sampled_from(list(Loss) + list(dynamics.Norm) + list(dynamics.Query) + list(dynamics.Init)),
)

Z = jnp.array([0.75, -0.5, 0.0, 2.0])
KEY = jax.random.PRNGKey(0)
X = jax.random.normal(KEY, (3, 4, 2))


def _is_real(v) -> bool:
    return isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool | np.bool_)


# Losses


def _loss_prop(loss):
    try:
        got = float(dynamics.mean_loss(Z, loss))
    except CLEAR as err:
        assert "loss=" in str(err)
        return
    member = loss if isinstance(loss, Loss) else Loss(loss)  # only the enum or its name gets here
    z = np.asarray(Z, np.float64)
    want = {
        Loss.LOGISTIC: np.log1p(np.exp(-z)),
        Loss.EXP: np.exp(-z),
        Loss.HINGE2: np.maximum(0.0, 1.0 - z) ** 2,
        Loss.SQUARE: (1.0 - z) ** 2,
        Loss.MSE: z**2,  # z are residuals for a regression loss
    }[member].mean()
    assert got == pytest.approx(want, rel=1e-6)


test_loss_of_any_kind, test_loss_of_any_kind_long = both(loss=junk)(_loss_prop)


def _error_rate_prop(values):
    z = jnp.asarray(np.array(values, np.float32))
    want = float(np.mean(~(np.asarray(z) > 0)))
    assert float(dynamics.error_rate(z)) == want  # NaN margins are errors, as z <= 0


test_error_rate_counts_nan_as_wrong, test_error_rate_counts_nan_as_wrong_long = both(
    # (no subnormals: XLA on the CPU flushes them to zero, so 1e-45 is a tie there, as JAX computes)
    values=st.lists(
        st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=False, width=32),
        min_size=4,
        max_size=4,
    )
)(_error_rate_prop)


# The model


def _head_norm_prop(n, norm):
    try:
        got = dynamics.head_norm(n, norm)
    except CLEAR as err:
        assert "n_heads=" in str(err) or "norm=" in str(err)
        return
    v = np.asarray(n, np.float64)  # a number, or one per run
    assert np.all(np.isfinite(v)) and np.all(v > 0)
    member = norm if isinstance(norm, dynamics.Norm) else dynamics.Norm(norm)
    want = {"sqrt": 1 / np.sqrt(v), "mean": 1 / v, "sum": 1.0}[member.value]
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-6)


test_head_norm_of_any_kind, test_head_norm_of_any_kind_long = both(
    n=junk, norm=st.one_of(junk, st.sampled_from(["sqrt", "mean", "sum"]))
)(_head_norm_prop)


def _init_prop(n_heads, d, scale, init):
    try:
        got = dynamics.init_params(KEY, n_heads, d, init=init, scale=scale)
    except CLEAR as err:
        assert any(f"{name}=" in str(err) or name in str(err) for name in ("n_heads", "d", "scale", "init"))
        return
    member = init if isinstance(init, dynamics.Init) else dynamics.Init(init)
    fixed = None if scale is None else float(np.asarray(scale))  # None is the default scale (1)
    want = dynamics.init_params(KEY, int(n_heads), int(d), init=member.value, scale=fixed)
    for k in ("U", "W"):
        np.testing.assert_array_equal(got[k], want[k])
        assert np.all(np.isfinite(got[k]))


sizes = st.one_of(st.sampled_from([2, np.int64(2)]), junk)
test_init_params_of_any_kind, test_init_params_of_any_kind_long = both(
    n_heads=sizes,
    d=sizes,
    scale=st.one_of(st.sampled_from([0.5, np.float32(0.5)]), junk),
    init=st.one_of(st.sampled_from(["zero", "normal"]), junk),
)(_init_prop)


def _logits_prop(h_u, h_w, d_u, d_w, d_x, query):
    params = {"U": jnp.ones((h_u, d_u)) * 0.1, "W": jnp.ones((h_w, d_w, d_w)) * 0.2}
    Xs = jnp.ones((3, 4, d_x)) * 0.3
    try:
        got = dynamics.logits(params, Xs, query=query)
    except CLEAR as err:
        assert any(s in str(err) for s in ("params", "X has shape", "query="))
        return
    assert h_u == h_w and d_u == d_w == d_x
    q = query if isinstance(query, dynamics.Query) else dynamics.Query(query)
    # Every token equal: attention is uniform, f_h = U_h·x for every head, Φ = √H · U_h·x.
    want = math.sqrt(h_u) * 0.1 * 0.3 * d_u
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5)
    assert q in dynamics.Query


small = st.integers(1, 2)
test_logits_refuse_mismatched_shapes, test_logits_refuse_mismatched_shapes_long = both(
    h_u=small,
    h_w=small,
    d_u=small,
    d_w=small,
    d_x=small,
    query=st.one_of(st.just("first"), st.just("all"), junk),
)(_logits_prop)


# Overrides: a value of the wrong kind is a ConfigError naming the field; a right one is set as given.

KNOBS = {
    "lr": ("optim", "lr"),
    "steps": ("optim", "steps"),
    "trials": ("sweep", "trials"),
    "loss": ("optim", "loss"),
    "optimizer": ("optim", "optimizer"),
    "heads": ("sweep", "heads"),
    "init_scale": ("model", "init_scale"),
    "seed": ("sweep", "seed"),
}
STRINGS = ("loss", "optimizer", "heads")  # a string for a numeric knob is argparse's (its own change)


def _real(section: str, field: str) -> bool:
    """A knob whose values are reals (its default a float)."""
    from dynamics.config.sections import SECTIONS

    f = SECTIONS[section].__dataclass_fields__.get(field) if section in SECTIONS else None
    return f is not None and isinstance(f.default, float)


def _overrides_prop(knob, value):
    if isinstance(value, str) and knob not in STRINGS:
        return
    try:
        cfg = dynamics.with_overrides(None, **{knob: value})
    except CLEAR as err:
        section, field = KNOBS[knob]
        assert field in str(err) or knob in str(err)
        return
    section, field = KNOBS[knob]
    got = getattr(getattr(cfg, section), field)
    if knob == "heads":
        assert all(isinstance(h, int) and h >= 1 for h in got)
    elif hasattr(value, "value") and not isinstance(value, np.ndarray | np.generic):
        assert got == value.value  # an enum member: its name
    elif isinstance(value, np.generic) or isinstance(value, np.ndarray) and value.ndim == 0:
        # a numpy scalar (or a 0-d array) is the Python number it holds (a real knob's: a float)
        want = float if _real(section, field) and not isinstance(value.item(), bool) else type(value.item())
        assert got == value and type(got) is want
    else:  # an int given to a real knob is the float it means (one setting, one config hash)
        want = float if _real(section, field) and type(value) is int else type(value)
        assert got == value and type(got) is want
    dynamics.config.schema.validate(cfg)  # and it is a valid config


test_overrides_of_any_kind, test_overrides_of_any_kind_long = both(
    knob=st.sampled_from(sorted(KNOBS)), value=junk
)(_overrides_prop)


# The engine's keywords: refused before anything runs, or the numbers of the default call.

SMALL = dict(heads=[1, 3], steps=6, trials=2, n_train=12, n_test=10, tokens=4, width=8, irrelevant_means=2)


@pytest.fixture(scope="module")
def reference():
    return dynamics.run_sweep("fig2", progress=False, **SMALL)


def _engine_prop(reference, key, value):
    try:
        got = dynamics.run_sweep("fig2", progress=False, **SMALL, **{key: value})
    except CLEAR as err:
        assert key in str(err)
        return
    assert value is None or (_is_real(value) and int(value) == value >= 1)
    np.testing.assert_array_equal(got.diverged_at, reference.diverged_at)
    for name, curve in reference.curves.items():  # chunk 1 (the default) or 2: one compiled call
        np.testing.assert_allclose(got.curves[name], curve, rtol=1e-6, atol=1e-7)


layout_values = st.one_of(
    st.sampled_from([1, 2, np.int64(1), None, -1, 0, 10**9, 1.0, 1.5, True, "1", [1], math.nan, object()])
)


@pytest.mark.slow
@pytest.mark.parametrize("key", ["packs_per_call", "chunk"])
@FAST
@given(value=layout_values)
def test_engine_keywords_of_any_kind(reference, key, value):
    _engine_prop(reference, key, value)


@pytest.mark.stress
@pytest.mark.parametrize("key", ["packs_per_call", "chunk"])
@LONG
@given(value=layout_values)
def test_engine_keywords_of_any_kind_long(reference, key, value):
    _engine_prop(reference, key, value)


# Figures: a stem keeps every character of its name.


def _stem_prop(tmp_path_factory, name):
    import matplotlib.pyplot as plt

    from figures import save_figure

    folder = tmp_path_factory.mktemp("stem")
    fig = plt.figure(figsize=(1, 1))
    paths = save_figure(fig, folder / name, dpi=20)
    base = name[:-4] if name.lower().endswith((".png", ".pdf")) else name
    assert [p.name for p in paths] == [base + ".png", base + ".pdf"]
    assert all(p.exists() for p in paths)


names = st.text(alphabet="abc_-.0123456789", min_size=1, max_size=12).filter(
    lambda s: s.strip(".") and s not in (".", "..") and not s.lower().endswith((".png", ".pdf"))
)
test_figure_stems_keep_their_names, test_figure_stems_keep_their_names_long = both(name=names)(_stem_prop)
