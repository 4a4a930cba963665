"""Run the single-location authors' own code on their SGD setting and print what it reaches.

Marion, Berthier, Biau, Boyer, *Attention layers provably solve single-location regression*
(ICLR 2025, arXiv 2410.01537); code at github.com/PierreMarion23/single-location-regression.
This script only drives that code (never part of mhsim, never imported by it): it imports the
checkout's ``config.config_sgd_sphere_schedule`` and ``run.run``, changes the number of trials
and of steps, runs it from ``random.key(0)`` as their ``main.py`` does, and prints the final
|κ|, |ν|, distance to the manifold and excess risk per trial, their medians and the wall time.
Run it with the authors' own environment (their pinned jax 0.4.31, quadax 0.2.2, pandas 2.2.2):

    /path/to/authors-venv/bin/python benchmarks/authors_single_location.py CHECKOUT \
        --trials 3 --steps 200000 --csv final.csv
"""

from __future__ import annotations

import argparse
import os
import sys
import time

START = time.perf_counter()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", help="the authors' repository (config.py, run.py, dynamics.py)")
    parser.add_argument("--trials", type=int, default=3, help="n_repeats (theirs: 30)")
    parser.add_argument("--steps", type=int, default=200_000, help="n_steps (theirs: 200000)")
    parser.add_argument("--csv", default=None, help="write every logged row here")
    args = parser.parse_args()
    os.chdir(args.checkout)  # their run() pickles into ./pickles
    sys.path.insert(0, os.path.abspath(args.checkout))
    from config import config_sgd_sphere_schedule
    from jax import random
    from run import run

    config = dict(config_sgd_sphere_schedule, n_repeats=args.trials, n_steps=args.steps)
    config["filename"] = f"sgd_{args.trials}x{args.steps}"
    t0 = time.perf_counter()
    df = run(config, random.key(0))
    loop = time.perf_counter() - t0
    if args.csv:
        df.to_csv(args.csv, index=False)
    last = df[df["Step"] == df["Step"].max()]
    print(last.assign(Kappa=last["Kappa"].abs(), Nu=last["Nu"].abs()).to_string(index=False))
    cols = {"|kappa|": last["Kappa"].abs(), "|nu|": last["Nu"].abs()}
    cols.update({"distance": last["Distance to manifold"], "excess": last["Excess risk"]})
    print("median " + "  ".join(f"{k}={v.median():.4f}" for k, v in cols.items()))
    steps = args.trials * args.steps
    whole = time.perf_counter() - START
    print(f"run() {loop:.1f} s = {1e3 * loop / steps:.3f} ms/step; whole process {whole:.1f} s")


if __name__ == "__main__":
    main()
