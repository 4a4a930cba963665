"""The ``emergence`` preset at the settings a notebook's controls pick (notebooks/emergence.ipynb).

Each of the data knobs T, d, copies (B) and repetition (p) takes one value or several; the one
given several is the sweep's axis (a grid over it, ``dynamics.sweeps.grid_runner``), at most one such.
The optimiser is online SGD at the preset's step (lr 0.25, the paper's η = 0.5 on its ½ loss) or
Adam at the ``-adam`` grid presets' lr 0.01 (docs/frontier.md). The emergence steps and their
power-law fits are ``dynamics.sweeps.emergence``'s; ``figures.emergence`` draws the result.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dynamics.config.grid_axes import grid_preset, resolve_grid
from dynamics.config.schema import apply_overrides, preset
from dynamics.errors import ConfigError

NAME = "emergence"
KNOBS = ("T", "d", "copies", "repetition")  # the data knobs a notebook may sweep
OPTIMIZERS = {"sgd": "online SGD", "adam": "Adam"}


def step_size(optimizer: str) -> float:
    """The preset's lr for online SGD, the ``-adam`` grid presets' for Adam."""
    if optimizer not in OPTIMIZERS:
        raise ConfigError(f"optimizer={optimizer!r} is not one of {', '.join(map(repr, OPTIMIZERS))}")
    name = "emergence-T-adam" if optimizer == "adam" else NAME
    return float(grid_preset(name)[0].optim.lr)


def plan(**picks: Any) -> tuple[str | None, tuple, dict[str, Any]]:
    """The controls' picks (each knob of ``KNOBS`` a value or a sequence of values) as (axis, its
    values, the fixed knobs): axis None when every knob has one value. A ConfigError, naming the
    knobs, when several have more than one value or one has none."""
    unknown = sorted(set(picks) - set(KNOBS))
    if unknown:
        raise ConfigError(f"unknown knob(s) {', '.join(unknown)}; the notebook's knobs: {', '.join(KNOBS)}")
    values = {k: tuple(v) if isinstance(v, Sequence) else (v,) for k, v in picks.items()}
    empty = [k for k, v in values.items() if not v]
    if empty:
        raise ConfigError(f"pick at least one value of {', '.join(empty)}")
    swept = [k for k, v in values.items() if len(v) > 1]
    if len(swept) > 1:
        raise ConfigError(
            f"several values of {', '.join(swept[:-1])} and {swept[-1]}: sweep one knob at a time "
            "(one value for the others)"
        )
    fixed = {k: v[0] for k, v in values.items() if len(v) == 1}
    axis = swept[0] if swept else None
    return axis, (tuple(sorted(values[axis])) if axis else ()), fixed


def config(
    fixed: dict[str, Any], *, copy_logits: str, optimizer: str, trials: int, steps: int, log_every: int = 2
):
    """The preset with the fixed data knobs, the optimiser at its step size, trials and steps."""
    data = {**fixed, "copy_logits": copy_logits}
    optim = {"optimizer": optimizer, "lr": step_size(optimizer), "steps": _count("steps", steps)}
    sweep = {"trials": _count("trials", trials), "log_every": _count("log_every", log_every)}
    return apply_overrides(preset(NAME), {"data": data, "optim": optim, "sweep": sweep}, "emergence notebook")


def _count(name: str, value: Any) -> int:
    """An integer setting as the Python int it is (a numpy integer too); a float, even 2.0, or a
    bool is refused in one line, as the config refuses it, never truncated (2.7 is not 2 steps)."""
    import numpy as np  # lazy: numpy: the module loads none at import

    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise ConfigError(f"{name}={value!r} must be an integer")
    return int(value)


def run(
    T: int | Sequence[int] = 16,
    d: int | Sequence[int] = 16,
    copies: int | Sequence[int] = 1,
    repetition: float | Sequence[float] = 0.0,
    *,
    copy_logits: str = "free",
    optimizer: str = "sgd",
    trials: int = 4,
    steps: int = 400,
    log_every: int | None = None,
    progress: bool = False,
):
    """The preset at these settings: a ``GridResult`` over the one knob given several values, else
    a ``SweepResult``. ``log_every`` (default: every 2 steps, coarser past 1000 steps) is the
    resolution of the emergence steps."""
    axis, values, fixed = plan(T=T, d=d, copies=copies, repetition=repetition)
    every = log_every if log_every is not None else max(2, _count("steps", steps) // 500)
    cfg = config(
        fixed, copy_logits=copy_logits, optimizer=optimizer, trials=trials, steps=steps, log_every=every
    )
    if axis is None:
        from dynamics.api import run_sweep  # lazy: JAX, the engine: on a run

        return run_sweep(cfg, progress=progress)
    from dynamics.sweeps.grid_runner import run_grid_experiment  # lazy: JAX, the engine: on a run

    return run_grid_experiment(resolve_grid(cfg, {axis: values}), progress=progress)
