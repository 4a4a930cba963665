"""What the theory talks about, measured on a state θ: curvature, tangent kernel, max margin.

- ``hessian_extremes``: λ_max (sharpness; the edge of stability is η·λ_max ≈ 2) and λ_min (the
  weak-convexity side) of the Hessian of a loss with respect to every parameter, by Lanczos on
  Hessian-vector products; ``fast_path_hessian_extremes`` gets those of the H-head model from one
  representative head (zero init: all heads identical) through the heads' permutation symmetry.
- ``ntk``, ``fast_path_ntk``, ``kernel_distance``: the empirical neural tangent kernel of Φ and
  how far it has moved, 1 − ⟨K₀, K_t⟩_F / (‖K₀‖_F ‖K_t‖_F).
- ``max_margin_direction``, ``cosine``, ``head_cosines``: the attention SVM W^mm of Tarzanagh, Li,
  Zhang, Oymak ("Max-Margin Token Selection in Attention Mechanism", NeurIPS 2023), solved with
  cvxpy and Clarabel, and the cosine of the key-query matrices to it; ``max_margin_W`` (query
  first or last) and ``max_margin_p`` (a learned query) solve it for any selected tokens, e.g.
  ``selected_tokens``, the argmax of a model's attention at a step.

Everything but the max-margin solves (convex, once per data set) and ``selected_tokens`` is a
pure function that jits; shapes and options that change shapes (H, ``iters``, query, norm, loss) are static.
Dimension letters: ``n``/``m`` examples, ``t``/``s`` tokens, ``h`` heads, ``d``/``e`` width, ``p``/``P``
flattened parameters, ``k`` Lanczos steps, ``c`` SVM constraints.
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


# --------------------------------------------------------------------------------------------
# Max-margin token selection
# --------------------------------------------------------------------------------------------

SOLVER = "CLARABEL"  # open-source interior-point solver installed with cvxpy; certifies infeasibility
# Clarabel's defaults (1e-8) leave W^mm off by ~1e-6..1e-5 relative (measured on DM1); these cost
# a few more iterations. Passed only when ``solver`` is Clarabel.
CLARABEL_OPTIONS = {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "tol_feas": 1e-10}
FORMULATIONS = ("dual", "primal")
# The norm W^mm minimises: "fro" ‖W‖_F (Tarzanagh et al.'s SVM), "nuc" the nuclear norm ‖W‖_* = Σ σ_i
# (the sum of singular values; it favours low rank), solved as cvxpy's normNuc (a semidefinite program).
NORMS = ("fro", "nuc")
NORM_NAMES = {"fro": "frobenius", "nuc": "nuclear"}  # each of NORMS as results.json names it


class MaxMarginError(RuntimeError):
    """The attention SVM had no optimal solution (infeasible data, or the solver failed)."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


class MaxMargin(NamedTuple):
    """The attention SVM's solution (``max_margin_direction``)."""

    W: np.ndarray  # (d, d) W^mm; NaN when the solve failed (with check=False)
    status: str  # "optimal" (the only success), "infeasible", or the solver's status; see below
    dual: np.ndarray  # (n, T, T) α[i, r, t] ≥ 0 of constraint (i, r, t), 0 elsewhere; NaN on failure


def svm_constraints(
    X: np.ndarray, relevant_mask: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The SVM's constraints c = (i, r, t) over every example i, relevant token r and irrelevant
    token t: (A (C, d) rows a_c = x_{i,r} − x_{i,t}, B (C, d) rows b_c = x_{i,1}, (i, r, t) each (C,)),
    so that constraint c reads a_cᵀ W b_c = ⟨W, a_c b_cᵀ⟩_F ≥ 1. Refuses data it cannot use."""
    if relevant_mask is None:
        raise ValueError(
            "max-margin needs the relevant-token mask: this data model does not know its relevant "
            "tokens (DM1 and the tokenized mixture do; the planted model and user data do not)"
        )
    X = np.asarray(X, np.float64)
    mask = np.asarray(relevant_mask)
    if X.ndim != 3 or mask.shape != X.shape[:2] or mask.dtype != np.bool_:
        raise ValueError(
            f"expected X (n, T, d) and a bool relevant_mask (n, T); got X {X.shape} and mask "
            f"{mask.shape} {mask.dtype}"
        )

    def some(idx):
        return f"{idx[:10].tolist()}{' …' if idx.size > 10 else ''} ({idx.size} examples)"

    none, every = np.flatnonzero(~mask.any(axis=1)), np.flatnonzero(mask.all(axis=1))
    if none.size or every.size:
        raise ValueError(
            "every example needs a relevant and an irrelevant token for the max-margin SVM; "
            f"no relevant token: {some(none)}, no irrelevant token: {some(every)}"
        )
    i, r, t = np.nonzero(mask[:, :, None] & ~mask[:, None, :])  # (C,) each
    return X[i, r] - X[i, t], X[i, 0], (i, r, t)


def max_margin_direction(
    X: np.ndarray | jax.Array,
    relevant_mask: np.ndarray | jax.Array | None,
    *,
    formulation: str | None = None,
    solver: str = SOLVER,
    solver_options: dict | None = None,
    check: bool = True,
    norm: str = "fro",
) -> MaxMargin:
    """The attention SVM (query = first token; Tarzanagh et al., NeurIPS 2023):

        W^mm = argmin ‖W‖_F  s.t.  (x_{i,r} − x_{i,t})ᵀ W x_{i,1} ≥ 1   for all i, r ∈ R_i, t ∉ R_i,

    R_i the relevant tokens of example i (``relevant_mask`` (n, T)), X (n, T, d); in float64 with
    cvxpy and ``solver`` (Clarabel, with ``CLARABEL_OPTIONS``, by default). With a_c, b_c of
    ``svm_constraints`` and g_c = vec(a_c b_cᵀ) (C, d²), one matrix constraint either way:
    - ``"primal"``: min ½‖w‖² s.t. G w ≥ 1, w = vec(W); α = the constraint's duals.
    - ``"dual"`` (default): min ½ αᵀKα − 1ᵀα s.t. α ≥ 0 with K = G Gᵀ = (A Aᵀ) ⊙ (B Bᵀ) (C, C);
      W = Σ_c α_c a_c b_cᵀ. Measured on DM1 (d = 32, n = 100, C = 900, a loaded 2-core CPU):
      1.5–2.5 s against 15–40 s for the primal, whose dense (C + d²) KKT system Clarabel's sparse
      factorisation handles slowly; n = 300 (C = 2700) takes ~30 s. Cost grows as C³ (dual)
      or C·d⁴ (primal) per interior-point iteration (10 to 20 of them).
    KKT, which the returned values satisfy: W = Σ_c α_c (x_{i,r} − x_{i,t}) x_{i,1}ᵀ, α ≥ 0,
    α_c (a_cᵀ W b_c − 1) = 0; ``dual`` holds α as α[i, r, t]. W^mm is unique (strictly convex
    objective), α is not when the active g_c are linearly dependent (e.g. more of them than d²).
    ``formulation`` None is "dual". ``norm="nuc"``: argmin ‖W‖_* (nuclear: the sum of singular
    values) under the same constraints, cvxpy's ``normNuc`` as written (an SDP; ``formulation``
    None or "primal"); ``dual`` holds the multipliers α, a certificate: ‖Σ_c α_c a_c b_cᵀ‖₂ ≤ 1
    and Σ_c α_c = ‖W‖_*. Unlike the Frobenius W^mm, the nuclear one need not be unique.

    Status: "optimal" is the only success, and only if the returned W also meets every margin to
    1e-6 (checked here). Infeasible data (e.g. a token relevant in one example and irrelevant in
    another with the same query; for the dual this is an unbounded QP) give "infeasible"; anything
    else is the solver's status. Failure raises ``MaxMarginError`` (with ``.status``); with
    ``check=False`` it is returned instead, with W and the duals NaN. Refuses (ValueError) data
    without a mask, or with an example that lacks relevant or irrelevant tokens.
    """
    formulation = _formulation(formulation, norm)
    X = np.asarray(X, np.float64)
    n, T, d = X.shape
    A, B, (i, r, t) = svm_constraints(X, relevant_mask)  # (C, d), (C, d)
    options = dict(CLARABEL_OPTIONS) if solver_options is None and solver == SOLVER else solver_options or {}
    status, raw, detail, W, a = _solve_svm(A, B, formulation, solver, options)
    if status != "optimal":
        message = (
            f"max-margin SVM ({formulation}, {A.shape[0]} constraints, {d}x{d} W, solver {solver}) ended "
            f"with status {status!r} (solver status {raw!r}){detail}"
            + (
                ": no W separates these relevant tokens from the irrelevant ones"
                if "infeasible" in status
                else ""
            )
        )
        if check:
            raise MaxMarginError(status, message)
        return MaxMargin(np.full((d, d), np.nan), status, np.full((n, T, T), np.nan))
    dual = np.zeros((n, T, T))
    dual[i, r, t] = a
    return MaxMargin(W, status, dual)


def selected_tokens(
    params: Params, X: jax.Array, query: str = "first", activation: str = "softmax", beta: float = 1.0
) -> np.ndarray:
    """The token each head selects (the argmax of its attention) in each example: (n, H) int.
    ``params`` a model's θ at some step (``inits.init_params``' layout; a learned query k too)."""
    scores = np.asarray(model.attention(params, jnp.asarray(X), query, activation, beta))
    if scores.ndim != 3:
        raise ValueError(f"query={query!r} has one query per token: a selected token needs one query")
    return np.argmax(scores, axis=-1)  # (n, H)


def _selection(X: np.ndarray, selected) -> tuple[np.ndarray, np.ndarray]:
    """X as float64 (n, T, d) and the mask (n, T) of each example's one selected token."""
    X = np.asarray(X, np.float64)
    sel = np.asarray(selected)
    if X.ndim != 3 or sel.shape != X.shape[:1] or not np.issubdtype(sel.dtype, np.integer):
        raise ValueError(f"expected X (n, T, d) and selected (n,) token indices; got {X.shape}, {sel.shape}")
    if np.any((sel < 0) | (sel >= X.shape[1])):
        raise ValueError(f"selected tokens must be in 0..{X.shape[1] - 1}; got {sel.tolist()!r:.80}")
    return X, np.arange(X.shape[1])[None, :] == sel[:, None]


def max_margin_W(X, selected, query: str = "first", **options) -> MaxMargin:
    """W^mm = argmin ‖W‖ s.t. (x_{i,α_i} − x_{i,t})ᵀ W x_{i,q} ≥ 1 for every example i and token
    t ≠ α_i: the max-margin key-query matrix for the selected tokens α (n,) (``selected_tokens``
    of one head, or the data's own), query x_q the first or the last token; ‖W‖ the Frobenius
    norm (``norm="fro"``, the default) or the nuclear norm ‖W‖_* (``norm="nuc"``: the sum of the
    singular values, a low-rank W^mm). ``options`` those of ``max_margin_direction`` (norm,
    formulation, solver, solver_options, check)."""
    X, mask = _selection(X, selected)
    if query not in ("first", "last"):
        raise ValueError(f"query={query!r}: W^mm is for the query 'first' or 'last' (learned: max_margin_p)")
    if query == "first":
        return max_margin_direction(X, mask, **options)
    # the constraints read x_{i,1}: put the last token first (the mask with it), the duals back
    W, status, dual = max_margin_direction(X[:, ::-1], mask[:, ::-1], **options)
    return MaxMargin(W, status, dual[:, ::-1, ::-1])


def max_margin_p(X, selected, **options) -> np.ndarray:
    """p^mm = argmin ‖p‖ s.t. (x_{i,α_i} − x_{i,t})ᵀ p ≥ 1 for every example i and token t ≠ α_i:
    the max-margin query vector (the learned query's k) for the selected tokens α (n,); (d,).
    ``norm`` "fro" or "nuc" give the same p^mm: p is a d×1 matrix, whose one singular value is
    ‖p‖₂, so its nuclear and Frobenius norms are both ‖p‖₂ (solved as the Frobenius SVM either way).
    ``options`` as ``max_margin_W``'s (norm, formulation, solver, solver_options)."""
    X, mask = _selection(X, selected)
    A, _, _ = svm_constraints(X, mask)
    norm = options.get("norm", "fro")
    if norm not in NORMS:
        raise ValueError(f"norm={norm!r} is not one of {NORMS}")
    formulation = _formulation(options.get("formulation"), "fro")  # a vector: ‖p‖_* = ‖p‖_F
    solver = options.get("solver", SOLVER)
    opts = options.get("solver_options")
    opts = dict(CLARABEL_OPTIONS) if opts is None and solver == SOLVER else opts or {}
    status, raw, detail, W, _ = _solve_svm(A, np.ones((A.shape[0], 1)), formulation, solver, opts)
    if status != "optimal":
        raise MaxMarginError(status, f"p^mm SVM ended with status {status!r} (solver status {raw!r}){detail}")
    return W[:, 0]


def _formulation(formulation: str | None, norm: str) -> str:
    """The problem ``_svm_problem`` solves: "dual" or "primal" (Frobenius), "nuclear" (``norm="nuc"``)."""
    if norm not in NORMS:
        raise ValueError(f"norm={norm!r} is not one of {NORMS}")
    if norm == "nuc":
        if formulation not in (None, "primal"):
            raise ValueError(
                f"formulation={formulation!r} with norm='nuc': the nuclear-norm SVM is solved as written "
                "(formulation None or 'primal'); 'dual' is the Frobenius SVM's"
            )
        return "nuclear"
    if formulation is None:
        return "dual"
    if formulation not in FORMULATIONS:
        raise ValueError(f"formulation={formulation!r} is not one of {FORMULATIONS}")
    return formulation


def _svm_problem(A: np.ndarray, B: np.ndarray, formulation: str):
    """(cvxpy problem, status map, recover () -> (W (d, e), α (C,))) of the SVM with constraints
    a_cᵀ W b_c ≥ 1, A (C, d), B (C, e) (``max_margin_direction`` describes the formulations; "nuclear"
    minimises ‖W‖_*)."""
    import cvxpy as cp  # a heavy import, needed only here

    C, d = A.shape
    if formulation == "nuclear":
        W = cp.Variable((d, B.shape[1]))
        margins = cp.sum(cp.multiply(A @ W, B), axis=1) >= 1.0  # a_cᵀ W b_c = Σ_e (A W)_ce B_ce
        problem = cp.Problem(cp.Minimize(cp.normNuc(W)), [margins])

        def recover():
            return np.asarray(W.value, np.float64), np.asarray(margins.dual_value, np.float64).reshape(C)

        return problem, {cp.OPTIMAL: "optimal", cp.INFEASIBLE: "infeasible"}, recover
    if formulation == "primal":
        e = B.shape[1]
        G = np.einsum("cd,ce->cde", A, B).reshape(C, d * e)  # (C, d·e), C order like vec(W)
        w = cp.Variable(d * e)
        margins = G @ w >= 1.0
        problem = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(w)), [margins])
        statuses = {cp.OPTIMAL: "optimal", cp.INFEASIBLE: "infeasible"}

        def recover():
            a = np.asarray(margins.dual_value, np.float64).reshape(C)
            return np.asarray(w.value).reshape(d, e), a

        return problem, statuses, recover
    K = (A @ A.T) * (B @ B.T)  # (C, C) Gram of the g_c
    alpha = cp.Variable(C)
    problem = cp.Problem(cp.Minimize(0.5 * cp.quad_form(alpha, cp.psd_wrap(K)) - cp.sum(alpha)), [alpha >= 0])
    # α = 0 is feasible, so the dual is never infeasible; unbounded below ⇔ the SVM is infeasible
    statuses = {
        cp.OPTIMAL: "optimal",
        cp.UNBOUNDED: "infeasible",
        cp.UNBOUNDED_INACCURATE: "infeasible_inaccurate",
    }

    def recover():
        a = np.asarray(alpha.value, np.float64).reshape(C)
        return np.einsum("c,cd,ce->de", a, A, B), a

    return problem, statuses, recover


def _solve_svm(A: np.ndarray, B: np.ndarray, formulation: str, solver: str, options: dict):
    """(status, solver's raw status, detail, W or None, α or None): the solve, its status mapped
    to ours, and the margins of an "optimal" W checked (min_c a_cᵀ W b_c ≥ 1 − 1e-6)."""
    import cvxpy as cp

    problem, statuses, recover = _svm_problem(A, B, formulation)
    detail = ""
    try:
        problem.solve(solver=solver, **options)
        raw = str(problem.status)
    except cp.error.SolverError as err:
        raw, detail = "solver_error", f": {err}"
    status = statuses.get(raw, raw)
    if status != "optimal":
        return status, raw, detail, None, None
    W, a = recover()
    worst = float(np.min(np.einsum("cd,de,ce->c", A, W, B)))  # min_c a_cᵀ W b_c, should be ≥ 1
    if not worst >= 1.0 - 1e-6:
        return "optimal_inaccurate", raw, f": the solution misses a margin (min {worst:.3g} < 1)", None, None
    return status, raw, detail, W, a


def cosine(A: jax.Array, B: jax.Array) -> jax.Array:
    """⟨A, B⟩_F / (‖A‖_F ‖B‖_F) of two arrays of one shape; NaN if either is zero."""
    return jnp.vdot(A, B, precision=HIGHEST) / (jnp.linalg.norm(A.ravel()) * jnp.linalg.norm(B.ravel()))


def head_cosines(
    W_heads: jax.Array, W_mm: jax.Array, weight: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """(cos(Σ_s w_s W_s, W^mm), max_s cos(W_s, W^mm)) for stored key-query matrices W_heads (S, d, d)
    (``model.key_query_matrix``) of weights w_s (default 1; weight-0 slots are skipped). On the fast
    path the one stored head gives both numbers. At W = 0 (zero init) the cosine is undefined: NaN."""
    S = W_heads.shape[0]
    w = jnp.ones((S,), W_heads.dtype) if weight is None else weight  # (S,)
    total = jnp.einsum("s,sde->de", w, W_heads, precision=HIGHEST)  # (d, d)
    per_head = jax.vmap(cosine, in_axes=(0, None))(W_heads, W_mm)  # (S,)
    return cosine(total, W_mm), jnp.max(jnp.where(w > 0, per_head, -jnp.inf))
