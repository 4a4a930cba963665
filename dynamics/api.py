"""The notebook API: ``run_sweep(preset("fig2"), heads=[1, 2, 4], steps=500)``, ``load_results(folder)``.

Keyword overrides use the command line's names (``--lr-scaling`` is ``lr_scaling``, ``--width``
is ``width``, or the field's own, ``d``), both generated from the knobs' declarations
(``dynamics.parts.knobs``), so what works as a flag works as a keyword; a value given as text
is read as the flag reads it (a switch takes a bool only), and an enum member
(``dynamics.Loss.EXP``) stands for its name; a numpy or JAX scalar (``np.float32(0.5)``,
``np.int64(2)``) is the Python number it holds, an array of them a list. ``run_sweep(data="file.npz")``
trains on a file (as ``--data``; a ``data_model`` naming another model is refused, as on the
command line), ``run_sweep(..., x64=True)`` simulates in float64 (as ``--x64``). ``run_sweep`` returns a
``dynamics.sweeps.result.SweepResult`` (``.to_dataframe()``, ``.summary_frame()``,
``figures.sweep_figure(result)``); ``load_results`` returns what a folder holds: a SweepResult
(``.complete`` False for an interrupted run), a grid's ``GridResult`` or a bottleneck run dict.
"""

from __future__ import annotations

import argparse
import enum
from pathlib import Path
from typing import Any

from dynamics.config.schema import (
    Config,
    ConfigError,
    apply_overrides,
    config_from_dict,
    declared,
    preset,
    validate,
)
from dynamics.parts.knobs import Declared, text_type
from dynamics.sweeps.results import BOTTLENECK_NPZ, check_sweep_files, read_folder
from dynamics.sweeps.results import load_results as load_files

ENGINE_KEYWORDS = (
    "data",
    "progress",
    "on_point",
    "skip_heads",
    "devices",
    "packs_per_call",
    "chunk",
    "slots",
    "metrics",
    "call_seconds",
)


def _knobs() -> dict[str, Declared]:
    """keyword -> the knob it sets: the flag's name, and the field's own name where no other
    knob or keyword takes it (``d`` is ``width``)."""
    knobs = [k for k in declared() if k.flag]
    by_keyword = {k.keyword: k for k in knobs}
    for k in knobs:
        if k.name not in by_keyword and k.name not in ENGINE_KEYWORDS and k.name != "model":
            by_keyword[k.name] = k
    return by_keyword


def with_overrides(cfg: Config | str | None = None, **overrides: Any) -> Config:
    """``cfg`` (a Config, a preset's name, or None for the defaults) with fields replaced by the
    command line's names: ``with_overrides("fig2", heads=[1, 4], lr=0.5, data_model="planted")``.
    The result is checked (``dynamics.config.schema.validate``; a ConfigError names the field) and
    returned as given, not resolved."""
    if cfg is None:
        cfg = Config()
    elif isinstance(cfg, str):
        cfg = preset(cfg)
    elif not isinstance(cfg, Config):
        raise TypeError(f"cfg={cfg!r:.80} must be a Config, a preset's name or None (the defaults)")
    knobs = _knobs()
    sections: dict[str, dict[str, Any]] = {}
    for key, value in overrides.items():
        value = _plain(value)  # np.float32(0.5) is 0.5: a config (its hash, results.json) holds Python values
        if "." in key:  # a data model's parameter named by its model: **{"sparse-token.signal": 6}
            sections.setdefault("data", {})[key] = value
            continue
        if key not in knobs:
            import difflib

            close = difflib.get_close_matches(key, list(knobs), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown override {key}={value!r}{hint}; allowed: {', '.join(knobs)}")
        k = knobs[key]
        typ = text_type(k)
        if isinstance(value, enum.Enum) and typ is str:  # dynamics.Loss.EXP is "exp", as on the command line
            value = value.value
        if isinstance(value, str) and typ is not str and not k.spec.switch:  # a switch takes a bool only
            try:
                value = typ(value)  # "1,2,4" as on the command line
            except (argparse.ArgumentTypeError, ValueError, TypeError) as err:  # the flag's own message
                raise ConfigError(f"{key}={value!r}: {err}") from None
        sections.setdefault(k.section, {})[k.name] = value
    out = apply_overrides(cfg, sections, "keyword arguments")

    validate(out)  # a bad value is refused here, naming its field, not when the config runs
    return out


def run_sweep(cfg: Config | str | None = None, **kwargs: Any):
    """Run the sweep of ``cfg`` with keyword overrides (``with_overrides``); the engine's own
    keywords (``progress``, ``on_point``, ``devices``, …) pass through to
    ``dynamics.sweeps.sweep.run_sweep``. ``data``: a data model object of your own, or the path of
    an .npz file to train on (as ``--data``); with it, a ``data_model`` keyword (or a config whose
    ``data.model`` was set explicitly) naming another model is refused; ``x64=True`` simulates in
    float64 (as ``--x64``)."""
    import os

    from dynamics.sweeps.checks import as_config, with_data
    from dynamics.sweeps.sweep import run_sweep as _run_sweep

    engine = {k: kwargs.pop(k) for k in ENGINE_KEYWORDS if k in kwargs}
    if isinstance(cfg, str):
        cfg = as_config(cfg, "run_sweep")  # a bottleneck preset is refused, not run as the default sweep
    if engine.get("data") is not None:
        _check_one_data_model(as_config(cfg, "run_sweep"), engine["data"], kwargs)
        if isinstance(engine["data"], str | os.PathLike):
            kwargs.pop("data_model", None)  # the file's own model (checked above): the path sets it below
    if engine.get("data") is not None and not isinstance(engine["data"], str | os.PathLike):
        # a data model object: the overrides are checked against its declarations, not the default model's
        cfg = with_data(as_config(cfg, "run_sweep"), engine.pop("data"))
    cfg = with_overrides(cfg, **kwargs)
    if isinstance(engine.get("data"), str | os.PathLike):  # a file's path, as --data FILE.npz
        path = os.fspath(engine.pop("data"))
        cfg = apply_overrides(cfg, {"data": {"model": "npz", "path": path}}, "run_sweep(data=...)")
    return _run_sweep(cfg, **engine)  # in the config's precision (sweep.x64, the keyword x64)


def _check_one_data_model(cfg: Any, data: Any, kwargs: dict[str, Any]) -> None:
    """``data`` (an object or a file's path) is the data model of the run: a ``data_model`` keyword,
    or a config whose ``data.model`` was set explicitly, naming another is refused (one of the two
    would be silently dropped), as ``--data FILE.npz --data-model NAME`` is on the command line."""
    import os

    from dynamics import parts

    path = isinstance(data, str | os.PathLike)
    what = f"data={os.fspath(data)!r}" if path else f"data={type(data).__name__} object"
    named = kwargs.get("data_model")
    if isinstance(named, enum.Enum):
        named = named.value
    source = f"data_model={named!r}"
    cfg = getattr(cfg, "config", cfg)  # an Experiment's config
    if "data_model" not in kwargs and "data.model" in cfg.given:
        named, source = cfg.data.model, f"the config's data.model={cfg.data.model!r}"
    if named is None and "data_model" not in kwargs:
        return
    if path:
        known = isinstance(named, str) and named in parts.DATA_MODELS.names
        same = known and parts.DATA_MODELS[named].from_file
    else:
        same = isinstance(named, str) and named == parts.DATA_MODELS.adopt(data)
    if not same:
        raise ConfigError(
            f"{what} and {source} both name the data model: give one ({what} trains on "
            f"{'the file' if path else 'that object'})"
        )


def _plain(value: Any) -> Any:
    """A numpy (or JAX) scalar as the Python number it holds (np.float32(0.5) is 0.5, np.int64(2)
    is 2), an array or a list of them as a list of Python numbers; anything else as it is. A
    config holds Python values only: its hash and results.json read them."""
    import numpy as np

    if isinstance(value, np.generic):  # np.float64 is a float, but not a plain one
        return value.item()
    if isinstance(value, str | bytes | bool | int | float | complex | enum.Enum) or value is None:
        return value
    if isinstance(value, list | tuple):
        return type(value)(_plain(v) for v in value)
    shape = getattr(value, "shape", None)
    if shape is not None and hasattr(value, "dtype") and hasattr(value, "__array__"):
        array = np.asarray(value)
        return array.item() if array.ndim == 0 else array.tolist()
    return value


def load_results(folder: str | Path):
    """What a run folder holds (``results.json`` and its ``.npz``; a path to its results.json works too):

    - a sweep (``python -m dynamics.run``, ``write_results``): a ``SweepResult`` equal to the one
      ``run_sweep`` returned, theory diagnostics included (curves and ``extra["diagnostics"]``):
      every curve of ``curves.npz`` and every field of results.json that its writer does not
      derive from the result (``WRITER_FIELDS``) is in ``extra`` (``device``, ``timings``, …);
      an interrupted run's partial results have ``result.complete`` False and the H values still
      to run in ``result.extra["heads_todo"]``;
    - a grid (``--lr 0.1,1`` …): a ``dynamics.sweeps.grid.GridResult`` (every grid point, ``.point(k)``);
    - a bottleneck experiment: its run dict {"results", "arrays"}, as ``run_expressivity`` /
      ``run_heads`` return it (``figures.expressivity_figure`` / ``bottleneck_heads_figure`` draw it).
    """
    import numpy as np

    from dynamics.sweeps.result import SweepResult

    path, meta, kind = read_folder(folder)
    meta, arrays = load_files(path, BOTTLENECK_NPZ.get(kind, "curves.npz"))
    if kind in BOTTLENECK_NPZ:
        return {"results": meta, "arrays": arrays}
    if kind == "grid":
        return _grid_result(meta, arrays)
    extra = _extra(meta)
    skip = ("heads", "steps", "diverged_at")
    planted = {k[len("planted_") :]: v for k, v in arrays.items() if k.startswith("planted_")}
    config = config_from_dict(meta["config"])
    check_sweep_files(meta, arrays, config, path)
    if extra.get("complete") is False and "heads_todo" not in extra:
        extra["heads_todo"] = []  # an interrupted run's file of an older writer: nothing listed
    wall = meta.get("wall_time_s", 0.0)
    return SweepResult(
        config=config,
        heads=np.asarray(arrays["heads"]),
        steps=np.asarray(arrays["steps"]),
        curves={k: v for k, v in arrays.items() if k not in skip and not k.startswith("planted_")},
        diverged_at=np.asarray(arrays["diverged_at"]),
        wall_time_s=float(wall) if isinstance(wall, int | float) and not isinstance(wall, bool) else 0.0,
        extra=extra,
        planted=_planted(meta, planted, path),
    )


def _planted(meta: dict[str, Any], planted: dict[str, Any], path) -> dict[str, Any]:
    """The directions results.json names, in its order, from directions.npz; a one-line
    ConfigError when the two disagree (a damaged or replaced file)."""
    names = meta.get("directions", [])
    if not isinstance(names, list) or sorted(map(str, names)) != sorted(planted):
        raise ConfigError(
            f"{path}: directions.npz holds {sorted(planted)}, results.json names {names!r:.200}"
        )
    return {name: planted[name] for name in names}


# The fields of results.json that its writer derives from the result itself (``results_dict``,
# ``grid_results_dict``); every other field is the result's ``extra`` (``complete``, ``heads_todo``,
# ``device``, the theory ``diagnostics`` summary, a grid's ``resumed_points``, the command line's
# ``timings``), which loading gives back whole.
WRITER_FIELDS = (
    "schema_version",
    "config",
    "config_hash",
    "versions",
    "run",
    "wall_time_s",
    "heads",
    "steps",
    "summary",
    "grid",
)


def _extra(meta: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in meta.items() if k not in WRITER_FIELDS}


def _grid_result(meta: dict[str, Any], arrays: dict[str, Any]):
    import numpy as np

    from dynamics.config.grid import resolve_grid
    from dynamics.sweeps.grid import GridResult

    names = list(meta["grid"]["axes"])
    axes = tuple((name, tuple(meta["grid"]["values"][name])) for name in names)
    grid = resolve_grid(config_from_dict(meta["config"]), axes)
    own = {"heads", "steps", "diverged_at", "grid_axes", *names}  # the grid's coordinates, not curves
    return GridResult(
        grid=grid,
        heads=np.asarray(arrays["heads"]),
        steps=np.asarray(arrays["steps"]),
        curves={k: v for k, v in arrays.items() if k not in own},
        diverged_at=np.asarray(arrays["diverged_at"]),
        wall_time_s=float(meta.get("wall_time_s", 0.0)),
        extra=_extra(meta),
    )
