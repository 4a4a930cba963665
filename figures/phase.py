"""Figures of a grid (``dynamics.config.grid_axes``), drawn from its saved result files (or a GridResult).

The plotted knobs are ``axes`` (horizontal first; ``"heads"`` or ``"H"`` is H), the other knobs
each at one value (``at={"noise": 1.0}``, else their first), every fixed value named in the title:

- Two knobs, neither H, with several H: one heatmap per H and metric, a colour scale shared by
  the panels of a metric, the *gain from heads* (final test loss at the largest H over that at the
  smallest, log colour centred at 1: < 1 = heads help) and, with η₀ as a plotted knob, the best η₀
  per H as a small line plot (``figures.facets``).
- Two knobs, one of them H (or one H value): a heatmap per metric; with η₀ horizontal the best η₀
  per row (lowest final test loss among cells where no trial diverged) is a white line.
- One knob: the final metrics against it, a line per H.

Cells where every trial diverged are hatched, cells where some did carry ×; both are named in the
legend with their counts. Without ``axes``: η₀ (when it varies) and the last other varying numeric
knob, H as the rows when it is the only other one (then also the lines, as ``<stem>-lines``). Only
the metrics the run logged are drawn (a regression run has no error).

A categorical knob (the optimiser, the loss, the data model, …) with several names that is neither
plotted nor fixed by ``at`` is faceted: one set of files per name, ``<stem>-<knob>-<name>`` (two
such knobs: per pair of names), every metric on one colour scale across them (and the line plots
on one vertical range), the name in the title.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullLocator

from dynamics.sweeps.result_files import load_results, read_folder
from figures.facets import plot_facets
from figures.gridtables import (  # noqa: F401  (best_columns, grid_tables: figures.phase's since the start)
    OUTLINE,
    PANELS,
    TITLES,
    GridTables,
    best_columns,
    cell_legend,
    choose_axes,
    color_norm,
    describe_grid,
    fixed_indices,
    fixed_text,
    grid_tables,
    heatmap,
    knob,
    label,
    log_scaled,
    runs_text,
    set_cell_ticks,
    shared_scales,
    ticks,
)
from figures.sweep import DIVERGED_COLOR, head_colors, save_figure
from figures.theme import set_theme


def plot_phase(
    meta, t: GridTables, axes: tuple[str, str], fixed: dict[str, int], stem, scales: dict | None = None
) -> list[Path]:
    """A heatmap per logged metric over two knobs (columns: axes[0], rows: axes[1]); ``scales``:
    a colour scale per metric shared with other figures (``shared_scales``), else its own."""
    set_theme()
    x, y = axes
    final, n_div = t.take([y, x], fixed)
    metrics = [m for m, _ in PANELS if m in final]
    rows = (len(metrics) + 1) // 2
    fig, grid = plt.subplots(rows, 2, figsize=(11, 4 * rows), constrained_layout=True, squeeze=False)
    best = best_columns(final["test_loss"], n_div) if x == "lr" and "test_loss" in final else None
    for ax, metric in zip(grid.flat, metrics, strict=False):
        norm = (scales or {}).get(metric) or color_norm([final[metric]], log_scaled(metric))
        im = heatmap(ax, final[metric], n_div, t.trials, norm)
        fig.colorbar(im, ax=ax, shrink=0.85)
        ax.set_title(TITLES[metric])
        set_cell_ticks(ax, t.values_of(x), t.values_of(y), x, y)
        if best is not None and (best >= 0).any():
            r = np.nonzero(best >= 0)[0]
            ax.plot(best[r], r, "-o", color="white", lw=1.8, ms=4, mec="k", path_effects=OUTLINE)
    for ax in grid.flat[len(metrics) :]:
        ax.set_axis_off()
    handles = cell_legend(n_div, t.trials, best is not None)
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8, frameon=False)
    fixed_note = fixed_text(t, fixed)
    fig.suptitle(
        f"{describe_grid(meta, t, fixed)}; grid {label(y)} × {label(x)}"
        f"{'; fixed: ' + fixed_note if fixed_note else ''}; {runs_text(meta, t)}",
        wrap=True,  # to the figure's width: a categorical knob's name makes it long
    )
    return save_figure(fig, stem)


def plot_lines(
    meta, t: GridTables, along: str, fixed: dict[str, int], stem, scales: dict | None = None
) -> list[Path]:
    """Final metrics against one knob, a line per H, diverged × at the bottom of the panel;
    ``scales``: each metric's vertical range shared with other figures (``shared_scales``)."""
    set_theme()
    final, n_div = t.take(["heads", along], fixed)
    heads, x = t.values_of("heads"), t.values_of(along)
    names = None if np.issubdtype(x.dtype, np.number) else x  # a categorical knob: one place per name
    x = np.arange(len(x)) if names is not None else x
    metrics = [m for m, _ in PANELS if m in final]
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.8 * len(metrics), 3.8), constrained_layout=True)
    cmap, norm = head_colors(heads)
    for ax, metric in zip(np.atleast_1d(axes), metrics, strict=True):
        for i, h in enumerate(heads):
            ax.plot(x, final[metric][i], "-o", ms=3, color=cmap(norm(h)), label=f"H = {h}")
            bad = n_div[i] > 0
            if bad.any():  # on the bottom of the panel, in the line's colour's place
                low = np.nanmin(final[metric]) if np.isfinite(final[metric]).any() else 0.0
                ax.scatter(x[bad], np.full(bad.sum(), low), marker="x", color=DIVERGED_COLOR, zorder=3)
        if names is None and np.all(x > 0) and x.max() / x.min() >= 10:
            ax.set_xscale("log")
        if len(x) <= 8 or names is not None:  # few values: label each one, no log minor labels
            ax.set_xticks(x, ticks(x if names is None else names))
            ax.xaxis.set_minor_locator(NullLocator())
        if log_scaled(metric) and np.nanmin(final[metric], initial=np.inf) > 0:
            ax.set_yscale("log")
        shared = (scales or {}).get(metric)
        if shared is not None:
            _share_range(ax, shared.vmin, shared.vmax)
        ax.set_xlabel(label(along))
        ax.set_title(TITLES[metric])
    np.atleast_1d(axes)[0].legend(fontsize=7)
    fixed_note = fixed_text(t, {k: v for k, v in fixed.items() if k != "heads"})
    fig.suptitle(
        f"{describe_grid(meta, t, fixed)}{'; fixed: ' + fixed_note if fixed_note else ''}; "
        f"{runs_text(meta, t)}; × = diverged trials",
        wrap=True,
    )
    return save_figure(fig, stem)


def _share_range(ax, lo: float, hi: float) -> None:
    """The vertical range [lo, hi] with a margin (a factor on a log axis)."""
    if ax.get_yscale() == "log" and lo > 0:
        ax.set_ylim(lo / 1.25, hi * 1.25)
    else:
        pad = 0.05 * (hi - lo) or 0.05
        ax.set_ylim(lo - pad, hi + pad)


def grid_data(source) -> tuple[dict, dict]:
    """(meta, curves) of a grid: a results folder (or its results.json) or a ``GridResult``."""
    if hasattr(source, "grid") and hasattr(source, "curves") and hasattr(source, "diverged_at"):
        names = [n for n, _ in source.grid.axes]
        meta = {"config": source.config.to_dict(), "grid": {"axes": names}, **source.extra}
        coords = {"heads": source.heads, "steps": source.steps, "diverged_at": source.diverged_at}
        return meta, {**coords, **{n: np.array(v) for n, v in source.grid.axes}, **source.curves}
    path, _, kind = read_folder(source)
    if kind != "grid":
        raise ValueError(f"{str(path)!r} holds a {kind} result, not a grid")
    return load_results(path)


def plot_grid(results_dir, stem, *, axes=None, at=None) -> list[Path]:
    """The grid's figures as ``stem``.png/.pdf (module docstring); returns the written paths.

    ``axes``: the plotted knobs, horizontal first (``("lr", "n_train")``, ``"lr,n_train"``,
    ``("lr", "H")``, ``("noise",)``); ``at``: values of knobs not plotted (``{"noise": 1.0}``;
    ``{"H": 4}`` draws that H alone instead of one panel per H).
    """
    meta, curves = grid_data(results_dir)
    t = grid_tables(meta, curves)
    shown = choose_axes(t, axes)
    named = {knob(k, t.names, f"at={at!r}") for k in dict(at or {})}
    one_h = "heads" in named  # at={"H": 4}
    facet = len(shown) == 2 and "heads" not in shown and len(t.values_of("heads")) > 1 and not one_h
    keep = (*shown, "heads") if facet or len(shown) == 1 else shown
    split = [n for n in t.categorical() if n not in (*shown, *named) and len(t.values_of(n)) > 1]
    stem, ats = Path(stem), [dict(at or {})]
    if split:  # a set of files per name (per combination of names), on shared scales
        ats = [
            {**ats[0], **dict(zip(split, c, strict=True))}
            for c in itertools.product(*map(t.values_of, split))
        ]
    scales = shared_scales(t, list(keep), [fixed_indices(t, keep, a) for a in ats]) if split else None
    paths: list[Path] = []
    for a in ats:
        where = "".join(f"-{n}-{re.sub(r'[^A-Za-z0-9._]+', '_', str(a[n]))}" for n in split)
        paths += _draw(meta, t, shown, facet, axes is None, a, stem.with_name(stem.name + where), scales)
    return paths


def _draw(meta, t: GridTables, shown, facet: bool, default: bool, at, stem: Path, scales) -> list[Path]:
    """The figures of ``plot_grid`` at the fixed values ``at``, as ``stem``."""
    fixed = fixed_indices(t, (*shown, "heads") if facet or len(shown) == 1 else shown, at)
    if facet:
        return plot_facets(meta, t, shown, fixed, stem, scales)
    if len(shown) == 1:
        return plot_lines(meta, t, shown[0], fixed, stem, scales)
    paths = plot_phase(meta, t, shown, fixed, stem, scales)
    if default and "heads" in shown:  # H × one knob: the lines too
        along = shown[0] if shown[1] == "heads" else shown[1]
        lines = fixed_indices(t, (along, "heads"), at)
        paths += plot_lines(meta, t, along, lines, stem.with_name(stem.name + "-lines"), scales)
    return paths
