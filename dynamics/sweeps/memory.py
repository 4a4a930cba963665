"""How much memory a sweep needs, estimated from its config before anything is allocated.

``sweep_bytes`` adds up, in bytes (float32, or float64 with ``x64``):

- data: synthetic, ``trials·(n + m)·(T·d + o')`` (one draw per trial); user data, the file's
  arrays (their dtype) plus the float32 copy, once; o' = o for vector targets y (n, o) and 0 for
  a scalar target (its n numbers, like the masks, are left out: T·d times fewer than X's);
- per run element (a pack of S ≤ 2·max H head slots, one trial; ``trials`` of them live at
  once): parameters P per slot (``slot_numbers``: the readout U_h d·o, plus the key-query part:
  full W_h d², or Q_h, K_h 2·d·d_h, a learned query k_h d, position logits a_h T) times 4 (the
  parameters, their gradient and two optimiser moments), the per-step intermediates of the
  forward and backward pass (3 × the activations: ``(n + m)·S·(T + d)`` with query "first",
  ``(n + m)·S·T·(T + d)`` with "all", plus ``(n + m)·S·o`` for vector targets: the head outputs
  (n, S, o), Φ and the residuals (n, R, o)), and the head-diversity metric (``S·P``: its pairs are
  computed one head at a time, never all ``S²·P`` at once);
- the logged curves: ``len(heads)·trials·L·|metrics of the run|`` float64;
- the per-head metrics (when on), at the L_h steps of the per-head view (``sweep.head_every``):
  ``len(heads)·trials·L_h`` times the numbers each logged per-head metric logs per run and step
  (``Metric.numbers``: H_max per head, H_max·P per planted direction, H_max·F per feature, H_max²
  head–head with ``sweep.head_sims``; P and F bounded here by d), once in the engine's type and once
  in float32 (the engine's per-slot output and its per-head layout); none of them depends on o or
  on the query (a matrix readout's cosines read its top singular vector in R^d, position logits
  have no planted-direction cosine);
- the snapshots (``sweep.save_params``): every head's parameters at the per-head view's steps,
  ``len(heads)·trials·L_h·H_max·P_head``, twice in the engine's type (as above); P_head is P with
  position logits spread to all T positions (tied copies are saved as the model reads them).

o, the targets' outputs, is a data file's (its header), a data model's declared ``outputs`` (a
function of the resolved DataConfig; ``DataModel.outputs``, a user model's ``outputs`` attribute),
else 1: a user model with vector targets that declares none is counted as scalar.

``check_memory`` refuses configs (a sweep's, or the points of a grid: sized by the largest) whose
estimate exceeds the limit with one line naming both; ``run_sweep``, ``run_grid``, the grids and
the command line all call it. The limit is the machine's available memory (``/proc/meminfo``
MemAvailable, else physical memory), or ``$MHSIM_MEMORY_LIMIT`` (bytes, or with a K/M/G/T
suffix; ``off`` disables the check).
An estimate within a factor of about two is the aim: it refuses what cannot fit, not what is close.
No JAX here.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from dynamics import parts as registries
from dynamics.errors import ConfigError
from dynamics.parts.metrics import head_indices, logged_per_head, metrics_of

ENV = "MHSIM_MEMORY_LIMIT"
_SUFFIX = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def slot_numbers(cfg, outputs: int = 1) -> int:
    """One head slot's trainable numbers: U_h (d·o) and the key-query part (W_h d², Q_h and K_h
    2·d·d_h, a tied Q_h d·d_h, k_h d, or position logits a_h T; tied position logits are fewer,
    counted as T)."""
    d = cfg.data.d
    query = registries.QUERIES[cfg.model.query]
    if query.positional:
        key = cfg.data.T
    elif query.learned:
        key = d
    elif not registries.KEY_QUERIES[cfg.model.key_query].factored:
        key = d * d
    else:
        d_h = cfg.model.head_size if cfg.model.head_size != "split" else max(1, d // min(cfg.sweep.heads))
        key = (1 if registries.KEY_QUERIES[cfg.model.key_query].tied else 2) * d * d_h
    if getattr(cfg.model, "output", "pooled") == "sequence":  # no readout U; a learned value V_h d²
        return key + (d * d if registries.READOUTS[cfg.model.readout].values else 0)
    readout = d * d + d if registries.READOUTS[cfg.model.readout].factored else d * outputs  # V, O or U
    return readout + key


def outputs_of(cfg) -> int:
    """o of the config's targets y ∈ R^o from its data model's declared ``outputs`` (1 where it
    declares none: scalar targets); a data file's is read from its header (``config_bytes``)."""
    declared = registries.DATA_MODELS[cfg.data.model].outputs
    return 1 if declared is None else int(declared(cfg.data))


def sweep_bytes(
    cfg, n_logged: int, x64: bool = False, data_file_bytes: int = 0, outputs: int | None = None
) -> dict[str, int]:
    """The estimate of a resolved ``Config``'s peak memory, by part (see the module docstring);
    ``outputs`` o of the targets (None: ``outputs_of(cfg)``)."""
    data = cfg.data
    from_file = registries.DATA_MODELS[data.model].from_file
    f = 8 if x64 else 4
    o = outputs_of(cfg) if outputs is None else int(outputs)
    vector = o if o > 1 else 0  # what vector targets add to the scalar model's counts
    n, m, T, d = data.n_train, data.n_test, data.T, data.d
    heads, trials = list(cfg.sweep.heads), cfg.sweep.trials
    per_slot = slot_numbers(cfg, o)
    logged = len(heads) * trials * n_logged * 8  # float64 per number a run logs per step
    viewed = len(heads) * trials * len(head_indices(cfg, n_logged))  # runs × the per-head view's steps
    h_max = max(heads)
    per_head = sum(metric.numbers(h_max, P=d, F=d) for metric in logged_per_head(cfg))  # P, F bounded by d
    parts = {
        "data": (n + m) * (T * d + vector) * f * (1 if from_file else trials) + data_file_bytes,
        **{k: trials * v for k, v in element_bytes(cfg, 2 * h_max, x64, o).items()},
        "curves": logged * len(metrics_of(cfg)),
        "per-head metrics": viewed * per_head * (f + 4),  # the engine's, the host's float32
        "parameter snapshots": 2 * viewed * h_max * per_slot * f * bool(cfg.sweep.save_params),
    }
    return {k: int(v) for k, v in parts.items()}


ELEMENT = ("parameters and optimiser", "intermediates", "head diversity")  # a batch element's parts


def element_bytes(cfg, slots: int, x64: bool = False, outputs: int = 1) -> dict[str, int]:
    """What one batch element of the engine (a pack of ``slots`` head slots, one trial) holds while it
    trains, by part (``ELEMENT``; the module docstring): its parameters, gradient and two optimiser
    moments, the forward and backward pass's intermediates, the head-diversity metric."""
    data, f = cfg.data, 8 if x64 else 4
    n, m, T, d = data.n_train, data.n_test, data.T, data.d
    per_slot = slot_numbers(cfg, outputs)
    vector = outputs if outputs > 1 else 0
    all_tokens = registries.QUERIES[cfg.model.query].all_tokens
    act = (n + m) * slots * ((T + d) * (T if all_tokens else 1) + vector)
    values = (4 * slots * per_slot * f, 3 * act * f, slots * per_slot * f)
    return dict(zip(ELEMENT, values, strict=True))


def accelerator_chunk(
    cfg, slots: int, per_device: int, fixed: int, limit: int, x64: bool, device: str
) -> int:
    """How many of a device's ``per_device`` batch elements an accelerator may train at once (the
    engine's vmap chunk: its elements' intermediates are live together) when ``fixed`` bytes (the data
    and every run's logged outputs) and the elements must fit in ``limit`` bytes, 3/4 of it planned
    (XLA's own buffers take the rest): all of them when they fit, else fewer, in chunks as equal as
    possible. A one-line ConfigError when not even one element fits."""
    element = sum(element_bytes(cfg, slots, x64, outputs_of(cfg)).values())
    room = (3 * limit) // 4 - fixed
    if room < element:
        raise ConfigError(
            f"one batch element of this sweep (a pack of {slots} head slots, one trial) needs about "
            f"{human(element)} besides {human(fixed)} of data and logged curves, more than 3/4 of the "
            f"{human(limit)} of {device}: use fewer examples, tokens, logged steps (--log-points) or heads"
        )
    most = room // element
    calls = -(-per_device // most)  # chunks one after the other
    return -(-per_device // calls)


def limit_bytes() -> tuple[int | None, str]:
    """(the limit in bytes or None for no limit, where it comes from)."""
    value = os.environ.get(ENV, "").strip().upper()
    if value in ("OFF", "NONE"):
        return None, f"${ENV}=off"
    if value:
        number, unit = (value[:-1], value[-1]) if value[-1] in _SUFFIX else (value, "")
        try:
            return int(float(number) * _SUFFIX[unit]), f"${ENV}"
        except ValueError:
            raise ConfigError(f"${ENV}={value!r} is not a size in bytes (e.g. 8G, 512M, off)") from None
    return available_bytes(), f"the available memory (set ${ENV} to change it)"


def available_bytes() -> int | None:
    """MemAvailable from /proc/meminfo, else the physical memory, else None (unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB", "PB"):
        if abs(n) < 1000 or unit == "PB":
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} PB"


def check_memory(cfgs: Sequence, n_logged: int, x64: bool | None = None) -> dict[str, int]:
    """Refuse (ConfigError, one line) resolved configs run together — a sweep's one, a grid's
    points — whose largest estimate exceeds the limit; return that estimate. ``x64`` None: JAX's
    setting (float64 when on)."""
    if x64 is None:
        import jax  # lazy: JAX: the estimate runs before it is loaded

        x64 = bool(jax.config.jax_enable_x64)
    parts = max((config_bytes(cfg, n_logged, x64) for cfg in cfgs), key=lambda p: sum(p.values()))
    total = sum(parts.values())
    limit, source = limit_bytes()
    if limit is not None and total > limit:
        top = max(parts, key=parts.get)
        what = "this sweep" if len(cfgs) == 1 else f"the largest of these {len(cfgs)} grid points"
        raise ConfigError(
            f"{what} needs about {human(total)} of memory (most for {top}: {human(parts[top])}), "
            f"more than the limit {human(limit)}, {source}; use fewer heads, trials, examples, "
            f"tokens, logged steps (--log-points) or a smaller width"
        )
    return parts


def config_bytes(cfg, n_logged: int, x64: bool) -> dict[str, int]:
    """``sweep_bytes`` of a resolved config, a data file's arrays counted."""
    extra, outputs = 0, None
    if registries.DATA_MODELS[cfg.data.model].from_file:
        from datamodels.npz import read_header  # lazy: only for data from a file

        header = read_header(cfg.data.path)
        extra, outputs = header.nbytes, header.outputs
    return sweep_bytes(cfg, n_logged, x64=x64, data_file_bytes=extra, outputs=outputs)


def check_sweep(exp, x64: bool = False) -> dict[str, int]:
    """``check_memory`` of an Experiment (the command line's check, before JAX is imported)."""
    return check_memory([exp.config], len(exp.steps), x64=x64)
