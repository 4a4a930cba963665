"""The emergence of sparse attention in the form of Zucchet, d'Angelo, Lampinen, Chan (2025): the test
loss and the attention on the relevant token over training, one line per value of the grid's axis
(median over trials), and the emergence step against that value on log–log axes, with the fitted
power law (exponent and 95 % interval, read from the result's headline) beside the closed form t*
of docs/frontier.md. The preset ``emergence`` (no axis) draws its own question: the test loss and
the attention mass against the step, every trial and their median, with the headline's mean t_att
and t_loss marked beside the closed form t*, and each trial's emergence steps.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullFormatter

from dynamics.sweeps import emergence
from dynamics.sweeps.emergence import closed_exponent, closed_form, repetition_factor  # noqa: F401  (their old home)
from dynamics.sweeps.headline import emergence_fits, emergence_times
from figures.sweep import save_figure, train_label
from figures.theme import DEEP, set_theme


def _load(source):
    from dynamics.api import load_results

    return source if hasattr(source, "curves") else load_results(source)


def _headline(result, compute) -> dict:
    """The result's stored headline (``result.headline()``); ``compute(result)`` for an object
    without one (a hand-made result in a test or a notebook)."""
    return result.headline() if hasattr(result, "headline") else compute(result)


def _curves(ax_loss, ax_attn, steps, loss, attn, color, label):
    ax_loss.plot(steps, np.nanmedian(loss, axis=0), color=color, label=label)
    ax_attn.plot(steps, np.nanmedian(attn, axis=0), color=color, label=label)


def emergence_figure(source) -> Figure:
    """A grid over one emergence knob (T, d, copies, repetition), or the plain preset: a Figure."""
    set_theme()
    result = _load(source)
    grid = getattr(result, "grid", None)
    cfg = result.config
    data = emergence.data_of(cfg)
    if grid is None:
        return _preset_figure(result, data)
    steps = np.asarray(result.steps)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
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
    shown = _setting(data)
    shown[axis] = f"{axis} varied"
    fig.suptitle(
        f"emergence of sparse attention: {cfg.optim.optimizer} lr {cfg.optim.lr:g}, "
        f"{', '.join(shown.values())} ({data['copy_logits']} copies)"
    )
    return fig


def _setting(data: dict) -> dict[str, str]:
    return {"T": f"T = {data['T']}", "d": f"d = {data['d']}", "copies": f"B = {data['copies']}",
            "repetition": f"p = {data['repetition']:g}"}  # fmt: skip


def _preset_figure(result, data: dict) -> Figure:
    """One setting (the preset ``emergence``): the test loss and the attention on the relevant token
    against the step, a thin line per trial and their median, the mean emergence steps t_loss and
    t_att of the headline marked (band: ± 1 std), the closed form t* (online SGD) dotted; and each
    trial's emergence steps."""
    cfg, steps = result.config, np.asarray(result.steps)
    h = int(np.asarray(getattr(result, "heads", [1]))[0])  # the first H (the preset has one)
    head = _headline(result, emergence_times)
    t_att, t_loss = head.get(f"t_att_H{h}", {}), head.get(f"t_loss_H{h}", {})
    star = t_att.get("closed_form")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), layout="constrained")
    panels = ((axes[0], "test_loss", t_loss, DEEP[1]), (axes[1], "attn_relevant", t_att, DEEP[0]))
    for ax, name, mark, color in panels:
        values = np.asarray(result.curves[name][0])  # (trials, L)
        for trial in values:
            ax.plot(steps, trial, color=color, lw=0.8, alpha=0.35)
        median = np.nanmedian(values, axis=0)
        ax.plot(steps, median, color=color, lw=2.2, label=f"median of {len(values)} trials")
        if mark.get("value") is not None:
            t, sd = mark["value"], mark.get("std") or 0.0
            ax.axvspan(t - sd, t + sd, color="0.5", alpha=0.15, lw=0)
            ax.axvline(t, color="k", lw=1.2, label=f"{mark['label'].split(' ')[0]} = {t:.0f} ± {sd:.0f}")
        if star is not None:
            ax.axvline(star, color="k", ls=":", lw=1.2, label=f"closed form t* = {star:.0f}")
    axes[0].set(yscale="log", xlabel="step", ylabel="test loss (p = 0)", title="test loss; t_loss: halved")
    axes[1].axhline(emergence.THRESHOLD, color="0.4", ls="--", lw=1)
    axes[1].set(xlabel="step", ylabel="attention on the relevant token", ylim=(0, 1.02),
                title=f"attention mass; t_att: ≥ {emergence.THRESHOLD:g}")  # fmt: skip
    found = emergence.times(steps, result.curves)
    trials = np.arange(found["attention"].shape[1])
    axes[2].plot(trials, found["attention"][0], "o", color=DEEP[0], label="t_att")
    axes[2].plot(trials, found["loss"][0], "s", color=DEEP[1], label="t_loss")
    if star is not None:
        axes[2].axhline(star, color="k", ls=":", label="closed form t*")
    axes[2].set(xlabel="trial", ylabel="emergence step", title="emergence step per trial")
    axes[2].xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in axes:
        ax.legend(fontsize=8)
    mean = "never" if t_att.get("value") is None else f"{t_att['value']:.0f} ± {t_att.get('std') or 0:.0f}"
    fig.suptitle(
        f"{cfg.name or 'emergence'}: {', '.join(_setting(data).values())} ({data['copy_logits']} copies), "
        f"{train_label(cfg.to_dict())}, {cfg.optim.optimizer} lr {cfg.optim.lr:g}; "
        f"t_att {mean} ({t_att.get('n', 0)}/{len(trials)} trials)"
        + (f", closed form t* = {star:.0f}" if star is not None else "")
    )
    return fig


def _times(ax, result, axis: str, values: np.ndarray, data: dict, lr: float | None) -> None:
    """Emergence steps against the axis (log–log), every trial a dot, the fits of the headline and
    the closed form (``lr`` None: not drawn), the axis's values as its ticks."""
    transform = repetition_factor(data["d"]) if axis == "repetition" else None
    x = values if transform is None else np.array([transform(v) for v in values])
    fits = _headline(result, emergence_fits)
    for kind, marker, color in (("attention", "o", DEEP[0]), ("loss", "s", DEEP[1])):
        t = emergence.grid_times(result)[kind][0]  # (n_values, trials)
        ax.plot(np.repeat(x, t.shape[1]), t.ravel(), marker, color=color, alpha=0.4, ms=4)
        fit = fits.get(f"{_SHORT[kind]}_exponent", {})
        if fit.get("value") is None:
            continue
        k, (lo, hi) = fit["value"], fit["ci"]
        label = f"{_SHORT[kind]} ∝ x^{k:.2f} [{lo:.2f}, {hi:.2f}]"
        ax.plot(x, fit["prefactor"] * x**k, color=color, label=label)
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
    data = emergence.data_of(cfg)
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
    head = _headline(result, emergence_fits)
    fits = []
    for kind in emergence.KINDS:
        fit = head.get(f"{_SHORT[kind]}_exponent", {})
        if fit.get("value") is None:
            fits.append(f"{_SHORT[kind]}: {fit.get('about', 'too few to fit')}")
            continue
        lo, hi = fit["ci"]
        fits.append(f"{_SHORT[kind]} ∝ {_SYMBOL[axis]}^{fit['value']:.2f} [{lo:.2f}, {hi:.2f}]")
    known = f"closed form {_SYMBOL[axis]}^{closed_exponent(axis, data['copy_logits']):g}"
    lines.append(", ".join(fits) + f"; {known}" + ("" if sgd else " (online SGD's; none for Adam)"))
    return lines


def plot_emergence(results_dir: Path, stem: Path) -> list[Path]:
    """The figure of an emergence preset's saved results."""
    return save_figure(emergence_figure(results_dir), stem)
