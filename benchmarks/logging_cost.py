"""What watching training costs: logging every step, the per-head view, and a plain PyTorch loop.

    python -m benchmarks.logging_cost                          # all three parts, full sizes
    python -m benchmarks.logging_cost --parts logging --sweeps random-init fig2 --steps 300
    python -m benchmarks.logging_cost --steps 50 --trials 2 --pairs 1      # a quick check

Three parts, each of whole ``python -m dynamics.run … --no-figure --quiet --timings`` processes
sharing one compilation cache per sweep (one untimed run per setting fills it first), with
``--pairs`` pairs per comparison alternating which setting goes first, and medians reported:

- ``logging``: for the random-init sweep (DM1, θ(0) ~ N(0, σ₀²/d) with σ₀ = 1, GD η = 0.5,
  H ∈ {1, 2, 3, 4, 6, 8, 12, 16}, 5 trials, 1000 steps) and the five paper presets, the
  simulation time (the run's own ``--timings`` phase: compiled calls after their compile) logging
  every step over logging every 100 steps, per-head metrics off, beside the arithmetic floor of the
  FLOP formulas below.
- ``heads``: the random-init sweep logging every step, ``--head-metrics auto`` (mhsim's default:
  on up to H = 16) against ``off``: the process CPU time (user + system), its peak memory (the
  child's ``ru_maxrss``), the wall time and the size of ``curves.npz``.
- ``torch``: whole processes, mhsim (logging every step, default per-head metrics) against the
  PyTorch loop of ``benchmarks.torch_loop`` (``torch.set_num_threads(--threads)``) on the same data
  and θ(0) (``benchmarks.loop_inputs``, written before the timed runs), for the random-init sweep
  and the zero-init sweep (DM1, GD η = 1·H, H ∈ {1, 2, 4, 8, 16, 32, 64}, 5 trials, 1000 steps).
  The two programs' train-loss curves are compared too (max relative difference, reported).

FLOPs (a multiply-add is 2; softmax, loss and update left out; query x_1, width d, T tokens, H
heads, n_train / n_test examples; benchmarks/README.md derives the per-example count):

    training step (forward + backward)   F_step  = n_train · H · (4d² + 8Td + 4T)
    test-set forward                      F_test  = n_test · H · (2d² + 4Td + 2T)
    training-set forward                  F_train = n_train · H · (2d² + 4Td + 2T)

A run of S steps logging L steps costs S·F_step + L·F_log with F_log = F_test + F_train when the
training metrics need their own forward (mini-batch SGD, a temperature schedule), or F_test when
they come from the update's own forward (full-batch GD and Adam at a constant temperature, the
engine's ``fused_logging``; plus F_train at the last step). The floor of logging every
step is that cost at L = S + 1 over the cost at L = S/100 + 1.

The machine this runs on is often shared: the load average is printed with every run, and a
loaded machine's ratios are not a quiet machine's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

from benchmarks import child_env
from dynamics.cli.common import with_flags

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ("fig2", "fig3-gd", "fig3-adam", "planted-gd", "planted-adam")
RANDOM_INIT = (
    "--data-model dm1 --n-train 100 --n-test 300 --init normal --init-scale 1 --optimizer gd --lr 0.5 "
    "--heads 1,2,3,4,6,8,12,16 --trials 5 --steps 1000"
).split()
ZERO_INIT = "--data-model dm1 --heads 1,2,4,8,16,32,64 --lr 1 --lr-scaling linear --trials 5 --steps 1000"
SWEEPS = {"random-init": RANDOM_INIT, "zero-init": ZERO_INIT.split()}
PHASES = ("imports", "data", "compile", "simulation", "writing", "plotting", "other", "total")
COARSE = 100  # the sparse logging the every-step logging is compared with


# FLOP formulas


def step_flops(n_train: int, T: int, d: int, H: int) -> int:
    """One full-batch training step (forward and backward) of H heads: n_train·H·(4d² + 8Td + 4T)."""
    return n_train * H * (4 * d * d + 8 * T * d + 4 * T)


def forward_flops(n: int, T: int, d: int, H: int) -> int:
    """One forward pass of H heads over n examples: n·H·(2d² + 4Td + 2T) (the test set's, or the
    training set's at a logged step)."""
    return n * H * (2 * d * d + 4 * T * d + 2 * T)


def run_flops(n_train: int, n_test: int, T: int, d: int, H: int, steps: int, logged: int, fused: bool) -> int:
    """S = ``steps`` updates with ``logged`` evaluations: the training metrics from their own
    forward (``fused`` False) or from the update's forward but at the last step (no update follows it)."""
    train = 1 if fused else logged
    return (
        steps * step_flops(n_train, T, d, H)
        + logged * forward_flops(n_test, T, d, H)
        + train * forward_flops(n_train, T, d, H)
    )


def floor_ratio(n_train: int, n_test: int, T: int, d: int, steps: int, fused: bool) -> float:
    """The arithmetic floor of logging every step over logging every ``COARSE`` steps (H cancels)."""
    dense = run_flops(n_train, n_test, T, d, 1, steps, steps + 1, fused)
    sparse = run_flops(n_train, n_test, T, d, 1, steps, logged_steps(steps, COARSE), fused)
    return dense / sparse


def logged_steps(steps: int, every: int) -> int:
    """How many steps ``--log-every every`` logs: 0, every, 2·every, …, and the last step."""
    return len(set(range(0, steps + 1, every)) | {steps})


# Processes


def run_process(cmd: list[str], cache: Path | None = None, phases_named: tuple[str, ...] = PHASES) -> dict:
    """One whole process: wall, CPU (user + system) and peak memory (MiB, ``ru_maxrss``) of that
    child alone (``os.wait4``), the load average before it, and the phases it printed (--timings;
    lines ``NAME SECONDS`` for the names ``phases_named``)."""
    env = child_env(ROOT)
    if cache is not None:
        env["MHSIM_CACHE_DIR"] = str(cache)
    load = os.getloadavg()[0]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage (Popen has not reaped it)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0), err.seek(0)
        stdout, stderr = out.read(), err.read()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{stderr[-3000:]}")
    phases = {}
    for line in stdout.splitlines():
        m = re.fullmatch(r"(\w+)\s+([0-9.]+)", line.strip())
        if m and m.group(1) in phases_named:
            phases[m.group(1)] = float(m.group(2))
    cpu = usage.ru_utime + usage.ru_stime
    return {"wall": wall, "cpu": cpu, "rss": usage.ru_maxrss / 1024, "load": load, "phases": phases}


def mhsim(args: list[str], out: Path, cache: Path) -> dict:
    """``python -m dynamics.run`` with ``args``, no figure, timed (``run_process``), plus the size of
    the curves.npz it wrote (bytes). ``out`` is emptied first: a finished folder would be reused,
    not run (``alternate`` calls each setting again after its untimed warm-up)."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [
        sys.executable,
        "-m",
        "dynamics.run",
        *args,
        "--out",
        str(out),
        "--no-figure",
        "--quiet",
        "--timings",
    ]
    r = run_process(cmd, cache)
    r["npz"] = (out / "curves.npz").stat().st_size
    return r


def preset_args(name: str) -> list[str]:
    """A paper preset as flags, without its logging schedule: ``--preset`` with ``--log-every`` is
    refused (the preset's ``log_points`` and the flag's ``log_every`` would both be set)."""
    from dynamics.config.schema import PRESETS as ALL
    from dynamics.config.sections import flags as declared_flags

    flags = declared_flags()  # "section.field" -> its flag, as the knobs declare them
    args = []
    for section, fields in ALL[name][1].items():
        for field, value in fields.items():
            if field in ("log_points", "log_every"):
                continue
            text = ",".join(map(str, value)) if isinstance(value, tuple | list) else str(value)
            args += [flags[f"{section}.{field}"], text]
    return args


def sized(args: list[str], steps: int | None, trials: int | None) -> list[str]:
    """``args`` with ``--steps`` and ``--trials`` set where given (``with_flags``)."""
    pairs = [(flag, str(v)) for flag, v in (("--steps", steps), ("--trials", trials)) if v is not None]
    return with_flags(args, *(item for pair in pairs for item in pair))


def sweep_args(name: str, steps: int | None, trials: int | None) -> list[str]:
    """The sweep's arguments, with the steps and trials overridden where given."""
    return sized(preset_args(name) if name in PRESETS else list(SWEEPS[name]), steps, trials)


def sizes(args: list[str]) -> dict:
    """n_train, n_test, T, d, steps of the sweep ``args``, from the command line's own parser."""
    from dynamics.cli.run import build_parser, config_from_args

    cfg = config_from_args(build_parser().parse_args(args)).config
    return {"n_train": cfg.data.n_train, "n_test": cfg.data.n_test, "T": cfg.data.T, "d": cfg.data.d,
            "steps": cfg.optim.steps}  # fmt: skip


def alternate(settings: dict[str, callable], pairs: int, label: str, warm=None) -> dict[str, list[dict]]:
    """The settings in ``warm`` (default: all) once untimed (filling the compilation cache), then
    ``pairs`` rounds running every setting, the order reversed every other round; each run printed
    as it ends."""
    names = list(settings)
    for name in names if warm is None else warm:
        settings[name]()
    runs: dict[str, list[dict]] = {n: [] for n in names}
    for i in range(pairs):
        for name in names if i % 2 == 0 else names[::-1]:
            r = settings[name]()
            runs[name].append(r)
            sim = r.get("phases", {}).get("simulation", float("nan"))
            line = f"  {label:<13} {i + 1:>2} {name:<10} sim {sim:7.2f} s  wall {r['wall']:7.2f} s  "
            print(line + f"cpu {r['cpu']:7.2f} s  rss {r['rss']:6.0f} MiB  load {r['load']:5.2f}", flush=True)
    return runs


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r["phases"]["simulation"] if key == "sim" else r[key] for r in runs)


# The three parts


def part_logging(names, steps, trials, pairs, tmp: Path) -> list[dict]:
    """Logging every step over every ``COARSE`` steps: simulation time, beside the FLOP floor."""
    rows = []
    for name in names:
        args = sweep_args(name, steps, trials) + ["--head-metrics", "off"]
        cache = tmp / f"cache-{name}"
        settings = {
            f"every {k}": partial(mhsim, [*args, "--log-every", str(k)], tmp / f"log-{name}-{k}", cache)
            for k in (1, COARSE)
        }
        runs = alternate(settings, pairs, name)
        s = sizes(args)
        dense, sparse = median(runs["every 1"], "sim"), median(runs[f"every {COARSE}"], "sim")
        rows.append({
            "sweep": name, "steps": s["steps"], "every 1 s": dense, f"every {COARSE} s": sparse,
            "ratio": dense / sparse,
            "cpu ratio": median(runs["every 1"], "cpu") / median(runs[f"every {COARSE}"], "cpu"),
            "floor (own forward)": floor_ratio(s["n_train"], s["n_test"], s["T"], s["d"], s["steps"], False),
            "floor (fused)": floor_ratio(s["n_train"], s["n_test"], s["T"], s["d"], s["steps"], True),
            "MFLOP step/test/train per head": [
                round(f(s[n], s["T"], s["d"], 1) / 1e6, 3)
                for f, n in ((step_flops, "n_train"), (forward_flops, "n_test"), (forward_flops, "n_train"))
            ],
            "load": [r["load"] for v in runs.values() for r in v],
        })  # fmt: skip
    return rows


def part_heads(steps, trials, pairs, tmp: Path) -> list[dict]:
    """The random-init sweep logging every step, --head-metrics auto against off."""
    args = sweep_args("random-init", steps, trials) + ["--log-every", "1"]
    cache = tmp / "cache-heads"
    settings = {
        mode: partial(mhsim, [*args, "--head-metrics", mode], tmp / f"heads-{mode}", cache)
        for mode in ("auto", "off")
    }
    runs = alternate(settings, pairs, "random-init")
    row = {"sweep": "random-init"}
    for key, unit in (("cpu", "s"), ("rss", "MiB"), ("wall", "s"), ("sim", "s"), ("npz", "B")):
        on, off = median(runs["auto"], key), median(runs["off"], key)
        row[key] = {"auto": on, "off": off, "ratio": on / off, "unit": unit}
    row["load"] = [r["load"] for v in runs.values() for r in v]
    return [row]


def part_torch(names, steps, trials, pairs, threads, tmp: Path) -> list[dict]:
    """Whole processes: mhsim logging every step (default per-head metrics) against the PyTorch loop."""
    rows = []
    for name in names:
        args = sweep_args(name, steps, trials) + ["--log-every", "1"]
        inputs = tmp / f"inputs-{name}.npz"
        subprocess.run(
            [sys.executable, "-m", "benchmarks.loop_inputs", "--file", str(inputs), "--", *args],
            cwd=ROOT, env=child_env(ROOT), check=True,
        )  # fmt: skip
        cache, out = tmp / f"cache-torch-{name}", tmp / f"torch-{name}"
        settings = {"mhsim": partial(mhsim, args, out / "mhsim", cache)}
        for n in threads:
            cmd = [sys.executable, "-m", "benchmarks.torch_loop", "--inputs", str(inputs),
                   "--out", str(out / f"torch-{n}.npz"), "--threads", str(n)]  # fmt: skip
            settings[f"torch {n}t"] = partial(run_process, cmd)
        out.mkdir(parents=True, exist_ok=True)
        runs = alternate(settings, pairs, name, warm=["mhsim"])  # the loop compiles nothing
        row = {
            "sweep": name,
            "mhsim wall": median(runs["mhsim"], "wall"),
            "mhsim cpu": median(runs["mhsim"], "cpu"),
        }
        for n in threads:
            wall, cpu = median(runs[f"torch {n}t"], "wall"), median(runs[f"torch {n}t"], "cpu")
            row[f"torch {n}t wall"], row[f"torch {n}t cpu"] = wall, cpu
            row[f"torch {n}t / mhsim wall"] = wall / row["mhsim wall"]
            row[f"torch {n}t / mhsim cpu"] = cpu / row["mhsim cpu"]
        row["train_loss max rel diff"] = curve_difference(
            out / "mhsim" / "curves.npz", out / f"torch-{threads[0]}.npz"
        )
        row["load"] = [r["load"] for v in runs.values() for r in v]
        rows.append(row)
    return rows


def curve_difference(mhsim_npz: Path, torch_npz: Path, key: str = "train_loss") -> float:
    """max |a − b| / |a| of one curve of the two programs (mhsim (H, trials, L), the loop (C, L)),
    over the points both have finite."""
    with np.load(mhsim_npz) as m, np.load(torch_npz) as t:
        a = m[key].astype(np.float64)
        b = t[key].astype(np.float64).reshape(a.shape)
    both = np.isfinite(a) & np.isfinite(b) & (a != 0)
    return float(np.max(np.abs(a - b)[both] / np.abs(a[both]))) if both.any() else float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.logging_cost", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--parts", nargs="+", choices=("logging", "heads", "torch"), default=["logging", "heads", "torch"]
    )
    p.add_argument(
        "--sweeps",
        nargs="+",
        choices=["random-init", *PRESETS],
        default=["random-init", *PRESETS],
        help="the sweeps of the logging part (default: the random-init sweep and the five presets)",
    )
    p.add_argument(
        "--torch-sweeps",
        nargs="+",
        choices=["random-init", "zero-init"],
        default=["random-init", "zero-init"],
        help="the sweeps of the torch part",
    )
    p.add_argument("--steps", type=int, help="override every sweep's steps (keeps the presets short)")
    p.add_argument("--trials", type=int, help="override every sweep's trials")
    p.add_argument("--pairs", type=int, default=2, help="alternating pairs per comparison (default 2)")
    p.add_argument("--threads", type=int, nargs="+", default=[2], help="the torch loop's threads (default 2)")
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--keep", type=Path, help="keep the runs' folders here (default: a temporary folder)")
    args = p.parse_args(argv)  # fmt: skip
    print(f"{os.cpu_count()} CPUs; python {sys.version.split()[0]}; load {os.getloadavg()}; code {ROOT}")
    tmp = Path(tempfile.mkdtemp(prefix="mhsim-logcost-")) if args.keep is None else args.keep
    tmp.mkdir(parents=True, exist_ok=True)
    results = {}
    try:
        if "logging" in args.parts:
            results["logging"] = part_logging(args.sweeps, args.steps, args.trials, args.pairs, tmp)
        if "heads" in args.parts:
            results["heads"] = part_heads(args.steps, args.trials, args.pairs, tmp)
        if "torch" in args.parts:
            results["torch"] = part_torch(
                args.torch_sweeps, args.steps, args.trials, args.pairs, args.threads, tmp
            )
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)
    report(results)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


def report(results: dict) -> None:
    if "logging" in results:
        print(
            f"\nlogging every step / every {COARSE} steps (simulation phase, medians; per-head metrics off)"
        )
        print(f"{'sweep':<13} {'steps':>6} {'every 1 s':>9} {f'every {COARSE} s':>11} {'ratio':>6} "
              f"{'floor':>6} {'fused':>6} {'cpu':>6}  MFLOP/head step, test, train fwd")  # fmt: skip
        for r in results["logging"]:
            print(f"{r['sweep']:<13} {r['steps']:>6} {r['every 1 s']:>9.2f} {r[f'every {COARSE} s']:>11.2f} "
                  f"{r['ratio']:>6.2f} {r['floor (own forward)']:>6.2f} {r['floor (fused)']:>6.2f} "
                  f"{r['cpu ratio']:>6.2f}  "
                  f"{r['MFLOP step/test/train per head']}")  # fmt: skip
    if "heads" in results:
        print(
            "\nper-head metrics, --head-metrics auto / off (random-init sweep, logging every step, medians)"
        )
        for key, v in results["heads"][0].items():
            if isinstance(v, dict):
                u = v["unit"]
                print(f"  {key:<5} auto {v['auto']:>12.2f} {u:<3}  off {v['off']:>12.2f} {u:<3}  "
                      f"ratio {v['ratio']:.2f}")  # fmt: skip
    if "torch" in results:
        print("\nwhole processes, the PyTorch loop / mhsim (every step logged, default per-head metrics)")
        for r in results["torch"]:
            cells = "  ".join(f"{k} {v:.3g}" for k, v in r.items() if k not in ("sweep", "load"))
            print(f"  {r['sweep']:<12} {cells}")


if __name__ == "__main__":
    sys.exit(main())
