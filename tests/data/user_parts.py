"""A user's own parts, imported by name ("user_parts:toy") in tests/test_data_protocol.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


class Toy:
    """a toy data model: labels of a random direction drawn per trial"""

    sizes = {"T": 4, "d": 3}

    def setup(self, key, params):
        return {"w": jax.random.normal(key, (params.d,), jnp.float32)}

    def sample(self, world, key, n):
        X = jax.random.normal(key, (n, 4, 3), jnp.float32)
        y = jnp.where(X[:, 0] @ world["w"] >= 0, 1.0, -1.0)
        return X, y, None


toy = Toy()

_rng = np.random.default_rng(7)
FIXED = {
    "X_train": _rng.normal(size=(8, 4, 3)).astype(np.float32),
    "y_train": np.where(_rng.random(8) < 0.5, 1.0, -1.0).astype(np.float32),
    "X_test": _rng.normal(size=(12, 4, 3)).astype(np.float32),
    "y_test": np.where(_rng.random(12) < 0.5, 1.0, -1.0).astype(np.float32),
}


class Fixed:
    """fixed arrays: the training set for n = 8, the test set for n = 12"""

    T, d = 4, 3

    def setup(self, key, params):
        return {}

    def sample(self, world, key, n):
        split = {8: "train", 12: "test"}[n]
        return jnp.asarray(FIXED[f"X_{split}"]), jnp.asarray(FIXED[f"y_{split}"]), None


fixed = Fixed()


def half_square(z):
    """(1 - z)² / 2 of margins"""
    return 0.5 * (1.0 - z) ** 2


half_square.task = "classification"


def relu_attention(scores):
    """relu of the scores, not normalised"""
    return jax.nn.relu(scores)


relu_attention.normalises = False
relu_attention.saddle_at_zero = True  # σ(0) = 0: a zero init never moves
