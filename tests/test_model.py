"""The model and its gradients against an independent float64 reference written with loops."""

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FAST_COMPILE

from dynamics.core import inits, losses, model

QUERIES = ["first", "last", "all"]
NORMS = ["sqrt", "mean", "sum"]
LAYOUTS = [("full", "split"), ("factored", "split"), ("factored", 3)]
LOSSES = ["logistic", "exp", "hinge2", "square"]


# The tests' own jitted programs are compiled at XLA's backend optimisation level 0 on the CPU:
# 3-5x faster to compile (compiling is these tests' run time; the init tests' normal draws, each
# compiled eagerly at the default level, took ~30 s), the same traced functions. The numbers
# may differ from the default level's in the last bit: tolerances cover that, and bit-for-bit
# comparisons compare two programs of this level.


def ref_logits(params: dict, X: np.ndarray, query: str, norm: str) -> np.ndarray:
    """Φ(X) by explicit loops over examples, heads, queries and tokens, in float64."""
    U = params["U"]
    if "W" in params:
        W = params["W"]
    else:
        W = np.stack([q @ k.T for q, k in zip(params["Q"], params["K"], strict=True)])
    H, T = U.shape[0], X.shape[1]
    c = {"sqrt": 1 / math.sqrt(H), "mean": 1 / H, "sum": 1.0}[norm]
    out = np.zeros(X.shape[0])
    for i, x in enumerate(X):
        total = 0.0
        for h in range(H):
            query_rows = {"first": [0], "last": [T - 1], "all": range(T)}[query]
            f = 0.0
            for s in query_rows:
                scores = np.array([x[t] @ W[h] @ x[s] for t in range(T)])
                a = np.exp(scores - scores.max())
                a /= a.sum()
                f += sum(a[t] * (U[h] @ x[t]) for t in range(T))
            total += f / len(query_rows)
        out[i] = c * total
    return out


def ref_loss(z: np.ndarray, loss: str) -> float:
    if loss == "logistic":
        return float(np.mean(np.log1p(np.exp(-z))))
    if loss == "exp":
        return float(np.mean(np.exp(-z)))
    if loss == "square":
        return float(np.mean((1 - z) ** 2))
    return float(np.mean(np.maximum(0.0, 1 - z) ** 2))


def random_params(rng, H, d, key_query, head_size):
    if key_query == "full":
        return {"U": rng.normal(size=(H, d)), "W": rng.normal(size=(H, d, d)) / d}
    a = d // H if head_size == "split" else head_size
    return {
        "U": rng.normal(size=(H, d)),
        "Q": rng.normal(size=(H, d, a)) / math.sqrt(d),
        "K": rng.normal(size=(H, d, a)) / math.sqrt(d),
    }


@pytest.mark.parametrize("query,norm,layout", list(itertools.product(QUERIES, NORMS, LAYOUTS)))
def test_logits_match_reference(x64, query, norm, layout):
    rng = np.random.default_rng(0)
    H, d, T, n = 2, 6, 4, 5
    params = random_params(rng, H, d, *layout)
    X = rng.normal(size=(n, T, d))
    got = model.logits({k: jnp.asarray(v) for k, v in params.items()}, jnp.asarray(X), query=query, norm=norm)
    np.testing.assert_allclose(np.asarray(got), ref_logits(params, X, query, norm), rtol=1e-12, atol=1e-12)


EPS = 1e-6  # central differences' step


@functools.cache
def _fd_problem(query, norm, layout):
    """The finite-difference test's parameters and data, and the float64 loop reference's logits at
    every central-difference point: (params, X, y, {name: {idx: (Φ(θ + ε e_idx), Φ(θ − ε e_idx))}}).
    The four losses' tests share these evaluations (the loops are this file's run time)."""
    rng = np.random.default_rng(1)
    H, d, T, n = 2, 4, 3, 4
    params = random_params(rng, H, d, layout[0], 2 if layout[1] == 3 else layout[1])
    X = rng.normal(size=(n, T, d))
    y = rng.choice([-1.0, 1.0], size=n)
    at = {}
    for name, value in params.items():
        at[name] = {}
        for idx in np.ndindex(value.shape):
            plus = {k: v.copy() for k, v in params.items()}
            minus = {k: v.copy() for k, v in params.items()}
            plus[name][idx] += EPS
            minus[name][idx] -= EPS
            at[name][idx] = (ref_logits(plus, X, query, norm), ref_logits(minus, X, query, norm))
    return params, X, y, at


@pytest.mark.parametrize("query,norm,layout,loss", list(itertools.product(QUERIES, NORMS, LAYOUTS, LOSSES)))
def test_gradients_match_finite_differences(x64, query, norm, layout, loss):
    params, X, y, at = _fd_problem(query, norm, layout)

    def ref_objective(p):
        return ref_loss(y * ref_logits(p, X, query, norm), loss)

    def objective(p):
        z = jnp.asarray(y) * model.logits(p, jnp.asarray(X), query=query, norm=norm)
        return losses.mean_loss(z, losses.Loss(loss))

    got = jax.grad(objective)({k: jnp.asarray(v) for k, v in params.items()})
    want = {name: np.zeros_like(v) for name, v in params.items()}  # central differences of ref_objective
    for name, points in at.items():
        for idx, (plus, minus) in points.items():
            want[name][idx] = (ref_loss(y * plus, loss) - ref_loss(y * minus, loss)) / (2 * EPS)
    assert np.isclose(
        float(objective({k: jnp.asarray(v) for k, v in params.items()})), ref_objective(params), rtol=1e-12
    )
    for name in params:
        np.testing.assert_allclose(np.asarray(got[name]), want[name], rtol=1e-6, atol=1e-8, err_msg=name)


def test_attention_rows_are_distributions():
    rng = np.random.default_rng(2)
    # float32 inputs and the checks in numpy (eager jnp ops would each compile a program)
    params = {k: v.astype(np.float32) for k, v in random_params(rng, 3, 5, "full", "split").items()}
    X = rng.normal(size=(4, 6, 5)).astype(np.float32)
    # one compiled program for both queries (op by op, every primitive compiled on its own)
    both = jax.jit(
        lambda p, X: {q: model.attention(p, X, q) for q in ("first", "all")}, compiler_options=FAST_COMPILE
    )(params, X)
    for query, shape in (("first", (4, 3, 6)), ("all", (4, 3, 6, 6))):
        A = both[query]
        assert A.shape == shape and A.dtype == jnp.float32
        A = np.asarray(A, np.float64)  # the float32 weights, summed without rounding
        np.testing.assert_allclose(A.sum(-1), 1.0, rtol=1e-6)
        assert A.min() >= 0.0


def test_weighted_head_equals_identical_heads(x64):
    """One stored head of weight m is the m-head model with identical heads; weight-0 slots add
    nothing; R runs sharing slots (``member``) each equal their own model."""
    rng = np.random.default_rng(3)
    # the inputs in numpy (eager jnp ops would each compile a program of their own)
    one = random_params(rng, 1, 5, "full", "split")
    many = {k: np.repeat(v, 8, axis=0) for k, v in one.items()}
    X = rng.normal(size=(6, 4, 5))
    three = random_params(rng, 3, 5, "full", "split")
    first2 = {k: v[:2] for k, v in three.items()}
    last = {k: v[2:] for k, v in three.items()}
    member = np.array([[True, False], [True, False], [False, True]])  # runs {0, 1} and {2}

    # every logits below in one compiled program (op by op, each primitive compiles alone)
    @functools.partial(jax.jit, compiler_options=FAST_COMPILE)
    def all_logits(one, many, three, first2, last, X):
        out = {}
        for norm in NORMS:
            out[norm] = dict(
                weighted=model.logits(one, X, norm=norm, weight=jnp.array([8.0])),
                many=model.logits(many, X, norm=norm),
                gated=model.logits(three, X, norm=norm, weight=jnp.array([1.0, 1.0, 0.0])),
                first2=model.logits(first2, X, norm=norm),
                runs=model.logits(three, X, norm=norm, member=member, n_heads=jnp.array([2.0, 1.0])),
                last=model.logits(last, X, norm=norm),
            )
        return out

    for norm, z in all_logits(one, many, three, first2, last, X).items():
        np.testing.assert_allclose(z["weighted"], z["many"], rtol=1e-12, err_msg=norm)
        np.testing.assert_allclose(z["gated"], z["first2"], rtol=1e-12, err_msg=norm)
        np.testing.assert_allclose(z["runs"][:, 0], z["first2"], rtol=1e-12, err_msg=norm)
        np.testing.assert_allclose(z["runs"][:, 1], z["last"], rtol=1e-12, err_msg=norm)


def test_head_diversity_is_the_largest_pairwise_distance(x64):
    rng = np.random.default_rng(4)
    params = random_params(rng, 4, 3, "full", "split")  # numpy: the jitted program takes it
    flat = np.concatenate([v.reshape(4, -1) for v in params.values()], axis=1)
    dist = np.linalg.norm(flat[:, None] - flat[None], axis=-1)
    active = np.array([True, True, True, False])
    member = np.array([[True, False], [True, False], [False, True], [False, True]])
    same = {k: np.repeat(v[:1], 4, axis=0) for k, v in params.items()}
    diversity = jax.jit(  # one compiled program for the three (op by op, each primitive compiles alone)
        lambda p, same: (
            model.head_diversity(p, active),
            model.head_diversity(p, member),
            model.head_diversity(same, jnp.ones(4, bool)),
        ),
        compiler_options=FAST_COMPILE,
    )
    of_active, of_runs, of_same = diversity(params, same)
    np.testing.assert_allclose(of_active, dist[:3, :3].max(), rtol=1e-12)
    np.testing.assert_allclose(of_runs, [dist[0, 1], dist[2, 3]], rtol=1e-12)
    assert float(of_same) == 0.0  # identical heads: exactly 0


@pytest.mark.parametrize(
    "H,d,head_size", [(3, 6, 2), (1, 6, "split"), (2, 6, "split"), (6, 6, "split"), (2, 4, 7)]
)
def test_factored_head_equals_full_head_with_product(x64, H, d, head_size):
    """Q_h, K_h give the same attention and Φ as the free head W_h = Q_h K_hᵀ, of rank ≤ d_h."""
    rng = np.random.default_rng(4)
    fac = random_params(rng, H, d, "factored", head_size)
    W = np.einsum("hda,hea->hde", fac["Q"], fac["K"])  # numpy, not key_query_matrix
    full = {"U": fac["U"], "W": W}
    X = rng.normal(size=(5, 4, d))

    # one compiled program per case (op by op, each primitive compiles on its own)
    @functools.partial(jax.jit, compiler_options=FAST_COMPILE)
    def both(fac, full, X):
        return {
            query: [(model.logits(p, X, query=query), model.attention(p, X, query)) for p in (fac, full)]
            for query in QUERIES
        } | {"W": model.key_query_matrix(fac)}

    out = both(fac, full, X)
    for query in QUERIES:
        (logits_fac, attention_fac), (logits_full, attention_full) = out[query]
        np.testing.assert_allclose(logits_fac, logits_full, rtol=1e-12)
        np.testing.assert_allclose(attention_fac, attention_full, rtol=1e-12, atol=1e-15)
    a = model.resolve_head_size(head_size, d, H)
    assert all(np.linalg.matrix_rank(np.asarray(w)) <= a for w in out["W"])


_init = jax.jit(
    inits.init_params,
    static_argnums=(1, 2),
    static_argnames=("init", "key_query", "head_size"),
    compiler_options=FAST_COMPILE,
)


def test_init_shapes_and_scale():
    key = jax.random.PRNGKey(0)
    p = _init(key, 4, 64, init="normal", scale=2.0)
    assert p["U"].shape == (4, 64) and p["W"].shape == (4, 64, 64)
    assert abs(float(np.std(np.asarray(p["W"], np.float64))) - 2.0 / 8.0) < 0.01
    z = inits.init_params(key, 4, 8)  # eager, as a user calls it (zeros: no draw)
    assert all(np.abs(np.asarray(v)).max() == 0.0 for v in z.values())
    f = _init(key, 4, 8, init="normal", key_query="factored", head_size="split")
    assert f["Q"].shape == (4, 8, 2) and f["K"].shape == (4, 8, 2)


@pytest.mark.parametrize("layout", [dict(), dict(key_query="factored", head_size=3)])
def test_init_draws_each_head_on_its_own(layout):
    """Head h comes from fold_in(key, h): more heads keep the first ones, and every head differs."""
    key = jax.random.PRNGKey(7)
    small = _init(key, 2, 8, init="normal", **layout)
    large = _init(key, 5, 8, init="normal", **layout)
    for name in small:
        np.testing.assert_array_equal(large[name][:2], small[name])  # bit for bit
        flat = np.asarray(large[name]).reshape(5, -1)
        assert len({row.tobytes() for row in flat}) == 5


@pytest.mark.parametrize(
    "bad,match",
    [
        (dict(init="zeros"), "init='zeros' is not one of 'zero', 'normal'"),
        (dict(key_query="factored"), "needs init='normal'"),
        (dict(init="normal", key_query="factored", head_size=0), "head_size=0"),
    ],
)
def test_init_rejects_bad_options(bad, match):
    with pytest.raises(ValueError, match=match):
        inits.init_params(jax.random.PRNGKey(0), 2, 4, **bad)


def test_loss_values():
    z = jnp.array([-1.0, 0.0, 2.0])
    np.testing.assert_allclose(
        losses.margin_loss(z, losses.Loss.LOGISTIC), np.log1p(np.exp([1.0, 0.0, -2.0])), rtol=1e-6
    )
    np.testing.assert_allclose(losses.margin_loss(z, losses.Loss.EXP), np.exp([1.0, 0.0, -2.0]), rtol=1e-6)
    np.testing.assert_allclose(losses.margin_loss(z, losses.Loss.HINGE2), [4.0, 1.0, 0.0])
    assert float(losses.error_rate(z)) == pytest.approx(2 / 3)
