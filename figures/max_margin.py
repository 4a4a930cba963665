"""Max-margin token selection in the form of Tarzanagh, Li, Thrampoulidis, Oymak (2023): along
training, 1 − corr(θ, θ^mm) on a log axis (θ = W, or the learned prompt p), the softmax
probability of the selected token and ‖θ‖; the mean over the trials (data sets) with a band from
the smallest to the largest (``dynamics.theory.maxmargin.alignment``, the model's final selection).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from dynamics.theory.maxmargin import alignment, headline
from figures.sweep import save_figure
from figures.theme import DEEP, set_theme


def _band(ax, steps, values, color, label):
    ax.fill_between(steps, values.min(axis=0), values.max(axis=0), color=color, alpha=0.2, linewidth=0)
    ax.plot(steps, values.mean(axis=0), color=color, linewidth=2, label=label)


def max_margin_figure(source) -> Figure:
    """The three panels of a max-margin sweep (a ``SweepResult`` or its folder): a Figure."""
    from dynamics.api import load_results

    result = source if hasattr(source, "curves") else load_results(source)
    a = alignment(result)
    cfg, steps = result.config, a.steps
    name = "p" if a.parameter == "k" else "W"
    set_theme()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
    gap = np.maximum(1.0 - a.corr, np.finfo(np.float64).tiny)
    _band(axes[0], steps, gap, DEEP[0], f"1 − corr({name}, {name}^mm)")
    axes[0].set(yscale="log", ylabel=f"1 − corr({name}(t), {name}^mm)", title=f"alignment with {name}^mm")
    _band(axes[1], steps, a.selected_prob, DEEP[1], "selected token")
    axes[1].set(ylim=(0, 1.02), ylabel="softmax probability", title="attention on the selected token")
    _band(axes[2], steps, a.norm, DEEP[2], f"‖{name}‖")
    axes[2].set(ylabel=f"‖{name}(t)‖", title=f"‖{name}‖ (normalised GD: η per step)")
    for ax in axes:
        ax.set_xlabel("step t")
    trials = a.corr.shape[0]
    corr = _headline(result).get("maxmargin_corr", {}).get("value")
    # the query outside the keys: T − 1 keys, x_T the query (the title says so; the default's is as before)
    where = f"\nthe query x_T outside the keys x_1…x_{cfg.data.T - 1}" if cfg.model.query == "outside" else ""
    fig.suptitle(
        f"{cfg.name or 'max-margin'}: n = {cfg.data.n_train}, T = {cfg.data.T}, d = {cfg.data.d}, "
        f"{cfg.optim.optimizer} η = {cfg.optim.lr:g}, {trials} data sets; mean corr at t = {steps[-1]}: "
        f"{'n/a' if corr is None else f'{corr:.4f}'} (selection: the model's final argmax){where}"
    )
    return fig


def _headline(result) -> dict:
    """The run's headline (``result.headline()``: stored, or the max-margin preset's numbers for a run
    of another name)."""
    found = result.headline()
    return found if "maxmargin_corr" in found else headline(result)


def plot_max_margin(source, stem: str | Path, *, dpi: int = 130) -> list[Path]:
    """``max_margin_figure(source)`` saved as ``stem``.png and .pdf; returns the written paths."""
    return save_figure(max_margin_figure(source), stem, dpi=dpi)
