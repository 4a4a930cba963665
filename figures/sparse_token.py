"""The sparse-token figure (Barnfield, Cui, Lu 2025): after the first two GD steps from θ = 0,
cos(w⁽¹⁾, ξ) and cos(q⁽²⁾, ξ) against α₀ = n/d, the mean over trials with a ± 1 std band.

Drawn from a grid folder (``python -m figures sparse-token``, or ``python -m dynamics.run --preset
sparse-token``'s). The signed cosines (``dynamics.experiments.sparse_token``) are drawn when the
folder holds them (the figures' runs), else the per-head |cos| curves every grid logs, and the
axis says which. With the signal θ as a second knob (``sparse-token-theta``) each panel holds a
line per θ. The dashed lines are the proportional limit of cos(w⁽¹⁾, ξ) (``cos_w1_limit``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from dynamics.experiments.sparse_token import COS_Q, COS_W, cos_w1_limit
from figures.sweep import save_figure
from figures.theme import set_theme


def alignments(result) -> tuple[np.ndarray, np.ndarray, bool]:
    """(cos(w⁽¹⁾, ξ), cos(q⁽²⁾, ξ), signed) of a grid result: arrays (*grid shape, trials) of the
    first H, from the signed curves when logged, else the per-head |cos| of the first head."""
    steps = list(np.asarray(result.curves.get("head_steps", result.steps)))  # the per-head view's steps
    if 1 not in steps or 2 not in steps:
        raise ValueError(f"the run logged steps {steps}, not steps 1 and 2 (log every step)")
    i1, i2 = steps.index(1), steps.index(2)
    if COS_W in result.curves and COS_Q in result.curves:
        return result.curves[COS_W][0, ..., i1], result.curves[COS_Q][0, ..., i2], True
    if "head_u_cos" not in result.curves:
        raise ValueError("the run logged neither the signed cosines nor the per-head |cos| with ξ")
    w = result.curves["head_u_cos"][0, ..., i1, 0, 0]
    q = result.curves["head_key_cos"][0, ..., i2, 0, 0]
    return w, q, False


def _band(ax, x, values, color, label, marker):
    mean, std = np.nanmean(values, axis=-1), np.nanstd(values, axis=-1)
    ax.plot(x, mean, marker=marker, color=color, label=label)
    ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, lw=0)


def plot_sparse_token(results_dir: Path, stem: Path) -> list[Path]:
    """The figure of a ``sparse-token`` or ``sparse-token-theta`` grid folder: ``stem``.png and .pdf."""
    from dynamics.api import load_results

    return save_figure(sparse_token_figure(load_results(results_dir)), stem)


def sparse_token_figure(result):
    """The figure of a sparse-token grid result (a ``GridResult``, e.g. ``sparse_token.run``'s)."""
    names = [n for n, _ in result.grid.axes]
    if names[0] != "n_train" or not set(names) <= {"n_train", "signal"}:
        raise ValueError(f"a sparse-token grid varies n_train (then the signal θ); this one varies {names}")
    cfg = result.config.resolved()
    data = cfg.data
    alpha = np.array(dict(result.grid.axes)["n_train"], float) / data.d
    w, q, signed = alignments(result)
    cos = "cos" if signed else "|cos|"
    set_theme()
    trials = w.shape[-1]
    if len(names) == 1:
        fig, ax = plt.subplots(figsize=(6, 4.2))
        _band(ax, alpha, q, "C3", f"{cos}(q⁽²⁾, ξ)", "o")
        _band(ax, alpha, w, "C0", f"{cos}(w⁽¹⁾, ξ)", "s")
        fine = np.geomspace(alpha.min(), alpha.max(), 100)
        limit = cos_w1_limit(fine, data.T, data.r, data.positive_rate, data.signal)
        ax.plot(fine, limit, "--", color="C0", lw=1, label="w⁽¹⁾: proportional limit")
        axes = [ax]
        title = f"θ = {data.signal:g}"
    else:
        thetas = dict(result.grid.axes)["signal"]
        fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
        colors = plt.get_cmap("viridis")(np.linspace(0, 0.9, len(thetas)))
        fine = np.geomspace(alpha.min(), alpha.max(), 100)
        for j, (theta, color) in enumerate(zip(thetas, colors, strict=True)):
            _band(axes[0], alpha, w[:, j], color, f"θ = {theta:g}", "s")
            limit = cos_w1_limit(fine, data.T, data.r, data.positive_rate, theta)
            axes[0].plot(fine, limit, "--", color=color, lw=1)
            _band(axes[1], alpha, q[:, j], color, f"θ = {theta:g}", "o")
        axes[0].set_title(f"{cos}(w⁽¹⁾, ξ)  (dashed: proportional limit)")
        axes[1].set_title(f"{cos}(q⁽²⁾, ξ)")
        title = "θ varies"
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks(alpha, [f"{a:g}" for a in alpha])
        ax.minorticks_off()
        ax.set_xlabel("α₀ = n / d")
        ax.axhline(0, color="0.6", lw=0.6)
    axes[0].set_ylabel(f"{cos} with ξ (mean ± std, {trials} trials)")
    if len(names) == 1:
        axes[-1].legend(fontsize=8, loc="lower right")
    else:
        axes[-1].legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.suptitle(
        f"sparse-token, 2 GD steps from 0 (η = {cfg.optim.lr:g}): d = {data.d}, T = {data.T}, "
        f"R = {data.r}, π = {data.positive_rate:g}, {title}",
        fontsize=10,
    )
    fig.tight_layout()
    return fig
