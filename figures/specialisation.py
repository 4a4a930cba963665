"""The head-specialisation figures (``dynamics.experiments.specialisation``), from saved results.

- ``plot_specialisation``: one row per activation (erf, softmax, softmax1) of one trial: a panel
  per feature f with |cos(k_h, k*_f)| over the logged steps, one colour per head (the threshold
  dashed); ‖U_h‖ per head; the test loss. The step at which each feature was taken is marked
  in its panel: dotted from the onset (|cos| ≥ 0.5 to the end), dashed once held (≥ 0.9); the
  loss panel marks the onsets, labelled f0, f1, …. Each row's
  title says how many trials ended with every feature held by a head of its own.
- ``plot_specialisation_grid``: a ``specialisation-grid`` result as heatmaps over H − F (rows) ×
  activation (columns), one pair per step η₀: the share of trials whose F features are each held
  by a head of its own at the end, and the final excess risk (mean over trials).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from dynamics.experiments import specialisation as spec
from figures.heads import head_palette
from figures.sweep import save_figure
from figures.theme import flare, set_theme

FEATURE_MARK = "0.3"


def _trial(summary: dict, trial: int | None) -> int:
    """The trial drawn: ``trial``, or the first whose features were all held under softmax."""
    if trial is not None:
        return int(trial)
    runs = summary.get("softmax", {}).get("runs", [])
    return next((r["trial"] for r in runs if r["holds_all"]), 0)


def _time(ax, steps: np.ndarray) -> None:
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(0, steps[-1])
    ax.set_xlabel("iteration t")


def _row(axes, act: str, meta: dict, arrays: dict, run: dict, threshold: float) -> None:
    """One activation's row of panels (module docstring)."""
    steps = np.asarray(arrays["steps"])
    view = np.asarray(arrays.get("head_steps", steps))  # the per-head curves' own steps
    F = spec.feature_count(meta["config"])
    H = int(run["heads"])
    cos = spec._cos_features(arrays, list(meta["directions"]), F)[0, run["trial"], :, :H]  # (L, H, F)
    colors = head_palette(H)
    taken = {t["feature"]: t for t in run["takeovers"]}
    for f in range(F):
        ax = axes[f]
        for h in range(H):
            ax.plot(view, cos[:, h, f], color=colors[h], lw=1.4, label=f"head {h}")
        ax.axhline(threshold, color="0.6", ls="--", lw=0.8)
        if taken[f]["step"] is not None:
            ax.axvline(taken[f]["onset"], color=FEATURE_MARK, ls=":", lw=1.2)
            ax.axvline(taken[f]["step"], color=FEATURE_MARK, ls="--", lw=0.9)
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"|cos(k_h, k*_{f})|, c = {meta['config']['data']['strengths'][f]:g}", fontsize=9)
        _time(ax, steps)
    u = np.asarray(arrays["head_u_norm"])[0, run["trial"], :, :H]
    for h in range(H):
        axes[F].plot(view, u[:, h], color=colors[h], lw=1.4)
    axes[F].set_title("‖U_h‖", fontsize=9)
    _time(axes[F], steps)
    loss = np.asarray(arrays["test_loss"])[0, run["trial"]]
    axes[F + 1].plot(steps, loss, color="k", lw=1.4)
    axes[F + 1].set_yscale("log")
    for f, t in taken.items():
        if t["step"] is not None:
            axes[F + 1].axvline(t["onset"], color=FEATURE_MARK, ls=":", lw=1.2)
            axes[F + 1].annotate(f"f{f}", (t["onset"], 1.0), xycoords=("data", "axes fraction"),
                                 ha="left", va="top", fontsize=8)  # fmt: skip
    axes[F + 1].set_title(f"test MSE (floor ε² = {meta['config']['data']['epsilon'] ** 2:g})", fontsize=9)
    # the row's activation on its left, not in every title (four titles of a row overlapped)
    axes[0].set_ylabel(act, fontsize=11, fontweight="bold")
    _time(axes[F + 1], steps)


def specialisation_figure(results_dir, trial: int | None = None):
    """The figure of the module docstring (a matplotlib Figure)."""
    set_theme()
    meta, runs = spec.load(results_dir)
    trial = _trial(meta["summary"], trial)
    F = spec.feature_count(next(iter(runs.values()))[0]["config"])
    acts = meta["activations"]
    fig, grid = plt.subplots(len(acts), F + 2, figsize=(3.3 * (F + 2), 2.9 * len(acts)),
                             constrained_layout=True, squeeze=False)  # fmt: skip
    for r, act in enumerate(acts):
        sub, (m, arrays) = meta["summary"][act], runs[act]
        run = next(x for x in sub["runs"] if x["trial"] == trial)
        _row(grid[r], act, m, arrays, run, meta["threshold"])
        c = m["config"]
        note = f"η = {c['optim']['lr']:g}; all held in {sub['held_all']}/{sub['n_runs']} trials"
        grid[r, 0].text(0.02, 0.97, note,
                        transform=grid[r, 0].transAxes, va="top", fontsize=8)  # fmt: skip
    grid[0, 0].legend(fontsize=7, loc="center left")
    c = next(iter(runs.values()))[0]["config"]
    fig.suptitle(
        f"head specialisation, multi-location (F = {F}, d = {c['data']['d']}, T = {c['data']['T']}), "
        f"H = {c['sweep']['heads'][0]} learned queries, online SGD B = {c['optim']['batch_size']}, "
        f"β = {c['model'].get('temperature', 1.0):g}, σ₀ = {c['model']['init_scale']:g}; trial {trial}\n"
        f"feature f taken: dotted at |cos| ≥ {meta['onset']:g}, dashed at |cos| ≥ {meta['threshold']:g} "
        f"(held), each from then on; dashed grey: {meta['threshold']:g}"
    )
    return fig


def plot_specialisation(results_dir, stem, *, trial: int | None = None) -> list[Path]:
    return save_figure(specialisation_figure(results_dir, trial), stem)


def plot_specialisation_grid(results_dir, stem) -> list[Path]:
    """Heatmaps over H − F × activation per step η₀ (module docstring)."""
    from figures.phase import grid_data

    set_theme()
    meta, curves = grid_data(results_dir)
    held, _ = spec.held_fraction(meta, curves)  # (nH, *grid)
    axes_names = meta["grid"]["axes"]
    acts = list(np.asarray(curves["attention"]))
    lrs = np.asarray(curves["lr"]) if "lr" in axes_names else np.array([meta["config"]["optim"]["lr"]])
    if "lr" not in axes_names:
        held = held[..., None]
    if axes_names[0] != "attention":
        held = np.swapaxes(held, 1, 2)
    final = np.asarray(curves["excess_risk"])[..., -1]
    n = np.isfinite(final).sum(axis=-1)  # a cell whose trials all diverged: NaN, drawn "div."
    risk = (np.where(n > 0, np.nansum(final, axis=-1) / np.maximum(n, 1), np.nan)).reshape(held.shape)
    F = spec.feature_count(meta["config"])
    heads = np.asarray(curves["heads"])
    fig, grid = plt.subplots(
        2, len(lrs), figsize=(4.2 * len(lrs), 6.4), constrained_layout=True, squeeze=False
    )
    for j, lr in enumerate(lrs):
        for i, (table, title, cmap, vmax) in enumerate(
            (
                (held[:, :, j], "all F features held", "viridis", 1.0),
                (risk[:, :, j], "final excess risk", None, None),
            )
        ):
            ax = grid[i, j]
            im = ax.imshow(table, cmap=cmap or flare(), vmin=0, vmax=vmax, aspect="auto", origin="lower")
            for (r, c), v in np.ndenumerate(table):
                ax.text(
                    c, r, "div." if not np.isfinite(v) else f"{v:.2g}", ha="center", va="center", fontsize=8
                )
            ax.grid(False)
            ax.set_xticks(range(len(acts)), acts)
            ax.set_yticks(range(len(heads)), [f"{h - F:+d}" for h in heads])
            ax.set_ylabel("H − F")
            ax.set_title(f"η₀ = {lr:g}: {title}", fontsize=10)
            fig.colorbar(im, ax=ax, shrink=0.8)
    c = meta["config"]
    trials = np.asarray(curves["diverged_at"]).shape[-1]
    fig.suptitle(
        f"specialisation grid: F = {F}, d = {c['data']['d']}, {c['optim']['steps']} steps, "
        f"{trials} trials per cell"
    )
    return save_figure(fig, stem)


def result_figure(result, trial: int = 0):
    """One run of a ``SweepResult`` of the preset (any activation, F, H): the row of panels of
    ``plot_specialisation`` and its summary (``spec.summarise``'s row: takeovers, idle heads)."""
    set_theme()
    cfg = result.config.to_dict()
    meta = {"config": cfg, "directions": result.extra.get("directions") or []}
    run = next(r for r in spec.summarise(result)["runs"] if r["trial"] == trial)
    F = spec.feature_count(cfg)
    fig, axes = plt.subplots(1, F + 2, figsize=(3.3 * (F + 2), 3.1), constrained_layout=True)
    _row(
        axes,
        cfg["model"].get("attention", "softmax"),
        meta,
        {"steps": result.steps, **result.curves},
        run,
        spec.THRESHOLD,
    )
    axes[0].legend(fontsize=7, loc="center left")
    return fig, run


def plot_result(result, stem: str | Path, trial: int = 0) -> list[Path]:
    """``result_figure(result, trial)`` titled with the run's headline (the runs whose features are
    each held by a head of their own), saved as ``stem``.png and .pdf: a specialisation sweep's own
    figure on the command line (``figures.own``)."""
    fig, _ = result_figure(result, trial)
    found = result.headline().get("held_all") or spec.headline(result)["held_all"]
    cfg = result.config
    fig.suptitle(
        f"{cfg.name}: H = {int(result.heads[0])}, {cfg.model.attention}, trial {trial}; "
        f"all features held in {found['value']} of {found['n']} runs",
        fontsize="medium",
    )
    return save_figure(fig, stem)
