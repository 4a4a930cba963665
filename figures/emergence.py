"""The emergence of sparse attention in the form of Zucchet, d'Angelo, Lampinen, Chan (2025): the test
loss and the attention on the relevant token over training, one line per value of the grid's axis
(median over trials), and the emergence step against that value on log–log axes, with the fitted
power law (exponent and 95 % interval) beside the closed form t* of docs/frontier.md. The preset
``emergence`` (no axis) draws its trials' curves and their emergence steps.
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from dynamics.sweeps import emergence
from figures.sweep import save_figure
from figures.theme import DEEP, set_theme


def closed_form(data: dict, lr: float, copies=None, d=None, T=None, p=None) -> float:
    """t* = √(π/2)·√d·T/η steps (η = 2·lr, the ½-loss step), / B tied or / √B free copies, / the
    repetition factor √(p²d + (1 − p)²) (docs/frontier.md)."""
    d = data["d"] if d is None else d
    T = data["T"] if T is None else T
    B = data.get("copies", 1) if copies is None else copies
    p = data.get("repetition", 0.0) if p is None else p
    share = B if data.get("copy_logits") == "tied" else math.sqrt(B)
    return math.sqrt(math.pi / 2 * d) * T / (2 * lr) / share / math.sqrt(p * p * d + (1 - p) ** 2)


def repetition_factor(d: int):
    return lambda p: math.sqrt(p * p * d + (1 - p) ** 2)


def _load(source):
    from dynamics.api import load_results

    return source if hasattr(source, "curves") else load_results(source)


def _curves(ax_loss, ax_attn, steps, loss, attn, color, label):
    ax_loss.plot(steps, np.nanmedian(loss, axis=0), color=color, label=label)
    ax_attn.plot(steps, np.nanmedian(attn, axis=0), color=color, label=label)


def emergence_figure(source) -> Figure:
    """A grid over one emergence knob (T, d, copies, repetition), or the plain preset: a Figure."""
    set_theme()
    result = _load(source)
    grid = getattr(result, "grid", None)
    cfg = result.config
    data = {k: getattr(cfg.data.resolved(), k) for k in ("T", "d", "copies", "copy_logits", "repetition")}
    steps = np.asarray(result.steps)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
    found = emergence.grid_times(result)
    if grid is None:
        for trial in range(result.curves["test_loss"].shape[1]):
            c = DEEP[trial % len(DEEP)]
            _curves(axes[0], axes[1], steps, result.curves["test_loss"][0, trial][None],
                    result.curves["attn_relevant"][0, trial][None], c, f"trial {trial}")  # fmt: skip
        t_att, t_loss = found["attention"][0], found["loss"][0]
        axes[2].plot(np.arange(len(t_att)), t_att, "o", label="attention ≥ ½")
        axes[2].plot(np.arange(len(t_loss)), t_loss, "s", label="test loss ≤ ½ of its start")
        if cfg.optim.optimizer == "sgd":  # t* is online SGD's (none is known for Adam)
            axes[2].axhline(closed_form(data, cfg.optim.lr), color="k", ls="--", label="closed form t*")
        axes[2].set(xlabel="trial", ylabel="emergence step", title="emergence step per trial")
    else:
        (axis, values), = grid.axes  # fmt: skip
        for i, v in enumerate(values):
            k = (0, i)
            _curves(axes[0], axes[1], steps, result.curves["test_loss"][k], result.curves["attn_relevant"][k],
                    DEEP[i % len(DEEP)], f"{axis} = {v:g}")  # fmt: skip
        lr = cfg.optim.lr if cfg.optim.optimizer == "sgd" else None
        _times(axes[2], result, axis, np.asarray(values, float), data, lr)
    axes[0].set(yscale="log", xlabel="step", ylabel="test loss (p = 0)", title="test loss")
    axes[1].set(xlabel="step", ylabel="attention on the relevant token", title="attention", ylim=(0, 1.02))
    axes[0].legend(fontsize=8)
    axes[2].legend(fontsize=8)
    shown = {"T": f"T = {data['T']}", "d": f"d = {data['d']}", "copies": f"B = {data['copies']}",
             "repetition": f"p = {data['repetition']:g}"}  # fmt: skip
    if grid is not None:
        shown[grid.axes[0][0]] = f"{grid.axes[0][0]} varied"
    fig.suptitle(
        f"emergence of sparse attention: {cfg.optim.optimizer} lr {cfg.optim.lr:g}, "
        f"{', '.join(shown.values())} ({data['copy_logits']} copies)"
    )
    return fig


def _times(ax, result, axis: str, values: np.ndarray, data: dict, lr: float | None) -> None:
    """Emergence steps against the axis (log–log), every trial a dot, the fits and the closed form
    (``lr`` None: not drawn), the axis's values as its ticks."""
    transform = repetition_factor(data["d"]) if axis == "repetition" else None
    x = values if transform is None else np.array([transform(v) for v in values])
    for kind, marker, color in (("attention", "o", DEEP[0]), ("loss", "s", DEEP[1])):
        t = emergence.grid_times(result)[kind][0]  # (n_values, trials)
        ax.plot(np.repeat(x, t.shape[1]), t.ravel(), marker, color=color, alpha=0.4, ms=4)
        try:
            fit = emergence.grid_fit(result, axis, kind, transform=transform)
        except ValueError:
            continue
        lo, hi = fit.ci
        ax.plot(x, fit(x), color=color, label=f"{_SHORT[kind]} ∝ x^{fit.exponent:.2f} [{lo:.2f}, {hi:.2f}]")
    if lr is not None:
        ax.plot(x, [closed_form(data, lr, **{_KEYS[axis]: v}) for v in values], "k--", label="closed form t*")
    label = "√(p²d + (1 − p)²)" if axis == "repetition" else axis
    ax.set(
        xscale="log", yscale="log", xlabel=label, ylabel="emergence step", title=f"emergence step vs {label}"
    )
    ax.set_xticks(x, [f"{v:.3g}" for v in x])
    ax.xaxis.set_minor_formatter(NullFormatter())  # the values alone (log minor labels overlap)


_KEYS = {"T": "T", "d": "d", "copies": "copies", "repetition": "p"}
_SHORT = {"attention": "t_att", "loss": "t_loss"}
_LETTER = {"T": "T", "d": "d", "copies": "B", "repetition": "p"}
_SYMBOL = {"T": "T", "d": "d", "copies": "B", "repetition": "√(p²d + (1 − p)²)"}


def closed_exponent(axis: str, copy_logits: str = "free") -> float:
    """The closed form's exponent along ``axis``: T¹, d^½, B⁻¹ tied or B^−½ free copies, and the
    repetition factor's −1."""
    return {"T": 1.0, "d": 0.5, "repetition": -1.0}.get(axis, -1.0 if copy_logits == "tied" else -0.5)


def _steps(t: np.ndarray) -> str:
    """Trials' emergence steps as 'mean ± std (emerged/trials)', or 'none (0/trials)'."""
    done = t[np.isfinite(t)]
    if not done.size:
        return f"none (0/{t.size})"
    return f"{done.mean():.0f} ± {done.std():.0f} ({done.size}/{t.size})"


def report(source) -> list[str]:
    """A few lines beside the figure: per value of the grid's axis (or for the one setting) the
    mean emergence steps over the trials that emerged and the closed form t* (online SGD; none is
    known for Adam), then for a grid the fitted exponents with their 95 % intervals beside the
    closed form's."""
    result = _load(source)
    cfg, grid = result.config, getattr(result, "grid", None)
    data = {k: getattr(cfg.data.resolved(), k) for k in ("T", "d", "copies", "copy_logits", "repetition")}
    sgd = cfg.optim.optimizer == "sgd"
    found = emergence.grid_times(result)
    if grid is None:
        at = f"T = {data['T']}, d = {data['d']}, B = {data['copies']}, p = {data['repetition']:g}"
        points = [((0,), at, {})]
    else:
        (axis, values), = grid.axes  # fmt: skip
        points = [((0, i), f"{_LETTER[axis]} = {v:g}", {_KEYS[axis]: v}) for i, v in enumerate(values)]
    lines = []
    for k, at, where in points:
        star = f"; t*/η = {closed_form(data, cfg.optim.lr, **where):.0f}" if sgd else ""
        lines.append(f"{at}: t_att {_steps(found['attention'][k])}, t_loss {_steps(found['loss'][k])}{star}")
    if grid is None:
        return lines
    transform = repetition_factor(data["d"]) if axis == "repetition" else None
    fits = []
    for kind in emergence.KINDS:
        try:
            fit = emergence.grid_fit(result, axis, kind, transform=transform)
        except ValueError:
            # a run above the threshold at step 0 (B/T >= 1/2) emerged but has no log to fit
            fits.append(f"{_SHORT[kind]}: too few to fit (needs 3+ runs emerging after step 0, at 2+ values)")
            continue
        lo, hi = fit.ci
        fits.append(f"{_SHORT[kind]} ∝ {_SYMBOL[axis]}^{fit.exponent:.2f} [{lo:.2f}, {hi:.2f}]")
    known = f"closed form {_SYMBOL[axis]}^{closed_exponent(axis, data['copy_logits']):g}"
    lines.append(", ".join(fits) + f"; {known}" + ("" if sgd else " (online SGD's; none for Adam)"))
    return lines


def plot_emergence(results_dir: Path, stem: Path) -> list[Path]:
    """The figure of an emergence preset's saved results."""
    return save_figure(emergence_figure(results_dir), stem)
