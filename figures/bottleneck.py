"""Figures of the low-rank bottleneck experiments, drawn from saved result files only.

``plot_expressivity`` reads ``results.json`` and ``expressivity.npz``, ``plot_bottleneck_heads``
reads ``results.json`` and ``heads.npz`` (as ``dynamics.experiments.bottleneck.write`` leaves them); both
write ``stem``.png and .pdf atomically through ``figures.sweep.save_figure``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from dynamics.sweeps.result_files import load_results, read_folder
from figures.sweep import DATA_LABEL, save_figure

FLOOR = 1e-12  # log-axis floor for errors that are exactly 0
TRACE_FLOOR = 1e-9  # float32 KL has rounding noise of about 1e-8 (it can even read < 0)
DPI = 110


def _source(source, npz_name: str) -> tuple[dict, dict]:
    """(results.json dict, arrays): ``source`` is a results folder or the experiment's run dict
    (``dynamics.experiments.bottleneck.run_expressivity`` / ``run_heads``: keys "results" and "arrays")."""
    kind = {"expressivity.npz": "bottleneck-expressivity", "heads.npz": "bottleneck-heads"}[npz_name]
    draw = {"bottleneck-expressivity": "expressivity_figure", "bottleneck-heads": "bottleneck_heads_figure"}
    if isinstance(source, dict):
        if set(source) != {"results", "arrays"} or not isinstance(source["results"], dict):
            raise ValueError("a run dict has the keys 'results' and 'arrays', as run_expressivity returns it")
        meta = source["results"]
        found = "bottleneck-heads" if "sweep_configs" in meta else meta.get("experiment", "another")
    else:
        if hasattr(source, "curves"):
            raise TypeError(f"{type(source).__name__} is a sweep's result: draw it with figures.sweep_figure")
        path, meta, found = read_folder(source)
    if found != kind:
        hint = f"; draw it with figures.{draw[found]}" if found in draw else ""
        what = "another kind of result" if found == "another" else f"a {found} run"
        raise ValueError(f"{draw[kind]} needs a {kind} run; this one is {what}{hint}")
    if isinstance(source, dict):
        return source["results"], source["arrays"]
    return load_results(path, npz_name)


def plot_expressivity(results_dir: str | Path, stem: str | Path) -> list[Path]:
    """``expressivity_figure(results_dir)`` saved as ``stem``.png and .pdf."""
    return save_figure(expressivity_figure(results_dir), stem, dpi=DPI)


def expressivity_figure(source) -> Figure:
    """Best attention-fit error vs head size d_h (one line per T, a line at d_h = T) and the
    loss traces of the best restarts around the threshold (a folder or a run dict; not closed)."""
    meta, arrays = _source(source, "expressivity.npz")
    sns.set_theme(context="notebook", style="whitegrid")
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6), layout="constrained")
    _plot_fit_errors(axes[0], meta, arrays)
    _plot_fit_traces(axes[1], meta, arrays)
    fig.suptitle(
        "Low-rank bottleneck: fitting one head's attention softmax(X Q Kᵀ Xᵀ), Q and K of size d × d_h"
    )
    return fig


def _plot_fit_errors(ax, meta: dict, arrays: dict[str, np.ndarray]) -> None:
    """Left: best error vs d_h per T (band: min–max over targets), d_h = T and the first fit."""
    cfg, rows = meta["config"], meta["summary"]
    palette = sns.color_palette("colorblind", len(rows))
    for row, color in zip(rows, palette, strict=True):
        T, d = row["T"], row["d"]
        sizes = arrays[f"T{T}_head_sizes"]
        best = np.maximum(arrays[f"T{T}_best_tv"], FLOOR)  # (n_a, M)
        ax.fill_between(sizes, best.min(axis=1), best.max(axis=1), color=color, alpha=0.2, lw=0)
        ax.plot(
            sizes,
            best.mean(axis=1),
            "o-",
            color=color,
            ms=4,
            label=f"T = {T}, d = {d} (Q, K: {2 * d}·d_h parameters)",
        )
        ax.axvline(T, color=color, ls="--", lw=1.2)
        if row["reached_at"] is not None:
            ax.axvline(row["reached_at"], color=color, ls=":", lw=1.2)
    ax.axhline(cfg["tol"], color="0.4", lw=0.8)
    ax.plot([], [], ls="--", color="0.4", label="d_h = T (the paper's sufficient head size)")
    ax.plot([], [], ls=":", color="0.4", label=f"first d_h with every target's error < {cfg['tol']:g}")
    ax.set_yscale("log")
    ax.set_xlabel("head size d_h")
    ax.set_ylabel("best mean-row total variation ½‖A − P‖₁")
    ax.set_title(
        f"{cfg['targets']} random targets per T, best of {cfg['restarts']} restarts "
        f"(band: min–max over targets)",
        fontsize=10,
    )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(frameon=True, fontsize=8, loc="upper right")


def _plot_fit_traces(ax, meta: dict, arrays: dict[str, np.ndarray]) -> None:
    """Right: are the errors below the threshold converged? Loss traces of the best restarts
    at the largest T, for d_h = T − 3 … T."""
    row = max(meta["summary"], key=lambda r: r["T"])
    T = row["T"]
    sizes = list(arrays[f"T{T}_head_sizes"])
    shown = [a for a in (T - 3, T - 2, T - 1, T) if a in sizes]
    steps = np.maximum(arrays["log_steps"], 1)
    cmap = sns.color_palette("flare", len(shown))
    for a, color in zip(shown, cmap, strict=True):
        trace = np.maximum(arrays[f"T{T}_trace"][sizes.index(a)], TRACE_FLOOR)  # (M, L)
        ax.plot(steps, np.median(trace, axis=0), color=color, lw=1.8, label=f"d_h = {a}")
        ax.fill_between(steps, trace.min(axis=0), trace.max(axis=0), color=color, alpha=0.15, lw=0)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("Adam step")
    ax.set_ylabel("mean row KL (float32 training loss, floored at 1e-9)")
    ax.set_title(f"T = {T}: best restart per target (median and range)", fontsize=10)
    ax.legend(frameon=False, fontsize=8)


def _band(ax, x, final, color, label, style="o-"):
    """mean ± 1 std over the finite trials of ``final`` (n, trials)."""
    ok = np.isfinite(final)
    mean = np.array([f[o].mean() if o.any() else np.nan for f, o in zip(final, ok, strict=True)])
    std = np.array([f[o].std() if o.any() else np.nan for f, o in zip(final, ok, strict=True)])
    ax.plot(x, mean, style, color=color, label=label, ms=4)
    ax.fill_between(x, np.maximum(mean - std, 0), mean + std, color=color, alpha=0.2, lw=0)


def plot_bottleneck_heads(results_dir: str | Path, stem: str | Path) -> list[Path]:
    """``bottleneck_heads_figure(results_dir)`` saved as ``stem``.png and .pdf."""
    return save_figure(bottleneck_heads_figure(results_dir), stem, dpi=DPI)


def bottleneck_heads_figure(source) -> Figure:
    """Final train and test loss vs H for head size d/H (split), fixed = T, and fixed with the
    split layout's parameter count; parameter counts in the bottom row (a folder or a run dict)."""
    meta, arrays = _source(source, "heads.npz")
    models = meta["config"]["data_models"]
    sns.set_theme(context="notebook", style="whitegrid")
    fig, axes = plt.subplots(
        3,
        len(models),
        figsize=(6.2 * len(models), 9.5),
        sharex=True,
        squeeze=False,
        height_ratios=(1, 1, 0.7),
        layout="constrained",
    )
    palette = sns.color_palette("colorblind")
    colors = {"split": palette[0], "fixed": palette[1], "matched": palette[2]}
    for j, m in enumerate(models):
        _plot_layout_losses(axes[:2, j], meta, arrays, m, colors)
        _plot_param_counts(axes[2, j], meta, m, colors)
    axes[0, 0].legend(frameon=False, fontsize=8)
    fig.suptitle("Head size d/H (low-rank heads) vs a fixed head size T at a fixed width — mean ± 1 std")
    return fig


def _matched_heads(meta: dict) -> list[int]:
    """Per H of the config, the fixed layout's H' with the split layout's parameter count."""
    matched = {m["split_heads"]: m["fixed_heads"] for m in meta["matched"]}
    return [matched[h] for h in meta["config"]["heads"]]


def _plot_layout_losses(axes, meta: dict, arrays: dict[str, np.ndarray], m: str, colors: dict) -> None:
    """Final train (axes[0]) and test (axes[1]) loss vs H of data model ``m``, the three layouts."""
    cfg = meta["config"]
    T, d = cfg["tokens"], cfg["width"]
    heads = np.array(cfg["heads"])
    split_heads = arrays[f"{m}__split__heads"]
    fixed_heads = list(arrays[f"{m}__fixed__heads"])
    same = [fixed_heads.index(h) for h in heads]
    hm = _matched_heads(meta)
    idx_m = [fixed_heads.index(h) for h in hm]
    for i, metric in enumerate(("train_loss", "test_loss")):
        ax = axes[i]
        split = arrays[f"{m}__split__{metric}"][:, :, -1]  # (n_heads, trials)
        fixed = arrays[f"{m}__fixed__{metric}"][:, :, -1]
        _band(ax, split_heads, split, colors["split"], "split: d_h = d/H")
        _band(ax, heads, fixed[same], colors["fixed"], f"fixed: d_h = T = {T}")
        _band(ax, heads, fixed[idx_m], colors["matched"], "fixed d_h = T, H' heads (params of split)", "s--")
        if i == 1:
            for x, h2, y in zip(heads, hm, np.nanmean(fixed[idx_m], axis=1), strict=True):
                ax.annotate(
                    f"H'={h2}",
                    (x, y),
                    textcoords="offset points",
                    xytext=(0, 6),
                    fontsize=7,
                    color=colors["matched"],
                    ha="center",
                )
        ax.set_yscale("log")
        ax.set_ylabel(f"final {metric.replace('_', ' ')}")
        if i == 0:
            steps = int(arrays[f"{m}__split__steps"][-1])
            ax.set_title(
                f"{DATA_LABEL.get(m, m)}, d = {d}, T = {T}: {steps} Adam steps, {split.shape[1]} trials",
                fontsize=11,
            )


def _plot_param_counts(ax, meta: dict, m: str, colors: dict) -> None:
    """Parameter count vs H of the three layouts of data model ``m`` (the bottom row)."""
    heads = np.array(meta["config"]["heads"])
    hm = _matched_heads(meta)
    rows = {(r["layout"], r["heads"]): r["param_count"] for r in meta["summary"] if r["data_model"] == m}
    ax.plot(heads, [rows[("split", int(h))] for h in heads], "o-", color=colors["split"])
    ax.plot(heads, [rows[("fixed", int(h))] for h in heads], "o-", color=colors["fixed"])
    ax.plot(heads, [rows[("fixed", h2)] for h2 in hm], "s--", color=colors["matched"])
    ax.set_ylabel("parameters H·d·(1 + 2d_h)")
    ax.ticklabel_format(axis="y", style="plain")
    ax.set_xscale("log", base=2)
    ax.set_xticks(heads, [str(h) for h in heads])
    ax.set_xlabel("number of heads H (split and fixed)")
    ax.minorticks_off()
