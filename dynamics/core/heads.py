"""What each head does: per-head metrics of the stored heads (slots) at one step.

Every function maps the stored heads' parameters (head axis first, S slots) and the test set's
attention weights to per-slot arrays; the sweep lays them out per run and head (a slot of the
fast path stands for H identical heads). A cosine is an absolute cosine |a·b| / (‖a‖ ‖b‖) — a
head's direction has no sign — and NaN where either vector is zero (θ = 0 is not a direction,
and not a divergence).

- ``head_attn_relevant`` (S,): the attention on the relevant tokens of the test set (the mass,
  or for an activation that does not normalise the share Σ_relevant |σ_t| / Σ_t |σ_t|), mean over
  examples (and queries);
- ``head_u_norm``, ``head_key_norm`` (S,): ‖U_h‖ and the key-query part's norm (‖W_h‖_F,
  ‖Q_h K_hᵀ‖_F or ‖k_h‖);

A matrix readout U_h ∈ R^{d×o} (vector targets) enters as a vector twice over: ``head_u_norm`` is
its Frobenius norm and ``head_u_sim`` compares the flattened matrices, while the cosines with a
direction of R^d (``head_u_cos``, ``head_uk_cos``) read its top left singular vector (the token
direction it reads most), computed as the key directions are.
- ``head_u_cos``, ``head_key_cos`` (S, P): |cos| of U_h and of the head's key direction with
  each of the data's P planted directions; the key direction is k_h for the learned query, else
  the top left singular vector of W_h (the side the keys x_t read in x_tᵀ W_h x_q);
- ``head_attn_feature`` (S, F), for data with a per-feature mask: each head's attention on the
  tokens of feature f, mean over the test examples that hold f (and queries), NaN where none does;
- ``head_uk_cos`` (S,): |cos(key direction, U_h)| within a head;
- ``head_u_sim``, ``head_key_sim``, ``head_attn_sim`` (S, S): head–head |cos| of the readouts,
  the key directions and the attention patterns on the test set (flattened over examples and
  tokens).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from dynamics.core import model as mdl


def abs_cos(a: jax.Array, b: jax.Array) -> jax.Array:
    """|cos| between the rows of a (..., m, d) and b (..., k, d): (..., m, k); NaN for a zero row."""
    na = jnp.linalg.norm(a, axis=-1)
    nb = jnp.linalg.norm(b, axis=-1)
    dot = jnp.abs(jnp.einsum("...md,...kd->...mk", a, b))
    denom = na[..., :, None] * nb[..., None, :]
    return jnp.where(denom > 0, dot / jnp.where(denom > 0, denom, 1.0), jnp.nan)


SQUARINGS = 12  # M^(2^12): the top eigenvector dominates unless σ₂/σ₁ > 1 − 1e-4


def key_directions(params: mdl.Params) -> jax.Array:
    """(S, d): k_h, the position logits a_h ((S, T): not a token direction), or the top left
    singular vector of each key-query matrix W_h (sign arbitrary; a zero W gives a zero vector).
    Computed by repeated squaring of M = W Wᵀ, rescaled after each product, then M's largest
    column normalised: matrix products only (LAPACK's SVD, a custom call, deadlocked the engine's
    sharded programs on several CPU devices)."""
    if "k" in params or "a" in params:
        return params["k" if "k" in params else "a"]
    return top_left_singular(mdl.key_query_matrix(params))


def top_left_singular(W: jax.Array) -> jax.Array:
    """(S, d): the top left singular vector of each W_h (S, d, e), unit (sign arbitrary; zero for a
    zero W_h), by the repeated squaring that ``key_directions`` describes."""
    M = jnp.einsum("hde,hfe->hdf", W, W)  # (S, d, d): W Wᵀ, eigenvectors = left singular vectors
    for _ in range(SQUARINGS):
        M = jnp.einsum("hde,hef->hdf", M, M)
        scale = jnp.max(jnp.abs(M), axis=(1, 2), keepdims=True)
        M = M / jnp.where(scale > 0, scale, 1.0)
    norms = jnp.linalg.norm(M, axis=1)  # (S, d): each column's norm
    col = jnp.take_along_axis(M, jnp.argmax(norms, axis=1)[:, None, None], axis=2)[..., 0]  # (S, d)
    size = jnp.linalg.norm(col, axis=1, keepdims=True)
    return col / jnp.where(size > 0, size, 1.0)


def attention_share(A: jax.Array, normalises: bool) -> jax.Array:
    """The weights as shares of a query's attention: as they are when they sum to 1, else
    |σ_t| / Σ_t |σ_t|."""
    if normalises:
        return A
    total = jnp.sum(jnp.abs(A), axis=-1, keepdims=True)
    return jnp.abs(A) / jnp.where(total > 0, total, 1.0)


def head_metrics(
    params: mdl.Params,
    A_test: jax.Array,
    mask_test: jax.Array | None,
    directions: jax.Array | None,
    normalises: bool,
    features: jax.Array | None = None,
) -> dict[str, jax.Array]:
    """The per-slot metrics above. ``A_test`` (n, S, T) or (n, S, T_q, T), ``mask_test`` (n, T) or
    None, ``directions`` (P, d) unit rows or None, ``features`` (n, F, T) the per-feature mask or None."""
    U = params["U"]  # (S, d), or (S, d, o) for vector targets
    flat = U.reshape(U.shape[0], -1)  # (S, d·o)
    if U.ndim == 3:  # the matrix readout's token direction: its top left singular vector
        U = top_left_singular(U)
    keys = key_directions(params)
    # position logits a_h ∈ R^T have no direction in token space: no |cos| with U_h or the data's
    positional = "a" in params
    out = {
        "head_u_norm": jnp.linalg.norm(flat, axis=1),
        "head_key_norm": jnp.sqrt(mdl.key_norm2(params)),
        "head_uk_cos": jnp.full(U.shape[:1], jnp.nan, U.dtype)
        if positional
        else jnp.diagonal(abs_cos(keys, U)),
        "head_u_sim": abs_cos(flat, flat),
        "head_key_sim": abs_cos(keys, keys),
    }
    pattern = jnp.moveaxis(A_test, 1, 0).reshape(A_test.shape[1], -1)  # (S, n·…·T)
    out["head_attn_sim"] = abs_cos(pattern, pattern)
    if directions is not None:
        out["head_u_cos"] = abs_cos(U, directions)
        no_cos = jnp.full((U.shape[0], directions.shape[0]), jnp.nan, U.dtype)
        out["head_key_cos"] = no_cos if positional else abs_cos(keys, directions)
    share = attention_share(A_test, normalises)  # read by the two below (traced once; unused: dropped)
    if mask_test is not None:
        mass = jnp.einsum("nh...t,nt->nh...", share, mask_test.astype(share.dtype))
        out["head_attn_relevant"] = jnp.mean(mass.reshape(mass.shape[0], mass.shape[1], -1), axis=(0, 2))
    if features is not None:
        out["head_attn_feature"] = attention_per_feature(share, features)
    return out


def attention_per_feature(share: jax.Array, features: jax.Array) -> jax.Array:
    """(S, F): each head's attention share on feature f's tokens, mean over the examples holding f
    (and over queries); NaN for a feature no example holds. ``share`` (n, S, [T_q,] T)."""
    feats = features.astype(share.dtype)  # (n, F, T)
    mass = jnp.einsum("nh...t,nft->nh...f", share, feats)
    mass = jnp.mean(mass.reshape(mass.shape[0], mass.shape[1], -1, feats.shape[1]), axis=2)  # (n, S, F)
    held = jnp.any(features, axis=-1).astype(share.dtype)  # (n, F)
    count = jnp.sum(held, axis=0)[None, :]  # (1, F)
    total = jnp.einsum("nhf,nf->hf", mass, held)
    return jnp.where(count > 0, total / jnp.where(count > 0, count, 1.0), jnp.nan)
