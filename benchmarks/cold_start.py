"""Time to first result: whole command-line processes, first run (empty compilation cache)
and second run (the cache filled by the first), with the per-phase breakdown the programs
print with ``--timings``.

    python -m benchmarks.cold_start                    # the four commands below
    python -m benchmarks.cold_start --only sweep       # one of them
    python -m benchmarks.cold_start --repo ../old --plain   # another checkout, wall time only

Each command runs in a fresh subprocess with ``MHSIM_CACHE_DIR`` set to a new temporary
folder (first run) and again with the same folder (second run); results go to temporary
folders too (``python -m figures`` gets ``--force`` on the second run, so the experiments
run again and only the compiles come from the cache). The load average is printed with each
run, and the CPU time (user + system) of the process: the machine is shared, and on a busy
machine the CPU time is the steadier measure of the work (JAX's compiler and runtime use
several threads, so it can also exceed the wall time).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import child_env

ROOT = Path(__file__).resolve().parents[1]
PRESETS = ("fig2", "fig3-gd", "fig3-adam", "planted-gd", "planted-adam")
SWEEP = "--data-model dm1 --heads 1,2,4,8,16,32,64 --lr 1 --lr-scaling linear --trials 5 --steps 1000"
SWEEP += " --log-every 1"
COMMANDS = {  # name -> (module, arguments, arguments of the second run only)
    "default": ("dynamics.run", [], []),
    "sweep": ("dynamics.run", SWEEP.split(), []),
    "fig2": ("dynamics.run", ["--preset", "fig2"], []),
    "figures": ("figures", list(PRESETS), ["--force"]),
}
PHASES = ("imports", "data", "compile", "simulation", "writing", "plotting", "other", "total")


def run(module: str, args: list[str], repo: Path, cache: str, out: Path, timings: bool) -> dict:
    """One process: wall time, the load average before it, and its --timings table."""
    env = child_env(repo, MHSIM_CACHE_DIR=cache)
    cmd = [sys.executable, "-m", module, *args, "--out", str(out), "--quiet"]
    if timings:
        cmd.append("--timings")
    load = os.getloadavg()[0]
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=out.parent, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    phases = {}
    for line in proc.stdout.splitlines():
        m = re.fullmatch(r"(\w+)\s+([0-9.]+)", line.strip())
        if m and m.group(1) in PHASES:
            phases[m.group(1)] = float(m.group(2))
    programs = re.search(r"programs: (\d+) \((\d+) compiled, (\d+) from", proc.stdout)
    return {
        "wall": wall,
        "cpu": cpu,
        "load": load,
        "phases": phases,
        "compiled": int(programs.group(2)) if programs else None,
        "cached": int(programs.group(3)) if programs else None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cold_start", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", nargs="*", choices=list(COMMANDS), help="run only these commands")
    p.add_argument("--repo", type=Path, default=ROOT, help="the checkout whose code runs (default: this one)")
    p.add_argument("--plain", action="store_true", help="no --timings (for a checkout without it): wall only")
    p.add_argument("--runs", type=int, default=2, help="runs per command sharing one cache (default 2)")
    args = p.parse_args(argv)
    print(f"{os.cpu_count()} CPUs; python {sys.version.split()[0]}; code from {args.repo}")
    header = f"{'command':<9} {'run':>3} {'wall s':>7} {'cpu s':>6} {'load':>5}  "
    header += " ".join(f"{k:>8}" for k in PHASES)
    print(header + "  compiled/cached")
    for name in args.only or list(COMMANDS):
        module, cmd_args, again = COMMANDS[name]
        with tempfile.TemporaryDirectory(prefix="mhsim-cold-") as tmp:
            cache = str(Path(tmp) / "jax-cache")
            for i in range(args.runs):
                extra = again if i else []
                r = run(module, cmd_args + extra, args.repo, cache, Path(tmp) / f"out{i}", not args.plain)
                cells = " ".join(f"{r['phases'].get(k, float('nan')):>8.2f}" for k in PHASES)
                progs = "" if r["compiled"] is None else f"  {r['compiled']}/{r['cached']}"
                line = f"{name:<9} {i + 1:>3} {r['wall']:>7.2f} {r['cpu']:>6.2f} {r['load']:>5.2f}  "
                print(line + cells + progs, flush=True)
    with tempfile.TemporaryDirectory() as elsewhere:  # python -m puts the cwd first on sys.path
        help_start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "dynamics.run", "--help"],
            cwd=elsewhere,
            env=child_env(args.repo),
            capture_output=True,
            check=True,
        )
    print(f"python -m dynamics.run --help: {time.perf_counter() - help_start:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
