"""Training where the softmax saturates (one token takes almost all the attention, the gradient
is tiny), against independent float64 references written here in plain numpy:

- the softmaxes' backward pass (softmax, softmax1, any temperature) and the gradient of the
  risk through every query mode and classification loss, entry by entry, in float32 and float64,
  where the old form g_t − Σ_s A_s g_s was rounding noise; forward mode and forward-over-reverse
  (the Hessian diagnostics' jax.jvp of jax.grad) still work; a query not within SATURATION of 1
  keeps JAX's own derivative bit for bit;
- the logistic loss's derivative at large margins;
- normalised GD: unit steps over the moving parameters (a group frozen by a zero step factor
  adds nothing to the norm), per group, g/(‖g‖ + ε), no underflow of ‖g‖², and √Σg² as before
  (bit for bit) where it is exact;
- normalised GD on the local-convergence setting of Tarzanagh et al. (n = 6, T = 8, d = 10,
  query x_1, readout fixed to a unit v, logistic loss, η = 0.1) against a numpy loop with a
  cancellation-free softmax gradient: corr(W_mhsim(t), W_ref(t)) >= 0.9999 and ‖W‖ within
  1e-3 at every 10th step.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import BITWISE, assert_same_numbers
from scipy.special import expit

from dynamics.config.schema import (
    Config,
    ConfigError,
    DataConfig,
    ModelConfig,
    OptimConfig,
    SweepConfig,
    validate,
)
from dynamics.core import activations
from dynamics.core import model as mdl
from dynamics.core import update as upd
from dynamics.core.losses import margin_loss, mean_loss
from dynamics.sweeps.sweep import run_sweep

DTYPES = {"float32": (False, 1e-4), "float64": (True, 1e-12)}  # (x64, relative tolerance)


def softmax_ref(s: np.ndarray, null: bool, *, with_null: bool = False):
    """Softmax over the last axis in float64; ``null``: softmax1 (a null token of score 0), and
    ``with_null``: (A, a₀), the null token's weight a₀ = 1 − Σ A computed as a quotient."""
    m = np.maximum(s.max(axis=-1, keepdims=True), 0.0) if null else s.max(axis=-1, keepdims=True)
    e = np.exp(s - m)
    e0 = np.exp(-m) if null else np.zeros_like(m)
    total = e0 + e.sum(axis=-1, keepdims=True)
    return (e / total, e0 / total) if with_null else e / total


def softmax_vjp_ref(s: np.ndarray, g: np.ndarray, null: bool) -> np.ndarray:
    """ds_t = A_t Σ_u A_u (g_t − g_u) (+ A_t a₀ g_t, the null token's g being 0): no difference
    of nearly equal numbers, each term is a product of the weights and a difference of g."""
    A, a0 = softmax_ref(s, null, with_null=True)
    return A * np.einsum("...u,...tu->...t", A, g[..., :, None] - g[..., None, :]) + A * a0 * g


@jax.jit
def _softmax_grads(s, g, beta):
    """∇_s Σ g·σ(β s) for σ = softmax and softmax1, in one compiled program per dtype: β an
    argument, so both temperatures share it (op by op, each case compiled some 20-40 programs of
    its own; a program per activation, twice the seconds of this one)."""
    return {
        name: jax.grad(lambda x, sigma=sigma: jnp.sum(g * sigma(beta * x)))(s)
        for name, sigma in (("softmax", activations.softmax), ("softmax1", activations.softmax1))
    }


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("activation", ["softmax", "softmax1"])
@pytest.mark.parametrize("beta", [1.0, 0.37])
def test_the_softmax_backward_is_exact_at_saturation(dtype, activation, beta):
    x64, rtol = DTYPES[dtype]
    rng = np.random.default_rng(1)
    # gaps of 8 to 30 between the top score and the rest: 1 − A_top from 3e-4 down to 1e-13,
    # and rows where softmax1's null token is the largest weight
    s = rng.normal(size=(6, 5)) + np.array([30, 20, 12, 8, 2, -9])[:, None] * (np.arange(5) == 2)
    s[-1] -= 3.0
    g = rng.normal(size=(6, 5))
    dt = np.float64 if x64 else np.float32
    s32, g32 = (np.asarray(a, dt).astype(np.float64) for a in (s, g))  # the inputs as used
    with jax.enable_x64(x64):
        got = _softmax_grads(np.asarray(s32, dt), np.asarray(g32, dt), beta)[activation]
    want = beta * softmax_vjp_ref(beta * s32, g32, activation == "softmax1")
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=0)


def risk_grad_ref(p, X, y, query, activation, beta, loss):
    """∇ of the mean loss of Φ = Σ_t σ(β s)_t U·x_t (one head) with respect to W or k, float64 numpy."""
    if query == "learned":
        s = X @ p["k"]
    else:
        q = X[:, 0] if query == "first" else X[:, -1]
        s = np.einsum("ntd,de,ne->nt", X, p["W"], q)
    null = activation == "softmax1"
    A, r = softmax_ref(beta * s, null), X @ p["U"]
    z = y * np.sum(A * r, axis=1)
    dz = {"logistic": -expit(-z), "exp": -np.exp(-z), "square": -2.0 * (1.0 - z)}[loss]
    ds = beta * softmax_vjp_ref(beta * s, (y * dz / len(y))[:, None] * r, null)
    if query == "learned":
        return np.einsum("nt,ntd->d", ds, X), A
    return np.einsum("nt,ntd,ne->de", ds, X, q), A


RISK_CASES = [
    ("first", "softmax", "logistic", 1.0),
    ("last", "softmax1", "exp", 0.5),
    ("learned", "softmax", "square", 1.0),
    ("first", "softmax1", "logistic", 2.0),
    ("learned", "softmax1", "logistic", 1.0),
    ("last", "softmax", "logistic", 0.5),
]


def risk_inputs(query, beta, dt):
    """(X, y, θ) of a case, θ with one head, as the dtype ``dt`` holds them: every example's
    attention saturated, one token's score 30/β above every other's."""
    rng = np.random.default_rng(2)
    n, T, d = 5, 6, 4
    X = rng.normal(size=(n, T, d))
    X[:, :, 0] = -np.abs(X[:, :, 0])  # every token scores <= 0 along e_1 ...
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    X[np.arange(n), rng.integers(1, T - 1, size=n)] = np.eye(d)[0]  # ... but one, e_1 itself
    X[:, 0 if query == "first" else -1] = np.eye(d)[1]  # the query token e_2: W x_q = α e_1
    y = rng.choice([-1.0, 1.0], size=n)
    U = rng.normal(size=d)
    alpha = 30.0 / beta
    if query == "learned":
        p = {"U": U, "k": alpha * np.eye(d)[0] + 0.3 * rng.normal(size=d)}
    else:
        p = {"U": U, "W": alpha * np.outer(np.eye(d)[0], np.eye(d)[1]) + 0.3 * rng.normal(size=(d, d))}
    return np.asarray(X, dt), np.asarray(y, dt), {k: np.asarray(v, dt)[None] for k, v in p.items()}


@jax.jit
def _risk_grads(inputs):
    """∇_θ of the mean loss of y·Φ through the model's own Φ and losses for every case of
    ``RISK_CASES`` (their ``risk_inputs``), in one compiled program: op by op the cases compiled
    some 180 programs, one program per case twice the seconds of this one."""
    out = []
    for (X, y, p), (query, activation, loss, beta) in zip(inputs, RISK_CASES, strict=True):

        def risk(q, X=X, y=y, query=query, activation=activation, loss=loss, beta=beta):
            return mean_loss(y * mdl.logits(q, X, query=query, activation=activation, beta=beta), loss)

        out.append(jax.grad(risk)(p))
    return out


@functools.cache
def risk_gradients(dtype: str) -> list[np.ndarray]:
    """∇L with respect to W or k of every case of ``RISK_CASES`` in ``dtype`` (computed once)."""
    x64, _ = DTYPES[dtype]
    dt = np.float64 if x64 else np.float32
    with jax.enable_x64(x64):
        grads = _risk_grads([risk_inputs(query, beta, dt) for query, _, _, beta in RISK_CASES])
    return [
        np.asarray(g["k" if case[0] == "learned" else "W"])[0]
        for g, case in zip(grads, RISK_CASES, strict=True)
    ]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("query,activation,loss,beta", RISK_CASES)
def test_the_risk_gradient_is_exact_at_saturation(dtype, query, activation, loss, beta):
    """Through the model's own Φ and losses, at a θ where every example's attention is saturated
    (one token's score 30/β above every other's, 1 − A_top < 1e-12): every entry of ∇L to the
    dtype's precision (the old backward's rounding noise was larger than the gradient)."""
    x64, rtol = DTYPES[dtype]
    Xj, yj, pj = risk_inputs(query, beta, np.float64 if x64 else np.float32)
    used = {k: np.asarray(v[0], np.float64) for k, v in pj.items()}  # θ as the dtype holds it
    y = yj.astype(np.float64)  # ±1, exact in either dtype
    got = risk_gradients(dtype)[RISK_CASES.index((query, activation, loss, beta))]
    want, A = risk_grad_ref(used, np.asarray(Xj, np.float64), y, query, activation, beta, loss)
    assert np.all(A.max(axis=1) > 1 - 1e-12)  # saturated indeed
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=10 * rtol, atol=0)


@pytest.mark.slow
def test_forward_mode_and_forward_over_reverse_work():
    """jax.linearize of Φ (the lazy/rich demo) and jax.jvp of jax.grad (the Hessian diagnostics)
    through both softmaxes: the Hessian-vector product agrees with central differences of ∇L."""
    rng = np.random.default_rng(3)
    X = jnp.asarray(rng.normal(size=(4, 5, 3)))
    y = jnp.asarray([1.0, -1.0, 1.0, -1.0])
    with jax.enable_x64(True):
        X, y = X.astype(jnp.float64), y.astype(jnp.float64)
        p = {"U": jnp.asarray(rng.normal(size=(2, 3))), "W": jnp.asarray(rng.normal(size=(2, 3, 3)))}
        v = {k: jnp.asarray(rng.normal(size=a.shape)) for k, a in p.items()}
        for activation in ("softmax", "softmax1"):

            def risk(q, act=activation):
                return mean_loss(y * mdl.logits(q, X, activation=act), "logistic")

            _, lin = jax.linearize(lambda q, act=activation: mdl.logits(q, X, activation=act), p)
            h = 1e-6
            plus, minus = (jax.tree.map(lambda a, b, s=s: a + s * b, p, v) for s in (h, -h))
            fd_phi = mdl.logits(plus, X, activation=activation) - mdl.logits(minus, X, activation=activation)
            np.testing.assert_allclose(lin(v), fd_phi / (2 * h), rtol=1e-7)
            _, hvp = jax.jvp(jax.grad(risk), (p,), (v,))
            gp, gm = jax.grad(risk)(plus), jax.grad(risk)(minus)
            for k in p:
                np.testing.assert_allclose(hvp[k], (gp[k] - gm[k]) / (2 * h), rtol=1e-6, atol=1e-9)


@jax.jit
def _logistic_grad(z):
    return jax.grad(lambda a: jnp.sum(margin_loss(a, "logistic")))(z)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_logistic_derivative_is_exact_at_large_margins(dtype):
    x64, rtol = DTYPES[dtype]
    z_max = 700.0 if x64 else 85.0  # e^{-z} still a normal number
    z = np.linspace(-40.0, z_max, 301)
    zj = np.asarray(z, np.float64 if x64 else np.float32)
    with jax.enable_x64(x64):
        got = _logistic_grad(zj)
    want = -expit(-np.asarray(zj, np.float64))
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=10 * rtol, atol=0)


def _step_lengths(new, old, member):
    """Each run's ‖θ(t+1) − θ(t)‖ (R,) over the per-slot arrays and the per-run bias."""
    sq = 0.0
    for k in new:
        diff = np.asarray(new[k], np.float64) - np.asarray(old[k], np.float64)
        per = np.sum(diff.reshape(diff.shape[0], -1) ** 2, axis=1)
        sq = sq + (per if k == "b" else np.asarray(member, np.float64).T @ per)
    return np.sqrt(sq)


def _tiny_gradients(rng, scale):
    g = {"U": rng.normal(size=(3, 4)), "W": rng.normal(size=(3, 4, 4)), "b": rng.normal(size=2)}
    return {k: scale * v for k, v in g.items()}


_FROZEN = {"factor 0": upd.GroupRule(lr_factor=0.0), "range": upd.GroupRule(start=5)}
_NGD_RULES = (
    upd.Rules(normalise=True),
    *(upd.Rules((("readout", r), ("attention", upd.GroupRule())), normalise=True) for r in _FROZEN.values()),
    upd.Rules(normalise=True, ngd_per_group=True),
)


@jax.jit
def _ngd_steps(params, grads, lr, member):
    """θ after one normalised-GD step of ``upd.update`` at update 0 under each of ``_NGD_RULES``,
    in one compiled program (η an argument; op by op, the test compiled some 70 programs, and a
    program per rule compiled slower than that)."""
    ngd = upd.direction("normalized-gd")
    return [upd.update(params, grads, (), ngd, lr, rules, 0, member)[0] for rules in _NGD_RULES]


@pytest.mark.slow_cases("float32")
@pytest.mark.parametrize("dtype", DTYPES)
def test_normalised_gd_moves_eta_over_the_moving_parameters(dtype):
    """Without ε: each run moves exactly η, with gradients whose squares underflow (float32:
    1e-24² is below the smallest float); a readout frozen by a zero step factor or a step range
    does not move and adds nothing to the norm, so the attention alone moves η; per group, each
    group moves η."""
    x64, _ = DTYPES[dtype]
    tol = 1e-12 if x64 else 1e-6
    rng = np.random.default_rng(4)
    member = np.array([[True, False], [True, False], [False, True]])  # slots 0, 1: run 0; 2: run 1
    lr = 0.1
    dt = np.float64 if x64 else np.float32
    params = {k: np.asarray(v, dt) for k, v in _tiny_gradients(rng, 1.0).items()}
    with jax.enable_x64(x64):
        for scale in (1.0, 1e-24, 1e-30):
            grads = {k: np.asarray(v, dt) for k, v in _tiny_gradients(rng, scale).items()}
            assert x64 or scale == 1.0 or float(sum(np.sum(g * g) for g in grads.values())) == 0.0
            new_all, *new_frozen, new_groups = _ngd_steps(params, grads, lr, member)
            np.testing.assert_allclose(_step_lengths(new_all, params, member), lr, rtol=tol)
            for name, new in zip(_FROZEN, new_frozen, strict=True):
                assert all(np.array_equal(new[k], params[k]) for k in ("U", "b")), name
                np.testing.assert_allclose(_step_lengths(new, params, member), lr, rtol=tol, err_msg=name)
            for names in (("U", "b"), ("W",)):
                part = {k: new_groups[k] for k in names}
                np.testing.assert_allclose(_step_lengths(part, params, member), lr, rtol=tol)


@jax.jit
def _normalised(grads, member, one):
    """``upd.normalise`` of a pack of runs (``member``) and of one run, in one compiled program (op
    by op this test and the last compiled some 100 programs)."""
    return upd.normalise(grads, member), upd.normalise(one)


@jax.jit
def _normalised_plain(grads, member, one):
    """``upd._normalise_plain`` of the same two, in a program of its own."""
    return upd._normalise_plain(grads, member), upd._normalise_plain(one, None)


def test_normalise_keeps_the_plain_norm_where_it_is_exact():
    """A run whose largest |g| is in the plain range takes √Σg² exactly as before (bit for bit: an
    ordinary run keeps its numbers); a run below it (float32: squares that underflow), in the same
    pack, still moves a unit step. Both against float64 numpy to float32 precision."""
    rng = np.random.default_rng(6)
    member = np.array([[True, False], [True, False], [False, True]])  # slots 0, 1: run 0; 2: run 1
    g64 = _tiny_gradients(rng, 1.0)
    g64 = {k: v * (np.array([1.0, 1.0, 1e-24])[:, None] if k == "U" else 1.0) for k, v in g64.items()}
    g64["W"][2] *= 1e-24
    g64["b"][1] *= 1e-24  # run 1 (slot 2 and its bias) far below the plain range
    grads = {k: np.asarray(v, np.float32) for k, v in g64.items()}
    low, _ = upd._plain_range(jnp.float32)
    assert np.max(np.abs(grads["W"][2])) < low < np.min(np.abs(grads["W"][0]))
    one = {k: np.asarray(v, np.float32) for k, v in _tiny_gradients(rng, 1.0).items()}
    # on the CPU normalise and the plain form each compiled on its own, as the engine compiles its
    # step (in one program XLA could share the plain norm between the two and make the comparison
    # trivial); a GPU may fuse two programs apart, so there op by op as before
    normalised, normalised_plain = (
        (_normalised, _normalised_plain)
        if BITWISE
        else (_normalised.__wrapped__, _normalised_plain.__wrapped__)
    )
    (out, out_one), (plain, plain_one) = normalised(grads, member, one), normalised_plain(grads, member, one)
    for k, run0 in (("U", slice(0, 2)), ("W", slice(0, 2)), ("b", 0)):  # run 0: slots 0, 1; b[0]
        assert np.array_equal(np.asarray(out[k])[run0], np.asarray(plain[k])[run0]), k
    assert np.sum(np.asarray(plain["W"])[2] ** 2) == 0.0  # the plain norm of run 1 underflowed
    lengths = _step_lengths(out, {k: np.zeros_like(v) for k, v in out.items()}, member)
    np.testing.assert_allclose(lengths, 1.0, rtol=1e-6)
    assert all(np.array_equal(out_one[k], plain_one[k]) for k in one)


@pytest.mark.parametrize("activation", ["softmax", "softmax1"])
def test_the_softmaxes_keep_jaxs_derivative_below_saturation(activation):
    """A query whose largest weight is not within SATURATION of 1 gets, bit for bit, the gradient
    of JAX's own derivative (jax.nn.softmax's, the autodiff of softmax1's expression); a saturated
    one gets the relative form, equal to the float64 reference to float32 precision."""
    rng = np.random.default_rng(7)
    s = np.asarray(rng.normal(size=(64, 3, 6)) * 4.0, np.float32)
    w = np.asarray(rng.normal(size=(64, 3, 6)), np.float32)
    null = activation == "softmax1"

    def plain(x):
        if not null:
            return jax.nn.softmax(x, axis=-1)
        m = jax.lax.stop_gradient(jnp.maximum(jnp.max(x, axis=-1, keepdims=True), 0.0))
        e = jnp.exp(x - m)
        return e / (jnp.exp(-m) + jnp.sum(e, axis=-1, keepdims=True))

    def grad(fn):
        return np.asarray(jax.jit(jax.grad(lambda x: jnp.sum(jnp.tanh(fn(x) * w) ** 2)))(s))

    new, old = grad(getattr(activations, activation)), grad(plain)
    A, a0 = softmax_ref(np.asarray(s, np.float64), null, with_null=True)
    largest = np.maximum(A.max(axis=-1), a0[..., 0])
    sat = 1.0 - largest < activations.SATURATION
    assert 0 < sat.sum() < sat.size  # both kinds of query occur
    if BITWISE:  # JAX's own derivative, bit for bit
        assert_same_numbers(new[~sat], old[~sat])
    else:  # a GPU fuses the two programs apart: each rounds its cancellation, to ε / SATURATION
        atol = 4 * np.finfo(np.float32).eps / activations.SATURATION * np.abs(old).max()
        np.testing.assert_allclose(new[~sat], old[~sat], rtol=0, atol=atol)
    A32 = np.asarray(jax.jit(plain)(s), np.float64)  # A as the programs above compute it
    g = 2 * np.tanh(A32 * np.asarray(w)) / np.cosh(A32 * np.asarray(w)) ** 2 * np.asarray(w)
    ref = softmax_vjp_ref(np.asarray(s, np.float64), g, null)
    np.testing.assert_allclose(new[sat], ref[sat], rtol=1e-4, atol=1e-6 * np.abs(ref).max())


_normalise = jax.jit(upd.normalise, static_argnames=("eps", "per_group"))


def test_ngd_eps_divides_by_the_norm_plus_eps():
    """g / (‖g‖ + ε): for ‖g‖ far below ε the step shrinks in proportion (the authors' guard)."""
    rng = np.random.default_rng(5)
    g = _tiny_gradients(rng, 1e-18)
    del g["b"]
    norm = np.sqrt(sum(np.sum(np.asarray(v) ** 2) for v in g.values()))
    with jax.enable_x64(True):
        out = _normalise(g, eps=2e-16)
        for k in g:
            np.testing.assert_allclose(out[k], np.asarray(g[k]) / (norm + 2e-16), rtol=1e-13)


def test_the_ngd_options_are_refused_without_normalised_gd():
    for field, value in (("ngd_eps", 1e-16), ("ngd_per_group", True)):
        cfg = Config(optim=OptimConfig(optimizer="gd", **{field: value}))
        with pytest.raises(ConfigError, match=f"optim.{field}=.*no effect"):
            validate(cfg)
    with pytest.raises(ConfigError, match="ngd_eps"):
        validate(Config(optim=OptimConfig(optimizer="normalized-gd", ngd_eps=-1.0)))


# Normalised GD on the local-convergence setting of Tarzanagh et al. against a numpy reference.

N, T, D, LR = 6, 8, 10, 0.1


def local_problem(seed: int):
    """Unit-norm Gaussian tokens, ±1 labels, a unit readout v, W(0) ~ U(±1/√d), as float32 numbers
    (both sides then start from the same values in float32 and in x64)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, T, D))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    y = rng.choice([-1.0, 1.0], size=N)
    v = rng.normal(size=D)
    v /= np.linalg.norm(v)
    W0 = rng.uniform(-1.0, 1.0, size=(D, D)) / np.sqrt(D)
    return tuple(a.astype(np.float32).astype(np.float64) for a in (X, y, v, W0))


def ngd_reference(X, y, v, W0, steps: int, every: int = 10) -> np.ndarray:
    """W at steps 0, every, 2·every, … of W ← W − η g/‖g‖ in float64, ∇ written out."""
    W, out = W0.copy(), [W0.copy()]
    r = X @ v  # (n, T): v·x_t
    for t in range(1, steps + 1):
        s = np.einsum("ntd,de,ne->nt", X, W, X[:, 0])
        A = softmax_ref(s, False)
        z = y * np.sum(A * r, axis=1)
        gA = (-y * expit(-z) / N)[:, None] * r
        ds = softmax_vjp_ref(s, gA, False)
        g = np.einsum("nt,ntd,ne->de", ds, X, X[:, 0])
        W = W - LR * g / np.linalg.norm(g)
        if t % every == 0:
            out.append(W.copy())
    return np.array(out)


def ngd_mhsim(tmp_path, X, y, v, W0, steps: int, x64: bool, every: int = 10) -> np.ndarray:
    data, init = tmp_path / "data.npz", tmp_path / "theta.npz"
    np.savez(data, X_train=X, y_train=y, X_test=X, y_test=y)
    np.savez(init, U=v[None], W=W0[None])
    cfg = Config(
        data=DataConfig(model="npz", path=str(data)),
        model=ModelConfig(init_from=str(init)),
        optim=OptimConfig(optimizer="normalized-gd", lr=LR, steps=steps, readout_lr_factor=0.0),
        sweep=SweepConfig(heads=(1,), trials=1, log_every=every, head_every=1, save_params=True),
    )
    with jax.enable_x64(x64):
        result = run_sweep(cfg, progress=False)
    assert np.array_equal(result.params["U"][0, 0, -1, 0], v.astype(result.params["U"].dtype))
    return result.params["W"][0, 0, :, 0].astype(np.float64)


def agreement(W_mhsim: np.ndarray, W_ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = W_mhsim.reshape(len(W_mhsim), -1), W_ref.reshape(len(W_ref), -1)
    corr = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return corr, np.abs(np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1) - 1.0)


def check_local_convergence(tmp_path, seed: int, steps: int, x64: bool) -> None:
    X, y, v, W0 = local_problem(seed)
    W_ref = ngd_reference(X, y, v, W0, steps)
    corr, norm_err = agreement(ngd_mhsim(tmp_path, X, y, v, W0, steps, x64), W_ref)
    assert corr.min() >= 0.9999, (seed, x64, int(np.argmin(corr)) * 10, corr.min())
    assert norm_err.max() <= 1e-3, (seed, x64, int(np.argmax(norm_err)) * 10, norm_err.max())
    # the run reached saturation: ‖W‖ grew by η per step, the largest weight within 1e-9 of 1
    assert np.linalg.norm(W_ref[-1]) > 0.9 * LR * steps
    s = np.einsum("ntd,de,ne->nt", X, W_ref[-1], X[:, 0])
    assert 1.0 - softmax_ref(s, False).max(axis=1).min() < 1e-9


# On a GPU too (an H100, benchmarks/README.md "GPU"): it once departed there (corr 0.994 in x64 at
# step 1500), the GPU's fused kernels rounding token r's own term of the softmax's transposed
# derivative differently in its two copies; the transpose now leaves that term out.
def test_normalised_gd_follows_the_reference_where_the_softmax_saturates(tmp_path):
    check_local_convergence(tmp_path, seed=0, steps=1500, x64=True)


@pytest.mark.stress
@pytest.mark.parametrize("x64", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_normalised_gd_follows_the_reference_to_step_2000(tmp_path, seed, x64):
    check_local_convergence(tmp_path, seed=seed, steps=2000, x64=x64)


@pytest.mark.stress
def test_float32_normalised_gd_takes_steps_of_eta_past_the_underflow(tmp_path):
    """Past step ~1350 of the float32 run ‖g‖² is below the smallest float (it was a step of
    η·g ≈ 0 then): every step from 1300 to 1500 is η long, to the rounding of ‖W‖ ≈ 150 in
    float32 (150·6e-8·√100 / η ≈ 1e-3 relative at worst)."""
    X, y, v, W0 = local_problem(0)
    W = ngd_mhsim(tmp_path, X, y, v, W0, 1500, x64=False, every=1)[1300:]
    steps = np.linalg.norm((W[1:] - W[:-1]).reshape(len(W) - 1, -1), axis=1)
    np.testing.assert_allclose(steps, LR, rtol=2e-3)


# The max-margin solvers for given selected tokens, against scipy's SLSQP on the same QP.


def _slsqp_max_margin(G: np.ndarray) -> np.ndarray:
    """argmin ½‖w‖² s.t. G w >= 1, by scipy's SLSQP (independent of cvxpy/Clarabel)."""
    from scipy.optimize import minimize

    cons = {"type": "ineq", "fun": lambda w: G @ w - 1.0, "jac": lambda w: G}
    w0 = np.linalg.lstsq(G, np.full(len(G), 2.0), rcond=None)[0]
    res = minimize(lambda w: 0.5 * w @ w, w0, jac=lambda w: w, constraints=[cons], method="SLSQP",
                   options={"ftol": 1e-14, "maxiter": 500})  # fmt: skip
    assert res.success, res.message
    return res.x


def test_max_margin_p_and_W_for_the_selected_tokens():
    from dynamics.theory import svm

    rng = np.random.default_rng(6)
    n, T, d = 3, 4, 6
    X = rng.normal(size=(n, T, d))
    X /= np.linalg.norm(X, axis=-1, keepdims=True)
    k = 5.0 * rng.normal(size=(1, d))
    sel = svm.selected_tokens({"k": jnp.asarray(k)}, X, query="learned")[:, 0]
    np.testing.assert_array_equal(sel, np.argmax(X @ k[0], axis=1))
    rows = [X[i, sel[i]] - X[i, t] for i in range(n) for t in range(T) if t != sel[i]]
    p = svm.max_margin_p(X, sel)
    np.testing.assert_allclose(p, _slsqp_max_margin(np.array(rows)), atol=1e-6)
    for query, q in (("first", 0), ("last", -1)):
        W = svm.max_margin_W(X, sel, query=query).W
        G = np.array(
            [
                np.outer(X[i, sel[i]] - X[i, t], X[i, q]).ravel()
                for i in range(n)
                for t in range(T)
                if t != sel[i]
            ]
        )
        np.testing.assert_allclose(W.ravel(), _slsqp_max_margin(G), atol=1e-6)
    with pytest.raises(ValueError, match="selected tokens must be in 0..3"):
        svm.max_margin_p(X, np.array([0, 4, 1]))
