"""The positional-semantic figures beyond the two fixed starts at one ω
(``dynamics.experiments.positional_extras``), drawn from grid folders:

- ``positional-semantic-phase``: the phase diagram over α = n/d × ω (or any second knob): the
  paired difference of the final objectives, semantic − positional (blue: the semantic start is
  the global minimiser, red: the positional), each cell lettered S or P, the crossing α of each
  row marked; beside it the crossing α against the knob.
- ``positional-semantic-random``: the random start's overlaps m = ‖Qᵀ1‖/d and θ = ‖Qᵀq*‖/d, where
  Q's singular directions point (|cos| with q* and with 1_d) and its test error against α.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import TwoSlopeNorm

from dynamics.api import load_results
from dynamics.experiments.positional_extras import phase, random_start
from figures.sweep import save_figure
from figures.theme import set_theme


def plot_phase(results_dir: Path, stem: Path) -> list[Path]:
    """The phase diagram of a ``positional-semantic-phase`` grid folder: ``stem``.png and .pdf."""
    return save_figure(phase_figure(load_results(results_dir)), stem)


def plot_random(results_dir: Path, stem: Path) -> list[Path]:
    """The figure of a ``positional-semantic-random`` grid folder: ``stem``.png and .pdf."""
    return save_figure(random_figure(load_results(results_dir)), stem)


def _setting(cfg, *, knob: str | None = None) -> str:
    o = cfg.optim
    shown = [f"d = {cfg.data.d}"]
    shown += [f"σ = {cfg.data.semantic_noise:g}"] if knob != "semantic_noise" else []
    shown += [f"ω = {cfg.data.omega:g}"] if knob != "omega" else []
    shown += [f"{o.optimizer} η = {o.lr:g}", f"{o.steps} steps", f"λ = {o.weight_decay:g}"]
    return ", ".join(shown)


def phase_figure(result):
    """The phase diagram of a grid result over n_train × one knob × the two fixed starts with the
    objective in its curves (``positional_extras.run``'s, or loaded)."""
    p = phase(result)
    alpha, values, diff = p["alpha"], p["values"], p["difference"]  # diff (A, K)
    set_theme()
    fig, (ax, ax_c) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.6, 1]})
    bound = float(np.nanmax(np.abs(diff))) or 1.0
    norm = TwoSlopeNorm(0.0, -bound, bound)
    mesh = ax.imshow(diff.T, origin="lower", cmap="RdBu_r", norm=norm, aspect="auto")
    fig.colorbar(mesh, ax=ax, label="objective: semantic − positional")
    for a in range(len(alpha)):
        for k in range(len(values)):
            color = "white" if abs(diff[a, k]) > 0.6 * bound else "black"  # legible on dark cells
            ax.text(
                a, k, "S" if p["better"][a, k] == "semantic" else "P", ha="center", va="center", color=color
            )
    for k, cross in enumerate(p["crossing"]):  # the crossing α in the cells' index units
        if np.isfinite(cross):
            x = np.interp(cross, alpha, np.arange(len(alpha)))
            ax.plot([x, x], [k - 0.5, k + 0.5], color="k", lw=2)
    ax.grid(False)
    ax.set_xticks(range(len(alpha)), [f"{a:g}" for a in alpha])
    ax.set_yticks(range(len(values)), [f"{v:g}" for v in values])
    ax.set_xlabel("α = n / d")
    ax.set_ylabel(p["knob"])
    ax.set_title("global minimiser: S semantic, P positional; | the crossing")
    finite = np.isfinite(p["crossing"])
    ax_c.plot(values[finite], p["crossing"][finite], "-o", color="k")
    ax_c.set_xlabel(p["knob"])
    ax_c.set_ylabel("crossing α (objectives equal)")
    ax_c.set_title("the crossing against " + p["knob"])
    trials = result.curves["test_loss"].shape[-2]
    cfg = result.config.resolved()
    fig.suptitle(
        f"positional vs semantic phase diagram: {_setting(cfg, knob=p['knob'])};\n"
        f"the last step, mean over {trials} paired trials",
        fontsize=10,
    )
    fig.tight_layout()
    return fig


def random_figure(result):
    """m, θ, the singular directions' cosines and the test error of a random-start grid result over
    α (``positional_extras.run``'s)."""
    r = random_start(result)
    alpha = r["alpha"]
    set_theme()
    fig, (ax_ov, ax_dir, ax_err) = plt.subplots(1, 3, figsize=(14, 4))
    for name, color, text in (("theta", "C3", "θ = ‖Qᵀq*‖/d"), ("m", "C0", "m = ‖Qᵀ1‖/d")):
        ax_ov.errorbar(alpha, r[name], r[f"{name}_std"], fmt="-o", color=color, capsize=3, label=text)
    for k in range(r["rank"]):  # each singular direction of Q, largest first
        ax_dir.plot(alpha, r["cos_semantic"][:, k], "-o", color="C3", alpha=1 - 0.5 * k, label=f"u{k + 1}·q̂*")
        ax_dir.plot(
            alpha, r["cos_positional"][:, k], "--s", color="C0", alpha=1 - 0.5 * k, label=f"u{k + 1}·1̂"
        )
    ax_dir.set_title("|cos| of Q's singular directions")
    ax_dir.legend(fontsize=8)
    ax_err.errorbar(alpha, r["test_loss"], r["test_loss_std"], fmt="-o", color="C2", capsize=3)
    ax_ov.set_title(f"overlaps of the rank-{r['rank']} Q")
    ax_ov.legend(fontsize=8)
    ax_err.set_title("test error  Σ‖y − f(X)‖² / (2d n_test)")
    for ax in (ax_ov, ax_dir, ax_err):
        ax.set_xlabel("α = n / d")
    cfg = result.config.resolved()
    trials = result.curves["test_loss"].shape[-2]
    fig.suptitle(
        f"positional vs semantic from a random start N(0, {cfg.model.init_scale:g}²/d), rank "
        f"{r['rank']}:\n{_setting(cfg)}; the last step, mean ± std over {trials} trials",
        fontsize=10,
    )
    fig.tight_layout()
    return fig
