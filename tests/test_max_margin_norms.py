"""The max-margin solvers' norms: W^mm of least nuclear norm (``norm="nuc"``) against a certificate
computed in numpy, an independent semidefinite formulation and a closed form; p^mm the same for
both norms; the knob ``sweep.maxmargin_norm`` that takes the option to the max-margin view."""

from __future__ import annotations

import types

import numpy as np
import pytest

from dynamics.theory import svm


def tiny(seed: int = 3, n: int = 3, T: int = 3, d: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """n examples of T Gaussian tokens in d dimensions and a selection (example i selects token i % T)."""
    X = np.random.default_rng(seed).normal(size=(n, T, d))
    return X, np.arange(n) % T


def constraints(X: np.ndarray, selected: np.ndarray, query: str) -> tuple[np.ndarray, np.ndarray]:
    """(A, B) (C, d): a_c = x_{i,α_i} − x_{i,t} for every t ≠ α_i, b_c = the query token; by loops."""
    A, B = [], []
    for i, x in enumerate(X):
        q = x[0] if query == "first" else x[-1]
        for t in range(len(x)):
            if t != selected[i]:
                A.append(x[selected[i]] - x[t])
                B.append(q)
    return np.array(A), np.array(B)


def nuclear(W: np.ndarray) -> float:
    return float(np.linalg.svd(W, compute_uv=False).sum())


def sdp_nuclear(A: np.ndarray, B: np.ndarray) -> tuple[float, np.ndarray]:
    """min ‖W‖_* s.t. a_cᵀ W b_c ≥ 1 written as the semidefinite program min (tr P + tr Q)/2 s.t.
    [[P, W], [Wᵀ, Q]] ⪰ 0 (another formulation than the solver's normNuc), solved with SCS."""
    import cvxpy as cp

    d, e = A.shape[1], B.shape[1]
    Z = cp.Variable((d + e, d + e), PSD=True)
    W = Z[:d, d:]
    margins = [A[c] @ W @ B[c] >= 1 for c in range(len(A))]
    problem = cp.Problem(cp.Minimize((cp.trace(Z[:d, :d]) + cp.trace(Z[d:, d:])) / 2), margins)
    problem.solve(solver="SCS", eps=1e-9, max_iters=200000)
    assert problem.status == "optimal"
    return float(problem.value), np.asarray(W.value)


@pytest.mark.parametrize("query", ["first", "last"])
def test_nuclear_W_is_certified_optimal_and_below_the_frobenius_one(query):
    """Every margin ≥ 1; the constraints' multipliers α certify optimality in numpy (α ≥ 0,
    ‖Σ α_c a_c b_cᵀ‖₂ ≤ 1, Σ α_c = ‖W‖_*: for any feasible V, ‖V‖_* ≥ ⟨V, M⟩ ≥ Σ α_c); its nuclear
    norm is at most the Frobenius solution's and equals the SDP formulation's optimum."""
    X, sel = tiny()
    A, B = constraints(X, sel, query)
    sol = svm.max_margin_W(X, sel, query, norm="nuc")
    fro = svm.max_margin_W(X, sel, query).W
    assert sol.status == "optimal"
    margins = np.einsum("cd,de,ce->c", A, sol.W, B)
    assert margins.min() >= 1 - 1e-6
    # the multipliers in the order of the loops above: dual[i, α_i, t] for t ≠ α_i
    alpha = np.array(
        [sol.dual[i, sel[i], t] for i in range(len(X)) for t in range(X.shape[1]) if t != sel[i]]
    )
    M = np.einsum("c,cd,ce->de", alpha, A, B)
    assert alpha.min() >= -1e-8
    assert np.linalg.norm(M, 2) <= 1 + 1e-6
    assert abs(alpha.sum() - nuclear(sol.W)) <= 1e-6 * nuclear(sol.W)
    assert np.all(np.abs(alpha * (margins - 1)) <= 1e-6)  # complementary slackness
    assert nuclear(sol.W) <= nuclear(fro) + 1e-8
    assert nuclear(sol.W) < nuclear(fro) - 1e-3  # here the two norms select different W^mm
    value, W_sdp = sdp_nuclear(A, B)
    assert abs(value - nuclear(sol.W)) <= 1e-5 * value
    assert np.einsum("cd,de,ce->c", A, W_sdp, B).min() >= 1 - 1e-5


def test_one_constraint_gives_the_rank_one_closed_form():
    """One example of two tokens: the single constraint aᵀ W b ≥ 1 (a = x_sel − x_other, b = x_1);
    both norms' W^mm is a bᵀ / (‖a‖² ‖b‖²), rank one, of norm 1 / (‖a‖ ‖b‖)."""
    X = np.random.default_rng(0).normal(size=(1, 2, 3))
    a, b = X[0, 1] - X[0, 0], X[0, 0]
    want = np.outer(a, b) / (a @ a * (b @ b))
    for norm in ("nuc", "fro"):
        W = svm.max_margin_W(X, np.array([1]), norm=norm).W
        np.testing.assert_allclose(W, want, rtol=1e-6, atol=1e-9)
        s = np.linalg.svd(W, compute_uv=False)
        assert s[1] <= 1e-7 * s[0]  # rank one
        assert abs(nuclear(W) - 1 / (np.linalg.norm(a) * np.linalg.norm(b))) <= 1e-6 * nuclear(W)


def test_p_mm_is_the_same_for_both_norms():
    """A vector's nuclear norm (as a d×1 matrix) is its 2-norm: p^mm with norm='nuc' is the Frobenius
    p^mm, and both equal an independent nuclear-norm solve of the d×1 problem."""
    import cvxpy as cp

    X, sel = tiny(seed=7, n=2, T=3, d=3)
    A, _ = constraints(X, sel, "first")
    p = svm.max_margin_p(X, sel)
    np.testing.assert_array_equal(svm.max_margin_p(X, sel, norm="nuc"), p)
    np.testing.assert_allclose(svm.max_margin_p(X, sel, formulation="primal"), p, rtol=1e-6, atol=1e-8)
    P = cp.Variable((3, 1))
    problem = cp.Problem(cp.Minimize(cp.normNuc(P)), [A @ P >= 1])
    problem.solve(solver="CLARABEL")
    np.testing.assert_allclose(P.value[:, 0], p, rtol=1e-6, atol=1e-8)
    assert (A @ p).min() >= 1 - 1e-6


def test_the_norm_and_formulation_are_checked():
    X, sel = tiny()
    with pytest.raises(ValueError, match="norm='l1' is not one of"):
        svm.max_margin_W(X, sel, norm="l1")
    with pytest.raises(ValueError, match="norm='l1' is not one of"):
        svm.max_margin_p(X, sel, norm="l1")
    with pytest.raises(ValueError, match="formulation='dual' with norm='nuc'"):
        svm.max_margin_W(X, sel, norm="nuc", formulation="dual")
    primal = svm.max_margin_W(X, sel, norm="nuc", formulation="primal").W
    np.testing.assert_array_equal(primal, svm.max_margin_W(X, sel, norm="nuc").W)


def test_the_knob_reaches_the_view_and_is_refused_without_it(monkeypatch):
    """``sweep.maxmargin_norm`` (--maxmargin-norm): refused where no maxmargin diagnostic runs; a
    run's diagnostics (``add_diagnostics``, the view of its snapshots) solve W^mm of that norm and
    name it in the summary. The trial's data are given here (no draw compiled)."""
    from dynamics.api import with_overrides
    from dynamics.sweeps.execute import add_diagnostics
    from dynamics.theory import maxmargin

    with pytest.raises(ValueError, match="maxmargin_norm.*has no maxmargin"):
        with_overrides("max-margin", maxmargin_norm="nuc")
    cfg = with_overrides(
        "max-margin", maxmargin_norm="nuc", diagnostics=("maxmargin",), save_params=True, trials=2,
        n_train=3, T=3, d=3, steps=2, log_every=1,
    )  # fmt: skip
    X, _ = tiny(seed=5)
    monkeypatch.setattr(
        maxmargin,
        "every_trial",
        lambda c, data, shared: [types.SimpleNamespace(X_train=X, mask_train=None)] * 2,
    )
    W = np.random.default_rng(1).normal(size=(1, 2, 3, 1, 3, 3))  # (heads, trials, L, H, d, d)
    result = types.SimpleNamespace(
        config=cfg, steps=np.arange(3), curves={"train_loss": np.zeros((1, 2, 3)), "param_W": W}, extra={}
    )
    add_diagnostics(types.SimpleNamespace(config=cfg), result, progress=False, drawn=None)
    assert result.extra["diagnostics"]["norm"] == "nuclear"
    for trial in range(2):  # every trial solves the nuclear W^mm (not only the first)
        sel = np.argmax(np.einsum("ntd,de,ne->nt", X, W[0, trial, -1, 0], X[:, 0]), axis=1)  # final argmax
        mm = svm.max_margin_W(X, sel, norm="nuc").W
        flat = W[0, trial, :, 0].reshape(3, -1)
        want = flat @ mm.reshape(-1) / (np.linalg.norm(flat, axis=1) * np.linalg.norm(mm))
        np.testing.assert_allclose(result.curves["maxmargin_cos"][0, trial], want, rtol=1e-9)
        np.testing.assert_allclose(result.curves["maxmargin_norm"][0, trial], np.linalg.norm(flat, axis=1))
    assert nuclear(mm) < nuclear(svm.max_margin_W(X, sel).W) - 1e-3  # another W^mm than the default's
