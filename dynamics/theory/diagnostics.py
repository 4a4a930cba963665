"""What the theory talks about, measured on a state θ: curvature and the tangent kernel (the
max margin, the attention SVM, is ``dynamics.theory.svm``'s).

- ``hessian_extremes``: λ_max (sharpness; the edge of stability is η·λ_max ≈ 2) and λ_min (the
  weak-convexity side) of the Hessian of a loss with respect to every parameter, by Lanczos on
  Hessian-vector products; ``fast_path_hessian_extremes`` gets those of the H-head model from one
  representative head (zero init: all heads identical) through the heads' permutation symmetry.
- ``ntk``, ``fast_path_ntk``, ``kernel_distance``: the empirical neural tangent kernel of Φ and
  how far it has moved, 1 − ⟨K₀, K_t⟩_F / (‖K₀‖_F ‖K_t‖_F).

Everything is a pure function that jits; shapes and options that change shapes (H, ``iters``,
query, norm, loss) are static. Dimension letters: ``n``/``m`` examples, ``t``/``s`` tokens, ``h``
heads, ``d``/``e`` width, ``p``/``P`` flattened parameters, ``k`` Lanczos steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

from dynamics import parts
from dynamics.core import losses, model

Params = model.Params

# Full float32 (or float64) products in the diagnostics' own reductions: on GPUs JAX's default
# lets float32 matmuls run in TF32 (~1e-3 relative), which would spoil the reorthogonalisation.
HIGHEST = jax.lax.Precision.HIGHEST

# Lanczos steps: λ_max (an outlier) converges in ~20, λ_min (in a cluster) needs ~60 on DM1 sizes;
# measured numbers in ``hessian_extremes``. The residual bounds in ``Extremes`` say how close a run got.
DEFAULT_ITERS = 64


# --------------------------------------------------------------------------------------------
# Curvature: Lanczos on Hessian-vector products
# --------------------------------------------------------------------------------------------


class Extremes(NamedTuple):
    """Extreme Ritz values of a symmetric operator M after k Lanczos steps, with error bounds."""

    lam_max: jax.Array  # () largest Ritz value θ_max ≤ λ_max(M)
    lam_min: jax.Array  # () smallest Ritz value θ_min ≥ λ_min(M)
    res_max: jax.Array  # () ‖M s − θ_max s‖ (s the unit Ritz vector): M has an eigenvalue within it
    res_min: jax.Array  # () the same for θ_min


def lanczos_extremes(
    matvec: Callable[[jax.Array], jax.Array], v0: jax.Array, key: jax.Array, *, iters: int = DEFAULT_ITERS
) -> Extremes:
    """Extreme eigenvalues of a symmetric operator M (P, P), given as ``matvec`` v ↦ M v, by
    k = min(iters, P) Lanczos steps from ``v0`` (P,) with full reorthogonalisation.

    Step j: w = M v_j, α_j = v_jᵀ w, w ← w − V_jᵀ V_j w (classical Gram–Schmidt against all
    v_0..v_j, twice: "twice is enough"), β_j = ‖w‖, v_{j+1} = w / β_j. The Ritz values are the
    eigenvalues θ of the tridiagonal T_k = tridiag(β, α, β); for a Ritz pair (θ, s) the residual is
    ‖M V_kᵀ s − θ V_kᵀ s‖ = β_{k−1} |s_{k−1}|, and M has an eigenvalue within it. θ_max ≤ λ_max and
    θ_min ≥ λ_min (interlacing): Lanczos errs towards the inside of the spectrum. With k = P the
    values are exact up to rounding. A breakdown (β_j ≈ 0: an invariant subspace was found) restarts
    from a random vector orthogonal to the basis (drawn from ``key``), with β_j = 0 in T_k.
    The step count is static, so the whole run is one ``lax.fori_loop`` that jits; memory is k·P.
    """
    P = v0.shape[0]
    k = min(int(iters), P)
    if k < 1:
        raise ValueError(f"iters={iters!r} must be a positive integer")
    dtype = v0.dtype
    tiny = jnp.finfo(dtype).eps * 100

    def orthogonalise(V, w):  # rows of V not yet filled are zero
        for _ in range(2):
            w = w - jnp.matmul(jnp.matmul(V, w, precision=HIGHEST), V, precision=HIGHEST)  # (P,)
        return w

    def step(j, state):
        V, alpha, beta, v, scale = state
        V = V.at[j].set(v)  # (k, P)
        w = matvec(v)  # (P,)
        a = jnp.vdot(v, w, precision=HIGHEST)
        w = orthogonalise(V, w)
        b = jnp.linalg.norm(w)
        scale = jnp.maximum(scale, jnp.abs(a) + b)
        broke = b <= tiny * scale
        r = orthogonalise(V, jax.random.normal(jax.random.fold_in(key, j), (P,), dtype))
        v_next = jnp.where(broke, r / jnp.linalg.norm(r), w / jnp.where(broke, 1.0, b))
        return V, alpha.at[j].set(a), beta.at[j].set(jnp.where(broke, 0.0, b)), v_next, scale

    init = (
        jnp.zeros((k, P), dtype),  # V: Lanczos vectors as rows
        jnp.zeros((k,), dtype),  # α
        jnp.zeros((k,), dtype),  # β; β_{k−1} is the residual norm past the last step
        v0 / jnp.linalg.norm(v0),
        jnp.zeros((), dtype),  # running scale of ‖M‖ for the breakdown test
    )
    _, alpha, beta, _, _ = jax.lax.fori_loop(0, k, step, init)
    off = beta[:-1]  # (k-1,)
    T = jnp.diag(alpha) + jnp.diag(off, 1) + jnp.diag(off, -1)  # (k, k)
    theta, S = jnp.linalg.eigh(T)  # ascending; S (k, k) eigenvectors as columns
    res = jnp.abs(beta[-1] * S[-1, :])  # (k,)
    return Extremes(theta[-1], theta[0], res[-1], res[0])


def hessian_vector_product(
    loss_fn: Callable[[Params], jax.Array], params: Params
) -> tuple[jax.Array, Callable[[jax.Array], jax.Array]]:
    """(θ flat (P,), v ↦ ∇²L(θ) v): forward-over-reverse, ``jax.jvp`` of ``jax.grad`` taken once
    with ``jax.linearize`` so that the gradient's own forward pass is not redone per product."""
    flat, unravel = ravel_pytree(params)
    _, hvp = jax.linearize(jax.grad(lambda f: loss_fn(unravel(f))), flat)
    return flat, hvp


def hessian_lanczos(
    loss_fn: Callable[[Params], jax.Array], params: Params, key: jax.Array, *, iters: int = DEFAULT_ITERS
) -> Extremes:
    """``lanczos_extremes`` of the Hessian ∇²L(θ) of a scalar ``loss_fn`` with respect to every
    leaf of ``params``, from a random start drawn from ``key``; with the residual bounds."""
    flat, hvp = hessian_vector_product(loss_fn, params)
    k_start, k_restart = jax.random.split(key)
    v0 = jax.random.normal(k_start, flat.shape, flat.dtype)  # (P,)
    return lanczos_extremes(hvp, v0, k_restart, iters=iters)


def hessian_extremes(
    loss_fn: Callable[[Params], jax.Array], params: Params, key: jax.Array, *, iters: int = DEFAULT_ITERS
) -> tuple[jax.Array, jax.Array]:
    """(λ_max, λ_min) of the Hessian of ``loss_fn`` at ``params`` (any pytree), by ``iters``
    Lanczos steps with full reorthogonalisation on Hessian-vector products (``hessian_lanczos``).

    Tolerance, against dense Hessian eigenvalues, as |error| / max(|λ_max|, |λ_min|):
    - k ≥ P steps: exact up to rounding (~1e-12 in float64; tests/test_diagnostics.py).
    - DM1 (n = 100, d = 32, T = 10), random init (σ₀ = 1), H = 4 (P = 4224), query "first" and
      "all": 20 steps give λ_max to 1e-15 but λ_min only to 1e-2; 40 steps 2e-5; 60 steps
      below 1e-15 (float64) and 1e-7 (float32) at both ends. Fast path after 200 GD steps, H = 8:
      30 steps suffice (1e-15). Hence the default 64.
    - H = 2, d = 8, T = 6, n = 32, query "all" (P = 144 > k = 64; the test
      ``test_lanczos_tolerance_below_full_dimension``): 2e-16 in float64, ~2e-7 in float32
      (asserted: 1e-9 and 1e-5); 8 steps leave λ_min off by more than 1e-6 there.
    Convergence depends on the spectral gaps at the ends, so no a-priori bound holds for every
    state: Ritz values lie inside the spectrum (an unconverged run underestimates |λ|), and
    ``hessian_lanczos`` returns the residual bounds to log next to λ.
    Cost: k Hessian-vector products (each about two gradients) and k·P memory.
    """
    ext = hessian_lanczos(loss_fn, params, key, iters=iters)
    return ext.lam_max, ext.lam_min


def training_loss(
    params: Params,
    X: jax.Array,
    y: jax.Array,
    *,
    query: model.Query | str = model.Query.FIRST,
    norm: model.Norm | str = model.Norm.SQRT,
    loss: losses.Loss | str = losses.Loss.LOGISTIC,
    weight: jax.Array | None = None,
    n_heads: int | None = None,
) -> jax.Array:
    """L(θ) = (1/n) Σ_i ℓ(y_i Φ(X_i; θ)) with Φ = ``model.logits`` (stored heads of weights w_s)."""
    loss = parts.LOSSES.get(loss, "loss").name
    phi = model.logits(params, X, query=query, norm=norm, weight=weight, n_heads=n_heads)  # (n,)
    return losses.mean_loss(y * phi, loss)


def _one_head(params: Params) -> Params:
    """The representative head of a one-stored-head pytree (leaves (1, …)) as leaves (…)."""
    for name, leaf in params.items():
        if leaf.ndim < 2 or leaf.shape[0] != 1:
            raise ValueError(
                f"the fast path takes one stored head (leading axis 1); params[{name!r}] has shape "
                f"{leaf.shape}"
            )
    return {name: leaf[0] for name, leaf in params.items()}


def _check_heads(n_heads: object) -> int:
    if isinstance(n_heads, bool) or not isinstance(n_heads, int | np.integer) or n_heads < 1:
        raise ValueError(f"n_heads={n_heads!r} must be a positive Python integer (it is static)")
    return int(n_heads)


def fast_path_operators(
    params: Params,
    X: jax.Array,
    y: jax.Array,
    *,
    n_heads: int,
    query: model.Query | str = model.Query.FIRST,
    norm: model.Norm | str = model.Norm.SQRT,
    loss: losses.Loss | str = losses.Loss.LOGISTIC,
) -> tuple[jax.Array, Callable, Callable | None]:
    """(θ flat (p,), v ↦ (A + (H−1)B) v, v ↦ (A − B) v or None for H = 1): the two blocks of the
    H-head Hessian at (θ, …, θ), from the one stored head ``params`` (leaves (1, …)).

    Let L(θ_1, …, θ_H) be the H-head loss and A = ∂²L/∂θ_h², B = ∂²L/∂θ_h∂θ_h' (h ≠ h') at
    θ_h = θ: the same for every h, h' because permuting heads leaves L unchanged. Then
    ∇²L = I_H ⊗ (A − B) + 1 1ᵀ ⊗ B; on u ⊗ v it gives (A − B + H·B)v if u = 1 and (A − B)v if
    u ⊥ 1. So spec ∇²L = spec(A + (H−1)B) ∪ spec(A − B) (multiplicity H − 1), nothing materialised:
    - g(θ) = L(θ, …, θ), one stored head of weight H: ∇²g = Σ_{h,h'} blocks = H (A + (H−1)B).
    - g₃(a, b, c) = L with stored heads a, b of weight 1 and c of weight H − 2 (dropped for H = 2):
      ∇²g₃ (v, −v, 0) has a-part (A − B)v and b-part −(A − B)v; we take half their difference.
    """
    H = _check_heads(n_heads)
    head = _one_head(params)
    flat, unravel = ravel_pytree(head)  # (p,)
    dtype = flat.dtype
    kw = dict(query=query, norm=norm, loss=loss, n_heads=H)

    def stored(F):  # F (S, p) -> params with S stored heads
        return jax.vmap(unravel)(F)

    def g(f):  # L(θ, …, θ): one stored head of weight H
        return training_loss(stored(f[None, :]), X, y, weight=jnp.full((1,), H, dtype), **kw)

    _, hvp_g = jax.linearize(jax.grad(g), flat)

    def symmetric(v):  # (p,) -> (p,): (A + (H−1)B) v
        return hvp_g(v) / H

    if H == 1:
        return flat, symmetric, None
    weight = jnp.array([1.0, 1.0] if H == 2 else [1.0, 1.0, H - 2.0], dtype)  # (S,)
    S = weight.shape[0]

    def g3(F):  # (S, p): heads a, b single, c standing for the other H − 2
        return training_loss(stored(F), X, y, weight=weight, **kw)

    _, hvp_g3 = jax.linearize(jax.grad(g3), jnp.broadcast_to(flat, (S, flat.shape[0])))

    def difference(v):  # (p,) -> (p,): (A − B) v
        out = hvp_g3(jnp.zeros((S, v.shape[0]), dtype).at[0].set(v).at[1].set(-v))  # (S, p)
        return 0.5 * (out[0] - out[1])

    return flat, symmetric, difference


class FastPathHessian(NamedTuple):
    """The H-head Hessian at (θ, …, θ) split by the heads' symmetry (``fast_path_operators``)."""

    symmetric: Extremes  # of A + (H−1)B: directions moving all heads alike
    difference: Extremes | None  # of A − B: directions that split heads (multiplicity H−1); None if H = 1

    def extremes(self) -> tuple[jax.Array, jax.Array]:
        """(λ_max, λ_min) over both blocks: spec ∇²L = spec(A + (H−1)B) ∪ spec(A − B)."""
        if self.difference is None:
            return self.symmetric.lam_max, self.symmetric.lam_min
        return (
            jnp.maximum(self.symmetric.lam_max, self.difference.lam_max),
            jnp.minimum(self.symmetric.lam_min, self.difference.lam_min),
        )


def fast_path_hessian(
    params: Params, X: jax.Array, y: jax.Array, key: jax.Array, *, iters: int = DEFAULT_ITERS, **model_options
) -> FastPathHessian:
    """Lanczos (``lanczos_extremes``, ``iters`` steps) on both blocks of ``fast_path_operators``
    (``model_options``: its ``n_heads``, ``query``, ``norm``, ``loss``): the Hessian of the H-head
    model of identical heads θ = ``params`` (one stored head, leaves (1, …)), per block.
    Cost: k products on one head (symmetric) and k on two or three stored heads (difference)."""
    flat, symmetric, difference = fast_path_operators(params, X, y, **model_options)
    k_sym, k_diff = jax.random.split(key)
    ks = jax.random.split(k_sym)
    sym = lanczos_extremes(symmetric, jax.random.normal(ks[0], flat.shape, flat.dtype), ks[1], iters=iters)
    if difference is None:
        return FastPathHessian(sym, None)
    kd = jax.random.split(k_diff)
    diff = lanczos_extremes(difference, jax.random.normal(kd[0], flat.shape, flat.dtype), kd[1], iters=iters)
    return FastPathHessian(sym, diff)


def fast_path_hessian_extremes(
    params: Params, X: jax.Array, y: jax.Array, key: jax.Array, **options
) -> tuple[jax.Array, jax.Array]:
    """(λ_max, λ_min) of the Hessian of the H-head training loss at H identical heads θ, from the
    one stored head ``params`` (the zero-init fast path): ``fast_path_hessian`` (``options``: its
    ``iters`` and ``fast_path_operators``'s ``n_heads``, ``query``, ``norm``, ``loss``) reduced by
    ``FastPathHessian.extremes``. Same tolerance as ``hessian_extremes`` (measured in
    tests/test_diagnostics.py)."""
    return fast_path_hessian(params, X, y, key, **options).extremes()


# --------------------------------------------------------------------------------------------
# Tangent kernel
# --------------------------------------------------------------------------------------------


def ntk(phi_fn: Callable[[Params, jax.Array], jax.Array], params: Params, X: jax.Array) -> jax.Array:
    """Empirical NTK K = J Jᵀ, (m, m), with J_i = ∂Φ(X_i; θ)/∂θ over every leaf of ``params``.

    ``phi_fn(params, X)`` maps (m, T, d) to Φ (m,), one example at a time (no coupling between
    examples). J is built from per-example reverse-mode gradients, ``vmap`` of ``grad`` over the
    m examples (m backward passes of one example each): m ≪ P here, so reverse mode beats P forward
    passes (``jacfwd``), and per-example passes avoid ``jacrev``'s m passes over the whole subset.
    Cost: m gradients of one example, memory m·P (m ≤ 256 examples is the intended use).
    """
    m = X.shape[0]

    def phi_one(p, x):  # x (T, d) -> ()
        return phi_fn(p, x[None])[0]

    J = jax.vmap(jax.grad(phi_one), in_axes=(None, 0))(params, X)  # leaves (m, …)
    blocks = [leaf.reshape(m, -1) for leaf in jax.tree.leaves(J)]  # (m, P_leaf) each
    return sum(jnp.matmul(Jl, Jl.T, precision=HIGHEST) for Jl in blocks)  # (m, m)


def fast_path_ntk(
    params: Params,
    X: jax.Array,
    *,
    n_heads: int,
    query: model.Query | str = model.Query.FIRST,
    norm: model.Norm | str = model.Norm.SQRT,
) -> jax.Array:
    """NTK (m, m) of the H-head model whose H heads all equal the stored head ``params`` (leaves (1, …)).

    Φ = c_H Σ_h f(X; θ_h), so J = [c_H J_f, …, c_H J_f] (H blocks) and K = J Jᵀ = H c_H² J_f J_fᵀ,
    J_f the Jacobian of one head's output f = Uᵀ Xᵀ softmax(X W x_q). (Not the kernel of the stored
    head of weight H as a model of its own parameters, which is (H c_H)² J_f J_fᵀ.) H c_H² is 1
    for c_H = 1/√H, 1/H for "mean", H for "sum"; ``kernel_distance`` does not see this factor.

    At θ = 0 (zero init): softmax is uniform, so f = Uᵀ x̄ with x̄ = (1/T) Σ_t x_t for either query,
    ∂f/∂U = x̄ and ∂f/∂W = 0 (f is linear in U and U = 0). Hence K₀ = H c_H² X̄ X̄ᵀ, the Gram matrix
    of the mean tokens X̄ (m, d): nonzero (so the distance from it is defined) but of rank ≤ d, and
    blind to attention; from the first step on (U ≠ 0) the key-query block contributes.
    """
    H = _check_heads(n_heads)
    _one_head(params)  # shape check
    c = model.head_norm(H, norm)

    def f(p, X):  # (m,) one head's output, c = 1
        return model.head_outputs(p, X, query)[:, 0]

    return (H * c * c) * ntk(f, params, X)


def kernel_distance(K0: jax.Array, Kt: jax.Array) -> jax.Array:
    """1 − ⟨K₀, K_t⟩_F / (‖K₀‖_F ‖K_t‖_F): 0 when K_t ∝ K₀ (positive factor), at most 1 for PSD
    kernels; NaN if either kernel is zero (undefined, reported rather than guessed)."""
    return 1.0 - jnp.vdot(K0, Kt, precision=HIGHEST) / (jnp.linalg.norm(K0) * jnp.linalg.norm(Kt))
