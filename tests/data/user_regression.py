"""A user regression data model without a noise floor (tests of the summary table)."""

import jax
import jax.numpy as jnp


class Linear:
    """y = <x_1, w> for a random w per trial; no noise floor declared"""

    task = "regression"
    sizes = {"T": 3, "d": 4}

    def setup(self, key, params):
        return {"w": jax.random.normal(key, (params.d,), jnp.float32)}

    def sample(self, world, key, n):
        X = jax.random.normal(key, (n, 3, 4), jnp.float32)
        return X, X[:, 0] @ world["w"], None


linear = Linear()
