"""Ranges from what the arithmetic holds: every declared bound of a knob is enforced; a float32 run at
a large temperature is not a NaN "divergence" (the softmax's fused shift); a finite U with a large
norm logs a finite norm."""

from __future__ import annotations

import dataclasses
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dynamics import api, parts
from dynamics.config.overrides import apply_overrides
from dynamics.config.schema import Config, ConfigError, validate
from dynamics.config.sections import SECTIONS
from dynamics.core import activations
from dynamics.core import model as mdl
from dynamics.core.update import held_norm
from dynamics.parts import floats
from dynamics.parts.knobs import knob_of


def _past(spec) -> list:
    """Values just outside a knob's declared range (a real's upper bound: what float32, the default
    precision, holds of it where that is less than its ``hi``)."""
    out = []
    if isinstance(spec.lo, int):
        out += [spec.lo - 1] + ([spec.hi + 1] if spec.hi is not None else [])
        return out
    top = spec.upper()
    if spec.lo is not None:
        out.append(spec.lo if spec.lo_open else float(np.nextafter(spec.lo, -np.inf)))
    elif top is not None:  # no lower bound: |value| is bounded
        out.append(-float(np.nextafter(top, np.inf)))
    if top is not None:
        out.append(float(np.nextafter(top, np.inf)))
    return out


def _bounded_knobs():
    """(overrides that give the knob an effect, section, name, spec, default) for every declared
    bound: the sections' fields, and each data model's own parameters under that model."""
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            spec = knob_of(f)
            if spec is not None and (spec.lo is not None or spec.upper() is not None):
                yield {}, section, f.name, spec, f.default
    for model in parts.DATA_MODELS.values():
        for f in dataclasses.fields(model.schema) if model.schema else ():
            spec = knob_of(f)
            if spec is not None and (spec.lo is not None or spec.upper() is not None):
                yield {"model": model.name}, "data", f.name, spec, f.default


CASES = [
    (base, section, name, (value,) if isinstance(default, tuple) and name != "heads" else value)
    for base, section, name, spec, default in _bounded_knobs()
    for value in _past(spec)
]


def test_the_walk_finds_the_bounds_it_must():
    # the walk below covers the bounds the config held before they were declared with their knobs
    keys = {f"{s}.{n}" for _, s, n, _ in CASES}
    assert {"model.temperature", "optim.lr", "optim.steps", "sweep.heads", "sweep.seed", "data.T"} <= keys
    assert {"data.zeta", "data.teacher_heads", "data.copies", "data.label_noise"} <= keys


@pytest.mark.parametrize(("base", "section", "name", "value"), CASES, ids=lambda v: str(v))
def test_every_declared_bound_is_enforced(base, section, name, value):
    # a value just past the bound, set as a preset would (not given: no "has no effect" first)
    over = {section: {**base, name: (1, value) if name == "heads" else value}}
    if section == "data" and base:
        over = {"data": {**base, name: value}}
    cfg = apply_overrides(Config(), over, "test", explicit=False)
    with pytest.raises(ConfigError, match=rf"^{section}\.{name}=") as e:
        validate(cfg)
    assert "\n" not in str(e.value)


def test_the_bounds_keep_their_messages():
    # the wording the messages had before the bounds moved to the declarations
    cases = [
        (dict(temperature=0.0), r"^model.temperature=0.0 must be > 0.0$"),
        (dict(lr=2e30), r"^optim.lr=2e\+30 must be <= 1e\+30$"),
        (dict(steps=10**8 + 1), r"^optim.steps=100000001 must be <= 100000000$"),
        (dict(heads=(1, 0)), r"^sweep.heads=0 must be an integer >= 1$"),
        (dict(seed=-1), r"^sweep.seed=-1 must be an integer >= 0$"),
        (dict(log_points=1), r"^sweep.log_points=1 must be an integer >= 2$"),
    ]
    for kw, match in cases:
        with pytest.raises(ConfigError, match=match):
            validate(api.with_overrides(**kw))


def test_the_scaled_softmax_keeps_jax_numbers_where_they_hold():
    # bit for bit jax.nn.softmax (and its derivative) on queries whose exponentials hold, compiled
    s = jax.random.normal(jax.random.PRNGKey(0), (64, 3, 10)) * jnp.array([1.0, 30.0, 300.0])[None, :, None]
    ds = jax.random.normal(jax.random.PRNGKey(1), s.shape)
    ours = jax.jit(lambda s, ds: jax.jvp(activations.softmax_scaled, (s,), (ds,)))(s, ds)
    theirs = jax.jit(lambda s, ds: jax.jvp(lambda x: jax.nn.softmax(x, axis=-1), (s,), (ds,)))(s, ds)
    assert np.array_equal(ours[0], theirs[0])
    unsaturated = np.asarray(jnp.max(theirs[0], axis=-1) < 0.99)[..., None]
    assert unsaturated.any()
    assert np.array_equal(np.where(unsaturated, ours[1], 0), np.where(unsaturated, theirs[1], 0))


@pytest.mark.parametrize("activation", ["softmax", "softmax1"])
def test_saturated_attention_at_a_large_temperature_is_finite_in_float32(activation):
    # |β·s| ~ 1e16: inside a compiled kernel β·s − max is one fused multiply-add, whose exponent at
    # the largest score is the product's rounding error (± ~1e8): e^{·} was inf or 0, the weights
    # and gradients NaN. The one-hot weights of a float64 reference instead.
    kX, kU, kW = jax.random.split(jax.random.PRNGKey(3), 3)
    X = jax.random.normal(kX, (32, 6, 8))
    params = {"U": jax.random.normal(kU, (1, 8)), "W": jax.random.normal(kW, (1, 8, 8)) * 1e6}
    y = jnp.where(jnp.arange(32) % 2 == 0, 1.0, -1.0)

    def loss(p):
        f = mdl.head_outputs(p, X, "first", activation, 1e10)[:, 0]
        return jnp.mean(jnp.log1p(jnp.exp(-y * f)))

    value, grads = jax.jit(jax.value_and_grad(loss))(params)
    assert np.isfinite(value) and all(np.all(np.isfinite(g)) for g in grads.values())
    X64, W64, U64 = (np.asarray(a, np.float64) for a in (X, params["W"][0], params["U"][0]))
    scores = np.einsum("ntd,de,ne->nt", X64, W64, X64[:, 0])
    top = np.argmax(scores, axis=1)
    f = X64[np.arange(32), top] @ U64  # one-hot on the largest score
    if activation == "softmax1":  # the null token (score 0) takes it all where every score is below 0
        f = np.where(scores.max(axis=1) > 0, f, 0.0)
    np.testing.assert_allclose(value, np.mean(np.log1p(np.exp(-np.asarray(y) * f))), rtol=1e-5)


@pytest.mark.slow
def test_a_large_temperature_in_float32_is_the_float64_run():
    # β₀ = 1e10: XLA's fused β·s − max made e^{·} inf or 0 (NaN weights, a "divergence" at update 2)
    kw = dict(heads=(1,), steps=4, trials=1, log_every=1, n_train=20, n_test=20, progress=False)
    f32 = api.run_sweep(temperature=1e10, **kw)
    f64 = api.run_sweep(temperature=1e10, x64=True, **kw)
    assert not np.any(f32.diverged_at >= 0), f32.diverged_at
    a, b = np.asarray(f32.curves["train_loss"]), np.asarray(f64.curves["train_loss"])
    assert np.all(np.isfinite(a))
    np.testing.assert_allclose(a, b, rtol=1e-4)


def test_held_norm_is_plain_in_its_range_and_finite_beyond():
    x = jax.random.normal(jax.random.PRNGKey(2), (4, 50))
    scaled = x * jnp.array([1.0, 1e-3, 1e20, 1e37])[:, None]  # rows 3, 4: squares overflow float32
    top = jnp.max(jnp.abs(scaled), axis=1)
    norm = jax.jit(
        lambda v, m: held_norm(lambda s: jnp.sum(v * v if s is None else (v / s[:, None]) ** 2, axis=1), m)
    )(scaled, top)
    plain = jax.jit(lambda v: jnp.sqrt(jnp.sum(v * v, axis=1)))(scaled)
    assert np.array_equal(norm[:2], plain[:2])  # the plain range: the same numbers to the bit
    assert not np.isfinite(plain[2:]).any()
    ref = np.linalg.norm(np.asarray(scaled, np.float64), axis=1)
    np.testing.assert_allclose(np.asarray(norm, np.float64), ref, rtol=1e-6)


@pytest.mark.slow
def test_a_finite_U_with_a_large_norm_logs_its_norm():
    # readout step factor 1e20: ‖U‖ ~ 1e19, its squares past float32's max
    kw = dict(heads=(1, 2), steps=3, trials=1, log_every=1, head_every=1, save_params=True, n_train=20)
    r = api.run_sweep(readout_lr_factor=1e20, n_test=20, progress=False, **kw)
    U = np.asarray(r.params["U"], np.float64)  # (H index, trial, L_h, H_max, d)
    assert np.all(np.isfinite(U[~np.isnan(U)])) and np.nanmax(np.abs(U)) > 1e18
    per_head = np.sqrt(np.sum(U**2, axis=-1))  # (H index, trial, L_h, H_max)
    run = np.sqrt(np.nansum(U**2, axis=(-2, -1)))
    np.testing.assert_allclose(np.asarray(r.curves["head_u_norm"], np.float64), per_head, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(r.curves["u_norm"], np.float64), run, rtol=1e-6)
    for name in ("w_norm", "head_key_norm"):
        assert np.all(np.isfinite(np.asarray(r.curves[name])[..., 0])), name


# --- what float arithmetic holds: the bounds of the reals, per precision, and the products of knobs


def _reals():
    """Every declared real knob (a float, or a tuple of floats) with its Knob: the sections' and
    every data model's."""
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            if knob_of(f) is not None and isinstance(f.default, float):
                yield f"{section}.{f.name}", knob_of(f)
    for model in parts.DATA_MODELS.values():
        for f in dataclasses.fields(model.schema) if model.schema else ():
            d = f.default
            if isinstance(d, float) or (isinstance(d, tuple) and d and isinstance(d[0], float)):
                yield f"data.{f.name}", knob_of(f)


def test_every_real_knob_is_bounded_by_what_its_precision_holds():
    # each real has an upper bound in float32, never above what float32 holds of it (its power, 1 at
    # least: a value float32 holds as it is), and the same or a wider one in float64
    reals = list(_reals())
    assert {"model.temperature_decay", "data.signal", "data.gamma", "data.strengths"} <= {k for k, _ in reals}
    for key, spec in reals:
        f32, f64 = spec.upper(False), spec.upper(True)
        assert f32 is not None and f32 <= floats.held(spec.power or 1), (key, f32)
        assert f64 >= f32, key


@pytest.mark.parametrize("power", [1, 2, 3, 4])
@pytest.mark.parametrize("x64", [False, True])
def test_a_held_bound_is_the_largest_one_digit_value_whose_power_holds(power, x64):
    # v^p summed over 1/ε terms stays below the largest float; the next one-digit value's does not
    info = np.finfo(np.float64 if x64 else np.float32)
    assert (floats.FLOAT32_MAX, floats.FLOAT32_EPS) == (
        float(np.finfo(np.float32).max),
        float(np.finfo(np.float32).eps),
    )
    top = floats.held(power, x64)
    log_room = np.log10(float(info.max)) + np.log10(float(info.eps))
    assert power * np.log10(top) <= log_room
    digit = 10.0 ** np.floor(np.log10(top))
    assert power * np.log10(top + digit) > log_room


@pytest.mark.parametrize(
    ("model", "name", "value"),
    [
        ("single-location", "gamma", 1e10),
        ("single-location", "epsilon", 1e20),
        ("emergence", "target_noise", 1e20),
    ],
)
def test_a_real_past_float32_is_refused_naming_it_and_run_in_float64(model, name, value):
    base = dict(data_model=model, heads=(1,), trials=1, steps=2)
    match = rf"^data\.{name}={re.escape(repr(value))} must be <= .*float32.*--x64"
    with pytest.raises(ConfigError, match=match) as e:
        validate(api.with_overrides(**base, **{name: value}))
    assert "\n" not in str(e.value)
    assert getattr(validate(api.with_overrides(**base, x64=True, **{name: value})).data, name) == value


def _product_values(rule, factor: float) -> dict:
    """The rule's two knobs at values whose product is ``factor`` × float32's bound while the other
    rules hold: equal powers share it; else the knob of the lower power is small (1e-10; optim.steps,
    an integer, 1000) and the other makes the product."""
    top = floats.held(1)
    (a, pa), (b, pb) = rule.factors
    if pa == pb and "optim.steps" not in (a, b):
        v = (factor * top) ** (1 / (pa + pb))
        return {a: v, b: v}
    (small, ps), (big, pg) = sorted(rule.factors, key=lambda f: (f[0] != "optim.steps", f[1]))
    low = 1000 if small == "optim.steps" else 1e-10
    return {small: low, big: (factor * top / low**ps) ** (1 / pg)}


def _with(values: dict, **more):
    over = {}
    for key, v in values.items():
        section, name = key.split(".")
        over.setdefault(section, {})[name] = v
    for section, kw in more.items():
        over.setdefault(section, {}).update(kw)
    return apply_overrides(Config(), over, "test", explicit=False)


@pytest.mark.parametrize("rule", floats.PRODUCTS, ids=lambda r: r.symbol)
def test_a_product_of_knobs_past_what_float32_holds_is_refused_naming_both(rule):
    inside = _product_values(rule, 0.5)
    validate(_with(inside))  # half the bound: accepted
    past = _product_values(rule, 2.0)
    with pytest.raises(ConfigError) as e:
        validate(_with(past))
    message = str(e.value)
    assert "\n" not in message and "float32" in message, message
    for key, v in past.items():  # both knobs, their values and the allowed product
        assert f"{key}={v!r}" in message, message
    assert f"<= {floats.held(1):g}" in message, message
    validate(_with(past, sweep={"x64": True}))  # float64 holds it


def test_the_products_refuse_what_overflowed_float32():
    # η₀ or β₀ = 1e22 with the other at 1: NaN losses in float32 once (η·β² or η²·β past 3.4e38)
    for kw in (dict(lr=1e22), dict(temperature=1e22)):
        with pytest.raises(ConfigError, match=r"optim\.lr=.* and model\.temperature=.* form η₀"):
            validate(api.with_overrides(**kw))


@pytest.mark.parametrize("scale", [1.0, 1e-3, 1e3])
def test_head_diversity_is_the_plain_formula_to_the_bit_where_it_holds(scale):
    rng = np.random.default_rng(7)
    params = {
        "U": (rng.normal(size=(6, 5)) * scale).astype(np.float32),
        "W": (rng.normal(size=(6, 5, 5)) * scale).astype(np.float32),
    }
    params["W"][1] = params["W"][0]  # two heads alike: a zero distance among the others
    params["U"][1] = params["U"][0]
    active = np.array([True, True, True, True, False, False])
    member = np.array(
        [[True, False], [True, False], [True, True], [False, True], [False, True], [False, False]]
    )

    def plain(p, member):  # the formula before the held norm: √ of the largest Σx²
        flat = jnp.concatenate([v.reshape(v.shape[0], -1) for v in mdl.head_arrays(p).values()], axis=1)

        def to_head(f_h):
            diff = flat - f_h[None, :]
            return jnp.sum(diff * diff, axis=-1)

        dist2 = jax.lax.map(to_head, flat)
        pair = member[:, None, ...] & member[None, :, ...]
        dist2 = dist2[..., None] if member.ndim == 2 else dist2
        return jnp.sqrt(jnp.max(jnp.where(pair, dist2, 0.0), axis=(0, 1)))

    for m in (active, member):
        new = jax.jit(mdl.head_diversity)(params, m)
        old = jax.jit(plain)(params, m)
        assert np.asarray(new).shape == np.asarray(old).shape
        assert np.array_equal(np.asarray(new), np.asarray(old)), (new, old)
        assert np.all(np.asarray(new) > 0)


def test_head_diversity_of_huge_weights_is_finite():
    # entries ~1e25: Σx² overflows float32 (the plain formula's inf); the held norm is ‖θ_h − θ_h'‖
    rng = np.random.default_rng(8)
    W = rng.normal(size=(3, 4, 4)) * 1e25
    U = rng.normal(size=(3, 4)) * 1e25
    got = jax.jit(mdl.head_diversity)(
        {"U": U.astype(np.float32), "W": W.astype(np.float32)}, np.ones(3, bool)
    )
    flat = np.concatenate([U, W.reshape(3, -1)], axis=1)
    ref = max(np.linalg.norm(flat[i] - flat[j]) for i in range(3) for j in range(3))
    assert np.isfinite(got)
    np.testing.assert_allclose(float(got), ref, rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("init", ["zero", "normal"])
def test_dm1_at_the_edge_of_the_products_runs_finite_in_float32(init):
    # the largest β₀ the products let through at η₀ = 1, and at η₀ = 1e-10: no NaN in 8 updates
    # (β₀ = 1e22 at η₀ = 1 once gave NaN losses at the second update)
    edge = 0.99 * math.sqrt(floats.held(1) / 1e-10)
    kw = dict(heads=(1, 2), steps=8, trials=1, n_train=16, n_test=8, log_every=1, init=init)
    for over in (dict(temperature=floats.held(2)), dict(lr=1e-10, temperature=edge)):
        validate(api.with_overrides(**kw | over))  # accepted: inside every bound
        r = api.run_sweep(**kw, **over, progress=False)
        assert not np.any(r.diverged_at >= 0), (over, r.diverged_at)
        assert np.all(np.isfinite(r.curves["train_loss"])), over
