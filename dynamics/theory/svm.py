"""The attention SVM W^mm of Tarzanagh, Li, Zhang, Oymak ("Max-Margin Token Selection in Attention
Mechanism", NeurIPS 2023), solved with cvxpy and Clarabel, and the cosine of the key-query matrices
to it (``cosine``, ``head_cosines``). ``max_margin_direction`` solves it for the data's relevant
tokens; ``max_margin_W`` (query first, last, or outside the keys) and ``max_margin_p`` (a learned
query) for any selected tokens, e.g. ``selected_tokens``, the argmax of a model's attention at a step.

The solves are convex, once per data set, in float64 numpy (they do not jit); ``cosine`` and
``head_cosines`` are pure functions that jit. Dimension letters: ``n`` examples, ``t`` tokens,
``d``/``e`` width, ``c`` SVM constraints.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dynamics import parts
from dynamics.core import model
from dynamics.core.model import Params
from dynamics.theory.diagnostics import HIGHEST

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
    X: np.ndarray, relevant_mask: np.ndarray | None, queries: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The SVM's constraints c = (i, r, t) over every example i, relevant token r and irrelevant
    token t: (A (C, d) rows a_c = x_{i,r} − x_{i,t}, B (C, e) rows b_c = z_i, (i, r, t) each (C,)),
    so that constraint c reads a_cᵀ W b_c = ⟨W, a_c b_cᵀ⟩_F ≥ 1. z_i the query of example i:
    ``queries`` (n, e), or x_{i,1} (None: the first key queries). Refuses data it cannot use."""
    if relevant_mask is None:
        raise ValueError(
            "max-margin needs the relevant-token mask: this data model does not know its relevant "
            "tokens (DM1 and the tokenized mixture do; the planted model and user data do not)"
        )
    X = np.asarray(X, np.float64)
    mask = np.asarray(relevant_mask)
    if X.ndim == 3 and X.shape[0] == 0:
        raise ValueError("X has no examples (n = 0): the max-margin SVM needs at least one")
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
    if queries is None:
        return X[i, r] - X[i, t], X[i, 0], (i, r, t)
    Z = np.asarray(queries, np.float64)
    if Z.ndim != 2 or Z.shape[0] != X.shape[0]:
        raise ValueError(f"expected queries (n, e) with n = {X.shape[0]} (one per example); got {Z.shape}")
    return X[i, r] - X[i, t], Z[i], (i, r, t)


def max_margin_direction(
    X: np.ndarray | jax.Array,
    relevant_mask: np.ndarray | jax.Array | None,
    *,
    formulation: str | None = None,
    solver: str = SOLVER,
    solver_options: dict | None = None,
    check: bool = True,
    norm: str = "fro",
    queries: np.ndarray | jax.Array | None = None,
) -> MaxMargin:
    """The attention SVM (query = first token; Tarzanagh et al., NeurIPS 2023):

        W^mm = argmin ‖W‖_F  s.t.  (x_{i,r} − x_{i,t})ᵀ W x_{i,1} ≥ 1   for all i, r ∈ R_i, t ∉ R_i,

    or, with ``queries`` z (n, e), their general form with a query that is not a key (cross-attention):
    the same with z_i in place of x_{i,1}, W (d, e), the keys X alone.

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
    A, B, (i, r, t) = svm_constraints(X, relevant_mask, queries)  # (C, d), (C, e)
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
        return MaxMargin(np.full((d, B.shape[1]), np.nan), status, np.full((n, T, T), np.nan))
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
    if X.ndim == 3 and X.shape[0] == 0:
        raise ValueError("X has no examples (n = 0): the max-margin SVM needs at least one")
    if X.ndim != 3 or sel.shape != X.shape[:1] or not np.issubdtype(sel.dtype, np.integer):
        raise ValueError(f"expected X (n, T, d) and selected (n,) token indices; got {X.shape}, {sel.shape}")
    if np.any((sel < 0) | (sel >= X.shape[1])):
        raise ValueError(f"selected tokens must be in 0..{X.shape[1] - 1}; got {sel.tolist()!r:.80}")
    return X, np.arange(X.shape[1])[None, :] == sel[:, None]


def max_margin_W(X, selected, query: str = "first", **options) -> MaxMargin:
    """W^mm = argmin ‖W‖ s.t. (x_{i,α_i} − x_{i,t})ᵀ W x_{i,q} ≥ 1 for every example i and token
    t ≠ α_i: the max-margin key-query matrix for the selected tokens α (n,) (``selected_tokens``
    of one head, or the data's own), query x_q the first or the last token; for the query
    ``outside`` the keys, x_T queries the context: t and α_i range over 1…T−1 alone (the keys the
    model attends), and the SVM is ``max_margin_direction``'s with queries x_{i,T}; ‖W‖ the Frobenius
    norm (``norm="fro"``, the default) or the nuclear norm ‖W‖_* (``norm="nuc"``: the sum of the
    singular values, a low-rank W^mm). ``options`` those of ``max_margin_direction`` (norm,
    formulation, solver, solver_options, check)."""
    part = parts.QUERIES.get(query) if query in parts.QUERIES else None
    if part is not None and part.outside:
        X = np.asarray(X, np.float64)
        if X.ndim == 3 and X.shape[1] < 2:
            raise ValueError(f"query={query!r} needs T >= 2 tokens (one query, at least one key); X has T=1")
        keys, mask = _selection(X[:, :-1] if X.ndim == 3 else X, selected)  # (n, T - 1, d), (n, T - 1)
        return max_margin_direction(keys, mask, queries=X[:, -1], **options)
    X, mask = _selection(X, selected)
    token = None if part is None else part.token
    if token is None:
        raise ValueError(
            f"query={query!r}: W^mm is for the query 'first', 'last' or 'outside' (learned: max_margin_p)"
        )
    if token == 0:
        return max_margin_direction(X, mask, **options)
    # the constraints read x_{i,1}: put the last token first (the mask with it), the duals back
    W, status, dual = max_margin_direction(X[:, ::-1], mask[:, ::-1], **options)
    return MaxMargin(W, status, dual[:, ::-1, ::-1])


OPTIONS = ("norm", "formulation", "solver", "solver_options", "check")  # max_margin_direction's


def max_margin_p(X, selected, **options) -> np.ndarray:
    """p^mm = argmin ‖p‖ s.t. (x_{i,α_i} − x_{i,t})ᵀ p ≥ 1 for every example i and token t ≠ α_i:
    the max-margin query vector (the learned query's k) for the selected tokens α (n,); (d,).
    ``norm`` "fro" or "nuc" give the same p^mm: p is a d×1 matrix, whose one singular value is
    ‖p‖₂, so its nuclear and Frobenius norms are both ‖p‖₂ (solved as the Frobenius SVM either way).
    ``options`` as ``max_margin_W``'s (norm, formulation, solver, solver_options)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(
            f"max_margin_p: unknown option(s) {', '.join(unknown)}; allowed: {', '.join(OPTIONS)}"
        )
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
    import cvxpy as cp  # lazy: cvxpy: a heavy import, needed only here

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
    import cvxpy as cp  # lazy: cvxpy: a heavy import, needed only here

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
