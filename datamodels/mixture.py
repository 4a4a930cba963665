"""Sparse tokenized Gaussian mixture: DM1 of Deora et al. (TMLR 2024) and its general form.

An example is X in R^{T x d} with label y in {-1, +1}. r of its T tokens are relevant,
x_t = mu_y + sigma g_t; the others are irrelevant, x_t = nu_{j_t} + sigma g_t with
j_t uniform on [M]; g_t ~ N(0, I_d / d), so a noise token has norm about sigma.
The means are orthonormal directions scaled by the signal norm S.

This module holds the generator (``tokenized_mixture``, ``dm1``), the means (``class_means``),
DM1's defaults and the geometries (re-exported from ``datamodels.defaults``, their
JAX-free home), and the argument checks the planted model shares.
"""

from __future__ import annotations

import math
import operator

import jax
import jax.numpy as jnp

from datamodels.defaults import DM1_DEFAULTS, GEOMETRIES
from datamodels.protocol import UNKNOWN, World, floor


def _check_int(name: str, value: object, *, lo: int, hi: int | None = None) -> int:
    """Return `value` as a Python int in [lo, hi], else raise a ValueError naming it."""
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r} must be an integer, not a bool")
    try:
        as_int = operator.index(value)
    except TypeError:
        raise ValueError(f"{name}={value!r} must be a Python integer (it fixes an array shape)") from None
    if as_int < lo or (hi is not None and as_int > hi):
        allowed = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name}={as_int} must be {allowed}")
    return as_int


MAX_ELEMENTS = 2**31  # n·T·d of one draw: 8 GiB of float32, beyond which XLA aborts the process


def _check_size(n: int, T: int, d: int) -> None:
    """Refuse a draw of more than MAX_ELEMENTS numbers before allocating (a process abort otherwise)."""
    if n * T * d > MAX_ELEMENTS:
        gib = n * T * d * 4 / 2**30
        raise ValueError(
            f"n·T·d = {n}·{T}·{d} numbers ({gib:.3g} GiB) is more than {MAX_ELEMENTS} in one draw"
        )


def _check_float(name: str, value: object, *, lo: float, hi: float | None = None):
    """Return a finite real in [lo, hi] as float; a traced value (vmap sweep) passes as is."""
    if isinstance(value, jax.core.Tracer):
        return value
    if isinstance(value, bool | str | bytes):
        raise ValueError(f"{name}={value!r} must be a real number, not a {type(value).__name__}")
    try:
        as_float = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"{name}={value!r} must be a real number") from None
    if not math.isfinite(as_float) or as_float < lo or (hi is not None and as_float > hi):
        allowed = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise ValueError(f"{name}={value!r} must be finite and {allowed}")
    return as_float


def _check_key(key: object) -> None:
    """A JAX PRNG key (``jax.random.PRNGKey(seed)`` or ``jax.random.key(seed)``), else a TypeError."""
    if isinstance(key, jax.core.Tracer):
        return
    typed = isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key) and key.shape == ()
    raw = hasattr(key, "shape") and hasattr(key, "dtype") and key.shape == (2,) and key.dtype == jnp.uint32
    if not (typed or raw):
        raise TypeError(f"key={key!r:.60} must be a JAX PRNG key: jax.random.PRNGKey(s) or jax.random.key(s)")


def _check_geometry(geometry: object) -> str:
    if geometry not in GEOMETRIES:
        raise ValueError(f"geometry={geometry!r} is not one of {GEOMETRIES}")
    return geometry  # type: ignore[return-value]


def class_means(
    d: int,
    *,
    signal: float = 1.0,
    n_irrelevant: int = 4,
    geometry: str = "antipodal",
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The mixture's means, deterministic: (mu_plus (d,), mu_minus (d,), nu (M, d)).

    mu_plus = S e_0; mu_minus = -S e_0 ("antipodal") or S e_1 ("orthogonal");
    nu_j = S e_{2+j} for j < M. All float32. Needs d >= M + 2 (e_1 stays reserved for
    mu_minus in both geometries, so the same d works for either).
    """
    geometry = _check_geometry(geometry)
    signal = _check_float("signal", signal, lo=0.0)
    n_irrelevant = _check_int("n_irrelevant", n_irrelevant, lo=0)
    d = _check_int("d", d, lo=1)
    if d < n_irrelevant + 2:
        raise ValueError(
            f"d={d} is too small for M={n_irrelevant} irrelevant means: the class and "
            f"irrelevant means are orthogonal, so d >= M + 2 = {n_irrelevant + 2} is needed"
        )
    eye = jnp.eye(d, dtype=jnp.float32)  # (d, d)
    mu_plus = signal * eye[0]  # (d,)
    mu_minus = -mu_plus if geometry == "antipodal" else signal * eye[1]  # (d,)
    nu = signal * eye[2 : 2 + n_irrelevant]  # (M, d)
    return mu_plus, mu_minus, nu


def _relevant_count(T: int, zeta: float, r: int | None) -> int:
    """r = max(1, round(zeta * T)), halves rounding up, unless `r` is given (then 1 <= r <= T)."""
    if r is None:
        zeta = _check_float("zeta", zeta, lo=0.0, hi=1.0)
        return max(1, math.floor(zeta * T + 0.5))  # round half up: zeta=0.25, T=10 -> 3
    return _check_int("r", r, lo=1, hi=T)


def _relevant_mask(key: jax.Array, n: int, T: int, r: int, first_relevant: bool) -> jax.Array:
    """(n, T) bool, True on each example's r relevant positions.

    Per example, the r positions with the smallest random uint32 sort keys: a uniform
    draw without replacement (jax.random.permutation sorts such keys too). argsort is
    stable, so key 0 at position 0 puts it first whenever first_relevant is set.
    """
    sort_keys = jax.random.bits(key, (n, T), jnp.uint32)  # (n, T)
    if first_relevant:
        sort_keys = sort_keys.at[:, 0].set(0)
    order = jnp.argsort(sort_keys, axis=1)  # (n, T) positions by key
    return jnp.argsort(order, axis=1) < r  # (n, T) rank of each position < r


def tokenized_mixture(
    key: jax.Array,
    n: int,
    *,
    T: int = 10,
    d: int = 32,
    zeta: float = 0.1,
    r: int | None = None,
    signal: float = 1.0,
    noise: float = 1.0,
    n_irrelevant: int = 4,
    geometry: str = "antipodal",
    first_relevant: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """n examples of the sparse tokenized mixture: (X (n, T, d), y (n,), mask (n, T)).

    X float32; y float32, uniform on {-1, +1}; mask bool, True on relevant tokens.
    r = max(1, round(zeta * T)) relevant positions (halves round up; `r` overrides
    `zeta` when given), drawn per example uniformly without replacement
    from the T positions; with `first_relevant`, position 0 is always relevant and the
    other r - 1 are drawn from the rest.
    Relevant token: mu_y + noise * g_t. Irrelevant token: nu_{j_t} + noise * g_t with
    j_t uniform on [M] (M = 0: noise * g_t). g_t ~ N(0, I_d / d). Means: `class_means`.

    Shape arguments (n, T, d, r, M) must be Python ints; `key` may be traced (jit, vmap).
    """
    _check_key(key)
    n = _check_int("n", n, lo=1)
    T = _check_int("T", T, lo=1)
    r = _relevant_count(T, zeta, r)
    noise = _check_float("noise", noise, lo=0.0)
    if not isinstance(first_relevant, bool):
        raise ValueError(f"first_relevant={first_relevant!r} must be True or False")
    mu_plus, mu_minus, nu = class_means(d, signal=signal, n_irrelevant=n_irrelevant, geometry=geometry)
    _check_size(n, T, int(nu.shape[-1]))
    M = nu.shape[0]
    key_y, key_pos, key_irr, key_noise = jax.random.split(key, 4)

    y = jnp.where(jax.random.bernoulli(key_y, 0.5, (n,)), 1.0, -1.0)  # (n,)
    y = y.astype(jnp.float32)

    mask = _relevant_mask(key_pos, n, T, r, first_relevant)  # (n, T)

    mu_y = jnp.where(y[:, None] > 0, mu_plus[None, :], mu_minus[None, :])  # (n, d)
    if M > 0:
        j = jax.random.randint(key_irr, (n, T), 0, M)  # (n, T)
        irrelevant = nu[j]  # (n, T, d)
    else:
        irrelevant = jnp.zeros((1, 1, d), jnp.float32)  # (1, 1, d) broadcasts
    means = jnp.where(mask[:, :, None], mu_y[:, None, :], irrelevant)  # (n, T, d)
    g = jax.random.normal(key_noise, (n, T, d), jnp.float32) / math.sqrt(d)  # (n, T, d)
    X = (means + noise * g).astype(jnp.float32)  # (n, T, d)
    return X, y, mask


def dm1(key: jax.Array, n: int, **overrides) -> tuple[jax.Array, jax.Array, jax.Array]:
    """DM1: `tokenized_mixture` with `DM1_DEFAULTS` (T=10, zeta=0.1, d=32, S=1,
    sigma=1, M=4, antipodal); keyword `overrides` replace any of them."""
    return tokenized_mixture(key, n, **{**DM1_DEFAULTS, **overrides})


MIXTURE_KNOBS = ("T", "d", "zeta", "r", "signal", "noise", "n_irrelevant", "geometry", "first_relevant")


class MixtureModel:
    """DM1 and the tokenized mixture as a data model (``datamodels.protocol``): the world holds
    the class and irrelevant means (they draw nothing: the setup key is unused); ``sample`` is
    ``tokenized_mixture`` with the world's parameters."""

    task = "classification"
    relevant_tokens = True

    def setup(self, key: jax.Array, params):
        kw = {k: getattr(params, k) for k in ("signal", "n_irrelevant", "geometry")}
        mu_plus, mu_minus, nu = class_means(params.d, **kw)
        unit_plus, unit_minus, unit_nu = class_means(params.d, **{**kw, "signal": 1.0})
        latents = {"mu_plus": mu_plus, "mu_minus": mu_minus, "nu": nu}
        planted = {"mu_plus": unit_plus, "mu_minus": unit_minus, "nu": unit_nu}  # nu: (M, d)
        return World(latents, planted, floor(UNKNOWN), params)

    def sample(self, world, key: jax.Array, n: int):
        return tokenized_mixture(key, n, **{k: getattr(world.params, k) for k in MIXTURE_KNOBS})


MIXTURE = MixtureModel()
