"""Positional versus semantic attention (Cui, Behrens, Krzakala, Zdeborová, NeurIPS 2024).

T = 2 tokens x_ℓ = p_ℓ + z_ℓ: positional codes p₁ = −p₂ = 1_d/√d added to semantic parts
z_ℓ ~ N(0, σ² I_d). The target of an example is a sequence, one row per token, from a teacher
that sees only the semantic part Z (T×d):

    y = (1 − ω) softmax_row((Z q*)(Z q*)ᵀ / d) Z + ω A Z,

q* ~ N(0, I_d) drawn once per trial (a rank-1 tied teacher), A a fixed T×T mixing matrix
(row-major ``mixing``, default [[0.6, 0.4], [0.4, 0.6]]). y is returned flattened token by token,
(n, T·d), for the simulator's sequence outputs. The target is a function of X (Z = X − P), so the
square loss's Bayes risk is 0.

The world sets θ(0) of a tied key-query Q (d, 1) (``initial_params``): ``start="semantic"`` the
teacher q*, ``"positional"`` the positional direction 1_d/√d, the two starts whose final
objectives the paper compares; ``"random"`` sets nothing, so Q(0) (d, r) is the model's own init
(entries N(0, σ₀²/d) from each run's init key, any rank r). Its planted directions are the unit
teacher and the positional direction; its latents the teacher q* itself and the codes P (T, d).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from datamodels.defaults import POSITIONAL_STARTS
from datamodels.protocol import World, floor

STARTS = POSITIONAL_STARTS  # Q(0) = q*, Q(0) = 1_d/√d, or the model's init


def codes(T: int, d: int) -> jax.Array:
    """The positional codes (T, d): p₁ = 1_d/√d, p₂ = −p₁ (T = 2)."""
    p = jnp.full((d,), 1.0 / math.sqrt(d), jnp.float32)
    return jnp.stack([p, -p])[:T]


def teacher_targets(Z: jax.Array, teacher: jax.Array, omega, mixing: jax.Array) -> jax.Array:
    """y (n, T, d) of semantic parts Z (n, T, d): (1 − ω) softmax((Zq*)(Zq*)ᵀ/d) Z + ω A Z."""
    d = Z.shape[-1]
    h = Z @ teacher  # (n, T): z_ℓ·q*
    scores = h[:, :, None] * h[:, None, :] / d  # (n, s, t)
    attended = jnp.einsum("nst,ntd->nsd", jax.nn.softmax(scores, axis=-1), Z)
    mixed = jnp.einsum("st,ntd->nsd", mixing, Z)
    return (1.0 - omega) * attended + omega * mixed


class PositionalSemanticModel:
    """``datamodels.protocol`` data model; params: T (= 2), d, semantic_noise σ, omega ω, mixing A
    (T² numbers, row-major), start (module docstring)."""

    task = "regression"

    def setup(self, key: jax.Array, params) -> World:
        teacher = jax.random.normal(key, (params.d,), jnp.float32)  # q* ~ N(0, I_d)
        P = codes(params.T, params.d)
        planted = {"teacher": teacher / jnp.linalg.norm(teacher), "positional": P[0]}
        return World({"teacher": teacher, "codes": P}, planted, floor(0.0), params)

    def sample(self, world: World, key: jax.Array, n: int):
        p = world.params
        Z = p.semantic_noise * jax.random.normal(key, (n, p.T, p.d), jnp.float32)
        mixing = jnp.asarray(p.mixing, jnp.float32).reshape(p.T, p.T)
        y = teacher_targets(Z, world.latents["teacher"], p.omega, mixing)
        X = Z + world.latents["codes"][None]
        return X, y.reshape(n, p.T * p.d), None

    def initial_params(self, world: World, shapes: dict) -> dict:
        """Q(0) (d, 1): the teacher q* (semantic) or 1_d/√d (positional); nothing for the random
        start (the model's init draws Q(0))."""
        start = world.params.start
        if start == "random":
            return {}
        q = world.latents["teacher"] if start == "semantic" else world.latents["codes"][0]
        return {"Q": q[:, None]} if "Q" in shapes else {}


POSITIONAL_SEMANTIC = PositionalSemanticModel()
