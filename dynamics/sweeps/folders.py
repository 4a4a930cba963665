"""Run folders: a new one per run, and what a run may do with a folder that holds results.

``new_run_folder`` makes ``runs/<name>-<YYYYMMDD-HHMMSS>`` (``-2``, ``-3``, … when that exists),
created with one ``mkdir``, so two runs started in the same second never share one. ``Claim``
decides, from what a folder holds, what a run of one config (its ``config_hash`` and its
settings) may do there:

- ``"new"``: missing, or empty (a lock file, stale temporary files and an empty ``points/`` count
  as nothing);
- ``"done"``: complete results of this config: nothing to run;
- ``"resume"``: this config's unfinished results or points: the finished part is reused;
- ``"replace"`` (only with ``overwrite``): results of another config; the new run keeps the old
  files until its own are written (``Claim.written`` then removes what it did not write again);
- refused (a one-line ``ConfigError``): another config's results without ``overwrite``, naming
  the settings that differ; a folder that is not empty and holds no mhsim results (with or
  without ``overwrite``: its files are not ours to remove).

No JAX here: the command lines decide before anything heavy is imported, and again under the
folder's lock (``run_checkpointed(claim=…)``).
"""

from __future__ import annotations

import dataclasses
import json
import zipfile
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from dynamics.config.overrides import config_from_dict
from dynamics.config.validation import validate
from dynamics.errors import ConfigError
from dynamics.infra import interrupts

LOCK = ".mhsim.lock"  # held by the run writing into a folder (``checkpoint.locked``)
POINTS = "points"  # a run's finished points (``checkpoint``, ``grid``)
QUEUE = "queue"  # a grid's work queue shared by several processes (``workqueue``)
# The files of a run that --overwrite removes once the new run's are written (when it did not write
# them again): results, arrays, the grid's table, the command lines' figures, checkpoints. Any other
# file stays (a user's data file or notes kept in the folder).
ARRAYS = ("curves", "params", "directions", "expressivity", "heads")  # sweeps', grids', bottleneck's
FIGURES = ("figure", "max-margin", "diagnostics", "heads-H")  # stems; figure-lines, heads-H4-trial0, …
RESULT_PATTERNS = (
    "results.json",
    "summary.csv",
    *(f"{name}.npz" for name in ARRAYS),
    *(f"{stem}*.{ext}" for stem in FIGURES for ext in ("png", "pdf")),
    f"{POINTS}/*.npz",
)
SHOWN = 4  # differing settings named in a refusal
# What reading a damaged .npz can raise (numpy and zipfile): such a point is recomputed.
DAMAGED = (OSError, ValueError, KeyError, EOFError, IndexError, zipfile.BadZipFile, RuntimeError)


def new_run_folder(name: str, root: Path = Path("runs"), now: datetime | None = None) -> Path:
    """A new folder ``root/<name>-<YYYYMMDD-HHMMSS>`` (local time), or with ``-2``, ``-3``, … when
    that exists: made here with one ``mkdir`` each, so no other run gets the same one."""
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
    try:
        Path(root).mkdir(parents=True, exist_ok=True)
        for count in range(1, 10_000):
            path = Path(root) / (f"{name}-{stamp}" if count == 1 else f"{name}-{stamp}-{count}")
            try:
                path.mkdir()
            except FileExistsError:
                continue
            return path
    except OSError as err:
        raise ConfigError(f"cannot make a run folder in {str(root)!r}: {err.strerror or err}") from None
    raise ConfigError(f"{root}/{name}-{stamp}-* all exist: give --out")


def discard_if_empty(out: Path) -> None:
    """Remove the folder ``out`` (one this run made) when it holds nothing but a lock file and an
    empty ``points/``: a run that failed before writing leaves no empty folder behind."""
    out = Path(out)
    try:
        names = {p.name for p in out.iterdir()}
        if names - {LOCK, POINTS} or ((out / POINTS).is_dir() and any((out / POINTS).iterdir())):
            return
        (out / LOCK).unlink(missing_ok=True)
        if (out / POINTS).is_dir():
            (out / POINTS).rmdir()
        out.rmdir()
    except OSError:  # another process wrote there meanwhile: keep it
        pass


@dataclasses.dataclass
class Holding:
    """What a folder holds: its results.json (a dict with a config, else None), the hashes of its
    point files, and the names of files that are not an mhsim run's (when it holds no results)."""

    meta: dict[str, Any] | None
    point_hashes: set[str]
    others: list[str]

    @property
    def empty(self) -> bool:
        return self.meta is None and not self.point_hashes and not self.others


def holding(out: Path) -> Holding:
    """Read what ``out`` holds (a missing folder holds nothing)."""
    out = Path(out)
    if not out.is_dir():
        return Holding(None, set(), [])
    meta = None
    try:
        doc = json.loads((out / "results.json").read_text())
        meta = doc if isinstance(doc, dict) and isinstance(doc.get("config"), dict) else None
    except (OSError, ValueError):  # missing or not JSON: not results
        pass
    hashes = set()
    for path in sorted((out / POINTS).glob("*.npz")) if (out / POINTS).is_dir() else []:
        try:
            with np.load(path, allow_pickle=False) as z:
                # a part's mid-run state is keyed "<hash>:<part>" (midrun.MidRun.within): the run's is <hash>
                hashes.add(str(z["config_hash"]).split(":")[0])
        except DAMAGED:  # whose it was is unknown: another config's
            hashes.add("")
    others = []
    if meta is None and not hashes:
        ignored = {LOCK, POINTS, QUEUE}
        others = sorted(p.name for p in out.iterdir() if p.name not in ignored and not _temporary(p.name))
        if (out / POINTS).is_dir():
            others += [
                f"{POINTS}/{p.name}" for p in sorted((out / POINTS).iterdir()) if not _temporary(p.name)
            ]
    return Holding(meta, hashes, others)


def _temporary(name: str) -> bool:
    return name.startswith(".") and name.endswith(".tmp")  # an atomic write a killed run left


class Claim:
    """What a run of one config may do with its folder (the module's docstring).

    ``config_hash``: the run's; ``settings``: its settings by name (``settings_of``);
    ``read_settings(meta)``: a folder's results.json as such settings (None: not readable as such);
    ``kind(meta)``: what kind of run a results.json is ("sweep", "grid", …), this run's ``what``."""

    def __init__(
        self,
        config_hash: str,
        settings: dict[str, Any],
        read_settings: Callable[[dict[str, Any]], dict[str, Any] | None],
        what: str,
        kind: Callable[[dict[str, Any]], str],
        overwrite: bool = False,
    ):
        self.config_hash, self.settings, self.read_settings = config_hash, settings, read_settings
        self.what, self.kind, self.overwrite = what, kind, overwrite
        self.before: dict[str, tuple[int, int]] | None = None

    def decide(self, out: Path) -> str:
        """ "new", "done", "resume" or "replace" for ``out``, or a one-line ConfigError."""
        try:
            held = holding(out)
        except OSError as err:  # a name too long, a permission denied on the way
            raise ConfigError(f"--out {str(out)!r} cannot be read: {err.strerror or err}") from None
        if held.empty:
            return "new"
        if held.others:
            shown = ", ".join(held.others[:SHOWN]) + (", …" if len(held.others) > SHOWN else "")
            raise ConfigError(
                f"--out {str(out)!r} is not empty and holds no mhsim results ({shown}): "
                f"give a new or empty folder (mhsim removes nothing it did not write)"
            )
        meta = held.meta
        if meta is not None and meta.get("config_hash") == self.config_hash:
            return "resume" if meta.get("complete", True) is False else "done"
        if meta is None and self.config_hash in held.point_hashes:
            return "resume"  # an interrupted run that wrote points but no results.json (a grid)
        if self.overwrite:
            return "replace"
        raise ConfigError(
            f"{out} holds {self._other(meta, held)}; use --overwrite to replace it or another --out"
        )

    def _other(self, meta: dict[str, Any] | None, held: Holding) -> str:
        """'another config (optim.lr 0.1 there, 1 here; …)': what the folder's run differs in."""
        here = f"{self.config_hash} here"
        if meta is None and held.point_hashes == {""}:
            return f"only damaged files in {POINTS}/, whose config cannot be read ({here})"
        if meta is None:
            there = ", ".join(sorted(h or "unreadable" for h in held.point_hashes))
            return f"the unfinished points of another config (config_hash {there} there, {here})"
        kind = self.kind(meta)
        if kind != self.what:
            return f"a {kind}'s results, not a {self.what}'s"
        theirs = self.read_settings(meta)
        if theirs is None:
            return f"another config's results (config_hash {meta.get('config_hash')} there, {here})"
        diff = differences(theirs, self.settings)
        if not diff:
            return (
                f"results of the same settings from other numerics or other file contents "
                f"(config_hash {meta.get('config_hash')} there, {here})"
            )
        more = f"; {len(diff) - SHOWN} more" if len(diff) > SHOWN else ""
        return f"another config ({'; '.join(diff[:SHOWN])}{more})"

    def enter(self, out: Path) -> str:
        """``decide``, under the folder's lock; on "replace", note the files the new run must
        replace (``written`` removes those it did not write again)."""
        action = self.decide(out)
        if action == "replace":
            self.before = _result_files(Path(out))
        return action

    def written(self, out: Path) -> None:
        """After the new run's files are written: remove the earlier run's result files that it did
        not write again (a file written again is a new file: another inode or time)."""
        if self.before is None:
            return
        with interrupts.shielded():  # Ctrl-C waits: the replaced run's files go all together
            now = _result_files(Path(out))
            for name, stamp in self.before.items():
                if now.get(name) == stamp:
                    (Path(out) / name).unlink(missing_ok=True)
            points = Path(out) / POINTS
            if points.is_dir() and not any(points.iterdir()):
                points.rmdir()
        self.before = None


def _result_files(out: Path) -> dict[str, tuple[int, int]]:
    """The run's files in ``out`` (``RESULT_PATTERNS``) by name: (inode, modification time)."""
    found = {}
    for pattern in RESULT_PATTERNS:
        for path in out.glob(pattern):
            if path.is_file():
                st = path.stat()
                found[path.relative_to(out).as_posix()] = (st.st_ino, st.st_mtime_ns)
    return found


def differences(there: dict[str, Any], here: dict[str, Any]) -> list[str]:
    """'optim.lr 0.1 there, 1 here' for each setting that differs (a missing one: 'none')."""
    rows = []
    for key in sorted(set(there) | set(here), key=_order):
        a, b = _plain(there.get(key)), _plain(here.get(key))  # a list read from JSON is a tuple here
        if a != b:
            rows.append(f"{key} {_shown(a)} there, {_shown(b)} here")
    return rows


def _order(key: str) -> tuple[int, str]:
    sections = ("name", "data", "model", "optim", "sweep", "grid")
    head = key.split(".", 1)[0]
    return (sections.index(head) if head in sections else len(sections), key)


def _shown(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, list | tuple):
        return ",".join(_shown(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def settings_of(cfg) -> dict[str, Any]:
    """A sweep config's settings by name: ``name``, then ``section.field`` for every field of
    every section, the data model's own parameters as ``data.<name>`` (lists as tuples)."""
    flat: dict[str, Any] = {"name": cfg.name}
    for section in ("data", "model", "optim", "sweep"):
        values = dataclasses.asdict(getattr(cfg, section))
        values.update(dict(values.pop("params", None) or {}))
        flat.update({f"{section}.{k}": _plain(v) for k, v in values.items()})
    return flat


def _plain(value: Any) -> Any:
    return tuple(_plain(v) for v in value) if isinstance(value, list | tuple) else value


def flat_dict(doc: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested dict as ``a.b`` keys (lists as tuples): a results.json config read as it is."""
    flat = {}
    for key, value in doc.items():
        if isinstance(value, dict):
            flat.update(flat_dict(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = _plain(value)
    return flat


def sweep_settings(meta: dict[str, Any]) -> dict[str, Any] | None:
    """A sweep's or a grid's results.json as settings (``settings_of`` its config, ``grid.<knob>``
    each grid axis); None for a config this mhsim cannot read (the hashes are then compared)."""
    try:
        flat = settings_of(validate(config_from_dict(meta["config"])))  # resolved, as the run's own
    except (ConfigError, TypeError, ValueError, KeyError, AttributeError):
        return None
    grid = meta.get("grid")
    if isinstance(grid, dict) and isinstance(grid.get("values"), dict):
        flat.update({f"grid.{k}": _plain(v) for k, v in grid["values"].items()})
    return flat


def run_kind(meta: dict[str, Any]) -> str:
    """What a results.json holds: "sweep", "grid", or the experiment it names (the bottleneck's)."""
    if "grid" in meta:
        return "grid"
    return str(meta.get("experiment", "sweep"))


def sweep_claim(exp, overwrite: bool = False) -> Claim:
    """The claim of a sweep's ``Experiment`` or a grid's ``GridExperiment`` on its folder."""
    axes = getattr(exp, "axes", None)
    cfg = exp.base.config if axes is not None else exp.config
    settings = settings_of(cfg)
    settings.update({f"grid.{name}": _plain(values) for name, values in axes or ()})
    config_hash = exp.hash() if axes is not None else cfg.hash()
    what = "grid" if axes is not None else "sweep"
    return Claim(config_hash, settings, sweep_settings, what, run_kind, overwrite)


def experiment_claim(config_hash: str, config: dict[str, Any], what: str, overwrite: bool = False) -> Claim:
    """The claim of an experiment with its own config dict and results.json (the bottleneck
    presets': ``experiment`` names it) on its folder."""
    return Claim(
        config_hash, flat_dict(config), lambda meta: flat_dict(meta["config"]), what, run_kind, overwrite
    )
