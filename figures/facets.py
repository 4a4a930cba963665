"""What more heads do on a grid over two knobs: one heatmap per H, a row per logged metric with one
colour scale across its H panels, and beside them

- the *gain from heads*: final test loss at the largest H over that at the smallest, per cell, on a
  log colour scale centred at 1 (blue, < 1: heads help; red: they hurt), the ratio written in
  each cell;
- with η₀ a plotted knob: the best η₀ per H (lowest final test loss among the cells where no
  trial diverged), one line per value of the other plotted knob.

Drawn by ``figures.phase.plot_grid`` (which chooses the knobs and the fixed values named in the title).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import NullLocator

from figures.gridtables import (
    OUTLINE,
    TITLES,
    GridTables,
    best_columns,
    cell_legend,
    color_norm,
    describe_grid,
    fixed_text,
    heatmap,
    label,
    runs_text,
    set_cell_ticks,
    ticks,
)
from figures.sweep import save_figure
from figures.theme import flare, set_theme

ROWS = ("test_loss", "train_loss", "test_error", "train_error", "excess_risk")  # those logged, in order
GAIN_CMAP = "RdBu_r"  # low (heads help) blue, high (heads hurt) red


def plot_facets(
    meta: dict, t: GridTables, axes: tuple[str, str], fixed: dict[str, int], stem, scales: dict | None = None
) -> list[Path]:
    """``facets_figure`` saved as ``stem``.png and .pdf."""
    return save_figure(facets_figure(meta, t, axes, fixed, scales), Path(stem))


def facets_figure(
    meta: dict, t: GridTables, axes: tuple[str, str], fixed: dict[str, int], scales: dict | None = None
) -> Figure:
    """Columns: one per H, then the gain and best-η₀ panels; rows: the logged metrics (module
    docstring). ``axes`` = (horizontal knob, vertical knob); ``fixed``: the other knobs' indices;
    ``scales``: a colour scale per metric shared with other figures (else each row's own)."""
    set_theme()
    x, y = axes
    final, n_div = t.take(["heads", y, x], fixed)  # (H, rows = y, columns = x)
    heads = t.values_of("heads")
    metrics = [m for m in ROWS if m in final]
    rows, n_h = max(len(metrics), 2), len(heads)
    fig, grid = plt.subplots(
        rows, n_h + 1, figsize=(2.7 * n_h + 4.2, 2.6 * rows + 1.4), layout="constrained", squeeze=False
    )
    best_line = x == "lr" and "test_loss" in final
    for r, metric in enumerate(metrics):
        norm = (scales or {}).get(metric) or color_norm(list(final[metric]), not metric.endswith("error"))
        _metric_row(fig, grid[r, :n_h], final[metric], n_div, t, axes, metric, best_line, norm)
        if r < len(metrics) - 1:
            for ax in grid[r, :n_h]:
                ax.set_xlabel("")
    for ax in [*grid[len(metrics) :, :n_h].flat, *grid[2:, n_h]]:
        ax.set_axis_off()
    if "test_loss" in final:
        _gain(fig, grid[0, n_h], final["test_loss"], n_div, t, axes)
    else:
        grid[0, n_h].set_axis_off()
    if "lr" in axes and "test_loss" in final:
        _best_lr(grid[1, n_h], final["test_loss"], n_div, t, axes)
    else:
        grid[1, n_h].set_axis_off()
    handles = cell_legend(n_div, t.trials, best_line)
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=9, frameon=False)
    note = fixed_text(t, fixed)
    fig.suptitle(
        f"{describe_grid(meta, t, fixed)}; {runs_text(meta, t)}\n"
        f"one panel per H, colour scale shared across H; {label(y)} × {label(x)}"
        f"{'; fixed: ' + note if note else ''}",
        wrap=True,  # to the figure's width: a user data model's description may be long
    )
    return fig


def _metric_row(fig, axs, table, n_div, t: GridTables, axes, metric: str, best_line: bool, norm) -> None:
    """One metric: a heatmap per H in one colour scale ``norm``, its colorbar; the best η₀ per row
    as a white line on the test loss's panels (η₀ horizontal)."""
    x, y = axes
    for i, (ax, h) in enumerate(zip(axs, t.values_of("heads"), strict=True)):
        im = heatmap(ax, table[i], n_div[i], t.trials, norm)
        set_cell_ticks(ax, t.values_of(x), t.values_of(y), x, y, y_labels=i == 0)
        ax.set_title(f"H = {h}: {TITLES[metric].removeprefix('final ')}", fontsize=10)
        if best_line and metric == "test_loss":
            best = best_columns(table[i], n_div[i])
            r = np.nonzero(best >= 0)[0]
            ax.plot(best[r], r, "-o", color="white", lw=1.8, ms=4, mec="k", path_effects=OUTLINE)
    cbar = fig.colorbar(im, ax=list(axs), shrink=0.9, pad=0.01, aspect=15)
    cbar.set_label(TITLES[metric], fontsize=9)


def _gain(fig, ax, loss: np.ndarray, n_div: np.ndarray, t: GridTables, axes) -> None:
    """Test loss at the largest H over that at the smallest, per cell: log colours centred at 1."""
    x, y = axes
    heads = t.values_of("heads")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = loss[-1] / loss[0]
    ratio = np.where(np.isfinite(ratio) & (ratio > 0), ratio, np.nan)
    lost = (n_div[-1] >= t.trials) | (n_div[0] >= t.trials)  # either end had no trial left
    marks = np.where(lost, t.trials, np.where((n_div[-1] > 0) | (n_div[0] > 0), 1, 0))
    logs = np.abs(np.log10(ratio[np.isfinite(ratio)]))
    span = max(float(logs.max()) if logs.size else 1.0, 0.05)
    norm = LogNorm(10**-span, 10**span)
    im = heatmap(ax, ratio, marks, t.trials, norm, cmap=mpl.colormaps[GAIN_CMAP])
    set_cell_ticks(ax, t.values_of(x), t.values_of(y), x, y)
    if ratio.size <= 120:
        for r, c in zip(*np.nonzero(np.isfinite(ratio)), strict=True):
            strong = abs(np.log10(ratio[r, c])) > 0.6 * span
            ax.text(c, r, f"{ratio[r, c]:.2g}", ha="center", va="center", fontsize=7,
                    color="white" if strong else "black")  # fmt: skip
    cbar = fig.colorbar(im, ax=ax, shrink=0.9, pad=0.01, aspect=15)
    step = 2.0 ** max(1, int(np.ceil(span / np.log10(2) / 3)))  # about three ticks each side of 1
    marks = step ** np.arange(-3, 4)
    marks = marks[(marks >= norm.vmin) & (marks <= norm.vmax)]
    if len(marks) < 3:  # a narrow range: its ends and 1
        marks = np.array([norm.vmin, 1.0, norm.vmax])
    cbar.set_ticks(marks, labels=[f"{v:.3g}" for v in marks])
    cbar.ax.yaxis.set_minor_locator(NullLocator())
    cbar.set_label("< 1: heads help", fontsize=9)
    ax.set_title(f"gain from heads: test loss\nH = {heads[-1]} over H = {heads[0]}", fontsize=10)


def _best_lr(ax, loss: np.ndarray, n_div: np.ndarray, t: GridTables, axes) -> None:
    """Per H, the η₀ of the lowest final test loss among cells without divergence, a line per
    value of the other plotted knob (slightly apart along H, so equal lines stay visible)."""
    x, y = axes
    other = y if x == "lr" else x
    if x != "lr":  # η₀ vertical: put it last, as best_columns reads it
        loss, n_div = np.swapaxes(loss, 1, 2), np.swapaxes(n_div, 1, 2)
    heads, lrs, values = t.values_of("heads"), t.values_of("lr"), t.values_of(other)
    colors = flare()(np.linspace(0.1, 0.95, len(values)))
    markers = "osD^v<>p"
    for j, value in enumerate(values):
        best = np.array([best_columns(loss[i], n_div[i])[j] for i in range(len(heads))])
        ok = best >= 0
        shift = 2.0 ** (0.08 * (j - (len(values) - 1) / 2))
        ax.plot(heads[ok] * shift, lrs[best[ok]], "-", marker=markers[j % len(markers)], ms=4,
                color=colors[j], label=f"{label(other)} = {ticks([value])[0]}")  # fmt: skip
    if heads.min() > 0 and heads.max() / heads.min() >= 4:
        ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylim(lrs.min() / 1.6, lrs.max() * 1.6)
    ax.set_xticks(heads, [str(h) for h in heads])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel("H")
    ax.set_ylabel("best η₀")
    ax.set_title("best η₀ per H (test loss)", fontsize=10)
    if len(values) <= 8:
        ax.legend(fontsize=7, frameon=False)
