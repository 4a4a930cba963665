"""The theory diagnostics figure of a sweep, from saved result files only.

Drawn when ``curves.npz`` holds diagnostics (``--diagnostics``); one panel per quantity logged,
a line per H (mean over the trials that did not diverge, at the steps in ``diagnostic_steps``):

- sharpness λ_max(t) (log scale) with 2/η(H) dashed in the same colour (GD's edge of stability),
  −λ_min(t) dotted;
- kernel distance from the reference kernel against t, and its final value against H;
- cosine of Σ_h W_h(t) to the max-margin W^mm against t (solid), best single head dotted.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dynamics import parts
from figures.sweep import (
    add_head_colorbar,
    describe,
    head_colors,
    partial_note,
    plt,
    save_figure,
    sweep_data,
)
from figures.theme import set_theme

PANELS = ("sharpness", "kernel_distance", "kernel_final", "maxmargin_cos")


def has_diagnostics(curves: dict) -> bool:
    return "diagnostic_steps" in curves


def _mean(curves: dict, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps (Ld,), per-H mean over non-diverged trials (n_heads, Ld)) at the diagnostic steps."""
    steps = np.asarray(curves["steps"])
    dsteps = np.asarray(curves["diagnostic_steps"])
    at = np.searchsorted(steps, dsteps)
    values = np.asarray(curves[name])[..., at]  # (n_heads, trials, Ld)
    ok = np.asarray(curves["diverged_at"]) < 0  # (n_heads, trials)
    mean = np.full((values.shape[0], values.shape[2]), np.nan)
    for i in range(values.shape[0]):
        rows = values[i, ok[i]] if ok[i].any() else values[i]
        finite = np.isfinite(rows)
        counts = finite.sum(axis=0)  # (Ld,): NaN where no trial has a value (e.g. cos at W = 0)
        mean[i] = np.where(
            counts > 0, np.where(finite, rows, 0.0).sum(axis=0) / np.maximum(counts, 1), np.nan
        )
    return dsteps, mean


def _time_axis(ax, label: str) -> None:
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(left=0)
    ax.set_xlabel("iteration t")
    ax.set_ylabel(label)


def _plot_sharpness(ax, meta: dict, curves: dict, cmap, norm) -> None:
    t, lam = _mean(curves, "sharpness")
    _, lam_min = _mean(curves, "hessian_min")
    lrs = meta["diagnostics"]["lr"]
    for i, h in enumerate(curves["heads"]):
        color = cmap(norm(h))
        ax.plot(t, lam[i], color=color, lw=1.6)
        ax.plot(t, -lam_min[i], color=color, lw=0.8, ls=":")
        ax.axhline(2.0 / lrs[i], color=color, lw=1.0, ls="--")
    ax.set_yscale("log")
    _time_axis(ax, "λ_max (solid), −λ_min (dotted), 2/η (dashed)")


def _plot_kernel(ax_t, ax_h, curves: dict, cmap, norm) -> None:
    t, dist = _mean(curves, "kernel_distance")
    heads = np.asarray(curves["heads"])
    for i, h in enumerate(heads):
        ax_t.plot(t, dist[i], color=cmap(norm(h)), lw=1.6)
    _time_axis(ax_t, "kernel distance 1 − cos(K₀, K_t)")
    final = [row[np.isfinite(row)][-1] if np.isfinite(row).any() else np.nan for row in dist]
    ax_h.plot(heads, final, color="0.25", marker="o")
    ax_h.set_xscale("log", base=2)
    ax_h.set_xlabel("number of heads H")
    ax_h.set_ylabel(f"final kernel distance (t = {int(t[-1])})")


def _plot_maxmargin(ax, curves: dict, cmap, norm) -> None:
    t, total = _mean(curves, "maxmargin_cos")
    _, head = _mean(curves, "maxmargin_cos_head")
    for i, h in enumerate(curves["heads"]):
        ax.plot(t, total[i], color=cmap(norm(h)), lw=1.6)
        ax.plot(t, head[i], color=cmap(norm(h)), lw=1.0, ls=":")
    ax.set_ylim(top=1.0)
    _time_axis(ax, "cos(Σ W_h, W^mm); best head dotted")


def plot_diagnostics(results_dir: str | Path, stem: str | Path, *, dpi: int = 130) -> list[Path]:
    """The diagnostics panels that ``curves.npz`` holds; ``stem``.png and .pdf. Refuses results
    without diagnostics (ValueError)."""
    meta, curves = sweep_data(results_dir)
    if not has_diagnostics(curves):
        raise ValueError(f"{results_dir} has no diagnostics (run with --diagnostics)")
    present = [
        p
        for p, key in zip(
            PANELS, ("sharpness", "kernel_distance", "kernel_distance", "maxmargin_cos"), strict=True
        )
        if key in curves
    ]
    set_theme()
    fig, axes = plt.subplots(1, len(present), figsize=(4.6 * len(present) + 0.8, 4.4), layout="constrained")
    axes = dict(zip(present, np.atleast_1d(axes), strict=True))
    heads = np.asarray(curves["heads"])
    cmap, norm = head_colors(heads)
    if "sharpness" in axes:
        _plot_sharpness(axes["sharpness"], meta, curves, cmap, norm)
    if "kernel_distance" in axes:
        _plot_kernel(axes["kernel_distance"], axes["kernel_final"], curves, cmap, norm)
    if "maxmargin_cos" in axes:
        _plot_maxmargin(axes["maxmargin_cos"], curves, cmap, norm)
    for letter, ax in zip("abcd"[: len(axes)], axes.values(), strict=True):
        ax.set_title(f"({letter})", loc="left", fontsize="medium", fontweight="bold")
    timed = [ax for key, ax in axes.items() if key != "kernel_final"]
    add_head_colorbar(fig, timed, heads)
    config = meta["config"]
    trials = curves["train_loss"].shape[1]
    symmetric = config["model"]["init"] in parts.INITS and parts.INITS[config["model"]["init"]].symmetric
    init = "θ(0) = 0" if symmetric else f"σ₀ = {config['model']['init_scale']:g}"
    fig.suptitle(
        f"{config.get('name', '')}: {describe(config)}, {init}, {trials} trials per H: theory diagnostics"
        f"{partial_note(meta)}"
    )
    return save_figure(fig, stem, dpi=dpi)
