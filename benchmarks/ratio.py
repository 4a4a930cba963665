"""mhsim against the smallest PyTorch loop, whole processes: how many times faster a sweep that logs
its losses runs.

    python -m benchmarks.ratio                               # both sweeps, 3 pairs each
    python -m benchmarks.ratio --sweeps zero-init --pairs 5
    python -m benchmarks.ratio --steps 50 --trials 1 --pairs 1   # a quick check that it runs

For each sweep, the inputs of the loop are written first (``benchmarks.loop_inputs``: mhsim's own
data and θ(0)), and each program runs once untimed (mhsim fills its compilation cache, the loop
pages torch in); then ``--pairs`` pairs of whole processes, alternating which goes first:

- mhsim: ``python -m dynamics.run SWEEP --log losses --log-every 1 --no-figure --quiet --timings``
  into a new folder, with the warm cache;
- the loop: ``python -m benchmarks.torch_minimal`` (``--threads``), the train and test loss at
  every step and nothing else.

Sweeps (DM1, n = 100/300, T = 10, d = 32, full-batch GD, 5 trials, 1000 steps, every step logged):
``random-init`` (θ(0) ~ N(0, 1/d), η = 1, H ∈ {1, 2, 3, 4, 6, 8, 12, 16}) and ``zero-init`` (θ(0) =
0, η = H, H ∈ {1, 2, 4, …, 64}). Printed: the medians of wall and CPU time (user + system) and
their ratios (loop / mhsim) with each pair's, the load average before every run, mhsim's phases
(its fixed costs: imports, data, compile, which with a warm cache is loading the compiled
programs; then simulation and writing) and the loop's (import, load, loop), and the model's
FLOPs per second of mhsim's simulation phase and of its whole process, counted as in
benchmarks/README.md's FLOP table (every head of every run: S·F_step + (S + 1)·F_test + F_train,
the training loss from the update's own forward). The two programs' train-loss curves are
compared too (max relative difference). Last, the machine's float32 matmul rate
(``benchmarks.matmul_rate`` in its own process: a large square product on all cores, and the
model's own product shapes) and the simulation's FLOP rate as a share of it. The machine is often
shared: read the load with every number.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from functools import partial
from pathlib import Path

from benchmarks import child_env
from benchmarks.logging_cost import (
    ROOT,
    ZERO_INIT,
    alternate,
    curve_difference,
    mhsim,
    run_flops,
    run_process,
    sized,
)
from benchmarks.matmul_rate import LARGE

RANDOM_INIT = (
    "--data-model dm1 --n-train 100 --n-test 300 --init normal --init-scale 1 --optimizer gd --lr 1 "
    "--heads 1,2,3,4,6,8,12,16 --trials 5 --steps 1000"
)
SWEEPS = {"random-init": RANDOM_INIT.split(), "zero-init": ZERO_INIT.split()}
MHSIM_PHASES = ("imports", "data", "compile", "simulation", "writing", "total")
LOOP_PHASES = ("import", "load", "loop")


def sweep_args(name: str, steps: int | None, trials: int | None) -> list[str]:
    return sized([*SWEEPS[name], "--log-every", "1"], steps, trials)


def model_flops(args: list[str]) -> float:
    """The FLOPs of the sweep ``args`` logging its losses at every step: every head of every run."""
    from dynamics.cli.run import build_parser, config_from_args

    cfg = config_from_args(build_parser().parse_args(args)).config
    n, m, T, d, S = cfg.data.n_train, cfg.data.n_test, cfg.data.T, cfg.data.d, cfg.optim.steps
    per_trial = sum(run_flops(n, m, T, d, H, S, S + 1, fused=True) for H in cfg.sweep.heads)
    return float(cfg.sweep.trials * per_trial)


class Mhsim:
    """``python -m dynamics.run`` of one sweep logging its losses (``logging_cost.mhsim``: its folder
    emptied before each call), sharing one compilation cache; ``out`` the last call's folder."""

    def __init__(self, args: list[str], tmp: Path):
        self.args, self.out, self.cache = [*args, "--log", "losses"], tmp / "mhsim", tmp / "cache"

    def __call__(self) -> dict:
        return mhsim(self.args, self.out, self.cache)


def _median(runs: list[dict], key: str, phase: bool = False) -> float:
    return statistics.median(r["phases"].get(key, float("nan")) if phase else r[key] for r in runs)


def measure(name: str, steps, trials, pairs: int, threads: int, tmp: Path) -> dict:
    args = sweep_args(name, steps, trials)
    inputs = tmp / f"inputs-{name}.npz"
    subprocess.run(
        [sys.executable, "-m", "benchmarks.loop_inputs", "--file", str(inputs), "--", *args],
        cwd=ROOT, env=child_env(ROOT), check=True,
    )  # fmt: skip
    ours = Mhsim(args, tmp / name)
    loop_out = tmp / f"loop-{name}.npz"
    loop_cmd = [sys.executable, "-m", "benchmarks.torch_minimal", "--inputs", str(inputs),
                "--out", str(loop_out), "--threads", str(threads)]  # fmt: skip
    runs = alternate(
        {"mhsim": ours, "loop": partial(run_process, loop_cmd, phases_named=LOOP_PHASES)}, pairs, name
    )
    flops = model_flops(args)
    row = {"sweep": name, "pairs": pairs, "threads": threads, "model GFLOP": flops / 1e9}
    for who in ("mhsim", "loop"):
        for key in ("wall", "cpu"):
            row[f"{who} {key}"] = _median(runs[who], key)
    row["wall ratio"] = row["loop wall"] / row["mhsim wall"]
    row["cpu ratio"] = row["loop cpu"] / row["mhsim cpu"]
    row["pair wall ratios"] = [
        b["wall"] / a["wall"] for a, b in zip(runs["mhsim"], runs["loop"], strict=True)
    ]
    row["mhsim phases"] = {k: _median(runs["mhsim"], k, True) for k in MHSIM_PHASES}
    row["loop phases"] = {k: _median(runs["loop"], k, True) for k in LOOP_PHASES}
    row["simulation GFLOP/s"] = flops / 1e9 / row["mhsim phases"]["simulation"]
    row["process GFLOP/s"] = flops / 1e9 / row["mhsim wall"]
    row["train_loss max rel diff"] = curve_difference(ours.out / "curves.npz", loop_out)
    row["load"] = [round(r["load"], 2) for v in runs.values() for r in v]
    return row


def matmul_rates(tmp: Path) -> dict[str, float]:
    """``benchmarks.matmul_rate`` in a child process: {shape: GFLOP/s}."""
    out = tmp / "matmul.json"
    subprocess.run(
        [sys.executable, "-m", "benchmarks.matmul_rate", "--json", str(out)],
        cwd=ROOT, env=child_env(ROOT), check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return json.loads(out.read_text())


def report(rows: list[dict], rates: dict[str, float]) -> None:
    print("\nwhole processes, medians; ratio = the loop / mhsim (mhsim --log losses, warm cache)")
    for r in rows:
        each = ", ".join(f"{x:.1f}" for x in r["pair wall ratios"])
        print(f"{r['sweep']}: mhsim wall {r['mhsim wall']:.2f} s (cpu {r['mhsim cpu']:.2f} s), "
              f"loop wall {r['loop wall']:.2f} s (cpu {r['loop cpu']:.2f} s): "
              f"ratio wall {r['wall ratio']:.1f}, cpu {r['cpu ratio']:.1f}; per pair {each}")  # fmt: skip
        fixed = ", ".join(f"{k} {v:.2f}" for k, v in r["mhsim phases"].items())
        print(f"  mhsim phases (s): {fixed}")
        print(f"  loop phases (s): {', '.join(f'{k} {v:.2f}' for k, v in r['loop phases'].items())}")
        print(f"  model {r['model GFLOP']:.1f} GFLOP: {r['simulation GFLOP/s']:.1f} GFLOP/s of simulation, "
              f"{r['process GFLOP/s']:.1f} GFLOP/s of mhsim's whole process; train loss max rel diff "
              f"{r['train_loss max rel diff']:.2g}; load {r['load']}")  # fmt: skip
    large = rates[LARGE]
    print("float32 matmul rate (XLA, GFLOP/s): " + ", ".join(f"{k} {v:.1f}" for k, v in rates.items()))
    for r in rows:
        print(f"{r['sweep']}: simulation at {100 * r['simulation GFLOP/s'] / large:.0f} % of the large "
              f"product's rate")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.ratio", description=__doc__.split("\n\n")[0])
    p.add_argument("--sweeps", nargs="+", choices=list(SWEEPS), default=list(SWEEPS))
    p.add_argument("--pairs", type=int, default=3, help="alternating pairs per sweep (default 3)")
    p.add_argument("--threads", type=int, default=2, help="the loop's torch.set_num_threads (default 2)")
    p.add_argument("--steps", type=int, help="override the sweeps' steps")
    p.add_argument("--trials", type=int, help="override the sweeps' trials")
    p.add_argument("--json", type=Path, help="also write the results here")
    args = p.parse_args(argv)
    print(f"{os.cpu_count()} CPUs; python {sys.version.split()[0]}; load {os.getloadavg()}; code {ROOT}")
    tmp = Path(tempfile.mkdtemp(prefix="mhsim-ratio-"))
    try:
        rows = [measure(name, args.steps, args.trials, args.pairs, args.threads, tmp) for name in args.sweeps]
        rates = matmul_rates(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(rows, rates)
    print(f"load at the end {os.getloadavg()}")
    if args.json is not None:
        args.json.write_text(json.dumps({"sweeps": rows, "matmul GFLOP/s": rates}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
