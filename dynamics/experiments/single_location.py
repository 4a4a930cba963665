"""Single-location regression's quantities, read from a sweep's logged curves (no JAX).

Marion, Berthier, Biau, Boyer, *Attention layers provably solve single-location regression*
(ICLR 2025, arXiv 2410.01537) follow one erf head, Φ(X) = Σ_t erf(β x_tᵀk)·x_tᵀv, with k and v
on the unit sphere, through four numbers: κ = k·k*, ν = v·v*, the distance to the manifold
{k·v* = 0, v·k* = 0, k·v = 0}, √((v·k*)² + (k·v*)² + (k·v)²), and the excess test risk (test
MSE − ε² at the current β). mhsim logs per head the |cos| of k_h (``head_key_cos``) and of
U_h = v (``head_u_cos``) with each planted direction, and |cos(k_h, U_h)| (``head_uk_cos``);
on the sphere a |cos| is the |dot product|, so all four come from what a sweep logs:

- ``alignments(result)``: |κ|, |ν|, the distance and the excess risk, (trials, L_h) each (at the
  per-head view's steps);
- ``floor(beta, d, T, gamma)``: the excess risk at (k, v) = (k*, v*) with temperature β, in
  closed form up to one Gauss–Hermite integral. At the end of the authors' schedule β is
  small, erf(β x₁ᵀk*) well below 1 on the relevant token and non-zero on the T − 1 others:
  the excess risk stops there, not at 0;
- ``beta_at(steps, beta0, decay)``: β of the update before each logged step (the temperature
  a logged test risk uses, as the engine's and the authors' code's: β₀ before the first).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dynamics.core.activations import beta_at  # noqa: F401  (this study's β schedule, named here for its figures)
from dynamics.sweeps.headline import entry

QUANTITIES = ("kappa", "nu", "distance", "excess_risk")
LABELS = {
    "kappa": "|k·k*|",
    "nu": "|v·v*|",
    "distance": "distance to the manifold",
    "excess_risk": "excess test risk",
}


# The planted directions' order in the per-head |cos| curves: by name (``datamodels.direction_matrix``);
# a grid point's result does not carry the directions themselves.
DIRECTIONS = ("k_star", "v_star")


def _column(planted: dict[str, Any], name: str) -> int:
    names = list(planted) or list(DIRECTIONS)
    if name not in names:
        raise ValueError(f"the result has no planted direction {name!r} (it has {names})")
    return names.index(name)


def alignments(result, head_row: int = 0) -> dict[str, np.ndarray]:
    """|κ|, |ν|, the distance to the manifold and the excess risk of the first head of the run at
    ``result.heads[head_row]``, each (trials, L_h) at the per-head view's steps ``result.head_steps``.
    Needs the per-head metrics (``head_metrics``)."""
    curves = result.curves
    missing = [k for k in ("head_key_cos", "head_u_cos", "head_uk_cos") if k not in curves]
    if missing:
        raise ValueError(f"the result has no {missing[0]} curve: run it with head_metrics='on'")
    ks, vs = _column(result.planted, "k_star"), _column(result.planted, "v_star")
    key_cos = np.asarray(curves["head_key_cos"])[head_row, :, :, 0]  # (trials, L, P)
    u_cos = np.asarray(curves["head_u_cos"])[head_row, :, :, 0]
    uk_cos = np.asarray(curves["head_uk_cos"])[head_row, :, :, 0]  # (trials, L)
    return {
        "kappa": key_cos[..., ks],
        "nu": u_cos[..., vs],
        "distance": manifold_distance(u_cos[..., ks], key_cos[..., vs], uk_cos),
        # at the per-head view's steps, as the three above
        "excess_risk": np.asarray(curves["excess_risk"])[head_row][
            :, np.isin(result.steps, result.head_steps)
        ],
    }


def manifold_distance(v_kstar, k_vstar, k_v) -> np.ndarray:
    """√((v·k*)² + (k·v*)² + (k·v)²) (unit k, v: the cosines are the dot products, any sign)."""
    return np.sqrt(np.square(v_kstar) + np.square(k_vstar) + np.square(k_v))


def floor(beta, d: int, T: int, gamma: float, nodes: int = 80) -> np.ndarray:
    """The excess risk E[(Φ(X) − y)²] − ε² at k = k*, v = v*, temperature β:

    γ² E_g[(1 − erf(β(√(d/2) + γg)))²] + (T − 1)·(2/π)·arcsin(2β²/(1 + 2β²)),

    the relevant token's missed share of its target (g ~ N(0, 1), ``nodes``-point Gauss–Hermite)
    plus the T − 1 other tokens' erf(β z)·w, z, w ~ N(0, 1) independent. It vanishes only when
    β → 0 and β√d → ∞ together."""
    from scipy.special import erf  # lazy: scipy: only for the closed form

    beta = np.asarray(beta, dtype=float)
    x, w = np.polynomial.hermite_e.hermegauss(nodes)  # ∫ f(x) e^{−x²/2} dx
    w = w / math.sqrt(2 * math.pi)
    mean = np.sqrt(np.asarray(d, dtype=float) / 2)[..., None]  # d may be an array too
    missed = np.sum(w * (1.0 - erf(beta[..., None] * (mean + gamma * x))) ** 2, axis=-1)
    others = (T - 1) * (2 / math.pi) * np.arcsin(2 * beta**2 / (1 + 2 * beta**2))
    return gamma**2 * missed + others


def band(values: np.ndarray, q: float = 0.95) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(median, lower, upper) over the trials (axis 0) with the central ``q`` interval, NaN-aware;
    ``q`` in (0, 1]."""
    if isinstance(q, bool) or not isinstance(q, int | float | np.number) or not 0 < q <= 1:
        raise ValueError(f"q={q!r} must be in (0, 1]: the share of the trials the band holds")
    lo, hi = (1 - q) / 2, 1 - (1 - q) / 2
    return (
        np.nanmedian(values, axis=0),
        np.nanquantile(values, lo, axis=0),
        np.nanquantile(values, hi, axis=0),
    )


def final_table(result, head_row: int = 0) -> dict[str, float]:
    """The medians over trials of the final |κ|, |ν|, distance and excess risk, and the floor at the
    final β."""
    a = alignments(result, head_row)
    cfg = result.config
    out = {name: float(np.nanmedian(a[name][:, -1])) for name in QUANTITIES}
    beta = beta_at(result.steps[-1:], cfg.model.temperature, cfg.model.temperature_decay)
    out["floor"] = float(floor(beta, cfg.data.d, cfg.data.T, cfg.data.gamma)[0])
    out["beta_final"] = float(beta[0])
    return out


def headline(result) -> dict[str, dict]:
    """The preset's headline: the final excess test risk beside its floor at the final β, and |k·k*|,
    |v·v*|, medians over the trials of the first H (``final_table``)."""
    final = final_table(result)
    trials = int(np.shape(result.curves["excess_risk"])[1])
    about = f"final value, median over {trials} trials"
    return {
        "excess_risk": entry(
            "excess risk",
            final["excess_risk"],
            closed_form=final["floor"],
            about=f"{about}; closed form: the floor at (k*, v*) at the final β = {final['beta_final']:.4g}",
        ),
        "kappa": entry("|k·k*|", final["kappa"], about=about),
        "nu": entry("|v·v*|", final["nu"], about=about),
    }
