"""Run a grid (``dynamics.config.grid_axes``) and write its result files.

The grid's points are grouped by every setting but the knobs declared ``traced`` (a part such
as the optimiser or the loss, the data model, a model knob such as the temperature are static
in the program): points that differ only in traced knobs (η₀, σ₀ — and H, as in every
sweep) are *variants* of one group and run through the same compiled calls
(``execute.run_points``, packed together with random init); a group of one point is planned
exactly as its configuration run alone (the same packs, programs and batches). Each group
draws its own data once with the sweep's seed (its runs and its points' diagnostics read it),
so a grid point gets exactly the data and init of the same configuration run alone. Groups
whose data have the same shapes (a grid over the noise σ, the sparsity ζ, …) reuse the same
compiled program (JAX's cache is keyed by the static ``Program`` and the shapes, not the
values); a knob that changes shapes (n, T, d) gives one program per shape.

A grid point logs what its sweep logs: the metrics, the per-head curves and snapshots (the
sweep's trailing axes after (H, *grid shape, trials, L)) and, with ``sweep.diagnostics``, the
theory diagnostics, computed per grid point by the sweep's own replay as the point finishes.

Files (``write_grid``): ``curves.npz`` with every metric of shape (H, *grid shape, trials,
L), the per-head curves (…, L, H_max[, …]; a grid over the width d: snapshots NaN-padded to
the largest d), the diagnostics and ``diagnostic_steps``,
``heads``, ``steps``, ``diverged_at`` (H, *grid shape, trials), one array per axis named
after its knob and ``grid_axes`` (their names in order); the snapshots in ``params.npz``;
``results.json`` with ``"grid": {"axes": […], "values": {…}}``, one summary row per (H,
grid point) and the diagnostics' summary per grid point; ``summary.csv``, the same rows as
``GridResult.summary_frame()`` (a sweep's summary frame per point, a column per axis).
Checkpoints: ``points/G<k>.npz`` per finished grid point k (all its H and trials, every curve,
the diagnostics' summary), for ``--resume``; inside a point, a long compiled call's state kept
mid-run as a sweep's (``dynamics.sweeps.midrun``: a store per group of points, each call's
state named by what it computes, ``execute.point_store``, kept until its grid points are saved).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np

from dynamics.config.grid_axes import GRID_KNOBS, TRACED, GridExperiment
from dynamics.config.schema import SECTIONS, Config, Experiment
from dynamics.infra.files import atomic_write_bytes
from dynamics.infra.timings import phase
from dynamics.parts.metrics import COLUMN_TITLES, SUMMARY_METRICS, is_per_head, is_snapshot, metrics_of
from dynamics.sweeps import checkpoint
from dynamics.sweeps.checkpoint import locked
from dynamics.sweeps.devices import device_name
from dynamics.sweeps.execute import (
    Drawn,
    add_diagnostics,
    add_head_steps,
    float_type,
    grown,
    precision,
    prepare_data,
    run_points,
)
from dynamics.sweeps.headline import grid_headline, kept
from dynamics.sweeps.memory import check_memory
from dynamics.sweeps.midrun import PREFIX, MidRun, check_seconds
from dynamics.sweeps.result_files import (
    complete_results_hash,
    load_results,
    results_dict,
    write_files,
    write_params,
)
from dynamics.sweeps.sweep_result import HEAD_COUNT, STEPLESS, SweepResult

POINTS = "points"
# A finished grid point: curve -> (H, trials, L[, H_max, …]) (the metrics, the per-head curves and
# snapshots, the theory diagnostics; ``diagnostic_steps`` (Ld,) as it is), diverged_at (H, trials)
# and the diagnostics' summary of results.json (None without diagnostics).
GridPointResult = tuple[dict[str, np.ndarray], np.ndarray, dict[str, Any] | None]


@dataclass
class GridResult:
    grid: GridExperiment
    heads: np.ndarray  # (n_heads,)
    steps: np.ndarray  # (L,)
    # metric -> (n_heads, *grid.shape, trials, L); per-head curves (head_*) and snapshots (param_*)
    # (n_heads, *grid.shape, trials, L, H_max, …), NaN past a run's H; NaN after divergence;
    # diagnostic_steps (Ld,) when the theory diagnostics ran
    curves: dict[str, np.ndarray]
    diverged_at: np.ndarray  # (n_heads, *grid.shape, trials), -1 = never
    wall_time_s: float = 0.0
    # complete, device, resumed_points, …; "diagnostics": one summary per grid point (C order)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def config(self):
        return self.grid.base.config

    @property
    def complete(self) -> bool:
        return bool(self.extra.get("complete", True))

    def headline(self) -> dict[str, dict[str, Any]]:
        """The grid's headline (``dynamics.sweeps.headline.grid_headline``): the stored one
        (``extra["headline"]``, results.json's), else computed now and, when complete, kept."""
        return kept(self, grid_headline)

    def summary_frame(self):
        """``summary()`` as a tidy pandas DataFrame (``summary_frame`` below)."""
        return summary_frame(self)

    def to_dataframe(self):
        """A tidy pandas DataFrame in a sweep's long format (``SweepResult.to_dataframe``): one row
        per grid point (C order) × H × trial × logged step, the columns ``H``, one per grid axis
        named by its knob (its value at the point: a number or a name) and then the sweep frame's."""
        return self._frames(lambda point: point.to_dataframe())

    def _frames(self, frame_of):
        """``frame_of(grid point k's SweepResult)`` for every k, each with a column per grid axis
        after ``H``, concatenated in grid point order (C order over the axes, the first outermost).
        The axes are read from the grid's record: any knob a grid runs over becomes a column."""
        import pandas as pd  # lazy: pandas: only where frames are built

        frames = []
        for k, combo in enumerate(itertools.product(*(v for _, v in self.grid.axes))):
            frame = frame_of(self.point(k))
            for at, (name, value) in enumerate(zip((n for n, _ in self.grid.axes), combo, strict=True)):
                if name in frame.columns:  # lr, init_scale: the point's own value already
                    frame.pop(name)
                frame.insert(1 + at, name, value)
            frames.append(frame)
        return pd.concat(frames, ignore_index=True)

    def point(self, k: int) -> SweepResult:
        """Grid point k (C order) as the SweepResult of its configuration run alone."""
        n = len(self.grid.points)
        if isinstance(k, bool | np.bool_) or not isinstance(k, int | np.integer) or not 0 <= k < n:
            raise ValueError(f"k={k!r} must be a grid point's index, an integer in [0, {n})")
        idx = (slice(None), *np.unravel_index(k, self.grid.shape))
        diagnostics = self.extra.get("diagnostics")
        return SweepResult(
            config=self.grid.points[k],
            heads=self.heads,
            steps=self.steps,
            curves={m: v if m in STEPLESS else v[idx] for m, v in self.curves.items()},
            diverged_at=self.diverged_at[idx],
            extra={} if diagnostics is None else {"diagnostics": diagnostics[k]},
        )

    def summary(self) -> list[dict[str, Any]]:
        """One row per (grid point, H): the knob values, then the sweep summary's fields."""
        rows = []
        for k, combo in enumerate(itertools.product(*(v for _, v in self.grid.axes))):
            knobs = dict(zip((n for n, _ in self.grid.axes), combo, strict=True))
            for row in self.point(k).summary():
                rows.append({HEAD_COUNT: row.pop(HEAD_COUNT), **knobs, **row})
        return rows


def variant_groups(grid: GridExperiment) -> list[list[int]]:
    """Grid point indices grouped by every setting but the knobs declared ``traced`` (η₀ and σ₀:
    the engine takes them per run, in the batch), each group one data draw and the
    programs of its configuration alone. Any other knob is static for the engine (a part: the
    optimiser, loss, query, init, …; the data model and its data; a model knob such as the
    temperature): its points are groups of their own, planned as their configuration run alone
    (they once shared the first point's program, and so its temperature)."""
    defaults: dict[str, dict[str, Any]] = {}
    for axis in TRACED:
        section, name, _ = GRID_KNOBS[axis]
        defaults.setdefault(section, {})[name] = getattr(getattr(Config(), section), name)
    groups: dict[Any, list[int]] = {}
    for k, cfg in enumerate(grid.points):
        key = tuple(dataclasses.replace(getattr(cfg, s), **defaults.get(s, {})) for s in SECTIONS)
        groups.setdefault(key, []).append(k)
    return list(groups.values())


def run_grid_experiment(
    grid: GridExperiment,
    *,
    progress: bool = True,
    on_point: Callable[[int, GridPointResult], None] | None = None,
    skip: dict[int, GridPointResult] | None = None,
    devices=None,
    call_seconds: float | None = None,
    midrun: MidRun | None = None,
    **layout,
) -> GridResult:
    """Run every point of ``grid`` not in ``skip`` (finished earlier: {k: result}); call
    ``on_point(k, result)`` as each grid point finishes (all its H and trials, and its theory
    diagnostics when ``sweep.diagnostics`` names any). Refused before the first point when its
    largest point would not fit in memory (``dynamics.sweeps.memory``). Runs in the base config's
    precision (``sweep.x64``), whatever JAX's global setting. ``call_seconds`` and ``midrun``: as
    ``run_sweep``'s, a long compiled call split, its state kept mid-run (each group of points in
    files of its own, kept until its grid points are saved)."""
    if call_seconds is not None:
        check_seconds("call_seconds", call_seconds)
    long_runs = dict(call_seconds=call_seconds, midrun=midrun)
    with precision(grid.base.config):
        return _run_grid(grid, progress, on_point, skip, devices, {**layout, **long_runs})


def _run_grid(grid: GridExperiment, progress, on_point, skip, devices, layout) -> GridResult:
    check_memory(grid.points, len(grid.base.steps))
    start = time.perf_counter()
    skip = dict(skip or {})
    acc = new_curves(grid)
    for k, done in skip.items():
        acc.store(k, done)
    midrun = layout.pop("midrun", None)
    for group in variant_groups(grid):
        todo = [k for k in group if k not in skip]
        if todo:  # a group's mid-run states: files of its own (each point's: ``execute.point_store``)
            store = None if midrun is None else midrun.within(f"G{group[0]}-", ",".join(map(str, group)))
            _run_group(grid, todo, acc, progress, on_point, dict(devices=devices, midrun=store, **layout))
            if store is not None:
                store.clear_all()
    return grid_result(grid, acc, time.perf_counter() - start)


def new_curves(grid: GridExperiment) -> _Curves:
    """A grid's results before any point has run: NaN curves, diverged_at -1 (never)."""
    cfg = grid.base.config
    n_h, G, trials, L = len(cfg.sweep.heads), len(grid.points), cfg.sweep.trials, len(grid.base.steps)
    return _Curves(
        {m: np.full((n_h, G, trials, L), np.nan) for m in metrics_of(cfg)},
        np.full((n_h, G, trials), -1, dtype=np.int32),
    )


def grid_result(grid: GridExperiment, acc: _Curves, wall_time_s: float) -> GridResult:
    """The GridResult of a grid whose every point is in ``acc``: the curves with the grid points
    unflattened to the grid's shape, the per-head view's steps added."""
    cfg, steps = grid.base.config, np.array(grid.base.steps)
    n_h, G, trials = len(cfg.sweep.heads), len(grid.points), cfg.sweep.trials
    lead = (n_h, *grid.shape)
    add_head_steps(acc.curves, cfg, steps)
    extra = {"diagnostics": [acc.diagnostics[k] for k in range(G)]} if cfg.sweep.diagnostics else {}
    return GridResult(
        grid=grid,
        heads=np.array(cfg.sweep.heads),
        steps=steps,
        curves={m: v if m in STEPLESS else v.reshape(*lead, *v.shape[2:]) for m, v in acc.curves.items()},
        diverged_at=acc.div.reshape(*lead, trials),
        wall_time_s=wall_time_s,
        extra=extra,
    )


@dataclass
class _Curves:
    """A running grid's results with the grid points flattened: curve -> (H, G, trials, L[, …]),
    diverged_at (H, G, trials), the diagnostics' summary of each finished grid point."""

    curves: dict[str, np.ndarray]
    div: np.ndarray
    diagnostics: dict[int, dict[str, Any]] = field(default_factory=dict)
    tails: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)  # a point's own sizes

    def put(self, name: str, at: tuple, value: np.ndarray) -> None:
        """Curve ``name`` at index ``at`` (head index or all, grid point): allocated, NaN, as it
        first comes (the per-head curves, snapshots and diagnostics have their own trailing axes);
        grown, NaN-padded, when a point's are larger (the snapshots of a grid over the width d)."""
        if name in STEPLESS:
            self.curves[name] = np.asarray(value)
            return
        tail = np.shape(value)[1:] if isinstance(at[0], slice) else np.shape(value)
        self.tails[name, at[1]] = tail
        if name not in self.curves:
            n_h, G = self.div.shape[:2]
            self.curves[name] = np.full((n_h, G, *tail), np.nan, float_type(value))
        self.curves[name] = grown(self.curves[name], 2, tail)
        self.curves[name][(*at, *(slice(0, n) for n in tail))] = value

    def store(self, k: int, result: GridPointResult) -> None:
        metrics, div, summary = result
        for m, v in metrics.items():
            self.put(m, (slice(None), k), v)
        self.div[:, k] = div
        if summary is not None:
            self.diagnostics[k] = summary

    def point(self, k: int) -> GridPointResult:
        metrics = {m: v if m in STEPLESS else v[:, k] for m, v in self.curves.items()}
        return metrics, self.div[:, k], self.diagnostics.get(k)


def group_calls(grid: GridExperiment, todo: list[int], progress: bool, layout: dict, claim=None):
    """(the data drawn, the compiled calls) of grid points ``todo`` (one variant group) as variants of
    one batched sweep: the group's data drawn once (its runs and its points' diagnostics read it),
    ``execute.run_points``' generator of its calls (``claim``: as run_points')."""
    cfgs = [grid.points[k] for k in todo]
    n_h = len(cfgs[0].sweep.heads)
    layout = {"packs_per_call": None, "chunk": None, "slots": None, **layout}
    drawn = prepare_data(cfgs[0])
    heads = list(range(n_h))
    return drawn, run_points(
        cfgs, grid.base.steps, heads, progress=progress, drawn=drawn, claim=claim, **layout
    )


def _run_group(grid, todo, acc: _Curves, progress, on_point, layout) -> None:
    """Grid points ``todo`` (one data section) as variants of one batched sweep."""
    left = dict.fromkeys(todo, len(grid.base.config.sweep.heads))
    drawn, runs = group_calls(grid, todo, progress, layout)
    for items, metrics, div_at in runs:
        for k in store_call(acc, todo, items, metrics, div_at):
            left[k] -= 1
            if left[k] == 0:
                if grid.points[k].sweep.diagnostics:
                    _diagnose(grid, k, acc, progress, drawn)
                if on_point is not None:
                    on_point(k, acc.point(k))


def store_call(acc: _Curves, todo: list[int], items, metrics, div_at) -> list[int]:
    """One compiled call's runs (``execute.run_points``' yield: items (H index, variant), metrics
    (len(items), trials, …), diverged_at) stored in ``acc``; the grid point of each item (variant v
    is grid point ``todo[v]``)."""
    points = []
    for j, (i, v) in enumerate(items):
        k = todo[v]
        for m, values in metrics.items():
            acc.put(m, (i, k), values[j])
        acc.div[i, k] = div_at[j]
        points.append(k)
    return points


def _diagnose(grid: GridExperiment, k: int, acc: _Curves, progress: bool, drawn: Drawn) -> None:
    """Grid point k's theory diagnostics, computed as ``run_sweep`` computes them for its config
    run alone (``execute.add_diagnostics``: the same replay of the same data, init and step sizes)."""
    cfg = grid.points[k]
    # the training loss, and the snapshots (the max-margin view reads them) at the point's own
    # sizes: a grid over the width d pads the narrower points' snapshots with NaN
    own = {m: acc.curves[m][(slice(None), k, *(slice(0, n) for n in acc.tails[m, k]))] for m in acc.curves
           if m == "train_loss" or is_snapshot(m)}  # fmt: skip
    alone = SweepResult(
        config=cfg,
        heads=np.array(cfg.sweep.heads),
        steps=np.array(grid.base.steps),
        curves=dict(own),
        diverged_at=acc.div[:, k],
    )
    add_diagnostics(Experiment(cfg, grid.base.steps), alone, progress, drawn)
    for m, v in alone.curves.items():
        if m not in own:
            acc.put(m, (slice(None), k), v)
    acc.diagnostics[k] = alone.extra["diagnostics"]


# Files


def grid_results_dict(result: GridResult) -> dict[str, Any]:
    axes = ["heads", *(n for n, _ in result.grid.axes), "trial", "step"]
    base = SweepResult(result.config, result.heads, result.steps, {}, result.diverged_at)
    meta = results_dict(_no_summary(base))
    meta.update(
        config_hash=result.grid.hash(),
        wall_time_s=result.wall_time_s,
        grid={
            "axes": [name for name, _ in result.grid.axes],
            "values": {name: list(v) for name, v in result.grid.axes},
            "shape": list(result.grid.shape),
            "curves_axes": axes,
            **({"head_curves_axes": [*axes, "head"]} if any(map(is_per_head, result.curves)) else {}),
            **({"source_config": result.grid.source.to_dict()} if result.grid.source is not None else {}),
        },
        summary=result.summary(),
        **result.extra,
    )
    if result.complete:
        meta["headline"] = result.headline()
    return meta


class _no_summary(SweepResult):  # results_dict's fields without the per-H summary (the grid's own)
    def __init__(self, r: SweepResult):
        super().__init__(r.config, r.heads, r.steps, r.curves, r.diverged_at)

    def summary(self):
        return []

    def headline(self):
        return {}  # the grid's own (``grid_results_dict``)


def summary_frame(result: GridResult):
    """The tidy summary (pandas DataFrame): one row per grid point (C order) × H, the columns ``H``,
    one per grid axis, then the sweep's ``summary_frame``'s (trials, diverged count, the mean and
    std of each final metric over the trials that did not diverge, …), with its dtypes."""
    return result._frames(lambda point: point.summary_frame().reset_index())


def write_grid(result: GridResult, out: Path) -> tuple[Path, Path, Path]:
    """``curves.npz`` (and ``params.npz`` with ``sweep.save_params``, as a sweep), ``summary.csv``,
    then ``results.json`` (last: it marks complete results)."""
    out = Path(out)
    with phase("writing"):
        csv_path = out / "summary.csv"
        atomic_write_bytes(csv_path, summary_frame(result).to_csv(index=False).encode())
        params = {m[len("param_") :]: v for m, v in result.curves.items() if is_snapshot(m)}
        if params:
            write_params(out, params)
        arrays = {
            "heads": result.heads,
            "steps": result.steps,
            "diverged_at": result.diverged_at,
            "grid_axes": np.array([n for n, _ in result.grid.axes]),
            **{name: np.array(v) for name, v in result.grid.axes},
            **{m: v for m, v in result.curves.items() if not is_snapshot(m)},
        }
        json_path, npz_path = write_files(out, "curves.npz", arrays, grid_results_dict(result))
    return json_path, npz_path, csv_path


# Checkpoints: one file per finished grid point


def point_file(out: Path, k: int) -> Path:
    return Path(out) / POINTS / f"G{k}.npz"


def save_point(out: Path, grid_hash: str, k: int, result: GridPointResult) -> None:
    metrics, div, summary = result
    extra = {} if summary is None else {"diagnostics": np.array(json.dumps(summary))}
    checkpoint.write_point(point_file(out, k), grid_hash, metrics, div, **extra)


def load_points(out: Path, grid: GridExperiment) -> dict[int, GridPointResult]:
    """The grid points finished in ``out`` for this grid (same hash, right shapes): all of them
    from complete results of this grid, else the saved points."""

    if complete_results_hash(out) == grid.hash():
        try:
            return _complete_points(out, grid)
        except checkpoint.DAMAGED as err:  # the sweeps' rule: damaged complete results are recomputed
            warnings.warn(f"{err}: recomputing the grid points not saved", stacklevel=2)
    cfg = grid.base.config
    want = (len(cfg.sweep.heads), cfg.sweep.trials)

    def read(k):
        def one(z):
            curves = {m: z[f"curve_{m}"] for m in metrics_of(cfg)}  # KeyError: another version's file
            curves.update({f[len("curve_") :]: z[f] for f in z.files if f.startswith("curve_")})
            for m, v in curves.items():
                if m not in STEPLESS and v.shape[:2] != want:
                    raise ValueError(f"curve {m} has shape {v.shape}, expected {want} first")
            if z["diverged_at"].shape != want:
                raise ValueError(f"diverged_at has shape {z['diverged_at'].shape}, expected {want}")
            summary = json.loads(str(z["diagnostics"])) if "diagnostics" in z.files else None
            if cfg.sweep.diagnostics and summary is None:
                raise ValueError("the point has no diagnostics")
            return {k: (curves, z["diverged_at"], summary)}

        return one

    done: dict[int, GridPointResult] = {}
    for k in range(len(grid.points)):  # the sweeps' reader: another hash skipped, damage warned
        done.update(checkpoint.read_points([point_file(out, k)], grid.hash(), read(k), "this grid point"))
    return done


def _complete_points(out: Path, grid: GridExperiment) -> dict[int, GridPointResult]:
    """Every grid point of the complete results of this grid in ``out``."""

    meta, arrays = load_results(out)
    n_h, G = len(grid.base.config.sweep.heads), len(grid.points)
    own = {"heads", "steps", "diverged_at", "grid_axes", *(n for n, _ in grid.axes)}  # not curves
    lead = 1 + len(grid.shape)
    curves = {m: v for m, v in arrays.items() if m not in own}
    curves = {m: v if m in STEPLESS else v.reshape(n_h, G, *v.shape[lead:]) for m, v in curves.items()}
    div = arrays["diverged_at"].reshape(n_h, G, -1)
    summaries = meta.get("diagnostics") or [None] * G
    return {
        k: ({m: v if m in STEPLESS else v[:, k] for m, v in curves.items()}, div[:, k], summaries[k])
        for k in range(G)
    }


def clear_points(out: Path) -> None:
    checkpoint.clear_points(out, "G*.npz")


def run_grid_checkpointed(
    grid: GridExperiment,
    out: Path,
    *,
    resume: bool = False,
    progress: bool = True,
    devices=None,
    finish=None,
    claim=None,
    checkpoint_every: float | None = None,
    call_seconds: float | None = None,
) -> GridResult:
    """``run_grid_experiment`` that saves each finished grid point in ``out`` and, with ``resume``,
    skips the points saved there for the same grid; at the end writes the grid's files once, after
    ``finish(result)`` has run on the result in memory (written even when it raises). ``claim``:
    as ``checkpoint.run_checkpointed``'s (checked under the lock; a replaced run's files removed
    once this grid's are written). A long compiled call keeps its state every ``checkpoint_every``
    seconds, as a sweep's (``checkpoint.run_checkpointed``), and with ``resume`` continues from it."""

    out = Path(out)
    writer = jax.process_index() == 0
    with locked(out) if writer else contextlib.nullcontext():  # a second run on this --out is refused
        if claim is not None and writer:
            claim.enter(out)
        every = {} if checkpoint_every is None else {"every_s": checkpoint_every}
        midrun = MidRun(out, grid.hash(), resume, writer=writer, grid=True, **every)
        long_runs = dict(devices=devices, call_seconds=call_seconds, midrun=midrun)
        result = _run_grid_locked(
            grid, out, resume, progress, long_runs, writer, device_name(devices), finish
        )
        if claim is not None and writer:
            claim.written(out)
        return result


def _run_grid_locked(
    grid, out: Path, resume: bool, progress: bool, engine: dict, writer: bool, device: str, finish
):
    done = load_points(out, grid) if resume else {}
    if not resume and writer:
        clear_points(out)

    def on_point(k: int, result: GridPointResult) -> None:
        if writer:
            save_point(out, grid.hash(), k, result)

    result = run_grid_experiment(grid, progress=progress, on_point=on_point, skip=done, **engine)
    result.extra.update(complete=True, device=device, resumed_points=len(done))
    if writer:

        def write() -> None:
            write_grid(result, out)
            clear_points(out)
            checkpoint.clear_points(out, f"{PREFIX}*.npz")  # another grid's, left by an interrupted run

        checkpoint.finish_then_write(result, finish, write)
    return result


def format_grid_table(result: GridResult, mean_std: Callable[[dict], str]) -> str:
    """The per-grid-point table: H, the knob values, final metrics (mean ± std), diverged."""
    names = [n for n, _ in result.grid.axes]
    shown = [m for m in SUMMARY_METRICS if m in result.curves]
    # a column as wide as its knob's name and its longest name ("normalized-gd"), at least 10
    width = {
        n: max(10, len(n), *(len(str(v)) for v in vals if isinstance(v, str))) for n, vals in result.grid.axes
    }
    head = f"{'H':>4}  " + "  ".join(f"{n:>{width[n]}}" for n in names)
    header = f"{head}  " + "  ".join(f"{COLUMN_TITLES[m]:>17}" for m in shown) + "  diverged"
    lines = [header, "-" * len(header)]
    for row in sorted(result.summary(), key=lambda r: r[HEAD_COUNT]):
        knobs = "  ".join(
            f"{row[n]:>{width[n]}}" if isinstance(row[n], str) else f"{row[n]:>{width[n]}.4g}" for n in names
        )
        cells = "  ".join(f"{mean_std(row[m]):>17}" for m in shown)
        lines.append(f"{row[HEAD_COUNT]:>4}  {knobs}  {cells}  {row['n_diverged']}/{row['trials']}")
    return "\n".join(lines)
