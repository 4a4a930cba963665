"""Sequence outputs: every token queries and has its own output, value identity (no readout U),

    f_h(X)_s = Σ_t σ(β·X W_h x_s)_t x_t,   f(X) = c_H Σ_h f_h(X) ∈ R^{T×d},

or a learned value V_h ∈ R^{d×d} per head (``model.readout='value'``), token t's value V_hᵀ x_t
(the row convention: row t of X V_h),

    f_h(X)_s = Σ_t σ(β·X W_h x_s)_t V_hᵀ x_t,   i.e. f_h(X) = σ(β·X W_h Xᵀ) X V_h,

as in Cui, Behrens, Krzakala, Zdeborová (2024)'s dot-product attention (H = 1, W = Q Qᵀ / d there:
the data model folds 1/d into the tokens' scale or the init). The engine treats the T·d numbers of
an example as vector targets (o = T·d, flattened token by token), so the loss, the heads' sum and
the packs are the vector targets' (``dynamics.core.model.combine_heads``). Dimension letters:
``n`` examples, ``h`` heads, ``s`` the querying token, ``t`` the attended one, ``d``/``e`` width.
"""

from __future__ import annotations

import jax


def identity_values(A: jax.Array, X: jax.Array) -> jax.Array:
    """Each query's attention-weighted tokens, value identity: A (n, H, T) -> (n, H, d) (one query),
    A (n, H, T_q, T) -> (n, H, T_q·d) (every query, flattened token by token)."""
    if A.ndim == 3:
        return jax.numpy.einsum("nht,ntd->nhd", A, X)  # (n, h, d): Σ_t A_t x_t
    out = jax.numpy.einsum("nhst,ntd->nhsd", A, X)  # (n, h, s, d)
    return out.reshape(out.shape[0], out.shape[1], -1)  # (n, h, s·d)


def learned_values(A: jax.Array, X: jax.Array, V: jax.Array) -> jax.Array:
    """Each query's attention-weighted values V_hᵀ x_t (V (H, d, e), e = d): A (n, H, T) -> (n, H, e)
    (one query), A (n, H, T_q, T) -> (n, H, T_q·e) (every query, flattened token by token)."""
    Xa = identity_values(A, X)  # (n, h, d) or (n, h, s·d): Σ_t A_st x_t, then V_hᵀ of it (linear)
    Xa = Xa.reshape(Xa.shape[0], Xa.shape[1], -1, X.shape[-1])  # (n, h, s, d)
    out = jax.numpy.einsum("nhsd,hde->nhse", Xa, V)  # (n, h, s, e): Σ_d (Σ_t A_st x_t)_d V_h,de
    return out.reshape(out.shape[0], out.shape[1], -1) if A.ndim == 4 else out[:, :, 0]
