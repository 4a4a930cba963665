"""Max-margin token selection data (Tarzanagh, Li, Thrampoulidis, Oymak 2023).

The setting in which attention trained with a fixed readout v converges in direction to the
attention SVM's solution W^mm (or p^mm for a learned query p). Each trial's world holds a unit
readout v and the start θ(0) of the attention, drawn once; it sets the model's θ(0)
(``initial_params``): U = v, and W(0) (or a learned query's k(0)) with entries uniform in
±a/√d, a = ``start_range`` (PyTorch's default for a d×d linear layer when a = 1).

- ``setting="local"`` (their local-convergence experiment): every token uniform on the unit
  sphere (a standard normal over its norm), labels ±1 with probability 1/2, v uniform on the
  unit sphere. The mask marks each example's token with the largest y·⟨x_t, v⟩ (its optimal
  token, which the selected token need not be).
- ``setting="prompt"`` (their learned-prompt experiment, for d ≥ 3): tokens 0.2·N(0, I) shifted by
  position in the first two coordinates (token 1 by (1, 0), the next ⌊(T−1)/2⌋ by (−1, 1), the
  last ⌊(T−1)/2⌋ by (−0.5, −0.5)), the last coordinate a score (1 on token 1, 0.5 elsewhere),
  labels +1, v the last unit vector. The mask marks token 1, the optimal one.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from datamodels.defaults import MAX_MARGIN_SETTINGS
from datamodels.protocol import UNKNOWN, World, floor

SETTINGS = MAX_MARGIN_SETTINGS


def unit_tokens(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Standard normal vectors over their norms (the last axis): uniform on the unit sphere."""
    g = jax.random.normal(key, shape, jnp.float32)
    return g / jnp.linalg.norm(g, axis=-1, keepdims=True)


def prompt_tokens(key: jax.Array, n: int, T: int, d: int) -> jax.Array:
    """The learned-prompt experiment's tokens (n, T, d) (module docstring)."""
    X = 0.2 * jax.random.normal(key, (n, T, d), jnp.float32)
    half = (T - 1) // 2
    shift = jnp.zeros((T, d), jnp.float32).at[0, 0].set(1.0)
    shift = shift.at[1 : T - half, 0].set(-1.0).at[1 : T - half, 1].set(1.0)
    shift = shift.at[T - half :, 0].set(-0.5).at[T - half :, 1].set(-0.5)
    X = X + shift[None]
    score = jnp.where(jnp.arange(T) == 0, 1.0, 0.5)  # (T,) the optimal token scores higher
    return X.at[:, :, d - 1].set(score[None, :])


class MaxMarginModel:
    """``datamodels.protocol`` data model; params: T, d, setting, start_range (module docstring)."""

    task = "classification"
    relevant_tokens = True

    def setup(self, key: jax.Array, params) -> World:
        k_v, k_start = jax.random.split(key)
        d = params.d
        if params.setting == "prompt":
            v = jnp.zeros((d,), jnp.float32).at[d - 1].set(1.0)
        else:
            v = unit_tokens(k_v, (d,))
        bound = params.start_range / math.sqrt(d)
        k_w, k_k = jax.random.split(k_start)
        W0 = jax.random.uniform(k_w, (d, d), jnp.float32, -bound, bound)
        k0 = jax.random.uniform(k_k, (d,), jnp.float32, -bound, bound)
        return World({"v": v, "W0": W0, "k0": k0}, {"v": v}, floor(UNKNOWN), params)

    def sample(self, world: World, key: jax.Array, n: int):
        p = world.params
        k_y, k_x = jax.random.split(key)
        if p.setting == "prompt":
            X = prompt_tokens(k_x, n, p.T, p.d)
            y = jnp.ones((n,), jnp.float32)
            best = jnp.zeros((n,), jnp.int32)
        else:
            y = jnp.where(jax.random.normal(k_y, (n,)) > 0, 1.0, -1.0).astype(jnp.float32)
            X = unit_tokens(k_x, (n, p.T, p.d))
            best = jnp.argmax(y[:, None] * (X @ world.latents["v"]), axis=1)  # (n,)
        mask = jnp.arange(p.T)[None, :] == best[:, None]  # (n, T)
        return X, y, mask

    def initial_params(self, world: World, shapes: dict) -> dict:
        """θ(0) from the world: the readout U = v, and W(0) or a learned query's k(0) where the
        model has them (factored Q, K keep the configured init)."""
        start = {"U": world.latents["v"], "W": world.latents["W0"], "k": world.latents["k0"]}
        return {k: v for k, v in start.items() if k in shapes}


MAX_MARGIN = MaxMarginModel()
