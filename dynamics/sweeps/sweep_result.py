"""A sweep's result: its curves by metric, and its views as pandas frames.

``SweepResult`` holds what ``run_sweep`` returns and ``load_results`` reads back. Which curves are
per run, per head or snapshots of θ is what their metrics declare (``dynamics.parts.metrics``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dynamics.config.grid_axes import GRID_KNOBS
from dynamics.config.schema import Config
from dynamics.parts.metrics import (  # noqa: F401  (HEAD_COUNT, OLD_HEAD_COUNT: the frames' names)
    HEAD_COUNT,
    OLD_HEAD_COUNT,
    SUMMARY_METRICS,
    head_schedule,
    is_per_head,
    is_snapshot,
)
from dynamics.sweeps import emergence, headline, plateaus

# curves without the (H, grid, trials) axes: one for the whole grid (the diagnostics' steps, the
# per-head view's)
STEPLESS = ("diagnostic_steps", "head_steps")


def mask_diverged(curves: dict[str, np.ndarray], steps: np.ndarray, div_at: np.ndarray) -> None:
    """Set every logged point at or after a run's divergence to NaN, in place (curves (..., L))."""
    dead = steps >= div_at[..., None]  # (..., L)
    for v in curves.values():
        v[dead] = np.nan


# What one H's finished runs are: metric -> (trials, L), and diverged_at (trials,), -1 = never.
HeadResult = tuple[dict[str, np.ndarray], np.ndarray]
# on_point(H values finished, ascending; metric -> (len(heads), trials, L); (len(heads), trials))
PointCallback = Callable[[list[int], dict[str, np.ndarray], np.ndarray], None]


@dataclass
class SweepResult:
    config: Config  # resolved
    heads: np.ndarray  # (n_heads,)
    steps: np.ndarray  # (L,) logged steps, 0 = before the first update
    curves: dict[str, np.ndarray]  # metric -> (n_heads, trials, L); NaN after divergence
    diverged_at: np.ndarray  # (n_heads, trials): step of the first non-finite loss, -1 = never
    wall_time_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    # the data model's planted directions, name -> (trials, d) unit vectors, in the order of the
    # per-head |cos| curves' last axis (``extra["directions"]`` names it); empty when none
    planted: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def params(self) -> dict[str, np.ndarray]:
        """θ at the per-head view's steps ``head_steps`` (``sweep.save_params``), by name: a head's
        arrays (n_heads, trials, L_h, H_max, …) NaN past a run's H, the bias (n_heads, trials, L_h);
        empty when not saved."""
        return {k[len("param_") :]: v for k, v in self.curves.items() if is_snapshot(k)}

    @property
    def head_steps(self) -> np.ndarray:
        """(L_h,) the steps of the per-head view (the per-head curves' and the snapshots' step axis):
        ``curves["head_steps"]``, or the config's schedule of them (``sweep.head_every``) where the
        curves have none."""
        if "head_steps" in self.curves:
            return np.asarray(self.curves["head_steps"])
        return np.array(head_schedule(self.steps, self.config), dtype=np.asarray(self.steps).dtype)

    @property
    def complete(self) -> bool:
        """False for the partial results of an interrupted run (``extra["heads_todo"]`` lists the
        H values it did not finish); True otherwise."""
        return bool(self.extra.get("complete", True))

    def headline(self) -> dict[str, dict[str, Any]]:
        """The numbers this run is about (``dynamics.sweeps.headline``: name -> {"label", "value",
        "std", …}), as its preset declares them: the stored ones (``extra["headline"]``, what
        results.json holds), else computed now and, for a complete result, kept there."""
        return headline.kept(self, headline.compute)

    def _summary_metrics(self) -> list[str]:
        return [m for m in SUMMARY_METRICS if m in self.curves]

    def summary(self) -> list[dict[str, Any]]:
        """Per H: mean and std over the trials that did not diverge of each final metric."""
        rows = []
        for i, h in enumerate(self.heads):
            ok = self.diverged_at[i] < 0
            row: dict[str, Any] = {
                HEAD_COUNT: int(h),
                "trials": int(ok.size),
                "n_diverged": int((~ok).sum()),
                "diverged": bool((~ok).any()),
                "diverged_at": [int(s) for s in self.diverged_at[i]],
            }
            # each trial's plateaus and drops of the training loss (dynamics.sweeps.plateaus), and
            # the mean number of drops over the trials that did not diverge (None if none)
            row["plateaus"] = [plateaus.summary(self.steps, curve) for curve in self.curves["train_loss"][i]]
            row["drops"] = plateaus.mean_drops(row["plateaus"], ok)
            if emergence.logged(self.curves):  # each trial's emergence steps (dynamics.sweeps.emergence)
                own = {k: self.curves[k][i] for k in ("attn_relevant", "test_loss")}
                row["emergence"] = emergence.summary(self.steps, own)
            for name in self._summary_metrics():
                final = self.curves[name][i, ok, -1]
                known = ok.any() and bool(np.all(np.isfinite(final)))  # NaN: not known (no noise floor)
                row[name] = {
                    "mean": float(np.mean(final)) if known else None,
                    "std": float(np.std(final)) if known else None,
                }
            rows.append(row)
        return rows

    def to_dataframe(self):
        """A tidy pandas DataFrame: one row per H × trial × logged step, columns ``H`` (the head
        count), ``lr`` (η₀) and ``init_scale`` (to tell apart the results of ``run_grid`` once
        concatenated), ``trial``, ``step`` and one per metric (NaN after a trial's divergence).
        Theory diagnostics are columns too (NaN at the steps they were not computed); their step
        list ``diagnostic_steps`` is not. The per-head curves are in ``head_frame()``, the
        parameter snapshots in ``params``."""
        import pandas as pd  # lazy: pandas: only where frames are built

        n_h, trials, L = self.diverged_at.shape + (len(self.steps),)
        per_step = {k: v for k, v in self.curves.items() if np.shape(v) == (n_h, trials, L)}
        h, t, s = np.meshgrid(np.arange(n_h), np.arange(trials), np.arange(L), indexing="ij")
        frame = {
            HEAD_COUNT: self.heads[h.ravel()],
            "lr": self.config.optim.lr,
            "init_scale": self.config.model.init_scale,
            "trial": t.ravel(),
            "step": self.steps[s.ravel()],
        }
        frame.update({k: np.asarray(v).reshape(-1) for k, v in per_step.items()})  # (H, trials, L) C order
        return pd.DataFrame(frame)

    def head_frame(self):
        """The per-head curves (the metrics of a per-head kind) as a tidy pandas DataFrame: one row
        per H × trial × step of the per-head view (``head_steps``) × head h < H, columns ``H``,
        ``lr``, ``init_scale``, ``trial``, ``step``, ``head`` and one per metric (the name without
        ``head_``). Empty when none were logged."""
        import pandas as pd  # lazy: pandas: only where frames are built

        per_head = {k.removeprefix("head_"): np.asarray(v) for k, v in self.curves.items() if is_per_head(k)}
        if not per_head:
            return pd.DataFrame(columns=[HEAD_COUNT, "lr", "init_scale", "trial", "step", "head"])
        n_h, trials, L, h_max = next(iter(per_head.values())).shape[:4]
        i, t, s, h = np.meshgrid(*(np.arange(n) for n in (n_h, trials, L, h_max)), indexing="ij")
        keep = (h < self.heads[i]).ravel()  # head h of a run with H ≤ h does not exist
        frame = {
            HEAD_COUNT: self.heads[i.ravel()][keep],
            "lr": self.config.optim.lr,
            "init_scale": self.config.model.init_scale,
            "trial": t.ravel()[keep],
            "step": self.head_steps[s.ravel()][keep],
            "head": h.ravel()[keep],
        }
        for name, v in per_head.items():  # (n_h, trials, L, H_max[, ...]): trailing axes become columns
            flat = v.reshape(n_h * trials * L * h_max, -1)[keep]
            if flat.shape[1] == 1:
                frame[name] = flat[:, 0]
            else:
                frame.update({f"{name}_{j}": flat[:, j] for j in range(flat.shape[1])})
        return pd.DataFrame(frame)

    def emergence_frame(self, threshold: float = emergence.THRESHOLD, fraction: float = emergence.FRACTION):
        """Each run's emergence steps (``dynamics.sweeps.emergence``) as a tidy pandas DataFrame:
        one row per H × trial, ``t_att`` (attention on the relevant tokens >= ``threshold``) and
        ``t_loss`` (test loss <= ``fraction`` of its initial value), NaN where never reached."""
        import pandas as pd  # lazy: pandas: only where frames are built

        found = emergence.times(self.steps, self.curves, threshold, fraction)  # each (n_heads, trials)
        h, t = np.meshgrid(np.arange(len(self.heads)), np.arange(self.diverged_at.shape[1]), indexing="ij")
        return pd.DataFrame(
            {
                HEAD_COUNT: self.heads[h.ravel()],
                "lr": self.config.optim.lr,
                "init_scale": self.config.model.init_scale,
                "trial": t.ravel(),
                "t_att": found["attention"].ravel(),
                "t_loss": found["loss"].ravel(),
            }
        )

    def summary_frame(self):
        """``summary()`` as a pandas DataFrame indexed by H: the final ``<metric>_mean`` and
        ``<metric>_std`` over the trials that did not diverge, and ``n_diverged``; for a regression
        run with known relevant tokens, the emergence steps' mean, std and count over the trials
        that got there (``t_att_*``, ``t_loss_*``); ``drops`` (the mean number of drops of the
        training loss per trial that did not diverge, NaN if all did) and ``plateaus`` (each
        trial's plateaus and drops as a JSON string, ``dynamics.sweeps.plateaus``)."""
        import pandas as pd  # lazy: pandas: only where frames are built

        rows = []
        for row in self.summary():
            flat = {HEAD_COUNT: row[HEAD_COUNT], "trials": row["trials"], "n_diverged": row["n_diverged"]}
            for name in self._summary_metrics():
                for stat in ("mean", "std"):
                    value = row[name][stat]
                    flat[f"{name}_{stat}"] = np.nan if value is None else value
            if "emergence" in row:
                flat.update(emergence.columns(row["emergence"]))
            flat.update(plateaus.columns(row))
            rows.append(flat)
        return pd.DataFrame(rows).set_index(HEAD_COUNT)


@functools.lru_cache(maxsize=1)
def column_probe() -> SweepResult:
    """A one-run result with every summarised metric and the emergence curves: its frames have
    every column a result's frames can have beside its curves' own (``frame_columns``)."""
    names = (*SUMMARY_METRICS, "train_loss", "test_loss", "attn_relevant", "excess_risk")
    curves = {m: np.ones((1, 1, 2)) for m in names}
    return SweepResult(Config(), np.array([1]), np.array([0, 1]), curves, np.full((1, 1), -1))


@functools.lru_cache(maxsize=1)
def frame_columns() -> frozenset[str]:
    """The columns the frames of a sweep's result hold beside its curves' own names (``to_dataframe``:
    ``H``, ``lr``, ``trial``, ``step``, …; ``head_frame``, ``emergence_frame``, ``summary_frame``
    and its index ``H``): taken from those very frames, built for ``column_probe()``, so a
    column added to a frame is reserved with it. A user metric may not take one of these names
    (``dynamics.sweeps.arguments.metric_refs``): it would overwrite the column."""
    probe = column_probe()
    frames = [
        probe.to_dataframe(),
        probe.head_frame(),
        probe.emergence_frame(),
        probe.summary_frame().reset_index(),
    ]
    return frozenset(str(c) for f in frames for c in f.columns) - set(probe.curves)


def frame_row(row: dict[str, Any]) -> dict[str, Any]:
    """A summary row (``summary()``, a grid's too) flattened to columns: its keys but the per-trial
    lists, each metric as ``<metric>_mean`` and ``<metric>_std``, ``drops`` a number and
    ``plateaus`` a JSON string (``plateaus.columns``)."""
    skip = ("diverged", "diverged_at", "emergence", "drops", "plateaus", *SUMMARY_METRICS)
    flat = {k: v for k, v in row.items() if k not in skip}
    if "emergence" in row:
        flat.update(emergence.columns(row["emergence"]))
    for m in (m for m in SUMMARY_METRICS if m in row):
        flat[f"{m}_mean"] = row[m]["mean"]
        flat[f"{m}_std"] = row[m]["std"]
    if "plateaus" in row:
        flat.update(plateaus.columns(row))
    return flat


def reserved_columns() -> frozenset[str]:
    """Every name a column of the results' frames already has beside the curves' own: a sweep's
    frames' (``result.frame_columns``; a grid's frames are its points' with a column per axis), a
    summary row's flattened (``frame_row``, from ``column_probe``'s summary), every knob a grid
    can run over (``GRID_KNOBS``: a column of a grid's frame and an array of its curves.npz) and
    ``heads``, the head count's key in the files of older versions (``OLD_HEAD_COUNT``)."""
    probe = column_probe()
    grid_row = {c for row in probe.summary() for c in frame_row(row)} - set(probe.curves)
    return frame_columns() | grid_row | set(GRID_KNOBS) | {OLD_HEAD_COUNT}
