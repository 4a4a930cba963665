"""Does packing earn its concepts? The random-init sweep with packs against one program per H.

Packing (``sweep.pack_runs``) puts runs of different H of one trial side by side in one
program's S head slots: one compile for the sweep, no padding. Without it, each H gets its
own program of S = H slots and one run per pack (the layout factored split heads must use).
Both layouts run in this one process, alternately, and the table gives compile + first run
(cold) and the best warm run of each, with their ratio.

  python -m benchmarks.packing                 # the benchmark's random-init sweep, 1000 steps
  python -m benchmarks.packing --steps 200 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import time
from unittest import mock

PACKED, PER_H = "packed", "one program per H"


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def layout(name: str):
    """A context in which the sweep plans with (``PACKED``) or without (``PER_H``) packing."""
    from dynamics.sweeps import sweep

    return (
        contextlib.nullcontext()
        if name == PACKED
        else mock.patch.object(sweep, "can_pack_heads", lambda c: False)
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.packing", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=None, help="override the sweep's 1000 steps")
    p.add_argument("--repeats", type=int, default=3, help="warm runs per layout (the best is kept)")
    args = p.parse_args(argv)

    from benchmarks.run import RANDOM, sweep_config
    from dynamics.config.schema import resolve
    from dynamics.sweeps import sweep
    from dynamics.sweeps.devices import BatchPlacer, split_cpu

    split_cpu()  # the command lines' default: one JAX device per core
    exp = resolve(sweep_config(RANDOM, args.steps))
    cfg, heads = exp.config, range(len(exp.config.sweep.heads))

    def run(name: str) -> None:
        with layout(name):
            sweep.run_sweep(exp, progress=False)

    names = (PACKED, PER_H)
    plans = {}
    for name in names:
        with layout(name):
            plans[name] = sweep.plan_points(cfg, heads, cfg.data.d, list(exp.steps), BatchPlacer())
    cold = {name: timed(lambda n=name: run(n)) for name in names}
    warm = {name: min(timed(lambda n=name: run(n)) for _ in range(args.repeats)) for name in names}
    print(
        f"random-init sweep: H = {list(cfg.sweep.heads)}, {cfg.sweep.trials} trials, {cfg.optim.steps} steps"
    )
    print("| layout | programs | head slots per trial | cold s (compile + run) | warm s |")
    print("|---|---|---|---|---|")
    for name in names:
        points = plans[name]
        slots = sum(len(q.packs) * q.prog.slots for q in points)
        print(f"| {name} | {len({q.prog for q in points})} | {slots} | {cold[name]:.2f} | {warm[name]:.2f} |")
    ratio = {k: v[PER_H] / v[PACKED] for k, v in (("cold", cold), ("warm", warm))}
    print(f"\n{PER_H} / {PACKED}: cold {ratio['cold']:.2f}×, warm {ratio['warm']:.2f}×")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
