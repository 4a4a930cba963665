"""Figures of a grid (``dynamics.config.grid``), drawn from its saved result files only.

- Two varying knobs (e.g. H × η₀): a *phase diagram*, heatmaps of the final train and test
  loss and error over the two knobs (mean over the trials that did not diverge). A cell
  with diverged trials is marked × (all of them: a grey cell); with H as a knob, the best
  step size per H (lowest final test loss among cells where no trial diverged) is drawn as
  a line when the other knob is η₀. More than two varying knobs: the last two, the others
  at their first value.
- One varying knob other than H: the final metrics against that knob, a line per H
  (also drawn, as ``<stem>-lines``, next to an H × knob phase diagram).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm, Normalize
from matplotlib.ticker import NullLocator

from dynamics.sweeps.results import load_results
from figures.sweep import DIVERGED_COLOR, describe, head_colors, save_figure
from figures.theme import flare, set_theme

PANELS = (
    ("train_loss", "final train loss"),
    ("test_loss", "final test loss"),
    ("train_error", "final train error"),
    ("test_error", "final test error"),
)
LABELS = {"heads": "H", "lr": "η₀", "init_scale": "σ₀", "n_train": "n (train)", "noise": "σ", "zeta": "ζ"}


def grid_tables(meta: dict, curves: dict) -> tuple[list[str], list[np.ndarray], dict, np.ndarray]:
    """(axis names, axis values, metric -> final mean (H, *grid), number diverged (H, *grid))."""
    names = ["heads", *meta["grid"]["axes"]]
    values = [np.asarray(curves["heads"])] + [np.asarray(curves[n]) for n in meta["grid"]["axes"]]
    ok = np.asarray(curves["diverged_at"]) < 0  # (H, *grid, trials)
    final = {}
    for metric, _ in PANELS:
        v = np.asarray(curves[metric])[..., -1]  # (H, *grid, trials)
        keep = ok & np.isfinite(v)
        n = keep.sum(axis=-1)
        final[metric] = np.where(n > 0, np.where(keep, v, 0.0).sum(axis=-1) / np.maximum(n, 1), np.nan)
    return names, values, final, (~ok).sum(axis=-1)


def _reduce(names, values, final, n_div, keep: list[int]):
    """Keep the axes ``keep`` (in order), the others at their first value."""
    idx = tuple(slice(None) if a in keep else 0 for a in range(len(names)))
    return (
        [names[a] for a in keep],
        [values[a] for a in keep],
        {k: v[idx] for k, v in final.items()},
        n_div[idx],
    )


def _describe(meta: dict) -> str:
    """The sweep's description, with the step size named as a knob when it is one."""
    text = describe(meta["config"])
    if "lr" in meta["grid"]["axes"]:
        text = text.replace(f"η = {meta['config']['optim']['lr']:g}", "η = η₀")
    if "n_train" in meta["grid"]["axes"]:
        text = text.replace(f"n = {meta['config']['data']['n_train']} train", "n = grid train")
    return text


def _ticks(vals: np.ndarray) -> list[str]:
    return [f"{v:.3g}" for v in vals]


def best_columns(test_loss: np.ndarray, n_div: np.ndarray) -> np.ndarray:
    """Per row, the column of the lowest final test loss among cells without divergence (-1: none)."""
    masked = np.where((n_div == 0) & np.isfinite(test_loss), test_loss, np.inf)
    best = np.argmin(masked, axis=1)
    return np.where(np.isfinite(masked.min(axis=1)), best, -1)


def _heatmap(ax, fig, table: np.ndarray, n_div: np.ndarray, log: bool, title: str) -> None:
    """One panel: rows = first knob (bottom to top), columns = second; diverged cells marked."""
    finite = table[np.isfinite(table)]
    positive = finite[finite > 0]
    if log and positive.size:
        norm = LogNorm(positive.min(), max(positive.max(), positive.min() * 1.001))
    else:
        lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
        norm = Normalize(lo, max(hi, lo + 0.01))  # a constant panel (no errors anywhere) still maps
    cmap = flare().copy()
    cmap.set_bad("0.8")
    shown = np.where(np.isfinite(table) & ((table > 0) | (not log)), table, np.nan)
    im = ax.imshow(np.ma.masked_invalid(shown), origin="lower", aspect="auto", cmap=cmap, norm=norm)
    rows, cols = np.nonzero(n_div > 0)
    ax.scatter(cols, rows, marker="x", s=28, color=DIVERGED_COLOR, linewidths=1.2, label="diverged trials")
    fig.colorbar(im, ax=ax, shrink=0.85)
    ax.set_title(title)


def plot_phase(meta, names, values, final, n_div, stem) -> list[Path]:
    """The 2×2 phase diagram over two knobs (rows: names[0], columns: names[1])."""
    set_theme()
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), constrained_layout=True)
    step_knob = names[0] == "heads" and names[1] == "lr"  # the best step size per H, as a line
    best = best_columns(final["test_loss"], n_div) if step_knob else None
    for ax, (metric, title) in zip(axes.flat, PANELS, strict=True):
        _heatmap(ax, fig, final[metric], n_div, metric.endswith("loss"), title)
        ax.set_xticks(range(len(values[1])), _ticks(values[1]), rotation=60, fontsize=7)
        ax.set_yticks(range(len(values[0])), _ticks(values[0]), fontsize=8)
        ax.set_xlabel(LABELS.get(names[1], names[1]))
        ax.set_ylabel(LABELS.get(names[0], names[0]))
        ax.grid(False)
        if best is not None and (best >= 0).any():
            rows = np.nonzero(best >= 0)[0]
            ax.plot(
                best[rows], rows, "-o", color="white", lw=1.8, ms=4, mec="k", label="best per H (test loss)"
            )
    axes.flat[0].legend(loc="upper left", fontsize=7, framealpha=0.8)
    fig.suptitle(
        f"{_describe(meta)}; grid {' × '.join(LABELS.get(n, n) for n in names)}, "
        f"{meta['config']['sweep']['trials']} trials, {meta['config']['optim']['steps']} steps"
    )
    return save_figure(fig, stem)


def plot_lines(meta, knob: str, heads: np.ndarray, x: np.ndarray, final, n_div, stem) -> list[Path]:
    """Final metrics against one knob, a line per H (rows of the tables: H), diverged × on the axis."""
    set_theme()
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.8), constrained_layout=True)
    cmap, norm = head_colors(heads)
    for ax, (metric, title) in zip(axes, PANELS, strict=True):
        for i, h in enumerate(heads):
            ax.plot(x, final[metric][i], "-o", ms=3, color=cmap(norm(h)), label=f"H = {h}")
            bad = n_div[i] > 0
            if bad.any():  # on the bottom of the panel, in the line's colour's place
                low = np.nanmin(final[metric]) if np.isfinite(final[metric]).any() else 0.0
                ax.scatter(x[bad], np.full(bad.sum(), low), marker="x", color=DIVERGED_COLOR, zorder=3)
        if np.all(x > 0) and x.max() / x.min() >= 10:
            ax.set_xscale("log")
        if len(x) <= 8:  # few values: label each one, no log minor labels over them
            ax.set_xticks(x, _ticks(x))
            ax.xaxis.set_minor_locator(NullLocator())
        if metric.endswith("loss") and np.nanmin(final[metric], initial=np.inf) > 0:
            ax.set_yscale("log")
        ax.set_xlabel(LABELS.get(knob, knob))
        ax.set_title(title)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{_describe(meta)}; × = diverged trials")
    return save_figure(fig, stem)


def plot_grid(results_dir: str | Path, stem: str | Path) -> list[Path]:
    """The grid's figures: a phase diagram for two varying knobs, lines for one knob but H."""
    meta, curves = load_results(Path(results_dir))
    names, values, final, n_div = grid_tables(meta, curves)
    varying = [a for a in range(len(names)) if len(values[a]) > 1]
    stem = Path(stem)
    paths: list[Path] = []
    if len(varying) >= 2:
        paths += plot_phase(meta, *_reduce(names, values, final, n_div, varying[-2:]), stem)
    knobs = [a for a in varying if a != 0]
    if len(knobs) == 1:
        n, v, f, d = _reduce(names, values, final, n_div, [0, knobs[0]])
        lines = stem if len(varying) == 1 else stem.with_name(stem.name + "-lines")
        paths += plot_lines(meta, n[1], v[0], v[1], f, d, lines)
    return paths
