"""Headline numbers: the few numbers a run is about, as data (``results.json``'s ``headline``).

A headline is a flat dict, name -> entry; an entry is ``{"label", "value"}`` and, where they
apply, ``std`` (over the trials), ``ci`` ([low, high], a 95 % interval), ``n`` (the trials the
number is over), ``closed_form`` (the theory's value beside the measured one), ``unit`` and
``about`` (one line on what the number is). A number that is per H has one entry per H, its name
ending in ``_H<h>`` and its label in ``(H = h)``. A value that cannot be had (every trial
diverged, none emerged) is None, never a guess.

Which function computes a preset's headline is declared once, in the preset's declaration
(``dynamics.config.presets.Preset.headline``, a dotted ``"module:function"`` path loaded on first
use, as a part's ``impl``): a sweep whose config carries no preset's name gets ``final_losses``. Each theory
diagnostic of the run adds its own numbers (``DIAGNOSTIC_HEADLINES``); a grid's headline is
``grid_headline``'s.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from dynamics.config.presets import GENERIC_HEADLINE, PRESETS
from dynamics.errors import ConfigError
from dynamics.parts.metrics import HEAD_COUNT
from dynamics.sweeps import emergence

Headline = dict[str, dict[str, Any]]


def entry(label: str, value, *, about: str | None = None, **more: Any) -> dict[str, Any]:
    """One headline number: ``value`` (None where unknown) with its ``label`` and ``more`` of
    ``std``, ``ci``, ``n``, ``closed_form``, ``unit`` (numpy numbers made plain, NaN made None)."""
    out: dict[str, Any] = {"label": label, "value": _plain(value)}
    out.update({k: _plain(v) for k, v in more.items() if v is not None})
    if about:
        out["about"] = about
    return out


def _plain(v):
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple | np.ndarray):
        return [_plain(x) for x in v]
    if isinstance(v, str) or v is None:
        return v
    if isinstance(v, bool | np.bool_):
        return bool(v)
    if isinstance(v, int | np.integer):
        return int(v)
    v = float(v)
    return v if math.isfinite(v) else None


def mean_std(values) -> tuple[float | None, float | None, int]:
    """(mean, std, count) of the finite ``values``; (None, None, 0) when none is."""
    v = np.asarray(values, np.float64).ravel()
    v = v[np.isfinite(v)]
    return (float(v.mean()), float(v.std()), int(v.size)) if v.size else (None, None, 0)


def final_losses(result) -> Headline:
    """The plain sweep's headline: per H, the final train and test loss, mean ± std over the trials
    that did not diverge (``result.summary()``'s numbers)."""
    out: Headline = {}
    for row in result.summary():
        h, ok = row[HEAD_COUNT], row["trials"] - row["n_diverged"]
        for name, word in (("train_loss", "train loss"), ("test_loss", "test loss")):
            cell = row[name]
            out[f"{name}_H{h}"] = entry(
                f"{word} (H = {h})",
                cell["mean"],
                std=cell["std"],
                n=ok,
                about=f"final {word}, mean ± std over the trials that did not diverge",
            )
    return out


def emergence_times(result) -> Headline:
    """The emergence presets' headline: per H, the emergence steps t_att (attention on the relevant
    token ≥ ½) and t_loss (test loss ≤ ½ of its start), mean ± std over the trials that emerged,
    and for online SGD the closed form t* beside them (``emergence.closed_form``)."""
    found = emergence.times(result.steps, result.curves)  # each (n_heads, trials)
    cfg = result.config
    sgd = cfg.optim.optimizer == "sgd"
    star = emergence.closed_form(emergence.data_of(cfg), cfg.optim.lr) if sgd else None
    out: Headline = {}
    for i, h in enumerate(np.asarray(result.heads).tolist()):
        for kind, short in (("attention", "t_att"), ("loss", "t_loss")):
            mean, std, n = mean_std(found[kind][i])
            out[f"{short}_H{h}"] = entry(
                f"{short} (H = {h})",
                mean,
                std=std,
                n=n,
                closed_form=star if kind == "attention" else None,
                unit="steps",
                about=f"emergence step, mean ± std over the {n} of {found[kind].shape[1]} trials that emerge",
            )
    return out


def diagnostics_headline(result) -> Headline:
    """Each theory diagnostic's numbers per H, from the run's diagnostics summary
    (``result.extra["diagnostics"]``), as ``DIAGNOSTIC_HEADLINES`` declares them; {} without one."""
    doc = result.extra.get("diagnostics")
    if not isinstance(doc, dict):
        return {}
    heads = doc.get("heads", [])
    out: Headline = {}
    for diagnostic in doc.get("names", []):
        for key, label, about in DIAGNOSTIC_HEADLINES.get(diagnostic, ()):
            for h, value in zip(heads, doc.get(key) or [], strict=False):
                out[f"{key}_H{h}"] = entry(f"{label} (H = {h})", value, about=about)
    return out


# Each theory diagnostic's headline: (key of its summary, label, what it is), per H.
DIAGNOSTIC_HEADLINES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "sharpness": (
        ("eos_ratio_max", "peak η·λ_max", "largest η(H)·λ_max over the steps and trials (2: GD's edge)"),
    ),
    "kernel": (("kernel_distance_final", "kernel distance", "final 1 − cos(K₀, K_t), mean over trials"),),
    "maxmargin": (
        (
            "maxmargin_cos_final",
            "cos(ΣW_h, W^mm)",
            "final alignment with the max-margin W^mm, mean over trials",
        ),
    ),
}


def kept(result, compute: Callable[[Any], Headline]) -> Headline:
    """``result``'s stored headline (``extra["headline"]``: results.json's, or computed before), else
    ``compute(result)``, kept in ``extra`` when the result is complete (a partial one still grows)."""
    stored = result.extra.get("headline")
    if isinstance(stored, dict):
        return stored
    found = compute(result)
    if result.complete:
        result.extra["headline"] = found
    return found


def load(path: str) -> Callable[[Any], Headline]:
    """The headline function a dotted ``"module:function"`` path names."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def function_of(name: str | None) -> str:
    """The dotted path of the headline function of the preset ``name``: its declaration's
    (``PRESETS[name].headline``), else the plain sweep's (a user's name, no preset)."""
    return PRESETS[name].headline if name in PRESETS else GENERIC_HEADLINE


def compute(result) -> Headline:
    """A sweep's headline: its preset's numbers (``function_of(config.name)``) and its theory
    diagnostics'. A preset's numbers that this run cannot give (its parameters not saved, its per-
    head curves off) fall back to the plain sweep's, with ``note`` saying why."""
    path = function_of(result.config.name)
    try:
        out = load(path)(result)
    except (ConfigError, ValueError, KeyError) as err:
        if path == GENERIC_HEADLINE:
            raise
        out = final_losses(result)
        out["note"] = entry("note", None, about=f"{result.config.name}'s own headline unavailable: {err}")
    out.update(diagnostics_headline(result))
    return out


def grid_headline(result) -> Headline:
    """A grid's headline: for a one-axis grid with emergence times, the fitted exponent of t_att and
    t_loss against the axis with its 95 % interval (``emergence.grid_fit``); for every grid, per H,
    the best final test loss over the grid points and where it is."""
    out = emergence_fits(result) if emergence.logged(result.curves) else {}
    names = [n for n, _ in result.grid.axes]
    summary = result.summary()
    if not summary or "test_loss" not in summary[0]:  # curves without a test loss: no best point
        return out
    for h in np.asarray(result.heads).tolist():
        rows = [r for r in summary if r[HEAD_COUNT] == h and r["test_loss"]["mean"] is not None]
        if not rows:
            out[f"best_test_loss_H{h}"] = entry(f"best test loss (H = {h})", None, about="every run diverged")
            continue
        best = min(rows, key=lambda r: r["test_loss"]["mean"])
        at = ", ".join(f"{n} = {_show(best[n])}" for n in names)
        out[f"best_test_loss_H{h}"] = entry(
            f"best test loss (H = {h})", best["test_loss"]["mean"], std=best["test_loss"]["std"],
            at={n: best[n] for n in names}, about=f"lowest final test loss over the grid, at {at}",
        )  # fmt: skip
    return out


def _show(value) -> str:
    """A grid axis's value as text: a number by ``g``, anything else (a categorical value) as it is."""
    return f"{value:g}" if isinstance(value, int | float) and not isinstance(value, bool) else str(value)


def emergence_fits(result) -> Headline:
    """A one-axis grid's emergence exponents: t_att and t_loss ∝ x^k against the axis's values (the
    repetition factor of p for a ``repetition`` axis), k with its 95 % interval and the prefactor
    (``emergence.grid_fit``), the closed form's exponent beside it; value None where too few runs
    emerged to fit. {} for a grid of several axes."""
    names = [n for n, _ in result.grid.axes]
    if len(names) != 1:
        return {}
    axis, data = names[0], emergence.data_of(result.config)
    transform = emergence.repetition_factor(data["d"]) if axis == "repetition" else None
    known = emergence.closed_exponent(axis, data["copy_logits"])
    out: Headline = {}
    for kind, short in (("attention", "t_att"), ("loss", "t_loss")):
        label = f"{short} exponent in {axis}"
        try:
            fit = emergence.grid_fit(result, axis, kind, transform=transform)
        except ValueError:  # a run above the threshold at step 0 emerged but has no log to fit
            out[f"{short}_exponent"] = entry(
                label, None, closed_form=known,
                about="too few to fit (needs 3+ runs emerging after step 0, at 2+ values)",
            )  # fmt: skip
            continue
        out[f"{short}_exponent"] = entry(
            label, fit.exponent, ci=list(fit.ci), n=fit.n, prefactor=fit.prefactor, closed_form=known,
            about=f"{short} ≈ c·x^k against {axis}, least squares on log–log axes, 95 % interval of k",
        )  # fmt: skip
    return out


def format_line(headline: Headline | None, width: int = 4) -> str:
    """``headline: corr(W, W^mm) 0.998 ± 0.001, ‖W‖ 12.1 ± 0.3`` (``width`` significant digits), the
    per-H numbers of one kind together (``test loss: H=1 0.24 ± 0.01, H=4 0.12 ± 0.02``, kinds
    apart by "; "); '' for an empty or missing headline."""
    groups: dict[str, list[str]] = {}
    for e in (headline or {}).values():
        if not isinstance(e, dict) or "value" not in e or e.get("label") == "note":
            continue
        label, _, h = str(e["label"]).partition(" (H = ")
        cell = _cell(e, width)
        groups.setdefault(label, []).append(f"H={h.rstrip(')')} {cell}" if h else cell)
    if not groups:
        return ""
    parts = [f"{label} {cells[0]}" if not cells[0].startswith("H=") else f"{label}: {', '.join(cells)}"
             for label, cells in groups.items()]  # fmt: skip
    return "headline: " + "; ".join(parts)


def _cell(e: dict[str, Any], width: int) -> str:
    """An entry's value as text: 'n/a' where unknown, '± std', '[low, high]', its unit and the
    closed form beside it where it has them."""
    v = e["value"]
    text = "n/a" if v is None else f"{v:.{width}g}"
    if v is not None and e.get("std") is not None:
        text += f" ± {e['std']:.2g}"
    if v is not None and e.get("ci") is not None:
        text += f" [{e['ci'][0]:.{width - 1}g}, {e['ci'][1]:.{width - 1}g}]"
    if e.get("unit") and v is not None:
        text += f" {e['unit']}"
    if e.get("closed_form") is not None:
        text += f" (closed form {e['closed_form']:.{width}g})"
    return text
