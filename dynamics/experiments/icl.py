"""In-context linear regression with multi-head linear attention (Zhang, Singh, Latham, Saxe,
*Training Dynamics of In-Context Learning in Linear Attention*, ICML 2025, arXiv 2501.16265).

The preset ``icl-linear`` trains H = 5 heads of rank-one key-query Q_h K_hᵀ (head size 1, the
authors' ATTN_S), summed (c_H = 1), on icl-linreg data: its train loss falls saddle to saddle,
one drop per eigenvalue of Λ, largest first. With a full key-query matrix W_h (the authors'
ATTN_M) it falls once. This module holds what the figure draws beside the runs:

``plateau_levels(eigenvalues, N)``
    The loss of the best model that uses the m largest eigen-directions of Λ, m = 0 … D:

        ℒ_m = tr Λ − Σ_{i ≤ m} λ_i / (1 + (1 + tr Λ / λ_i) / N).

    Derivation (a head that has learned direction v_i, an eigenvector of Λ: key and query ∝ v_i
    on the x channels, readout on y): its output is c·z_i·a_i with a_i = v_iᵀx_q ~ N(0, λ_i) and
    z_i = v_iᵀ Σ_n x_n y_n = v_iᵀ S w, S = Σ_n x_n x_nᵀ. With w ~ N(0, I) and Gaussian x:
    E[y_q z_i a_i] = N λ_i², E[z_i² a_i²] = N λ_i² (tr Λ + (N + 1) λ_i) (Isserlis), so the best c
    removes N λ_i² / (tr Λ + (N + 1) λ_i) = λ_i / (1 + (1 + tr Λ/λ_i)/N) from E[y_q²] = tr Λ.
    Two heads on different eigen-directions do not interact (E[a_i a_j] = 0), so the reductions
    add. ℒ_D is also the minimum of the full key-query model: Λ's reflections v_i → −v_i leave the
    data's law unchanged, so the best W is diagonal in Λ's eigenbasis.

``full_config(cfg)``
    The same run with a full key-query matrix (the single drop).

``produce`` / ``key``: the figure's results (``python -m figures icl-linear``): the preset's
sweep in the results folder, the full version in its ``full/`` subfolder.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from dynamics.config.schema import Config, apply_overrides, preset, resolve
from dynamics.sweeps.headline import entry

PRESET = "icl-linear"
FULL = "full"  # the subfolder of the full key-query version's results


def eigenvalues(D: int) -> np.ndarray:
    """Λ's eigenvalues of icl-linreg, i / Σ_j j for i = 1 … D (trace 1), ascending (float64)."""
    if isinstance(D, bool) or not isinstance(D, int | np.integer) or D < 1:
        raise ValueError(f"D={D!r} must be a positive integer")
    i = np.arange(1, D + 1, dtype=np.float64)
    return i / i.sum()


def plateau_levels(eigenvalues, N: int) -> np.ndarray:
    """ℒ_0 … ℒ_D (D + 1,): the population mse of the best model using the m largest eigen-
    directions of Λ (module docstring), for N context tokens; ℒ_0 = tr Λ, descending."""
    lam = np.asarray(eigenvalues, np.float64)
    if lam.ndim != 1 or lam.size == 0 or not np.all(np.isfinite(lam)) or np.any(lam <= 0):
        raise ValueError(f"eigenvalues={eigenvalues!r:.80} must be a non-empty vector of numbers > 0")
    if isinstance(N, bool) or not isinstance(N, int | np.integer) or N < 1:
        raise ValueError(f"N={N!r} must be a positive integer (the context length)")
    trace = lam.sum()
    lam = np.sort(lam)[::-1]
    gain = lam / (1.0 + (1.0 + trace / lam) / N)
    return trace - np.concatenate([[0.0], np.cumsum(gain)])


def levels_of(cfg: Config) -> np.ndarray:
    """``plateau_levels`` for an icl-linreg config (D = d − 1, N = T − 1)."""
    data = cfg.data.resolved()
    return plateau_levels(eigenvalues(data.d - 1), data.T - 1)


# The full key-query version's own step, init and length: at the preset's η = 0.02 its one fast
# drop overshoots and diverges in 2 of 5 trials (σ₀ = 0.001) or 1 of 5 (σ₀ = 0.1); η = 0.01 from
# σ₀ = 0.001 falls once, at about step 85, and is flat by step 1500 (docs/frontier.md).
FULL_SETTING = {"lr": 0.01, "init_scale": 0.001, "steps": 1500}


def full_config(cfg: Config | None = None) -> Config:
    """``cfg`` (default: the preset) with a full key-query matrix W_h per head and
    ``FULL_SETTING``'s step, init scale and steps: the single drop."""
    cfg = preset(PRESET) if cfg is None else cfg
    model = dataclasses.replace(
        cfg.model, key_query="full", head_size="split", init_scale=FULL_SETTING["init_scale"]
    )
    optim = dataclasses.replace(cfg.optim, lr=FULL_SETTING["lr"], steps=FULL_SETTING["steps"])
    cfg = dataclasses.replace(cfg, model=model, optim=optim)
    return apply_overrides(cfg, {"name": f"{cfg.name}-full"}, "icl full", explicit=False)


def key() -> str:
    """The figure's cache key: the preset's config hash (the full version derives from it)."""
    return resolve(preset(PRESET)).config.hash()


def produce(results_dir: Path, progress: bool) -> None:
    """Run the full key-query version into ``results_dir/full`` and then the preset's sweep into
    ``results_dir`` (its results.json, written last, marks both complete)."""
    from dynamics.sweeps.result_files import write_results  # lazy: JAX, the engine: on a run
    from dynamics.sweeps.sweep import run_sweep  # lazy: JAX, the engine: on a run

    results_dir = Path(results_dir)
    (results_dir / FULL).mkdir(parents=True, exist_ok=True)
    write_results(run_sweep(resolve(full_config()), progress=progress), results_dir / FULL)
    write_results(run_sweep(resolve(preset(PRESET)), progress=progress), results_dir)


def measured_plateaus(steps, loss, levels, *, window: float = 0.15, flat: float = 0.2) -> list[float]:
    """The measured level of each plateau: for each closed-form level ℒ_m, the loss where the curve
    is flattest among the logged points within ``window`` (relative) of ℒ_m; NaN where the curve
    never stays there (no point, or its flattest slope is more than ``flat`` times the curve's
    mean slope, a passage rather than a plateau). ``steps`` (L,) ascending, ``loss`` (L,)."""
    steps, loss = np.asarray(steps, np.float64), np.asarray(loss, np.float64)
    ok = np.isfinite(loss)
    steps, loss = steps[ok], loss[ok]
    slope = np.abs(np.gradient(loss, steps))  # per step, at each logged point
    mean_slope = abs(loss[0] - loss[-1]) / max(steps[-1] - steps[0], 1.0)
    out = []
    for target in np.asarray(levels, np.float64):
        near = np.flatnonzero(np.abs(loss - target) <= window * target)
        if near.size == 0 or slope[near].min() > flat * mean_slope:
            out.append(float("nan"))
            continue
        out.append(float(loss[near[np.argmin(slope[near])]]))
    return out


def headline(result) -> dict[str, dict]:
    """The preset's headline: each plateau's measured level (median over the trials of the first H
    whose curve stays there, ``measured_plateaus`` of the train loss) beside the closed form ℒ_m."""
    levels = levels_of(result.config)
    loss = np.asarray(result.curves["train_loss"])[0]  # (trials, L)
    found = np.array([measured_plateaus(result.steps, trial, levels) for trial in loss])  # (trials, D + 1)
    out = {}
    for m, level in enumerate(levels):
        column = found[:, m]
        seen = column[np.isfinite(column)]
        out[f"plateau_{m}"] = entry(
            f"ℒ_{m}",
            float(np.median(seen)) if seen.size else None,
            n=int(seen.size),
            closed_form=float(level),
            about=f"train loss where it stays near the closed-form level ℒ_{m}, median over the "
            f"{seen.size} of {len(column)} trials that stay there",
        )
    return out
