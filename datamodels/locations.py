"""Single- and multi-location regression (Marion, Berthier, Biau, Boyer 2025, and its F-feature
form).

Single location: orthonormal k*, v* ∈ R^d drawn once per trial; one relevant token
x ~ N(√(d/2)·k*, γ² I_d) at a uniformly random position, the others N(0, I_d);
y = xᵀv* + ε·g with g ~ N(0, 1). Noise floor (the square loss's Bayes risk) ε².

Multi location: F orthonormal key directions k*_f and value directions v*_f (all 2F orthonormal);
F relevant tokens at distinct random positions, token f ~ N(√(d/2)·k*_f, γ² I);
y = Σ_f c_f · x_fᵀ v*_f + ε·g. Noise floor ε². Its mask is per feature, (n, F, T): token f's
position for feature f (the simulator's relevant tokens are their union).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from datamodels.protocol import World, floor, orthonormal


class SingleLocationModel:
    """``datamodels.protocol`` data model; params: T, d, gamma (γ), epsilon (ε)."""

    task = "regression"
    relevant_tokens = True

    def setup(self, key: jax.Array, params) -> World:
        k_star, v_star = orthonormal(key, params.d, 2)
        dirs = {"k_star": k_star, "v_star": v_star}
        return World(dirs, dict(dirs), floor(params.epsilon**2), params)

    def sample(self, world: World, key: jax.Array, n: int):
        p = world.params
        k_pos, k_x, k_rel, k_eps = jax.random.split(key, 4)
        pos = jax.random.randint(k_pos, (n,), 0, p.T)
        mask = jnp.arange(p.T)[None, :] == pos[:, None]  # (n, T)
        noise = jax.random.normal(k_rel, (n, p.d), jnp.float32)
        x = math.sqrt(p.d / 2) * world.latents["k_star"][None, :] + p.gamma * noise  # (n, d)
        X = jnp.where(mask[:, :, None], x[:, None, :], jax.random.normal(k_x, (n, p.T, p.d), jnp.float32))
        y = x @ world.latents["v_star"] + p.epsilon * jax.random.normal(k_eps, (n,), jnp.float32)
        return X, y.astype(jnp.float32), mask


class MultiLocationModel:
    """``datamodels.protocol`` data model; params: T, d, gamma (γ), epsilon (ε), strengths (c, F = len(c))."""

    task = "regression"
    relevant_tokens = True

    def setup(self, key: jax.Array, params) -> World:
        F = len(params.strengths)
        q = orthonormal(key, params.d, 2 * F)  # (2F, d)
        dirs = {"k_star": q[:F], "v_star": q[F:]}
        latents = {**dirs, "strengths": jnp.asarray(params.strengths, jnp.float32)}
        return World(latents, dict(dirs), floor(params.epsilon**2), params)

    def sample(self, world: World, key: jax.Array, n: int):
        p, F = world.params, len(world.params.strengths)
        k_pos, k_x, k_rel, k_eps = jax.random.split(key, 4)
        bits = jax.random.bits(k_pos, (n, p.T), jnp.uint32)
        pos = jnp.argsort(bits, axis=1)[:, :F]  # (n, F) distinct positions, feature f at pos[:, f]
        noise = jax.random.normal(k_rel, (n, F, p.d), jnp.float32)
        x = math.sqrt(p.d / 2) * world.latents["k_star"][None] + p.gamma * noise  # (n, F, d)
        rows = jnp.arange(n)[:, None]
        X = jax.random.normal(k_x, (n, p.T, p.d), jnp.float32).at[rows, pos].set(x)
        mask = jnp.zeros((n, F, p.T), bool).at[rows, jnp.arange(F)[None, :], pos].set(True)  # per feature
        signal = jnp.einsum("nfd,fd,f->n", x, world.latents["v_star"], world.latents["strengths"])
        y = signal + p.epsilon * jax.random.normal(k_eps, (n,), jnp.float32)
        return X, y.astype(jnp.float32), mask


SINGLE_LOCATION = SingleLocationModel()
MULTI_LOCATION = MultiLocationModel()
