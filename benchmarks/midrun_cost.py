"""What progress and mid-run checkpoints cost: a preset's pack as one compiled call against the
same pack in calls with the bar and checkpoints, alternating pairs of whole processes.

    python -m benchmarks.midrun_cost --steps 20000             # fig2 and planted-gd, 5 pairs
    python -m benchmarks.midrun_cost --pairs 1 --call-seconds 0.5   # a quick check

Each setting is a ``python -m dynamics.run --preset P --steps S --no-figure --timings`` process
with its progress bar on (stderr captured), both sharing one compilation cache filled first by an
untimed run of each: ``one call`` with ``--call-seconds 1e9`` (never split), ``in calls`` with
the defaults (calls of about 2 s, a checkpoint every 10 s; ``--call-seconds`` sets another length
for it). ``--pairs`` pairs alternate which goes first. Reported per run: the process CPU time
(user + system), its ``simulation`` phase, how often the bar moved and the load; then the
medians, the spread (min–max) and in-calls / one-call. The simulated numbers are the same
(checked: curves.npz compared bit for bit in every pair).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import child_env

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {
    "one call": ["--call-seconds", "1e9"],
    "in calls": [],
}


def run(args: list[str], cache: str, out: Path) -> dict:
    """One process: its CPU time, the simulation phase of its --timings table, the load before it."""
    env = child_env(ROOT, MHSIM_CACHE_DIR=cache)
    cmd = [sys.executable, "-m", "dynamics.run", *args, "--out", str(out), "--no-figure", "--timings"]
    load = os.getloadavg()[0]
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=out.parent, env=env, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    sim = re.search(r"^simulation\s+([0-9.]+)", proc.stdout, re.M)
    moves = len(set(re.findall(r"(\d+)/\d+ \[", proc.stderr)))
    cpu = after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime
    return {"cpu": cpu, "sim": float(sim.group(1)), "load": load, "moves": moves}


def same_curves(a: Path, b: Path) -> bool:
    with np.load(a / "curves.npz") as x, np.load(b / "curves.npz") as y:
        same = (np.array_equal(x[k], y[k], equal_nan=True) for k in x.files)
        return set(x.files) == set(y.files) and all(same)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.midrun_cost", description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", nargs="+", default=["fig2", "planted-gd"])
    p.add_argument("--steps", type=int, default=None, help="steps per run (default: the preset's)")
    p.add_argument("--pairs", type=int, default=5, help="alternating pairs per preset (default 5)")
    p.add_argument("--call-seconds", help="the in-calls setting's --call-seconds (default: mhsim's)")
    args = p.parse_args(argv)
    if args.call_seconds:
        SETTINGS["in calls"] = ["--call-seconds", args.call_seconds]
    print(f"{os.cpu_count()} CPUs; {' vs '.join(f'{k}: {v}' for k, v in SETTINGS.items())}")
    with tempfile.TemporaryDirectory(prefix="mhsim-midrun-") as tmp:
        for preset in args.presets:
            base = ["--preset", preset, *(["--steps", str(args.steps)] if args.steps else [])]
            cache = str(Path(tmp) / f"cache-{preset}")
            for j, flags in enumerate(SETTINGS.values()):  # fill the cache: the timed runs compile nothing
                # a folder each: the same config into a finished folder reuses its work, simulating nothing
                run([*base, *flags], cache, Path(tmp) / f"warm-{preset}-{j}")
            got: dict[str, list[dict]] = {k: [] for k in SETTINGS}
            for i in range(args.pairs):
                order = list(SETTINGS) if i % 2 == 0 else list(SETTINGS)[::-1]
                outs = {}
                for name in order:
                    outs[name] = Path(tmp) / f"{preset}-{i}-{name.replace(' ', '-')}"
                    r = run([*base, *SETTINGS[name]], cache, outs[name])
                    got[name].append(r)
                    print(
                        f"{preset:>10} {i:>2} {name:>8}: cpu {r['cpu']:6.2f} s  simulation "
                        f"{r['sim']:5.2f} s  bar moves {r['moves']:>3}  load {r['load']:4.1f}",
                        flush=True,
                    )
                assert same_curves(*outs.values()), "the two settings gave other numbers"
                time.sleep(0.5)
            med = {k: {m: statistics.median(r[m] for r in v) for m in ("cpu", "sim")} for k, v in got.items()}
            for k, v in got.items():
                cpus = [r["cpu"] for r in v]
                print(f"{preset:>10} {k:>8}: median cpu {med[k]['cpu']:.2f} s (min {min(cpus):.2f}, max "
                      f"{max(cpus):.2f}), median simulation {med[k]['sim']:.2f} s")  # fmt: skip
            one, calls = med["one call"], med["in calls"]
            print(
                f"{preset:>10} in calls / one call: cpu {calls['cpu'] / one['cpu']:.3f}, simulation "
                f"{calls['sim'] / one['sim']:.3f}; Δcpu / one call's simulation "
                f"{(calls['cpu'] - one['cpu']) / one['sim']:+.3f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
