"""Positional versus semantic attention (Cui, Behrens, Krzakala, Zdeborová, NeurIPS 2024): the
grid preset ``positional-semantic`` (``dynamics.config.grid``: the ``positional-semantic`` data
model, a tied rank-1 key-query Q with sequence outputs, GD on the summed objective with coupled
decay, at several α = n/d from the semantic start Q(0) = q* and the positional start 1_d/√d) and
what a plain grid does not log, the paper's overlaps, from the snapshots of Q and each trial's q*:

    m = ‖Qᵀ 1_d‖ / d   (positional),      θ = ‖Qᵀ q*‖ / d   (semantic),

|1ᵀQ|/d and |q*ᵀQ|/d at rank 1. They are added to the grid's curves as ``M_POSITIONAL`` and
``THETA_SEMANTIC``, (H, *grid shape, trials, L_h) at the per-head view's steps. Which start ends
lower in the objective is, in the paper, the global minimiser at that α.
"""

from __future__ import annotations

import dataclasses

import numpy as np

NAME = "positional-semantic"
M_POSITIONAL, THETA_SEMANTIC = "m_positional", "theta_semantic"


def overlaps(Q: np.ndarray, teacher: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(m, θ) of ``Q`` (..., trials, L, d, r) against ``teacher`` (trials, d): ‖Qᵀ1‖/d, ‖Qᵀq*‖/d,
    each (..., trials, L), in float64."""
    Q = np.asarray(Q, np.float64)
    d = Q.shape[-2]
    m = np.linalg.norm(np.sum(Q, axis=-2), axis=-1) / d  # Qᵀ1: the sum over the d rows
    proj = np.einsum("...tlda,td->...tla", Q, np.asarray(teacher, np.float64))
    return m, np.linalg.norm(proj, axis=-1) / d


def teachers(cfg) -> np.ndarray:
    """(trials, d): each trial's q*, as the sweep of ``cfg`` draws it (from the trial's setup key
    alone, so drawn with n_train = n_test = 1: the same q*, no large data draw)."""
    from dynamics.sweeps.execute import prepare_data

    small = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, n_train=1, n_test=1))
    return np.asarray(prepare_data(small).data.world.latents["teacher"])


def add_overlaps(result) -> dict[str, np.ndarray]:
    """{M_POSITIONAL, THETA_SEMANTIC}: (H, *grid shape, trials, L_h) from a grid result with the
    snapshots of a tied Q (``sweep.save_params``), the first head's."""
    if "param_Q" not in result.curves:
        raise ValueError("the grid logged no snapshots of Q (sweep.save_params with a tied key-query)")
    snapshots = result.curves["param_Q"]  # (H, *grid, trials, L_h, heads, d, r)
    out = {name: np.full(snapshots.shape[:-3], np.nan) for name in (M_POSITIONAL, THETA_SEMANTIC)}
    cache: dict[int, np.ndarray] = {}
    for k, cfg in enumerate(result.grid.points):
        d = int(cfg.data.d)
        if d not in cache:
            cache[d] = teachers(cfg)
        idx = (slice(None), *np.unravel_index(k, result.grid.shape))
        m, theta = overlaps(snapshots[idx][..., 0, :d, :], cache[d])
        out[M_POSITIONAL][idx], out[THETA_SEMANTIC][idx] = m, theta
    result.curves.update(out)
    return out


def run(progress: bool = True, axes=None, **overrides):
    """The preset's grid (``overrides``: {section: {field: value}} on its base config, e.g. a
    smaller d for a test; ``axes``: {knob: values} replacing the preset's), run, with the overlaps
    added to its curves."""
    from dynamics.config.grid import grid_preset, resolve_grid
    from dynamics.config.schema import apply_overrides
    from dynamics.sweeps.grid import run_grid_experiment

    cfg, preset_axes = grid_preset(NAME)
    if overrides:
        cfg = apply_overrides(cfg, overrides, f"{NAME} overrides")
    result = run_grid_experiment(resolve_grid(cfg, preset_axes if axes is None else axes), progress=progress)
    add_overlaps(result)
    return result
