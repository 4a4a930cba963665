"""What the grid figures share: a grid's final values (``GridTables``), the choice of plotted knobs
and fixed values, the titles' words, and the heatmap cell with its diverged marks and legend.
``figures.phase`` and ``figures.facets`` draw with them."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from matplotlib import patheffects
from matplotlib.colors import LogNorm, Normalize
from matplotlib.lines import Line2D
from matplotlib.patches import Patch, Rectangle

from dynamics.config.grid_axes import GRID_KNOBS
from dynamics.config.schema import declared
from dynamics.parts.metrics import REGISTRY
from figures.sweep import DIVERGED_COLOR, describe
from figures.theme import flare

PANELS = (  # (metric, title) in the 2×2 diagram's order; those the run logged are drawn
    ("train_loss", "final train loss"),
    ("test_loss", "final test loss"),
    ("train_error", "final train error"),
    ("test_error", "final test error"),
    ("excess_risk", "final excess risk"),
)
TITLES = dict(PANELS)
# A grid axis is labelled by its knob's declared unit (η₀, σ₀, ε, …); these two read otherwise.
LABELS = {"heads": "H", "n_train": "n (train)"}
OUTLINE = [patheffects.withStroke(linewidth=3, foreground="k")]  # the white best-η₀ line, outlined
MISSING_COLOR = "0.85"  # a cell without a value: every trial diverged (hatched) or none logged


@dataclass
class GridTables:
    """A grid's final values: axis ``names`` ("heads" first) and their ``values``; ``final[metric]``
    the mean over the trials that did not diverge (H, *grid), NaN where none is left; ``n_div``
    the number of diverged trials (H, *grid) of ``trials``."""

    names: list[str]
    values: list[np.ndarray]
    final: dict[str, np.ndarray]
    n_div: np.ndarray
    trials: int

    def values_of(self, name: str) -> np.ndarray:
        return self.values[self.names.index(name)]

    def categorical(self) -> list[str]:
        """The axes whose values are names (a part, the data model), not numbers."""
        return [
            n for n, v in zip(self.names, self.values, strict=True) if not np.issubdtype(v.dtype, np.number)
        ]

    def take(self, keep: list[str], fixed: dict[str, int]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """(final, n_div) with the axes ``keep`` in that order, every other axis at ``fixed[name]``."""
        idx = tuple(slice(None) if n in keep else fixed[n] for n in self.names)
        left = [n for n in self.names if n in keep]
        order = [left.index(n) for n in keep]
        final = {m: np.transpose(v[idx], order) for m, v in self.final.items()}
        return final, np.transpose(self.n_div[idx], order)


def grid_tables(meta: dict, curves: dict) -> GridTables:
    """The final values of every logged metric of ``PANELS`` at every (H, grid point)."""
    names = ["heads", *meta["grid"]["axes"]]
    values = [np.asarray(curves["heads"])] + [np.asarray(curves[n]) for n in meta["grid"]["axes"]]
    ok = np.asarray(curves["diverged_at"]) < 0  # (H, *grid, trials)
    final = {}
    for metric, _ in PANELS:
        if metric not in curves:
            continue
        v = np.asarray(curves[metric])[..., -1]  # (H, *grid, trials)
        keep = ok & np.isfinite(v)
        n = keep.sum(axis=-1)
        final[metric] = np.where(n > 0, np.where(keep, v, 0.0).sum(axis=-1) / np.maximum(n, 1), np.nan)
    return GridTables(names, values, final, (~ok).sum(axis=-1), ok.shape[-1])


def runs_text(meta: dict, t: GridTables) -> str:
    """'1 trial, 100 steps'."""
    return f"{t.trials} trial{'s' if t.trials != 1 else ''}, {meta['config']['optim']['steps']} steps"


def label(name: str) -> str:
    return LABELS.get(name) or _units().get(name, name)


@functools.cache
def _units() -> dict[str, str]:
    """Each knob's declared unit by its name (a data model's parameter: its first model's)."""
    return {k.name: k.spec.unit for k in declared() if k.spec.unit}


def ticks(vals: np.ndarray) -> list[str]:
    return [_value(v, ".3g") for v in vals]


def _value(v, form: str = ".4g") -> str:
    """A knob's value as text: a number in ``form``, a categorical knob's name as it is."""
    return format(v, form) if isinstance(v, int | float | np.number) else str(v)


def knob(name, names: list[str], what: str) -> str:
    """A knob's name as the tables have it ('H' is 'heads'; 'n-train' and 'data.n_train' work)."""
    if not isinstance(name, str):
        raise TypeError(f"{what}: {name!r} must be a knob's name (str)")
    short = "heads" if name in ("H", "heads") else name.split(".")[-1].replace("-", "_")
    if short not in names:
        raise ValueError(f"{what}: {name!r} is not an axis of this grid; its axes: {', '.join(names)}")
    return short


def choose_axes(t: GridTables, axes=None) -> tuple[str, ...]:
    """The plotted knobs, horizontal first: ``axes`` checked, or the default (module docstring)."""
    if axes is not None:
        if isinstance(axes, str):
            items = [a.strip() for a in axes.split(",")]
            if "" in items:  # 'lr,,T' or 'lr,': a typo, not fewer axes
                raise ValueError(f"axes={axes!r} has an empty item; give one or two knobs, e.g. 'lr,T'")
            axes = tuple(items)
        chosen = tuple(knob(a, t.names, f"axes={axes!r}") for a in axes)
        if not 1 <= len(chosen) <= 2 or len(set(chosen)) != len(chosen) or chosen == ("heads",):
            raise ValueError(f"axes={axes!r} must be one or two different knobs, not H alone: {t.names[1:]}")
        return chosen
    varying = [n for n, v in zip(t.names, t.values, strict=True) if len(v) > 1]
    knobs = [n for n in varying if n != "heads"]
    numeric = [n for n in knobs if n not in t.categorical()]
    knobs = numeric or knobs  # names are faceted (a figure per name) where numbers can be plotted
    if len(knobs) >= 2:
        pick = ["lr", [k for k in knobs if k != "lr"][-1]] if "lr" in knobs else knobs[-2:][::-1]
        return tuple(pick)
    if knobs:
        return (knobs[0], "heads") if "heads" in varying else (knobs[0],)
    return tuple(t.names[1:2])


def fixed_indices(t: GridTables, shown: tuple[str, ...], at=None) -> dict[str, int]:
    """The index of each axis not in ``shown``: the value ``at[name]`` (exactly one of its values),
    else its first."""
    at = dict(at or {})
    fixed = {n: 0 for n in t.names if n not in shown}
    for name, value in at.items():
        short = knob(name, t.names, f"at={at!r}")
        if short in shown:
            raise ValueError(f"at={at!r}: {name!r} is plotted, it takes no fixed value")
        vals = t.values_of(short)
        if short in t.categorical():  # names: the same name
            hit = np.flatnonzero(vals == str(value))
        elif isinstance(value, int | float | np.number) and not isinstance(value, bool):
            hit = np.flatnonzero(np.isclose(vals, value, rtol=1e-9, atol=0.0))
        else:
            hit = np.array([], dtype=int)  # a name for a numeric knob: none of its values
        if not hit.size:
            raise ValueError(f"at={at!r}: {name}={value!r} is not one of its values {ticks(vals)}")
        fixed[short] = int(hit[0])
    return fixed


def fixed_text(t: GridTables, fixed: dict[str, int]) -> str:
    """'σ = 1, H = 4' for every fixed axis that has several values, or for H; '' if none."""
    parts = [
        f"{label(n)} = {_value(t.values_of(n)[i])}"
        for n, i in fixed.items()
        if len(t.values_of(n)) > 1 or n == "heads"
    ]
    return ", ".join(parts)


def describe_grid(meta: dict, t: GridTables, fixed: dict[str, int]) -> str:
    """The sweep's description with η₀ and n named as plotted knobs or at their fixed values, and
    a categorical knob (the optimiser, the data model, …) at its fixed name."""
    config = {s: dict(v) if isinstance(v, dict) else v for s, v in meta["config"].items()}
    for name in t.categorical():
        if name in fixed and name in GRID_KNOBS:
            section, field, _ = GRID_KNOBS[name]
            config[section][field] = str(t.values_of(name)[fixed[name]])
    text = describe(config)
    if "lr" in t.names:
        lr = f"{t.values_of('lr')[fixed['lr']]:g}" if "lr" in fixed else "η₀"
        text = text.replace(f"η = {config['optim']['lr']:g}", f"η = {lr}")
    if "n_train" in t.names:
        n = f"{t.values_of('n_train')[fixed['n_train']]:g}" if "n_train" in fixed else "grid"
        text = text.replace(f"n = {config['data']['n_train']} train", f"n = {n} train")
    return text


def shared_scales(t: GridTables, keep: list[str], fixeds: list[dict[str, int]]) -> dict:
    """Per metric, one colour scale (``color_norm``) over the tables ``t.take(keep, fixed)`` of every
    ``fixed`` in ``fixeds``: the figures of a categorical knob's values, compared on one scale."""
    tables = [t.take(keep, fixed)[0] for fixed in fixeds]
    return {m: color_norm([table[m] for table in tables], log_scaled(m)) for m in tables[0]}


def best_columns(test_loss: np.ndarray, n_div: np.ndarray) -> np.ndarray:
    """Per row, the column of the lowest final test loss among cells without divergence (-1: none)."""
    masked = np.where((n_div == 0) & np.isfinite(test_loss), test_loss, np.inf)
    best = np.argmin(masked, axis=1)
    return np.where(np.isfinite(masked.min(axis=1)), best, -1)


def log_scaled(metric: str) -> bool:
    """Whether figures draw ``metric`` on a log scale: its declaration's ``log_scale``."""
    declared = REGISTRY.get(metric)
    return declared is not None and declared.log_scale


def color_norm(tables, log: bool):
    """One colour scale for every array of ``tables`` (log where every finite value is > 0)."""
    finite = np.concatenate([np.ravel(a)[np.isfinite(np.ravel(a))] for a in tables])
    if log and finite.size and (finite > 0).all():
        return LogNorm(finite.min(), max(finite.max(), finite.min() * 1.001))
    lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
    return Normalize(lo, max(hi, lo + 0.01))  # a constant panel (no errors anywhere) still maps


def heatmap(ax, table: np.ndarray, n_div: np.ndarray, trials: int, norm, cmap=None):
    """``table`` (rows bottom to top, columns left to right) in ``norm``; cells where every trial
    diverged hatched, where some did marked ×. Returns the image (for a colorbar)."""
    cmap = (cmap or flare()).with_extremes(bad=MISSING_COLOR)
    im = ax.imshow(np.ma.masked_invalid(table), origin="lower", aspect="auto", cmap=cmap, norm=norm)
    for r, c in zip(*np.nonzero(n_div >= trials), strict=True):
        ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch="///", ec=DIVERGED_COLOR, lw=0))
    rows, cols = np.nonzero((n_div > 0) & (n_div < trials))
    ax.scatter(cols, rows, marker="x", s=28, color=DIVERGED_COLOR, linewidths=1.2)
    ax.grid(False)
    return im


def set_cell_ticks(ax, x_values, y_values, x_name: str, y_name: str, *, y_labels: bool = True) -> None:
    ax.set_xticks(range(len(x_values)), ticks(x_values), rotation=60, fontsize=7)
    ax.set_yticks(range(len(y_values)), ticks(y_values) if y_labels else [], fontsize=8)
    ax.set_xlabel(label(x_name))
    if y_labels:
        ax.set_ylabel(label(y_name))


def cell_legend(n_div: np.ndarray, trials: int, best_line: bool) -> list:
    """The legend of the cells: diverged (all, some) with their counts, and the best-η₀ line."""
    all_div, some = int((n_div >= trials).sum()), int(((n_div > 0) & (n_div < trials)).sum())
    handles = [
        Patch(
            fc=MISSING_COLOR, ec=DIVERGED_COLOR, hatch="///", lw=0, label=f"all trials diverged ({all_div})"
        ),
        Line2D([], [], ls="", marker="x", color=DIVERGED_COLOR, mew=1.2, label=f"some diverged ({some})"),
    ]
    if best_line:
        handles.append(
            Line2D(
                [],
                [],
                color="white",
                marker="o",
                mec="k",
                lw=1.8,
                ms=4,
                path_effects=OUTLINE,
                label="best η₀ per row (test loss)",
            )  # fmt: skip
        )
    return handles
