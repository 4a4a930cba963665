"""Run a sweep over the number of heads and collect curves and a summary.

A sweep is planned as a list of *points*: one compiled call each, covering one or more H
values (each with all its trials, and with every step size / init scale of ``run_grid``).
Zero-init sweeps take the exact fast path, where every H shares one program; random-init
sweeps group nearby H values into buckets that share one program with padded heads
(``bucket_heads``). Every run of a point is one element of the batch axis, which is
sharded over the devices (``devices=``).

Hooks for checkpointing (``run_sweep``): ``on_point(indices, metrics_by_head, diverged_at)``
is called after each point with what it finished, and ``skip_heads`` hands back H values
finished earlier, with their results, so that they are not run again.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from dynamics.config import Config, log_schedule, validate
from dynamics.data import make_data, width_of
from dynamics.engine import (
    METRICS,
    Batch,
    BatchPlacer,
    Program,
    can_pad_heads,
    float_dtype,
    mask_diverged,
    program_for,
    step_size,
    train_batch,
    uses_fast_path,
)

SUMMARY_METRICS = ("train_loss", "test_loss", "train_error", "test_error")

# What one H's finished runs are: metric -> (trials, L), and diverged_at (trials,), -1 = never.
HeadResult = tuple[dict[str, np.ndarray], np.ndarray]
# on_point(indices into cfg.sweep.heads, metric -> (len(indices), trials, L), (len(indices), trials))
PointCallback = Callable[[list[int], dict[str, np.ndarray], np.ndarray], None]

# Random init: H values share a program padded to the bucket's largest H while the padded
# head count stays within this factor of the real one (see bucket_heads; 1 = never pad).
DEFAULT_BUCKET_SLACK = 1.5


@dataclass
class SweepResult:
    config: Config  # resolved
    heads: np.ndarray  # (n_heads,)
    steps: np.ndarray  # (L,) logged steps, 0 = before the first update
    curves: dict[str, np.ndarray]  # metric -> (n_heads, trials, L); NaN after divergence
    diverged_at: np.ndarray  # (n_heads, trials): step of the first non-finite loss, -1 = never
    wall_time_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> list[dict[str, Any]]:
        """Per H: mean and std over the trials that did not diverge of each final metric."""
        rows = []
        for i, h in enumerate(self.heads):
            ok = self.diverged_at[i] < 0
            row: dict[str, Any] = {
                "heads": int(h),
                "trials": int(ok.size),
                "n_diverged": int((~ok).sum()),
                "diverged": bool((~ok).any()),
                "diverged_at": [int(s) for s in self.diverged_at[i]],
            }
            for name in SUMMARY_METRICS:
                final = self.curves[name][i, ok, -1]
                row[name] = {
                    "mean": float(np.mean(final)) if ok.any() else None,
                    "std": float(np.std(final)) if ok.any() else None,
                }
            rows.append(row)
        return rows


@dataclass(frozen=True)
class Point:
    """One compiled call: ``indices`` (into the sweep's heads) with all their trials and variants."""

    prog: Program
    indices: tuple[int, ...]
    batch_size: int  # B after padding; the same for every point of a program (one compile)
    width: int  # runs vmapped together on a device (the numbers depend on it; see train_batch)


def bucket_heads(heads: Sequence[int], slack: float) -> list[list[int]]:
    """Group H values (sorted) so that each group pads to its largest H at a bounded cost.

    A group G is padded to S = max(G) stored heads; it is kept while |G|·S <= slack·ΣG
    (the padded work at most ``slack`` times the real work). slack = 1 gives one group per H.
    """
    groups: list[list[int]] = []
    for h in sorted(heads):
        if groups and (len(groups[-1]) + 1) * h <= slack * (sum(groups[-1]) + h):
            groups[-1].append(h)
        else:
            groups.append([h])
    return groups


def default_layout(placer: BatchPlacer, runs_per_head: int, n_heads: int) -> tuple[int, int]:
    """(H values per call, vmap width) when the caller does not choose.

    CPU: one run at a time per device (width 1) and as many H per call as fill the devices.
    Measured on this model: a run costs the same per step whether it is vmapped alone or
    with others (the cores are busy either way), and width 1 makes every run's numbers
    independent of the device count and of its batch companions (bit-identical on resume).
    Accelerators: every H of the program in one call, all of a device's runs vmapped.
    """
    if placer.platform == "cpu":
        return min(n_heads, placer.n_devices // math.gcd(placer.n_devices, runs_per_head)), 1
    return n_heads, math.ceil(n_heads * runs_per_head / placer.n_devices)


def plan_points(
    cfg: Config,
    todo: Sequence[int],
    d: int,
    schedule: list[int],
    placer: BatchPlacer,
    runs_per_head: int,
    *,
    heads_per_call: int | None = None,
    width: int | None = None,
    bucket_slack: float = DEFAULT_BUCKET_SLACK,
) -> list[Point]:
    """Split the head indices ``todo`` into points; points of one program share one batch size.

    Programs, buckets and batch sizes follow from all of ``cfg.sweep.heads``, not from
    ``todo``, so a resumed sweep runs every H with the program of an uninterrupted one.
    """
    heads = cfg.sweep.heads
    if uses_fast_path(cfg):
        groups = [list(heads)]
    elif can_pad_heads(cfg):
        groups = bucket_heads(heads, bucket_slack)
    else:
        groups = [[h] for h in heads]
    wanted = {heads[i] for i in todo}
    points = []
    for group in groups:
        prog = program_for(cfg, max(group), d, schedule)
        auto_per_call, auto_width = default_layout(placer, runs_per_head, len(group))
        per_call = min(heads_per_call or auto_per_call, len(group))
        w = width or auto_width
        chunk = placer.n_devices * w  # B must split into devices × chunks of w
        size = -(-(per_call * runs_per_head) // chunk) * chunk
        idx = sorted((heads.index(h) for h in group if h in wanted), key=lambda i: heads[i])
        for start in range(0, len(idx), per_call):
            points.append(Point(prog, tuple(idx[start : start + per_call]), size, w))
    return points


def _prepare(cfg: Config):
    # The data models draw in float32; with x64 on, JAX would draw other numbers (64-bit
    # integers and floats), so the data are drawn as without x64 and simulated in float64.
    with jax.enable_x64(False):
        root = jax.random.PRNGKey(cfg.sweep.seed)
        k_data, k_init = jax.random.split(root)
        data, shared = make_data(cfg.data, k_data, cfg.sweep.trials)
        init_keys = np.stack([np.asarray(jax.random.fold_in(k_init, i)) for i in range(cfg.sweep.trials)])
    schedule = log_schedule(cfg.optim.steps, cfg.sweep.log_every, cfg.sweep.log_points)
    return data, shared, schedule, init_keys


def _run_points(
    cfgs: Sequence[Config],
    todo: Sequence[int],
    *,
    devices,
    heads_per_call: int | None,
    width: int | None,
    bucket_slack: float,
    progress: bool,
):
    """Run heads ``todo`` of every variant config (they differ only in η₀ and σ₀).

    Yields (indices, metrics (K, V, trials, L), diverged_at (K, V, trials)) per point,
    post-processed: divergence from non-finite metrics too, points after it NaN, -1 = never.
    """
    base = cfgs[0]
    heads, trials, steps_total = base.sweep.heads, base.sweep.trials, base.optim.steps
    data, shared, schedule, init_keys = _prepare(base)
    steps = np.array(schedule)
    placer = BatchPlacer(devices)
    placed = placer.data(data)
    V = len(cfgs)
    runs_per_head = V * trials
    points = plan_points(
        base,
        todo,
        width_of(data),
        schedule,
        placer,
        runs_per_head,
        heads_per_call=heads_per_call,
        width=width,
        bucket_slack=bucket_slack,
    )
    fdt = float_dtype()
    bar = tqdm(total=len(todo), desc=base.name, unit="H", disable=not progress or jax.process_index() != 0)
    try:
        for point in points:
            bar.set_postfix(H=",".join(str(heads[i]) for i in point.indices))
            # Runs in the order (head, variant, trial); the batch is padded with copies of the last run.
            runs = [(i, v, t) for i in point.indices for v in range(V) for t in range(trials)]
            runs += [runs[-1]] * (point.batch_size - len(runs))
            batch = Batch(
                trial=np.array([t for _, _, t in runs], dtype=np.int32),
                key=init_keys[[t for _, _, t in runs]],
                n_heads=np.array([heads[i] for i, _, _ in runs], dtype=fdt),
                lr=np.array([step_size(cfgs[v], heads[i]) for i, v, _ in runs], dtype=fdt),
                init_scale=np.array([cfgs[v].model.init_scale for _, v, _ in runs], dtype=fdt),
            )
            metrics, div_at = train_batch(
                point.prog,
                placed,
                placer.batch(batch),
                mesh=placer.mesh,
                width=point.width,
                shared_data=shared,
            )
            metrics, div_at = placer.fetch((metrics, div_at))
            K = len(point.indices)
            n = K * runs_per_head
            metrics = {k: np.array(v[:n], np.float64).reshape(K, V, trials, -1) for k, v in metrics.items()}
            div_at = np.array(div_at[:n]).reshape(K, V, trials)
            # A non-finite metric at a logged step (e.g. exp loss overflowing at the last step,
            # after the in-program check) also counts as divergence at that step.
            bad = ~np.isfinite(metrics["train_loss"])  # (K, V, trials, L)
            first_bad = np.where(bad.any(axis=-1), steps[np.argmax(bad, axis=-1)], div_at)
            div_at = np.minimum(div_at, first_bad)
            mask_diverged(metrics, steps, div_at)
            div_at = np.where(div_at > steps_total, -1, div_at)
            bar.update(K)
            yield list(point.indices), metrics, div_at
    finally:
        bar.close()


def _check_skipped(cfg: Config, skip_heads: Mapping[int, HeadResult], L: int) -> None:
    for h, (metrics, div_at) in skip_heads.items():
        if h not in cfg.sweep.heads:
            raise ValueError(f"skip_heads has H={h}, which is not in sweep.heads={list(cfg.sweep.heads)}")
        want = (cfg.sweep.trials, L)
        for name in METRICS:
            got = np.shape(metrics.get(name))
            if got != want:
                raise ValueError(f"skip_heads[{h}][{name!r}] has shape {got}, expected (trials, L) = {want}")
        if np.shape(div_at) != want[:1]:
            raise ValueError(f"skip_heads[{h}] diverged_at has shape {np.shape(div_at)}, expected {want[:1]}")


def run_sweep(
    cfg: Config,
    *,
    progress: bool = True,
    on_point: PointCallback | None = None,
    skip_heads: Mapping[int, HeadResult] | None = None,
    devices: Sequence[jax.Device] | None = None,
    heads_per_call: int | None = None,
    width: int | None = None,
    bucket_slack: float = DEFAULT_BUCKET_SLACK,
) -> SweepResult:
    """Validate, build the data, run every H (a loop over points), collect curves.

    on_point: called after each point as ``on_point(indices, metrics_by_head, diverged_at)``:
      ``indices`` the positions in ``cfg.sweep.heads`` it ran, ``metrics_by_head[name]`` of
      shape (len(indices), trials, L) and ``diverged_at`` (len(indices), trials), exactly as
      they will appear in the result (NaN after divergence, -1 = never diverged).
    skip_heads: {H: (metrics, diverged_at)} for H values finished earlier, each metric
      (trials, L) and diverged_at (trials,) as ``on_point`` gave them; they are not run and
      their results go into the SweepResult unchanged.
    devices: the JAX devices to shard the runs over (default: all of ``jax.devices()``).
    heads_per_call: H values per compiled call (default: CPU fills the devices, GPU all).
    width: runs vmapped together per device (default: CPU 1, GPU all; see ``default_layout``).
    bucket_slack: random init, how much padded work may buy one shared compile (1 = none).
    """
    cfg = validate(cfg)
    start = time.perf_counter()
    steps = np.array(log_schedule(cfg.optim.steps, cfg.sweep.log_every, cfg.sweep.log_points))
    skip_heads = dict(skip_heads or {})
    _check_skipped(cfg, skip_heads, len(steps))
    heads = list(cfg.sweep.heads)
    n_h, trials, L = len(heads), cfg.sweep.trials, len(steps)
    curves = {k: np.full((n_h, trials, L), np.nan) for k in METRICS}
    diverged_at = np.full((n_h, trials), -1, dtype=np.int32)
    for i, h in enumerate(heads):
        if h in skip_heads:
            metrics, div_at = skip_heads[h]
            for k in METRICS:
                curves[k][i] = metrics[k]
            diverged_at[i] = div_at
    todo = [i for i, h in enumerate(heads) if h not in skip_heads]
    if todo:
        for indices, metrics, div_at in _run_points(
            [cfg],
            todo,
            devices=devices,
            heads_per_call=heads_per_call,
            width=width,
            bucket_slack=bucket_slack,
            progress=progress,
        ):
            by_head = {k: v[:, 0] for k, v in metrics.items()}  # (K, trials, L)
            for k in METRICS:
                curves[k][indices] = by_head[k]
            diverged_at[indices] = div_at[:, 0]
            if on_point is not None:
                on_point(indices, by_head, div_at[:, 0])
    return SweepResult(
        config=cfg,
        heads=np.array(heads),
        steps=steps,
        curves=curves,
        diverged_at=diverged_at,
        wall_time_s=time.perf_counter() - start,
    )


def run_grid(
    cfg: Config,
    *,
    lrs: Sequence[float] | None = None,
    init_scales: Sequence[float] | None = None,
    progress: bool = True,
    devices: Sequence[jax.Device] | None = None,
    heads_per_call: int | None = None,
    width: int | None = None,
    bucket_slack: float = DEFAULT_BUCKET_SLACK,
) -> list[SweepResult]:
    """The sweep of ``cfg`` at every base step size η₀ in ``lrs`` and init scale σ₀ in
    ``init_scales`` (default: the config's), batched into the same compiled calls.

    Returns one SweepResult per (η₀, σ₀), η₀ outer, each equal (to float rounding) to
    ``run_sweep`` of the config with that ``optim.lr`` and ``model.init_scale``.
    """
    cfg = validate(cfg)
    start = time.perf_counter()
    lrs = list(lrs) if lrs is not None else [cfg.optim.lr]
    scales = list(init_scales) if init_scales is not None else [cfg.model.init_scale]
    cfgs = [
        validate(
            dataclasses.replace(
                cfg,
                optim=dataclasses.replace(cfg.optim, lr=lr),
                model=dataclasses.replace(cfg.model, init_scale=s),
            )
        )
        for lr, s in itertools.product(lrs, scales)
    ]
    steps = np.array(log_schedule(cfg.optim.steps, cfg.sweep.log_every, cfg.sweep.log_points))
    n_h, V = len(cfg.sweep.heads), len(cfgs)
    curves = {k: np.full((n_h, V, cfg.sweep.trials, len(steps)), np.nan) for k in METRICS}
    diverged_at = np.full((n_h, V, cfg.sweep.trials), -1, dtype=np.int32)
    for indices, metrics, div_at in _run_points(
        cfgs,
        list(range(n_h)),
        devices=devices,
        heads_per_call=heads_per_call,
        width=width,
        bucket_slack=bucket_slack,
        progress=progress,
    ):
        for k in METRICS:
            curves[k][indices] = metrics[k]
        diverged_at[indices] = div_at
    wall = time.perf_counter() - start
    return [
        SweepResult(
            config=c,
            heads=np.array(cfg.sweep.heads),
            steps=steps,
            curves={k: v[:, j] for k, v in curves.items()},
            diverged_at=diverged_at[:, j],
            wall_time_s=wall,
        )
        for j, c in enumerate(cfgs)
    ]
