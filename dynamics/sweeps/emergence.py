"""Emergence times: when a run leaves its plateau, and how that time scales across a grid.

Per run (``times``), at the logged steps:

- ``attention``: the first logged step at which the attention on the relevant tokens
  (``attn_relevant``, the test set's) reaches ``threshold`` (default ½);
- ``loss``: the first logged step at which the test loss is at most ``fraction`` (default ½) of its
  value at step 0.

Either is NaN where the run never gets there (or diverged first, its curve NaN from then on). The
resolution is the logging interval: log densely (``--log-every``) around the emergence for precise
times.

Across a grid (``fit_power_law``, ``grid_fit``): t ≈ c·x^k fitted by least squares on log t
against log x, one point per trial (runs that never emerge left out), with the exponent's 95 %
confidence interval from Student's t with n − 2 degrees of freedom. numpy and scipy only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

THRESHOLD = 0.5  # attention mass on the relevant tokens
FRACTION = 0.5  # the test loss as a fraction of its initial value
KINDS = ("attention", "loss")


def first_step(steps: np.ndarray, curve: np.ndarray, level: float, *, below: bool = False) -> np.ndarray:
    """The first of ``steps`` (L,) at which ``curve`` (..., L) is >= ``level`` (``below``: <=
    ``level``, which may be (...) per curve), as floats (...); NaN where it never is."""
    curve = np.asarray(curve, np.float64)
    level = np.asarray(level, np.float64)[..., None]
    hit = curve <= level if below else curve >= level  # NaN compares False
    first = np.argmax(hit, axis=-1)
    return np.where(hit.any(axis=-1), np.asarray(steps, np.float64)[first], np.nan)


def times(
    steps: np.ndarray, curves: dict[str, np.ndarray], threshold: float = THRESHOLD, fraction: float = FRACTION
) -> dict[str, np.ndarray]:
    """{"attention": t_att, "loss": t_loss}, each of the curves' leading shape (the logged axis last).
    ``threshold`` in (0, 1] (the attention on the relevant tokens is a share of the mass: 0 is met at
    step 0, above 1 never), ``fraction`` in (0, 1) (the loss at step 0 is 1 of itself)."""
    if not _real(fraction) or not 0 < fraction < 1:
        raise ValueError(
            f"fraction={fraction!r} must be in (0, 1): the loss at most that share of its initial value"
        )
    if not _real(threshold) or not 0 < threshold <= 1:
        raise ValueError(
            f"threshold={threshold!r} must be in (0, 1]: the attention on the relevant tokens is a share "
            "of the attention mass (0 is reached at step 0, more than 1 never)"
        )
    missing = [k for k in ("attn_relevant", "test_loss") if k not in curves]
    if missing:
        raise ValueError(
            f"emergence times need the curves {', '.join(missing)}: a result of a regression run with "
            "known relevant tokens (see ``logged``)"
        )
    loss = np.asarray(curves["test_loss"], np.float64)
    return {
        "attention": first_step(steps, curves["attn_relevant"], threshold),
        "loss": first_step(steps, loss, fraction * loss[..., 0], below=True),
    }


def _real(x) -> bool:
    return isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool | np.bool_)


def summary(steps, curves, threshold: float = THRESHOLD, fraction: float = FRACTION) -> dict[str, list]:
    """One H's emergence times per trial (curves (trials, L)): {"attention": [...], "loss": [...]},
    None for a trial that never gets there (results.json's summary)."""
    found = times(steps, curves, threshold, fraction)
    return {k: [None if np.isnan(t) else int(t) for t in v] for k, v in found.items()}


def columns(found: dict[str, list]) -> dict[str, float]:
    """A summary row's emergence times as frame columns: ``t_att_mean``, ``t_att_std``,
    ``t_att_n`` (trials that emerged) and the same for ``t_loss``; NaN where none emerged."""
    out = {}
    for kind, short in (("attention", "t_att"), ("loss", "t_loss")):
        t = np.array([np.nan if v is None else v for v in found[kind]], np.float64)
        done = t[np.isfinite(t)]
        out[f"{short}_mean"] = float(done.mean()) if done.size else np.nan
        out[f"{short}_std"] = float(done.std()) if done.size else np.nan
        out[f"{short}_n"] = int(done.size)
    return out


def data_of(cfg) -> dict:
    """The emergence data's T, d, copies, copy_logits and repetition of a resolved config."""
    data = cfg.data.resolved()
    return {k: getattr(data, k) for k in ("T", "d", "copies", "copy_logits", "repetition")}


def closed_form(data: dict, lr: float, copies=None, d=None, T=None, p=None) -> float:
    """t* = √(π/2)·√d·T/η steps (η = 2·lr, the ½-loss step), / B tied or / √B free copies, / the
    repetition factor √(p²d + (1 − p)²) (docs/frontier.md): online SGD's emergence step."""
    d = data["d"] if d is None else d
    T = data["T"] if T is None else T
    B = data.get("copies", 1) if copies is None else copies
    p = data.get("repetition", 0.0) if p is None else p
    share = B if data.get("copy_logits") == "tied" else math.sqrt(B)
    return math.sqrt(math.pi / 2 * d) * T / (2 * lr) / share / math.sqrt(p * p * d + (1 - p) ** 2)


def repetition_factor(d: int):
    """p -> √(p²d + (1 − p)²), the repetition's speed-up of the emergence (the fitted x of a p axis)."""
    return lambda p: math.sqrt(p * p * d + (1 - p) ** 2)


def closed_exponent(axis: str, copy_logits: str = "free") -> float:
    """The closed form's exponent along ``axis``: T¹, d^½, B⁻¹ tied or B^−½ free copies, and the
    repetition factor's −1."""
    return {"T": 1.0, "d": 0.5, "repetition": -1.0}.get(axis, -1.0 if copy_logits == "tied" else -0.5)


def logged(curves: dict) -> bool:
    """Whether a result has emergence times: a regression run (its excess-risk curve) whose data
    know their relevant tokens (an attention curve that is not all NaN)."""
    if not ("excess_risk" in curves and "attn_relevant" in curves and "test_loss" in curves):
        return False
    return bool(np.any(np.isfinite(curves["attn_relevant"])))


@dataclass(frozen=True)
class PowerLaw:
    """t ≈ prefactor · x^exponent, fitted on log–log axes."""

    exponent: float
    ci: tuple[float, float]  # 95 % (or ``level``) confidence interval of the exponent
    prefactor: float
    r2: float
    n: int  # points fitted (trials that emerged)

    def __call__(self, x):
        return self.prefactor * np.asarray(x, np.float64) ** self.exponent


def fit_power_law(x, t, level: float = 0.95) -> PowerLaw:
    """Least squares of log t on log x over the finite, positive pairs (``x``, ``t`` broadcast to
    one shape; at least 3 points and 2 distinct x); the exponent's ``level`` interval from
    Student's t with n − 2 degrees of freedom."""
    from scipy import stats  # lazy: scipy: only for a fit's interval

    if not _real(level) or not 0 < level < 1:
        raise ValueError(f"level={level!r} must be in (0, 1): the confidence of the exponent's interval")
    try:
        x, t = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(t, np.float64))
    except (TypeError, ValueError) as err:
        raise ValueError(f"x and t must be numbers of one shape (broadcast): {err}") from None
    keep = np.isfinite(x) & np.isfinite(t) & (x > 0) & (t > 0)
    lx, lt = np.log(x[keep]), np.log(t[keep])
    n = lx.size
    if n < 3 or np.unique(lx).size < 2:
        raise ValueError(f"a power law needs >= 3 finite points at >= 2 distinct x; got {n} points")
    slope, intercept = np.polyfit(lx, lt, 1)
    resid = lt - (slope * lx + intercept)
    sxx = np.sum((lx - lx.mean()) ** 2)
    se = np.sqrt(np.sum(resid**2) / (n - 2) / sxx)
    half = stats.t.ppf(0.5 + level / 2, n - 2) * se
    total = np.sum((lt - lt.mean()) ** 2)
    r2 = 1.0 - np.sum(resid**2) / total if total > 0 else 1.0
    return PowerLaw(
        float(slope), (float(slope - half), float(slope + half)), float(np.exp(intercept)), float(r2), n
    )


def grid_times(result, threshold: float = THRESHOLD, fraction: float = FRACTION) -> dict[str, np.ndarray]:
    """A grid's (or a sweep's) emergence times, each (n_heads, *grid shape, trials)."""
    return times(result.steps, result.curves, threshold, fraction)


def grid_fit(
    result,
    axis: str,
    kind: str = "attention",
    *,
    head: int = 0,
    transform=None,
    threshold: float = THRESHOLD,
    fraction: float = FRACTION,
) -> PowerLaw:
    """The power law of emergence time against the grid axis ``axis`` (a knob name of the grid:
    T, d, copies, …) for H = ``result.heads[head]``, every trial a point; a grid of more axes is
    pooled over the others. ``result``: a ``GridResult`` (``run_grid_experiment``, or
    ``load_results`` of a grid's folder). ``transform`` maps the axis values to the fitted x (e.g.
    the repetition factor of p); ``threshold`` and ``fraction`` as ``times``'."""
    if not all(hasattr(result, a) for a in ("steps", "curves")) or not hasattr(
        getattr(result, "grid", None), "axes"
    ):
        raise TypeError(
            f"result={type(result).__name__} is not a GridResult: grid_fit fits across a grid's points "
            "(run_grid_experiment, or load_results of a grid's folder)"
        )
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r} is not one of {', '.join(map(repr, KINDS))}")
    names = [n for n, _ in result.grid.axes]
    if axis not in names:
        raise ValueError(f"axis={axis!r} is not an axis of the grid; its axes: {', '.join(names)}")
    t_all = grid_times(result, threshold, fraction)[kind]  # (n_heads, *grid shape, trials)
    n_heads = len(t_all)
    if isinstance(head, bool) or not isinstance(head, int | np.integer) or not 0 <= head < n_heads:
        raise ValueError(f"head={head!r} must be an index into result.heads, in [0, {n_heads})")
    t = t_all[head]  # (*grid shape, trials)
    values = np.asarray(dict(result.grid.axes)[axis], np.float64)
    if transform is not None and not callable(transform):
        raise TypeError(f"transform={transform!r} must be a function of an axis value, or None")
    x = values if transform is None else np.asarray([transform(v) for v in values], np.float64)
    shape = [1] * t.ndim
    shape[names.index(axis)] = len(x)
    return fit_power_law(x.reshape(shape), t)
