"""Plateaus and drops of a training-loss curve: the flat stretches saddle-to-saddle dynamics sit on,
and the falls from one to the next.

The rule (``find``) reads the curve as the loss figures draw it, on log-log axes: y = log(loss)
against u = log(1 + step). Multiplying the loss by a constant shifts y and changes nothing: the
rule is scale-free. U is the run's span of log-steps (u at its last logged step minus u at its
first); the defaults are in brackets.

1. Slope: at each logged point, the least-squares line of y against u over the points within
   ``window`` · U [1 %] on either side (and at least two each side where the curve has them):
   its slope, and its value there ŷ (the smoothed log-loss).
2. Flat: a point whose |slope| is at most ``flat`` [0.2] times the steepest fall of ŷ over any
   stretch of ``min_span`` · U [2 %] (per unit of u), clipped to [``flat``, 1] × ``max_slope``
   [0.5]: a plateau never falls faster than loss ∝ step^-``max_slope``, and a curve that nowhere
   falls that fast is measured against it.
3. Plateau: a maximal run of flat points. Two runs are one plateau when ŷ changes by less than
   ``depth`` [0.2] from the last point of one to the first of the next and the line over the
   two and what lies between is flat. A plateau spans at least ``min_span`` · U or ``min_span``
   of the run's steps (a rest late in a long run is short on log axes but not in steps), and at
   least ``min_points`` [4] logged points; shorter ones are left out, and their neighbours joined
   by the same test. Its level is its median loss.
4. Drop: the passage between two consecutive plateaus when ŷ falls by at least ``depth`` across
   it (the loss by at least 18 %): from the last step of the plateau before (``start``, loss
   ``before``, smoothed) to the first step of the one after (``stop``, ``after``), and ``step``,
   the first logged step of the passage where ŷ is halfway down.

So a curve whose log-log slope only grows or only shrinks (exponential decay, power-law decay) has
at most one plateau and no drop; a fall from the first logged step (no plateau before it) or one
that never flattens (no plateau after it) is no drop; a rise is never one. A curve that converges
to a floor exponentially (a step on log-log axes) can have one. The curve is read up to its first
point that is not a finite positive loss (the NaN after a divergence, or a loss of exactly 0).
numpy, no JAX.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from dynamics.errors import ConfigError

FLAT = 0.2  # a plateau's |slope| at most this share of the steepest stretch's
DEPTH = 0.2  # a drop lowers the log-loss by at least this (the loss by 18 %)
WINDOW = 0.01  # the slope's half-window, a share of the run's log-steps
MIN_SPAN = 0.02  # a plateau's least length, a share of the run's log-steps
MIN_POINTS = 4  # a plateau's least number of logged points
MAX_SLOPE = 0.5  # a plateau's |slope| at most this (the loss falling slower than step^-0.5)

# the rule in one line, for the command line's help
RULE = (
    f"drops: mean per trial of falls by >= {DEPTH:g} in log train loss between two plateaus "
    f"(log-log slope <= {FLAT:g} × the steepest and <= {MAX_SLOPE:g}, >= {MIN_SPAN:.0%} of the log-steps)"
)


@dataclass(frozen=True)
class Plateau:
    start: int  # first logged step of the stretch
    stop: int  # last logged step of the stretch
    level: float  # median loss over it


@dataclass(frozen=True)
class Drop:
    start: int  # last step of the plateau before
    stop: int  # first step of the plateau after
    step: int  # first logged step where the smoothed log-loss is halfway down
    before: float  # the smoothed loss at ``start``
    after: float  # the smoothed loss at ``stop``


class Staircase(NamedTuple):
    plateaus: list[Plateau]
    drops: list[Drop]


class Lines:
    """Least-squares lines of ``y`` against ``u`` (both (L,), u increasing) over runs of
    consecutive points, from prefix sums: ``slope(lo, hi)`` over the points lo … hi − 1 (arrays
    of indices, at least two points each)."""

    def __init__(self, u: np.ndarray, y: np.ndarray):
        self.u0, self.y0 = u.mean(), y.mean()
        uc, yc = u - self.u0, y - self.y0  # centred: the sums' differences below cancel less
        self.sums = [np.concatenate([[0.0], np.cumsum(v)]) for v in (uc, yc, uc * uc, uc * yc)]

    def _fit(self, lo, hi):  # (slope, mean u, mean y) over lo … hi − 1, centred
        su, sy, suu, suy = (c[hi] - c[lo] for c in self.sums)
        n = hi - lo
        return (suy - su * sy / n) / (suu - su * su / n), su / n, sy / n

    def slope(self, lo, hi):
        return self._fit(lo, hi)[0]

    def local(self, u: np.ndarray, half: float, least: int = 2) -> tuple[np.ndarray, np.ndarray]:
        """(slope, fitted value) at each point of the line over the points within ``half`` of it,
        and at least ``least`` on either side where there are; each (L,)."""
        L, idx = len(u), np.arange(len(u))
        lo = np.minimum(np.searchsorted(u, u - half, "left"), np.maximum(idx - least, 0))
        hi = np.maximum(np.searchsorted(u, u + half, "right"), np.minimum(idx + least + 1, L))
        slope, um, ym = self._fit(lo, hi)
        return slope, ym + slope * (u - self.u0 - um) + self.y0


class _Curve:
    """One curve's log-loss ``y`` against log-steps ``u`` (both (L,)) and what the rule reads of it:
    the local slopes and smoothed values, the flat limit of a slope, the plateaus' joins."""

    def __init__(self, u, y, U: float, *, flat, max_slope, depth, window, min_span):
        self.u, self.y, self.depth, self.span = u, y, depth, min_span * U
        self.lines = Lines(u, y)
        self.slope, self.fit = self.lines.local(u, window * U)  # each (L,)
        ahead = np.searchsorted(u, u + self.span, "left")  # the first point at least `span` later
        has = ahead < len(u)
        fall = (self.fit[has] - self.fit[ahead[has]]) / (u[ahead[has]] - u[has])
        # `flat` times the steepest fall's rate, within [flat, 1] × `max_slope`
        self.limit = float(np.clip(flat * np.max(fall, initial=0.0), flat * max_slope, max_slope))

    def runs(self) -> list[tuple[int, int]]:
        """The maximal runs (first, last index) of flat points."""
        calm = np.abs(self.slope) <= self.limit  # (L,)
        edges = np.flatnonzero(np.diff(np.concatenate([[0], calm.astype(np.int8), [0]])))
        return [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2], strict=True)]

    def passage(self, before: tuple[int, int], after: tuple[int, int]) -> tuple[float, float]:
        """The smoothed log-loss at the last point of the plateau ``before`` and at the first of
        ``after`` (index runs)."""
        return float(self.fit[before[1]]), float(self.fit[after[0]])

    def join(self, runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Consecutive runs met by a passage of less than ``depth`` whose union is flat as a whole
        (its line's slope within the limit) as one."""
        out: list[tuple[int, int]] = []
        for a, b in runs:
            if out:
                before, after = self.passage(out[-1], (a, b))
                whole = abs(self.lines.slope(out[-1][0], b + 1)) <= self.limit
                if abs(before - after) < self.depth and whole:
                    out[-1] = (out[-1][0], b)
                    continue
            out.append((a, b))
        return out


def find(
    steps,
    loss,
    *,
    flat: float = FLAT,
    max_slope: float = MAX_SLOPE,
    depth: float = DEPTH,
    window: float = WINDOW,
    min_span: float = MIN_SPAN,
    min_points: int = MIN_POINTS,
) -> Staircase:
    """The plateaus and drops of one run's loss curve (``steps`` (L,) ascending, ``loss`` (L,)) by
    the module's rule."""
    steps, loss = np.asarray(steps), np.asarray(loss, np.float64)
    if steps.shape != loss.shape or steps.ndim != 1:
        raise ConfigError(f"steps {steps.shape} and loss {loss.shape} must be two (L,) arrays")
    if steps.size and (steps[0] < 0 or np.any(np.diff(steps) <= 0)):
        raise ConfigError(f"steps must be increasing logged steps >= 0, got {_brief(steps)}")
    _check_rule(
        flat=flat, max_slope=max_slope, depth=depth, window=window, min_span=min_span, min_points=min_points
    )
    good = np.isfinite(loss) & (loss > 0)
    L = int(np.argmin(good)) if not good.all() else len(loss)  # up to the first NaN or zero
    u = np.log1p(np.asarray(steps, np.float64))
    U = float(u[-1] - u[0]) if len(u) else 0.0
    if L < max(min_points, 2) or U <= 0:
        return Staircase([], [])
    rule = {"flat": flat, "max_slope": max_slope, "depth": depth, "window": window, "min_span": min_span}
    c = _Curve(u[:L], np.log(loss[:L]), U, **rule)
    joined = c.join(c.runs())
    run = min_span * float(steps[-1] - steps[0])  # a plateau's least length in steps
    long = [(a, b) for a, b in joined if c.u[b] - c.u[a] >= c.span or steps[b] - steps[a] >= run]
    kept = c.join([(a, b) for a, b in long if b - a + 1 >= min_points])
    found = [Plateau(int(steps[a]), int(steps[b]), float(np.median(loss[a : b + 1]))) for a, b in kept]
    falls = []
    for p, q in zip(kept, kept[1:], strict=False):
        before, after = c.passage(p, q)
        if before - after >= depth:
            a, b = p[1], q[0]
            down = np.flatnonzero(c.fit[a + 1 : b + 1] <= (before + after) / 2)  # halfway
            half = a + 1 + int(down[0]) if down.size else b
            ends = float(np.exp(before)), float(np.exp(after))
            falls.append(Drop(int(steps[a]), int(steps[b]), int(steps[half]), *ends))
    return Staircase(found, falls)


def _check_rule(*, flat, max_slope, depth, window, min_span, min_points) -> None:
    """A one-line ``ConfigError`` for a rule setting out of its range."""
    for name, value, lo, hi in (("flat", flat, 0, 1), ("window", window, 0, 1), ("min_span", min_span, 0, 1)):
        if not _real(value) or not lo < value < hi:
            raise ConfigError(f"plateaus: {name}={value!r} must be in ({lo}, {hi}), a share")
    if not _real(depth) or not 0 < depth < np.inf:
        raise ConfigError(f"plateaus: depth={depth!r} must be > 0 (a fall of log-loss)")
    if not _real(max_slope) or not 0 < max_slope < np.inf:
        raise ConfigError(f"plateaus: max_slope={max_slope!r} must be > 0 (a slope of log-loss per log-step)")
    if isinstance(min_points, bool) or not isinstance(min_points, int | np.integer) or min_points < 2:
        raise ConfigError(f"plateaus: min_points={min_points!r} must be an integer >= 2")


def _real(x) -> bool:
    return (
        isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool) and np.isfinite(x)
    )


def _brief(a: np.ndarray) -> str:
    return np.array2string(a, threshold=8, edgeitems=3).replace("\n", "")


def summary(steps, loss, **rule) -> dict[str, list[dict[str, Any]]]:
    """One run's ``{"plateaus": [{"start", "stop", "level"}, …], "drops": [{"start", "stop",
    "step", "before", "after"}, …]}`` (results.json's summary, per trial)."""
    found = find(steps, loss, **rule)
    return {
        "plateaus": [vars(p) for p in found.plateaus],
        "drops": [vars(d) for d in found.drops],
    }


def mean_drops(per_trial: list[dict], ok) -> float | None:
    """The mean number of drops over the trials marked ``ok`` (those that did not diverge); None
    when none is. ``per_trial``: ``summary`` of each trial."""
    counts = [len(p["drops"]) for p, keep in zip(per_trial, ok, strict=True) if keep]
    return float(np.mean(counts)) if counts else None


def columns(row: dict[str, Any]) -> dict[str, Any]:
    """A summary row's drops and plateaus as frame cells: ``drops`` a number (NaN where every
    trial diverged), ``plateaus`` the per-trial list as a JSON string."""
    drops = row.get("drops")
    return {"drops": np.nan if drops is None else drops, "plateaus": json.dumps(row["plateaus"])}
