"""Grids over any numeric knob: lists of values, their Cartesian product, checked as a whole.

A *grid* is a base ``Config`` plus *axes*: knobs (``optim.lr``, ``data.n_train``, …) each
with a list of values. The sweep runs every combination of the axes' values (C order, the
first axis outermost) × every H of ``sweep.heads`` × the trials. H is not an axis here: it
stays ``sweep.heads`` (a config without axes is a plain sweep, run as before).

Values come as a comma-separated list (``0.01,0.1,1``) or a log-spaced shorthand
``a:b:k``: k values from a to b, equally spaced in log (``1e-2:1e2:17`` is 10^-2 … 10^2 in
quarter decades; k = 1 gives a). Integer knobs round the log-spaced values and drop repeats.
A categorical knob (declared ``grid=str``: every knob that names a part — the optimiser, loss,
step scaling, query, key-query, init, norm, sampling, constraint, activation — and the data
model) takes a comma-separated list of names only (``gd,adam``); each grid point checks its
names as a single run does.

A knob given once applies at every grid point. Where it has no effect at some points but acts
at one at least (``--optimizer gd,sgd --batch-size 8``: B acts at the sgd points), it is kept
there and allowed; one without effect at every point is refused with the single run's message.
A data-model axis takes only the data parameters every one of its models has (set, given or
an axis); another is refused in one line.

This module imports no JAX (the command line parses and validates with it before any
heavy import); ``dynamics.sweeps.grid_runner`` runs a grid and writes its files.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynamics import parts
from dynamics.config.schema import (
    PAPER_HEADS,
    PAPER_SIZES,
    PRESETS,
    SECTIONS,
    Config,
    ConfigError,
    Experiment,
    apply_overrides,
    declared,
    digest,
    no_effect,
    preset,
    read_toml,
    resolve,
    unknown_preset,
    user_set,
)
from dynamics.parts.knobs import Declared
from dynamics.parts.metrics import head_indices, head_metrics_on, logged_per_head, metrics_of
from dynamics.parts.values import comma_items


def axis_name(k: Declared) -> str:
    """A grid knob's name as an axis (a key of GRID_KNOBS, a column of summary.csv, an array of
    curves.npz): its field's name, or its keyword where the field is named like a section
    (``data.model`` is ``data_model``)."""
    return k.keyword if k.name in SECTIONS else k.name


# axis name -> (section, field, float, int or str): the knobs that take several values, those
# declared with ``grid`` (``dynamics.parts.knobs``). A data model's parameter is named alone.
GRID_KNOBS: dict[str, tuple[str, str, type]] = {
    axis_name(k): (k.section, k.name, k.spec.grid) for k in declared() if k.spec.grid is not None
}
# Other names of an axis: "section.field" and the API's keyword (``optim.lr``, ``data.model``, ``width``).
_ALIASES = {
    alias: axis_name(k) for k in declared() if k.spec.grid is not None for alias in (k.key, k.keyword)
}
# Knobs the engine takes per run in the batch (declared ``traced``): points that differ only in
# them share one batch and program (``dynamics.sweeps.grid_runner``).
TRACED = tuple(axis_name(k) for k in declared() if k.spec.grid is not None and k.spec.traced)

# Limits of a grid on this machine (refused before any compile, one line saying why).
MAX_RUNS = 10**6  # H × grid points × trials
MAX_HOURS = 24.0  # estimated simulation time on the CPU
CPU_FLOPS = 2e9  # the estimate's CPU throughput, flop/s (measured order on this 2-core CPU)


def axis_of(key: str) -> str | None:
    """The axis name of the knob ``section.field`` (None if it is no grid knob)."""
    return _ALIASES.get(key)


def knob_name(name: str) -> str:
    """'lr', 'optim.lr', 'n-train', 'data-model' or 'data.model' -> the GRID_KNOBS name; an
    unknown one is a ConfigError."""
    if name in _ALIASES:
        return _ALIASES[name]
    short = name.split(".")[-1].replace("-", "_")
    if short not in GRID_KNOBS:
        raise ConfigError(f"{name!r} cannot take several values; grid knobs: {', '.join(GRID_KNOBS)}")
    return short


def parse_values(text: str, name: str, label: str | None = None) -> tuple:
    """'0.1,1,10' or 'a:b:k' (k log-spaced values from a to b) -> a tuple of the knob's type
    (``label``: how errors name the knob, e.g. its flag)."""
    kind = GRID_KNOBS[knob_name(name)][2]
    name = label or name
    text = str(text).strip()
    if kind is str:  # categorical: names (a user part's "module:attribute" keeps its colon)
        names = comma_items(text)
        if not names:
            raise ConfigError(f"{name}={text!r} has an empty item; give a comma-separated list of names")
        return tuple(names)
    form = "a comma-separated list or a:b:k (k log-spaced values from a to b)"
    if ":" in text:
        parts = text.split(":")
        try:
            lo, hi, k = float(parts[0]), float(parts[1]), int(parts[2])
            if len(parts) != 3:
                raise ValueError
        except (ValueError, IndexError):
            raise ConfigError(f"{name}={text!r} is not {form}") from None
        if not (lo > 0 and hi > 0 and math.isfinite(lo) and math.isfinite(hi)) or k < 1:
            raise ConfigError(f"{name}={text!r}: a:b:k needs a > 0, b > 0 (finite) and k >= 1")
        values = [lo * (hi / lo) ** (i / (k - 1)) if k > 1 else lo for i in range(k)]
        values = [float(f"{v:.12g}") for v in values]  # 1e-2:1e2:17 gives 0.1, 1, 10 exactly
        if kind is int:
            values = list(dict.fromkeys(int(round(v)) for v in values))
        return tuple(values)
    parts = comma_items(text)
    if not parts:
        raise ConfigError(f"{name}={text!r} has an empty item; give {form}")
    try:
        return tuple(kind(p) if kind is float else _int(p) for p in parts)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not {form} of {kind.__name__}s") from None


def _int(text: str) -> int:
    value = float(text)
    if not math.isfinite(value) or value != int(value):  # inf/nan: not an integer (no OverflowError)
        raise ValueError(text)
    return int(value)


def list_arg(name: str, flag: str):
    """An argparse type for a grid knob: one value stays a scalar, several become a tuple."""

    def parse(text: str):
        try:
            values = parse_values(text, name, flag)
        except ConfigError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        single = len(values) == 1 and (GRID_KNOBS[knob_name(name)][2] is str or ":" not in text)
        return values[0] if single else values

    parse.__name__ = f"{name} list"
    return parse


Axes = tuple[tuple[str, tuple], ...]


@dataclass(frozen=True)
class GridExperiment:
    """A validated grid: the base experiment, its axes and one validated config per point."""

    base: Experiment  # the base config (first value of every axis) and the logged steps
    axes: Axes  # ((knob name, values), …), the first axis outermost
    points: tuple[Config, ...]  # one resolved config per grid point, C order over the axes
    # With a data-model axis, the config the axes were set on, before resolution: each point's
    # data defaults (T, d, the model's parameters), task and loss are its own model's, not the
    # base's. results.json's grid record keeps it (``source_config``) to rebuild the same points.
    source: Config | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for _, v in self.axes)

    @property
    def n_runs(self) -> int:
        cfg = self.base.config
        return len(self.points) * len(cfg.sweep.heads) * cfg.sweep.trials

    def hash(self) -> str:
        """The grid's config_hash: the base config and the axes (checkpoints and caches key on it)."""
        return digest({**self.base.config.resolved().to_dict(), "grid": [list(a) for a in self.axes]})


def grid_config(config: Config, record: dict[str, Any]) -> Config:
    """The config a saved grid's axes are set on: results.json's (resolved) ``config``, or with a
    data-model axis its grid record's ``source_config`` (as written: the fields resolution fills
    left unfilled), in the recorded precision (``sweep``)."""
    source = record.get("source_config") if isinstance(record, dict) else None
    if source is None:
        return config
    if not isinstance(source, dict):
        raise ConfigError(f"the grid's source_config {source!r:.80} is not a table of sections")
    doc = {k: v for k, v in source.items() if k not in ("name", "sources")}
    cfg = apply_overrides(
        Config(name=str(source.get("name", config.name))), doc, "grid source", explicit=False
    )
    return dataclasses.replace(cfg, sweep=config.sweep)


def with_values(cfg: Config, values: dict[str, Any]) -> Config:
    """``cfg`` with knob -> value set (knob names as in GRID_KNOBS)."""
    by_section: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        section, field, _ = GRID_KNOBS[name]
        by_section.setdefault(section, {})[field] = value
    return dataclasses.replace(
        cfg, **{s: dataclasses.replace(getattr(cfg, s), **f) for s, f in by_section.items()}
    )


def resolve_grid(cfg: Config, axes: dict[str, Any] | Axes) -> GridExperiment:
    """Check every point of the grid (before anything compiles) and its size; the experiment.

    ``axes``: {knob: values} with knob a GRID_KNOBS name (or 'optim.lr', …) and values a
    list or a string ('0.1,1,10', '1e-2:1e2:17').
    """
    items = axes.items() if isinstance(axes, dict) else axes
    norm: dict[str, tuple] = {}
    for name, values in items:
        key = knob_name(name)
        if key in norm:
            raise ConfigError(f"grid knob {key!r} is given twice")
        vals = parse_values(values, name) if isinstance(values, str) else tuple(values)
        if not vals:
            raise ConfigError(f"grid knob {key!r} has no values")
        if len(set(vals)) != len(vals):
            raise ConfigError(f"grid knob {key}={list(vals)} has repeated values")
        norm[key] = vals
    axes_t: Axes = tuple(norm.items())
    # an axis over a knob without effect would give identical points: refused as a given value is
    knobs = frozenset(f"{GRID_KNOBS[k][0]}.{GRID_KNOBS[k][1]}" for k in norm)
    # the user's values of a Config built in Python count as given, so a point may drop one idle there
    cfg = dataclasses.replace(cfg, given=user_set(cfg) | knobs, sourced=True)
    check_data_models(cfg, norm)
    combos = [dict(zip(norm, combo, strict=True)) for combo in itertools.product(*norm.values())]
    raw = [with_values(cfg, values) for values in combos]
    idle = [idle_knobs(point) for point in raw]
    everywhere = frozenset.intersection(*idle)  # refused below, with the single run's message
    points = []
    for values, point, here in zip(combos, raw, idle, strict=True):
        # a given knob idle here but acting at another point: not refused here (it acts there)
        point = dataclasses.replace(point, given=point.given - (here - everywhere))
        try:
            points.append(resolve(point).config)
        except ConfigError as err:
            at = ", ".join(f"{k}={v}" for k, v in values.items())
            raise ConfigError(f"grid point {at}: {err}") from None
    base = resolve(dataclasses.replace(raw[0], given=raw[0].given - (idle[0] - everywhere)))
    grid = GridExperiment(base, axes_t, tuple(points), cfg if "data_model" in norm else None)
    check_size(grid)
    return grid


def idle_knobs(cfg: Config) -> frozenset[str]:
    """The knobs given explicitly in ``cfg`` (``section.field``) that have no effect there (their
    ``idle``); none where the config is too wrong to tell (its validation then says why)."""
    try:
        resolved = cfg.resolved()
        return frozenset(name for name in cfg.given if no_effect(resolved, name) is not None)
    except (ConfigError, KeyError, TypeError, ValueError):
        return frozenset()


def check_data_models(cfg: Config, axes: dict[str, tuple]) -> None:
    """A data-model axis with only the data parameters all its models have: those set in ``cfg``
    (given, a preset's or a file's) and those that are axes; a one-line ConfigError otherwise."""
    if "data_model" not in axes:
        return
    fields = {f.name for f in dataclasses.fields(SECTIONS["data"])}
    names = {name for name, _ in cfg.data.params}
    names |= {GRID_KNOBS[k][1] for k in axes if GRID_KNOBS[k][0] == "data" and GRID_KNOBS[k][1] not in fields}
    models = list(axes["data_model"])
    for model in models:
        if not isinstance(model, str) or model not in parts.DATA_MODELS:
            continue  # an unknown name: its grid point's validation names what is allowed
        missing = sorted(names - set(parts.DATA_MODELS[model].parameters))
        if missing:
            raise ConfigError(
                f"data_model={models}: {model!r} has no parameter {', '.join('data.' + m for m in missing)}; "
                f"a data-model axis takes only the data parameters every one of its models has"
            )


def estimate(grid: GridExperiment) -> tuple[float, float]:
    """(GiB of result curves, hours of CPU simulation) the grid would take, roughly.

    Curves: the run's metrics × L logged steps × 8 bytes per run, and with the per-head metrics
    (``sweep.head_metrics``) the numbers each logs per step of the per-head view × 4 bytes
    (``Metric.numbers``, as ``dynamics.sweeps.memory`` counts them, P planted directions and F
    features bounded by d). Time:
    1.5 × ``parts.head_flops`` per example, head and step (forward and backward of one head over
    n examples, with half again for the logged metrics: ~6·n·(d² + 2·T·d) where one token queries),
    one head per run on the zero-init fast path, H heads otherwise, at ``CPU_FLOPS``.
    """
    L = len(grid.base.steps)
    per_step = float(len(metrics_of(grid.base.config))) * L * 8
    if head_metrics_on(grid.base.config):  # float32, at the per-head view's steps
        h_max, d = max(grid.base.config.sweep.heads), max(cfg.data.d or 32 for cfg in grid.points)
        L_h = len(head_indices(grid.base.config, L))
        per_step += sum(m.numbers(h_max, P=d, F=d) for m in logged_per_head(grid.base.config)) * L_h * 4
    gib = grid.n_runs * per_step / 2**30
    flop = 0.0
    for cfg in grid.points:
        data, heads = cfg.data, cfg.sweep.heads
        n, T, d = data.n_train or 100, data.T or 10, data.d or 32
        m = cfg.model
        per_example = 1.5 * parts.head_flops(m.query, m.key_query, m.head_size, d, T, max(heads))
        per_head = n * per_example * cfg.optim.steps * cfg.sweep.trials
        fast = parts.uses_fast_path(cfg)
        flop += per_head * (len(heads) if fast else sum(heads))
    return gib, flop / CPU_FLOPS / 3600


def check_size(grid: GridExperiment) -> None:
    """Refuse a grid that would not fit this machine, in one line with its size and estimates."""
    gib, hours = estimate(grid)
    mem = _memory_gib()
    size = "×".join(str(n) for n in grid.shape)
    cfg = grid.base.config
    what = f"grid {size} × {len(cfg.sweep.heads)} H × {cfg.sweep.trials} trials = {grid.n_runs} runs"
    if grid.n_runs > MAX_RUNS:
        raise ConfigError(f"{what} is more than the {MAX_RUNS} runs allowed; use fewer values or trials")
    if gib > mem / 2:
        raise ConfigError(
            f"{what} would hold ~{gib:.1f} GiB of curves, more than half of this machine's {mem:.0f} GiB; "
            f"log fewer steps (--log-points) or use fewer values"
        )
    if hours > MAX_HOURS:
        raise ConfigError(
            f"{what} would take ~{hours:.0f} h of CPU simulation (limit {MAX_HOURS:g} h); "
            f"use fewer values, steps or trials"
        )


def _memory_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return 8.0


def split_grid_values(doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A TOML document's tables without their list-valued knobs, and those knobs as axes.

    ``lr = [0.1, 1]``, ``lr = "1e-2:1e2:17"`` and ``optimizer = ["gd", "adam"]`` are axes (a
    categorical knob's string only with a comma: ``"pkg.mod:name"`` is one user part); ``heads``
    stays a list of H."""
    plain: dict[str, Any] = {}
    axes: dict[str, Any] = {}
    for key, value in doc.items():
        if not isinstance(value, dict):
            plain[key] = value
            continue
        table = {}
        for field, v in value.items():
            axis = _ALIASES.get(f"{key}.{field}")
            names = axis is not None and GRID_KNOBS[axis][2] is str
            text = isinstance(v, str) and ("," in v or (":" in v and not names))
            if axis is not None and (isinstance(v, list) or text):
                axes[axis] = parse_values(",".join(map(str, v)), axis) if isinstance(v, list) else v
            else:
                table[field] = v
        plain[key] = table
    return plain, axes


def load_toml_grid(path: str | Path, base: Config) -> tuple[Config, dict[str, Any]]:
    """``config.load_toml`` that also takes lists for the grid knobs: (config, axes)."""
    doc, name = read_toml(path)
    axes: dict[str, Any] = {}
    if name is not None:
        base, axes = grid_preset(name)
    doc, more = split_grid_values(doc)
    return apply_overrides(base, doc, f"config {Path(path).name}"), {**axes, **more}


_PHASE_SWEEP = {"heads": PAPER_HEADS, "trials": 5, "log_points": 100}
_DM1 = {"model": "dm1", "n_train": PAPER_SIZES["dm1"][0], "n_test": PAPER_SIZES["dm1"][1]}
_SPARSE_TOKEN = {
    "data": {
        "model": "sparse-token",
        "n_train": 1000,
        "n_test": 1000,
        "T": 10,
        "d": 1000,
        "r": 3,
        "positive_rate": 0.2,
        "signal": 6.0,
    },
    "model": {"query": "learned", "attention": "softmax", "bias": True, "init": "zero", "norm": "sum"},
    "optim": {"optimizer": "gd", "lr": 0.5, "loss": "logistic", "steps": 2},
    "sweep": {"heads": (1,), "trials": 10, "log_every": 1, "save_params": True},
}
# The positional-semantic grids: tied attention on two tokens, sequence outputs, the summed mse
# with coupled decay 0.01 (the paper's objective); temperature 1/d.
_POSITIONAL_SEMANTIC = {
    "data": {"model": "positional-semantic", "d": 100, "n_test": 1000},
    "model": {
        "key_query": "tied",
        "head_size": 1,
        "query": "all",
        "output": "sequence",
        "temperature": 0.01,  # 1/d: the scores (XQ)(XQ)ᵀ/d
    },
    "optim": {"loss": "mse", "lr": 0.15, "steps": 2000, "reduction": "sum", "weight_decay": 0.01},
    "sweep": {"heads": (1,), "trials": 4, "log_points": 40, "save_params": True, "head_every": 1},
}
# at d = 50 (the paper's 1000), 500 test examples: the beyond-the-paper grids (positional_extras)
_POSITIONAL_SEMANTIC_50 = {
    **_POSITIONAL_SEMANTIC,
    "data": {"model": "positional-semantic", "d": 50, "n_test": 500},
    "model": {**_POSITIONAL_SEMANTIC["model"], "temperature": 0.02},
    "sweep": {**_POSITIONAL_SEMANTIC["sweep"], "log_points": 20},
}
# name -> (one-line purpose, {section: {field: value}}, {knob: values})
GRID_PRESETS: dict[str, tuple[str, dict[str, dict[str, Any]], dict[str, str]]] = {
    "phase-gd": (
        "grid: DM1, GD, H × 17 log-spaced η₀ in [1e-2, 1e2], constant scaling: where training breaks",
        {"data": _DM1, "optim": {"optimizer": "gd", "steps": 2000}, "sweep": _PHASE_SWEEP},
        {"lr": "1e-2:1e2:17"},
    ),
    "phase-adam": (
        "grid: DM1, Adam, H × 17 log-spaced η₀ in [1e-2, 1e2]: where training breaks",
        {"data": _DM1, "optim": {"optimizer": "adam", "steps": 2000}, "sweep": _PHASE_SWEEP},
        {"lr": "1e-2:1e2:17"},
    ),
    "heads-vs-samples": (
        "grid: DM1, GD η = H, H × n_train ∈ {25, …, 400}: where more heads help",
        {
            "data": _DM1,
            "optim": {"optimizer": "gd", "lr": 1.0, "lr_scaling": "linear", "steps": 2000},
            "sweep": _PHASE_SWEEP,
        },
        {"n_train": "25,50,100,200,400"},
    ),
    # dynamics.experiments.positional_semantic: the paper's GD at d = 100 (theirs: 1000, 5000 steps),
    # both starts at each α = n/d; it adds the overlaps m and θ from the snapshots of Q
    "positional-semantic": (
        "grid: positional vs semantic attention (Cui et al. 2024), d = 100: α = n/d ∈ {0.5, 1, 1.5, 2} "
        "× the semantic and positional starts, GD on the summed objective with decay 0.01",
        _POSITIONAL_SEMANTIC,
        {"n_train": "50,100,150,200", "start": "semantic,positional"},
    ),
    # dynamics.experiments.specialisation: F = 3 features, H − F = −1 … 2, the activation (a
    # categorical knob) and the step (erf diverges at softmax's 0.01; it is stable at 0.002).
    "specialisation-grid": (
        "grid: multi-location F=3, H ∈ {2,…,5} × erf/softmax/softmax1 × η ∈ {0.002, 0.01}: "
        "which heads hold the features",
        {
            **PRESETS["specialisation"][1],
            "optim": {**PRESETS["specialisation"][1]["optim"], "steps": 10000},
            "sweep": {"heads": (2, 3, 4, 5), "trials": 4, "log_points": 60, "head_metrics": "on"},
        },
        {"attention": "erf,softmax,softmax1", "lr": "0.002,0.01"},
    ),
    # Barnfield, Cui, Lu (2025): the first two GD steps from zero init of one softmax head with a
    # learned query q, readout w and bias b; α₀ = n/d over n_train at d = 1000
    # (dynamics.experiments.sparse_token; its figure draws cos(w⁽¹⁾, ξ) and cos(q⁽²⁾, ξ)).
    "sparse-token": (
        "grid: sparse-token, one learned-query head, 2 GD steps η=0.5 from 0: cos(w⁽¹⁾, ξ), "
        "cos(q⁽²⁾, ξ) against α₀ = n/d",
        _SPARSE_TOKEN,
        {"n_train": "250,500,1000,2000,4000"},
    ),
    "sparse-token-theta": (
        "grid: sparse-token as above, α₀ ∈ {0.25, …, 4} × signal θ ∈ {1, 2, 3, 4, 6}",
        _SPARSE_TOKEN,
        {"n_train": "250,500,1000,2000,4000", "signal": "1,2,3,4,6"},
    ),
    "single-location-grid": (
        "grid: single-location (Marion et al.'s SGD setting), d ∈ {40, …, 320} × β₀ ∈ {1, 2, 4}, 2 trials",
        {"sweep": {"trials": 2}},
        {"d": "40,80,160,320", "temperature": "1,2,4"},
    ),
    # dynamics.experiments.positional_extras: the (α, ω) phase diagram of the two fixed starts (GD)
    "positional-semantic-phase": (
        "grid: positional vs semantic, d = 50: α ∈ {0.5, 1, 1.5, 2, 3} × ω ∈ {0, 0.2, 0.4, 0.6} × "
        "the two starts, GD: which start is the global minimiser (40 points × 4 trials; 10 min on 2 "
        "loaded cores)",
        _POSITIONAL_SEMANTIC_50,
        {"n_train": "25,50,75,100,150", "omega": "0,0.2,0.4,0.6", "start": "semantic,positional"},
    ),
    # and a tied Q of rank 2 from a random start (the normal init, σ₀ = 1), trained by Adam
    "positional-semantic-random": (
        "grid: positional vs semantic, d = 50: a rank-2 tied Q from a random start N(0, 1/d), Adam "
        "η = 0.01, α ∈ {0.5, 1, 1.5, 2, 3} (5 points × 4 trials; 2.5 min on 2 loaded cores)",
        {
            **_POSITIONAL_SEMANTIC_50,
            "data": {**_POSITIONAL_SEMANTIC_50["data"], "start": "random"},
            "model": {**_POSITIONAL_SEMANTIC_50["model"], "head_size": 2, "init": "normal"},
            "optim": {**_POSITIONAL_SEMANTIC["optim"], "optimizer": "adam", "lr": 0.01},
        },
        {"n_train": "25,50,75,100,150"},
    ),
}

# A grid preset that starts from a plain preset (then its overrides, then its axes).
GRID_BASES = {"single-location-grid": "single-location"}

# The emergence grids (docs/frontier.md): plateau length against T, d, B and p, online SGD (lr 0.25,
# the paper's η = 0.5 with its ½) and Adam (lr 0.01); steps cover the slowest point of each axis.
_ADAM = {"optimizer": "adam", "lr": 0.01}
EMERGENCE_GRIDS = {
    "emergence-T": (
        "T ∈ {8, …, 128} at d = 16",
        {"optim": {"steps": 2400}, "sweep": {"log_every": 8}},
        {"T": "8,16,32,64,128"},
    ),
    "emergence-d": ("d ∈ {4, …, 256} at T = 16", {"optim": {"steps": 1000}}, {"d": "4,8,16,32,64,128,256"}),
    "emergence-B": (
        "B ∈ {1, 2, 4, 8} free copies at T = 32",
        {"data": {"T": 32}, "optim": {"steps": 800}},
        {"copies": "1,2,4,8"},
    ),
    "emergence-B-tied": (
        "B ∈ {1, 2, 4, 8} copies sharing one logit at T = 32",
        {"data": {"T": 32, "copy_logits": "tied"}, "optim": {"steps": 800}},
        {"copies": "1,2,4,8"},
    ),
    "emergence-p": (
        "cross-sample repetition p ∈ {0, …, 0.8} at T = 16, d = 64, tested at p = 0",
        {"data": {"d": 64}, "optim": {"steps": 1000}},
        {"repetition": "0,0.05,0.1,0.2,0.4,0.8"},
    ),
}
for _name, (_what, _over, _axes) in dict(EMERGENCE_GRIDS).items():
    GRID_BASES[_name] = GRID_BASES[f"{_name}-adam"] = "emergence"
    GRID_PRESETS[_name] = (f"grid: emergence, online SGD, {_what}", _over, _axes)
    _adam = {**_over, "optim": {**_over.get("optim", {}), **_ADAM}}
    GRID_PRESETS[f"{_name}-adam"] = (f"grid: emergence, Adam lr 0.01, {_what}", _adam, _axes)


def grid_preset(name: str) -> tuple[Config, dict[str, Any]]:
    """(config, axes) of a grid preset, or of a plain preset with no axes."""
    if name not in GRID_PRESETS:
        if name not in PRESETS:  # name the grid presets too, not only the plain ones
            raise unknown_preset(name, [*PRESETS, *GRID_PRESETS])
        return preset(name), {}
    _, overrides, axes = GRID_PRESETS[name]
    base = Config(name=name)
    if name in GRID_BASES:  # a plain preset under it: its config, renamed
        base = dataclasses.replace(preset(GRID_BASES[name]), name=name)
    return apply_overrides(base, overrides, f"preset {name}", explicit=False), dict(axes)
