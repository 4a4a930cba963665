"""Diagnostics against independent float64 references: dense Hessians, explicit Jacobians, KKT."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from helpers import FAST_COMPILE
from jax.flatten_util import ravel_pytree

from dynamics.core import inits, model
from dynamics.core import rng as keys
from dynamics.theory import diagnostics as dg
from dynamics.theory import svm

# The tests' jitted programs (references and the diagnostics under test alike) are compiled at XLA's
# backend optimisation level 0 on the CPU: several times faster to compile (compiling is these
# tests' run time), the same traced functions; the numbers may differ from the default level's in
# the last bits, far inside every tolerance below (float64, relative 1e-10 or looser).
jit = functools.partial(jax.jit, compiler_options=FAST_COMPILE)


def key(seed: int) -> jax.Array:
    """jax.random.PRNGKey(seed)'s raw key, from numpy (the same bits; no eager compile)."""
    return jnp.asarray(keys.seed(seed))


def dense_hessian(loss_fn, params) -> np.ndarray:
    """∇²L (P, P) with jax.hessian on the flattened parameters (the reference Lanczos must meet)."""

    @jit  # flattened inside the program: an eager ravel_pytree compiles its concatenation alone
    def hessian(params):
        flat, unravel = ravel_pytree(params)
        return jax.hessian(lambda f: loss_fn(unravel(f)))(flat)

    return np.asarray(hessian(params))


def small_data(n=8, T=4, d=4, r=1, key=0, M=2):
    """A DM1-like data set in float64 numpy: (X (n, T, d), y (n,), mask (n, T)), the tokenized
    mixture's law (datamodels.tokenized_mixture, antipodal means of norm 1, unit noise) drawn with
    numpy: the generator itself is tested in test_datamodels.py, and a jitted draw per shape cost a
    compiled program each here (several seconds) for data that only needs to be DM1-like."""
    rng = np.random.default_rng(1000 + key)
    y = rng.choice([-1.0, 1.0], size=n)  # (n,)
    mask = np.argsort(np.argsort(rng.random((n, T)), axis=1), axis=1) < r  # (n, T) r relevant each
    eye = np.eye(d)
    mu_y = y[:, None] * eye[0]  # (n, d): mu_plus = e_0, mu_minus = -e_0
    irrelevant = eye[2 + rng.integers(0, M, size=(n, T))] if M else np.zeros((n, T, d))  # nu_j = e_{2+j}
    means = np.where(mask[:, :, None], mu_y[:, None, :], irrelevant)  # (n, T, d)
    X = (means + rng.normal(size=(n, T, d)) / np.sqrt(d)).astype(np.float32)  # float32 like the generator
    return X.astype(np.float64), y, mask


def random_params(seed, H, d, key_query="full", head_size=None, scale=1.0):
    """Entries N(0, scale²/d), float64 (numpy draws: no per-op compiles in the tests)."""
    rng = np.random.default_rng(seed)
    shapes = inits.head_shapes(d, head_size if key_query == "factored" else None)
    return {k: jnp.asarray(scale / np.sqrt(d) * rng.normal(size=(H, *shape))) for k, shape in shapes.items()}


def rel_err(got, want, radius):
    return abs(float(got) - float(want)) / radius


# ---------------------------------------------------------------------------------------------
# Lanczos
# ---------------------------------------------------------------------------------------------


def test_lanczos_is_exact_at_full_dimension_and_survives_breakdown(x64):
    """k = P steps recover the extreme eigenvalues of a random symmetric matrix; a matrix with three
    distinct eigenvalues makes the Krylov space break down after three steps, and the restart
    still finds both ends (a NaN or a lost end fails)."""
    rng = np.random.default_rng(0)
    P = 12
    A = rng.normal(size=(P, P))
    A = A + A.T
    e = np.linalg.eigvalsh(A)
    run = jit(lambda M, v0, key: dg.lanczos_extremes(lambda v: M @ v, v0, key, iters=P))
    ext = run(jnp.asarray(A), jnp.asarray(rng.normal(size=P)), key(1))
    np.testing.assert_allclose([ext.lam_max, ext.lam_min], [e[-1], e[0]], rtol=1e-12)
    assert float(ext.res_max) < 1e-10 and float(ext.res_min) < 1e-10

    D = jnp.asarray(np.diag([-2.0] + [1.0] * (P - 2) + [5.0]))
    v0 = np.zeros(P)
    v0[1] = 1.0  # inside the 1-eigenspace: breaks down at once
    ext = run(D, jnp.asarray(v0), key(2))
    np.testing.assert_allclose([ext.lam_max, ext.lam_min], [5.0, -2.0], rtol=1e-12)


QNL = [("first", "sqrt", "full"), ("all", "mean", "full"), ("first", "sum", "factored")]


@pytest.mark.slow_cases("first-sqrt-full")
@pytest.mark.parametrize("query,norm,key_query", QNL)
def test_hessian_extremes_match_dense_hessian_at_random_init(x64, query, norm, key_query):
    """The generic case: random init, all heads different; k = P steps, under jit."""
    H, d = 2, 4
    X, y, _ = small_data()
    params = random_params(3, H, d, key_query, 2)
    loss_fn = functools.partial(dg.training_loss, X=X, y=y, query=query, norm=norm, loss="logistic")
    e = np.linalg.eigvalsh(dense_hessian(loss_fn, params))
    P = e.size
    lam_max, lam_min = jit(lambda p, k: dg.hessian_extremes(loss_fn, p, k, iters=P))(params, key(0))
    radius = max(abs(e[0]), abs(e[-1]))
    assert rel_err(lam_max, e[-1], radius) < 1e-10
    assert rel_err(lam_min, e[0], radius) < 1e-10
    assert e[0] < 0 < e[-1]  # the test sees both ends


@pytest.mark.slow
def test_lanczos_tolerance_below_full_dimension(x64):
    """The default step count on a model with P > k: the measured error of both ends, in float64
    and float32, against dense eigenvalues; Ritz values lie inside the spectrum and within their
    residual bounds of an eigenvalue."""
    H, d = 2, 8
    X, y, _ = small_data(n=32, T=6, d=d, key=5)
    params = random_params(4, H, d)
    loss_fn = functools.partial(dg.training_loss, X=X, y=y, query="all", norm="sqrt", loss="logistic")
    hessian = dense_hessian(loss_fn, params)
    e = np.linalg.eigvalsh(hessian)
    assert e.size == 144 > dg.DEFAULT_ITERS
    radius = max(abs(e[0]), abs(e[-1]))
    for dtype, tol in ((jnp.float64, 1e-9), (jnp.float32, 1e-5)):
        p = jax.tree.map(lambda x, dtype=dtype: np.asarray(x, dtype), params)  # numpy: no eager casts
        f = functools.partial(
            dg.training_loss, X=X.astype(dtype), y=y.astype(dtype), query="all", norm="sqrt", loss="logistic"
        )
        # one program per dtype; float64 also returns hessian_lanczos's start vector (used below)
        run = jax.jit(
            lambda p, k, f=f, start=dtype is jnp.float64: (
                dg.hessian_lanczos(f, p, k),
                jax.random.normal(jax.random.split(k)[0], (e.size,), jnp.float64) if start else None,
            )
        )
        ext, start = run(p, jax.random.PRNGKey(1))
        err_max, err_min = rel_err(ext.lam_max, e[-1], radius), rel_err(ext.lam_min, e[0], radius)
        print(f"{jnp.dtype(dtype).name}: k={dg.DEFAULT_ITERS}, P={e.size}: {err_max=:.1e} {err_min=:.1e}")
        assert err_max < tol and err_min < tol
        if dtype is jnp.float64:
            v0 = np.asarray(start)
            assert e[0] - 1e-12 <= float(ext.lam_min) and float(ext.lam_max) <= e[-1] + 1e-12
            assert np.min(np.abs(e - float(ext.lam_max))) <= float(ext.res_max) + 1e-12
            assert np.min(np.abs(e - float(ext.lam_min))) <= float(ext.res_min) + 1e-12
    # fewer steps do not converge here: the tolerance above is a measurement, not a tautology.
    # 8 Lanczos steps from hessian_lanczos's own start vector, in float64 numpy on the dense
    # Hessian (a second compiled Lanczos program cost as much as the 64-step one).
    few_min, _ = numpy_lanczos_extremes(hessian, v0, 8)
    assert rel_err(few_min, e[0], radius) > 1e-6


def numpy_lanczos_extremes(A: np.ndarray, v0: np.ndarray, k: int) -> tuple[float, float]:
    """(θ_min, θ_max) after k Lanczos steps on a dense symmetric A from v0, in float64 numpy, with
    full reorthogonalisation (twice) as in dg.lanczos_extremes; no breakdown expected (asserted)."""
    V = np.zeros((k, A.shape[0]))
    alpha, beta = np.zeros(k), np.zeros(k)
    v = v0 / np.linalg.norm(v0)
    for j in range(k):
        V[j] = v
        w = A @ v
        alpha[j] = v @ w
        for _ in range(2):
            w = w - (V @ w) @ V
        beta[j] = np.linalg.norm(w)
        assert beta[j] > 1e-8 * np.abs(A).max()
        v = w / beta[j]
    theta = np.linalg.eigvalsh(np.diag(alpha) + np.diag(beta[:-1], 1) + np.diag(beta[:-1], -1))
    return theta[0], theta[-1]


# ---------------------------------------------------------------------------------------------
# The zero-init fast path
# ---------------------------------------------------------------------------------------------


def trained_identical_heads(H, X, y, query, norm, loss, optimizer, steps=12):
    """Zero init trained on the explicit H-head model: the heads stay identical, W ≠ 0."""
    L = functools.partial(dg.training_loss, X=X, y=y, query=query, norm=norm, loss=loss)
    opt = optax.sgd(2.0 * H) if optimizer == "gd" else optax.adam(0.1)

    @jit  # θ(0) = 0 made inside the program (eager init_params compiles its zeros one by one)
    def train(key):
        params = inits.init_params(key, H, X.shape[-1])

        def step(_, carry):
            params, state = carry
            updates, state = opt.update(jax.grad(L)(params), state)
            return optax.apply_updates(params, updates), state

        return jax.lax.fori_loop(0, steps, step, (params, opt.init(params)))[0]

    return train(key(0)), L


FAST = [  # H = 1 (no difference block), 2 (no third stored head), 3 (the general layout)
    (1, "first", "sqrt", "logistic", "gd"),
    # each case compiles three programs (~15–20 s): the training, the dense Hessian and the blocks
    # with two Lanczos loops. H = 2's layout is also the default suite's (2, "all", "mean", "exp")
    # case, and first/sqrt/logistic its H = 1 and H = 3 cases': this one runs under stress.
    pytest.param(2, "first", "sqrt", "logistic", "gd", marks=pytest.mark.stress),
    (3, "first", "sqrt", "logistic", "gd"),
    (2, "all", "mean", "exp", "gd"),
    (3, "all", "sum", "logistic", "adam"),
]


@pytest.mark.slow_cases("1-first-sqrt-logistic-gd")
@pytest.mark.parametrize("H,query,norm,loss,optimizer", FAST)
def test_fast_path_hessian_is_the_H_head_hessian(x64, H, query, norm, loss, optimizer):
    """spec ∇²L of the explicit H-head model (dense jax.hessian) = spec(A + (H−1)B) ∪ spec(A − B)^(H−1)
    (full spectra, multiplicities included), and the fast path's λ_max, λ_min are its extremes."""
    X, y, _ = small_data(key=H)
    params, L = trained_identical_heads(H, X, y, query, norm, loss, optimizer)
    for leaf in params.values():
        leaf = np.asarray(leaf)  # numpy here and below: eager jnp ops compile one by one
        np.testing.assert_array_equal(leaf, np.broadcast_to(leaf[:1], leaf.shape))  # identical heads
    assert float(np.linalg.norm(np.asarray(params["W"])[0])) > 1e-2  # a state where attention has moved
    e = np.linalg.eigvalsh(dense_hessian(L, params))  # (H·p,)
    one = {k: np.asarray(v)[:1] for k, v in params.items()}
    kw = dict(n_heads=H, query=query, norm=norm, loss=loss)

    p = sum(v.size for v in one.values())  # ravel_pytree(one)[0].size

    @jit
    def blocks_and_extremes(one, key):  # one program: the two blocks as dense (p, p) matrices,
        _, symmetric, difference = dg.fast_path_operators(one, X, y, **kw)  # column by column,
        dense = [jax.vmap(symmetric)(jnp.eye(p))]  # and the fast path's Lanczos extremes
        dense = dense if difference is None else dense + [jax.vmap(difference)(jnp.eye(p))]
        return dense, dg.fast_path_hessian_extremes(one, X, y, key, iters=p, **kw)

    blocks, (lam_max, lam_min) = blocks_and_extremes(one, key(7))
    spectra = [np.linalg.eigvalsh(np.asarray(b)) for b in blocks]
    assert len(spectra) == min(H, 2)
    spectra += spectra[1:] * (H - 2)  # A − B has multiplicity H − 1
    radius = max(abs(e[0]), abs(e[-1]))
    np.testing.assert_allclose(np.sort(np.concatenate(spectra)), e, rtol=0, atol=1e-10 * radius)
    assert rel_err(lam_max, e[-1], radius) < 1e-10
    assert rel_err(lam_min, e[0], radius) < 1e-10


def test_fast_path_rejects_several_stored_heads():
    params = {"U": np.zeros((2, 4)), "W": np.zeros((2, 4, 4))}  # inits.init_params(key, 2, 4): zeros
    X, y = np.zeros((3, 4, 4)), np.ones(3)  # numpy: refused before any array op
    with pytest.raises(ValueError, match="one stored head"):
        dg.fast_path_operators(params, X, y, n_heads=2)
    with pytest.raises(ValueError, match="n_heads"):
        dg.fast_path_operators({k: v[:1] for k, v in params.items()}, X, y, n_heads=0)


# ---------------------------------------------------------------------------------------------
# Tangent kernel
# ---------------------------------------------------------------------------------------------


# flattened inside the program (an eager ravel_pytree compiles its concatenation alone); one
# program per shape and (query, norm), shared by the calls of a test (θ and θ = 0 alike)
@functools.partial(jit, static_argnames=("query", "norm"))
def _jacobian(params, X, query, norm):
    flat, unravel = ravel_pytree(params)
    return jax.jacfwd(lambda f: model.logits(unravel(f), X, query=query, norm=norm))(flat)


def explicit_ntk(params, X, query, norm):
    """J Jᵀ with J (m, P) from jax.jacfwd of the H-head Φ over the flattened parameters."""
    J = np.asarray(_jacobian(params, X, query=query, norm=norm))  # (m, P)
    return J @ J.T


@pytest.mark.parametrize("query,norm,key_query", QNL)
def test_ntk_matches_explicit_jacobian(x64, query, norm, key_query):
    X, _, _ = small_data(key=1)
    params = random_params(1, 3, 4, key_query, 2)
    phi = functools.partial(model.logits, query=query, norm=norm)
    K = jit(lambda p, X: dg.ntk(phi, p, X))(params, X)
    want = explicit_ntk(params, X, query, norm)
    np.testing.assert_allclose(K, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


@pytest.mark.parametrize("H,query,norm", [(1, "first", "sqrt"), (2, "all", "mean"), (3, "first", "sum")])
def test_fast_path_ntk_is_the_H_head_kernel(x64, H, query, norm):
    """One stored head for H identical heads: the H-head model's kernel, H c_H² J_f J_fᵀ; at θ = 0,
    K₀ = H c_H² X̄ X̄ᵀ (mean tokens), of rank ≤ d."""
    X, _, _ = small_data(key=2)
    one = random_params(2, 1, 4, scale=2.0)
    many = {k: np.repeat(np.asarray(v), H, axis=0) for k, v in one.items()}  # numpy: no eager compiles
    kernel = jit(functools.partial(dg.fast_path_ntk, n_heads=H, query=query, norm=norm))
    K = kernel(one, X)
    want = explicit_ntk(many, X, query, norm)
    np.testing.assert_allclose(K, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())

    zero = jax.tree.map(np.zeros_like, one)
    K0 = kernel(zero, X)
    Xbar = np.asarray(X).mean(axis=1)  # (m, d)
    c = model.head_norm(H, norm)
    np.testing.assert_allclose(K0, H * c * c * Xbar @ Xbar.T, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(
        K0, explicit_ntk(jax.tree.map(np.zeros_like, many), X, query, norm), atol=1e-14
    )
    assert np.linalg.matrix_rank(np.asarray(K0)) <= 4 < X.shape[0]  # degenerate: rank ≤ d < m


def test_kernel_distance():
    rng = np.random.default_rng(0)
    J = rng.normal(size=(5, 7))
    K = (J @ J.T).astype(np.float32)
    eye, other = np.eye(2, dtype=np.float32), np.array([[0.0, 1.0], [1.0, 0.0]], np.float32)

    @jit  # the four distances in one compiled program (op by op, each primitive compiles alone)
    def distances(K, eye, other):
        return (
            dg.kernel_distance(K, 3.0 * K),
            dg.kernel_distance(eye, other),
            dg.kernel_distance(eye, jnp.ones((2, 2))),
            dg.kernel_distance(jnp.zeros((2, 2)), eye),
        )

    scaled, orthogonal, ones, zero = distances(K, eye, other)
    assert abs(float(scaled)) < 1e-6  # scale-blind
    assert float(orthogonal) == pytest.approx(1.0)  # orthogonal in ⟨·,·⟩_F
    assert float(ones) == pytest.approx(1 - 2 / (np.sqrt(2) * 2))
    assert np.isnan(float(zero))


# ---------------------------------------------------------------------------------------------
# Max margin
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("r,formulation", [(1, "dual"), (2, "dual"), (2, "primal")])
def test_max_margin_satisfies_constraints_and_kkt(r, formulation):
    """Primal feasibility, active constraints, dual feasibility, stationarity W = Σ α (x_r − x_t) x_1ᵀ
    and complementary slackness, all recomputed here from X (not from the module's constraint matrix):
    together they certify optimality of the convex QP."""
    n, T, d = 12, 5, 6
    X, _, mask = small_data(n=n, T=T, d=d, r=r, key=r, M=3)  # float64 numpy
    sol = svm.max_margin_direction(X, mask, formulation=formulation)
    assert sol.status == "optimal" and sol.W.shape == (d, d) and sol.dual.shape == (n, T, T)
    # g[i, s, t] = (x_{i,s} − x_{i,t})ᵀ W x_{i,1}
    score = np.einsum("ntd,de,ne->nt", X, sol.W, X[:, 0])  # (n, T)
    g = score[:, :, None] - score[:, None, :]  # (n, T, T)
    pair = mask[:, :, None] & ~mask[:, None, :]  # (n, T, T) the constraints
    assert pair.sum() == n * r * (T - r)
    scale = np.abs(sol.W).max()
    assert g[pair].min() >= 1 - 1e-7  # feasible
    assert g[pair].min() <= 1 + 1e-7  # the margin is tight (else a smaller W would do)
    alpha = sol.dual
    assert np.all(alpha[~pair] == 0) and alpha[pair].min() >= -1e-9
    stationary = np.einsum("nst,nsd,ne->de", alpha, X, X[:, 0]) - np.einsum(
        "nst,ntd,ne->de", alpha, X, X[:, 0]
    )
    np.testing.assert_allclose(stationary, sol.W, atol=1e-6 * scale)
    assert np.abs(alpha[pair] * (g[pair] - 1)).max() < 1e-6
    assert (alpha[pair] > 1e-6).any()


def test_max_margin_primal_and_dual_agree():
    """Two formulations, two different cvxpy problems: the same W^mm (unique: the objective is strictly
    convex). α need not be unique (72 constraints on a 36-dimensional W here): each set is checked
    by the KKT test, not compared."""
    X, _, mask = small_data(n=12, T=5, d=6, r=2, key=3, M=3)
    primal = svm.max_margin_direction(X, mask, formulation="primal")
    dual = svm.max_margin_direction(X, mask, formulation="dual")
    np.testing.assert_allclose(dual.W, primal.W, rtol=0, atol=1e-6 * np.abs(primal.W).max())
    with pytest.raises(ValueError, match="formulation"):
        svm.max_margin_direction(X, mask, formulation="kernel")


@pytest.mark.parametrize("formulation", ["dual", "primal"])
def test_max_margin_reports_infeasible_data(formulation):
    """Two examples with the same query and tokens, relevance swapped: (a−q)ᵀWq ≥ 1 and (q−a)ᵀWq ≥ 1
    cannot both hold."""
    q, a = np.array([1.0, 0.0]), np.array([0.3, 1.0])
    X = np.stack([np.stack([q, a]), np.stack([q, a])])  # (2, 2, 2)
    mask = np.array([[False, True], [True, False]])
    with pytest.raises(svm.MaxMarginError, match="infeasible") as info:
        svm.max_margin_direction(X, mask, formulation=formulation)
    assert info.value.status == "infeasible"
    sol = svm.max_margin_direction(X, mask, formulation=formulation, check=False)
    assert sol.status == "infeasible" and np.isnan(sol.W).all() and np.isnan(sol.dual).all()


def test_max_margin_refuses_unusable_data():
    X = np.ones((3, 4, 5))
    mask = np.zeros((3, 4), bool)
    mask[:, 1] = True
    with pytest.raises(ValueError, match="relevant-token mask"):
        svm.max_margin_direction(X, None)
    with pytest.raises(ValueError, match="bool relevant_mask"):
        svm.max_margin_direction(X, mask[:, :3])
    no_relevant = mask.copy()
    no_relevant[2] = False
    with pytest.raises(ValueError, match=r"no relevant token: \[2\]"):
        svm.max_margin_direction(X, no_relevant)
    all_relevant = mask.copy()
    all_relevant[0] = True
    with pytest.raises(ValueError, match=r"no irrelevant token: \[0\]"):
        svm.max_margin_direction(X, all_relevant)


def test_cosines():
    rng = np.random.default_rng(0)
    W_mm = rng.normal(size=(3, 3))
    R = rng.normal(size=(3, 3))
    R = (R - np.vdot(R, W_mm) / np.vdot(W_mm, W_mm) * W_mm).astype(np.float32)  # ⊥ W_mm
    W_mm = W_mm.astype(np.float32)
    heads = np.stack([W_mm, R])  # (2, 3, 3)

    @jit  # every call below in one compiled program (op by op, each primitive compiles alone)
    def cosines(W_mm, R, heads):
        return dict(
            same=svm.cosine(W_mm, 2.0 * W_mm),
            opposite=svm.cosine(W_mm, -W_mm),
            orthogonal=svm.cosine(W_mm, R),
            heads=svm.head_cosines(heads, W_mm),
            slot0_empty=svm.head_cosines(heads, W_mm, weight=jnp.array([0.0, 1.0])),
            zero=svm.head_cosines(jnp.zeros((2, 3, 3)), W_mm),  # θ = 0: undefined
        )

    c = cosines(W_mm, R, heads)
    assert float(c["same"]) == pytest.approx(1.0)
    assert float(c["opposite"]) == pytest.approx(-1.0)
    assert abs(float(c["orthogonal"])) < 1e-6
    total, best = c["heads"]
    a, b = np.linalg.norm(W_mm.astype(np.float64)), np.linalg.norm(R.astype(np.float64))
    assert float(total) == pytest.approx(a / np.hypot(a, b), rel=1e-5)
    assert float(best) == pytest.approx(1.0)
    total, best = c["slot0_empty"]
    assert abs(float(total)) < 1e-6 and abs(float(best)) < 1e-6
    total, best = c["zero"]
    assert np.isnan(float(total)) and np.isnan(float(best))


def test_constraint_count_is_every_relevant_irrelevant_pair():
    mask = np.array([[True, False, False], [True, True, False]])
    X = np.arange(2 * 3 * 2, dtype=float).reshape(2, 3, 2)
    A, B, (i, r, t) = svm.svm_constraints(X, mask)
    assert sorted(zip(i.tolist(), r.tolist(), t.tolist(), strict=True)) == [
        (0, 0, 1),
        (0, 0, 2),
        (1, 0, 2),
        (1, 1, 2),
    ]
    W = np.array([[1.0, 2.0], [-1.0, 0.5]])
    want = [(X[a, b] - X[a, c]) @ W @ X[a, 0] for a, b, c in zip(i, r, t, strict=True)]
    np.testing.assert_allclose(np.einsum("cd,de,ce->c", A, W, B), want)
