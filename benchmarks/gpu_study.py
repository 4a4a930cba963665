"""python -m benchmarks.gpu_study: a DM1 grid of 10⁴ runs at paper scale on one accelerator.

The study: DM1 at the paper's sizes (n = 100 training and 300 test examples, T = 10 tokens, width
d = 32), random init θ(0) ~ σ₀·N(0, 1/d) so that runs of different H share packs of head slots,
full-batch GD for 2000 steps, 20 logged steps, per-head metrics off; a grid over the step size η₀
(10 values, 10⁻² … 10) × the init scale σ₀ (10 values, 0.1 … 10) × H ∈ {1, 2, 4, 8, 16} × 20 trials
(seeds): 10 000 runs, 31 heads per grid point and trial. η₀ and σ₀ are traced knobs, so the whole
grid is one variant group, one data draw and one compiled program; the library picks the packs
(first-fit decreasing into S slots, ``sweeps.plan.default_slots``) and, on an accelerator, how many
of a device's packs train at once (``plan.fit_chunk``: all of them where the device's memory holds
them with the data and every run's logged curves, else equal chunks one after the other, the test
set evaluated inside each chunk; refused in one line before anything is allocated where not even
one pack fits). Nothing here chooses a pack size.

Measured, at the full size and at a tenth of it (2 trials instead of 20): the cold run (compile +
data + simulation; compiles timed by JAX's compile events) and a warm run (programs compiled: the
simulation alone), runs per hour, the FLOPs executed (the plan's packs × S slots, padding included;
``benchmarks.run.step_flops`` per slot and step, ``eval_flops`` per logged step) and the model's
(Σ H per run), their rate, and the executed rate's fraction of the device's float32 peak
(``PEAK_FP32``: the vendor datasheet's non-tensor-core FP32 figure; mhsim multiplies in full float32,
no TF32). The size at which the GPU overtakes this project's CPU: the CPU's time is linear in the
slots it runs (``CPU_REFERENCES``: measured with ``--small --cpu`` on the project's 2-core machine
under load, and its quiet figure from benchmarks/README.md);
the GPU's is the line through its two measured sizes; ``crossover`` solves for the runs where they
meet, warm (both compiled) and cold (each paying its compile).

Examples:
  python -m benchmarks.gpu_study --json gpu-study.json     # on a GPU: the whole study (< 5 min)
  python -m benchmarks.gpu_study --small --cpu              # the CPU reference at a small size (< 60 s)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from benchmarks.run import eval_flops, step_flops

# device_kind substring (the first that matches) -> (non-tensor-core float32 peak FLOP/s, source)
PEAK_FP32 = (
    ("H100 PCIe", 51.2e12, "NVIDIA H100 Tensor Core GPU datasheet: FP32 51 TFLOPS (PCIe, non-tensor-core)"),
    ("H100 NVL", 60.0e12, "NVIDIA H100 Tensor Core GPU datasheet: FP32 60 TFLOPS (NVL, non-tensor-core)"),
    ("H100", 66.9e12, "NVIDIA H100 Tensor Core GPU datasheet: FP32 67 TFLOPS (SXM, non-tensor-core)"),
    ("H200 NVL", 60.0e12, "NVIDIA H200 Tensor Core GPU datasheet: FP32 60 TFLOPS (NVL, non-tensor-core)"),
    ("H200", 66.9e12, "NVIDIA H200 Tensor Core GPU datasheet: FP32 67 TFLOPS (SXM, non-tensor-core)"),
    ("A100", 19.5e12, "NVIDIA A100 Tensor Core GPU datasheet: FP32 19.5 TFLOPS (non-tensor-core)"),
)

FULL = dict(
    heads=(1, 2, 4, 8, 16), lrs="1e-2:1e1:10", scales="0.1:10:10", trials=20, steps=2000, log_points=20
)
SMALL = dict(heads=(1, 2, 4), lrs="0.1:1:3", scales="0.3:3:2", trials=2, steps=500, log_points=20)

# The CPU this project is measured on (benchmarks/README.md: one AMD EPYC Zen 5 VM, 2 cores as 2 JAX
# CPU devices, jax 0.10.2): seconds per executed slot-step (DM1 n = 100/300, T = 10, d = 32, GD) and
# a cold run's overhead (compile and data, wall). "measured": ``--small --cpu`` here, the slot-step as
# the process's CPU time over its 2 cores (the shared machine's load inflates the wall time itself,
# and under that load the CPU time too); "quiet": the random-init sweep's pack step on a quiet machine
# (S × 8.5–9 µs on one device, both devices 1.7–2.0× faster; the README's engine table).
CPU_REFERENCES = {
    "measured": {"slot_step_s": 1.65e-5, "fixed_s": 18.1, "load": 10.0, "date": "2026-11-28"},
    "quiet": {"slot_step_s": 8.75e-6 / 1.85, "fixed_s": 18.1, "load": 1.0},
}


def study(heads, lrs, scales, trials: int, steps: int, log_points: int):
    """The study's grid: DM1 at paper scale, random init, GD; η₀ × σ₀ axes, H and trials as given."""
    from dynamics.config.grid_axes import resolve_grid
    from dynamics.config.schema import Config, DataConfig, ModelConfig, OptimConfig, SweepConfig

    cfg = Config(
        name="gpu-study",
        data=DataConfig(model="dm1", n_train=100, n_test=300),
        model=ModelConfig(init="normal"),
        optim=OptimConfig(optimizer="gd", steps=steps),
        sweep=SweepConfig(heads=tuple(heads), trials=trials, log_points=log_points, head_metrics="off"),
    )
    return resolve_grid(cfg, {"lr": lrs, "init_scale": scales})


def layout(grid, devices) -> dict:
    """What the library plans for the grid (no user pack sizes): its calls, packs, slots, chunks;
    the FLOPs they execute and the model's; the memory estimate of all packs at once and the device's
    limit. Raises the library's one-line ConfigError where a device cannot hold one pack."""
    from dynamics.sweeps.devices import BatchPlacer
    from dynamics.sweeps.grid_runner import variant_groups
    from dynamics.sweeps.memory import ELEMENT, element_bytes, outputs_of, sweep_bytes
    from dynamics.sweeps.plan import plan_points

    placer = BatchPlacer(devices)
    schedule = list(grid.base.steps)
    cfg = grid.base.config
    n, m, T, d, q = cfg.data.n_train, cfg.data.n_test, cfg.data.T, cfg.data.d, cfg.model.query
    steps, L = cfg.optim.steps, len(schedule)
    per_slot = steps * step_flops(n, T, d, q) + L * eval_flops(n, m, T, d, q, has_mask=True)
    out = dict(groups=0, calls=0, packs=0, batch_elements=0, slots=set(), chunks=set(), estimate_bytes=0)
    executed = model = 0
    for group in variant_groups(grid):
        base = grid.points[group[0]]
        points = plan_points(base, range(len(base.sweep.heads)), d, schedule, placer, variants=len(group))
        out["groups"] += 1
        out["calls"] += len(points)
        for p in points:
            out["packs"] += len(p.packs)
            out["batch_elements"] += p.batch_size
            out["slots"].add(p.prog.slots)
            out["chunks"].add(p.chunk)
            executed += p.batch_size * p.prog.slots * per_slot
        model += sum(base.sweep.heads) * base.sweep.trials * len(group) * per_slot
        parts = sweep_bytes(base, L)
        element = sum(element_bytes(base, max(out["slots"]), outputs=outputs_of(base)).values())
        runs_out = sum(v for k, v in parts.items() if k not in ("data", *ELEMENT))
        elements = sum(len(p.packs) for p in points) * base.sweep.trials
        out["estimate_bytes"] += parts["data"] + len(group) * runs_out + elements * element
    out.update(slots=sorted(out["slots"]), chunks=sorted(out["chunks"]))
    out.update(executed_flops=executed, model_flops=model, device_limit_bytes=placer.memory_limit)
    return out


def measure(grid, devices) -> dict:
    """A cold and a warm ``run_grid_experiment`` of ``grid``, timed, with its layout and FLOP rates."""
    from dynamics.infra.timings import Timings
    from dynamics.sweeps.grid_runner import run_grid_experiment

    row = {"runs": grid.n_runs, **layout(grid, devices)}
    timings = Timings().start()
    timings.listen()
    t0 = time.perf_counter()
    run_grid_experiment(grid, progress=False, devices=devices)
    row["cold_s"] = round(time.perf_counter() - t0, 3)
    timings.stop()
    row["compile_s"] = round(timings.seconds()["compile"], 3)
    row["programs"] = timings.programs
    t0, c0 = time.perf_counter(), time.process_time()
    result = run_grid_experiment(grid, progress=False, devices=devices)
    warm, cpu = time.perf_counter() - t0, time.process_time() - c0
    row["warm_s"], row["warm_process_cpu_s"] = round(warm, 3), round(cpu, 3)
    row["runs_per_hour"] = round(grid.n_runs / warm * 3600)
    row["runs_per_hour_cold"] = round(grid.n_runs / row["cold_s"] * 3600)
    row["executed_flop_rate"] = row["executed_flops"] / warm
    row["model_flop_rate"] = row["model_flops"] / warm
    slot_steps = row["batch_elements"] * max(row["slots"]) * grid.base.config.optim.steps
    row["slot_step_s"], row["slot_step_cpu_s"] = warm / slot_steps, cpu / slot_steps
    row["diverged_runs"] = int((result.diverged_at >= 0).sum())
    return row


def peak_of(kind: str) -> dict | None:
    for name, flops, source in PEAK_FP32:
        if name.lower() in kind.lower():
            return {"flops": flops, "source": source}
    return None


def crossover(small: dict, full: dict, cpu: dict) -> dict | None:
    """Runs (of the study's mix of H) at which the GPU's time equals the CPU's: the CPU linear in the
    slot-steps it runs (``cpu``'s seconds per slot-step, plus its overhead when cold), the GPU the
    line through its two sizes (warm; plus its compile when cold). None without a CPU reference."""
    if not cpu.get("slot_step_s"):
        return None
    if full["runs"] == small["runs"]:  # --trials below 10: both sizes are one, no line through them
        return {"note": "the two sizes have the same number of runs (trials < 10?): no line to extrapolate"}
    per_run = full["warm_s"] / full["slot_step_s"] / full["runs"]  # slot-steps per run
    b_cpu = per_run * cpu["slot_step_s"]
    b_gpu = (full["warm_s"] - small["warm_s"]) / (full["runs"] - small["runs"])
    a_gpu = max(0.0, full["warm_s"] - b_gpu * full["runs"])
    if b_cpu <= b_gpu:
        return {"note": "the CPU's per-run time is not above the GPU's: no crossover"}
    cold_gpu, cold_cpu = a_gpu + full["cold_s"] - full["warm_s"], cpu.get("fixed_s") or 0.0
    return {
        "cpu_s_per_run": b_cpu,
        "gpu_s_per_run": b_gpu,
        "gpu_fixed_s": a_gpu,
        "runs_warm": round(a_gpu / (b_cpu - b_gpu), 1),
        "runs_cold": round(max(0.0, cold_gpu - cold_cpu) / (b_cpu - b_gpu), 1),
        "model": "CPU: runs × s/run (+ its compile and data when cold); GPU: the line through its "
        "two sizes (+ its compile when cold)",
    }


def _heads(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(h) for h in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not comma-separated integers (e.g. 1,4,16)") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.gpu_study", description=__doc__.split("\n\n")[0])
    p.add_argument("--small", action="store_true", help="the small study (CPU, < 60 s) instead of 10⁴ runs")
    p.add_argument("--cpu", action="store_true", help="run on the CPU (one JAX device per core)")
    p.add_argument("--heads", type=_heads, help="comma-separated H (default: the study's)")
    p.add_argument("--lrs", help="η₀ values, a list or a:b:k (default: the study's)")
    p.add_argument("--scales", help="σ₀ values, a list or a:b:k (default: the study's)")
    p.add_argument("--trials", type=int, help="trials (seeds) per run (default: the study's)")
    p.add_argument("--steps", type=int, help="GD steps (default: the study's)")
    p.add_argument("--json", metavar="FILE", help="also write the output there")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
    from dynamics.errors import ConfigError
    from dynamics.infra.executables import exact_matmuls
    from dynamics.sweeps.devices import split_cpu

    split_cpu(None)  # one JAX device per CPU core, as the command lines (no effect on a GPU's devices)
    import jax

    size = dict(SMALL if args.small else FULL)
    for key in ("lrs", "scales", "trials", "steps"):
        if getattr(args, key) is not None:
            size[key] = getattr(args, key)
    if args.heads:
        size["heads"] = args.heads
    devices = jax.devices()
    kind = getattr(devices[0], "device_kind", devices[0].platform)
    out = {
        "device": f"{devices[0].platform}:{kind} x{len(devices)}",
        "jax": jax.__version__,
        "load_before": round(os.getloadavg()[0], 2),
        "peak_fp32": peak_of(kind) if devices[0].platform == "gpu" else None,
        "study": {k: list(v) if isinstance(v, tuple) else v for k, v in size.items()},
        "cpu_references": CPU_REFERENCES,
    }
    tenth = dict(size, trials=max(1, size["trials"] // 10))
    try:
        with exact_matmuls():
            sizes = [measure(study(**tenth), devices), measure(study(**size), devices)]
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    peak = out["peak_fp32"]
    for row in sizes:
        row["fraction_of_peak"] = None if peak is None else row["executed_flop_rate"] / peak["flops"]
    out["sizes"] = sizes
    out["load_after"] = round(os.getloadavg()[0], 2)
    if devices[0].platform == "cpu":
        full = sizes[-1]
        out["cpu_measured"] = {  # CPU_REFERENCES' fields: the quiet machine's wall, its cores all busy
            "slot_step_s": full["slot_step_cpu_s"] / len(devices),
            "fixed_s": round(full["cold_s"] - full["warm_s"], 3),
            "slot_step_wall_s": full["slot_step_s"],
        }
    else:
        out["crossover"] = {name: crossover(sizes[0], sizes[1], ref) for name, ref in CPU_REFERENCES.items()}
    text = json.dumps(out, indent=1, default=float)
    print(text, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
