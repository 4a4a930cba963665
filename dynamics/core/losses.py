"""Margin losses ℓ(z), z = y·Φ(X), and the 0-1 error. The losses are parts
(``dynamics.parts.LOSSES``): their names, help and task live there, their math here."""

from __future__ import annotations

import enum

import jax
import jax.numpy as jnp

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


def margin_loss(z: jax.Array, loss: Loss | str) -> jax.Array:
    """ℓ(z) elementwise; ``loss`` a name of ``dynamics.parts.LOSSES`` (or a ``Loss`` member)."""
    return parts.LOSSES.get(loss, "loss").load()(z)


def mean_loss(z: jax.Array, loss: Loss | str) -> jax.Array:
    """Empirical risk (1/n) Σ_i ℓ(y_i Φ(X_i)) from margins z (n,)."""
    return jnp.mean(margin_loss(z, loss))


def error_rate(z: jax.Array) -> jax.Array:
    """0-1 error from margins; z = 0 (a tie, as at θ = 0) counts as an error."""
    return jnp.mean(z <= 0.0)
