"""The sparse-token classification model (Barnfield, Cui, Lu 2025).

A unit signal ξ ∈ R^d is drawn once per trial. A label is +1 with probability π, else −1. A
positive example is X = θ·v ξᵀ + Z, with v ∈ {0, 1}^T marking R positions drawn uniformly
without replacement per example; a negative one is X = Z. Z has iid N(0, 1) entries (no 1/√d).
The relevant-token mask is v for positives and all False for negatives.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from datamodels.protocol import UNKNOWN, World, floor


def marked_positions(key: jax.Array, n: int, T: int, r: int) -> jax.Array:
    """(n, T) bool with r True per row at positions uniform without replacement (the r smallest of
    T random uint32 sort keys, ties broken by position)."""
    bits = jax.random.bits(key, (n, T), jnp.uint32)
    return jnp.argsort(jnp.argsort(bits, axis=1), axis=1) < r


class SparseTokenModel:
    """``datamodels.protocol`` data model; params: T, d, r (R), positive_rate (π), signal (θ)."""

    task = "classification"
    relevant_tokens = True

    def setup(self, key: jax.Array, params) -> World:
        g = jax.random.normal(key, (params.d,), jnp.float32)
        xi = g / jnp.linalg.norm(g)  # (d,) unit signal
        return World({"xi": xi}, {"xi": xi}, floor(UNKNOWN), params)

    def sample(self, world: World, key: jax.Array, n: int):
        p = world.params
        k_y, k_pos, k_z = jax.random.split(key, 3)
        y = jnp.where(jax.random.bernoulli(k_y, p.positive_rate, (n,)), 1.0, -1.0).astype(jnp.float32)
        mask = marked_positions(k_pos, n, p.T, p.r) & (y > 0)[:, None]  # (n, T)
        Z = jax.random.normal(k_z, (n, p.T, p.d), jnp.float32)  # (n, T, d)
        X = p.signal * mask[:, :, None] * world.latents["xi"][None, None, :] + Z
        return X.astype(jnp.float32), y, mask


SPARSE_TOKEN = SparseTokenModel()
