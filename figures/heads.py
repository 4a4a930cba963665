"""The per-head figure of one run of a sweep: what each head specialises in, from its results.

For one run (one H, one trial) of a sweep that logged per-head curves (``sweep.head_metrics``;
definitions in ``dynamics.core.heads``). What it draws is what the per-head metrics declare
(``dynamics.parts.metrics``): a curve panel for each that names a ``panel``, a heatmap row for
each of those per planted direction:

- (a) heatmaps head × planted direction of |cos(U_h, direction)| (top row) and |cos(key
  direction of head h, direction)| (bottom row) at a few steps of the per-head view (its own
  steps, ``head_steps``; default: the first after t = 0, the middle one and the last, all before
  any divergence), on one colour scale [0, 1];
- (b) curves over the per-head view's steps, one colour per head in every panel (and on the heatmaps'
  head labels): the attention on the relevant tokens of the test set; |cos| of U_h and of the
  key direction with the planted direction the head matches best at its last logged step
  (named at the line's end); ‖U_h‖ and the key-query part's norm.

Panels whose data are absent (results without planted directions; a data model without
relevant tokens, whose attention curve is NaN) are left out and named in a note under the
figure, never drawn empty. A diverged run says so in the title and gets a red line at its
divergence step; the default heatmap steps come before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from dynamics import parts
from dynamics.parts.metrics import REGISTRY, per_head_metrics
from figures.sweep import (
    DIVERGED_COLOR,
    describe,
    partial_note,
    save_figure,
    sweep_data,
)
from figures.theme import DEEP, flare, set_theme

MAX_STEPS = 8  # heatmaps per row
ANNOTATE_CELLS = 64  # write the value in each cell up to this many cells per heatmap
STEP_MARK = "0.45"


@dataclass(frozen=True)
class HeadRun:
    """One run's per-head curves: ``curves[name]`` (L, H[, P or F]) by metric name (head–head
    matrices left out), ``directions`` the P planted directions' names."""

    meta: dict
    H: int
    trial: int
    steps: np.ndarray
    curves: dict[str, np.ndarray]
    directions: list[str]
    diverged_at: int  # -1: never

    @property
    def usable(self) -> np.ndarray:
        """(L,) True at the logged steps before the run diverged."""
        return self.steps < self.diverged_at if self.diverged_at >= 0 else np.ones(len(self.steps), bool)


def _check_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name}={value!r} must be an integer")
    return int(value)


def head_run(source, H=None, trial=0) -> HeadRun:
    """The run (H, trial) of a sweep (a ``SweepResult`` or a sweep's folder), its per-head curves
    checked; H=None: the sweep's largest H. A bad argument is a one-line ValueError/TypeError."""
    meta, curves = sweep_data(source)
    names = [m.name for m in per_head_metrics() if m.name in curves and not m.pairwise]
    if not names:
        raise ValueError(
            "these results hold no per-head curves (their metrics were not logged): run the sweep "
            "with sweep.head_metrics = 'on' (--head-metrics on) or sweep.log = 'all' (--log all)"
        )
    heads = [int(h) for h in np.atleast_1d(curves["heads"])]
    H = max(heads) if H is None else _check_int("H", H)
    if H not in heads:
        raise ValueError(f"H={H} is not an H of this sweep; it ran H = {', '.join(map(str, heads))}")
    div = np.asarray(curves["diverged_at"])
    trial = _check_int("trial", trial)
    if not 0 <= trial < div.shape[1]:
        raise ValueError(
            f"trial={trial} is out of range: this sweep ran {div.shape[1]} trials (0 to {div.shape[1] - 1})"
        )
    i = heads.index(H)
    per = {k: np.asarray(curves[k], float)[i, trial, :, :H] for k in names}
    planted = [k for k in names if REGISTRY[k].kind == "planted"]
    P = per[planted[0]].shape[-1] if planted else 0
    directions = [str(d) for d in meta.get("directions") or [f"direction {p}" for p in range(P)]]
    if P and len(directions) != P:
        raise ValueError(f"the results name {len(directions)} planted directions but {planted[0]} has {P}")
    steps = np.asarray(curves.get("head_steps", curves["steps"]))  # the per-head view's own steps
    return HeadRun(meta, H, trial, steps, per, directions if P else [], int(div[i, trial]))


def choose_steps(run: HeadRun, steps=None) -> list[int]:
    """The heatmaps' logged steps: ``steps`` checked (each a logged step), or by default the
    first logged step after t = 0, the middle one and the last, all before a divergence."""
    logged = [int(s) for s in run.steps]
    if steps is None:
        ok = np.flatnonzero(run.usable)  # the middle of the run's logged steps, t = 0 counted
        later = ok[run.steps[ok] > 0]
        if not later.size:
            return [logged[0]]
        return sorted({logged[later[0]], logged[ok[len(ok) // 2]], logged[later[-1]]})
    if isinstance(steps, int | np.integer) and not isinstance(steps, bool):
        steps = [steps]
    if isinstance(steps, str | bytes) or not hasattr(steps, "__iter__"):
        raise TypeError(f"steps={steps!r:.60} must be None, a logged step or a list of them")
    chosen = list(steps)
    for s in chosen:
        if isinstance(s, bool) or not isinstance(s, int | np.integer) or int(s) not in logged:
            shown = (
                ", ".join(map(str, logged))
                if len(logged) <= 12
                else (f"{', '.join(map(str, logged[:5]))}, …, {', '.join(map(str, logged[-3:]))}")
            )
            raise ValueError(
                f"steps: {s!r} is not a logged step of this run; logged ({len(logged)}): {shown}"
            )
    if not 1 <= len(set(chosen)) <= MAX_STEPS:
        raise ValueError(f"steps={chosen!r} must name 1 to {MAX_STEPS} logged steps")
    return sorted({int(s) for s in chosen})


def head_palette(H: int) -> list:
    """One colour per head: seaborn's deep palette up to 10 heads, tab20 up to 20, else turbo."""
    if H <= len(DEEP):
        return list(DEEP[:H])
    cmap = plt.get_cmap("tab20" if H <= 20 else "turbo")
    return [cmap(h) for h in range(H)] if H <= 20 else [cmap(x) for x in np.linspace(0.05, 0.95, H)]


def _finite(a) -> bool:
    return a is not None and bool(np.isfinite(a).any())


def _key_labels(config: dict) -> tuple[str, str]:
    """(the key direction, the key-query norm) as this run's model has them."""
    model = config["model"]
    if parts.QUERIES.get(model.get("query", "first")).learned:
        return "k_h", "‖k_h‖"
    layout = parts.KEY_QUERIES.get(model.get("key_query", "full"))
    if layout.tied:
        return "key dir. of Q_h Q_hᵀ", "‖Q_h Q_hᵀ‖_F"
    if layout.factored:
        return "key dir. of Q_h K_hᵀ", "‖Q_h K_hᵀ‖_F"
    return "key dir. of W_h", "‖W_h‖_F"


def _panels(run: HeadRun) -> tuple[list[tuple[str, str]], list[str]]:
    """The curve panels with data, (curve name, y label), and the notes on those left out: each
    per-head metric that declares a ``panel``, in the registry's order."""
    labels = _labels(run)
    panels, notes = [], []
    planted = _planted(run)
    if not planted:
        notes.append("|cos| with planted directions (these results name none)")
    for m in per_head_metrics():
        if m.panel is None:
            continue
        if _finite(run.curves.get(m.name)):
            panels.append((m.name, m.panel.format(**labels)))
        elif m.absent is not None and (planted or m.kind != "planted"):
            notes.append(m.absent)
    return panels, notes


def _labels(run: HeadRun) -> dict[str, str]:
    """The words a metric's label names by key: this run's key direction and key-query norm."""
    key_dir, key_norm = _key_labels(run.meta["config"])
    return {"key_dir": key_dir, "key_norm": key_norm}


def _planted(run: HeadRun) -> list[str]:
    """The per-planted-direction metrics drawn (a heatmap row each), with data in this run."""
    return [
        m.name
        for m in per_head_metrics()
        if m.kind == "planted" and m.panel is not None and _finite(run.curves.get(m.name))
    ]


def _heatmap(ax, values: np.ndarray, colors: list, show_values: bool, diverged: bool):
    """One head × direction heatmap on [0, 1]; NaN cells grey (a zero vector has no direction),
    an empty one says why."""
    cmap = flare().with_extremes(bad="0.88")
    im = ax.imshow(values, vmin=0.0, vmax=1.0, cmap=cmap, aspect="auto", interpolation="nearest")
    H, P = values.shape
    if not np.isfinite(values).any():
        ax.text(
            0.5,
            0.5,
            "no value\n(diverged)" if diverged else "no value\n(zero vectors: no direction)",
            transform=ax.transAxes,
            ha="center",
            va="center",
            color=DIVERGED_COLOR if diverged else "0.3",
            fontsize="small",
        )
    elif show_values:
        for (h, p), v in np.ndenumerate(values):
            if np.isfinite(v):
                ax.text(
                    p,
                    h,
                    f"{v:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if v > 0.55 else "0.15",
                )
    ax.set_yticks(range(H), [f"h{h}" for h in range(H)], fontsize="small")
    for tick, color in zip(ax.get_yticklabels(), colors, strict=True):
        tick.set_color(color)
        tick.set_fontweight("bold")
    ax.grid(False)
    return im


def _draw_heatmaps(sub, run: HeadRun, steps: list[int], colors: list) -> None:
    """(a): |cos| of U_h (and of the key direction) with each planted direction at ``steps``: a
    row per per-planted-direction metric with data."""
    labels = _labels(run)
    rows = [(name, REGISTRY[name].label.format(**labels)) for name in _planted(run)]
    axes = sub.subplots(len(rows), len(steps), squeeze=False)
    at = {int(s): j for j, s in enumerate(run.steps)}
    P = len(run.directions)
    show_values = run.H * P <= ANNOTATE_CELLS
    im = None
    for r, (name, label) in enumerate(rows):
        for c, step in enumerate(steps):
            ax = axes[r, c]
            diverged = not run.usable[at[step]]
            im = _heatmap(ax, run.curves[name][at[step]], colors, show_values, diverged)
            ax.set_xticks(
                range(P),
                run.directions,
                rotation=30 if P > 3 else 0,
                ha="right" if P > 3 else "center",
                fontsize="small",
            )
            if r == 0:
                ax.set_title(f"t = {step}", fontsize="medium")
            if c == 0:
                ax.set_ylabel(f"{label}\nhead", fontsize="small")
            else:
                ax.tick_params(labelleft=False)
            if r < len(rows) - 1:
                ax.tick_params(labelbottom=False)
    sub.colorbar(im, ax=axes, shrink=0.9, aspect=25, label="|cos|", pad=0.01)
    sub.suptitle(
        "(a) each head's |cos| with each planted direction",
        x=0.01,
        ha="left",
        fontsize="medium",
        fontweight="bold",
    )


def _time_axis(ax, steps: np.ndarray) -> None:
    if steps.max() > 50:
        ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlim(left=0, right=max(int(steps.max()), 1))
    ax.set_xlabel("iteration t")


def _best(run: HeadRun, name: str) -> np.ndarray | None:
    """Per head, the planted direction of the curve ``name`` (L, H, P) drawn: the largest |cos|
    at the head's last finite logged step before any divergence (-1: none); None when absent."""
    cos = run.curves.get(name)
    if not _finite(cos):
        return None
    best = np.full(run.H, -1)
    for h in range(run.H):
        rows = np.flatnonzero(run.usable & np.isfinite(cos[:, h]).any(axis=1))
        if rows.size:
            best[h] = int(np.nanargmax(cos[rows[-1], h]))
    return best


def _curve(ax, run: HeadRun, name: str, colors: list) -> None:
    """One curve panel: a line per head; for a |cos| the one with the head's best direction."""
    values = run.curves[name]
    best = _best(run, name) if REGISTRY[name].kind == "planted" else None
    for h in range(run.H):
        if best is not None and best[h] < 0:
            continue
        y = values[:, h, best[h]] if best is not None else values[:, h]
        ax.plot(run.steps, y, color=colors[h], lw=1.6)
    if REGISTRY[name].unit:
        ax.set_ylim(-0.02, 1.02)
    _time_axis(ax, run.steps)


def _head_label(run: HeadRun, h: int, best: dict[str, np.ndarray | None]) -> str:
    """'head 0: U → mu_plus, key → mu_minus' (the directions its |cos| curves follow)."""
    parts = [
        f"{REGISTRY[name].tag} → {run.directions[b[h]] if b[h] >= 0 else '–'}"
        for name, b in best.items()
        if b is not None
    ]
    return f"head {h}" + (f": {', '.join(parts)}" if parts else "")


def _draw_curves(sub, run: HeadRun, panels, steps: list[int] | None, colors: list) -> None:
    """(b): the curve panels, the heatmaps' steps dotted, the divergence step red."""
    axes = sub.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, label) in zip(axes, panels, strict=True):
        _curve(ax, run, name, colors)
        ax.set_title(label, fontsize="medium")
        for s in steps or []:
            ax.axvline(s, color=STEP_MARK, lw=0.9, ls=":", zorder=1)
        if run.diverged_at >= 0:
            ax.axvline(run.diverged_at, color=DIVERGED_COLOR, lw=1.4, ls="--", zorder=4)
    best = {name: _best(run, name) for name in _planted(run)}
    handles = [Line2D([], [], color=c, lw=2, label=_head_label(run, h, best)) for h, c in enumerate(colors)]
    if steps:
        handles.append(Line2D([], [], color=STEP_MARK, lw=0.9, ls=":", label="heatmap steps"))
    if run.diverged_at >= 0:
        handles.append(
            Line2D([], [], color=DIVERGED_COLOR, lw=1.4, ls="--", label=f"diverged (t = {run.diverged_at})")
        )
    sub.legend(
        handles=handles,
        loc="outside right upper",
        frameon=False,
        fontsize="small",
        ncols=2 if len(handles) > 12 else 1,
    )
    title = "(b) per head over the logged steps" if steps else "per head over the logged steps"
    sub.suptitle(title, x=0.01, ha="left", fontsize="medium", fontweight="bold")


def _identical(run: HeadRun) -> bool:
    """Every head's curves the same (a symmetric θ(0): the engine simulates one head for all H)."""
    return run.H > 1 and all(
        np.array_equal(v, np.broadcast_to(v[:, :1], v.shape), equal_nan=True) for v in run.curves.values()
    )


def _title(run: HeadRun) -> str:
    config = run.meta["config"]
    model = config["model"]
    name = config.get("name", "")
    prefix = f"{name}: " if name and name != "default" else ""
    attention = model.get("attention", "softmax")
    what = f"{prefix}per-head specialisation, H = {run.H}, trial {run.trial}"
    how = f"{describe(config)}, {attention} attention, query: {model.get('query', 'first')}"
    diverged = f" — DIVERGED at t = {run.diverged_at}" if run.diverged_at >= 0 else ""
    same = (
        f" — the {run.H} heads are identical (symmetric θ(0)): their lines coincide"
        if _identical(run)
        else ""
    )
    return f"{what}{diverged}{partial_note(run.meta)}{same}\n{how}"


def heads_figure(source, H=None, trial=0, steps=None) -> Figure:
    """Per-head specialisation of one run of a sweep: heatmaps head × planted direction of
    |cos| at a few logged steps and per-head curves (attention on relevant tokens, best-direction
    |cos|, norms); the matplotlib Figure, not saved and not closed.

    ``source``: a ``SweepResult`` or a sweep's folder, logged with per-head metrics. ``H``: one
    of the sweep's H values (default the largest); ``trial``: 0 to trials − 1; ``steps``: the
    heatmaps' logged steps (default the first after t = 0, the middle and the last before any
    divergence). Panels without data are left out and named in a note under the figure.
    """
    run = head_run(source, H, trial)
    chosen = choose_steps(run, steps)
    return draw_heads(run, chosen)


def draw_heads(run: HeadRun, steps: list[int]) -> Figure:
    """The figure of ``heads_figure`` from a checked ``HeadRun`` and its heatmaps' steps."""
    panels, notes = _panels(run)
    has_maps = bool(_planted(run))
    colors = head_palette(run.H)
    set_theme()
    width = max(3.6 * len(panels) + 1.6, 3.0 * len(steps) + 2.0 if has_maps else 0.0, 9.0)
    map_rows = len(_planted(run))
    map_height = map_rows * (0.28 * run.H + 1.3) + 0.6
    curve_height = 3.6
    fig = plt.figure(figsize=(width, map_height * has_maps + curve_height + 1.0), layout="constrained")
    if has_maps:
        top, bottom = fig.subfigures(2, 1, height_ratios=[map_height, curve_height])
        _draw_heatmaps(top, run, steps, colors)
    else:
        bottom = fig.subfigures(1, 1)
    _draw_curves(bottom, run, panels, steps if has_maps else None, colors)
    fig.suptitle(_title(run), color=DIVERGED_COLOR if run.diverged_at >= 0 else None)
    if notes:
        fig.supxlabel("not drawn: " + "; ".join(notes), fontsize="small", color="0.35", style="italic")
    return fig


def plot_heads(results_dir, stem, *, H=None, trial=0, steps=None, dpi: int = 130) -> list[Path]:
    """``heads_figure(results_dir, H, trial, steps)`` saved as ``stem``.png and .pdf."""
    return save_figure(heads_figure(results_dir, H, trial, steps), stem, dpi=dpi)
