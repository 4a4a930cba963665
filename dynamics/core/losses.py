"""Losses ℓ of each example and the 0-1 error. A classification loss reads the margin z = y·Φ(X),
a regression loss the residual r = Φ(X) − y (the engine passes the one the loss's task reads).
The losses are parts (``dynamics.parts.LOSSES``): their names, help and task live there, their
math here."""

from __future__ import annotations

import enum

import jax
import jax.numpy as jnp
import numpy as np

from dynamics import parts

# Spelling aids for Python users (Loss.LOGISTIC is "logistic"); strings are accepted alike.
Loss = enum.Enum("Loss", {n.upper(): n for n in parts.LOSSES}, module=__name__)


def logistic(z: jax.Array) -> jax.Array:
    """log(1 + e^{-z}), computed stably."""
    return jnp.logaddexp(0.0, -z)


def exponential(z: jax.Array) -> jax.Array:
    """e^{-z}; can overflow on a large negative margin."""
    return jnp.exp(-z)


def squared_hinge(z: jax.Array) -> jax.Array:
    """max(0, 1 - z)²; exactly zero past margin 1."""
    return jnp.square(jnp.maximum(0.0, 1.0 - z))


def parse_loss(loss: Loss | str):
    """The loss part named ``loss`` (a name as the command line takes it, or a ``Loss`` member);
    anything else is a one-line ValueError naming it and the allowed names."""
    return parts.LOSSES.get(loss, "loss")


def check_margins(z, name: str = "z", *, mean: bool = False):
    """``z`` if it is a real (floating or integer) array or number, else a TypeError naming it
    (``mean``: also a ValueError for an empty one)."""
    if isinstance(z, jax.core.Tracer):
        if not jnp.issubdtype(z.dtype, jnp.floating):
            raise TypeError(f"{name} must be a floating array of margins, got dtype {z.dtype}")
        return z
    if isinstance(z, bool | str | bytes) or z is None:
        raise TypeError(f"{name}={z!r} must be an array of margins (real numbers)")
    try:
        dtype = z.dtype if isinstance(z, jax.Array | np.ndarray) else np.asarray(z).dtype
    except (TypeError, ValueError) as err:
        raise TypeError(f"{name} must be an array of margins (real numbers): {err}") from None
    if dtype == np.bool_ or not (np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.integer)):
        raise TypeError(f"{name} must be an array of real margins, got dtype {dtype}")
    if mean and np.size(z) == 0:
        raise ValueError(f"{name} is empty: the mean over no examples is undefined")
    return z


def square(z: jax.Array) -> jax.Array:
    """(1 - z)², which is (y - Φ)² for labels y = ±1; not zero past margin 1."""
    return jnp.square(1.0 - z)


def squared_error(r: jax.Array) -> jax.Array:
    """r² of a residual r = Φ − y: its mean over examples is the MSE (no ½)."""
    return jnp.square(r)


def margin_loss(z: jax.Array, loss: Loss | str) -> jax.Array:
    """ℓ(z) elementwise; ``loss`` a name of ``dynamics.parts.LOSSES`` (or a ``Loss`` member). ``z``
    is the margins yΦ for a classification loss, the residuals Φ − y for a regression loss (mse)."""
    part = parse_loss(loss)
    z = jnp.asarray(check_margins(z))
    if not jnp.issubdtype(z.dtype, jnp.floating):
        z = z.astype(jnp.zeros(()).dtype)  # integer margins: as the working float
    return part.load()(z)


def mean_loss(z: jax.Array, loss: Loss | str) -> jax.Array:
    """Empirical risk (1/n) Σ_i ℓ(z_i): z the margins y_i Φ(X_i) (n,) for a classification loss, the
    residuals Φ(X_i) − y_i for a regression loss (mse: the mean squared error)."""
    return jnp.mean(margin_loss(check_margins(z, mean=True), loss))


def summed_loss(z: jax.Array, loss: Loss | str) -> jax.Array:
    """The summed objective Σ_i ℓ(z_i) over the n examples (z (n,)); for vector targets z (n, o)
    each example's mean over its o outputs, summed over the examples: n times ``mean_loss``."""
    z = check_margins(z, mean=True)
    per_example = margin_loss(z, loss).reshape(jnp.shape(z)[0], -1)  # (n, o)
    return jnp.sum(jnp.mean(per_example, axis=1))


def error_rate(z: jax.Array) -> jax.Array:
    """0-1 error from margins; z = 0 (a tie, as at θ = 0) and a NaN margin (a diverged model)
    count as errors: only z > 0 is correct."""
    z = check_margins(z, mean=True)
    if isinstance(z, jax.core.Tracer):
        return jnp.mean(~(z > 0.0))
    # concrete margins are compared as they are (float64 stays float64; the CPU's float32 would
    # flush a tiny positive margin to zero and count it as an error)
    return jnp.asarray(np.mean(~(np.asarray(z) > 0.0)))
