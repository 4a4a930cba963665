"""Plan a sweep: what a config asks of the engine, and how its runs are packed into compiled calls.

A sweep is planned as a list of *points*: one compiled call each, covering one or more
*packs* (``plan_points``), each with all its trials. A pack is runs of one trial — of any
H, step size and init scale of ``run_grid`` — whose heads share the program's head slots
(``engine``). Zero-init sweeps take the exact fast path, one slot of weight H per run and
one program for every H; random-init sweeps pack their runs first-fit decreasing
(``pack_runs``) into S slots (``default_slots``), one program for every H as well; only
factored split heads (d_h = d // H) need one program per H. Every pack × trial is one
element of the batch axis (``make_batch``), which is sharded over the devices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dynamics import parts
from dynamics.config import initfile
from dynamics.config.schema import Config
from dynamics.core import rng
from dynamics.core.data import ModelRef, data_model, tied_positions
from dynamics.core.engine import float_dtype
from dynamics.core.program import Batch, Program
from dynamics.core.update import GroupRule
from dynamics.parts.metrics import head_indices, head_metrics_on, head_sims_on, head_view_on, logs_losses_only
from dynamics.sweeps import memory
from dynamics.sweeps.devices import BatchPlacer

# Sweep policy: what a config asks of the engine.


def step_size(cfg: Config, n_heads: int) -> float:
    """η(H) = η₀ · H^p (docs/model.md), the step of every optimiser (GD, SGD, normalised GD, Adam)."""
    return cfg.optim.lr * n_heads ** parts.LR_SCALINGS.get(cfg.optim.lr_scaling).exponent


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
        head_log=tuple(head_indices(cfg, len(schedule))) if head_view_on(cfg) else (),
        head_sims=head_sims_on(cfg),
        temperature=float(cfg.model.temperature),
        temperature_decay=float(cfg.model.temperature_decay),
        batch_size=int(cfg.optim.batch_size or 0) if parts.OPTIMIZERS[cfg.optim.optimizer].minibatch else 0,
        sampling=cfg.optim.sampling,
        sampler=online_sampler(cfg),
        groups=group_rules(cfg),
        constraint=cfg.optim.constraint,
        ngd_eps=float(cfg.optim.ngd_eps),
        ngd_per_group=bool(cfg.optim.ngd_per_group),
        weight_decay=float(cfg.optim.weight_decay),
        reduction=cfg.optim.reduction,
        output=cfg.model.output,
        user_metrics=tuple(metrics),
        metric_heads=int(heads) if metrics else 0,
        tied_positions=tied_positions(cfg),
        losses_only=logs_losses_only(cfg),
        readout=cfg.model.readout,
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


# A call with fewer packs than the others is padded with copies to the others' batch size (one
# compile for every call) unless those copies would run at least this many element-steps; then it
# gets a batch of its own size (one more compile). A compile of the zero-init program costs about
# 3 s of CPU, 10⁵ element-steps of fig2's DM1 (benchmarks/README.md).
SHRINK_STEPS = 100_000

# What one run of a sweep is: (index into cfg.sweep.heads, variant index of run_grid).
Item = tuple[int, int]


@dataclass(frozen=True)
class Point:
    """One compiled call: ``packs`` (each the runs sharing one pack's slots) with all their trials."""

    prog: Program
    packs: tuple[tuple[Item, ...], ...]
    batch_size: int  # B after padding (a full call's, or a shorter call's own: SHRINK_STEPS)
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
    Accelerators: every pack of the program in one call, all of a device's packs vmapped
    (``fit_chunk`` then vmaps fewer at a time where they would not fit in the device's memory).
    """
    if placer.platform == "cpu":
        return min(n_packs, placer.n_devices // math.gcd(placer.n_devices, trials)), 1
    return n_packs, math.ceil(n_packs * trials / placer.n_devices)


def fit_chunk(cfg: Config, prog: Program, placer: BatchPlacer, per_device: int, variants: int, n_logged: int):
    """An accelerator's vmap chunk for ``per_device`` batch elements of ``prog`` on each device: all of
    them where they fit in the device's memory with the data and the logged outputs of every run
    (``memory.accelerator_chunk``), else fewer at a time; refused in one line before anything is
    allocated where one element does not fit. Unchanged where JAX reports no memory limit."""
    limit = placer.memory_limit
    if limit is None:
        return per_device
    x64 = np.dtype(float_dtype()).itemsize == 8
    parts = memory.sweep_bytes(cfg, n_logged, x64)
    outputs = sum(v for k, v in parts.items() if k not in ("data", *memory.ELEMENT))
    fixed = parts["data"] + variants * outputs
    device = f"one {placer.devices[0].device_kind}"
    return memory.accelerator_chunk(cfg, prog.slots, per_device, fixed, limit, x64, device)


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
    Packs and programs follow from all of ``cfg.sweep.heads``, not from ``todo``, so a resumed
    sweep runs every H in the pack of an uninterrupted one. A call's batch is its packs × trials
    padded with copies (``make_batch``) to a full call's size, or for a shorter last call to its
    own whole blocks of devices × chunk where the copies would cost more than a compile
    (``SHRINK_STEPS``); at a fixed chunk a run's numbers do not depend on the batch size.
    """
    groups = program_groups(cfg, d, schedule, variants, slots, metrics)
    wanted = set(todo)
    trials = cfg.sweep.trials
    points = []
    for prog, packs in groups:
        auto_per_call, auto_chunk = default_layout(placer, trials, len(packs))
        if chunk is None and placer.platform != "cpu":
            auto_chunk = fit_chunk(cfg, prog, placer, auto_chunk, variants, len(schedule))
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
            here = tuple(run[start : start + per_call])
            own = -(-(len(here) * trials) // block) * block
            # a shorter last call: its own size where the copies it would discard cost more than
            # the compile of that size (the same numbers either way at a fixed chunk)
            b = own if (size - own) * schedule[-1] >= SHRINK_STEPS else size
            points.append(Point(prog, here, b, w))
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
    data (synthetic models) and the engine its SGD batches (``sampling.minibatch_key``)."""
    k_data, _ = rng.split(rng.seed(cfg.sweep.seed))
    return np.stack([rng.fold_in(k_data, i) for i in range(cfg.sweep.trials)])
