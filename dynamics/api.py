"""The notebook API: ``run_sweep(preset("fig2"), heads=[1, 2, 4], steps=500)``, ``load_results(folder)``.

Keyword overrides use the command line's names (``--lr-scaling`` is ``lr_scaling``, ``--width``
is ``width``, or the field's own, ``d``), both generated from the knobs' declarations
(``dynamics.parts.knobs``), so what works as a flag works as a keyword; a value given as text
is read as the flag reads it (a switch takes a bool only), and an enum member
(``dynamics.Loss.EXP``) stands for its name; a numpy or JAX scalar (``np.float32(0.5)``,
``np.int64(2)``) is the Python number it holds, an array of them a list. ``run_sweep(data="file.npz")``
trains on a file (as ``--data``; a ``data_model`` naming another model is refused, as on the
command line), ``run_sweep(..., x64=True)`` simulates in float64 (as ``--x64``). ``run_sweep`` returns a
``dynamics.sweeps.sweep_result.SweepResult`` (``.to_dataframe()``, ``.summary_frame()``,
``figures.sweep_figure(result)``); ``run_grid(cfg, optimizer=["gd", "adam"], lr=[0.1, 1])`` runs
a grid over any knobs (a list is an axis) and returns its ``GridResult``; ``load_results``
returns what a folder holds: a SweepResult
(``.complete`` False for an interrupted run), a grid's ``GridResult`` or a bottleneck run dict;
``save_results(result, folder)`` writes any of them as the command line does.
"""

from __future__ import annotations

import argparse
import difflib
import enum
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from dynamics import parts
from dynamics.config.grid_axes import axis_name, grid_config, resolve_grid
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
from dynamics.sweeps import headline
from dynamics.sweeps.result_files import (
    BOTTLENECK_NPZ,
    check_sweep_files,
    read_folder,
    write_experiment,
    write_results,
)
from dynamics.sweeps.result_files import load_results as load_files
from dynamics.sweeps.sweep_result import SweepResult

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
    out = _overridden(cfg, overrides)
    validate(out)  # a bad value is refused here, naming its field, not when the config runs
    return out


def _overridden(cfg: Config | str | None, overrides: dict[str, Any]) -> Config:
    """``with_overrides`` before its validation (a grid validates each of its points instead)."""
    if cfg is None:
        cfg = Config()
    elif isinstance(cfg, str):
        cfg = preset(cfg)
    elif not isinstance(cfg, Config):
        raise TypeError(f"cfg={cfg!r:.80} must be a Config, a preset's name or None (the defaults)")
    knobs = _knobs()
    sections: dict[str, dict[str, Any]] = {}
    named: dict[tuple[str, str], str] = {}  # (section, field) -> the keyword that set it
    for key, value in overrides.items():
        value = _plain(value)  # np.float32(0.5) is 0.5: a config (its hash, results.json) holds Python values
        if "." in key:  # a data model's parameter named by its model: **{"sparse-token.signal": 6}
            sections.setdefault("data", {})[key] = value
            continue
        if key not in knobs:
            close = difflib.get_close_matches(key, list(knobs), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown override {key}={value!r}{hint}; allowed: {', '.join(knobs)}")
        k = knobs[key]
        typ = text_type(k)
        if isinstance(value, enum.Enum) and typ is str:  # dynamics.Loss.EXP is "exp", as on the command line
            value = value.value
        if isinstance(value, str) and typ is not str and not k.spec.switch:  # a switch takes a bool only
            try:
                value = typ(value)  # "1,2,4" or "1:8:4" as on the command line
            except ConfigError:  # the knob's own parser: its message names the keyword and the value
                raise
            except (argparse.ArgumentTypeError, ValueError, TypeError) as err:  # the flag's own message
                raise ConfigError(f"{key}={value!r}: {err}") from None
        first = named.setdefault((k.section, k.name), key)
        if first != key:  # two names of one field (width= and d=): neither may silently win
            raise ConfigError(
                f"{first}= and {key}= both set {k.section}.{k.name} (two names of one field): give one"
            )
        sections.setdefault(k.section, {})[k.name] = value
    return apply_overrides(cfg, sections, "keyword arguments")


def run_sweep(cfg: Config | str | None = None, **kwargs: Any):
    """Run the sweep of ``cfg`` with keyword overrides (``with_overrides``); the engine's own
    keywords (``progress``, ``on_point``, ``devices``, …) pass through to
    ``dynamics.sweeps.sweep.run_sweep``. ``data``: a data model object of your own, or the path of
    an .npz file to train on (as ``--data``); with it, a ``data_model`` keyword (or a config whose
    ``data.model`` was set explicitly) naming another model is refused; ``x64=True`` simulates in
    float64 (as ``--x64``)."""
    from dynamics.sweeps.sweep import run_sweep as _run_sweep  # lazy: the sweep runner: on first use

    engine = {k: kwargs.pop(k) for k in ENGINE_KEYWORDS if k in kwargs}
    cfg = _with_data(cfg, engine, kwargs, "run_sweep")
    return _run_sweep(cfg, **engine)  # in the config's precision (sweep.x64, the keyword x64)


def _with_data(
    cfg: Any, engine: dict[str, Any], kwargs: dict[str, Any], caller: str, check: bool = True
) -> Config:
    """``cfg`` with the keyword overrides ``kwargs`` (validated with ``check``, as ``with_overrides``)
    and ``engine``'s ``data`` (popped): a data model object (the overrides then checked against its
    declarations) or a file's path (as ``--data FILE.npz``); a second data model named beside it is
    refused."""
    from dynamics.sweeps.arguments import as_config, with_data  # lazy: the sweep runner: on first use

    if isinstance(cfg, str):
        cfg = as_config(cfg, caller)  # a bottleneck preset is refused, not run as the default sweep
    if engine.get("data") is not None:
        _check_one_data_model(as_config(cfg, caller), engine["data"], kwargs)
        if isinstance(engine["data"], str | os.PathLike):
            kwargs.pop("data_model", None)  # the file's own model (checked above): the path sets it below
    if engine.get("data") is not None and not isinstance(engine["data"], str | os.PathLike):
        # a data model object: the overrides are checked against its declarations, not the default model's
        cfg = with_data(as_config(cfg, caller), engine.pop("data"))
    if isinstance(engine.get("data"), str | os.PathLike):  # a file's path, as --data FILE.npz
        # set first, so the overrides are checked against the file's task (regression targets
        # take loss="mse"), as the command line checks --data with the other flags
        path = os.fspath(engine.pop("data"))
        cfg = apply_overrides(
            as_config(cfg, caller), {"data": {"model": "npz", "path": path}}, f"{caller}(data=...)"
        )
    return with_overrides(cfg, **kwargs) if check else _overridden(cfg, kwargs)


def run_grid(
    cfg: Config | str | None = None,
    *,
    lrs: Any = None,
    init_scales: Any = None,
    data: Any = None,
    progress: bool = True,
    devices: Any = None,
    packs_per_call: int | None = None,
    chunk: int | None = None,
    slots: int | None = None,
    call_seconds: float | None = None,
    **knobs: Any,
):
    """A grid over any knobs, by the command line's names: ``run_grid("fig2", optimizer=["gd",
    "adam"], lr=[0.1, 1, 10], heads=[1, 4])``. A list (or tuple) for a grid knob, or its text with
    a comma (``lr="1e-2:1e2:9"``: numbers also a:b:k), is an axis, as ``--optimizer gd,adam`` on
    the command line; every other keyword is an override (``heads`` stays the list of H). Returns
    the grid's ``dynamics.sweeps.grid_runner.GridResult`` (``.point(k)``: grid point k as the SweepResult
    of its configuration run alone, ``.grid.axes``: the axes' names and values, ``.summary_frame()``).

    Without axes, the sweep of ``cfg`` at every η₀ of ``lrs`` and σ₀ of ``init_scales``, batched
    into the same compiled calls: a list of SweepResult, η₀ outer
    (``dynamics.sweeps.sweep.run_grid``). ``lrs``/``init_scales`` with knob axes are refused:
    give ``lr=[…]``/``init_scale=[…]`` instead. ``data``, ``progress``, ``devices``,
    ``packs_per_call``, ``chunk``, ``slots`` and ``call_seconds``: as for ``run_sweep``."""
    from dynamics.sweeps.arguments import check_layout  # lazy: the sweep runner: on first use
    from dynamics.sweeps.grid_runner import run_grid_experiment  # lazy: the grid runner: on first use
    from dynamics.sweeps.sweep import run_grid as run_variants  # lazy: the sweep runner: on first use

    sweep_only = [k for k in ENGINE_KEYWORDS if k in knobs]  # the ones run_grid has no parameter for
    if sweep_only:  # run_sweep's engine keywords, which a grid does not take (yet)
        raise ConfigError(
            f"run_grid does not take {sweep_only[0]}= (run_sweep does): run the points one by one"
        )
    layout = dict(devices=devices, packs_per_call=packs_per_call, chunk=chunk, slots=slots)
    axes, engine = _axes(knobs), {"data": data}
    if not axes:
        for swept, single, values in (("lrs", "lr", lrs), ("init_scales", "init_scale", init_scales)):
            if single in knobs and values is not None:  # the sweep's values would replace it
                raise ConfigError(
                    f"run_grid: {single}={knobs[single]!r} and {swept}= both give the {single}: "
                    f"put every value in {swept}"
                )
        if knobs:  # overrides only: the config they give, as a sweep at each η₀ and σ₀
            cfg = _with_data(cfg, engine, knobs, "run_grid")
        return run_variants(
            cfg,
            data=engine.get("data"),
            lrs=lrs,
            init_scales=init_scales,
            progress=progress,
            call_seconds=call_seconds,
            **layout,
        )
    if lrs is not None or init_scales is not None:
        raise ConfigError(
            f"run_grid: lrs/init_scales are not taken with the knob axes {', '.join(axes)}; "
            f"give lr=[…] and init_scale=[…] as axes instead"
        )
    if data is not None and "data_model" in axes:
        raise ConfigError(
            f"run_grid: data= and the data-model axis {list(axes['data_model'])} both name the data model; "
            f"give one"
        )
    check_layout(**layout, progress=progress)
    cfg = _with_data(cfg, engine, knobs, "run_grid", check=False)  # each grid point is validated
    grid = resolve_grid(cfg, axes)
    return run_grid_experiment(grid, progress=progress, call_seconds=call_seconds, **layout)


def _axes(knobs: dict[str, Any]) -> dict[str, Any]:
    """The grid axes among the keywords (popped from ``knobs``): a grid knob's list, tuple, array
    or text with several values, by the axis name the grid gives it."""
    by_keyword = _knobs()
    axes = {}
    for key in list(knobs):
        k = by_keyword.get(key)
        if k is None or k.spec.grid is None:
            continue
        value = _plain(knobs[key])
        several = isinstance(value, str) and ("," in value or (":" in value and k.spec.grid is not str))
        if isinstance(value, list | tuple) or several:
            knobs.pop(key)
            axes[axis_name(k)] = value
    return axes


def _check_one_data_model(cfg: Any, data: Any, kwargs: dict[str, Any]) -> None:
    """``data`` (an object or a file's path) is the data model of the run: a ``data_model`` keyword,
    or a config whose ``data.model`` was set explicitly, naming another is refused (one of the two
    would be silently dropped), as ``--data FILE.npz --data-model NAME`` is on the command line."""
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
    - a grid (``--lr 0.1,1`` …): a ``dynamics.sweeps.grid_runner.GridResult`` (every grid point,
      ``.point(k)``);
    - a bottleneck experiment: its run dict {"results", "arrays"}, as ``run_expressivity`` /
      ``run_heads`` return it (``figures.expressivity_figure`` / ``bottleneck_heads_figure`` draw it).
    """
    path, meta, kind = read_folder(folder)
    meta, arrays = load_files(path, BOTTLENECK_NPZ.get(kind, "curves.npz"))
    if kind in BOTTLENECK_NPZ:
        if not isinstance(meta.get("headline"), dict):  # a folder written before headlines were
            try:
                meta["headline"] = headline.load(headline.function_of(kind))(meta)
            except (KeyError, TypeError, ValueError):  # a summary it cannot read: no headline, no crash
                meta["headline"] = {}
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


def save_results(result, folder: str | Path, *, overwrite: bool = False) -> list[Path]:
    """Write ``result`` into ``folder`` (created if needed) as the command line writes a run, so that
    ``load_results(folder)`` gives it back: a ``SweepResult`` (``run_sweep``, ``load_results``):
    ``results.json`` (with its ``headline``) and ``curves.npz``, and ``params.npz`` /
    ``directions.npz`` where it has snapshots or planted directions; a grid's ``GridResult``: also
    ``summary.csv``; a bottleneck run dict (``run_expressivity``, ``run_heads``): results.json and its
    ``.npz``. No figure (``figures.sweep_figure(result)`` draws one). A folder that already holds a
    results.json is refused unless ``overwrite=True``; anything that is not a result is refused
    with a one-line ConfigError. Returns the paths written."""
    from dynamics.sweeps.grid_runner import GridResult, write_grid  # lazy: the grid runner: on first use

    npz_name = None
    if (
        isinstance(result, dict)
        and set(result) == {"results", "arrays"}
        and isinstance(result["results"], dict)
    ):
        npz_name = BOTTLENECK_NPZ.get(result["results"].get("experiment"))
    if not isinstance(result, SweepResult | GridResult) and npz_name is None:
        raise ConfigError(
            f"save_results: {type(result).__name__} is not a result; give what run_sweep, run_grid, "
            "run_grid_experiment, run_expressivity, run_heads or load_results returned"
        )
    if isinstance(folder, bool) or not isinstance(folder, str | os.PathLike) or not str(folder).strip():
        raise ConfigError(f"save_results: folder={folder!r:.80} must be a folder's path (str or Path)")
    out = Path(folder)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"save_results: {str(out)!r} is a file, not a folder")
    if (out / "results.json").exists() and not overwrite:
        raise ConfigError(
            f"save_results: {str(out)!r} already holds results.json; pass overwrite=True to replace it"
        )
    out.mkdir(parents=True, exist_ok=True)
    if npz_name is not None:
        return list(write_experiment(result, out, npz_name))
    if isinstance(result, GridResult):
        return list(write_grid(result, out))
    json_path, npz_path = write_results(result, out)
    also = (("params.npz", result.params), ("directions.npz", result.planted))
    return [json_path, npz_path, *(out / name for name, have in also if have)]


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
    from dynamics.sweeps.grid_runner import GridResult  # lazy: the grid runner: on first use

    names = list(meta["grid"]["axes"])
    axes = tuple((name, tuple(meta["grid"]["values"][name])) for name in names)
    grid = resolve_grid(grid_config(config_from_dict(meta["config"]), meta["grid"]), axes)
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


# Many run folders as one frame


def load_runs(root: str | Path = "runs"):
    """Every sweep and grid saved under ``root`` (searched at any depth; a run folder is one that
    holds a ``results.json``) as one tidy pandas DataFrame at the summary level: one row per run
    folder × grid point × H, the columns ``run`` (the folder, relative to ``root``; ``.`` for
    ``root`` itself), ``kind`` (``sweep`` or ``grid``), ``complete``, the columns of the run's
    ``summary_frame()`` (``H``, a grid's axes, ``trials``, ``n_diverged``, the final metrics' mean
    and std, …) and then every knob of the row's config (the grid point's own) by its name (``lr``,
    ``optimizer``, ``n_train``, ``data_model`` for ``data.model``, a data model's parameters, NaN
    where the model has none); the config's list of H, ``sweep.heads``, is not a column (each row
    has its own ``H``). A folder that holds no results, or whose results cannot be read (damaged,
    edited, a bottleneck experiment's), is skipped with a warning naming it and why. Rows come in
    the folders' sorted order."""
    import pandas as pd  # lazy: pandas: only where frames are built

    base = _runs_root(root)
    folders, empty = _run_folders(base)
    for folder in empty:
        warnings.warn(f"{folder}: skipped, not a results folder (no results.json in it)", stacklevel=2)
    frames = []
    for folder in folders:
        run = folder.relative_to(base).as_posix()
        try:
            result = load_results(folder)
            if isinstance(result, dict):
                raise ConfigError("a bottleneck experiment's results, not a sweep or a grid")
            frames.append(_run_frame(result, run))
        except Exception as err:  # any damage: this folder is skipped, the others still listed
            why = str(err) if isinstance(err, ConfigError) else f"{type(err).__name__}: {err}"
            warnings.warn(f"{folder}: skipped, {why}", stacklevel=2)
    if not frames:
        return pd.DataFrame(columns=["run", "kind", "complete", "H"])
    return pd.concat(frames, ignore_index=True)


def _runs_root(root: str | Path) -> Path:
    if isinstance(root, bool) or not isinstance(root, str | os.PathLike):
        raise TypeError(f"root={root!r:.80} must be a path (str or pathlib.Path)")
    if not str(root).strip():
        raise ConfigError("root='' is empty: give the folder that holds the run folders (e.g. runs)")
    path = Path(root)
    if not path.is_dir():
        what = "is not a folder" if path.exists() else "does not exist"
        raise ConfigError(f"runs folder {str(root)!r} {what}")
    return path


def _run_folders(root: Path) -> tuple[list[Path], list[Path]]:
    """(the run folders at or under ``root``, sorted; the folders that hold no run at any depth,
    each named once, at its top). A run folder's own subfolders (``points/``) are not searched."""
    runs: list[Path] = []
    empty: list[Path] = []
    seen: set[Path] = set()

    def walk(folder: Path) -> bool:  # whether a run is at or below ``folder``
        try:
            if (folder / "results.json").is_file():
                runs.append(folder)
                return True
            real = folder.resolve()
            if real in seen:  # a link back up the tree
                return False
            seen.add(real)
            subs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:  # unreadable: listed as holding no run
            return False
        held = {sub: walk(sub) for sub in subs}
        if any(held.values()) or folder == root:
            empty.extend(sub for sub, has in held.items() if not has)
        return any(held.values())

    walk(root)
    return runs, empty


def _run_frame(result, run: str):
    """One run's rows of ``load_runs``: its summary frame, then the knobs of each row's config."""
    import pandas as pd  # lazy: pandas: only where frames are built

    from dynamics.sweeps.grid_runner import GridResult  # lazy: the grid runner: on first use

    if isinstance(result, GridResult):
        frame, kind = result.summary_frame(), "grid"
        per_point = len(frame) // len(result.grid.points)  # the finished H of each grid point
        configs = [cfg for cfg in result.grid.points for _ in range(per_point)]
    else:
        frame, kind = result.summary_frame().reset_index(), "sweep"
        configs = [result.config] * len(frame)
    frame.insert(0, "run", run)
    frame.insert(1, "kind", kind)
    frame.insert(2, "complete", result.complete)
    knobs = pd.DataFrame([knob_columns(cfg) for cfg in configs], index=frame.index)
    return pd.concat([frame, knobs.drop(columns=[c for c in knobs if c in frame])], axis=1)


def knob_columns(cfg: Config) -> dict[str, Any]:
    """Every knob of the resolved config ``cfg`` by its name (``data.model`` as ``data_model``, a
    data model's parameter by its own name, None where the model has none); not ``sweep.heads``,
    the list of H: a frame's rows each have their own ``H``."""
    params = dict(cfg.data.params)
    columns: dict[str, Any] = {}
    for k in declared():
        if (k.section, k.name) == ("sweep", "heads"):
            continue
        holder = getattr(cfg, k.section)
        column = "data_model" if (k.section, k.name) == ("data", "model") else k.name
        columns[column] = getattr(holder, k.name) if hasattr(holder, k.name) else params.get(k.name)
    return columns
