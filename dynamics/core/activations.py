"""σ, the attention activations over a query's scores (``dynamics.parts.ACTIVATIONS`` points here):
softmax and softmax1, whose derivatives stay exact where one weight approaches 1, and the
unnormalised identity, sigmoid and erf. The rest of Φ's math is ``dynamics.core.model``'s.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

# The softmaxes' derivative, exact where one weight approaches 1 (saturation).
#
# Both softmaxes have the Jacobian ∂A_t/∂s_u = A_t (δ_tu − A_u) (softmax1 is softmax over the
# tokens and a null token of score 0, tangent 0, weight a₀ = 1 − Σ_t A_t). Written as it stands,
# Ȧ_t = A_t (ṡ_t − Σ_u A_u ṡ_u), its transpose (the backward pass) forms g_r − Σ_u A_u g_u for
# the token r that takes almost all the attention: a difference of nearly equal numbers whose
# rounding (ε·|g|) is larger than the true value ((1 − A_r)·|g|) once A_r is within ε of 1, and
# normalised GD would follow that noise. Relative to the largest-weight token r (the null token
# where it is the largest) the same derivative is
#     Ȧ_t = A_t ((ṡ_t − ṡ_r) − Σ_u A_u (ṡ_u − ṡ_r) + a₀ ṡ_r),
# whose transpose gives token r the cotangent −Σ_{u≠r} A_u (g_u − Σ A g) (the r-term is left out
# of the sum, not cancelled against a copy) and every other token A_u (g_u − Σ A g): each to the
# relative precision of its own size. A custom JVP, not a custom VJP: forward mode (jax.linearize
# of Φ, the Hessian diagnostics' jax.jvp of jax.grad) keeps working, and reverse mode transposes it.
#
# Only a query whose largest weight is within SATURATION of 1 takes the relative form: every other
# query keeps the plain derivative, op for op the one JAX derives (jax.nn.softmax's own JVP, the
# autodiff of softmax1's expression), so a run that never saturates has the numbers it always had.
# Below the threshold the plain form's relative error is at most ε / SATURATION (100 ε).
SATURATION = 1e-2


def _saturated(top: jax.Array) -> jax.Array:
    """Which queries take the relative form: 1 − (largest weight, (…, 1)) < SATURATION."""
    return jax.lax.stop_gradient(1.0 - top < SATURATION)


def _relative_tangent(A: jax.Array, ds: jax.Array, ref: jax.Array, null: jax.Array | None) -> jax.Array:
    """Ȧ of the softmax weights ``A`` for score tangents ``ds``, relative to token ``ref`` (the
    largest weight's index, (…, 1)); ``null`` the null token's weight a₀ (softmax1), or None, and
    the reference tangent is 0 where the null token is the largest (``ref`` = −1)."""
    # ṡ_r by a select and a sum, not a gather (whose transpose, a scatter, XLA:CPU runs element by
    # element): the same value, fig3-gd's run 3 % faster
    is_ref = jax.lax.broadcasted_iota(ref.dtype, ds.shape, ds.ndim - 1) == ref  # all False: null
    ds_ref = jnp.sum(jnp.where(is_ref, ds, 0.0), axis=-1, keepdims=True)  # (…, 1)
    # ṡ_r − ṡ_r is 0; the select makes the transpose drop token r's own term (A_r (g_r − Σ A g),
    # rounding noise) instead of counting it once directly and once, negated, in −Σ_u: two
    # copies that cancel only where the compiler rounds both alike (a GPU's fused kernels did not)
    rel = jnp.where(is_ref, 0.0, ds - ds_ref)
    out = rel - jnp.sum(A * rel, axis=-1, keepdims=True)
    if null is not None:
        out = out + null * ds_ref
    return A * out


@jax.custom_jvp
def softmax(scores: jax.Array) -> jax.Array:
    """e^{s_t} / Σ_t' e^{s_t'} over the last axis (``jax.nn.softmax``'s numbers); its derivative is
    taken relative to the largest-weight token (exact at saturation, see above)."""
    return jax.nn.softmax(scores, axis=-1)


@softmax.defjvp
def _softmax_jvp(primals, tangents):
    (scores,), (ds,) = primals, tangents
    A, plain = jax.jvp(lambda s: jax.nn.softmax(s, axis=-1), (scores,), (ds,))
    return A, _softmax_tangent(scores, ds, A, plain)


def _softmax_tangent(scores, ds, A, plain):
    """Ȧ of the softmax: relative to the largest weight where it saturates, ``plain`` elsewhere."""
    ref = jax.lax.stop_gradient(jnp.argmax(scores, axis=-1, keepdims=True))
    top = jnp.max(A, axis=-1, keepdims=True)
    return jnp.where(_saturated(top), _relative_tangent(A, ds, ref, None), plain)


def _softmax1_parts(scores: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(A, a₀, m): the weights e^{s_t} / (1 + Σ e^{s_t'}), the null token's 1 / (1 + Σ e^{s_t'}) and
    m = max(0, max_t s_t), the shift taken out of every exponential (stable)."""
    m = jax.lax.stop_gradient(jnp.maximum(jnp.max(scores, axis=-1, keepdims=True), 0.0))
    e = jnp.exp(scores - m)
    total = jnp.exp(-m) + jnp.sum(e, axis=-1, keepdims=True)
    return e / total, jnp.exp(-m) / total, m


@jax.custom_jvp
def softmax1(scores: jax.Array) -> jax.Array:
    """e^{s_t} / (1 + Σ_t' e^{s_t'}), computed with m = max(0, max_t s_t) taken out: stable; its
    derivative is taken relative to the largest weight, the null token's included (see above)."""
    return _softmax1_parts(scores)[0]


@softmax1.defjvp
def _softmax1_jvp(primals, tangents):
    (scores,), (ds,) = primals, tangents
    A, plain = jax.jvp(lambda s: _softmax1_parts(s)[0], (scores,), (ds,))
    null = _softmax1_parts(scores)[1]
    return A, _softmax1_tangent(scores, ds, A, null, plain)


def _softmax1_tangent(scores, ds, A, null, plain):
    """Ȧ of softmax1: relative to the largest weight where it saturates, ``plain`` elsewhere."""
    top = jnp.argmax(scores, axis=-1, keepdims=True)
    # the null token (score 0) is the largest weight unless some score is above 0
    ref = jax.lax.stop_gradient(jnp.where(jnp.max(scores, axis=-1, keepdims=True) > 0, top, -1))
    largest = jnp.maximum(jnp.max(A, axis=-1, keepdims=True), null)
    return jnp.where(_saturated(largest), _relative_tangent(A, ds, ref, null), plain)


# The exponentials' range: inside one compiled kernel XLA contracts β·s − max_t β·s_t into a fused
# multiply-add, which subtracts the rounded max from the exact product, so the largest score's
# exponent is that product's rounding error, up to ±|β·s|·ε/2, not 0. Past |β·s| of about 1e9
# (float32; about 6e18 in float64) the sum Σ of a query's exponentials can overflow (inf / inf),
# underflow (0 / 0), or be so small that the derivative's 1/Σ² overflows (0·inf in the backward
# pass): NaN, and a float32 run at β₀ = 1e6 or 1e10 "diverged". A query whose Σ is outside
# [1/√max, max) takes its exponentials relative to their largest (so that one is 1): e / max_t e
# where that is a finite number > 0, else 1 for the inf ones (max_t e = inf) or for the scores
# equal to the max (max_t e = 0: their exponent is truly 0), 0 for the others. Every other query
# keeps its exponentials as they are, so its weights and their derivative are the ones JAX
# computes, op for op. A score that overflowed itself (β·s = ±inf, so an infinite max) stays NaN:
# its order among the others is lost. Only scores multiplied by β ≠ 1 can meet this (β = 1: the
# scores come out of a matmul, no product to fuse), and only they take these ``_scaled`` forms
# (the activation part's ``scaled``), so a program at β = 1 is the one it always was.


def _weights(
    scores: jax.Array, shift: jax.Array, rest: jax.Array | None = None
) -> tuple[jax.Array, jax.Array, jax.Array | None]:
    """(e, Σ, rest): the exponentials e = exp(scores − shift) (…, t), Σ = their sum (+ ``rest``:
    softmax1's null token adds e^{-m}) and ``rest``, held as above."""

    def sum_of(e, rest):
        return (
            jnp.sum(e, axis=-1, keepdims=True) if rest is None else rest + jnp.sum(e, axis=-1, keepdims=True)
        )

    e = jnp.exp(scores - shift)
    total = sum_of(e, rest)
    held = (total >= 1 / np.sqrt(np.finfo(e.dtype).max)) & (total < jnp.inf)  # False for NaN
    top = jnp.max(e, axis=-1, keepdims=True)
    inner = (top > 0) & (top < jnp.inf)
    tied = (scores == shift) & jnp.isfinite(shift)  # exponent 0 (softmax1: the max above 0)
    other = jnp.where(top > 0, (e == jnp.inf).astype(e.dtype), tied.astype(e.dtype))
    e = jnp.where(held, e, jnp.where(inner, e / jnp.where(inner, top, 1.0), other))
    if rest is not None:
        rest = jnp.where(held, rest, jnp.where(inner, rest / jnp.where(inner, top, 1.0), 0.0))
    return e, jnp.where(held, total, sum_of(e, rest)), rest


def _plain_tangent(e: jax.Array, total: jax.Array, ds: jax.Array) -> jax.Array:
    """The derivative of e / Σ for e = exp(s − shift), the shift a constant, in JAX's own autodiff
    ops (jax.nn.softmax's, and softmax1's expression's), from the held e and Σ of ``_weights``."""
    z = ds * e
    dz = jnp.sum(z, axis=-1, keepdims=True)
    return z / total + (-dz * e) * jax.lax.integer_pow(total, -2)


def _held_softmax_parts(scores: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(e, Σ) of ``jax.nn.softmax(scores, axis=-1)`` (its weights e / Σ), held (``_weights``)."""
    x_max = jax.lax.stop_gradient(jnp.max(scores, axis=-1, initial=-jnp.inf, keepdims=True))
    return _weights(scores, x_max)[:2]


@jax.custom_jvp
def softmax_scaled(scores: jax.Array) -> jax.Array:
    """``softmax`` of scores multiplied by β ≠ 1 (``model.attention`` takes it there): its numbers,
    and finite where the fused shift overflows (see above)."""
    e, total = _held_softmax_parts(scores)
    return e / total


@softmax_scaled.defjvp
def _softmax_scaled_jvp(primals, tangents):
    (scores,), (ds,) = primals, tangents
    e, total = _held_softmax_parts(scores)
    A = e / total
    return A, _softmax_tangent(scores, ds, A, _plain_tangent(e, total, ds))


def _held_softmax1_parts(scores: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(e, Σ, a₀): the exponentials e^{s_t − m}, Σ = e^{−m} + Σ_t e^{s_t − m} (the weights are e / Σ)
    and the null token's weight e^{−m} / Σ, with m = max(0, max_t s_t) taken out of every
    exponential (stable), held (``_weights``)."""
    m = jax.lax.stop_gradient(jnp.maximum(jnp.max(scores, axis=-1, keepdims=True), 0.0))
    e, total, null = _weights(scores, m, jnp.exp(-m))
    return e, total, null / total


@jax.custom_jvp
def softmax1_scaled(scores: jax.Array) -> jax.Array:
    """``softmax1`` of scores multiplied by β ≠ 1: its numbers, and finite where the fused shift
    overflows (see above)."""
    e, total, _ = _held_softmax1_parts(scores)
    return e / total


@softmax1_scaled.defjvp
def _softmax1_scaled_jvp(primals, tangents):
    (scores,), (ds,) = primals, tangents
    e, total, null = _held_softmax1_parts(scores)
    A = e / total
    return A, _softmax1_tangent(scores, ds, A, null, _plain_tangent(e, total, ds))


def identity(scores: jax.Array) -> jax.Array:
    return scores


def sigmoid(scores: jax.Array) -> jax.Array:
    return jax.nn.sigmoid(scores)


def erf(scores: jax.Array) -> jax.Array:
    return jax.scipy.special.erf(scores)


def beta_at(steps, beta0: float, decay: float) -> np.ndarray:
    """β₀ / (1 + c·(s − 1)) at logged step s ≥ 1 (the last update's β), β₀ at s = 0."""
    s = np.asarray(steps, dtype=float)
    return beta0 / (1.0 + decay * np.maximum(s - 1.0, 0.0))
