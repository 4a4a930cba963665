"""The in-context linear-attention figure (preset ``icl-linear``), drawn from saved results only.

Left: the train loss of the rank-one heads against the step (mean over trials, the band from the
lowest to the highest trial), with the closed form's plateau levels ℒ_0 … ℒ_D
(``dynamics.experiments.icl.plateau_levels``) as dashed lines. Right: the full key-query version
(``full/`` beside the results), one drop from ℒ_0 to ℒ_D.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from dynamics.experiments import icl
from figures.sweep import save_figure, sweep_data
from figures.theme import set_theme

LEVEL_COLOR = "0.35"
COLORS = ("#1f5fa8", "#b2452c")  # rank-one heads, full key-query


def plot_icl(results_dir: str | Path, stem: str | Path) -> list[Path]:
    """``icl_figure(results_dir)`` saved as ``stem``.png and .pdf."""
    return save_figure(icl_figure(results_dir), stem)


def _levels(meta: dict) -> np.ndarray:
    data = meta["config"]["data"]
    return icl.plateau_levels(icl.eigenvalues(data["d"] - 1), data["T"] - 1)


def _panel(ax, meta: dict, curves: dict, color: str, title: str) -> None:
    """One run's train loss, mean and min–max band over trials, with the closed-form levels."""
    steps = curves["steps"]
    loss = curves["train_loss"][0]  # (trials, L): the preset's one H
    ax.fill_between(steps, np.nanmin(loss, 0), np.nanmax(loss, 0), color=color, alpha=0.25, lw=0)
    ax.plot(steps, np.nanmean(loss, 0), color=color, lw=2, label=f"train mse, {loss.shape[0]} trials")
    levels = _levels(meta)
    for m, level in enumerate(levels):
        ax.axhline(level, color=LEVEL_COLOR, ls="--", lw=1)
        ax.text(steps[-1], level, f" ℒ$_{m}$", va="center", ha="left", fontsize="small", color=LEVEL_COLOR)
    ax.set_xlim(steps[0], steps[-1])
    ax.set_ylim(0, 1.08 * max(levels[0], float(np.nanmax(loss))))
    ax.set_xlabel("GD step")
    ax.set_title(title, fontsize="medium")
    ax.legend(frameon=False, fontsize="small", loc="upper right", bbox_to_anchor=(0.93, 1.0))


def icl_figure(source) -> Figure:
    """The staircase and, when ``source``'s folder has ``full/``, the full key-query version
    beside it. ``source``: the ``icl-linear`` results folder (or a SweepResult: staircase only)."""
    meta, curves = sweep_data(source)
    full = None
    if isinstance(source, str | Path) and (Path(source) / icl.FULL / "results.json").exists():
        full = sweep_data(Path(source) / icl.FULL)
    set_theme()
    fig, axes = plt.subplots(1, 2 if full else 1, figsize=(12.5 if full else 6.5, 4.2), layout="constrained")
    axes = np.atleast_1d(axes)
    model = meta["config"]["model"]
    H = int(curves["heads"][0])
    _panel(axes[0], meta, curves, COLORS[0], f"{H} heads, key-query Q_h K_hᵀ of rank {model['head_size']}")
    axes[0].set_ylabel("train mse")
    if full:
        _panel(axes[1], *full, COLORS[1], f"{H} heads, full key-query W_h")
    data = meta["config"]["data"]
    optim = meta["config"]["optim"]
    fig.suptitle(
        f"in-context linear regression, D = {data['d'] - 1}, N + 1 = {data['T']} tokens, "
        f"{data['n_train']} sequences; linear attention, heads summed, GD η = {optim['lr']:g}, "
        f"init σ₀ = {model['init_scale']:g}; dashed: closed-form plateaus ℒ_m",
        fontsize="medium",
    )
    return fig
