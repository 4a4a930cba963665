"""Ranges from what the arithmetic holds: every declared bound of a knob is enforced; a float32 run at
a large temperature is not a NaN "divergence" (the softmax's fused shift); a finite U with a large
norm logs a finite norm."""

from __future__ import annotations

import dataclasses

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
from dynamics.parts.knobs import knob_of


def _past(spec) -> list:
    """Values just outside a knob's declared range."""
    out = []
    if isinstance(spec.lo, int):
        out += [spec.lo - 1] + ([spec.hi + 1] if spec.hi is not None else [])
        return out
    if spec.lo is not None:
        out.append(spec.lo if spec.lo_open else float(np.nextafter(spec.lo, -np.inf)))
    if spec.hi is not None:
        out.append(float(np.nextafter(spec.hi, np.inf)))
    return out


def _bounded_knobs():
    """(overrides that give the knob an effect, section, name, spec) for every declared bound: the
    sections' fields, and each data model's own parameters under that model."""
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            spec = knob_of(f)
            if spec is not None and (spec.lo is not None or spec.hi is not None):
                yield {}, section, f.name, spec
    for model in parts.DATA_MODELS.values():
        for f in dataclasses.fields(model.schema) if model.schema else ():
            spec = knob_of(f)
            if spec is not None and (spec.lo is not None or spec.hi is not None):
                yield {"model": model.name}, "data", f.name, spec


CASES = [
    (base, section, name, value) for base, section, name, spec in _bounded_knobs() for value in _past(spec)
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
