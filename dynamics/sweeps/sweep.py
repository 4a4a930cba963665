"""Run a sweep over the number of heads (``run_sweep``), or the same sweep at several base step
sizes and init scales in the same compiled calls (``run_grid``).

The jobs behind them live apart: the result and its frames (``dynamics.sweeps.sweep_result``), the
planning and packing of runs into compiled calls (``dynamics.sweeps.plan``), running the points
on data drawn once (``dynamics.sweeps.execute``), the arguments' checks
(``dynamics.sweeps.arguments``) and the memory estimate (``dynamics.sweeps.memory``).

Hooks for checkpointing (``run_sweep``): ``on_point(heads, metrics_by_head, diverged_at)``
is called after each point with the H values it finished (ascending) and their results, and
``skip_heads`` hands back H values finished earlier, with their results, so that they are
not run again.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from dynamics.config.schema import Config, Experiment, resolve
from dynamics.parts.metrics import metrics_of
from dynamics.sweeps.arguments import (
    as_config,
    check_layout,
    check_skipped,
    grid_values,
    init_scale_values,
    metric_refs,
    variant,
    warn_identical,
    with_data,
)
from dynamics.sweeps.execute import (
    add_diagnostics,
    add_records,
    collect,
    float_type,
    planted_directions,
    precision,
    prepare_data,
    run_points,
    start_curves,
)
from dynamics.sweeps.memory import check_memory
from dynamics.sweeps.midrun import MidRun, check_seconds
from dynamics.sweeps.plan import pack_runs, plan_points, program_for, step_size, trial_keys
from dynamics.sweeps.sweep_result import HeadResult, PointCallback, SweepResult

__all__ = [
    "HeadResult",
    "PointCallback",
    "SweepResult",
    "pack_runs",
    "plan_points",
    "planted_directions",
    "prepare_data",
    "program_for",
    "run_grid",
    "run_sweep",
    "step_size",
    "trial_keys",
]


def run_sweep(
    cfg: Config | Experiment,
    *,
    data: Any = None,
    progress: bool = True,
    on_point: PointCallback | None = None,
    skip_heads: Mapping[int, HeadResult] | None = None,
    devices: Sequence[jax.Device] | None = None,
    packs_per_call: int | None = None,
    chunk: int | None = None,
    slots: int | None = None,
    metrics: Mapping[str, Callable] | None = None,
    call_seconds: float | None = None,
    midrun: MidRun | None = None,
) -> SweepResult:
    """Draw the data, run every H (a loop over points), collect curves.

    cfg: a Config, an Experiment, a preset's name or None (the defaults).
    data: a data model object of your own (``setup`` and ``sample``: ``datamodels.protocol``) to
      run instead of ``cfg.data.model``, or None. Each trial sets up its own world.
    on_point: called after each point as ``on_point(heads, metrics_by_head, diverged_at)``:
      ``heads`` the H values it finished (ascending), ``metrics_by_head[name]`` of shape
      (len(heads), trials, L) and ``diverged_at`` (len(heads), trials), exactly as they will
      appear in the result (NaN after divergence, -1 = never diverged).
    skip_heads: {H: (metrics, diverged_at)} for H values finished earlier, each metric
      (trials, L) and diverged_at (trials,) as ``on_point`` gave them; they are not run
      (unless they share a pack with an H that is) and their results go into the
      SweepResult unchanged.
    devices: the JAX devices to shard the runs over (default: all of ``jax.devices()``).
    packs_per_call: packs per compiled call (default: CPU fills the devices, GPU all).
    chunk: packs vmapped together per device (default: CPU 1, GPU all that its memory holds; see
      ``default_layout`` and ``fit_chunk``).
    slots: random init, head slots per pack (default: ``default_slots``; see ``plan_points``).
    metrics: {name: fn(params, data) -> array}, the user's metrics compiled into the run and
      logged at every logged step as the curve ``name`` (n_heads, trials, L, …): ``fn`` gets one
      run's parameters with every head and the trial's test set (``dynamics.core.hooks``). One
      program per H then (H is static for them); such programs are not kept on disk.
    call_seconds: a point estimated to take longer than twice this runs as compiled calls of about
      this length (default 2 s), the progress bar moved by the steps each made; the same numbers.
    midrun: where a long point keeps its state every few seconds (``dynamics.sweeps.midrun.MidRun``;
      ``run_checkpointed`` passes one), and with ``resume`` continues from it.

    A sweep whose memory estimate exceeds the limit is refused before anything is drawn, as on
    the command line (``dynamics.sweeps.memory``).
    """
    layout = dict(devices=devices, packs_per_call=packs_per_call, chunk=chunk, slots=slots)
    check_layout(**layout, progress=progress, on_point=on_point)
    if call_seconds is not None:
        check_seconds("call_seconds", call_seconds)
    exp = resolve(with_data(as_config(cfg, "run_sweep"), data))
    with precision(exp.config):
        long_runs = dict(call_seconds=call_seconds, midrun=midrun)
        return _run_sweep(exp, progress, on_point, skip_heads, {**layout, **long_runs}, metrics)


def _run_sweep(exp: Experiment, progress, on_point, skip_heads, layout, metrics) -> SweepResult:
    cfg, steps = exp.config, np.array(exp.steps)
    refs = metric_refs(cfg, metrics)
    check_memory([cfg], len(steps))
    warn_identical(cfg)
    start = time.perf_counter()
    check_skipped(cfg, {} if skip_heads is None else skip_heads, len(steps))
    heads = list(cfg.sweep.heads)
    curves, diverged_at, todo = start_curves(
        cfg, {int(h): v for h, v in (skip_heads or {}).items()}, len(steps)
    )
    drawn = prepare_data(cfg)  # once: the runs, the planted directions and the diagnostics read it
    if todo:
        runs = run_points([cfg], exp.steps, todo, progress=progress, metrics=refs, drawn=drawn, **layout)
        collect(runs, todo, heads, curves, diverged_at, on_point)
    result = SweepResult(
        config=cfg, heads=np.array(heads), steps=steps, curves=curves, diverged_at=diverged_at
    )
    add_records(result, refs, drawn)
    if cfg.sweep.diagnostics:  # off: nothing below runs, the curves are the engine's alone
        add_diagnostics(exp, result, progress, drawn)
    result.wall_time_s = time.perf_counter() - start
    return result


def run_grid(
    cfg: Config | str | None = None,
    *,
    data: Any = None,
    lrs: Sequence[float] | None = None,
    init_scales: Sequence[float] | None = None,
    progress: bool = True,
    devices: Sequence[jax.Device] | None = None,
    packs_per_call: int | None = None,
    chunk: int | None = None,
    slots: int | None = None,
    call_seconds: float | None = None,
) -> list[SweepResult]:
    """The sweep of ``cfg`` at every base step size η₀ in ``lrs`` and init scale σ₀ in
    ``init_scales`` (default: the config's), batched into the same compiled calls (with
    random init, runs of different η₀, σ₀ and H share packs).

    ``cfg``: a Config, a preset's name or None (the defaults); ``data``: as for ``run_sweep``;
    ``lrs`` and ``init_scales``: a list of numbers, one number, a string as on the command line
    ('0.1,1', '1e-2:1e2:5') or None (the config's value); ``call_seconds``: as ``run_sweep``'s (a
    long compiled call split into calls of about this length, the bar moved inside it).

    Returns one SweepResult per (η₀, σ₀), η₀ outer, each equal (to float rounding) to
    ``run_sweep`` of the config with that ``optim.lr`` and ``model.init_scale``: its metrics, its
    per-head curves and snapshots, its planted directions and its theory diagnostics
    (``sweep.diagnostics``). A grid over any other knob is ``dynamics.run_grid`` with the knobs as
    keywords (``optimizer=["gd", "adam"]``), or ``dynamics.sweeps.grid_runner.run_grid_experiment``.
    """
    check_layout(packs_per_call=packs_per_call, chunk=chunk, slots=slots, progress=progress, devices=devices)
    if call_seconds is not None:
        check_seconds("call_seconds", call_seconds)
    exp = resolve(with_data(as_config(cfg, "run_grid"), data))
    cfg, steps = exp.config, np.array(exp.steps)
    warn_identical(cfg)
    start = time.perf_counter()
    lrs = grid_values("lrs", lrs, cfg.optim.lr)
    scales = init_scale_values(cfg, init_scales)
    cfgs = [variant(cfg, lr, s) for lr, s in itertools.product(lrs, scales)]
    check_memory(cfgs, len(steps))
    layout = dict(devices=devices, packs_per_call=packs_per_call, chunk=chunk, slots=slots)
    drawn = prepare_data(cfg)  # the variants differ in η₀ and σ₀ only: one draw for all
    n_h = len(cfg.sweep.heads)
    runs = run_points(
        cfgs, exp.steps, list(range(n_h)), progress=progress, drawn=drawn, call_seconds=call_seconds, **layout
    )
    results = _variant_results(cfgs, steps, runs)
    for result in results:  # each variant's records and diagnostics, as run_sweep's
        add_records(result, (), drawn)
        if cfg.sweep.diagnostics:
            add_diagnostics(Experiment(result.config, exp.steps), result, progress, drawn)
    wall = time.perf_counter() - start
    for result in results:
        result.wall_time_s = wall
    return results


def _variant_results(cfgs: list[Config], steps: np.ndarray, runs) -> list[SweepResult]:
    """One SweepResult per variant config from ``run_points``' points (every H of every variant):
    per-head curves and snapshots allocated as they first come."""
    base = cfgs[0]
    n_h, V, trials = len(base.sweep.heads), len(cfgs), base.sweep.trials
    curves = {k: np.full((n_h, V, trials, len(steps)), np.nan) for k in metrics_of(base)}
    diverged_at = np.full((n_h, V, trials), -1, dtype=np.int32)
    for items, metrics, div_at in runs:
        for j, (i, v) in enumerate(items):
            for k, values in metrics.items():
                if k not in curves:
                    curves[k] = np.full((n_h, V, *values.shape[1:]), np.nan, float_type(values))
                curves[k][i, v] = values[j]
            diverged_at[i, v] = div_at[j]
    heads = np.array(base.sweep.heads)
    return [
        SweepResult(
            config=c,
            heads=heads,
            steps=steps,
            curves={k: v[:, j] for k, v in curves.items()},
            diverged_at=diverged_at[:, j],
        )
        for j, c in enumerate(cfgs)
    ]
