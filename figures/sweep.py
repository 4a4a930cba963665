"""The number-of-heads figure of a sweep, drawn from saved result files only.

One figure per sweep (``results.json`` + ``curves.npz`` in a folder):

- (a) train loss vs iteration t, one line per H (mean over the trials that did not diverge);
- (b) test loss vs iteration t, likewise;
- (c) final train loss (top) and final test loss (bottom) vs H, mean ± 1 std over the trials
  that did not diverge; the bottom panel also shows the best test loss over t (early stopping).

Trials that diverged are never dropped silently: in (a) and (b) each is drawn thin and
dashed up to its last finite point, which gets a ×; in (c) every H with diverged trials is
annotated "k/n div." and an H whose trials all diverged gets a red × on the axis.

``DATA_LABEL`` and ``save_figure`` (PNG and PDF, written atomically) serve every figure module.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import NullLocator

from dynamics import parts
from dynamics.config.presets import train_label
from dynamics.infra.files import atomic_write_bytes
from dynamics.sweeps.result_files import check_sweep_files, load_results, read_folder
from figures.theme import (  # seaborn's look, without seaborn
    EMBEDDED_FONTS,
    drop_invisible_minor_ticks,
    flare,
    set_theme,
)


class _Labels:
    """A registry's labels for figures, by part name (``DATA_LABEL.get("dm1", …)`` is "DM1")."""

    def __init__(self, registry):
        self.registry = registry

    def __getitem__(self, name: str) -> str:
        return self.registry.label(name)

    def get(self, name: str, default: str | None = None) -> str:
        return self.registry.label(name) if name in self.registry else (default or str(name))


OPT_LABEL = _Labels(parts.OPTIMIZERS)
SCALING_LABEL = _Labels(parts.LR_SCALINGS)
DATA_LABEL = _Labels(parts.DATA_MODELS)


def _from_file(model: str) -> bool:
    return model in parts.DATA_MODELS and parts.DATA_MODELS[model].from_file


def _symmetric_init(init: str) -> bool:
    return init in parts.INITS and parts.INITS[init].symmetric


DIVERGED_COLOR = "#c0392b"
DISPLAY_POINTS = 300  # points per line: a 5-inch panel at 130 dpi is 650 px wide
NEUTRAL = "0.25"


def describe(config: dict) -> str:
    """'DM1 (n = 100 train / 300 test), GD η = 1·H' from a results.json config (online SGD: 'batch
    64, online / 512 test')."""
    data, optim = config["data"], config["optim"]
    name = DATA_LABEL.get(data["model"], data["model"])
    n = f" ({train_label(config)} / {data['n_test']} test)" if not _from_file(data["model"]) else ""
    scaling = SCALING_LABEL[optim["lr_scaling"]]  # Adam's step follows --lr-scaling too (η(H) = η₀·H^p)
    return f"{name}{n}, {OPT_LABEL[optim['optimizer']]} η = {optim['lr']:g}{scaling}"


def head_colors(heads: np.ndarray):
    """A sequential palette ordered by H (log-spaced when H spans a factor ≥ 4) and its norm."""
    cmap = flare()
    lo, hi = float(heads.min()), float(heads.max())
    norm = LogNorm(lo, hi) if lo > 0 and hi / lo >= 4 else Normalize(lo, max(hi, lo + 1))
    return cmap, norm


def _ok_trials(curves: dict) -> np.ndarray:
    """(n_heads, trials) True where the trial never diverged (as results.json's summary counts)."""
    return np.asarray(curves["diverged_at"]) < 0


def _mean_curve(values: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Mean over the trials that never diverged, (n_heads, L); NaN where every trial diverged."""
    keep = ok[:, :, None] & np.isfinite(values)  # (n_heads, trials, L)
    count = keep.sum(axis=1)
    total = np.where(keep, values, 0.0).sum(axis=1)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _mean_std(values: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per H, mean and std over the trials that never diverged of values (n_heads, trials)."""
    mean = np.full(len(values), np.nan)
    std = np.full(len(values), np.nan)
    for i in range(len(values)):
        v = values[i, ok[i] & np.isfinite(values[i])]
        if v.size:
            mean[i], std[i] = v.mean(), v.std()
    return mean, std


def _spans_decades(values: np.ndarray) -> bool:
    v = values[np.isfinite(values) & (values > 0)]
    return v.size > 1 and v.max() / v.min() > 10


def _log_time(steps: np.ndarray) -> bool:
    return steps.max() > 50


def display_points(x: np.ndarray, log: bool, max_points: int = DISPLAY_POINTS) -> np.ndarray:
    """Indices of at most about ``max_points`` of the sorted positions ``x`` spread evenly over the
    axis (log-spaced on a log axis), first and last included: what a line of a figure can show.
    """
    if len(x) <= max_points:
        return np.arange(len(x))
    ends = np.log(x[[0, -1]]) if log else x[[0, -1]].astype(float)
    targets = np.linspace(ends[0], ends[1], max_points)
    targets = np.exp(targets) if log else targets
    return np.unique(np.clip(np.searchsorted(x, targets), 0, len(x) - 1))


def _check_curves(ax, curves, metrics) -> dict:
    """The arrays of a sweep, ``curves`` as ``sweep_data`` gives them (a SweepResult is taken as
    its arrays), checked: heads (n,), steps (L,), diverged_at (n, trials), each metric (n, trials, L)."""
    from dynamics.sweeps.sweep_result import SweepResult

    if not hasattr(ax, "plot"):
        raise TypeError(f"ax={ax!r:.60} must be a matplotlib Axes")
    if isinstance(curves, SweepResult):
        curves = sweep_data(curves)[1]
    if not isinstance(curves, dict):
        raise TypeError(
            f"curves={curves!r:.60} must be a dict of arrays (figures.sweep.sweep_data) or a SweepResult"
        )
    for metric in metrics:
        if not isinstance(metric, str) or metric not in curves:
            known = sorted(k for k in curves if k not in ("heads", "steps", "diverged_at"))
            raise ValueError(f"metric={metric!r} is not in curves; it holds {known}")
    missing = [k for k in ("heads", "steps", "diverged_at") if k not in curves]
    if missing:
        raise ValueError(f"curves has no {missing}: pass the arrays of sweep_data(result)[1]")
    n, L = len(np.atleast_1d(curves["heads"])), len(np.atleast_1d(curves["steps"]))
    for k in metrics:
        if np.ndim(curves[k]) != 3 or np.shape(curves[k])[::2] != (n, L):
            raise ValueError(
                f"curves[{k!r}] has shape {np.shape(curves[k])}; expected (H={n}, trials, L={L})"
            )
    return curves


def plot_loss_curves(ax, meta: dict, curves: dict, metric: str, label: str) -> None:
    """One line per H of ``metric`` vs t; diverged trials dashed and ending in ×.

    Lines are drawn through at most about ``DISPLAY_POINTS`` of the logged steps, spread evenly
    over the time axis (``display_points``); the × of a diverged trial is at its last finite
    point among all the logged steps.
    """
    curves = _check_curves(ax, curves, (metric,))
    heads, steps = curves["heads"], curves["steps"]
    cmap, norm = head_colors(heads)
    ok = _ok_trials(curves)
    values = curves[metric]  # (n_heads, trials, L)
    mean = _mean_curve(values, ok)
    # t = 0 (before any update) has no place on a log axis; it is the same for every H at θ(0) = 0.
    shown = steps > 0 if _log_time(steps) else np.ones_like(steps, dtype=bool)
    x = steps[shown]
    drawn = display_points(x, _log_time(steps))  # indices into x
    for i, h in enumerate(heads):
        color = cmap(norm(h))
        ax.plot(x[drawn], mean[i, shown][drawn], color=color, lw=1.7)
        for j in np.flatnonzero(~ok[i]):
            trial = values[i, j, shown]
            # up to its last finite point, which the × marks (exactly, not on the display grid)
            finite = np.flatnonzero(np.isfinite(trial))
            upto = drawn if not finite.size else np.union1d(drawn[drawn <= finite[-1]], finite[-1:])
            ax.plot(x[upto], trial[upto], color=color, lw=0.9, ls="--", alpha=0.8)
            if finite.size:
                k = finite[-1]
                ax.plot(x[k], trial[k], "x", color=DIVERGED_COLOR, ms=8, mew=2, zorder=5)
    if (~ok).any():
        ax.legend(
            handles=[
                Line2D([], [], color=NEUTRAL, lw=1.7, label="mean of converging trials"),
                Line2D(
                    [],
                    [],
                    color=NEUTRAL,
                    lw=0.9,
                    ls="--",
                    marker="x",
                    mec=DIVERGED_COLOR,
                    mew=2,
                    label="diverged trial (× = last finite point)",
                ),
            ],
            frameon=False,
            fontsize="small",
        )
    if _log_time(steps):
        ax.set_xscale("log")
    if _spans_decades(mean[:, shown]):
        ax.set_yscale("log")
    ax.set_xlabel("iteration t")
    ax.set_ylabel(label)


def add_head_colorbar(fig, axes, heads: np.ndarray) -> None:
    """One colorbar for the H palette, attached to ``axes``."""
    cmap, norm = head_colors(heads)
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=norm)
    cbar = fig.colorbar(sm, ax=axes, pad=0.01, aspect=30)
    cbar.set_ticks(heads, labels=[str(h) for h in heads])
    cbar.minorticks_off()
    cbar.set_label("number of heads H")


def _mark_diverged(ax, heads: np.ndarray, mean: np.ndarray, ok: np.ndarray) -> bool:
    """Annotate every H with diverged trials; a red × on the axis where all of them diverged."""
    any_marked = False
    trans = ax.get_xaxis_transform()  # x in data, y in axes coordinates
    for i, h in enumerate(heads):
        n_bad = int((~ok[i]).sum())
        if n_bad == 0:
            continue
        any_marked = True
        text = f"{n_bad}/{ok.shape[1]} div."
        if np.isnan(mean[i]):
            ax.plot(h, 0.9, "x", color=DIVERGED_COLOR, ms=10, mew=2.5, transform=trans, clip_on=False)
            ax.text(
                h,
                0.78,
                text,
                color=DIVERGED_COLOR,
                ha="center",
                va="top",
                fontsize="x-small",
                transform=trans,
            )
        else:
            ax.annotate(
                text,
                (h, mean[i]),
                xytext=(0, 8),
                textcoords="offset points",
                ha="center",
                color=DIVERGED_COLOR,
                fontsize="x-small",
            )
    return any_marked


def plot_final_vs_heads(ax_train, ax_test, meta: dict, curves: dict) -> None:
    """Final train (top) and test (bottom) loss vs H, mean ± 1 std; best test loss over t dashed."""
    _check_curves(ax_test, curves, ("train_loss", "test_loss"))
    curves = _check_curves(ax_train, curves, ("train_loss", "test_loss"))
    heads = curves["heads"]
    cmap, norm = head_colors(heads)
    ok = _ok_trials(curves)
    colors = [cmap(norm(h)) for h in heads]
    last = int(curves["steps"][-1])
    panels = (
        (ax_train, "train_loss", f"train loss at t = {last}"),
        (ax_test, "test_loss", f"test loss at t = {last}"),
    )
    for ax, metric, ylabel in panels:
        final = curves[metric][:, :, -1]  # (n_heads, trials)
        mean, std = _mean_std(final, ok)
        ax.fill_between(heads, mean - std, mean + std, color=NEUTRAL, alpha=0.15, lw=0)
        ax.plot(heads, mean, "-", color=NEUTRAL, lw=1.2, zorder=2, label="final, mean ± 1 std")
        ax.scatter(heads, mean, c=colors, s=36, zorder=3, edgecolors="white", linewidths=0.6)
        values = [mean]
        if metric == "test_loss" and len(curves["steps"]) > 2:
            values_t = curves[metric]  # (n_heads, trials, L)
            best = np.where(np.isfinite(values_t), values_t, np.inf).min(axis=2)
            best[np.isinf(best)] = np.nan  # no finite point at all
            best_mean, _ = _mean_std(best, ok)
            ax.plot(heads, best_mean, "--", color=NEUTRAL, lw=1.0, label="best over t, mean")
            values.append(best_mean)
        diverged = _mark_diverged(ax, heads, mean, ok)
        if heads.min() > 0 and heads.max() / heads.min() >= 4:
            ax.set_xscale("log", base=2)
        if _spans_decades(np.concatenate(values)):
            ax.set_yscale("log")
        ax.set_xticks(heads, [str(h) for h in heads])
        ax.xaxis.set_minor_locator(NullLocator())  # only the H values are ticks
        ax.set_ylabel(ylabel, fontsize="small")
        handles, _ = ax.get_legend_handles_labels()
        if diverged:
            handles.append(
                Line2D([], [], ls="", marker="x", color=DIVERGED_COLOR, mew=2, label="diverged trials")
            )
        if metric == "test_loss" or diverged:
            ax.legend(handles=handles, frameon=False, fontsize="x-small")
    ax_train.tick_params(labelbottom=False)
    ax_test.set_xlabel("number of heads H")


def sweep_data(source) -> tuple[dict, dict]:
    """(meta, curves) of a sweep: ``source`` is a ``SweepResult`` (in memory) or a results folder
    (or its results.json); a grid, a bottleneck run or anything else is refused (ValueError/TypeError)."""
    from dynamics.sweeps.sweep_result import SweepResult

    if isinstance(source, SweepResult):
        meta = {"config": source.config.resolved().to_dict(), **source.extra}
        arrays = {"heads": source.heads, "steps": source.steps, "diverged_at": source.diverged_at}
        return meta, {**arrays, **source.curves}
    if hasattr(source, "grid") and hasattr(source, "curves"):
        raise TypeError("a GridResult is not one sweep: draw grid.point(k), or its folder with figures.phase")
    if isinstance(source, dict):
        raise TypeError("a bottleneck run dict is drawn by expressivity_figure or bottleneck_heads_figure")
    path, _, kind = read_folder(source)
    if kind != "sweep":
        raise ValueError(f"{str(path)!r} holds a {kind} result, not a sweep: {_DRAWN_BY[kind]}")
    from dynamics.config.schema import config_from_dict

    meta, curves = load_results(path)
    # a damaged or edited folder is refused, never drawn
    check_sweep_files(meta, curves, config_from_dict(meta["config"]), path)
    return meta, curves


_DRAWN_BY = {
    "grid": "figures.phase.plot_grid draws it",
    "bottleneck-expressivity": "figures.expressivity_figure draws it",
    "bottleneck-heads": "figures.bottleneck_heads_figure draws it",
}


def partial_note(meta: dict) -> str:
    """'' for complete results; ' (partial: H = 8, 16 not run)' for an interrupted run's."""
    if meta.get("complete", True) is not False:
        return ""
    todo = meta.get("heads_todo") or []
    missing = f": H = {', '.join(str(h) for h in todo)} not run" if todo else ""
    return f" (PARTIAL{missing})"


def plot_sweep(results_dir: str | Path, stem: str | Path, *, dpi: int = 130) -> list[Path]:
    """``sweep_figure(results_dir)`` saved as ``stem``.png and .pdf; returns the written paths."""
    return save_figure(sweep_figure(results_dir), stem, dpi=dpi)


def sweep_figure(source) -> Figure:
    """Train and test loss vs t (a line per H), final loss vs H (±1 std): the matplotlib Figure.

    ``source``: a ``SweepResult`` or a folder with ``results.json`` and ``curves.npz``. The figure
    is not saved and not closed (a notebook shows it; ``save_figure`` writes it).
    """
    meta, curves = sweep_data(source)
    config = meta["config"]
    n_test = config["data"]["n_test"]
    set_theme()
    fig, axes = plt.subplot_mosaic(
        [["train", "test", "final_train"], ["train", "test", "final_test"]],
        figsize=(15, 4.6),
        layout="constrained",
        width_ratios=[1, 1, 0.8],
    )
    synthetic = not _from_file(config["data"]["model"])
    loss_word = "MSE" if config["optim"].get("task") == "regression" else "loss"
    plot_loss_curves(
        axes["train"],
        meta,
        curves,
        "train_loss",
        f"train {loss_word} ({train_label(config).removesuffix(' train')})"
        if synthetic
        else f"train {loss_word}",
    )
    plot_loss_curves(
        axes["test"],
        meta,
        curves,
        "test_loss",
        f"test {loss_word} ({n_test} examples)" if synthetic else f"test {loss_word}",
    )
    add_head_colorbar(fig, [axes["train"], axes["test"]], curves["heads"])
    plot_final_vs_heads(axes["final_train"], axes["final_test"], meta, curves)
    for key, letter in (("train", "a"), ("test", "b"), ("final_train", "c")):
        axes[key].set_title(f"({letter})", loc="left", fontsize="medium", fontweight="bold")
    trials = curves["train_loss"].shape[1]
    if config["model"].get("init_from"):
        init = f"θ(0) from {Path(config['model']['init_from']).name}"
    elif _symmetric_init(config["model"]["init"]):
        init = "θ(0) = 0"
    else:
        init = f"θ(0) random (σ₀ = {config['model']['init_scale']:g})"
    name = config.get("name", "")
    prefix = f"{name}: " if name and name != "default" else ""
    # wrapped to the figure's width: a user data model's description may be long
    fig.suptitle(f"{prefix}{describe(config)}, {init}, {trials} trials per H{partial_note(meta)}", wrap=True)
    return fig


def save_figure(fig, stem: str | Path, *, dpi: int = 130, close: bool = True) -> list[Path]:
    """Write ``stem``.png and ``stem``.pdf atomically (no half-written file on disk); close ``fig``
    unless ``close=False``."""
    if isinstance(dpi, bool) or not isinstance(dpi, int | float) or not (0 < dpi <= 2000):
        raise ValueError(f"dpi={dpi!r} must be a number of dots per inch in (0, 2000]")
    if not isinstance(close, bool):
        raise TypeError(f"close={close!r} must be True or False")
    if not isinstance(fig, Figure):
        raise TypeError(f"fig={fig!r:.60} must be a matplotlib Figure (sweep_figure, plt.figure())")
    if isinstance(stem, bool) or not isinstance(stem, str | os.PathLike) or not str(stem).strip():
        raise TypeError(f"stem={stem!r:.80} must be a non-empty path (str or pathlib.Path)")
    stem = Path(stem)
    if stem.suffix.lower() in (".png", ".pdf"):  # "fig.png" names the pair fig.png, fig.pdf
        stem = stem.with_suffix("")
    # The suffixes are appended, not swapped: a stem "s_lr0.5" gives s_lr0.5.png, not s_lr0.png.
    paths = [stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".pdf")]
    if not stem.parent.is_dir():
        raise ValueError(f"stem={str(stem)!r}: its folder {str(stem.parent)!r} does not exist")
    drop_invisible_minor_ticks(fig)
    try:
        for path in paths:
            buf = io.BytesIO()
            with mpl.rc_context(EMBEDDED_FONTS):  # TrueType in the PDF, whatever theme drew the figure
                fig.savefig(buf, format=path.suffix[1:], dpi=dpi)
            atomic_write_bytes(path, buf.getvalue())
            # The layout (constrained: text extents of every tick label) is the same in every
            # format: computed once, for the first, and kept (it was half of a PDF's time).
            fig.set_layout_engine("none")
    finally:
        if close:
            plt.close(fig)
    return paths
