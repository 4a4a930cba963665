"""Run a planned sweep: draw its data once, run its points, lay their outputs out per run and head.

``prepare_data`` draws a sweep's data, init keys and trial keys once (``Drawn``); the points
(``run_points``), the planted directions (``planted_directions``) and the theory diagnostics
(``add_diagnostics``) all read that one draw.
"""

from __future__ import annotations

import dataclasses
import hashlib
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np
from tqdm.auto import tqdm

from dynamics import parts
from dynamics.config.diagnostics_checks import from_snapshots
from dynamics.config.schema import Config, Experiment
from dynamics.core import rng
from dynamics.core.data import (
    Data,
    direction_names,
    make_data,
    tied_positions,
    token_width,
    world_initial_params,
)
from dynamics.core.engine import ZERO_STEP, float_dtype, per_slot_key
from dynamics.core.hooks import MetricRef
from dynamics.core.inits import check_outputs, head_shapes
from dynamics.core.program import Batch
from dynamics.errors import ConfigError
from dynamics.infra.executables import exact_matmuls
from dynamics.infra.timings import phase
from dynamics.parts.metrics import REGISTRY, has_head_axes, head_schedule, is_snapshot, metrics_of
from dynamics.parts.registry import is_user_name
from dynamics.sweeps.arguments import metric_record
from dynamics.sweeps.devices import BatchPlacer
from dynamics.sweeps.longrun import run_point
from dynamics.sweeps.midrun import CALL_SECONDS, MidRun, check_seconds
from dynamics.sweeps.plan import (
    make_batch,
    online_sampler,
    plan_points,
    step_size,
    trial_keys,
    uses_fast_path,
)
from dynamics.sweeps.sweep_result import HeadResult, PointCallback, SweepResult, mask_diverged


class Drawn(NamedTuple):
    """What a sweep draws once: every trial's data (``Data``, trials axis first), the data shared
    by every trial (or None), each trial's init key (trials, 2)."""

    data: Data
    shared: Any
    init_keys: np.ndarray


def precision(cfg: Config):
    """The config's precision (``sweep.x64``) as a context: what the run computes in, whatever JAX's
    global setting (a config built as an Experiment by hand, x64 None: JAX's own)."""
    x64 = cfg.sweep.x64
    return jax.enable_x64(bool(jax.config.jax_enable_x64 if x64 is None else x64))


def prepare_data(cfg: Config) -> Drawn:
    """The data and init keys of every trial of ``cfg``'s sweep, drawn once."""
    # The data models draw in float32; with x64 on, JAX would draw other numbers (64-bit
    # integers and floats), so the data are drawn as without x64 and simulated in float64.
    # Keys as jax.random derives them, in numpy (dynamics.core.rng): no compile per key operation.
    k_data, k_init = rng.split(rng.seed(cfg.sweep.seed))
    data_cfg, train = cfg.data, "the training set"
    if online_sampler(cfg) is not None and is_user_name(data_cfg.model):
        # online, n_train has no effect (every batch is fresh): a user's model is asked for one
        # batch's examples, not n_train it may not have (the built-in models draw as they always did)
        data_cfg, train = dataclasses.replace(data_cfg, n_train=cfg.optim.batch_size), "an online batch"
    with jax.enable_x64(False):
        data, shared = make_data(data_cfg, k_data, cfg.sweep.trials, task=cfg.optim.task, train=train)
    given = world_initial_params(cfg.data, data, initial_shapes(cfg, token_width(data), data))
    if given is not None:
        data = data._replace(world_init=given)
    init_keys = np.stack([rng.fold_in(k_init, i) for i in range(cfg.sweep.trials)])
    return Drawn(data, shared, init_keys)


def initial_shapes(cfg: Config, d: int, data: Data | None = None) -> dict[str, tuple[int, ...]]:
    """One head's parameter shapes of ``cfg``'s model (what a world's ``initial_params`` may set),
    as the engine draws them: a matrix readout U (d, o) for ``data``'s vector targets y (n, o), the
    position logits a (T,) (one per tied group) for ``model.query='position'``."""

    m = cfg.model
    layout = parts.KEY_QUERIES[m.key_query]
    if layout.factored and m.head_size == "split" and len(set(cfg.sweep.heads)) > 1:
        if parts.DATA_MODELS[cfg.data.model].sets_init:
            raise ConfigError(
                f"data.model={cfg.data.model!r} sets θ(0) from its world and model.head_size='split' "
                f"gives each H its own d_h: run one H (sweep.heads={list(cfg.sweep.heads)})"
            )
        return {}
    head_size = layout.head_size(m.head_size, d, max(cfg.sweep.heads))
    outputs, positions = 1, None
    if data is not None:
        lead = data.X_train.ndim - 3  # a leading trial axis, or none for data from a file
        outputs = int(data.y_train.shape[-1]) if data.y_train.ndim - lead == 2 else 1
        if parts.QUERIES[m.query].positional:
            tied = tied_positions(cfg)
            positions = max(tied) + 1 if tied else int(data.X_train.shape[-2])
    factored = parts.READOUTS[m.readout].factored
    if parts.READOUTS[m.readout].values:  # a sequence output's value V_h (d, d), drawn as a factored one's
        shapes = head_shapes(d, head_size, parts.QUERIES[m.query].learned, 1, positions, layout.tied, True)
        return {k: v for k, v in shapes.items() if k != "O"}
    if factored and outputs > 1:
        raise ConfigError(
            f"data.model={cfg.data.model!r} has vector targets (o={outputs} outputs); "
            "model.readout='factored' (one output row O_h) is not supported with them: use 'direct'"
        )
    shapes = head_shapes(
        d, head_size, parts.QUERIES[m.query].learned, outputs, positions, layout.tied, factored
    )
    return {k: v for k, v in shapes.items() if k != "U" or m.output != "sequence"}  # sequence: no U


def check_vector_targets(cfg: Config, data: Data, user_metrics: bool = False) -> None:
    """Vector targets y (n, o), o >= 2 (a matrix readout U_h ∈ R^{d×o}): a regression loss, an init
    that draws a matrix readout (``inits.check_outputs``: zero or normal, no bias), no θ(0) from a
    file and no user metric (both written for U_h ∈ R^d); a declared ``outputs`` (``DataModel.outputs``,
    what the memory estimate counts) must be the drawn o. Both the fast path (zero init: every head
    still gets the same gradient) and packing (a head's shapes do not depend on H) hold as for o = 1.
    A one-line ConfigError otherwise."""
    lead = data.X_train.ndim - 3  # a leading trial axis, or none for data from a file
    vector = data.y_train.ndim - lead == 2
    o = int(data.y_train.shape[-1]) if vector else 1
    declares = parts.DATA_MODELS[cfg.data.model].outputs  # what the memory estimate counted
    declared = None if declares is None else int(declares(cfg.data))
    if declared is not None and declared != o:
        raise ConfigError(
            f"data.model={cfg.data.model!r} declares outputs={declared} but its targets y "
            f"have o={o} (shape {tuple(data.y_train.shape[lead:])}): declare the o its sample returns"
        )
    T, d = (int(n) for n in data.X_train.shape[-2:])
    if cfg.model.output == "sequence" and o != T * d:
        raise ConfigError(
            f"model.output='sequence' gives every token its own output, T·d = {T * d} numbers per example; "
            f"data.model={cfg.data.model!r} has targets of o={o}: use a data model with targets (T, d)"
        )
    if not vector:
        return
    try:
        check_outputs(o, init=cfg.model.init, bias=cfg.model.bias)
    except ValueError as err:
        raise ConfigError(f"data.model={cfg.data.model!r}: {err}") from None
    refused = (
        (
            parts.LOSSES[cfg.optim.loss].task != "regression",
            f"optim.loss={cfg.optim.loss!r} (a classification loss)",
        ),
        (cfg.model.init_from is not None, f"model.init_from={cfg.model.init_from!r} (θ(0) with U_h ∈ R^d)"),
        (user_metrics, "a user metric (written for U_h ∈ R^d)"),
        (parts.READOUTS[cfg.model.readout].factored, "model.readout='factored' (one output row O_h)"),
    )
    for bad, what in refused:
        if bad:
            raise ConfigError(
                f"data.model={cfg.data.model!r} has vector targets (o={o} outputs); {what} is not "
                "supported with them: use a regression loss (mse), drawn θ(0) and the built-in metrics"
            )


def run_points(
    cfgs: Sequence[Config],
    schedule: Sequence[int],
    todo: Sequence[int],
    *,
    devices,
    packs_per_call: int | None,
    chunk: int | None,
    slots: int | None,
    progress: bool,
    drawn: Drawn,
    metrics: tuple = (),
    call_seconds: float | None = None,
    midrun: MidRun | None = None,
    claim: Callable[[int], bool] | None = None,
):
    """Run heads ``todo`` of every variant config (they differ only in η₀ and σ₀), on ``drawn``
    (``prepare_data`` of the first config: the sweep draws once, its caller). A long point runs as
    calls of about ``call_seconds`` (default ``midrun.CALL_SECONDS``), the bar moved by steps, its
    state kept in ``midrun`` (``dynamics.sweeps.midrun``). ``claim(j)``, when given, is asked before
    point j (in plan order) runs: False skips it (another process runs it: ``sweeps.workqueue``).

    Yields, per point, (items, metrics {name: (len(items), trials, L)}, diverged_at
    (len(items), trials)) with items the point's (head index, variant) runs, post-processed:
    divergence from non-finite metrics too, points after it NaN, -1 = never.
    """
    base = cfgs[0]
    heads = base.sweep.heads
    placer = BatchPlacer(devices)
    data, shared, init_keys = drawn
    check_vector_targets(base, data, bool(metrics))
    layout = dict(packs_per_call=packs_per_call, chunk=chunk, slots=slots, metrics=metrics)
    # planned before the data go to the devices: an accelerator's layout is refused before it allocates
    points = plan_points(base, todo, token_width(data), schedule, placer, variants=len(cfgs), **layout)
    with phase("data"):
        data_keys = trial_keys(base)
        # The worlds stay out of the engine, but for online sampling: their pytree carries the data
        # config (static), so every data setting compiles its own engine program.
        online = online_sampler(base) is not None
        placed = placer.data(data if online else data._replace(world=None))
    steps = np.array(schedule)
    head_steps = np.array(head_schedule(schedule, base))
    call_s = CALL_SECONDS if call_seconds is None else check_seconds("call_seconds", call_seconds)
    hide = not progress or jax.process_index() != 0
    # steps of every point (a point's packs advance together), moved inside a long point's call
    bar = tqdm(total=len(points) * int(steps[-1]), desc=base.name, unit="step", disable=hide)
    n_train, tokens = int(data.X_train.shape[-3]), int(data.X_train.shape[-2])
    try:
        for j, point in enumerate(points):
            if claim is not None and not claim(j):
                bar.update(int(steps[-1]))
                continue
            point_heads = [heads[i] for i in point.indices]
            bar.set_postfix(H=",".join(map(str, point_heads)))
            batch, rows, cols = make_batch(point, cfgs, init_keys, float_dtype(), data_keys)
            store = point_store(midrun, point, batch) if midrun is not None and midrun.grid else midrun
            on_devices = placer.batch(batch)
            with phase("simulation"):  # its compile is timed apart (dynamics.infra.timings)
                metrics, div_at = run_point(  # (B, R, L), (B, R) on the host
                    point, placed, on_devices, placer, shared=shared, call_s=call_s, bar=bar,
                    watched=progress, store=store, heads=point_heads, n_train=n_train, tokens=tokens,
                )  # fmt: skip
            items, trials = point.items, base.sweep.trials
            zero = metrics.pop(ZERO_STEP, None)  # (B, R, L): normalised GD's first zero step so far
            if zero is not None:
                warn_zero_steps(np.asarray(zero)[rows, cols, -1], items, heads, trials, steps)
            metrics, div_at = lay_out(metrics, div_at, batch, rows, cols, items, base, steps, head_steps)
            yield items, metrics, div_at
            if store is not None:  # the point is saved (``on_point``): its mid-run state is not needed
                store.clear(point_heads)  # (a grid's: kept until its grid points are saved)
    finally:
        bar.close()


def point_store(midrun: MidRun, point, batch) -> MidRun:
    """Where a point of a grid's variants keeps its state: several points run the same H (other
    η₀, σ₀), and which runs a point holds depends on the grid points left to run, so its files are
    named and its state continued by what the point computes: its program, layout and batch."""
    digest = hashlib.sha256(f"{point.prog!r} {point.chunk}".encode())
    for leaf in jax.tree_util.tree_leaves(batch):
        leaf = np.asarray(leaf)
        digest.update(f"{leaf.shape} {leaf.dtype}".encode() + leaf.tobytes())
    name = digest.hexdigest()[:16]
    return midrun.within(f"P{name}-", name)


def lay_out(metrics, div_at, batch, rows, cols, items, base: Config, steps, head_steps):
    """One point's engine outputs laid out per run: the curves (len(items), trials, L) with
    divergence from non-finite metrics too (``finish``), the per-head view per run and head at its
    own steps, NaN from a run's divergence on, as the curves."""
    heads, shape = base.sweep.heads, (len(items), base.sweep.trials)
    per_slot = {k: metrics.pop(k) for k in list(metrics) if per_slot_key(k)}
    viewed = {k: metrics.pop(k) for k in list(metrics) if is_snapshot(k)}  # the bias's, per run
    metrics, div_at = finish(metrics, div_at, rows, cols, shape, steps)
    laid = {k: np.array(v[rows, cols]).reshape(*shape, *v.shape[2:]) for k, v in viewed.items()}
    if per_slot:
        sizes = [heads[i] for i, _ in items]
        laid |= lay_out_heads(per_slot, batch, rows, cols, sizes, base.sweep.trials, max(heads))
    mask_diverged(laid, head_steps, div_at_or_never(div_at, steps))
    metrics.update(laid)
    return metrics, div_at


class ZeroStepWarning(UserWarning):
    """A normalised-GD run whose gradient over its moving parameters was exactly 0 at some update,
    where g/‖g‖ has no direction: a stationary point in any precision (the squared hinge once every
    margin is >= 1: zero loss), or a float32 gradient that underflowed where the softmax saturates.
    From there it stands still instead of moving η."""


def warn_zero_steps(first: np.ndarray, items, heads, trials: int, steps: np.ndarray) -> None:
    """One warning naming the first update with a zero step, of the runs (``first`` per (item, trial),
    in ``items`` × trials order; past the last step: none) that had one."""
    hit = np.flatnonzero(first < steps[-1] + 1)
    if not hit.size:
        return
    at = hit[np.argmin(first[hit])]
    (i, _), trial = items[at // trials], at % trials
    warnings.warn(
        f"normalized GD: {hit.size} of {first.size} runs took a zero step (the gradient over the moving "
        f"parameters is exactly 0: a stationary point, or in float32 an underflow), the first at update "
        f"{int(first[at])} (H={heads[i]}, trial {trial}); from there such a run stands still instead of "
        f"moving η per step: if its loss is not at a minimum, run with --x64",
        ZeroStepWarning,
        stacklevel=2,
    )


def finish(metrics, div_at, rows, cols, shape: tuple[int, int], steps: np.ndarray):
    """A point's outputs (B, R, L) and (B, R) as (items, trials, L) and (items, trials): divergence
    from non-finite logged metrics too, points after it NaN, -1 = never diverged."""
    metrics = {
        k: np.array(v[rows, cols], np.float64).reshape(*shape, *v.shape[2:]) for k, v in metrics.items()
    }
    div_at = np.array(div_at[rows, cols]).reshape(shape)
    # A non-finite metric at a logged step (e.g. exp loss overflowing at the last step, after
    # the in-program check) also counts as divergence at that step.
    bad = ~np.isfinite(metrics["train_loss"])  # (items, trials, L)
    first_bad = np.where(bad.any(axis=-1), steps[np.argmax(bad, axis=-1)], div_at)
    div_at = np.minimum(div_at, first_bad)
    mask_diverged(metrics, steps, div_at)
    return metrics, np.where(div_at > steps[-1], -1, div_at)


def div_at_or_never(div_at: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """diverged_at with -1 (never) as past the last step, for ``mask_diverged``."""
    return np.where(div_at < 0, steps[-1] + 1, div_at)


def lay_out_heads(
    per_slot: dict[str, np.ndarray], batch: Batch, rows, cols, sizes: list[int], trials: int, hmax: int
) -> dict[str, np.ndarray]:
    """The engine's per-slot metrics (B, S, L_h, …) laid out per run and head: (items, trials, L_h, H_max,
    …), NaN past a run's H; the per-head metrics in float32, the snapshots in the engine's type. A
    run's heads are its slots in head order, or on the fast path its one slot standing for H
    identical heads; head–head matrices (S, L_h, S) become (L_h, H, H)."""
    slot_run, slot_head = np.asarray(batch.slot_run), np.asarray(batch.slot_head)
    out: dict[str, np.ndarray] = {}
    for k, v in per_slot.items():
        v = np.asarray(v)  # (B, S, L_h, …)
        pairwise = REGISTRY[k].pairwise  # declared by its metric
        tail = v.shape[3:-1] if pairwise else v.shape[3:]
        shape = (len(sizes), trials, v.shape[2], hmax, *tail) + ((hmax,) if pairwise else ())
        arr = np.full(shape, np.nan, v.dtype if REGISTRY[k].snapshot else np.float32)
        for q, (row, col) in enumerate(zip(rows, cols, strict=True)):
            j, t, H = q // trials, q % trials, sizes[q // trials]
            mine = np.flatnonzero(slot_run[row] == col)
            idx = mine[np.argsort(slot_head[row, mine])] if len(mine) == H else np.repeat(mine[:1], H)
            x = v[row][idx]  # (H, L, …)
            if pairwise:
                x = x[..., idx]  # (H, L, …, H)
            if pairwise:
                arr[j, t, :, :H, ..., :H] = np.moveaxis(x, 0, 1)
            else:
                arr[j, t, :, :H] = np.moveaxis(x, 0, 1)
        out[k] = arr
    return out


def start_curves(cfg: Config, skip_heads: Mapping[int, HeadResult], L: int):
    """(curves {metric: (n_heads, trials, L)}, diverged_at (n_heads, trials), the indices of the
    H values to run): NaN and -1 everywhere but for the finished H values of ``skip_heads``."""
    heads, trials = list(cfg.sweep.heads), cfg.sweep.trials
    curves = {k: np.full((len(heads), trials, L), np.nan) for k in metrics_of(cfg)}
    diverged_at = np.full((len(heads), trials), -1, dtype=np.int32)
    for i, h in enumerate(heads):
        if h in skip_heads:
            metrics, diverged_at[i] = skip_heads[h]
            for k, v in metrics.items():
                if k not in curves:  # per-head curves, snapshots, the user's metrics
                    curves[k] = np.full((len(heads), *np.shape(v)), np.nan, float_type(v))
            for k in curves:
                curves[k][i] = metrics[k]
    return curves, diverged_at, [i for i, h in enumerate(heads) if h not in skip_heads]


def add_head_steps(curves: dict[str, np.ndarray], cfg: Config, steps) -> None:
    """``curves["head_steps"]`` (L_h,), the steps of the per-head view, where it has curves (in place)."""
    if any(has_head_axes(k) for k in curves):
        curves["head_steps"] = np.array(head_schedule(steps, cfg))


def add_records(result: SweepResult, refs: tuple[MetricRef, ...], drawn: Drawn) -> None:
    """What the curves need beside them: the per-head view's steps (``head_steps``), the planted
    directions that the per-planted-direction curves are with (names and vectors, from ``drawn``),
    and each user metric's function."""
    add_head_steps(result.curves, result.config, result.steps)
    if any(k in REGISTRY and REGISTRY[k].kind == "planted" for k in result.curves):
        result.planted = planted_directions(drawn)
        result.extra["directions"] = list(result.planted)
    if refs:  # what each user curve is: its function, by module and name
        result.extra["user_metrics"] = {r.name: metric_record(r.fn) for r in refs}


def collect(runs, todo, heads, curves, diverged_at, on_point: PointCallback | None) -> None:
    """Each point's results from ``run_points`` into ``curves`` and ``diverged_at`` (in place),
    per-head curves and snapshots allocated as they first come; ``on_point`` told of each."""
    for items, metrics, div_at in runs:
        keep = [j for j, (i, _) in enumerate(items) if i in todo]  # not the skipped H of a pack
        indices = [items[j][0] for j in keep]
        by_head = {k: v[keep] for k, v in metrics.items()}  # (K, trials, L[, …])
        for k, v in by_head.items():
            if k not in curves:  # per-head curves, snapshots, the user's metrics: as they first come
                curves[k] = np.full((len(heads), *v.shape[1:]), np.nan, float_type(v))
        for k in curves:
            curves[k] = put(curves[k], indices, by_head[k])
        diverged_at[indices] = div_at[keep]
        if on_point is not None and indices:
            on_point([heads[i] for i in indices], by_head, div_at[keep])


def put(curve: np.ndarray, indices: list[int], value: np.ndarray) -> np.ndarray:
    """``curve`` with ``value`` at ``indices`` of its first axis; a user metric whose shape depends
    on H (one value per head) grows the curve to the largest shape, NaN-padded as the per-head curves."""
    curve = grown(curve, 1, value.shape[1:])
    curve[(indices, *(slice(0, n) for n in value.shape[1:]))] = value
    return curve


def grown(curve: np.ndarray, lead: int, tail: Sequence[int]) -> np.ndarray:
    """``curve`` with each axis after its first ``lead`` at least as long as ``tail``'s, NaN-padded
    (``curve`` itself when they are)."""
    have = curve.shape[lead:]
    if all(h >= t for h, t in zip(have, tail, strict=True)):
        return curve
    out = np.full((*curve.shape[:lead], *np.maximum(have, tail)), np.nan, float_type(curve))
    out[tuple(slice(0, n) for n in curve.shape)] = curve
    return out


def float_type(a) -> np.dtype:
    """The float type a curve keeps: its own (the per-head curves' float32), float64 for the rest."""
    dtype = np.asarray(a).dtype
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


def planted_directions(drawn: Drawn) -> dict[str, np.ndarray]:
    """The planted directions of every trial's world, name -> (trials, d) float32, the rows of the
    per-head |cos| curves' last axis in order (``dynamics.core.data.direction_names``); read from
    ``drawn`` (``prepare_data(cfg)``, the sweep's one draw)."""
    data = drawn.data
    if data.directions is None:
        return {}
    rows = np.asarray(data.directions, np.float32)  # (trials, P, d)
    return {name: rows[:, p] for p, name in enumerate(direction_names(data))}


def add_diagnostics(exp: Experiment, result: SweepResult, progress: bool, drawn: Drawn | None) -> None:
    """The theory diagnostics (``dynamics.theory.replay``) into ``result.curves`` and ``result.extra``,
    on ``drawn`` (``prepare_data(exp.config)``, the sweep's one draw; None only for the max-margin
    view of saved snapshots, which then draws the data once itself)."""
    from dynamics.theory import replay as theory  # lazy: the theory layer: diagnostics only

    cfg = exp.config
    if from_snapshots(cfg.sweep):  # the max-margin view of the engine's own θ, every logged step
        from dynamics.theory.maxmargin import diagnostic_curves  # lazy: the theory layer: diagnostics only

        with phase("diagnostics"):
            own = {} if drawn is None else {"data": drawn.data, "shared": drawn.shared}  # not drawn again
            curves, summary = diagnostic_curves(result, norm=cfg.sweep.maxmargin_norm, **own)
        result.curves.update(curves)
        result.extra["diagnostics"] = summary
        return
    with phase("diagnostics"), exact_matmuls():
        data, _, init_keys = drawn
        lrs = [step_size(cfg, h) for h in cfg.sweep.heads]
        curves, summary = theory.compute(
            exp,
            data,
            init_keys,
            lrs,
            uses_fast_path(cfg),
            result.curves["train_loss"],
            result.diverged_at,
            progress=progress and jax.process_index() == 0,
        )
    result.curves.update(curves)
    result.extra["diagnostics"] = summary
