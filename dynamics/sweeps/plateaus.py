"""Plateaus and drops of a training-loss curve: the flat stretches saddle-to-saddle dynamics sit on,
and the steps where the loss leaves one for the next.

The rule (``find``): a plateau is a maximal stretch of consecutive logged points whose losses all
lie within ``tol`` (relative, default 1 %) of the stretch's first loss, spanning at least
``min_span`` steps (default: 5 % of the run's steps, and at least 2 logged intervals). Its level is
the median loss over the stretch. A drop is the passage from one plateau to the next lower one:
from the last step of the first to the first step of the second, with the levels before and after.
A stretch at the end of a run counts (a run may end on a plateau); NaN points (after a divergence)
end the search. numpy only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Plateau:
    start: int  # first logged step of the stretch
    stop: int  # last logged step of the stretch
    level: float  # median loss over it


@dataclass(frozen=True)
class Drop:
    start: int  # last step of the plateau before
    stop: int  # first step of the plateau after
    before: float
    after: float


def find(steps, loss, *, tol: float = 0.01, min_span: int | None = None) -> list[Plateau]:
    """The plateaus of one run's loss curve (``steps`` (L,) ascending, ``loss`` (L,))."""
    steps, loss = np.asarray(steps), np.asarray(loss, np.float64)
    if steps.shape != loss.shape or steps.ndim != 1:
        raise ValueError(f"steps {steps.shape} and loss {loss.shape} must be two (L,) arrays")
    finite = np.isfinite(loss)
    L = int(np.argmin(finite)) if not finite.all() else len(loss)  # up to the first NaN
    if min_span is None:
        min_span = max(1, int(0.05 * (steps[-1] - steps[0])))
    found: list[Plateau] = []
    i = 0
    while i < L - 2:
        j = i
        ref = abs(loss[i]) if loss[i] != 0 else 1.0
        while j + 1 < L and abs(loss[j + 1] - loss[i]) <= tol * ref:
            j += 1
        if j - i >= 2 and steps[j] - steps[i] >= min_span:
            found.append(Plateau(int(steps[i]), int(steps[j]), float(np.median(loss[i : j + 1]))))
            i = j + 1
        else:
            i += 1
    return found


def drops(plateaus: list[Plateau]) -> list[Drop]:
    """The drops between consecutive plateaus whose level falls."""
    return [
        Drop(a.stop, b.start, a.level, b.level)
        for a, b in zip(plateaus, plateaus[1:], strict=False)
        if b.level < a.level
    ]


def summary(steps, loss, **rule) -> dict:
    """{"plateaus": [[start, stop, level], …], "drops": [[start, stop, before, after], …]} of one run."""
    p = find(steps, loss, **rule)
    return {
        "plateaus": [[q.start, q.stop, q.level] for q in p],
        "drops": [[d.start, d.stop, d.before, d.after] for d in drops(p)],
    }
