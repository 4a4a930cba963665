"""Margin losses ℓ(z), z = y·Φ(X) (SPEC §3)."""

from __future__ import annotations

import enum

import jax
import jax.numpy as jnp


class Loss(enum.Enum):
    LOGISTIC = "logistic"  # log(1 + e^{-z}); the default, smooth and Lipschitz
    EXP = "exp"  # e^{-z}; can overflow on a large negative margin
    HINGE2 = "hinge2"  # max(0, 1 - z)²; exactly zero past margin 1


def margin_loss(z: jax.Array, loss: Loss) -> jax.Array:
    """ℓ(z) elementwise."""
    if loss is Loss.LOGISTIC:
        return jnp.logaddexp(0.0, -z)  # stable log(1 + e^{-z})
    if loss is Loss.EXP:
        return jnp.exp(-z)
    return jnp.square(jnp.maximum(0.0, 1.0 - z))


def mean_loss(z: jax.Array, loss: Loss) -> jax.Array:
    """Empirical risk (1/n) Σ_i ℓ(y_i Φ(X_i)) from margins z (n,)."""
    return jnp.mean(margin_loss(z, loss))


def error_rate(z: jax.Array) -> jax.Array:
    """0-1 error from margins; z = 0 (a tie, as at θ = 0) counts as an error."""
    return jnp.mean(z <= 0.0)
