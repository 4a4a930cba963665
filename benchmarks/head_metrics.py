"""What the per-head metrics cost: the same sweep with ``--head-metrics on`` and ``off``, alternately.

    python -m benchmarks.head_metrics --pairs 3

For each command below, one untimed run per setting fills a shared compilation cache, then
``--pairs`` pairs of whole processes (``python -m dynamics.run … --timings``) alternate which
setting goes first. Reported: the medians of each setting's ``simulation`` phase (the compiled
calls after their compile) and whole-process wall time, and on/off ratios. Also checked: the
metrics both settings log (losses, errors, norms, …) are bit-identical in ``curves.npz``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.cold_start import ROOT, run

COMMANDS = {
    "default": [],  # the no-argument run: DM1, θ(0) = 0 (the fast path: one stored head per run)
    "random-init": ["--init", "normal", "--heads", "1,2,4,8,16"],  # every head simulated
    "learned-query": ["--init", "normal", "--query", "learned", "--heads", "1,2,4,8,16"],
}
SETTINGS = ("on", "off")


def same_metrics(folders: dict[str, Path]) -> bool:
    """Whether every curve the "off" run logged is bit-identical in the "on" run."""
    with np.load(folders["on"] / "curves.npz") as on, np.load(folders["off"] / "curves.npz") as off:
        return all(np.array_equal(on[k], off[k], equal_nan=True) for k in off.files)


def measure(name: str, args: list[str], pairs: int, tmp: Path) -> dict[str, list[dict]]:
    cache = str(tmp / f"cache-{name}")
    folders = {s: tmp / f"{name}-{s}" for s in SETTINGS}
    for s in SETTINGS:  # untimed: compile into the shared cache
        run("dynamics.run", [*args, "--head-metrics", s], ROOT, cache, folders[s], timings=True)
    if not same_metrics(folders):
        raise SystemExit(f"{name}: the metrics logged with --head-metrics off differ with it on")
    runs: dict[str, list[dict]] = {s: [] for s in SETTINGS}
    for i in range(pairs):
        for s in SETTINGS if i % 2 == 0 else SETTINGS[::-1]:
            r = run("dynamics.run", [*args, "--head-metrics", s], ROOT, cache, folders[s], timings=True)
            runs[s].append(r)
            print(f"{name:<14} {i:>4} {s:>4} {r['phases'].get('simulation', float('nan')):>12.2f} "
                  f"{r['wall']:>7.2f} {r['load']:>5.2f}", flush=True)  # fmt: skip
    return runs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.head_metrics", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--pairs", type=int, default=3, help="alternating on/off pairs per command (default 3)")
    p.add_argument("--only", nargs="*", choices=list(COMMANDS), help="run only these commands")
    args = p.parse_args(argv)
    print(f"{os.cpu_count()} CPUs; python {sys.version.split()[0]}; metrics bit-identical on/off: checked")
    print(f"{'command':<14} {'pair':>4} {'set':>4} {'simulation s':>12} {'wall s':>7} {'load':>5}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="mhsim-heads-") as tmp:
        for name in args.only or COMMANDS:
            runs = measure(name, COMMANDS[name], args.pairs, Path(tmp))
            sim = {s: statistics.median(r["phases"]["simulation"] for r in runs[s]) for s in SETTINGS}
            wall = {s: statistics.median(r["wall"] for r in runs[s]) for s in SETTINGS}
            rows.append((name, sim, wall))
    print(
        f"\n{'command':<14} {'sim on':>7} {'sim off':>7} {'on/off':>6} "
        f"{'wall on':>7} {'wall off':>8} {'on/off':>6}"
    )
    for name, sim, wall in rows:
        print(f"{name:<14} {sim['on']:>7.2f} {sim['off']:>7.2f} {sim['on'] / sim['off']:>6.2f} "
              f"{wall['on']:>7.2f} {wall['off']:>8.2f} {wall['on'] / wall['off']:>6.2f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
