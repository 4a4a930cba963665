"""Checkpoints inside a long compiled run: the loop's state kept mid-run, a resumed run goes on from
the last one.

A point whose simulation is estimated to take more than two call lengths (``call_seconds``, by
default 2 s) runs its loop over the logged steps as successive calls of one compiled program
(``dynamics.core.resumable``), each about ``call_seconds`` long (measured from the calls before),
the numbers bit for bit those of one call (``dynamics.sweeps.longrun``). After each call the
progress bar moves by the steps done and, every ``every_s`` seconds (``MidRun``), the loop's state
is written atomically, under the interrupt shield, to ``DIR/points/running-H<h1>-<h2>….npz`` with
the config's hash: Ctrl-C, SIGTERM or a crash loses at most that interval. A resumed sweep loads it
and goes on from there; the file is removed once its point is saved. A short point, or one neither
watched (no bar) nor checkpointed, is one call as before, and so is a sweep over several processes
(``--distributed``: each would time its own calls). This module (the files) imports no JAX: the
interrupt's line reads what they hold (``kept``).
"""

from __future__ import annotations

import io
import warnings
import zipfile
from pathlib import Path

import numpy as np

from dynamics.errors import ConfigError
from dynamics.infra import interrupts
from dynamics.infra.files import atomic_write_bytes
from dynamics.infra.timings import phase

CALL_SECONDS = 2.0  # the default length of one call of a long run (progress, checkpoints)
EVERY_SECONDS = 10.0  # the default interval between mid-run checkpoints
PREFIX = "running-"
# What reading a damaged state file raises (a truncated zip: BadZipFile, which is no OSError)
DAMAGED = (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile)


def check_seconds(name: str, value) -> float:
    """A number of seconds > 0 (a one-line ConfigError otherwise)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not 0 < value < float("inf"):
        raise ConfigError(f"{name}={value!r} must be a number of seconds > 0")
    return float(value)


def midrun_file(out: Path, heads, tag: str = "") -> Path:
    return Path(out) / "points" / (PREFIX + tag + "H" + "-".join(str(int(h)) for h in heads) + ".npz")


class MidRun:
    """Where the points of one config (``config_hash``) in ``out`` keep their loop's state mid-run,
    every ``every_s`` seconds; ``resume``: a state found there is continued. ``tag`` starts the
    files' names after the prefix (a grid's group of points: ``within``). ``grid``: a grid's store,
    whose points' final states are kept too, until ``clear_all`` (a grid saves a grid point only once
    all its H have run, maybe over several points: the finished ones are not run again), and whose
    points are told apart by what they compute (``execute.point_store``: several run the same H)."""

    def __init__(
        self, out: Path, config_hash: str, resume: bool, every_s: float = EVERY_SECONDS, writer: bool = True,
        tag: str = "", grid: bool = False,
    ):  # fmt: skip
        self.out, self.config_hash, self.resume, self.writer = Path(out), config_hash, resume, writer
        self.every_s = check_seconds("checkpoint_every", every_s)
        self.tag, self.grid = tag, grid

    def within(self, tag: str, what: str) -> MidRun:
        """The same store for a part of the run: its files named with ``tag``, its states continued
        only by the same part (``what`` joins the hash: a grid's group, a point's digest)."""
        every, hashed = self.every_s, f"{self.config_hash}:{what}"
        return MidRun(self.out, hashed, self.resume, every, self.writer, self.tag + tag, self.grid)

    def save(self, heads, leaves, done: int, steps_done: int, steps: int) -> None:
        """The state's leaves (numpy) after ``done`` iterations of the loop (``steps_done`` of
        ``steps`` updates); written by the writing process only (every process runs the calls)."""
        if not self.writer:
            return
        buf = io.BytesIO()
        where = dict(done=np.array(done), steps_done=np.array(steps_done), steps=np.array(steps))
        arrays = {f"leaf_{i}": v for i, v in enumerate(leaves)}
        np.savez(buf, config_hash=np.array(self.config_hash), heads=np.asarray(heads), **where, **arrays)
        with phase("writing"), interrupts.shielded():
            atomic_write_bytes(midrun_file(self.out, heads, self.tag), buf.getvalue())

    def load(self, heads, leaves):
        """(iterations done, the state's leaves) saved for ``heads`` of this config, shaped as
        ``leaves`` (the first state's), else None; a damaged file is warned about and ignored."""
        path = midrun_file(self.out, heads, self.tag)
        if not self.resume or not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as z:
                if str(z["config_hash"]) != self.config_hash:
                    return None
                saved = [z[f"leaf_{i}"] for i in range(len(leaves))]
                done = int(z["done"])
        except DAMAGED as err:
            warnings.warn(f"{path} is damaged ({type(err).__name__}): starting that point anew", stacklevel=2)
            return None
        if any(s.shape != tuple(v.shape) or s.dtype != v.dtype for s, v in zip(saved, leaves, strict=True)):
            warnings.warn(f"{path} holds another layout: starting that point anew", stacklevel=2)
            return None
        return done, saved

    def clear(self, heads) -> None:
        """The point's state, once the point is saved (a grid's kept: ``clear_all``)."""
        if not self.grid:
            midrun_file(self.out, heads, self.tag).unlink(missing_ok=True)

    def clear_all(self) -> None:
        """Every state of this store's ``tag``: its points are saved."""
        if self.writer:
            for path in (self.out / "points").glob(f"{PREFIX}{self.tag}*.npz"):
                path.unlink(missing_ok=True)


def kept(out: Path) -> str | None:
    """What the mid-run files in ``out`` hold, for the interrupt's line ("14200/30000 steps of
    H=1..32"), or None when there are none."""
    said = []
    for path in sorted((Path(out) / "points").glob(PREFIX + "*.npz")):
        try:
            with np.load(path, allow_pickle=False) as z:
                heads, done, steps = [int(h) for h in z["heads"]], int(z["steps_done"]), int(z["steps"])
        except DAMAGED:
            continue
        names = f"{heads[0]}..{heads[-1]}" if len(heads) > 3 else ",".join(map(str, heads))
        tag = path.name[len(PREFIX) :].split("-")[0]  # a grid's: "G<k>", its group's first point
        group = f" in the group of grid point {tag[1:]}" if tag.startswith("G") else ""
        said.append(f"{done}/{steps} steps of H={names}{group}")
    return "; ".join(said) or None
