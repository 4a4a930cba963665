"""Run a sweep over the number of heads and collect curves and a summary.

A sweep is planned as a list of *points*: one compiled call each, covering one or more
*packs* (``plan_points``), each with all its trials. A pack is runs of one trial — of any
H, step size and init scale of ``run_grid`` — whose heads share the program's head slots
(``engine``). Zero-init sweeps take the exact fast path, one slot of weight H per run and
one program for every H; random-init sweeps pack their runs first-fit decreasing
(``pack_runs``) into S slots (``default_slots``), one program for every H as well; only
factored split heads (d_h = d // H) need one program per H. Every pack × trial is one
element of the batch axis, which is sharded over the devices (``devices=``).

Hooks for checkpointing (``run_sweep``): ``on_point(heads, metrics_by_head, diverged_at)``
is called after each point with the H values it finished (ascending) and their results, and
``skip_heads`` hands back H values finished earlier, with their results, so that they are
not run again.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from dynamics import parts
from dynamics.config.schema import (
    LR_SCALINGS,
    Config,
    ConfigError,
    Experiment,
    IdenticalTrialsWarning,
    identical_trials,
    no_effect,
    resolve,
    validate,
)
from dynamics.core import rng
from dynamics.core.data import ModelRef, data_model, direction_names, make_data, token_width
from dynamics.core.engine import Batch, Program, float_dtype, per_slot_key, train_batch
from dynamics.core.hooks import MetricRef
from dynamics.core.update import GroupRule
from dynamics.infra.timings import phase
from dynamics.parts.metrics import (  # noqa: F401
    COLUMN_TITLES,
    SUMMARY_METRICS,
    head_metrics_on,
    metric_names,
    metrics_of,
)
from dynamics.parts.registry import source_record
from dynamics.sweeps import plateaus
from dynamics.sweeps.devices import BatchPlacer

# Sweep policy: what a config asks of the engine.


def step_size(cfg: Config, n_heads: int) -> float:
    """η(H) = η₀ · H^p (docs/model.md), the step of every optimiser (GD, SGD, normalised GD, Adam)."""
    return cfg.optim.lr * n_heads ** LR_SCALINGS[cfg.optim.lr_scaling]


uses_fast_path = parts.uses_fast_path  # the parts' rules (dynamics.parts.rules)
can_pack_heads = parts.can_pack_heads


def program_for(
    cfg: Config, slots: int, d: int, schedule: list[int], runs: int = 1, metrics: tuple = (), heads: int = 0
) -> Program:
    """The program that runs ``cfg`` in packs of S = ``slots`` slots and R = ``runs`` runs; with the
    user's ``metrics`` (``MetricRef``s), one run of H = ``heads`` per pack."""
    return Program(
        slots=slots,
        runs=runs,
        fast_path=uses_fast_path(cfg),
        d=d,
        query=cfg.model.query,
        norm=cfg.model.norm,
        key_query=cfg.model.key_query,
        head_size=cfg.model.head_size,
        init=cfg.model.init,
        optimizer=cfg.optim.optimizer,
        loss=cfg.optim.loss,
        segments=tuple(int(s) for s in np.diff([0, *schedule])),
        attention=cfg.model.attention,
        bias=cfg.model.bias,
        init_from=cfg.model.init_from is not None,
        head_metrics=head_metrics_on(cfg),
        save_params=cfg.sweep.save_params,
        temperature=float(cfg.model.temperature),
        temperature_decay=float(cfg.model.temperature_decay),
        batch_size=int(cfg.optim.batch_size or 0) if parts.OPTIMIZERS[cfg.optim.optimizer].minibatch else 0,
        sampling=cfg.optim.sampling,
        sampler=online_sampler(cfg),
        groups=group_rules(cfg),
        constraint=cfg.optim.constraint,
        ngd_eps=float(cfg.optim.ngd_eps),
        ngd_per_group=bool(cfg.optim.ngd_per_group),
        user_metrics=tuple(metrics),
        metric_heads=int(heads) if metrics else 0,
    )


def online_sampler(cfg: Config) -> ModelRef | None:
    """The data model that draws online SGD's batches (a static reference), or None."""
    if not (parts.OPTIMIZERS[cfg.optim.optimizer].minibatch and parts.SAMPLINGS[cfg.optim.sampling].fresh):
        return None
    return ModelRef(data_model(cfg.data), cfg.data.model)


def group_rules(cfg: Config) -> tuple[tuple[str, GroupRule], ...]:
    """The step rules of the parameter groups (readout, attention) that ``cfg.optim`` sets."""
    rules = []
    for group in parts.GROUPS:
        start, stop = getattr(cfg.optim, f"{group}_steps") or (0, None)
        factor, decay = (float(getattr(cfg.optim, f"{group}_{k}")) for k in ("lr_factor", "weight_decay"))
        rules.append((group, GroupRule(factor, int(start), None if stop is None else int(stop), decay)))
    return tuple(rules)


EXTRA_PREFIXES = ("head_", "param_")  # curves beyond the metrics: per head (H_max axis), snapshots of θ
RESERVED_PREFIXES = (*EXTRA_PREFIXES, "planted_", "gridpoint_")  # not a user metric's name


def metric_record(fn: Callable) -> dict[str, str | None]:
    """What results.json says of a user metric: its function by module and name, and its file."""
    name = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', type(fn).__name__)}"
    return {"function": name, **source_record(fn)}


def metric_refs(cfg: Config, metrics: Mapping[str, Callable] | None) -> tuple[MetricRef, ...]:
    """The user's ``metrics`` ({name: fn}) as static references, names checked: an identifier,
    none of the curves the run logs itself (its metrics, per-head curves, snapshots, diagnostics)."""
    if metrics is None:
        return ()
    if not isinstance(metrics, Mapping):
        raise TypeError(f"metrics={metrics!r:.80} must be a dict {{name: fn(params, data) -> array}} or None")
    from dynamics.theory.replay import CURVES  # the diagnostics' curves

    taken = {*metric_names("classification"), *metric_names("regression"), *metrics_of(cfg)}
    taken |= {name for names in CURVES.values() for name in names}
    refs = []
    for name, fn in metrics.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"metric name {name!r} must be a Python identifier (letters, digits, _)")
        if name in taken or name.startswith(RESERVED_PREFIXES):
            raise ConfigError(
                f"metric name {name!r} is taken by mhsim's own curves ({', '.join(sorted(taken))} and "
                f"names starting {', '.join(RESERVED_PREFIXES)}); choose another"
            )
        if not callable(fn):
            raise TypeError(f"metric {name!r}: {fn!r:.80} is not callable; give fn(params, data) -> array")
        refs.append(MetricRef(fn, name))
    return tuple(refs)


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
        """θ at the logged steps (``sweep.save_params``), by name: a head's arrays (n_heads, trials, L,
        H_max, …) NaN past a run's H, the bias (n_heads, trials, L); empty when not saved."""
        return {k[len("param_") :]: v for k, v in self.curves.items() if k.startswith("param_")}

    @property
    def complete(self) -> bool:
        """False for the partial results of an interrupted run (``extra["heads_todo"]`` lists the
        H values it did not finish); True otherwise."""
        return bool(self.extra.get("complete", True))

    def _summary_metrics(self) -> list[str]:
        return [m for m in SUMMARY_METRICS if m in self.curves]

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
            # each trial's plateaus and drops of the training loss (dynamics.sweeps.plateaus)
            row["plateaus"] = [plateaus.summary(self.steps, curve) for curve in self.curves["train_loss"][i]]
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
        """A tidy pandas DataFrame: one row per H × trial × logged step, one column per metric
        (NaN after a trial's divergence), with ``lr`` (η₀) and ``init_scale`` to tell apart the
        results of ``run_grid`` once concatenated. Theory diagnostics are columns too (NaN at
        the steps they were not computed); their step list ``diagnostic_steps`` is not. The
        per-head curves are in ``head_frame()``, the parameter snapshots in ``params``."""
        import pandas as pd

        n_h, trials, L = self.diverged_at.shape + (len(self.steps),)
        per_step = {k: v for k, v in self.curves.items() if np.shape(v) == (n_h, trials, L)}
        h, t, s = np.meshgrid(np.arange(n_h), np.arange(trials), np.arange(L), indexing="ij")
        frame = {
            "heads": self.heads[h.ravel()],
            "lr": self.config.optim.lr,
            "init_scale": self.config.model.init_scale,
            "trial": t.ravel(),
            "step": self.steps[s.ravel()],
        }
        frame.update({k: np.asarray(v).reshape(-1) for k, v in per_step.items()})  # (H, trials, L) C order
        return pd.DataFrame(frame)

    def head_frame(self):
        """The per-head curves (``head_*``) as a tidy pandas DataFrame: one row per H × trial ×
        logged step × head h < H, columns ``heads``, ``lr``, ``init_scale``, ``trial``, ``step``,
        ``head`` and one per metric (the name without ``head_``). Empty when none were logged."""
        import pandas as pd

        per_head = {k[len("head_") :]: np.asarray(v) for k, v in self.curves.items() if k.startswith("head_")}
        if not per_head:
            return pd.DataFrame(columns=["heads", "lr", "init_scale", "trial", "step", "head"])
        n_h, trials, L, h_max = next(iter(per_head.values())).shape[:4]
        i, t, s, h = np.meshgrid(*(np.arange(n) for n in (n_h, trials, L, h_max)), indexing="ij")
        keep = (h < self.heads[i]).ravel()  # head h of a run with H ≤ h does not exist
        frame = {
            "heads": self.heads[i.ravel()][keep],
            "lr": self.config.optim.lr,
            "init_scale": self.config.model.init_scale,
            "trial": t.ravel()[keep],
            "step": self.steps[s.ravel()][keep],
            "head": h.ravel()[keep],
        }
        for name, v in per_head.items():  # (n_h, trials, L, H_max[, ...]): trailing axes become columns
            flat = v.reshape(n_h * trials * L * h_max, -1)[keep]
            if flat.shape[1] == 1:
                frame[name] = flat[:, 0]
            else:
                frame.update({f"{name}_{j}": flat[:, j] for j in range(flat.shape[1])})
        return pd.DataFrame(frame)

    def summary_frame(self):
        """``summary()`` as a pandas DataFrame indexed by H: the final ``<metric>_mean`` and
        ``<metric>_std`` over the trials that did not diverge, and ``n_diverged``."""
        import pandas as pd

        rows = []
        for row in self.summary():
            flat = {"heads": row["heads"], "trials": row["trials"], "n_diverged": row["n_diverged"]}
            for name in self._summary_metrics():
                for stat in ("mean", "std"):
                    value = row[name][stat]
                    flat[f"{name}_{stat}"] = np.nan if value is None else value
            rows.append(flat)
        return pd.DataFrame(rows).set_index("heads")


# What one run of a sweep is: (index into cfg.sweep.heads, variant index of run_grid).
Item = tuple[int, int]


@dataclass(frozen=True)
class Point:
    """One compiled call: ``packs`` (each the runs sharing one pack's slots) with all their trials."""

    prog: Program
    packs: tuple[tuple[Item, ...], ...]
    batch_size: int  # B after padding; the same for every point of a program (one compile)
    chunk: int  # packs vmapped together on a device (the numbers depend on it; see train_batch)

    @property
    def items(self) -> list[Item]:
        return [item for pack in self.packs for item in pack]

    @property
    def indices(self) -> list[int]:
        """The head indices this point runs (for some or all of their variants)."""
        return sorted({i for i, _ in self.items})


def pack_runs(sizes: Sequence[int], capacity: int) -> list[list[int]]:
    """First-fit decreasing: the positions of ``sizes`` grouped so that each group sums to at
    most ``capacity`` (every size must fit). Deterministic: ties keep their order."""
    if sizes and max(sizes) > capacity:
        raise ValueError(f"slots={capacity} is smaller than the largest H={max(sizes)}: no pack can hold it")
    bins: list[list[int]] = []
    room: list[int] = []
    for pos in sorted(range(len(sizes)), key=lambda j: -sizes[j]):
        for b, free in enumerate(room):
            if sizes[pos] <= free:
                bins[b].append(pos)
                room[b] -= sizes[pos]
                break
        else:
            bins.append([pos])
            room.append(capacity - sizes[pos])
    return bins


def default_slots(sizes: Sequence[int]) -> int:
    """S for packing runs of these head counts: the smallest S in [max H, 2·max H] whose packs
    hold at most 2 % more slots than the best S there (larger packs are not faster per head on
    the CPU, smaller ones split better over devices). Depends on the sweep only, not on the
    machine, so the same sweep packs the same way everywhere."""
    top = max(sizes)
    total = {S: S * len(pack_runs(sizes, S)) for S in range(top, 2 * top + 1)}
    best = min(total.values())
    return min(S for S, t in total.items() if t <= 1.02 * best)


def default_layout(placer: BatchPlacer, trials: int, n_packs: int) -> tuple[int, int]:
    """(packs per call, vmap chunk) when the caller does not choose.

    CPU: one pack at a time per device (chunk 1), and as few packs per call as fill the
    devices evenly (progress and checkpoints after every call). Measured on this model with
    one CPU device per core (the command lines' default): a pack costs the same per step
    whether it is vmapped alone or with others, since the cores are busy either way (on a
    single CPU device, vmapping 5 packs was 15-20 % faster only because XLA then spreads the
    larger ops over the cores); and chunk 1 makes every run's numbers independent of the
    device count and of its batch companions (bit-identical on resume).
    Accelerators: every pack of the program in one call, all of a device's packs vmapped.
    """
    if placer.platform == "cpu":
        return min(n_packs, placer.n_devices // math.gcd(placer.n_devices, trials)), 1
    return n_packs, math.ceil(n_packs * trials / placer.n_devices)


def program_groups(
    cfg: Config, d: int, schedule: list[int], variants: int, slots: int | None, metrics: tuple
) -> list[tuple[Program, list[list[Item]]]]:
    """Each program of a sweep with its packs, the (H index, variant) runs sharing a pack's slots
    (the rules of ``plan_points``)."""
    heads = cfg.sweep.heads
    items = [(i, v) for i in range(len(heads)) for v in range(variants)]
    groups: list[tuple[Program, list[list[Item]]]] = []
    if metrics:
        fast = uses_fast_path(cfg)
        for i, h in enumerate(heads):
            prog = program_for(cfg, 1 if fast else h, d, schedule, metrics=metrics, heads=h)
            groups.append((prog, [[(i, v)] for v in range(variants)]))
    elif uses_fast_path(cfg):
        groups.append((program_for(cfg, 1, d, schedule), [[it] for it in items]))
    elif can_pack_heads(cfg):
        sizes = [heads[i] for i, _ in items]
        capacity = slots or default_slots(sizes)
        packs = [[items[j] for j in b] for b in pack_runs(sizes, capacity)]
        groups.append((program_for(cfg, capacity, d, schedule, max(map(len, packs))), packs))
    else:
        for i, h in enumerate(heads):
            groups.append((program_for(cfg, h, d, schedule), [[(i, v)] for v in range(variants)]))
    return groups


def plan_points(
    cfg: Config,
    todo: Sequence[int],
    d: int,
    schedule: list[int],
    placer: BatchPlacer,
    *,
    variants: int = 1,
    packs_per_call: int | None = None,
    chunk: int | None = None,
    slots: int | None = None,
    metrics: tuple = (),
) -> list[Point]:
    """The compiled calls that run the heads ``todo`` (indices into ``cfg.sweep.heads``).

    Every (H, variant) run of a trial is packed with others into S head slots:
    - zero init, full key-query (the fast path): one slot of weight H per run, one program;
    - random init: first-fit decreasing into S = ``slots`` slots (default: ``default_slots``),
      one program for every H (no padding of H, one compile);
    - factored split heads (d_h = d // H differs per H): one program per H, one run per pack;
    - with the user's ``metrics``: one program per H, one run per pack (a metric sees the run's
      H heads, so H is static), the fast path's one slot expanded to H heads for them.
    Packs, programs and batch sizes follow from all of ``cfg.sweep.heads``, not from ``todo``,
    so a resumed sweep runs every H in the pack of an uninterrupted one.
    """
    groups = program_groups(cfg, d, schedule, variants, slots, metrics)
    wanted = set(todo)
    trials = cfg.sweep.trials
    points = []
    for prog, packs in groups:
        auto_per_call, auto_chunk = default_layout(placer, trials, len(packs))
        per_call = min(packs_per_call or auto_per_call, len(packs))
        w = chunk or auto_chunk
        most = max(per_call, packs_per_call or 0) * trials
        if chunk is not None and chunk > most:  # chunk=10**9 allocated a batch of 10⁹ copies
            raise ValueError(
                f"chunk={chunk} is more than the {most} runs of a call (packs per call × trials): "
                f"it would only pad the batch with copies"
            )
        block = placer.n_devices * w  # B must split into devices × chunks of w
        size = -(-(per_call * trials) // block) * block
        run = [tuple(p) for p in packs if any(i in wanted for i, _ in p)]
        for start in range(0, len(run), per_call):
            points.append(Point(prog, tuple(run[start : start + per_call]), size, w))
    return points


def make_batch(
    point: Point, cfgs: Sequence[Config], init_keys: np.ndarray, dtype: np.dtype, data_keys: np.ndarray
) -> tuple[Batch, np.ndarray, np.ndarray]:
    """The batch of a point (padded with copies of its last element), and where each run's
    results are in its (B, R, …) outputs: batch rows and run columns, one per (item, trial)
    in the order of ``point.items`` × trials. ``data_keys`` (trials, 2): each trial's key
    (``trial_keys``)."""
    prog, heads, trials = point.prog, cfgs[0].sweep.heads, cfgs[0].sweep.trials
    S, R = prog.slots, prog.runs
    elements = [(p, t) for p in range(len(point.packs)) for t in range(trials)]
    elements += [elements[-1]] * (point.batch_size - len(elements))
    fields: dict[str, list] = {k: [] for k in Batch._fields}
    for p, t in elements:
        pack = point.packs[p]
        slot_run, slot_head = np.full(S, R, np.int32), np.zeros(S, np.int32)
        if prog.fast_path:
            slot_run[0] = 0
        else:
            at = 0
            for r, (i, _) in enumerate(pack):
                slot_run[at : at + heads[i]] = r
                slot_head[at : at + heads[i]] = np.arange(heads[i])
                at += heads[i]
        runs = list(pack) + [None] * (R - len(pack))  # None: a padding run with no slots
        fields["trial"].append(t)
        fields["key"].append(np.stack([init_keys[t]] * R))
        fields["n_heads"].append([heads[it[0]] if it else 1 for it in runs])
        fields["lr"].append([step_size(cfgs[it[1]], heads[it[0]]) if it else 0.0 for it in runs])
        fields["init_scale"].append([cfgs[it[1]].model.init_scale if it else 0.0 for it in runs])
        fields["slot_run"].append(slot_run)
        fields["slot_head"].append(slot_head)
        fields["data_key"].append(data_keys[t])
    fields.pop("start")
    dtypes = dict(
        trial=np.int32, key=np.uint32, n_heads=dtype, lr=dtype, init_scale=dtype, data_key=np.uint32
    )
    batch = Batch(**{k: np.asarray(v, dtype=dtypes.get(k)) for k, v in fields.items()})
    if cfgs[0].model.init_from is not None:
        batch = batch._replace(start=start_params(cfgs[0], batch, elements, point.packs, dtype))
    # Element (pack p, trial t) is row p·trials + t (``elements`` above); run r is column r.
    rows = np.array(
        [p * trials + t for p, pack in enumerate(point.packs) for _ in pack for t in range(trials)]
    )
    cols = np.array([r for pack in point.packs for r in range(len(pack)) for _ in range(trials)])
    return batch, rows, cols


def start_params(cfg: Config, batch: Batch, elements, packs, dtype) -> dict[str, np.ndarray]:
    """θ(0) of every batch element from ``model.init_from``: slot s of a run is the file's head
    ``slot_head[s]`` (of the element's trial when the file has a trial axis), empty slots 0; the
    bias, one per run."""
    from dynamics.config import initfile

    arrays = initfile.read(cfg.model.init_from)
    per_trial = arrays["U"].ndim == 3
    S, R = batch.slot_run.shape[1], batch.key.shape[1]
    out = {
        k: np.zeros((len(elements), S, *v.shape[2 if per_trial else 1 :]), dtype) for k, v in arrays.items()
    }
    if "b" in arrays:
        out["b"] = np.zeros((len(elements), R), dtype)
    for e, (p, t) in enumerate(elements):
        source = {k: (v[t] if per_trial else v) for k, v in arrays.items()}
        for s in range(S):
            if batch.slot_run[e, s] < R:
                for k, v in source.items():
                    if k != "b":
                        out[k][e, s] = v[batch.slot_head[e, s]]
        if "b" in arrays:
            out["b"][e, : len(packs[p])] = source["b"]
    return out


def trial_keys(cfg: Config) -> np.ndarray:
    """(trials, 2) uint32: trial i's key, fold_in(data key, i), from which ``make_data`` draws its
    data (synthetic models) and the engine its SGD batches (``engine.minibatch_key``)."""
    k_data, _ = rng.split(rng.seed(cfg.sweep.seed))
    return np.stack([rng.fold_in(k_data, i) for i in range(cfg.sweep.trials)])


def _prepare(cfg: Config):
    # The data models draw in float32; with x64 on, JAX would draw other numbers (64-bit
    # integers and floats), so the data are drawn as without x64 and simulated in float64.
    # Keys as jax.random derives them, in numpy (dynamics.core.rng): no compile per key operation.
    k_data, k_init = rng.split(rng.seed(cfg.sweep.seed))
    with jax.enable_x64(False):
        data, shared = make_data(cfg.data, k_data, cfg.sweep.trials, task=cfg.optim.task)
    init_keys = np.stack([rng.fold_in(k_init, i) for i in range(cfg.sweep.trials)])
    return data, shared, init_keys


def _run_points(
    cfgs: Sequence[Config],
    schedule: Sequence[int],
    todo: Sequence[int],
    *,
    devices,
    packs_per_call: int | None,
    chunk: int | None,
    slots: int | None,
    progress: bool,
    metrics: tuple = (),
):
    """Run heads ``todo`` of every variant config (they differ only in η₀ and σ₀).

    Yields, per point, (items, metrics {name: (len(items), trials, L)}, diverged_at
    (len(items), trials)) with items the point's (head index, variant) runs, post-processed:
    divergence from non-finite metrics too, points after it NaN, -1 = never.
    """
    base = cfgs[0]
    heads = base.sweep.heads
    placer = BatchPlacer(devices)
    with phase("data"):
        data, shared, init_keys = _prepare(base)
        data_keys = trial_keys(base)
        # The worlds stay out of the engine, but for online sampling: their pytree carries the data
        # config (static), so every data setting compiles its own engine program.
        online = online_sampler(base) is not None
        placed = placer.data(data if online else data._replace(world=None))
    steps = np.array(schedule)
    layout = dict(packs_per_call=packs_per_call, chunk=chunk, slots=slots, metrics=metrics)
    points = plan_points(base, todo, token_width(data), schedule, placer, variants=len(cfgs), **layout)
    unit = "H" if len(cfgs) == 1 else "run"
    hide = not progress or jax.process_index() != 0
    bar = tqdm(total=len(todo) * len(cfgs), desc=base.name, unit=unit, disable=hide)
    try:
        for point in points:
            bar.set_postfix(H=",".join(str(heads[i]) for i in point.indices))
            batch, rows, cols = make_batch(point, cfgs, init_keys, float_dtype(), data_keys)
            on_devices = placer.batch(batch)
            with phase("simulation"):  # its compile is timed apart (dynamics.infra.timings)
                metrics, div_at = train_batch(
                    point.prog, placed, on_devices, mesh=placer.mesh, chunk=point.chunk, shared_data=shared
                )
                metrics, div_at = placer.fetch((metrics, div_at))  # (B, R, L), (B, R)
            items = point.items
            per_slot = {k: metrics.pop(k) for k in list(metrics) if per_slot_key(k)}
            metrics, div_at = _finish(metrics, div_at, rows, cols, (len(items), base.sweep.trials), steps)
            if per_slot:
                sizes = [heads[i] for i, _ in items]
                laid = per_head(per_slot, batch, rows, cols, sizes, base.sweep.trials, max(heads))
                mask_diverged(laid, steps, div_at_or_never(div_at, steps))
                metrics.update(laid)
            bar.update(sum(i in todo for i, _ in items))
            yield items, metrics, div_at
    finally:
        bar.close()


def _finish(metrics, div_at, rows, cols, shape: tuple[int, int], steps: np.ndarray):
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


def per_head(
    per_slot: dict[str, np.ndarray], batch: Batch, rows, cols, sizes: list[int], trials: int, hmax: int
) -> dict[str, np.ndarray]:
    """The engine's per-slot metrics (B, S, L, …) laid out per run and head: (items, trials, L, H_max, …),
    NaN past a run's H. A run's heads are its slots in head order, or on the fast path its one slot
    standing for H identical heads; head–head matrices (S, L, S) become (L, H, H)."""
    slot_run, slot_head = np.asarray(batch.slot_run), np.asarray(batch.slot_head)
    out: dict[str, np.ndarray] = {}
    for k, v in per_slot.items():
        v = np.asarray(v, np.float64)  # (B, S, L, …)
        pairwise = k.endswith("_sim")
        tail = v.shape[3:-1] if pairwise else v.shape[3:]
        shape = (len(sizes), trials, v.shape[2], hmax, *tail) + ((hmax,) if pairwise else ())
        arr = np.full(shape, np.nan)
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


def _check_skipped(cfg: Config, skip_heads: Mapping[int, HeadResult], L: int) -> None:
    if not isinstance(skip_heads, Mapping):
        raise TypeError(
            f"skip_heads must be a dict {{H: (metrics, diverged_at)}}, got {type(skip_heads).__name__}"
        )
    for h, value in skip_heads.items():
        if not (isinstance(value, tuple | list) and len(value) == 2 and isinstance(value[0], Mapping)):
            raise TypeError(f"skip_heads[{h!r}] must be (metrics dict, diverged_at), as on_point gives them")
        metrics, div_at = value
        if isinstance(h, bool) or not isinstance(h, int | np.integer) or h not in cfg.sweep.heads:
            raise ValueError(f"skip_heads has H={h}, which is not in sweep.heads={list(cfg.sweep.heads)}")
        want = (cfg.sweep.trials, L)
        for name in metrics_of(cfg):
            got = np.shape(metrics.get(name))
            if got != want:
                raise ValueError(f"skip_heads[{h}][{name!r}] has shape {got}, expected (trials, L) = {want}")
        if np.shape(div_at) != want[:1]:
            raise ValueError(f"skip_heads[{h}] diverged_at has shape {np.shape(div_at)}, expected {want[:1]}")


def check_layout(
    *, packs_per_call=None, chunk=None, slots=None, progress=True, devices=None, on_point=None
) -> None:
    """The engine's keywords of ``run_sweep`` and ``run_grid``, checked before anything runs:
    packs_per_call, chunk and slots None or an integer >= 1, progress a bool, devices None or
    a non-empty list of JAX devices, on_point None or callable."""
    for name, value in (("packs_per_call", packs_per_call), ("chunk", chunk), ("slots", slots)):
        if value is not None and (
            isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer) or value < 1
        ):
            raise ValueError(f"{name}={value!r} must be None (automatic) or an integer >= 1")
    if not isinstance(progress, bool | np.bool_):
        raise TypeError(f"progress={progress!r} must be True or False")
    if devices is not None:
        if isinstance(devices, str) or not isinstance(devices, Sequence) or not devices:
            raise ValueError(f"devices={devices!r} must be None (all of jax.devices()) or a non-empty list")
        wrong = [d for d in devices if not isinstance(d, jax.Device)]
        if wrong:
            raise TypeError(f"devices has {wrong[0]!r}, not a JAX device (jax.devices() lists them)")
        if len(set(devices)) != len(devices):
            raise ValueError(f"devices={list(devices)} names a device twice; give each device once")
    if on_point is not None and not callable(on_point):
        raise TypeError(f"on_point={on_point!r} must be callable or None")


def as_config(cfg, caller: str) -> Config | Experiment:
    """A Config or Experiment as given, a preset's name as ``preset(name)``, None as the defaults;
    a bottleneck preset (an experiment of its own, not a sweep) and anything else are refused."""
    from dynamics.config.schema import ConfigError, preset

    if cfg is None:
        return Config()
    if isinstance(cfg, str):
        if cfg.startswith("bottleneck-"):
            fn = "run_expressivity(ExpressivityConfig())" if "express" in cfg else "run_heads(HeadsConfig())"
            raise ConfigError(f"preset {cfg!r} is not a sweep: {caller} cannot run it; use dynamics.{fn}")
        return preset(cfg)
    if not isinstance(cfg, Config | Experiment):
        raise TypeError(f"cfg={cfg!r:.80} must be a Config, a preset's name or None (the defaults)")
    if isinstance(cfg, Config) and cfg.name == "bottleneck-expressivity":  # preset(...): the defaults
        raise ConfigError(
            "a config named 'bottleneck-expressivity' is not that experiment (it is the default sweep): "
            "run it with dynamics.run_expressivity(ExpressivityConfig())"
        )
    return cfg


def _start_curves(cfg: Config, skip_heads: Mapping[int, HeadResult], L: int):
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
                    curves[k] = np.full((len(heads), *np.shape(v)), np.nan)
            for k in curves:
                curves[k][i] = metrics[k]
    return curves, diverged_at, [i for i, h in enumerate(heads) if h not in skip_heads]


def with_data(cfg: Config | Experiment, data: Any) -> Config | Experiment:
    """``cfg`` running the data model ``data`` (``run_sweep(cfg, data=...)``): an object with
    ``setup`` and ``sample`` (``datamodels.protocol``; it runs as the user part
    ``DATA_MODELS.adopt`` names) or a data model's name; None leaves ``cfg`` as it is."""
    if data is None:
        return cfg
    name = data if isinstance(data, str) else parts.DATA_MODELS.adopt(data)
    parts.DATA_MODELS.get(name, "data")  # a one-line error for a name that is none
    base = cfg.config if isinstance(cfg, Experiment) else cfg
    return dataclasses.replace(base, data=dataclasses.replace(base.data, model=name))


def _warn_identical(cfg: Config) -> None:
    why = identical_trials(cfg)
    if why is not None:
        warnings.warn(why, IdenticalTrialsWarning, stacklevel=3)


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
) -> SweepResult:
    """Build the data, run every H (a loop over points), collect curves.

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
    chunk: packs vmapped together per device (default: CPU 1, GPU all; see ``default_layout``).
    slots: random init, head slots per pack (default: ``default_slots``; see ``plan_points``).
    metrics: {name: fn(params, data) -> array}, the user's metrics compiled into the run and
      logged at every logged step as the curve ``name`` (n_heads, trials, L, …): ``fn`` gets one
      run's parameters with every head and the trial's test set (``dynamics.core.hooks``). One
      program per H then (H is static for them); such programs are not kept on disk.
    """
    layout = dict(devices=devices, packs_per_call=packs_per_call, chunk=chunk, slots=slots)
    check_layout(**layout, progress=progress, on_point=on_point)
    exp = resolve(with_data(as_config(cfg, "run_sweep"), data))
    cfg, steps = exp.config, np.array(exp.steps)
    refs = metric_refs(cfg, metrics)
    _warn_identical(cfg)
    start = time.perf_counter()
    _check_skipped(cfg, {} if skip_heads is None else skip_heads, len(steps))
    heads = list(cfg.sweep.heads)
    curves, diverged_at, todo = _start_curves(
        cfg, {int(h): v for h, v in (skip_heads or {}).items()}, len(steps)
    )
    if todo:
        runs = _run_points([cfg], exp.steps, todo, progress=progress, metrics=refs, **layout)
        _collect(runs, todo, heads, curves, diverged_at, on_point)
    result = SweepResult(
        config=cfg, heads=np.array(heads), steps=steps, curves=curves, diverged_at=diverged_at
    )
    _add_records(result, refs)
    if cfg.sweep.diagnostics:  # off: nothing below runs, the curves are the engine's alone
        _add_diagnostics(exp, result, progress)
    result.wall_time_s = time.perf_counter() - start
    return result


def _add_records(result: SweepResult, refs: tuple[MetricRef, ...]) -> None:
    """What the curves need beside them: the planted directions that the per-head cosines are
    with (names and vectors), and each user metric's function."""
    if any(k.startswith("head_") and k.endswith("_cos") and k != "head_uk_cos" for k in result.curves):
        result.planted = planted_directions(result.config)
        result.extra["directions"] = list(result.planted)
    if refs:  # what each user curve is: its function, by module and name
        result.extra["user_metrics"] = {r.name: metric_record(r.fn) for r in refs}


def _collect(runs, todo, heads, curves, diverged_at, on_point: PointCallback | None) -> None:
    """Each point's results from ``_run_points`` into ``curves`` and ``diverged_at`` (in place),
    per-head curves and snapshots allocated as they first come; ``on_point`` told of each."""
    for items, metrics, div_at in runs:
        keep = [j for j, (i, _) in enumerate(items) if i in todo]  # not the skipped H of a pack
        indices = [items[j][0] for j in keep]
        by_head = {k: v[keep] for k, v in metrics.items()}  # (K, trials, L[, …])
        for k, v in by_head.items():
            if k not in curves:  # per-head curves, snapshots, the user's metrics: as they first come
                curves[k] = np.full((len(heads), *v.shape[1:]), np.nan)
        for k in curves:
            curves[k] = put(curves[k], indices, by_head[k])
        diverged_at[indices] = div_at[keep]
        if on_point is not None and indices:
            on_point([heads[i] for i in indices], by_head, div_at[keep])


def put(curve: np.ndarray, indices: list[int], value: np.ndarray) -> np.ndarray:
    """``curve`` with ``value`` at ``indices`` of its first axis; a user metric whose shape depends
    on H (one value per head) grows the curve to the largest shape, NaN-padded as the per-head curves."""
    if curve.shape[1:] != value.shape[1:]:
        shape = np.maximum(curve.shape[1:], value.shape[1:])
        grown = np.full((curve.shape[0], *shape), np.nan)
        grown[tuple(slice(0, n) for n in curve.shape)] = curve
        curve = grown
    curve[(indices, *(slice(0, n) for n in value.shape[1:]))] = value
    return curve


def planted_directions(cfg: Config) -> dict[str, np.ndarray]:
    """The planted directions of every trial's world, name -> (trials, d) float32, the rows of the
    per-head |cos| curves' last axis in order (``dynamics.core.data.direction_names``)."""
    with jax.enable_x64(False):  # drawn as ``_prepare`` draws them
        data, _ = make_data(
            cfg.data, rng.split(rng.seed(cfg.sweep.seed))[0], cfg.sweep.trials, cfg.optim.task
        )
    if data.directions is None:
        return {}
    rows = np.asarray(data.directions, np.float32)  # (trials, P, d)
    return {name: rows[:, p] for p, name in enumerate(direction_names(data))}


def _add_diagnostics(exp: Experiment, result: SweepResult, progress: bool) -> None:
    """The theory diagnostics (``dynamics.theory.replay``) into ``result.curves`` and ``result.extra``."""
    from dynamics.theory import replay as theory

    cfg = exp.config
    with phase("diagnostics"):
        data, _, init_keys = _prepare(cfg)
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


def _scales(cfg: Config, init_scales) -> list[float]:
    """run_grid's init scales; given with an init that draws nothing, refused (no effect)."""
    why = no_effect(cfg, "model.init_scale")  # the config's own rule for a given init scale
    if init_scales is not None and why is not None:
        raise ConfigError(f"init_scales={init_scales!r} was given but has no effect: {why}")
    return _values("init_scales", init_scales, cfg.model.init_scale)


def _values(name: str, values, default: float) -> list[float]:
    """run_grid's lrs or init_scales: None (the config's value), a number, a list of numbers or
    a string as on the command line ('0.1,1' or 'a:b:k'); checked per value by ``validate``."""
    from dynamics.config.grid import parse_values
    from dynamics.config.schema import ConfigError

    if values is None:
        return [default]
    if isinstance(values, str):
        return list(parse_values(values, {"lrs": "lr", "init_scales": "init_scale"}[name], name))
    if isinstance(values, int | float | np.integer | np.floating) and not isinstance(values, bool):
        return [float(values)]
    if isinstance(values, Mapping | set | frozenset):
        raise ConfigError(f"{name}={values!r} must be a list of numbers (a dict or a set has no order)")
    try:
        values = list(values)
    except TypeError:
        raise ConfigError(f"{name}={values!r} must be a list of numbers, a number or None") from None
    if not values:
        raise ConfigError(f"{name}=[] is empty; give at least one value (or None for the config's)")
    bad = [
        v for v in values if isinstance(v, bool) or not isinstance(v, int | float | np.integer | np.floating)
    ]
    if bad:
        raise ConfigError(f"{name} has {bad[0]!r}, not a number")
    if len(set(values)) != len(values):
        raise ConfigError(f"{name}={values} has repeated values")
    return [float(v) for v in values]


def _variant(cfg: Config, lr: float, init_scale: float) -> Config:
    """``cfg`` at base step size ``lr`` and init scale ``init_scale``, validated."""
    optim = dataclasses.replace(cfg.optim, lr=lr)
    return validate(
        dataclasses.replace(cfg, optim=optim, model=dataclasses.replace(cfg.model, init_scale=init_scale))
    )


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
) -> list[SweepResult]:
    """The sweep of ``cfg`` at every base step size η₀ in ``lrs`` and init scale σ₀ in
    ``init_scales`` (default: the config's), batched into the same compiled calls (with
    random init, runs of different η₀, σ₀ and H share packs).

    ``cfg``: a Config, a preset's name or None (the defaults); ``data``: as for ``run_sweep``;
    ``lrs`` and ``init_scales``: a list of numbers, one number, a string as on the command line
    ('0.1,1', '1e-2:1e2:5') or None (the config's value).

    Returns one SweepResult per (η₀, σ₀), η₀ outer, each equal (to float rounding) to
    ``run_sweep`` of the config with that ``optim.lr`` and ``model.init_scale``: its metrics, its
    per-head curves and snapshots, and its theory diagnostics (``sweep.diagnostics``).
    """
    check_layout(packs_per_call=packs_per_call, chunk=chunk, slots=slots, progress=progress, devices=devices)
    exp = resolve(with_data(as_config(cfg, "run_grid"), data))
    cfg, steps = exp.config, np.array(exp.steps)
    _warn_identical(cfg)
    start = time.perf_counter()
    lrs = _values("lrs", lrs, cfg.optim.lr)
    scales = _scales(cfg, init_scales)
    cfgs = [_variant(cfg, lr, s) for lr, s in itertools.product(lrs, scales)]
    n_h, V = len(cfg.sweep.heads), len(cfgs)
    curves = {k: np.full((n_h, V, cfg.sweep.trials, len(steps)), np.nan) for k in metrics_of(cfg)}
    diverged_at = np.full((n_h, V, cfg.sweep.trials), -1, dtype=np.int32)
    layout = dict(devices=devices, packs_per_call=packs_per_call, chunk=chunk, slots=slots)
    for items, metrics, div_at in _run_points(cfgs, exp.steps, list(range(n_h)), progress=progress, **layout):
        for j, (i, v) in enumerate(items):
            for k, values in metrics.items():  # per-head curves and snapshots: allocated as they first come
                if k not in curves:
                    curves[k] = np.full((n_h, V, *values.shape[1:]), np.nan)
                curves[k][i, v] = values[j]
            diverged_at[i, v] = div_at[j]
    results = [
        SweepResult(
            config=c,
            heads=np.array(cfg.sweep.heads),
            steps=steps,
            curves={k: v[:, j] for k, v in curves.items()},
            diverged_at=diverged_at[:, j],
        )
        for j, c in enumerate(cfgs)
    ]
    for result in results if cfg.sweep.diagnostics else []:  # each variant's, as run_sweep's
        _add_diagnostics(Experiment(result.config, exp.steps), result, progress)
    wall = time.perf_counter() - start
    for result in results:
        result.wall_time_s = wall
    return results
