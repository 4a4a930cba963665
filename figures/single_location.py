"""Single-location regression in the form of Marion, Berthier, Biau, Boyer (ICLR 2025): |k·k*|,
|v·v*|, the distance to the manifold and the excess test risk along training, median over the
trials with a band holding the central 95 % of them; the excess risk beside its floor at
(k*, v*) for the temperature of each step (``dynamics.experiments.single_location.floor``).
A grid over d and β₀ draws the final excess risk against d, one line per β₀, with the floor at
the final β as the closed form says.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from dynamics.experiments import single_location as sl
from figures.sweep import save_figure
from figures.theme import DEEP, set_theme


def _result(source):
    from dynamics.api import load_results

    return source if hasattr(source, "curves") else load_results(source)


def _median_band(ax, steps, values, color, label):
    med, lo, hi = sl.band(values)
    ax.fill_between(steps, lo, hi, color=color, alpha=0.25, linewidth=0)
    ax.plot(steps, med, color=color, linewidth=2, label=label)


def single_location_figure(source) -> Figure:
    """The four quantities of a single-location sweep (a ``SweepResult`` or its folder): a Figure."""
    set_theme()
    result = _result(source)
    a = sl.alignments(result)
    cfg = result.config
    steps = np.asarray(result.head_steps)  # the per-head view's steps, the alignments' axis
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
    _median_band(axes[0], steps, a["kappa"], DEEP[0], "|k·k*|")
    _median_band(axes[0], steps, a["nu"], DEEP[1], "|v·v*|")
    axes[0].set(ylim=(0, 1.02), ylabel="alignment", title="alignment with k*, v*")
    axes[0].legend(loc="lower right")
    _median_band(axes[1], steps, a["distance"], DEEP[2], "distance")
    axes[1].set(ylabel="distance", title="distance to {k·v* = 0, v·k* = 0, k·v = 0}", ylim=(0, None))
    _median_band(axes[2], steps, a["excess_risk"], DEEP[3], "excess test risk")
    beta = sl.beta_at(steps, cfg.model.temperature, cfg.model.temperature_decay)
    floor = sl.floor(beta, cfg.data.d, cfg.data.T, cfg.data.gamma)
    axes[2].plot(steps, floor, "k--", label="floor at (k*, v*), β_t")
    axes[2].set(yscale="log", ylabel="test MSE − ε²", title="excess test risk")
    axes[2].legend(loc="upper right")
    for ax in axes:
        ax.set_xlabel("step t")
        ax.ticklabel_format(axis="x", style="sci", scilimits=(0, 0))
    found = result.headline()
    if "excess_risk" not in found or "kappa" not in found:  # a run not named single-location
        found = sl.headline(result)
    final = {k: found[k]["value"] for k in ("kappa", "nu", "excess_risk")}
    fig.suptitle(
        f"single-location, d = {cfg.data.d}, T = {cfg.data.T}, β₀ = {cfg.model.temperature:g}, "
        f"{result.curves['excess_risk'].shape[1]} trials: final median |k·k*| = {_num(final['kappa'])}, "
        f"|v·v*| = {_num(final['nu'])}, excess risk {_num(final['excess_risk'])} "
        f"(floor {_num(found['excess_risk'].get('closed_form'))} at β = {float(beta[-1]):.3f})"
    )
    return fig


def _num(v) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def grid_figure(source) -> Figure:
    """Final excess risk (median, min–max over trials) and |k·k*| against d, one colour per β₀, of a
    grid over d and the temperature (a ``GridResult`` or its folder); the floor at the final β dashed."""
    set_theme()
    grid = _result(source)
    rows = _grid_rows(grid)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    for i, (beta0, points) in enumerate(sorted(rows.items())):
        color = DEEP[i % len(DEEP)]
        d = np.array([p[0] for p in points])
        risk = np.array([p[1] for p in points])  # (n_d, trials)
        kappa = np.array([p[2] for p in points])
        axes[0].errorbar(
            d, np.median(risk, 1), yerr=[np.median(risk, 1) - risk.min(1), risk.max(1) - np.median(risk, 1)],
            color=color, marker="o", capsize=3, label=f"β₀ = {beta0:g}",
        )  # fmt: skip
        dd = np.geomspace(d.min(), 4 * d.max(), 60)
        beta, T, gamma = points[0][3:]
        axes[0].plot(dd, sl.floor(beta[0], dd, T, gamma), "--", color=color)
        axes[1].plot(d, np.median(kappa, 1), color=color, label=f"β₀ = {beta0:g}")
        jitter = d[:, None] * (1 + 0.03 * (i - 1)) * np.ones_like(kappa)
        axes[1].scatter(jitter, kappa, color=color, marker="o", s=18)
    axes[0].set(xscale="log", yscale="log", xlabel="d", ylabel="final test MSE − ε²")
    axes[0].set_title("final excess risk (dashed: floor at (k*, v*), final β)")
    axes[1].set(xscale="log", xlabel="d", ylabel="median final |k·k*|", ylim=(0, 1.02))
    axes[1].set_title("final alignment (dots: trials, line: median)")
    for ax in axes:
        ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda x, _: f"{x:g}"))
    axes[0].legend()
    return fig


def _grid_rows(grid) -> dict[float, list]:
    """β₀ -> [(d, final excess risks, final |κ|s, final β (1,), T, γ)] sorted by d."""
    rows: dict[float, list] = {}
    for k in range(len(grid.grid.points)):
        point = grid.point(k)
        cfg = point.config
        a = sl.alignments(point)
        beta = sl.beta_at(point.steps[-1:], cfg.model.temperature, cfg.model.temperature_decay)
        item = (cfg.data.d, a["excess_risk"][:, -1], a["kappa"][:, -1], beta, cfg.data.T, cfg.data.gamma)
        rows.setdefault(cfg.model.temperature, []).append(item)
    return {b: sorted(v, key=lambda p: p[0]) for b, v in rows.items()}


def plot_single_location(results_dir: str | Path, stem: str | Path, *, dpi: int = 130) -> list[Path]:
    """``single_location_figure(results_dir)`` saved as ``stem``.png and .pdf."""
    return save_figure(single_location_figure(results_dir), stem, dpi=dpi)


def plot_grid(results_dir: str | Path, stem: str | Path, *, dpi: int = 130) -> list[Path]:
    """``grid_figure(results_dir)`` saved as ``stem``.png and .pdf."""
    return save_figure(grid_figure(results_dir), stem, dpi=dpi)
