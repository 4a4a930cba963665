"""Single-location linear regression with repetition: the toy task in which sparse attention emerges
after a plateau (Zucchet, d'Angelo, Lampinen, Chan 2025).

A random orthogonal W* ∈ R^{d×d} (‖W*‖_F = √d) and a fixed token x̄ ~ N(0, I_d) are drawn once per
trial. An example is T tokens x_t ~ N(0, I_d) whose last B positions (``copies``) hold copies of
one relevant token x_r; with probability p (``repetition``, cross-sample repetition) x_r is x̄,
else a fresh N(0, I_d) draw. The target is the vector y = W* x_r + σ g ∈ R^d, g ~ N(0, I_d)
(``target_noise`` σ; noise floor σ², the mse being a mean over outputs). The mask marks the B
copies.

The test set has a distribution of its own (``sample_test``): the same with p replaced by
``test_repetition`` (0 by default: tested without repetition).

``copy_logits`` says how positional attention (``--query position``) treats the copies: ``free``,
each position its own logit; ``tied``, the B copies share one logit (``tied_positions``: the logit
each position reads).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from datamodels.protocol import World, floor, orthonormal


def draw(world: World, key: jax.Array, n: int, repetition: float):
    """n examples (X (n, T, d), y (n, d), mask (n, T)) with the relevant token x̄ with probability
    ``repetition``."""
    p = world.params
    k_x, k_rel, k_rep, k_eps = jax.random.split(key, 4)
    X = jax.random.normal(k_x, (n, p.T, p.d), jnp.float32)  # (n, T, d)
    fresh = jax.random.normal(k_rel, (n, p.d), jnp.float32)
    repeat = jax.random.bernoulli(k_rep, repetition, (n,))
    x_r = jnp.where(repeat[:, None], world.latents["x_bar"][None, :], fresh)  # (n, d)
    mask = jnp.broadcast_to(jnp.arange(p.T) >= p.T - p.copies, (n, p.T))  # (n, T): the last B
    X = jnp.where(mask[:, :, None], x_r[:, None, :], X)
    y = x_r @ world.latents["W_star"].T + p.target_noise * jax.random.normal(k_eps, (n, p.d), jnp.float32)
    return X, y.astype(jnp.float32), mask


class EmergenceModel:
    """``datamodels.protocol`` data model; params: T, d, copies (B), copy_logits, repetition (p),
    test_repetition, target_noise (σ)."""

    task = "regression"
    relevant_tokens = True

    def setup(self, key: jax.Array, params) -> World:
        k_w, k_bar = jax.random.split(key)
        W_star = orthonormal(k_w, params.d, params.d)  # (d, d) orthogonal
        x_bar = jax.random.normal(k_bar, (params.d,), jnp.float32)
        return World({"W_star": W_star, "x_bar": x_bar}, {}, floor(params.target_noise**2), params)

    def sample(self, world: World, key: jax.Array, n: int):
        return draw(world, key, n, world.params.repetition)

    def sample_test(self, world: World, key: jax.Array, n: int):
        return draw(world, key, n, world.params.test_repetition)

    @staticmethod
    def tied_positions(params) -> tuple[int, ...] | None:
        """The logit each position reads under positional attention: the B copies share the last
        one (``copy_logits="tied"``), or None (every position its own)."""
        if params.copy_logits != "tied":
            return None
        free = params.T - params.copies
        return tuple(range(free)) + (free,) * params.copies


EMERGENCE = EmergenceModel()
