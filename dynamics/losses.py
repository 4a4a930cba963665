"""Margin losses ℓ(z), z = y·Φ(X) (SPEC §3)."""

from __future__ import annotations

import enum

import jax
import jax.numpy as jnp
import numpy as np


class Loss(enum.Enum):
    LOGISTIC = "logistic"  # log(1 + e^{-z}); the default, smooth and Lipschitz
    EXP = "exp"  # e^{-z}; can overflow on a large negative margin
    HINGE2 = "hinge2"  # max(0, 1 - z)²; exactly zero past margin 1


def parse_loss(loss: Loss | str) -> Loss:
    """``loss`` as a Loss member: a member, or its name as the command line takes it ("exp")."""
    if isinstance(loss, Loss):
        return loss
    if isinstance(loss, str):
        try:
            return Loss(loss)
        except ValueError:
            pass
    allowed = ", ".join(repr(m.value) for m in Loss)
    raise ValueError(f"loss={loss!r} is not one of {allowed} (or a dynamics.Loss member)")


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


def margin_loss(z: jax.Array, loss: Loss | str) -> jax.Array:
    """ℓ(z) elementwise; ``loss`` a Loss member or its name ("logistic", "exp", "hinge2")."""
    loss = parse_loss(loss)
    z = jnp.asarray(check_margins(z))
    if not jnp.issubdtype(z.dtype, jnp.floating):
        z = z.astype(jnp.zeros(()).dtype)  # integer margins: as the working float
    if loss is Loss.LOGISTIC:
        return jnp.logaddexp(0.0, -z)  # stable log(1 + e^{-z})
    if loss is Loss.EXP:
        return jnp.exp(-z)
    return jnp.square(jnp.maximum(0.0, 1.0 - z))


def mean_loss(z: jax.Array, loss: Loss | str) -> jax.Array:
    """Empirical risk (1/n) Σ_i ℓ(y_i Φ(X_i)) from margins z (n,)."""
    return jnp.mean(margin_loss(check_margins(z, mean=True), loss))


def error_rate(z: jax.Array) -> jax.Array:
    """0-1 error from margins; z = 0 (a tie, as at θ = 0) and a NaN margin (a diverged model)
    count as errors: only z > 0 is correct."""
    z = jnp.asarray(check_margins(z, mean=True))
    return jnp.mean(~(z > 0.0))
