"""Two checkouts' simulation time, measured alternately in one run: the five paper presets.

    python -m benchmarks.ab --old /path/to/old --new . --pairs 5

Each checkout first fills its own compilation cache (one untimed run), then the two run
``python -m figures <presets> --force --timings`` one after the other, ``--pairs`` times,
alternating which goes first. Reported: each run's ``simulation`` phase (the compiled calls
after their compile: what a refactor must not slow down), wall and CPU time, the load before
it, and the medians with the new/old ratio. Alternation and medians keep a shared machine's
drift out of the ratio; the absolute seconds of a 2-core VM are not comparable across hours.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.cold_start import PRESETS, run


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ab", description=__doc__.split("\n\n")[0])
    p.add_argument("--old", type=Path, required=True, help="the baseline checkout")
    p.add_argument("--new", type=Path, default=Path("."), help="the checkout under test (default: this one)")
    p.add_argument("--pairs", type=int, default=5, help="alternating old/new pairs (default 5)")
    args = p.parse_args(argv)
    repos = {"old": args.old.resolve(), "new": args.new.resolve()}
    sims: dict[str, list[float]] = {"old": [], "new": []}
    print(f"{os.cpu_count()} CPUs; old = {repos['old']}, new = {repos['new']}")
    print(f"{'pair':>4} {'code':>4} {'simulation s':>12} {'wall s':>7} {'cpu s':>6} {'load':>5}", flush=True)
    with tempfile.TemporaryDirectory(prefix="mhsim-ab-") as tmp:
        caches = {k: str(Path(tmp) / f"cache-{k}") for k in repos}
        for k, repo in repos.items():  # fill each cache: the timed runs compile nothing
            run("figures", list(PRESETS), repo, caches[k], Path(tmp) / f"warm-{k}", timings=True)
        for i in range(args.pairs):
            order = ("old", "new") if i % 2 == 0 else ("new", "old")
            for k in order:
                out = Path(tmp) / f"out-{k}-{i}"
                r = run("figures", [*PRESETS, "--force"], repos[k], caches[k], out, timings=True)
                sims[k].append(r["phases"]["simulation"])
                line = f"{i + 1:>4} {k:>4} {sims[k][-1]:>12.2f} {r['wall']:>7.2f} "
                print(line + f"{r['cpu']:>6.2f} {r['load']:>5.2f}", flush=True)
    med = {k: statistics.median(v) for k, v in sims.items()}
    print(
        f"median simulation: old {med['old']:.2f} s, new {med['new']:.2f} s, "
        f"new/old {med['new'] / med['old']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
