"""Result files (docs/results-format.md), written atomically and read back.

A sweep writes ``results.json`` and ``curves.npz`` (``write_results``); any experiment writes
its json and an ``.npz`` the same way (``write_files``: the npz first, the json last, its
presence marking complete results); ``load_results`` reads both back. ``SCHEMA_VERSION`` of
every results.json and the versions stamp live here. Every file is written with
``dynamics.infra.files.atomic_write_bytes`` (a temporary file in the same folder, fsync, rename),
so a reader never sees a half-written file.
"""

from __future__ import annotations

import functools
import io
import json
import os
import platform
import subprocess
import sys
import warnings
import zipfile
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import jax
import jaxlib
import numpy as np
import optax

from dynamics import parts
from dynamics.config.grid_axes import GridExperiment, grid_config, resolve_grid
from dynamics.config.schema import config_from_dict, log_schedule, validate
from dynamics.core.data import planted_names
from dynamics.errors import ConfigError
from dynamics.infra import interrupts
from dynamics.infra.files import atomic_write_bytes
from dynamics.infra.timings import phase
from dynamics.parts.metrics import REGISTRY, has_head_axes, is_snapshot, metrics_of
from dynamics.sweeps.devices import device_name
from dynamics.sweeps.sweep_result import STEPLESS, SweepResult

SCHEMA_VERSION = 1


def versions() -> dict[str, str]:
    return {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "optax": optax.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def run_record(argv: list[str] | None = None) -> dict[str, Any]:
    """Who made a result file and how: mhsim's version, the git commit of the checkout it ran from
    (None outside one), the command line and a UTC timestamp. Metadata only: no number depends on it."""
    mhsim, commit = provenance()
    return {
        "mhsim_version": mhsim,
        "git_commit": commit,
        # the command as typed: `python -m dynamics.run --heads …` (sys.argv[0] would be run.py's path)
        "argv": list(sys.orig_argv if argv is None else argv),
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


@functools.lru_cache(maxsize=1)
def provenance() -> tuple[str | None, str | None]:
    """(mhsim's installed version, the checkout's git commit), looked up once per process: a sweep
    calls it before its first point, so writing a point's files stays as quick as before."""
    try:
        mhsim = version("mhsim")
    except PackageNotFoundError:  # run from a checkout that was never pip-installed
        mhsim = None
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():  # not a checkout (e.g. site-packages inside some other repository)
        return mhsim, None
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.SubprocessError):
        return mhsim, None
    return mhsim, (out.stdout.strip() or None) if out.returncode == 0 else None


def results_dict(result: SweepResult) -> dict[str, Any]:
    """results.json's fields of a sweep's result; ``headline`` only once it is complete."""
    doc = {
        "schema_version": SCHEMA_VERSION,
        "config": result.config.to_dict(),
        "config_hash": result.config.hash(),
        "versions": versions(),
        "run": run_record(),
        "device": device_name(),
        "wall_time_s": result.wall_time_s,
        "heads": [int(h) for h in result.heads],
        "steps": [int(s) for s in result.steps],
        "summary": result.summary(),
        **result.extra,
    }
    found = result.headline() if result.complete else None
    if found:
        doc["headline"] = found
    return doc


def write_results(result: SweepResult, out: Path) -> tuple[Path, Path]:
    """Write ``curves.npz`` then ``results.json`` (the json last: its presence marks a complete run)."""
    with phase("writing"):
        arrays = {"heads": result.heads, "steps": result.steps, "diverged_at": result.diverged_at}
        curves = {k: v for k, v in result.curves.items() if not is_snapshot(k)}
        if any(has_head_axes(k) for k in result.curves):  # the per-head view's own step axis
            curves["head_steps"] = result.head_steps
        # the snapshots and directions first: results.json, written last, marks all complete
        if result.params:
            write_params(out, result.params)
        if result.planted:
            write_params(out, result.planted, DIRECTIONS_NPZ)
        return write_files(out, "curves.npz", {**arrays, **curves}, results_dict(result))


PARAMS_NPZ = "params.npz"  # θ at the logged steps (``sweep.save_params``), one array per name
DIRECTIONS_NPZ = "directions.npz"  # the planted directions, one (trials, d) array per name


def write_params(out: Path, params: dict[str, np.ndarray], name: str = PARAMS_NPZ) -> None:
    """``params.npz``: the snapshots by name (a sweep's or a grid's), written atomically (``name``:
    another file of arrays by name, ``directions.npz``); the snapshots deflated (``npz_bytes``)."""
    data = npz_bytes(params, compress=params if name == PARAMS_NPZ else ())
    with interrupts.shielded():
        atomic_write_bytes(Path(out) / name, data)


def npz_bytes(arrays: dict[str, np.ndarray], compress=()) -> bytes:
    """An ``.npz`` (what ``np.savez`` writes, read by ``np.load``) of ``arrays``, the members named in
    ``compress`` deflated: the per-head curves and snapshots, whose NaN padding past each run's H
    (most of a sweep's numbers where H ranges up to H_max) takes almost no room deflated."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", allowZip64=True) as z:
        for key, value in arrays.items():
            info = zipfile.ZipInfo(f"{key}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED if key in compress else zipfile.ZIP_STORED
            with z.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(value), allow_pickle=False)
    return buf.getvalue()


def write_experiment(run: dict[str, Any], out: Path, npz_name: str) -> tuple[Path, Path]:
    """An experiment's run dict ({"results", "arrays"}, e.g. the bottleneck experiments'): ``npz_name``
    then ``results.json`` (last: its presence marks a complete run), atomically, with the versions,
    the run record and the device."""
    results = {**run["results"], "versions": versions(), "run": run_record(), "device": device_name()}
    return write_files(out, npz_name, run["arrays"], results)


def write_files(
    out: Path, npz_name: str, arrays: dict[str, np.ndarray], results: dict[str, Any]
) -> tuple[Path, Path]:
    """Write ``arrays`` to ``out/npz_name`` then ``results`` to ``out/results.json``, each
    atomically, the json last: its presence marks complete results. Returns (json, npz) paths."""
    out = Path(out)
    data = npz_bytes(arrays, compress=[k for k in arrays if has_head_axes(k)])
    npz_path, json_path = out / npz_name, out / "results.json"
    text = json.dumps(results, indent=2, allow_nan=False, default=_json_default)
    with interrupts.shielded():  # Ctrl-C waits for the pair: the json always describes the npz beside it
        atomic_write_bytes(npz_path, data)
        atomic_write_bytes(json_path, text.encode())
    return json_path, npz_path


def _json_default(obj):
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__}")


def complete_results_hash(out: Path) -> str | None:
    """The ``config_hash`` of the complete results in ``out``, or None if there are none.

    Missing, unreadable or partial (``"complete": false``, an interrupted sweep) results count as none.
    """
    try:
        meta = json.loads((Path(out) / "results.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("complete", True) is False:
        return None
    return meta.get("config_hash")


def load_results(out: Path, npz_name: str = "curves.npz") -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(results.json as a dict, ``npz_name`` as a dict of arrays) from the folder ``out``.

    Warns when the results were made with another jax, jaxlib or optax than this one. A grid's
    pair is checked against its own records (``dynamics.sweeps.result_files.check_grid_files``); a file
    that cannot be read is a one-line ConfigError naming it.
    """
    out = Path(out)
    meta = read_json(out / "results.json")
    saved, now = meta.get("versions"), versions()
    saved = saved if isinstance(saved, dict) else {}
    changed = [
        f"{k} {saved.get(k)} (now {now[k]})" for k in ("jax", "jaxlib", "optax") if saved.get(k) != now[k]
    ]
    if changed:
        warnings.warn(
            f"{out / 'results.json'} was made with {', '.join(changed)}: numbers may differ "
            f"in the last bits from a rerun",
            stacklevel=2,
        )
    arrays = _read_npz(out / npz_name)
    if npz_name == "curves.npz" and meta.get("config", {}).get("sweep", {}).get("save_params"):
        arrays.update({f"param_{k}": v for k, v in _read_npz(out / PARAMS_NPZ).items()})
    if npz_name == "curves.npz" and meta.get("directions"):
        arrays.update({f"planted_{k}": v for k, v in _read_npz(out / DIRECTIONS_NPZ).items()})
    if npz_name == "curves.npz" and "head_steps" not in arrays and any(map(has_head_axes, arrays)):
        arrays["head_steps"] = arrays["steps"]  # a file with per-head curves at every logged step
    if npz_name == "curves.npz" and "grid" in meta:
        check_grid_files(meta, arrays, out)
    return meta, arrays


def read_json(path: Path) -> dict[str, Any]:
    """A results.json as a dict with its ``config`` a dict, or a one-line ConfigError naming it
    (missing, unreadable, truncated, not JSON, not an mhsim results file)."""
    try:
        meta = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ConfigError(f"{path} cannot be read ({type(err).__name__}): {err}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
        raise ConfigError(f"{path} is not an mhsim results file (no config)")
    return meta


def _read_npz(path: Path) -> dict[str, np.ndarray]:
    try:
        with open(path, "rb") as f, np.load(f, allow_pickle=False) as z:  # f closed even when np.load fails
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        raise ConfigError(f"{path} is missing or damaged ({type(err).__name__}): {err}") from None


def refuser(where: Path, prefix: str = ""):
    """``bad(what)``: the one-line ConfigError of a damaged or edited run folder ``where``."""

    def bad(what: str) -> ConfigError:
        return ConfigError(f"{where}: {prefix}{what}: the results are damaged or edited; run them again")

    return bad


def check_record(meta: dict[str, Any], config, bad):
    """The record part of results.json (a sweep's or a grid's): its config valid (the resolved
    config returned), ``schema_version`` this mhsim's, ``complete`` a bool; else ``bad(...)``."""

    try:
        cfg = validate(config)
    except ConfigError as err:
        raise bad(f"results.json's config is not valid ({err})") from None
    if meta.get("schema_version") != SCHEMA_VERSION:
        version = meta.get("schema_version")
        raise bad(f"results.json's schema_version={version!r:.40}, this mhsim reads {SCHEMA_VERSION}")
    if not isinstance(meta.get("complete", True), bool):
        raise bad(f"results.json's complete={meta.get('complete')!r} is not true or false")
    return cfg


def check_hash(meta: dict[str, Any], cfg, config_hash: str, bad) -> None:
    """results.json's ``config_hash`` is ``config_hash`` (recomputed from its config; a sweep's or
    a grid's): data from a file are exempt, their content may have moved."""
    if not parts.DATA_MODELS.get(cfg.data.model).from_file and meta.get("config_hash") != config_hash:
        recorded = meta.get("config_hash")
        raise bad(f"results.json's config_hash {recorded!r:.40} is not its config's ({config_hash})")


def check_sweep_files(meta: dict[str, Any], arrays: dict[str, np.ndarray], config, where: Path) -> None:
    """A sweep's results.json and curves.npz describe the same run, or a one-line ConfigError:
    the config valid and its hash the recorded one (data from a file: its content may have
    moved, so not the hash), the arrays' heads and steps those of the config, every metric
    (heads, trials, L), each per-head curve (heads, trials, L, …) with the trailing axes its kind
    declares, diverged_at (heads, trials), ``complete`` a bool. A damaged or edited
    pair is refused rather than summarised into a wrong number. A grid's files are checked
    with the same parts, point by point (``dynamics.sweeps.result_files.check_grid_files``)."""
    bad = refuser(where)
    cfg = check_record(meta, config, bad)
    check_hash(meta, cfg, cfg.hash(), bad)
    check_sweep_arrays(meta, arrays, cfg, bad)


def check_sweep_arrays(meta: dict[str, Any], arrays: dict[str, np.ndarray], cfg, bad) -> None:
    """The arrays of one sweep of the resolved config ``cfg`` (a sweep's curves.npz, or one grid
    point's slice of a grid's) against it and results.json's ``meta``; else ``bad(...)``."""

    metrics = metrics_of(cfg)
    for name in ("heads", "steps", "diverged_at", *metrics):
        if name not in arrays:
            raise bad(f"curves.npz has no {name!r}")
    heads, steps = np.asarray(arrays["heads"]), np.asarray(arrays["steps"])
    partial = meta.get("complete", True) is False  # an interrupted run: the H values it finished
    done = [h for h in cfg.sweep.heads if h in heads.tolist()] if partial else list(cfg.sweep.heads)
    if heads.ndim != 1 or heads.tolist() != done:
        raise bad(f"curves.npz's heads {heads.tolist()} are not the config's {list(cfg.sweep.heads)}")
    want = log_schedule(cfg.optim.steps, cfg.sweep.log_every, cfg.sweep.log_points)
    if steps.tolist() != want:
        raise bad("curves.npz's logged steps are not the config's schedule")
    shape = (len(heads), cfg.sweep.trials, len(want))
    for name in metrics:
        if np.shape(arrays[name]) != shape or arrays[name].dtype.kind != "f":
            got = f"shape {np.shape(arrays[name])} of {np.asarray(arrays[name]).dtype}"
            raise bad(f"curves.npz's curve {name!r} has {got}, expected shape {shape} of floats")
    head_shape = (*shape[:2], _head_steps(arrays, want, bad))
    _check_head_curves(
        arrays, head_shape, max(cfg.sweep.heads), len(meta.get("directions") or []) or None, bad
    )
    div = np.asarray(arrays["diverged_at"])
    if div.shape != shape[:2] or div.dtype.kind not in "iu":
        got = f"shape {div.shape} of {div.dtype}"
        raise bad(f"curves.npz's diverged_at has {got}, expected shape {shape[:2]} of integers")
    if "directions" in meta:  # the per-head |cos| columns' names: reordered, they would name the wrong ones
        if meta["directions"] != planted_names(cfg.data):
            raise bad(f"directions {meta['directions']!r:.160} are not its data model's, in their order")
    if "heads" in meta and meta["heads"] != heads.tolist():
        raise bad(f"results.json's heads {meta['heads']!r:.80} are not curves.npz's {heads.tolist()}")
    if "steps" in meta and meta["steps"] != steps.tolist():
        raise bad(f"results.json's steps {meta['steps']!r:.80} are not curves.npz's logged steps")
    dead = _after_divergence(div, steps)  # masked after divergence
    if np.any(np.isfinite(arrays["train_loss"][dead])):
        raise bad("a run marked diverged has finite losses after its divergence")
    snapshots = np.asarray(arrays.get("head_steps", steps))  # θ is kept at the per-head view's steps
    _check_params(arrays, heads.tolist(), max(cfg.sweep.heads), div, snapshots, cfg.sweep.save_params, bad)


def _check_params(arrays, heads: list[int], h_max: int, div, snapshots, saved: bool, bad) -> None:
    """params.npz's arrays (``param_*``): floats of shape (heads, trials, snapshots, H_max, …); each
    run's own H heads hold no infinity and are not all NaN at a snapshot before its divergence (a
    grid over the width pads a narrower point's arrays with NaN)."""
    params = {k[len("param_") :]: np.asarray(v) for k, v in arrays.items() if k.startswith("param_")}
    if saved and not params:
        raise bad(f"{PARAMS_NPZ} has no parameters")
    want = (len(heads), div.shape[1], len(snapshots), h_max)
    alive = ~_after_divergence(div, snapshots)
    for name, value in params.items():
        if value.dtype.kind != "f" or value.shape[:4] != want:
            raise bad(
                f"{PARAMS_NPZ}'s {name!r} has shape {value.shape} of {value.dtype}, expected "
                f"{want} then its own axes, of floats"
            )
        for i, H in enumerate(heads):
            own = value[i][alive[i]][:, :H].reshape(int(alive[i].sum()), -1)  # (alive snapshots, …)
            if np.any(np.isinf(own)) or np.any(np.all(np.isnan(own), axis=1)):
                raise bad(f"{PARAMS_NPZ}'s {name!r} is not finite where H={H} had not diverged")


def _after_divergence(div: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """(heads, trials, L): True at the steps at or after each run's divergence step (none where
    ``div`` is -1, a run that did not diverge)."""
    return (div[..., None] >= 0) & (steps[None, None, :] >= div[..., None])


def _head_steps(arrays, logged: list[int], bad) -> int:
    """L_h, the number of the per-head view's steps (``head_steps``: some of the logged steps, in
    order; the logged steps themselves where the file has none)."""
    if "head_steps" not in arrays:
        return len(logged)
    head_steps = np.asarray(arrays["head_steps"])
    if (
        head_steps.ndim != 1
        or not set(head_steps.tolist()) <= set(logged)
        or np.any(np.diff(head_steps) <= 0)
    ):
        raise bad("curves.npz's head_steps are not some of its logged steps, in order")
    return len(head_steps)


def _check_head_curves(arrays, shape: tuple, h_max: int, P: int | None, bad) -> None:
    """Each per-head curve's shape: (heads, trials, L) then the axes its metric's kind declares
    (``Metric.trailing``: H_max, H_max × H_max, H_max × P with P the named planted directions)."""

    for name, value in arrays.items():
        metric = REGISTRY.get(name)
        if metric is None or not metric.per_head:
            continue
        want = (*shape, *metric.trailing(h_max, P))
        got = np.shape(value)
        if len(got) != len(want) or any(w is not None and g != w for g, w in zip(got, want, strict=True)):
            shown = tuple("any" if w is None else w for w in want)
            file = PARAMS_NPZ if metric.snapshot else "curves.npz"
            raise bad(f"{file}'s curve {name!r} ({metric.kind}) has shape {got}, expected {shown}")


def results_folder(folder: str | os.PathLike) -> Path:
    """The run folder of ``folder``: the folder itself, or the folder of a ``results.json`` (or
    ``.npz``) path inside it; a ConfigError when there are no results there."""
    if isinstance(folder, bool) or not isinstance(folder, str | os.PathLike):
        raise TypeError(f"folder={folder!r:.80} must be a path (str or pathlib.Path)")
    path = Path(folder)
    if not str(folder).strip():
        raise ConfigError("folder='' is empty: give the run folder (the --out of the run)")
    try:
        if path.is_file() and (path.name == "results.json" or path.suffix == ".npz"):
            path = path.parent
        is_dir, exists, has_results = path.is_dir(), path.exists(), (path / "results.json").is_file()
    except OSError as err:  # a name too long for the file system, a permission denied on the way
        raise ConfigError(f"results folder {str(folder)!r} cannot be read: {err.strerror or err}") from None
    if not is_dir:
        raise ConfigError(
            f"results folder {str(folder)!r} {'is not a folder' if exists else 'does not exist'}"
        )
    if not has_results:
        raise ConfigError(
            f"results folder {str(path)!r} holds no results.json (no run finished a point there)"
        )
    return path


def read_folder(folder: str | os.PathLike) -> tuple[Path, dict[str, Any], str]:
    """(folder, results.json as a dict, kind): kind "sweep", "grid", "bottleneck-expressivity" or
    "bottleneck-heads"."""
    path = results_folder(folder)
    meta = read_json(path / "results.json")
    if "grid" in meta:
        return path, meta, "grid"
    if meta.get("experiment") == "bottleneck-expressivity":
        return path, meta, "bottleneck-expressivity"
    if "sweep_configs" in meta and "data_models" in meta["config"]:
        return path, meta, "bottleneck-heads"
    return path, meta, "sweep"


BOTTLENECK_NPZ = {"bottleneck-expressivity": "expressivity.npz", "bottleneck-heads": "heads.npz"}


def check_grid_files(meta: dict[str, Any], arrays: dict[str, np.ndarray], where: Path) -> GridExperiment:
    """A grid's results.json and curves.npz (and params.npz) describe the same grid, or a one-line
    ConfigError naming the folder, the file and what is wrong; the grid they describe. The sweep's
    checks (``dynamics.sweeps.result_files``) on the record: the base config valid, ``schema_version``,
    ``complete``; then the grid's ``axes`` and ``values`` a valid grid over it whose hash
    (``GridExperiment.hash``: the base config and the axes) is the recorded ``config_hash``; its
    ``shape`` theirs; curves.npz's ``grid_axes`` and per-knob arrays those values; every curve
    (H, *grid shape, …) and ``diverged_at`` (H, *grid shape, trials), so every point is there;
    one diagnostics summary per point; then every grid point's slice checked as the sweep of its
    own config (``check_sweep_arrays``: its heads, its logged steps, each curve's shape, …)."""
    bad = refuser(where)
    record = meta.get("grid")
    names = record.get("axes") if isinstance(record, dict) else None
    values = record.get("values") if isinstance(record, dict) else None
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise bad(f"results.json's grid has no list of axes ({record!r:.80})")
    if not isinstance(values, dict) or sorted(values) != sorted(names):
        raise bad(f"results.json's grid values {values!r:.80} are not one list per axis {names}")
    if not all(isinstance(values[n], list) for n in names):
        raise bad(f"results.json's grid values {values!r:.80} are not one list per axis")
    try:
        base = config_from_dict(meta["config"])
    except (ConfigError, TypeError, ValueError, KeyError, AttributeError) as err:
        raise bad(f"results.json's config cannot be read ({type(err).__name__}: {err})") from None
    cfg = check_record(meta, base, bad)
    try:
        grid = resolve_grid(grid_config(cfg, record), tuple((n, tuple(values[n])) for n in names))
    except (ConfigError, TypeError, ValueError) as err:
        raise bad(f"results.json's grid axes are not a valid grid ({err})") from None
    check_hash(meta, grid.base.config, grid.hash(), bad)
    if "shape" in record and record["shape"] != list(grid.shape):
        raise bad(f"results.json's grid shape {record['shape']!r:.80} is not its axes' {list(grid.shape)}")
    wall = meta.get("wall_time_s", 0.0)
    if isinstance(wall, bool) or not isinstance(wall, int | float):
        raise bad(f"results.json's wall_time_s {wall!r:.40} is not a number")
    if "grid_axes" not in arrays or np.asarray(arrays["grid_axes"]).tolist() != names:
        got = np.asarray(arrays.get("grid_axes")).tolist()
        raise bad(f"curves.npz's grid_axes {got!r:.80} are not results.json's axes {names}")
    for name, axis in grid.axes:
        got = np.asarray(arrays.get(name)).tolist()
        if got != list(axis):
            raise bad(f"curves.npz's {name} values {got!r:.80} are not results.json's {list(axis)!r:.80}")
    n_h, trials = len(cfg.sweep.heads), cfg.sweep.trials
    lead = (n_h, *grid.shape)
    coordinates = {"heads", "steps", "grid_axes", *names}
    for name, value in arrays.items():
        if name in coordinates or name in STEPLESS:
            continue
        got = np.shape(value)
        if got[: len(lead)] != lead or (name == "diverged_at" and got != (*lead, trials)):
            want = (*lead, trials) if name == "diverged_at" else f"({', '.join(map(str, lead))}, …)"
            file = "params.npz" if is_snapshot(name) else "curves.npz"
            raise bad(f"{file}'s {name!r} has shape {got}, expected {want} (one per H and grid point)")
    diagnostics, G = meta.get("diagnostics"), len(grid.points)
    if diagnostics is not None and not (isinstance(diagnostics, list) and len(diagnostics) == G):
        raise bad(f"results.json's diagnostics are not one summary per grid point ({G})")
    own = {k: meta[k] for k in ("heads", "steps", "complete", "directions") if k in meta}
    axes = {"grid_axes", *names}
    for k, point in enumerate(grid.points):
        at = np.unravel_index(k, grid.shape)
        label = ", ".join(f"{n}={axis[i]}" for (n, axis), i in zip(grid.axes, at, strict=True))
        whole = {"heads", "steps", *STEPLESS}  # one for the whole grid
        sliced = {m: v if m in whole else v[(slice(None), *at)] for m, v in arrays.items() if m not in axes}
        check_sweep_arrays(own, sliced, point, refuser(where, f"grid point {label}: "))
    return grid
