"""The sparse-token experiment (Barnfield, Cui, Lu, *High-Dimensional Analysis of Single-Layer
Attention for Sparse-Token Classification*, ICLR 2026, arXiv 2509.25153): the first two GD steps.

One softmax head with a learned query q, readout w and bias b, Φ(X) = wᵀ Xᵀ softmax(X q) + b,
the mean logistic loss, full-batch GD of step η from θ(0) = 0 on the ``sparse-token`` data model
(``datamodels.sparse_token``). At θ = 0 the attention is uniform and ∂Φ/∂q = 0 (it is linear in
w), so the first step moves only (w, b); the second moves q for the first time. The grid presets
``sparse-token`` (α₀ = n/d over n_train) and ``sparse-token-theta`` (α₀ × the signal θ) in
``dynamics.config.grid_axes`` are the experiment; this module adds what a plain grid does not log, the
*signed* cosines of the paper, cos(w⁽ᵗ⁾, ξ) and cos(q⁽ᵗ⁾, ξ), as two more curves (``COS_W``,
``COS_Q``: (H, *grid shape, trials, L), the first head, NaN at a zero vector), computed from the
parameter snapshots and each trial's ξ. The per-head curves ``head_u_cos`` and ``head_key_cos``
log |cos| (a head's direction has no sign there); these curves keep the sign.

``two_steps_reference`` is an independent float64 numpy version of the two steps (the gradient
written by hand), ``cos_w1_limit`` the proportional-limit value of cos(w⁽¹⁾, ξ).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from dynamics.config.grid_axes import grid_preset, resolve_grid
from dynamics.config.schema import apply_overrides

NAME = "sparse-token"
THETA = "sparse-token-theta"
NAMES = (NAME, THETA)
COS_W, COS_Q = "cos_w_xi", "cos_q_xi"


def grid(name: str = NAME):
    """The grid experiment of preset ``name`` (validated; no JAX)."""
    return resolve_grid(*grid_preset(name))


def key(name: str = NAME) -> str:
    """The results' cache key: the grid's hash."""
    return grid(name).hash()


def signal_directions(cfg) -> np.ndarray:
    """(trials, d): each trial's ξ, as the sweep of ``cfg`` draws it. ξ comes from the trial's
    setup key alone, so it is drawn with n_train = n_test = 1 (the same ξ, no large data draw)."""
    from dynamics.sweeps.execute import planted_directions, prepare_data  # lazy: JAX, the engine: on a run

    small = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, n_train=1, n_test=1))
    return planted_directions(prepare_data(small))["xi"]


def signed_cos(vectors: np.ndarray, xi: np.ndarray) -> np.ndarray:
    """cos(v, ξ) with its sign: ``vectors`` (..., trials, L, d), ``xi`` (trials, d) -> (..., trials, L);
    NaN where v = 0."""
    v = np.asarray(vectors, np.float64)
    dot = np.einsum("...tld,td->...tl", v, np.asarray(xi, np.float64))
    norm = np.linalg.norm(v, axis=-1) * np.linalg.norm(xi, axis=-1)[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(norm > 0, dot / np.where(norm > 0, norm, 1.0), np.nan)


def signed_cosines(result) -> dict[str, np.ndarray]:
    """{COS_W, COS_Q}: (H, *grid shape, trials, L_h) signed cosines of the first head's readout and
    query with ξ, from a grid result with parameter snapshots (``sweep.save_params``)."""
    if "param_U" not in result.curves or "param_k" not in result.curves:
        raise ValueError("the grid logged no parameter snapshots (sweep.save_params) of a learned query")
    shape = result.grid.shape
    out = {COS_W: np.full(result.curves["param_U"].shape[:-2], np.nan)}  # at the per-head view's steps
    out[COS_Q] = out[COS_W].copy()
    cache: dict[int, np.ndarray] = {}
    for k, cfg in enumerate(result.grid.points):
        d = int(cfg.data.d)
        if d not in cache:
            cache[d] = signal_directions(cfg)
        idx = (slice(None), *np.unravel_index(k, shape))
        for name, param in ((COS_W, "param_U"), (COS_Q, "param_k")):
            out[name][idx] = signed_cos(result.curves[param][idx][..., 0, :d], cache[d])
    return out


def run(name: str = NAME, progress: bool = True, axes=None, **overrides):
    """The grid of preset ``name`` (``overrides``: {section: {field: value}} on its base config,
    e.g. smaller d for a test; ``axes``: {knob: values} replacing the preset's), run, with the
    signed cosines added to its curves."""
    from dynamics.sweeps.grid_runner import run_grid_experiment  # lazy: JAX, the engine: on a run

    cfg, preset_axes = grid_preset(name)
    if overrides:
        cfg = apply_overrides(cfg, overrides, f"{name} overrides")
    result = run_grid_experiment(resolve_grid(cfg, preset_axes if axes is None else axes), progress=progress)
    result.curves.update(signed_cosines(result))
    return result


def produce(name: str, results_dir: Path, progress: bool) -> None:
    """``python -m figures``' producer: the preset's grid with the signed cosines, written as a grid."""
    from dynamics.sweeps.grid_runner import write_grid  # lazy: JAX, the engine: on a run

    result = run(name, progress=progress)
    result.extra.update(complete=True)
    write_grid(result, results_dir)


def cos_w1_limit(alpha0, T: int = 10, r: int = 3, positive_rate: float = 0.2, signal: float = 6.0):
    """cos(w⁽¹⁾, ξ) as n, d → ∞ with n/d = α₀. From θ = 0, w⁽¹⁾ = (η/2n) Σ_i y_i x̄_i with
    x̄ the tokens' mean: its ξ part tends to π θ R/T (the positives' share times their mean
    signal), its noise (1/n) Σ y_i z̄_i is N(0, I/(nT)), of squared norm d/(nT) = 1/(α₀T)."""
    s = positive_rate * signal * r / T
    return s / np.sqrt(s**2 + 1.0 / (np.asarray(alpha0, np.float64) * T))


def gradients(X, y, w, b, q):
    """The mean logistic loss's gradient at (w, b, q) in float64, by hand: with a = softmax(X q),
    x̄ = Σ_t a_t x_t, Φ = w·x̄ + b and g = −y σ(−yΦ) / n: ∇_w = Σ_i g_i x̄_i, ∇_b = Σ_i g_i,
    ∇_q = Σ_i g_i Σ_t a_t (w·x_t)(x_t − x̄_i)."""
    X, y = np.asarray(X, np.float64), np.asarray(y, np.float64)
    s = X @ q  # (n, T)
    a = np.exp(s - s.max(axis=1, keepdims=True))
    a /= a.sum(axis=1, keepdims=True)
    xbar = np.einsum("nt,ntd->nd", a, X)
    phi = xbar @ w + b
    g = -y / (1.0 + np.exp(y * phi)) / len(y)  # ℓ'(z) = −σ(−z), z = yΦ
    v = X @ w  # (n, T): each token's value w·x_t
    dphi_dq = np.einsum("nt,nt,ntd->nd", a, v, X - xbar[:, None, :])
    return g @ xbar, g.sum(), g @ dphi_dq


def two_steps_reference(X, y, lr: float = 0.5, steps: int = 2) -> list[dict[str, np.ndarray]]:
    """θ after each of ``steps`` GD steps from θ = 0 (float64): [{"w", "b", "q"}, …]."""
    d = np.asarray(X).shape[-1]
    w, b, q = np.zeros(d), 0.0, np.zeros(d)
    out = []
    for _ in range(steps):
        gw, gb, gq = gradients(X, y, w, b, q)
        w, b, q = w - lr * gw, b - lr * gb, q - lr * gq
        out.append({"w": w, "b": np.float64(b), "q": q})
    return out
