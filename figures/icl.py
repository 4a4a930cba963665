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

from dynamics import parts
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
    """One run's train loss, a thin line per trial (their drops come at different steps, so a
    mean would blur the staircase), on a log step axis, with the closed-form levels."""
    steps = curves["steps"]
    loss = curves["train_loss"][0]  # (trials, L): the preset's one H
    keep = steps > 0  # the log axis starts at step 1
    for t, trial in enumerate(loss):
        ax.plot(
            steps[keep],
            trial[keep],
            color=color,
            lw=1.4,
            alpha=0.75,
            label=f"{len(loss)} trials" if t == 0 else None,
        )
    levels = _levels(meta)
    for m, level in enumerate(levels):
        ax.axhline(level, color=LEVEL_COLOR, ls="--", lw=1)
        ax.text(steps[-1], level, f" ℒ$_{m}$", va="center", ha="left", fontsize="small", color=LEVEL_COLOR)
    ax.set_xscale("log")
    ax.set_xlim(1, steps[-1])
    finite = loss[np.isfinite(loss)]
    top = min(float(finite.max()), 1.5 * levels[0]) if finite.size else levels[0]
    ax.set_ylim(0, 1.08 * max(levels[0], top))
    ax.set_xlabel("GD step")
    ax.set_title(title, fontsize="medium")
    ax.legend(frameon=False, fontsize="small", loc="lower left")
    diverged = int(np.sum(curves["diverged_at"][0] >= 0))
    if diverged:
        ax.text(0.02, 0.12, f"{diverged} trial(s) diverged", transform=ax.transAxes, fontsize="small")


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
    if not parts.KEY_QUERIES.get(model["key_query"]).factored:
        _panel(axes[0], meta, curves, COLORS[1], f"{H} heads, full key-query W_h")
    else:
        _panel(
            axes[0], meta, curves, COLORS[0], f"{H} heads, key-query Q_h K_hᵀ of rank {model['head_size']}"
        )
    axes[0].set_ylabel("train mse")
    if full:
        _panel(axes[1], *full, COLORS[1], f"{H} heads, full key-query W_h")
    data = meta["config"]["data"]
    optim = meta["config"]["optim"]
    setting = f"GD η = {optim['lr']:g}, init σ₀ = {model['init_scale']:g}"
    if full:
        f_model, f_optim = full[0]["config"]["model"], full[0]["config"]["optim"]
        setting += f" (full W_h: η = {f_optim['lr']:g}, σ₀ = {f_model['init_scale']:g})"
    fig.suptitle(
        f"in-context linear regression, D = {data['d'] - 1}, N + 1 = {data['T']} tokens, "
        f"{data['n_train']} sequences; linear attention, heads summed\n{setting}; "
        "dashed: the closed-form plateaus ℒ_m",
        fontsize="medium",
    )
    return fig
