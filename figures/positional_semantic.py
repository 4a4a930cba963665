"""The positional-semantic figure (Cui, Behrens, Krzakala, Zdeborová 2024) against α = n/d, both
starts: the test error (the start with the lower final objective, the global minimiser, filled;
the linear mixing baseline ŷ = B Z where the folder holds it),
the overlaps m and θ, and the paired difference of the objectives (semantic − positional, mean ±
std over trials) with the α where it crosses zero; beside each, the replica theory's curves of both
branches where the grid's problem is the stored curve's (``theory_for`` of
``dynamics.experiments.positional_semantic``, in the simulation's units). Drawn
from a grid folder of the preset
(``python -m figures positional-semantic``), whose curves hold the overlaps and the objective
(``dynamics.experiments.positional_semantic``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from dynamics.experiments.positional_semantic import STARTS, compare, theory, theory_for
from figures.sweep import save_figure
from figures.theme import set_theme

_STYLE = {"semantic": ("C3", "o"), "positional": ("C0", "s")}


def plot_positional_semantic(results_dir: Path, stem: Path) -> list[Path]:
    """The figure of a ``positional-semantic`` grid folder: ``stem``.png and .pdf."""
    from dynamics.api import load_results

    return save_figure(positional_semantic_figure(load_results(results_dir)), stem)


def positional_semantic_figure(result):
    """The figure of a positional-semantic grid result (``positional_semantic.run``'s, or loaded)."""
    c = compare(result)
    alpha = c["alpha"]
    cfg = result.config.resolved()
    set_theme()
    fig, (ax_err, ax_ov, ax_obj) = plt.subplots(1, 3, figsize=(14, 4.2))
    for start in STARTS:
        color, marker = _STYLE[start]
        ax_err.plot(alpha, c[start]["test_loss"], "-", color=color, label=f"{start} start")
        better = c["better"] == start
        ax_err.scatter(alpha[better], c[start]["test_loss"][better], marker=marker, color=color, zorder=3)
        ax_err.scatter(
            alpha[~better],
            c[start]["test_loss"][~better],
            marker=marker,
            facecolor="white",
            edgecolor=color,
            zorder=3,
        )
        ax_ov.plot(alpha, c[start]["theta"], "-", marker=marker, color=color, label=f"θ, {start} start")
        ax_ov.plot(
            alpha, c[start]["m"], "--", marker=marker, color=color, mfc="white", label=f"m, {start} start"
        )
    if "baseline" in c:
        ax_err.plot(alpha, c["baseline"], ":^", color="0.35", label="linear baseline ŷ = B Z")
    ax_err.set_title("test error (filled: the lower objective)")
    ax_err.set_ylabel("test loss  Σ‖y − f(X)‖² / (2d n_test)")
    ax_ov.set_title("overlaps θ = |q*ᵀQ|/d, m = |1ᵀQ|/d")
    diff, std = c["difference"], c["difference_std"]
    ax_obj.plot(alpha, diff, "-o", color="C2", label="semantic − positional")
    ax_obj.fill_between(alpha, diff - std, diff + std, color="C2", alpha=0.2, lw=0)
    ax_obj.axhline(0, color="0.5", lw=0.8)
    cross = c["crossing"]
    if np.isfinite(cross):
        ax_obj.axvline(cross, color="k", ls=":", lw=1, label=f"crossing α = {cross:.3g}")
    else:
        ax_obj.text(0.5, 0.95, "no crossing in this range", transform=ax_obj.transAxes, ha="center", va="top")
    ax_obj.set_title("Σ‖y − f‖²/(2d) + λ/2‖Q‖², paired per trial")
    ax_obj.set_ylabel("objective: semantic − positional")
    th = theory_for(cfg)
    if th is not None:
        _draw_theory(th, ax_err, ax_ov, ax_obj)
    else:  # a problem the stored curve was not solved for: no theory drawn rather than a wrong one
        st = theory(int(cfg.data.d))["settings"]
        note = f"replica theory stored for ω = {st['omega']:g}, σ = {st['sigma']:g}, λ = {st['lam']:g} only"
        ax_err.text(0.5, 0.02, note, transform=ax_err.transAxes, ha="center", va="bottom", fontsize=7)
    for ax in (ax_err, ax_ov, ax_obj):
        ax.set_xlabel("α = n / d")
        ax.legend(fontsize=8)
    trials = result.curves["test_loss"].shape[-2]
    fig.suptitle(
        f"positional vs semantic attention: d = {cfg.data.d}, ω = {cfg.data.omega:g}, σ = "
        f"{cfg.data.semantic_noise:g}, GD η = {cfg.optim.lr:g}, {cfg.optim.steps} steps, λ = "
        f"{cfg.optim.weight_decay:g}; the last step, mean over {trials} trials",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def _draw_theory(th: dict, ax_err, ax_ov, ax_obj) -> None:
    """The replica theory's curves (``theory``, the simulation's units) as thin lines: each branch's
    test error, the semantic branch's θ and the positional one's m (the other overlap is zero on
    each), and d × the objectives' difference with its crossing."""
    alpha = th["alpha"]
    for start in STARTS:
        color = _STYLE[start][0]
        ax_err.plot(alpha, th[start]["test_loss"], "-.", lw=1, color=color, label=f"theory, {start}")
    ax_ov.plot(alpha, th["semantic"]["theta"], "-.", lw=1, color=_STYLE["semantic"][0], label="θ, theory")
    ax_ov.plot(alpha, th["positional"]["m"], "-.", lw=1, color=_STYLE["positional"][0], label="m, theory")
    ax_obj.plot(alpha, th["difference"], "-.", lw=1, color="C2", label="theory, semantic − positional")
    if np.isfinite(th["crossing"]):
        label = f"theory's α_c = {th['crossing']:.3g}"
        ax_obj.axvline(th["crossing"], color="C2", ls="-.", lw=0.8, label=label)
