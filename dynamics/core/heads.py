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
from dynamics.core.update import held_norm


def abs_cos(a: jax.Array, b: jax.Array) -> jax.Array:
    """|cos| between the rows of a (..., m, d) and b (..., k, d): (..., m, k); NaN for a zero row."""
    na = jnp.linalg.norm(a, axis=-1)
    nb = jnp.linalg.norm(b, axis=-1)
    dot = jnp.abs(jnp.einsum("...md,...kd->...mk", a, b))
    denom = na[..., :, None] * nb[..., None, :]
    return jnp.where(denom > 0, dot / jnp.where(denom > 0, denom, 1.0), jnp.nan)


# The power iteration of ``key_directions``: on M^(2^KEY_SQUARINGS) (M = W Wᵀ, so one iteration is 8
# power steps on M); it stops once an iterate moves by less than KEY_TOL (the sine of the angle
# between successive unit iterates; 1e-5 in float32, 1e-9 in float64) or after KEY_MAX_ITER.
KEY_SQUARINGS = 3
KEY_TOL = {4: 1e-5, 8: 1e-9}
KEY_MAX_ITER = 64


def key_directions(params: mdl.Params, start: jax.Array | None = None) -> jax.Array:
    """(S, d): k_h, the position logits a_h ((S, T): not a token direction), or the top left
    singular vector of each key-query matrix W_h (``top_left_singular``, warm-started from
    ``start`` (S, d), the direction at the last logged step)."""
    if "k" in params or "a" in params:
        return params["k" if "k" in params else "a"]
    return top_left_singular(mdl.key_query_matrix(params), start)


def top_left_singular(W: jax.Array, start: jax.Array | None = None) -> jax.Array:
    """(S, d): the top left singular vector of each W_h (S, d, e), unit (sign arbitrary; a zero W_h
    gives a zero vector), by power iteration on P = (W Wᵀ)⁸ warm-started from ``start`` (S, d)
    (else, and where W Wᵀ·start vanishes, from the largest column of W Wᵀ). Accuracy: with
    ρ = σ₂/σ₁ each iteration shrinks the angle to the top vector by ρ¹⁶, so when an iterate moves
    by less than δ = ``KEY_TOL`` the angle left is about δ·ρ¹⁶/(1 − ρ¹⁶): below 1e-5 in float32 for
    ρ ≤ 0.95 (6e-5 at 0.99; 1e-9 in float64), and the |cos| metrics that read the direction err by
    at most that angle. Matrix products only (LAPACK's SVD, a custom call, deadlocked the engine's
    sharded programs on several CPU devices); three squarings and, warm-started, a few
    matrix–vector products."""
    M = jnp.einsum("hde,hfe->hdf", W, W)  # (S, d, d): W Wᵀ, eigenvectors = left singular vectors
    tol = KEY_TOL[jnp.dtype(M.dtype).itemsize]
    cold = jnp.take_along_axis(M, jnp.argmax(jnp.linalg.norm(M, axis=1), axis=1)[:, None, None], axis=2)[
        ..., 0
    ]
    if start is not None:  # warm: the last direction, unless M has (almost) nothing along it
        reach = jnp.linalg.norm(jnp.einsum("hde,he->hd", M, start), axis=1)  # (S,)
        top = jnp.max(jnp.abs(M), axis=(1, 2)) * tol
        cold = jnp.where((reach > top)[:, None], start, cold)
    P = M
    for _ in range(KEY_SQUARINGS):  # P = M^8, rescaled after each product (no overflow)
        P = jnp.einsum("hde,hef->hdf", P, P)
        scale = jnp.max(jnp.abs(P), axis=(1, 2), keepdims=True)
        P = P / jnp.where(scale > 0, scale, 1.0)

    def unit(v):  # (S, d) rows scaled to norm 1 (a zero row stays 0)
        size = jnp.linalg.norm(v, axis=1, keepdims=True)
        return v / jnp.where(size > 0, size, 1.0)

    def moving(carry):
        i, _, moved = carry
        return (i < KEY_MAX_ITER) & (moved > tol)

    def step(carry):
        i, v, _ = carry
        new = unit(jnp.einsum("hde,he->hd", P, v))  # (S, d)
        # the sine of the angle moved: ‖new − (new·v) v‖ (v, new unit vectors, or 0)
        moved = jnp.linalg.norm(new - jnp.sum(new * v, axis=1, keepdims=True) * v, axis=1)
        return i + 1, new, jnp.max(moved)

    v0 = unit(cold)
    _, v, _ = jax.lax.while_loop(moving, step, (jnp.array(0), v0, jnp.array(jnp.inf, v0.dtype)))
    return v


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
    *,
    keys: jax.Array | None = None,
    sims: bool = True,
) -> dict[str, jax.Array]:
    """The per-slot metrics above. ``A_test`` (n, S, T) or (n, S, T_q, T), ``mask_test`` (n, T) or
    None, ``directions`` (P, d) unit rows or None, ``features`` (n, F, T) the per-feature mask or None;
    ``keys`` (S, d) the key directions (``key_directions``; computed here when None); ``sims``: the
    head–head matrices too."""
    U = mdl.readout_vector(params)  # (S, d), or (S, d, o) for vector targets
    flat = U.reshape(U.shape[0], -1)  # (S, d·o)
    if U.ndim == 3:  # the matrix readout's token direction: its top left singular vector
        U = top_left_singular(U)
    keys = key_directions(params) if keys is None else keys
    # position logits a_h ∈ R^T have no direction in token space: no |cos| with U_h or the data's
    # planted directions
    positional = "a" in params
    out = {
        "head_u_norm": held_norm(
            lambda s: jnp.sum(flat * flat if s is None else (flat / s[:, None]) ** 2, axis=1),
            jnp.max(jnp.abs(flat), axis=1),
        ),
        "head_key_norm": held_norm(
            lambda s: mdl.key_norm2(params, s), jnp.max(jnp.abs(mdl.key_part(params)), axis=1)
        ),
        "head_uk_cos": jnp.full(U.shape[:1], jnp.nan, U.dtype)
        if positional
        else abs_cos(keys[:, None, :], U[:, None, :])[:, 0, 0],  # (S,): each head's own pair
    }
    if sims:
        pattern = jnp.moveaxis(A_test, 1, 0).reshape(A_test.shape[1], -1)  # (S, n·…·T)
        out.update(
            head_u_sim=abs_cos(flat, flat),
            head_key_sim=abs_cos(keys, keys),
            head_attn_sim=abs_cos(pattern, pattern),
        )
    if directions is not None:
        out["head_u_cos"] = abs_cos(U, directions)
        no_cos = jnp.full((U.shape[0], directions.shape[0]), jnp.nan, U.dtype)
        out["head_key_cos"] = no_cos if positional else abs_cos(keys, directions)
    share = attention_share(A_test, normalises)  # read by the two below (traced once; unused: dropped)
    if features is not None and features.shape[-1] != A_test.shape[-1]:  # a query outside the keys
        features = features[..., : A_test.shape[-1]]  # (n, F, t): the keys' entries
    if mask_test is not None:
        mask = mdl.keys_of(mask_test, A_test)  # (n, t): the keys' entries
        mass = jnp.einsum("nh...t,nt->nh...", share, mask.astype(share.dtype))
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
