"""The replica prediction for tied low-rank dot-product attention: positional versus semantic minima.

Cui, Behrens, Krzakala, Zdeborová, *A phase transition between positional and semantic learning in
a solvable model of dot-product attention* (NeurIPS 2024, arXiv 2402.03902). This module is the
project's own derivation and solver of the saddle point (numpy; scipy for the logistic).

**Model.** L = 2 tokens x_ℓ = s_ℓ p + z_ℓ with s = (+1, −1), p = 1_d/√d and z_ℓ ~ N(0, σ² I_d);
student f(X) = softmax_row(h hᵀ) X with the fields h_ℓ = x_ℓ·Q/√d (Q ∈ R^d, rank r = 1);
teacher y = T(h*) Z with h*_ℓ = z_ℓ·Q*/√d, Q* ~ N(0, I_d) and T(h*) = (1 − ω) softmax_row(h* h*ᵀ)
+ ω A. The objective is Σ_samples ‖y − f(X)‖²_F / (2d) + λ/2 ‖Q‖² over n = αd samples, d → ∞.

**Loss of one sample in its fields.** Since ‖p‖ = 1 the positional part of f(X) costs O(1/d), and
‖M Z‖²_F / d → σ² ‖M‖²_F for any 2×2 matrix M that depends on Z only through a few projections,
so one sample costs ℓ(h; h*) = (σ²/2) ‖T(h*) − S(h)‖²_F, S(h) = softmax_row(h hᵀ). With
a = logistic(h₁(h₁ − h₂)) and b = logistic(h₂(h₂ − h₁)), S = [[a, 1 − a], [1 − b, b]].

**Order parameters (theory units).** m = 1ᵀQ/d (positional overlap), q = σ²‖Q‖²/d (variance of
the semantic field z·Q/√d), θ = σ² Q*ᵀQ/d (its covariance with the teacher's field), ρ = σ²
(the teacher's field variance) and the susceptibility V; their conjugates q̂, m̂, V̂, θ̂. In a
sample, the student's field is ω_ℓ = s_ℓ m + √q ξ_ℓ and the teacher's h*_ℓ = (θ/√q) ξ_ℓ + V* w_ℓ,
V* = √(ρ − θ²/q), with ξ, w ∈ R² independent standard normals.

**Free energy** (−objective/d at the minimiser):

    Φ = ½(V̂ q − q̂ V) − m m̂ − θ θ̂ + (σ² q̂ + m̂² + σ² ρ θ̂²) / (2D) − α E M,   D = λ + σ² V̂,

with the Moreau envelope M = min_x Σ_ℓ (x_ℓ − ω_ℓ)² / (2V) + ℓ(x; h*) and its minimiser x (the
proximal fields), g = (x − ω)/V. The ridge term is solved per coordinate of Q in closed form.

**Saddle-point equations** (stationarity of Φ; the q̂ and θ̂ lines use the envelope theorem and a
rotation of (ξ, w) that moves the θ-dependence from h* into ω):

    V = σ²/D,  m = m̂/D,  θ = σ² ρ θ̂ / D,  q = σ² (σ² q̂ + m̂² + σ² ρ θ̂²) / D²,
    m̂ = α E[g₁ − g₂],  q̂ = α E[|g|²],  θ̂ = α E[g·w] / V*,  V̂ = −α E[g·ξ] / √q + θ θ̂ / q.

**Solver.** E over (ξ, w) is a product Gauss–Hermite rule (``nodes`` points per axis of ξ,
``inner`` per axis of w), every node at once; the envelope's 2-d minimisation is a batched Newton
iteration on the Hessian with its eigenvalues made positive (in closed form for 2 × 2), with
backtracking, started from ω, ±h*, 0 and ω with its tokens swapped, keeping the lowest minimum
(``envelope="lowest"``), or from 0 alone (``"origin"``: the local minimum that descent from the
origin reaches). The fixed point is found by damped iteration (new = (1 − damping)·update +
damping·old; first on an 8 × 6 rule, then on the asked one, or from ``init``) until the largest
change of the undamped update, |Δq|, |Δm|, |Δθ| and |ΔV|/V, is below ``tol``; between updates the
proximal fields start from the previous update's, the full search every few updates and at
convergence. With ``saddle="stroud-secrest"`` the fixed point's expectations are taken on
Stroud and Secrest's 12-point degree-7 rule in each of ξ and w instead (the rule the authors'
notebook uses), the test error and Φ's envelope term still on the product rule: at small α the
semantic θ depends on the rule by tens of per cent (docs/frontier.md), and this rule reproduces the
authors' curves. ``curve`` starts each α from its neighbour's fixed point; ``crossing`` bisects the
objectives' difference over α. The test error is E ℓ(ω; h*) on the same rule.

**Assumptions.** d → ∞ at fixed α, replica symmetry; each branch is the fixed point in its
symmetric subspace, m = 0 held exactly on the semantic branch and θ = 0 on the positional one (the
loss is not convex in Q: both fixed points coexist, and at small α the semantic one is unstable in
m, so an iteration free in m would leave it for the positional one); and the lowest of the
envelope's minima found from the five starts is its minimum (or, with ``envelope="origin"``, the
one that descent from the origin reaches).

**Stored curves.** ``positional_semantic_curve.csv`` beside this module holds both branches at
ω = 0.3 at every α of the authors' theory CSV, solved as its first line says (``write_curve``;
``stored_curve`` reads it in the simulation's units); ``benchmarks/replica_theory.py`` with
``--write`` regenerates it.

**Correspondence with the simulation's conventions** (``m``, ``theta``, ``test_error`` and
``objective`` of ``ReplicaPoint``): m as is; θ_code = Q*ᵀQ/d = θ/σ²; test error = E ℓ =
E‖y − f(X)‖²_F/(2d) (half the theory's E‖T − S‖²σ²); objective = Σ‖y − f‖²/(2d)/d + λ‖Q‖²/(2d)
= −Φ. ``ReplicaPoint.raw`` keeps the theory units (q, m, V, θ, mse = 2·test error, Φ).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
from scipy.special import expit

from dynamics.errors import ConfigError

BRANCHES = ("positional", "semantic")
STANDARD_A = ((0.6, 0.4), (0.4, 0.6))  # the paper's mixing matrix of the teacher's linear part
_SIGNS = np.array([1.0, -1.0])  # s_ℓ: the two tokens' positional codes are +p and −p


class Overlaps(NamedTuple):
    """The order parameters in theory units (module docstring): q = σ²‖Q‖²/d, m = 1ᵀQ/d, the
    susceptibility V, θ = σ² Q*ᵀQ/d."""

    q: float
    m: float
    V: float
    theta: float


class Hats(NamedTuple):
    """The conjugate order parameters q̂, m̂, V̂, θ̂."""

    qhat: float
    mhat: float
    Vhat: float
    thetahat: float


class ReplicaPoint(NamedTuple):
    """One fixed point, in the simulation's conventions (module docstring), with ``raw`` the
    theory's units: {q, m, V, theta, mse, Phi}."""

    alpha: float
    branch: str
    m: float  # 1ᵀQ/d
    theta: float  # Q*ᵀQ/d
    test_error: float  # E ‖y − f(X)‖²_F / (2d) on a fresh sample
    objective: float  # (Σ_samples ‖y − f(X)‖²_F / (2d) + λ/2 ‖Q‖²) / d at the minimiser
    iterations: int
    raw: dict


class Problem(NamedTuple):
    """The data and the objective: sample ratio α = n/d, teacher mixture ω, token scale σ, ridge λ,
    teacher matrix A (2×2)."""

    alpha: float
    omega: float
    sigma: float
    lam: float
    A: np.ndarray  # (2, 2)


def problem(
    alpha: float,
    omega: float,
    sigma: float = 0.5,
    lam: float = 0.01,
    A=STANDARD_A,
) -> Problem:
    """A checked ``Problem``: a bad value is a one-line ``ConfigError``."""
    for name, value, low in (("alpha", alpha, 0.0), ("sigma", sigma, 0.0), ("lam", lam, 0.0)):
        if not (isinstance(value, (int, float)) and np.isfinite(value) and value > low):
            raise ConfigError(f"{name}={value!r}; allowed: a finite number > 0")
    if not (isinstance(omega, (int, float)) and 0.0 <= omega <= 1.0):
        raise ConfigError(f"omega={omega!r}; allowed: a number in [0, 1]")
    mat = np.asarray(A, dtype=float)
    if mat.shape != (2, 2) or not np.all(np.isfinite(mat)):
        raise ConfigError(f"A={A!r}; allowed: a finite 2x2 matrix")
    return Problem(float(alpha), float(omega), float(sigma), float(lam), mat)


class Rule(NamedTuple):
    """A rule for E over ξ ∈ R² (outer) and w ∈ R² (inner): ``rule``'s product Gauss–Hermite rule
    or ``stroud_secrest_rule``."""

    xi: np.ndarray  # (P, 1, 2) nodes of ξ
    w: np.ndarray  # (1, R, 2) nodes of w
    weight: np.ndarray  # (P, R) weights of the pairs, summing to 1


def rule(nodes: int, inner: int | None = None) -> Rule:
    """The product rule with ``nodes`` probabilists' Gauss–Hermite points per axis of ξ and
    ``inner`` (default ``nodes``) per axis of w: P = nodes² × inner² pairs."""
    inner = nodes if inner is None else inner
    for name, count in (("nodes", nodes), ("inner", inner)):
        if not (isinstance(count, int) and 2 <= count <= 128):
            raise ConfigError(f"{name}={count!r}; allowed: an integer in [2, 128]")

    def plane(count):  # the count² nodes (·, 2) of a standard normal in R² and their weights
        x, wt = np.polynomial.hermite_e.hermegauss(count)
        wt = wt / wt.sum()
        return np.stack(np.meshgrid(x, x, indexing="ij"), -1).reshape(-1, 2), np.outer(wt, wt).ravel()

    (xi, wxi), (w, ww) = plane(nodes), plane(inner)
    return Rule(xi[:, None, :], w[None, :, :], np.outer(wxi, ww))


SADDLE_RULES = ("product", "stroud-secrest")  # the rule the fixed point's expectations use


def stroud_secrest_plane() -> tuple[np.ndarray, np.ndarray]:
    """Stroud and Secrest's 12-point rule of degree 7 for a standard normal in R² (Math. Comp. 17,
    1963, their E₂^{r²} formula VI): the 4 points (±√3, 0), (0, ±√3) of weight 1/36 and the 8
    points (±r, ±r), r² = (9 ∓ 3√5)/8, of weight (5 ± 2√5)/45, for the weight exp(−|x|²), scaled
    by √2 to N(0, I). Exact for every monomial of degree ≤ 7. Returns nodes (12, 2), weights (12,)."""
    s5 = np.sqrt(5.0)
    axis = np.sqrt(3.0) * np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    corners = np.array([[1.0, 1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, -1.0]])
    inner, outer = np.sqrt((9 - 3 * s5) / 8), np.sqrt((9 + 3 * s5) / 8)
    nodes = np.concatenate([axis, inner * corners, outer * corners])
    weights = np.concatenate(
        [np.full(4, 1 / 36), np.full(4, (5 + 2 * s5) / 45), np.full(4, (5 - 2 * s5) / 45)]
    )
    return np.sqrt(2.0) * nodes, weights


def stroud_secrest_rule() -> Rule:
    """``stroud_secrest_plane`` for ξ and for w: 144 pairs, the rule of the authors' saddle point."""
    nodes, weights = stroud_secrest_plane()
    return Rule(nodes[:, None, :], nodes[None, :, :], np.outer(weights, weights))


def _expect(r: Rule, values: np.ndarray) -> float:
    """E of values (P, R) under the rule."""
    return float(np.sum(r.weight * values))


def teacher_matrix(pb: Problem, hstar: np.ndarray) -> np.ndarray:
    """T(h*) = (1 − ω) softmax_row(h* h*ᵀ) + ω A for fields (..., 2): shape (..., 2, 2)."""
    h1, h2 = hstar[..., 0], hstar[..., 1]
    a, b = expit(h1 * (h1 - h2)), expit(h2 * (h2 - h1))
    soft = np.stack([np.stack([a, 1 - a], -1), np.stack([1 - b, b], -1)], -2)
    return (1 - pb.omega) * soft + pb.omega * pb.A


def sample_loss(pb: Problem, h: np.ndarray, T: np.ndarray) -> np.ndarray:
    """ℓ(h; h*) = (σ²/2) ‖T − S(h)‖²_F for fields h (..., 2) and teacher matrices T (..., 2, 2)."""
    return _loss(pb, h[..., 0], h[..., 1], _entries(T))


def _entries(T: np.ndarray) -> tuple:
    """T's four entries T₁₁, T₁₂, T₂₁, T₂₂, each (...)."""
    return T[..., 0, 0], T[..., 0, 1], T[..., 1, 0], T[..., 1, 1]


def _loss(pb: Problem, h1, h2, T) -> np.ndarray:
    """ℓ at the fields (h1, h2), T its four entries (``_entries``)."""
    a, b = expit(h1 * (h1 - h2)), expit(h2 * (h2 - h1))
    T11, T12, T21, T22 = T
    return 0.5 * pb.sigma**2 * ((a - T11) ** 2 + (1 - a - T12) ** 2 + (1 - b - T21) ** 2 + (b - T22) ** 2)


def _loss_terms(pb: Problem, h1, h2, T):
    """ℓ, its gradient (g₁, g₂) and Hessian (H₁₁, H₁₂, H₂₂) in the fields, entry by entry (arrays
    of h1's shape: no 2×2 arrays, so a batch of fields costs a few elementwise passes)."""
    s2 = pb.sigma**2
    T11, T12, T21, T22 = T
    u, v = h1 * (h1 - h2), h2 * (h2 - h1)
    a, b = expit(u), expit(v)
    loss = 0.5 * s2 * ((a - T11) ** 2 + (1 - a - T12) ** 2 + (1 - b - T21) ** 2 + (b - T22) ** 2)
    da, db = a * (1 - a), b * (1 - b)  # logistic'
    la, lb = s2 * (2 * a - 1 - T11 + T12) * da, s2 * (2 * b - 1 - T22 + T21) * db  # ∂ℓ/∂u, ∂ℓ/∂v
    cu = 2 * s2 * da**2 + s2 * (2 * a - 1 - T11 + T12) * da * (1 - 2 * a)  # ∂²ℓ/∂u²
    cv = 2 * s2 * db**2 + s2 * (2 * b - 1 - T22 + T21) * db * (1 - 2 * b)
    u1, u2, v1, v2 = 2 * h1 - h2, -h1, -h2, 2 * h2 - h1  # ∇u, ∇v; ∇²u = [[2, −1], [−1, 0]], ∇²v mirrored
    g1, g2 = la * u1 + lb * v1, la * u2 + lb * v2
    H11 = cu * u1 * u1 + cv * v1 * v1 + 2 * la
    H12 = cu * u1 * u2 + cv * v1 * v2 - la - lb
    H22 = cu * u2 * u2 + cv * v2 * v2 + 2 * lb
    return loss, (g1, g2), (H11, H12, H22)


def _descent(H11, H12, H22, g1, g2):
    """−|H|⁻¹g for symmetric 2×2 H, in closed form: |H| has H's eigenvectors and the absolute
    values of its eigenvalues (at least 10⁻⁸), |H|⁻¹ = P/|λ₁| + (I − P)/|λ₂| with P = (H − λ₂I) /
    (λ₁ − λ₂) the projector on the first eigenvector (P = I/2 where the eigenvalues coincide)."""
    mean, rad = 0.5 * (H11 + H22), np.hypot(0.5 * (H11 - H22), H12)
    inv1 = 1 / np.maximum(np.abs(mean + rad), 1e-8)
    inv2 = 1 / np.maximum(np.abs(mean - rad), 1e-8)
    split = rad > 1e-12 * (1 + np.abs(mean))
    r2 = np.where(split, 2 * rad, 1.0)
    p1 = np.where(split, ((H11 - mean + rad) * g1 + H12 * g2) / r2, 0.5 * g1)  # P g
    p2 = np.where(split, (H12 * g1 + (H22 - mean + rad) * g2) / r2, 0.5 * g2)
    return -(inv1 * p1 + inv2 * (g1 - p1)), -(inv1 * p2 + inv2 * (g2 - p2))


def proximal(pb: Problem, omega: np.ndarray, T: np.ndarray, V: float, start=None, tol=1e-9):
    """The envelope's minimiser x = argmin Σ(x − ω)²/(2V) + ℓ(x; h*) for fields ω (..., 2), by
    batched Newton from ``start`` (default ω) on the Hessian with its eigenvalues made positive
    (|λ|, at least 10⁻⁸) and backtracking, until every |gradient| < ``tol`` or its Newton step
    is at rounding level; returns (x, M)."""
    shape = T.shape[:-2]
    om = np.broadcast_to(omega, shape + (2,)).reshape(-1, 2)  # (N, 2)
    Tf = tuple(np.ascontiguousarray(t).reshape(-1) for t in _entries(np.broadcast_to(T, shape + (2, 2))))
    x = np.array(np.broadcast_to(omega if start is None else start, shape + (2,))).reshape(-1, 2)

    def value(z1, z2, idx):  # the envelope's objective at (z1, z2) for the points idx
        T_ = tuple(t[idx] for t in Tf)
        return _loss(pb, z1, z2, T_) + ((z1 - om[idx, 0]) ** 2 + (z2 - om[idx, 1]) ** 2) / (2 * V)

    def parts(z, idx):
        T_ = tuple(t[idx] for t in Tf)
        loss, (g1, g2), (H11, H12, H22) = _loss_terms(pb, z[:, 0], z[:, 1], T_)
        r1, r2 = z[:, 0] - om[idx, 0], z[:, 1] - om[idx, 1]
        f = loss + (r1**2 + r2**2) / (2 * V)
        return f, (g1 + r1 / V, g2 + r2 / V), (H11 + 1 / V, H12, H22 + 1 / V)

    idx = np.arange(len(x))
    f, g, H = parts(x, idx)
    for _ in range(200):
        s1, s2 = _descent(*H, *g)
        # done: a small gradient, or a Newton step at f's rounding (|gradient| ~ 1e-9 at most)
        live = (np.maximum(np.abs(g[0]), np.abs(g[1])) >= tol) & (
            np.maximum(np.abs(s1), np.abs(s2)) > 1e-12 * (1 + V)
        )
        if not np.any(live):
            break
        idx, fa = idx[live], f[live]
        xa, s1, s2 = x[idx], s1[live], s2[live]
        slope = g[0][live] * s1 + g[1][live] * s2
        slack = 1e-14 * (1 + np.abs(fa))  # f's rounding: a step below it counts as a descent
        t = np.ones(len(idx))
        for _ in range(30):  # backtracking (Armijo), each point its own step length
            bad = value(xa[:, 0] + t * s1, xa[:, 1] + t * s2, idx) > fa + 1e-4 * t * slope + slack
            if not np.any(bad):
                break
            t = np.where(bad, 0.5 * t, t)
        x[idx, 0], x[idx, 1] = xa[:, 0] + t * s1, xa[:, 1] + t * s2
        f, g, H = parts(x[idx], idx)
    else:
        grad = max(np.max(np.abs(g[0])), np.max(np.abs(g[1])))
        raise ConfigError(f"the proximal fields did not converge (|gradient| {grad:.2e})")
    xf = x.reshape(shape + (2,))
    return xf, sample_loss(pb, xf, T) + np.sum((xf - omega) ** 2, -1) / (2 * V)


def _fields(pb: Problem, ov: Overlaps, r: Rule):
    """The student's fields ω (P, 1, 2) and the teacher's h* (P, P, 2) at the rule's nodes."""
    rho = pb.sigma**2
    vstar = np.sqrt(max(rho - ov.theta**2 / ov.q, 0.0))
    omega = _SIGNS * ov.m + np.sqrt(ov.q) * r.xi
    hstar = ov.theta / np.sqrt(ov.q) * r.xi + vstar * r.w
    return omega, hstar, vstar


ENVELOPES = ("lowest", "origin")  # which of the envelope's minima the channel takes


def channel(pb: Problem, ov: Overlaps, r: Rule, envelope: str = "lowest", previous=None):
    """The hats of the data term at the overlaps and E M: (q̂, m̂, V̂, θ̂), E M."""
    return _channel(pb, ov, r, envelope, previous)[:2]


def _channel(pb: Problem, ov: Overlaps, r: Rule, envelope: str, previous):
    """``channel`` and the proximal fields x (P, R, 2). The loss is not convex in the fields; its
    envelope is taken at ``envelope``'s minimum: "lowest", the lowest of the minima reached from
    ω, ±h*, 0 and ω with the tokens swapped (on a rule, as low as 80 further starts found, to
    1e-14 in E M), or, from ``previous`` fields, the minimum reached from them alone (the
    damped iteration's warm start: its overlaps move little from one update to the next);
    "origin", the local minimum reached by descent from x = 0."""
    omega, hstar, vstar = _fields(pb, ov, r)
    T = teacher_matrix(pb, hstar)
    if envelope == "origin":
        x, env = proximal(pb, omega, T, ov.V, start=np.zeros(2))
    elif previous is not None:
        x, env = proximal(pb, omega, T, ov.V, start=previous)
    else:
        x, env = proximal(pb, omega, T, ov.V)
        for begin in (hstar, -hstar, np.zeros(2), omega[..., ::-1]):
            other, other_env = proximal(pb, omega, T, ov.V, start=begin)
            lower = other_env < env
            x, env = np.where(lower[..., None], other, x), np.where(lower, other_env, env)
    g = (x - omega) / ov.V  # (P, R, 2)
    a = pb.alpha
    mhat = a * _expect(r, g @ _SIGNS)
    qhat = a * _expect(r, np.sum(g * g, -1))
    thetahat = a * _expect(r, np.sum(g * r.w, -1)) / vstar if vstar > 0 else 0.0
    vhat = -a * _expect(r, np.sum(g * r.xi, -1)) / np.sqrt(ov.q) + ov.theta * thetahat / ov.q
    return Hats(qhat, mhat, vhat, thetahat), _expect(r, env), x


def overlaps_from(pb: Problem, hats: Hats) -> Overlaps:
    """The prior's half of the equations: the overlaps at the hats (ridge, closed form)."""
    s2, rho = pb.sigma**2, pb.sigma**2
    D = pb.lam + s2 * hats.Vhat
    if not D > 0:
        raise ConfigError(f"lam + sigma^2 Vhat = {D!r} <= 0 at alpha={pb.alpha}: no ridge minimum")
    q = s2 * (s2 * hats.qhat + hats.mhat**2 + s2 * rho * hats.thetahat**2) / D**2
    return Overlaps(q, hats.mhat / D, s2 / D, s2 * rho * hats.thetahat / D)


def free_energy(pb: Problem, ov: Overlaps, hats: Hats, mean_envelope: float) -> float:
    """Φ at the overlaps and hats, E M given (module docstring); −Φ is the objective over d."""
    s2, rho = pb.sigma**2, pb.sigma**2
    D = pb.lam + s2 * hats.Vhat
    trace = 0.5 * (hats.Vhat * ov.q - hats.qhat * ov.V) - ov.m * hats.mhat - ov.theta * hats.thetahat
    prior = 0.5 * (s2 * hats.qhat + hats.mhat**2 + s2 * rho * hats.thetahat**2) / D
    return trace + prior - pb.alpha * mean_envelope


def test_error(pb: Problem, ov: Overlaps, r: Rule) -> float:
    """E ℓ(ω; h*) on a fresh sample: the simulation's test error (half the theory's mse)."""
    omega, hstar, _ = _fields(pb, ov, r)
    return _expect(r, sample_loss(pb, np.broadcast_to(omega, hstar.shape), teacher_matrix(pb, hstar)))


def start(pb: Problem, branch: str) -> Overlaps:
    """The iteration's start of a branch: all positional (θ = 0, m > 0) or all semantic (m = 0)."""
    if branch not in BRANCHES:
        raise ConfigError(f"branch={branch!r}; allowed: {', '.join(BRANCHES)}")
    s2 = pb.sigma**2
    V = 0.5 * s2 / pb.lam
    if branch == "positional":
        return Overlaps(q=0.1 * s2, m=0.2, V=V, theta=0.0)
    return Overlaps(q=s2, m=0.0, V=V, theta=0.5 * s2)


def solve(
    pb: Problem,
    branch: str,
    nodes: int = 16,
    inner: int = 8,
    tol: float = 1e-7,
    damping: float = 0.8,
    max_iter: int = 2000,
    init: Overlaps | None = None,
    envelope: str = "lowest",
    saddle: str = "product",
) -> ReplicaPoint:
    """The fixed point of the saddle-point equations from a branch's start (or ``init``, e.g. the
    fixed point at a neighbouring α) on the rule ``rule(nodes, inner)``, the envelope at
    ``envelope``'s minimum (``_channel``); without ``init`` and on a rule finer than 8 × 6 nodes
    it first solves on that coarse rule and starts from its fixed point (the same fixed point,
    fewer of the fine rule's iterations). With ``saddle="stroud-secrest"`` the fixed point's
    expectations are taken on ``stroud_secrest_rule`` (degree 7 in each of ξ and w, as the authors'
    notebook takes them) and only the test error and the envelope's mean in Φ on
    ``rule(nodes, inner)``, at that fixed point and with its hats."""
    if not (0.0 <= damping < 1.0):
        raise ConfigError(f"damping={damping!r}; allowed: a number in [0, 1)")
    if envelope not in ENVELOPES:
        raise ConfigError(f"envelope={envelope!r}; allowed: {', '.join(ENVELOPES)}")
    if saddle not in SADDLE_RULES:
        raise ConfigError(f"saddle={saddle!r}; allowed: {', '.join(SADDLE_RULES)}")
    if not (isinstance(tol, int | float) and not isinstance(tol, bool) and 0 < tol < 1):
        raise ConfigError(f"tol={tol!r}; allowed: a number in (0, 1)")
    if not (isinstance(max_iter, int | np.integer) and not isinstance(max_iter, bool) and max_iter >= 1):
        raise ConfigError(f"max_iter={max_iter!r}; allowed: a whole number >= 1")
    if init is not None and not (
        all(np.isfinite(v) for v in init)
        and init.q > 0
        and init.V > 0
        and init.theta**2 <= pb.sigma**2 * init.q
    ):
        raise ConfigError(
            f"init={init!r}; allowed: finite overlaps with q > 0, V > 0 and theta^2 <= sigma^2 q"
        )
    r = rule(nodes, inner)
    ov = start(pb, branch) if init is None else init
    settings = (tol, damping, max_iter, envelope)
    if saddle == "stroud-secrest":
        ov, hats, _, iterations = _fixed_point(pb, branch, stroud_secrest_rule(), ov, *settings)
        mean_env = _channel(pb, ov, r, envelope, None)[1]
    else:
        if init is None and (nodes, inner) != (8, 6) and nodes >= 8 and inner >= 6:
            ov = _fixed_point(pb, branch, rule(8, 6), ov, *settings)[0]
        ov, hats, mean_env, iterations = _fixed_point(pb, branch, r, ov, *settings)
    phi = free_energy(pb, ov, hats, mean_env)
    err = test_error(pb, ov, r)
    s2 = pb.sigma**2
    raw = {"q": ov.q, "m": ov.m, "V": ov.V, "theta": ov.theta, "mse": 2 * err, "Phi": phi}
    raw.update(hats._asdict())
    return ReplicaPoint(pb.alpha, branch, ov.m, ov.theta / s2, err, -phi, iterations, raw)


def _pinned(ov: Overlaps, branch: str) -> Overlaps:
    """A branch's overlap that symmetry sets to zero, held at exactly zero: m on the semantic
    branch, θ on the positional one. Several starts of the envelope can tie to rounding and break
    the symmetry by 1e-14; at small α the semantic point is unstable in m and would grow it."""
    return ov._replace(m=0.0) if branch == "semantic" else ov._replace(theta=0.0)


REFRESH = 25  # the "lowest" envelope's full search of minima every REFRESH updates, warm between


def _fixed_point(pb: Problem, branch: str, r: Rule, ov: Overlaps, tol, damping, max_iter, envelope):
    """Damped iteration from ``ov``: (overlaps, hats, E M, iterations) at convergence. With the
    "lowest" envelope, the proximal fields of one update start the next (a few Newton steps
    instead of five searches), the full search runs every ``REFRESH`` updates, and a point
    that converged warm counts only once the full search at it converges too: the fixed point
    is the one of the full search at every update."""
    ov, x = _pinned(ov, branch), None
    for iterations in range(1, max_iter + 1):
        warm = envelope == "lowest" and x is not None and iterations % REFRESH
        hats, mean_env, x = _channel(pb, ov, r, envelope, x if warm else None)
        new = _pinned(overlaps_from(pb, hats), branch)
        if _change(ov, new) < tol and warm:  # confirm with the full search
            hats, mean_env, x = _channel(pb, ov, r, envelope, None)
            new = _pinned(overlaps_from(pb, hats), branch)
        if _change(ov, new) < tol:
            return ov, hats, mean_env, iterations
        ov = Overlaps(*(damping * o + (1 - damping) * n for o, n in zip(ov, new, strict=True)))
        ov = _pinned(ov, branch)
    raise ConfigError(f"the {branch} fixed point at alpha={pb.alpha} did not converge")


def _change(ov: Overlaps, new: Overlaps) -> float:
    """The largest change of an update: |Δq|, |Δm|, |Δθ| and |ΔV|/V."""
    return max(abs(new.q - ov.q), abs(new.m - ov.m), abs(new.theta - ov.theta), abs(new.V - ov.V) / ov.V)


def curve(
    omega: float, alphas, branch: str, sigma=0.5, lam=0.01, A=STANDARD_A, **solver
) -> list[ReplicaPoint]:
    """A branch's fixed points at each of ``alphas`` in their order, each α's iteration started
    from its neighbour's fixed point (the first from the branch's start)."""
    points: list[ReplicaPoint] = []
    for alpha in alphas:
        init = None if not points else overlaps_of(points[-1])
        points.append(solve(problem(float(alpha), omega, sigma, lam, A), branch, init=init, **solver))
    return points


def overlaps_of(point: ReplicaPoint) -> Overlaps:
    """A solved point's overlaps in theory units, to start another α from."""
    return Overlaps(*(point.raw[k] for k in ("q", "m", "V", "theta")))


def crossing(
    omega: float,
    lo: float,
    hi: float,
    sigma: float = 0.5,
    lam: float = 0.01,
    A=STANDARD_A,
    xtol: float = 1e-4,
    **solver,
) -> float:
    """α_c in [lo, hi] where the two branches' objectives are equal: bisection on their difference
    (semantic − positional) until the bracket is narrower than ``xtol``, its zero then linearly
    interpolated; each α's branches start from the solved α nearest to it. A bracket without a
    change of sign is a ConfigError."""
    solved: dict[str, dict[float, ReplicaPoint]] = {b: {} for b in BRANCHES}

    def gap(alpha: float) -> float:
        pb = problem(alpha, omega, sigma, lam, A)
        for branch, done in solved.items():
            near = min(done, key=lambda a: abs(a - alpha), default=None)
            init = None if near is None else overlaps_of(done[near])
            done[alpha] = solve(pb, branch, init=init, **solver)
        return solved["semantic"][alpha].objective - solved["positional"][alpha].objective

    if not (np.isfinite(lo) and np.isfinite(hi) and 0 < lo < hi):
        raise ConfigError(f"lo={lo!r}, hi={hi!r}; allowed: numbers with 0 < lo < hi")
    g_lo, g_hi = gap(lo), gap(hi)
    if not g_lo * g_hi < 0:
        raise ConfigError(f"no crossing of the branches' objectives in alpha [{lo}, {hi}]")
    while hi - lo > xtol:
        mid = 0.5 * (lo + hi)
        g_mid = gap(mid)
        if g_mid == 0:
            return mid
        lo, g_lo, hi, g_hi = (mid, g_mid, hi, g_hi) if g_mid * g_lo > 0 else (lo, g_lo, mid, g_mid)
    return float(lo - g_lo * (hi - lo) / (g_hi - g_lo))


CURVE = Path(__file__).with_name("positional_semantic_curve.csv")  # the stored curves at ω = 0.3
CURVE_COLUMNS = ("branch", "alpha", "q", "m", "V", "theta", "mse", "Phi", "iterations")


def write_curve(path, points: list[ReplicaPoint], settings: str) -> None:
    """Solved points as a curve file: a first line ``# settings`` (the problem and the rule they
    were solved with), then one row per point in the theory's units (``CURVE_COLUMNS``)."""
    lines = [f"# {settings}", ",".join(CURVE_COLUMNS)]
    for p in points:
        values = [p.raw[k] for k in CURVE_COLUMNS[2:-1]]
        lines.append(",".join([p.branch, repr(p.alpha), *map(repr, map(float, values)), str(p.iterations)]))
    Path(path).write_text("\n".join(lines) + "\n")


def stored_curve(path=CURVE) -> dict:
    """A curve file in the simulation's units (module docstring): {"settings": its first line as
    {name: value} (numbers as floats, A as a tuple of four), branch: {"alpha", "m", "theta",
    "test_error", "objective"} (arrays, α increasing)}, θ = Q*ᵀQ/d the theory's θ/σ², the test
    error half its mse, the objective over d −Φ."""
    text = Path(path).read_text().splitlines()
    header, rows = text[1].split(","), [line.split(",") for line in text[2:] if line]
    settings: dict = dict(item.split("=", 1) for item in text[0].lstrip("# ").split())
    for name, value in settings.items():
        if name == "A":
            settings[name] = tuple(float(v) for v in value.split(","))
        elif name not in ("envelope", "saddle"):
            settings[name] = float(value)
    out: dict = {"settings": settings}
    for branch in sorted({row[0] for row in rows}):
        table = np.array([[float(v) for v in row[1:]] for row in rows if row[0] == branch])
        table = table[np.argsort(table[:, 0])]
        col = {name: table[:, k] for k, name in enumerate(header[1:])}
        out[branch] = {
            "alpha": col["alpha"],
            "m": np.abs(col["m"]),
            "theta": np.abs(col["theta"]) / settings["sigma"] ** 2,
            "test_error": col["mse"] / 2,
            "objective": -col["Phi"],
        }
    return out
