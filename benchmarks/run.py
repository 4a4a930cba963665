"""python -m benchmarks.run: the sweep engine against a per-step loop, compile timed apart.

Every sweep is measured in a fresh subprocess (empty compile caches):

- data: the data generator's first call (its compile and the draw).
- engine cold: ``run_sweep`` right after (the engine's compile and one run).
- engine warm: ``run_sweep`` again, everything compiled (best of ``--repeats``).
  compile = cold − warm.
- baseline: the same math as a straightforward per-configuration, per-step loop: one
  ``jax.jit`` of one optimiser step of the H-head model (no vmap, no scan, default
  compiler options), a Python loop over H, trials and steps, and a jitted evaluation of
  the same metrics at the logged steps. It is timed on ``--baseline-steps`` steps and a
  few evaluations per H after their compile, and extrapolated:
  Σ_H trials · (steps · t_step(H) + L · t_eval(H)).
- baseline, 1 head (zero-init sweeps only): the same loop on the exact one-head reduction
  the engine's fast path uses, so the table separates the symmetry gain from the rest.

Work is counted in head-steps (one head of the H-head model, one full-batch step) and
in FLOPs of the forward and backward pass (formulas in benchmarks/README.md): "model"
counts the H-head model, "executed" what the engine computed (1 head on the fast path,
the packs × S head slots on random-init sweeps, empty slots included).

Examples:
  python -m benchmarks.run                          # five presets + the random-init sweep
  python -m benchmarks.run --sweeps fig2 --steps 300 --baseline-steps 10   # a quick look
  python -m benchmarks.run --host-devices 2         # shard over 2 CPU devices (2 cores)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import child_env
from dynamics.parts import INITS, KEY_QUERIES, QUERIES

PRESET_SWEEPS = ("fig2", "fig3-gd", "fig3-adam", "planted-gd", "planted-adam")
RANDOM = "random-init"
ROOT = Path(__file__).resolve().parents[1]


def _init_kw(m) -> dict:
    """init_params' keywords of a model config: scale and head size only where they act."""
    kw = dict(init=m.init, key_query=m.key_query)
    if INITS[m.init].random:
        kw["scale"] = m.init_scale
    if KEY_QUERIES[m.key_query].factored:
        kw["head_size"] = m.head_size
    return kw


# --------------------------------------------------------------------------- FLOP counts
def step_flops(n: int, T: int, d: int, query: str) -> int:
    """Forward + backward FLOPs of one head over n examples (matmul terms, 2 per multiply-add)."""
    if not QUERIES[query].all_tokens:  # one query token (x_1)
        # fwd: W x_1 (2d²), scores x_tᵀ(W x_1) (2Td), U_hᵀ x_t (2Td), Σ_t A_t·(Uᵀx_t) (2T)
        # bwd: the same contractions transposed, for ∂U, ∂(W x_1) → ∂W; no ∂X.
        return n * (4 * d * d + 8 * T * d + 4 * T)
    # all: X W (2Td²), scores (2T²d), Uᵀx_t (2Td), A·(XU) (2T²); backward likewise.
    return n * (4 * T * d * d + 4 * T * T * d + 4 * T * d + 4 * T * T)


def eval_flops(n: int, n_test: int, T: int, d: int, query: str, has_mask: bool) -> int:
    """One head's logged-step evaluation: forward on train and test (+ test attention)."""
    fwd = step_flops(1, T, d, query) // 2
    attn = (2 * T * d * d + 2 * T * T * d) if QUERIES[query].all_tokens else (2 * d * d + 2 * T * d)
    return (n + n_test) * fwd + (n_test * attn if has_mask else 0)


# --------------------------------------------------------------------------- sweeps
def sweep_config(name: str, steps: int | None):
    from dynamics.config.schema import Config, DataConfig, ModelConfig, OptimConfig, SweepConfig, preset

    if name == RANDOM:
        cfg = Config(
            name=RANDOM,
            data=DataConfig(model="dm1", n_train=100, n_test=300),
            model=ModelConfig(init="normal", init_scale=1.0),
            optim=OptimConfig(optimizer="gd", lr=0.5, steps=1000),
            sweep=SweepConfig(heads=(1, 2, 3, 4, 6, 8, 12, 16), trials=5, log_points=100),
        )
    else:
        cfg = preset(name)
    if steps is not None:
        cfg = dataclasses.replace(cfg, optim=dataclasses.replace(cfg.optim, steps=steps))
    return cfg


def matmul_gflops(size: int = 1024, reps: int = 5) -> float:
    """A dense float32 matmul's rate on this machine now: a practical-peak reference."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((size, size), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f(a).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * size**3 / best / 1e9


def baseline_times(cfg, data, H: int, one_head: bool, n_steps: int) -> dict[str, float]:
    """(compile, per-step, per-evaluation) seconds of the plain per-step loop for one H."""
    import jax
    import jax.numpy as jnp
    import optax

    from dynamics.core import engine, inits, program, update
    from dynamics.core import model as mdl
    from dynamics.core.losses import Loss, mean_loss
    from dynamics.sweeps import sweep

    m = cfg.model
    d = int(data.X_train.shape[-1])
    S = 1 if one_head else H
    mult = H / S
    params = inits.init_params(jax.random.PRNGKey(0), S, d, **_init_kw(m))
    opt = update.make_optimizer(cfg.optim.optimizer, sweep.step_size(cfg, H))
    state = opt.init(params)
    loss = Loss(cfg.optim.loss)

    def objective(p):
        z = data.y_train * mdl.logits(
            p, data.X_train, query=m.query, norm=m.norm, weight=jnp.full((S,), mult)
        )
        return mean_loss(z, loss)

    @jax.jit
    def step(p, s):
        value, g = jax.value_and_grad(objective)(p)
        if mult != 1:  # the one-head reduction's exact per-head gradient
            g = jax.tree_util.tree_map(lambda x: x / mult, g)
        u, s = opt.update(g, s, p)
        return optax.apply_updates(p, u), s, value

    prog = dataclasses.replace(sweep.program_for(cfg, S, d, [0, 1]), fast_path=one_head)
    pack = program.single_run_pack(prog, jnp.asarray(H, jnp.float32))
    evaluate = jax.jit(lambda p: engine.evaluate(prog, p, pack, data))

    t = time.perf_counter()
    jax.block_until_ready(step(params, state))
    jax.block_until_ready(evaluate(params))
    compile_s = time.perf_counter() - t
    p, s = params, state
    for _ in range(2):  # warm-up
        p, s, _ = step(p, s)
    jax.block_until_ready(p)
    t = time.perf_counter()
    for _ in range(n_steps):
        p, s, _ = step(p, s)
    jax.block_until_ready(p)
    per_step = (time.perf_counter() - t) / n_steps
    reps = 5
    t = time.perf_counter()
    for _ in range(reps):
        out = evaluate(p)
    jax.block_until_ready(out)
    per_eval = (time.perf_counter() - t) / reps
    return {"compile_s": compile_s, "step_s": per_step, "eval_s": per_eval}


def measure(name: str, steps: int | None, repeats: int, baseline_steps: int, slots: int | None) -> dict:
    """Everything for one sweep, in this (fresh) process."""
    import jax

    from dynamics.config.schema import resolve
    from dynamics.core.data import make_data
    from dynamics.sweeps.sweep import run_sweep

    exp = resolve(sweep_config(name, steps))
    cfg = exp.config
    row: dict = {"sweep": name, "slots": slots, "load_before": os.getloadavg()[0]}
    row["matmul_gflops"] = matmul_gflops()

    k_data = jax.random.split(jax.random.PRNGKey(cfg.sweep.seed))[0]
    t = time.perf_counter()
    data, _ = make_data(cfg.data, k_data, cfg.sweep.trials)
    jax.block_until_ready(data)
    row["data_s"] = time.perf_counter() - t

    t = time.perf_counter()
    run_sweep(exp, progress=False, slots=slots)
    row["cold_s"] = time.perf_counter() - t
    warm = []
    for _ in range(repeats):
        t = time.perf_counter()
        run_sweep(exp, progress=False, slots=slots)
        warm.append(time.perf_counter() - t)
    row["warm_s"] = min(warm)
    row["compile_s"] = row["cold_s"] - row["warm_s"]

    row.update(work(exp, data, slots))
    row["head_steps_per_s"] = row["head_steps"] / row["warm_s"]
    row["executed_gflops"] = row["executed_flops"] / row["warm_s"] / 1e9
    row.update(baselines(cfg, data, baseline_steps, row["warm_s"], row["logged"]))
    row["load_after"] = os.getloadavg()[0]
    row["device"] = f"{jax.devices()[0].device_kind} x{jax.device_count()}"
    return row


def work(exp, data, slots: int | None) -> dict:
    """The head slots the engine ran (its plan: packs × S, empty slots included) and the model's H."""
    from dynamics.core.data import token_width
    from dynamics.sweeps.devices import BatchPlacer
    from dynamics.sweeps.sweep import plan_points

    cfg, schedule = exp.config, list(exp.steps)
    d = token_width(data)
    points = plan_points(cfg, range(len(cfg.sweep.heads)), d, schedule, BatchPlacer(), slots=slots)
    stored_slots = sum(len(p.packs) * p.prog.slots for p in points)
    n, n_test = int(data.X_train.shape[-3]), int(data.X_test.shape[-3])
    T, q, trials, S_ = int(data.X_train.shape[-2]), cfg.model.query, cfg.sweep.trials, cfg.optim.steps
    L = len(schedule)
    f_step, f_eval = step_flops(n, T, d, q), eval_flops(n, n_test, T, d, q, data.mask_test is not None)
    heads = cfg.sweep.heads
    return dict(
        runs=len(heads) * trials,
        steps=S_,
        logged=L,
        programs=len({p.prog for p in points}),
        packs=sum(len(p.packs) for p in points),
        head_steps=sum(heads) * trials * S_,
        model_flops=sum(heads) * trials * (S_ * f_step + L * f_eval),
        executed_flops=stored_slots * trials * (S_ * f_step + L * f_eval),
    )


def baselines(cfg, data, baseline_steps: int, warm_s: float, L: int) -> dict:
    """The plain loop, timed on a few steps per H, extrapolated to the sweep."""
    import jax

    first = jax.tree_util.tree_map(lambda a: a[0], data)
    variants = [("baseline", False)] + ([("baseline_1head", True)] if INITS[cfg.model.init].symmetric else [])
    row, trials, S_ = {}, cfg.sweep.trials, cfg.optim.steps
    for key, one_head in variants:
        est, comp, per_head = 0.0, 0.0, {}
        for H in cfg.sweep.heads:
            b = baseline_times(cfg, first, H, one_head, baseline_steps)
            est += trials * (S_ * b["step_s"] + L * b["eval_s"])
            comp += b["compile_s"]
            per_head[H] = {k: round(v * 1e6, 1) for k, v in b.items() if k != "compile_s"}  # µs
        row[f"{key}_per_head_us"] = per_head
        row[f"{key}_s"] = est
        row[f"{key}_compile_s"] = comp
        row[f"{key}_ratio"] = est / warm_s
    return row


# --------------------------------------------------------------------------- driver
def run_job(job: dict, host_devices: int | None) -> dict:
    env = child_env(ROOT)
    if host_devices:
        flag = f"--xla_force_host_platform_device_count={host_devices}"
        env["XLA_FLAGS"] = f"{env.get('XLA_FLAGS', '')} {flag}".strip()
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--job", json.dumps(job)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark job {job} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def format_table(rows: list[dict]) -> str:
    head = (
        "| sweep | runs × steps | programs | data s | compile s | run s | head-steps/s | exec GFLOP/s "
        "| baseline s (est.) | engine × | 1-head baseline s | engine × |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        name = r["sweep"] + (f" (S = {r['slots']})" if r.get("slots") else "")
        one = (
            f"{r['baseline_1head_s']:.1f} | {r['baseline_1head_ratio']:.1f}"
            if "baseline_1head_s" in r
            else "— | —"
        )
        lines.append(
            f"| {name} | {r['runs']} × {r['steps']} | {r['programs']} | {r['data_s']:.1f} | "
            f"{r['compile_s']:.1f} | {r['warm_s']:.2f} | {r['head_steps_per_s']:.3g} | "
            f"{r['executed_gflops']:.1f} | {r['baseline_s']:.1f} | {r['baseline_ratio']:.1f} | {one} |"
        )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__.split("\n\n")[0],
        epilog=__doc__.split("Examples:")[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--sweeps", default=",".join((*PRESET_SWEEPS, RANDOM)), help="comma-separated sweep names")
    p.add_argument("--steps", type=int, default=None, help="override every sweep's number of steps")
    p.add_argument("--repeats", type=int, default=2, help="warm runs per sweep (the best is kept)")
    p.add_argument("--baseline-steps", type=int, default=20, help="timed baseline steps per H")
    p.add_argument(
        "--slots",
        default=None,
        help="random-init sweep: comma-separated head slots per pack to compare (default: the largest H)",
    )
    p.add_argument("--host-devices", type=int, default=None, help="CPU: split the host into N JAX devices")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.add_argument("--job", help=argparse.SUPPRESS)
    return p


def report(rows: list[dict], json_path: str | None) -> None:
    print()
    print(format_table(rows))
    presets = [r for r in rows if r["sweep"] in PRESET_SWEEPS]
    if presets:
        print(
            f"\nall {len(presets)} preset sweeps: {sum(r['warm_s'] for r in presets):.1f} s of simulation "
            f"after compile, {sum(r['compile_s'] for r in presets):.1f} s of engine compile, "
            f"{sum(r['data_s'] for r in presets):.1f} s of data generation (first call)"
        )
    if json_path:
        from dynamics.infra.files import atomic_write_bytes

        atomic_write_bytes(Path(json_path), json.dumps(rows, indent=2).encode())
        print(f"wrote {json_path}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    if args.job:
        job = json.loads(args.job)
        print(json.dumps(measure(**job)))
        return 0

    names = [s.strip() for s in args.sweeps.split(",") if s.strip()]
    slot_counts = [int(s) for s in args.slots.split(",")] if args.slots else [None]
    jobs = []
    for name in names:
        for slots in slot_counts if name == RANDOM else [None]:
            jobs.append(
                dict(
                    name=name,
                    steps=args.steps,
                    repeats=args.repeats,
                    baseline_steps=args.baseline_steps,
                    slots=slots,
                )
            )
    print(
        f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"python {platform.python_version()}; load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    rows = []
    for job in jobs:
        t = time.perf_counter()
        row = run_job(job, args.host_devices)
        rows.append(row)
        print(
            f"{row['sweep']}: run {row['warm_s']:.2f} s, compile {row['compile_s']:.1f} s, "
            f"baseline {row['baseline_s']:.1f} s (x{row['baseline_ratio']:.1f}), "
            f"matmul {row['matmul_gflops']:.0f} GFLOP/s, "
            f"load {row['load_before']:.1f}-{row['load_after']:.1f} [{time.perf_counter() - t:.0f} s]",
            flush=True,
        )
    report(rows, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
