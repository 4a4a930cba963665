"""python -m benchmarks.grid: the grid presets' simulation time after compile.

For each grid preset (``dynamics.config.grid_axes.GRID_PRESETS``), in this process, with the CPU split
into one JAX device per core as the command lines do:

- cold: ``grid_run.run_grid_experiment`` the first time: its compiles (JAX's compile events) and the
  simulation apart from them (``dynamics.infra.timings``);
- warm: ``run_grid_experiment`` again, everything compiled: the simulation time after compile;
- loop (``--loop``): what a shell loop over ``python -m dynamics.run`` computes, in one
  process and warm: ``sweep.run_sweep`` of each grid point's configuration alone, summed
  (each grid point then fills the devices by itself, one compiled call after the other).

Work: runs = H values × grid points × trials; head-steps = Σ H · trials · steps (one head
of the H-head model doing one full-batch step; on the zero-init fast path the engine
executes one head per run).

Examples:
  python -m benchmarks.grid                         # phase-gd
  python -m benchmarks.grid --grids phase-gd,heads-vs-samples --loop
"""

from __future__ import annotations

import argparse
import json
import time


def _bench(name: str, loop: bool) -> dict:
    from dynamics.config.grid_axes import grid_preset, resolve_grid
    from dynamics.infra.timings import Timings
    from dynamics.sweeps.grid_runner import run_grid_experiment
    from dynamics.sweeps.sweep import run_sweep

    grid = resolve_grid(*grid_preset(name))
    timings = Timings().start()
    timings.listen()
    run_grid_experiment(grid, progress=False)
    timings.stop()
    cold = timings.seconds()
    t0 = time.perf_counter()
    run_grid_experiment(grid, progress=False)
    warm = time.perf_counter() - t0
    head_steps = sum(sum(c.sweep.heads) * c.sweep.trials * c.optim.steps for c in grid.points)
    row = {
        "grid": name,
        "runs": grid.n_runs,
        "programs": timings.programs,
        "compile_s": round(cold["compile"], 2),
        "cold_simulation_s": round(cold["simulation"], 2),
        "simulation_s": round(warm, 2),
        "runs_per_s": round(grid.n_runs / warm, 1),
        "head_steps_per_s": round(head_steps / warm),
    }
    if loop:
        for c in grid.points:  # compile each shape once first, as warm as the grid
            run_sweep(c, progress=False)
        t0 = time.perf_counter()
        for c in grid.points:
            run_sweep(c, progress=False)
        row["loop_s"] = round(time.perf_counter() - t0, 2)
        row["grid_speedup"] = round(row["loop_s"] / warm, 2)
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.grid", description=__doc__.split("\n\n")[0])
    p.add_argument("--grids", default="phase-gd", help="comma-separated grid presets (default phase-gd)")
    p.add_argument("--loop", action="store_true", help="also time one run_sweep per grid point")
    args = p.parse_args(argv)
    from dynamics.sweeps.devices import split_cpu

    split_cpu(None)  # one JAX device per core, as python -m dynamics.run
    import jax

    print(f"devices: {len(jax.devices())} × {jax.devices()[0].platform}", flush=True)
    for name in args.grids.split(","):
        print(json.dumps(_bench(name.strip(), args.loop)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
