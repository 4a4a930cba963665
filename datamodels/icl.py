"""In-context linear regression (Zhang, Singh, Latham, Saxe 2025).

Inputs x ∈ R^D with covariance Λ whose eigenvalues are ∝ 1, 2, …, D, normalised to trace 1, in
an orthonormal basis drawn once per trial (``basis="random"``) or the standard one
(``basis="identity"``). Per sequence a task vector w ~ N(0, I_D); N context tokens [x_n; y_n]
with y_n = wᵀx_n, then the query token [x_q; 0] last (position T = N + 1); the target is
y_q = wᵀx_q (no noise: noise floor 0). Token width d = D + 1, so D = d − 1 and N = T − 1.

Three parameters change the setting (each leaves the default's draws, and so its numbers, as they
are): ``covariance="identity"`` draws x ~ N(0, I_D) instead of N(0, Λ); ``task_variance`` v draws
w ~ N(0, v·I_D) (He, Pan, Chen, Yang 2025 take v = 1/D); ``epsilon`` ε adds εg, g ~ N(0, 1), to
every label, the context's and the query's (the target y_q = wᵀx_q + εg_q: noise floor ε²). The
noise is drawn from its own key (``fold_in(key, 2)``), only where ε > 0.

The authors also whiten the finite set of task vectors (zero mean, identity covariance) and
centre the inputs over the set; by default this model does not: every sequence is a fresh draw
of the world, so the training set, the test set and online batches are samples of one
distribution (whitening a finite set couples its examples). ``whiten=True`` does what the
authors do, to each drawn set (the training set, the test set, each online batch) on its own.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from datamodels.defaults import ICL_BASES, ICL_COVARIANCES
from datamodels.protocol import World, floor, orthonormal


def eigenvalues(D: int) -> jax.Array:
    """Λ's eigenvalues (D,): i / Σ_j j for i = 1..D (trace 1), ascending."""
    i = jnp.arange(1, D + 1, dtype=jnp.float32)
    return i / jnp.sum(i)


def whiten(w: jax.Array) -> jax.Array:
    """The n task vectors (n, D) with mean 0 and sample covariance (1/(n − 1)) I exactly: centred,
    then multiplied by C^{-1/2}, C their sample covariance (the authors' whitening; n > D)."""
    w = w - jnp.mean(w, axis=0, keepdims=True)
    cov = w.T @ w / (w.shape[0] - 1)
    vals, vecs = jnp.linalg.eigh(cov)
    return w @ (vecs * (1.0 / jnp.sqrt(vals))[None, :]) @ vecs.T


class IclLinregModel:
    """``datamodels.protocol`` data model; params: T (N + 1), d (D + 1), basis, whiten."""

    task = "regression"
    relevant_tokens = False

    def setup(self, key: jax.Array, params) -> World:
        D = params.d - 1
        basis = orthonormal(key, D, D) if params.basis == ICL_BASES[0] else jnp.eye(D, dtype=jnp.float32)
        lam = eigenvalues(D)
        eigvecs = jnp.pad(basis, ((0, 0), (0, 1)))  # (D, d): eigenvector i of λ_i, y channel 0
        eps = float(getattr(params, "epsilon", 0.0))
        return World({"basis": basis, "eigenvalues": lam}, {"eigvecs": eigvecs}, floor(eps * eps), params)

    def sample(self, world: World, key: jax.Array, n: int):
        T, D = world.params.T, world.params.d - 1
        k_w, k_x = jax.random.split(key)
        p = world.params
        w = jax.random.normal(k_w, (n, D), jnp.float32)
        if getattr(p, "task_variance", 1.0) != 1.0:
            w = w * jnp.sqrt(jnp.float32(p.task_variance))  # w ~ N(0, v·I_D)
        z = jax.random.normal(k_x, (n, T, D), jnp.float32)
        if getattr(p, "covariance", ICL_COVARIANCES[0]) == ICL_COVARIANCES[0]:
            x = (z * jnp.sqrt(world.latents["eigenvalues"])[None, None, :]) @ world.latents[
                "basis"
            ]  # N(0, Λ)
        else:
            x = z  # (n, T, D): x ~ N(0, I_D)
        if getattr(p, "whiten", False):
            w, x = whiten(w), x - jnp.mean(x, axis=0, keepdims=True)
        y_all = jnp.einsum("ntk,nk->nt", x, w)  # (n, T)
        if getattr(p, "epsilon", 0.0) > 0:  # every label noisy, the query's target too
            y_all = y_all + jnp.float32(p.epsilon) * jax.random.normal(jax.random.fold_in(key, 2), (n, T))
        X = jnp.concatenate([x, y_all[:, :, None]], axis=-1).at[:, -1, D].set(0.0)  # query's y hidden
        return X.astype(jnp.float32), y_all[:, -1].astype(jnp.float32), None


ICL_LINREG = IclLinregModel()
