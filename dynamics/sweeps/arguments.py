"""What ``run_sweep`` and ``run_grid`` check of their arguments before anything runs.

The config (a Config, an Experiment, a preset's name or None), a data model object, the engine's
layout keywords, the user's metrics and their names, the results handed back by ``skip_heads``,
and ``run_grid``'s step sizes and init scales; each refusal one line naming the value.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from dynamics import parts
from dynamics.config.grid_axes import parse_values
from dynamics.config.schema import (
    OWN_RUNNERS,
    Config,
    ConfigError,
    Experiment,
    IdenticalTrialsWarning,
    identical_trials,
    no_effect,
    preset,
    validate,
)
from dynamics.core.hooks import MetricRef
from dynamics.parts.metrics import REGISTRY, metrics_of
from dynamics.parts.registry import source_record
from dynamics.sweeps.sweep_result import HeadResult, reserved_columns

# Keys of a run's files that are not curves: a user metric may not take one (``load_results``
# reads the planted directions back as ``planted_<name>``, a grid's axes as their knobs' names).
FILE_KEYS = ("heads", "steps", "diverged_at", "diagnostic_steps", "head_steps", "grid_axes")
RESERVED_NAMESPACE = "planted_"  # the planted directions' keys in a loaded result


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
    # lazy: the theory layer, only when user metrics are named (their names may not be the diagnostics')
    from dynamics.theory.replay import CURVES, SNAPSHOT_CURVES

    taken = {*REGISTRY, *FILE_KEYS}  # every declared metric, per-head curve and snapshot
    taken |= {name for names in CURVES.values() for name in names} | set(SNAPSHOT_CURVES)
    columns = reserved_columns()  # the frames' own columns (heads, lr, trial, step, …), the grid knobs
    refs = []
    for name, fn in metrics.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise ConfigError(f"metric name {name!r} must be a Python identifier (letters, digits, _)")
        if name in columns:
            raise ConfigError(
                f"metric name {name!r} is a column the results' frames or a grid's knobs already use "
                f"({', '.join(sorted(columns))}); choose another"
            )
        if name in taken or name.startswith(RESERVED_NAMESPACE):
            raise ConfigError(
                f"metric name {name!r} is taken by mhsim's own curves ({', '.join(sorted(taken))} and "
                f"the planted directions' {RESERVED_NAMESPACE}*); choose another"
            )
        if not callable(fn):
            raise TypeError(f"metric {name!r}: {fn!r:.80} is not callable; give fn(params, data) -> array")
        refs.append(MetricRef(fn, name))
    return tuple(refs)


def check_skipped(cfg: Config, skip_heads: Mapping[int, HeadResult], L: int) -> None:
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
    if cfg is None:
        return Config()
    if isinstance(cfg, str):
        if cfg in OWN_RUNNERS:
            raise ConfigError(f"preset {cfg!r} is not a sweep: {caller} cannot run it; use {_own(cfg)}")
        return preset(cfg)
    if not isinstance(cfg, Config | Experiment):
        raise TypeError(f"cfg={cfg!r:.80} must be a Config, a preset's name or None (the defaults)")
    if isinstance(cfg, Config) and cfg.name in OWN_RUNNERS:  # preset(...) of one: a sweep's settings only
        raise ConfigError(
            f"a config named {cfg.name!r} is not that experiment (as a sweep it would run other "
            f"settings under its name): run it with {_own(cfg.name)}"
        )
    return cfg


def _own(name: str) -> str:
    """The call that runs the experiment of a preset with a runner of its own."""
    fn = "run_expressivity(ExpressivityConfig())" if "express" in name else "run_heads(HeadsConfig())"
    return f"dynamics.{fn}"


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


def warn_identical(cfg: Config) -> None:
    why = identical_trials(cfg)
    if why is not None:
        warnings.warn(why, IdenticalTrialsWarning, stacklevel=3)


def init_scale_values(cfg: Config, init_scales) -> list[float]:
    """run_grid's init scales; given with an init that draws nothing, refused (no effect)."""
    why = no_effect(cfg, "model.init_scale")  # the config's own rule for a given init scale
    if init_scales is not None and why is not None:
        raise ConfigError(f"init_scales={init_scales!r} was given but has no effect: {why}")
    return grid_values("init_scales", init_scales, cfg.model.init_scale)


def grid_values(name: str, values, default: float) -> list[float]:
    """run_grid's lrs or init_scales: None (the config's value), a number, a list of numbers or
    a string as on the command line ('0.1,1' or 'a:b:k'); checked per value by ``validate``."""
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


def variant(cfg: Config, lr: float, init_scale: float) -> Config:
    """``cfg`` at base step size ``lr`` and init scale ``init_scale``, validated."""
    optim = dataclasses.replace(cfg.optim, lr=lr)
    return validate(
        dataclasses.replace(cfg, optim=optim, model=dataclasses.replace(cfg.model, init_scale=init_scale))
    )
