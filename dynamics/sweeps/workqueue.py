"""A grid spread over several processes: a shared work queue of compiled calls in its output folder.

Every process runs the same grid into the same folder (``run_grid_shared``). Each plans the grid
exactly as one process would (``grid.variant_groups``, ``execute.run_points``: the same packs,
programs and batches) and, before each compiled call, claims it in ``<out>/queue/`` by creating
its claim file with ``os.open(O_CREAT | O_EXCL)``: one process wins, the others go on to the next
unclaimed call. So a slow process holds back nobody: the others take the calls it has not
reached. A call's runs are written to ``queue/g<group>-c<call>.npz`` (atomically, with the grid's
hash); a call is *done* only when that file exists, so a process that dies mid-call leaves a claim
and no file, and its call is run again by a later process:

- a claim made on this host by a process that no longer exists (its pid, in the claim file) is
  stale: the next process that reaches the call takes it over (a new claim, ``.claim<g+1>``, again
  created exclusively, so two such processes never both take it);
- ``reclaim=True`` (``--reclaim``) takes over every claim made before this process started, on any
  host: for rerunning after a crash on another machine, once no process of the earlier launch runs.

The process that writes the last call's file merges (it claims ``merge`` the same way): it reads
every call in the order one process runs them into the grid's arrays (``grid.store_call``) and
writes the grid's files (``grid.write_grid``), the same arrays bit for bit as one process running
the whole grid with the same devices per process, then removes ``queue/``. The other processes
return None. Rerunning the command on the folder finishes what is missing (done calls are never
run again); a folder holding this grid's complete results returns them; another grid's queue or
results are refused in one line. The theory diagnostics (``sweep.diagnostics``) are computed per
grid point in one process and are refused here.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np

from dynamics.config.grid_axes import GridExperiment
from dynamics.errors import ConfigError
from dynamics.infra.files import atomic_write_bytes
from dynamics.sweeps import checkpoint
from dynamics.sweeps.devices import device_name
from dynamics.sweeps.execute import precision
from dynamics.sweeps.folders import DAMAGED, QUEUE
from dynamics.sweeps.grid_runner import (
    GridResult,
    grid_result,
    group_calls,
    load_points,
    new_curves,
    run_grid_experiment,
    store_call,
    variant_groups,
    write_grid,
)
from dynamics.sweeps.memory import check_memory
from dynamics.sweeps.result_files import complete_results_hash

HOST = socket.gethostname()


class WorkQueue:
    """The claims and finished calls of one grid in ``root`` (``<out>/queue``)."""

    def __init__(self, root: Path, config_hash: str, reclaim: bool = False, devices: str = ""):
        """``devices``: the processes' devices (``device_name``), which the plan of calls depends on:
        every process of one queue must have the same."""
        self.root, self.config_hash, self.reclaim = Path(root), config_hash, reclaim
        self.started = time.time()
        self.root.mkdir(parents=True, exist_ok=True)
        mine = {"config_hash": config_hash, "devices": devices}
        if _create(self.root / "grid.json", json.dumps(mine).encode()):
            return
        theirs: dict[str, Any] = {}
        for _ in range(50):  # an empty file is being written by the process that created it
            try:
                theirs = json.loads((self.root / "grid.json").read_text())
                break
            except (OSError, ValueError):
                time.sleep(0.1)
        if not isinstance(theirs, dict) or "config_hash" not in theirs:
            raise ConfigError(
                f"{self.root / 'grid.json'} is damaged (not the queue's record of its grid): remove that "
                "file and rerun; the calls written stay, each checked against this grid"
            )
        if theirs.get("config_hash") != config_hash:
            raise ConfigError(
                f"{self.root} is the work queue of another grid (config_hash {theirs.get('config_hash')} "
                f"there, {config_hash} here): give another --out"
            )
        if theirs.get("devices") != devices:
            raise ConfigError(
                f"{self.root}'s processes run on {theirs.get('devices')}, this one on {devices}: the calls "
                "are planned for the devices, so give every process the same (--cpu-devices N, one GPU each)"
            )

    def done(self, unit: str) -> bool:
        return self.file(unit).exists()

    def file(self, unit: str) -> Path:
        return self.root / f"{unit}.npz"

    def claim(self, unit: str) -> bool:
        """True when this process now holds ``unit`` (not done, and no live claim of another)."""
        if self.done(unit):
            return False
        g = 0
        while (self.root / f"{unit}.claim{g}").exists():
            g += 1
        if g and not self._stale(self.root / f"{unit}.claim{g - 1}"):
            return False
        me = json.dumps({"host": HOST, "pid": os.getpid(), "time": time.time()}).encode()
        return _create(self.root / f"{unit}.claim{g}", me) and not self.done(unit)

    def _stale(self, path: Path) -> bool:
        """A claim whose process is gone (this host, pid not running), or, with ``reclaim``, any
        claim made before this process started."""
        try:
            info = json.loads(path.read_text())
        except (OSError, ValueError):  # being written (a claim is a few bytes): a live claim
            info = {}
        if not isinstance(info, dict):
            info = {}
        if self.reclaim and info.get("time", _mtime(path, self.started)) < self.started:  # damaged: its age
            return True
        return info.get("host") == HOST and isinstance(info.get("pid"), int) and not _alive(info["pid"])

    def write(self, unit: str, items, metrics: dict[str, np.ndarray], diverged_at) -> None:
        checkpoint.write_point(self.file(unit), self.config_hash, metrics, diverged_at, items=np.array(items))

    def read(self, unit: str) -> tuple[list[tuple[int, int]], dict[str, np.ndarray], np.ndarray]:
        """A done call's runs; a damaged file is refused in one line (removing it lets a rerun run
        that call again: a call is done only while its file exists)."""
        try:
            with np.load(self.file(unit), allow_pickle=False) as z:
                if str(z["config_hash"]) != self.config_hash:
                    raise ConfigError(f"{self.file(unit)} is another grid's call: remove {self.root}")
                metrics = {f[len("curve_") :]: z[f] for f in z.files if f.startswith("curve_")}
                items = [(int(i), int(v)) for i, v in z["items"]]
                return items, metrics, z["diverged_at"]
        except DAMAGED as err:
            if isinstance(err, ConfigError):
                raise
            raise ConfigError(
                f"{self.file(unit)} is damaged ({type(err).__name__}): remove it and rerun the same "
                "command, which runs that call again"
            ) from None

    def set_calls(self, group: int, n: int) -> None:
        if self.root.is_dir():  # gone: the merger removed the finished queue (not made again)
            atomic_write_bytes(self.root / f"g{group}.calls", str(n).encode())

    def calls(self, group: int) -> int | None:
        try:
            return int((self.root / f"g{group}.calls").read_text())
        except (OSError, ValueError):
            return None


def _create(path: Path, payload: bytes) -> bool:
    """Create ``path`` holding ``payload`` if it does not exist (atomic: O_CREAT | O_EXCL)."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except (FileExistsError, FileNotFoundError):  # not found: the merger removed the finished queue
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(payload)
    return True


def _mtime(path: Path, default: float) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return default


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def run_grid_shared(
    grid: GridExperiment,
    out: Path,
    *,
    reclaim: bool = False,
    progress: bool = True,
    devices=None,
    finish=None,
) -> GridResult | None:
    """Run ``grid`` into ``out`` together with every other process doing the same (the module's
    docstring); the GridResult in the process that merged (or found the complete results), else
    None. The merger runs ``finish(result)`` (the command line's figure) before writing the grid's
    files and records how many calls it ran itself in ``result.extra["calls_run"]``."""
    out = Path(out)
    cfg = grid.base.config
    if cfg.sweep.diagnostics:
        raise ConfigError(
            f"sweep.diagnostics={list(cfg.sweep.diagnostics)} is computed per grid point in one process: "
            "run this grid without a work queue, or without diagnostics"
        )
    held = complete_results_hash(out)
    if held == grid.hash():
        return run_grid_experiment(grid, progress=False, skip=load_points(out, grid), devices=devices)
    if held is not None or (out / "results.json").exists():
        raise ConfigError(f"{out} holds another run's results: give another --out")
    check_memory(grid.points, len(grid.base.steps))
    queue = WorkQueue(out / QUEUE, grid.hash(), reclaim, device_name(devices))
    start = time.perf_counter()
    with precision(cfg):
        ran = _run_calls(grid, queue, progress, devices)
        if not _all_done(queue, len(variant_groups(grid))) or not queue.claim("merge"):
            return None
        result = _merge(grid, queue, time.perf_counter() - start)
    result.extra.update(complete=True, device=device_name(devices), calls_run=ran)
    checkpoint.finish_then_write(result, finish, lambda: write_grid(result, out))
    shutil.rmtree(queue.root, ignore_errors=True)
    return result


def _run_calls(grid: GridExperiment, queue: WorkQueue, progress: bool, devices) -> int:
    """Every call of every variant group that this process claims, each written when it ends; the
    number run."""
    ran = 0
    for g, todo in enumerate(variant_groups(grid)):
        n_calls = queue.calls(g)
        if n_calls is not None and all(queue.done(f"g{g}-c{j}") for j in range(n_calls)):
            continue  # the group is done: no data to draw
        unit: dict[str, Any] = {}
        planned = [0]

        def claim(j: int, g=g, unit=unit, planned=planned) -> bool:
            planned[0] = max(planned[0], j + 1)
            unit["name"] = f"g{g}-c{j}"
            return queue.claim(unit["name"])

        _, calls = group_calls(grid, todo, progress, {"devices": devices}, claim)
        for items, metrics, div_at in calls:
            queue.write(unit["name"], items, metrics, div_at)
            ran += 1
        queue.set_calls(g, planned[0])
    return ran


def _all_done(queue: WorkQueue, n_groups: int) -> bool:
    for g in range(n_groups):
        n = queue.calls(g)
        if n is None or not all(queue.done(f"g{g}-c{j}") for j in range(n)):
            return False
    return True


def _merge(grid: GridExperiment, queue: WorkQueue, wall_time_s: float) -> GridResult:
    """The grid's result from every call's file, stored in the order one process runs them."""
    acc = new_curves(grid)
    for g, todo in enumerate(variant_groups(grid)):
        for j in range(queue.calls(g) or 0):
            store_call(acc, todo, *queue.read(f"g{g}-c{j}"))
    return grid_result(grid, acc, wall_time_s)
