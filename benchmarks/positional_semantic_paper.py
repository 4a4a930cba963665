"""The positional-semantic preset at the paper's d = 1000 beside the authors' GD runs (their
empirics CSVs: per-point means and per-run sds over 24 runs, ω = 0.3, σ = 0.5, λ = 0.01).

    python benchmarks/positional_semantic_paper.py CHECKOUT --trials K --out DIR [--alphas ...] [--seeds 0 1]

CHECKOUT: the authors' repository (a working tree with ``empirics/``, or a bare git directory).
Each α (n = round(α·d)) runs both starts with K paired trials
(``dynamics.experiments.positional_semantic_paper.simulate``) and is kept in DIR as
``alpha-<n>.npz`` (``alpha-<n>-seed<s>.npz`` for a seed s other than 0), so a rerun with the same
sizes only adds the α not yet there; ``--seeds`` runs K trials per seed (each seed other trials)
and compares all of them (k = K × seeds). It prints, per α
and start, the test error, m, θ and the objective: ours (mean ± sd, k) beside theirs (mean, sd,
runs), the tolerance 3·√(sd²/k + sd²/24) (sd theirs) and PASS/FAIL; then the paired crossing
of the objectives with its bootstrap spread, PASS when it lies in [1.25, 1.42].
"""

from __future__ import annotations

import argparse
import io
import subprocess
import time
from pathlib import Path

import numpy as np
import pandas as pd

from dynamics.errors import ConfigError
from dynamics.experiments import positional_semantic as ps
from dynamics.experiments import positional_semantic_paper as pp

# their column for each of our quantities (attention_train_error: the objective Σ loss + λ/2‖Q‖²)
COLUMNS = {
    "test_loss": "attention_gen_error_mean",
    "m": "attention_mag_mean",
    "theta": "attention_theta_mean",
    "objective": "attention_train_error_mean",
}
CHECKED = ("test_loss", "m", "theta")  # the acceptance's numbers; the objective is shown beside
CROSSING_RANGE = (1.25, 1.42)
DEFAULT_ALPHAS = tuple(float(a) for a in pp.PAPER_ALPHAS[14:18]) + (2.0,)  # 1.17 … 1.42, and 2


def read_csv(checkout: Path, name: str) -> pd.DataFrame:
    """``empirics/<name>`` of the authors' repository: a working tree or a bare git directory."""
    path = checkout / "empirics" / name
    if path.exists():
        return pd.read_csv(path)
    text = subprocess.run(
        ["git", f"--git-dir={checkout}", "show", f"HEAD:empirics/{name}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return pd.read_csv(io.StringIO(text))


def authors(checkout: Path, omega=0.3, sigma=0.5, lam=0.01) -> dict:
    """{(α rounded to 4 places, start): {quantity: (mean, sd)}} of the authors' GD runs at d = 1000
    (informed True: the semantic start; False: the positional start, their pos-init runs)."""
    out = {}
    frames = [read_csv(checkout, f"results_{kind}_standardA.csv") for kind in ("mean", "std")]
    for k, df in enumerate(frames):
        sel = (df.d == 1000) & (df.optim == "GD") & np.isclose(df.omega, omega) & np.isclose(df.sigma, sigma)
        for _, row in df[sel & np.isclose(df.attention_lmbda, lam)].iterrows():
            start = "semantic" if row.informed else "positional"
            entry = out.setdefault((round(float(row.alpha), 4), start), {})
            for q, col in COLUMNS.items():
                entry.setdefault(q, [np.nan, np.nan])[k] = float(row[col])
    return out


def load_or_run(alpha: float, args, seed: int = 0) -> dict:
    """One α's {start: {quantity: (trials,)}} of one seed, from DIR when it holds this α at these
    sizes."""
    n = int(round(alpha * args.d))
    path = args.out / (f"alpha-{n}.npz" if seed == 0 else f"alpha-{n}-seed{seed}.npz")
    sizes = np.array([args.d, args.steps, args.n_test, args.trials])
    if path.exists():
        with np.load(path) as f:
            if np.array_equal(f["sizes"], sizes):
                return {s: {q: f[f"{s}/{q}"] for q in pp.QUANTITIES} for s in ps.STARTS}
    t0 = time.perf_counter()
    got = pp.simulate(
        [alpha],
        args.trials,
        d=args.d,
        steps=args.steps,
        n_test=args.n_test,
        chunk=args.chunk,
        progress=True,
        seed=seed,
    )
    print(f"α = {alpha:.4f} (n = {n}), seed {seed}: {time.perf_counter() - t0:.0f} s", flush=True)
    one = {s: {q: got[s][q][0] for q in pp.QUANTITIES} for s in ps.STARTS}
    args.out.mkdir(parents=True, exist_ok=True)
    arrays = {f"{s}/{q}": v for s, qs in one.items() for q, v in qs.items()}
    np.savez(path, sizes=sizes, **arrays)
    return one


def table(alphas, ours: list[dict], theirs: dict) -> tuple[list[str], bool]:
    """The comparison's lines and whether every checked number passes."""
    lines = [
        "| α | start | quantity | ours: mean ± sd (k) | theirs: mean, sd (runs) | |diff| | tolerance | |",
        "|---|---|---|---|---|---|---|---|",
    ]
    ok = True
    for alpha, one in zip(alphas, ours, strict=True):
        for start in ps.STARTS:
            ref = theirs.get((round(alpha, 4), start))
            for q in pp.QUANTITIES:
                v = one[start][q]
                mean, sd, k = (
                    float(np.mean(v)),
                    float(np.std(v, ddof=1)) if len(v) > 1 else float("nan"),
                    len(v),
                )
                if ref is None:
                    lines.append(f"| {alpha:.4f} | {start} | {q} | {mean:.4g} ± {sd:.2g} ({k}) | — | | | |")
                    continue
                their_mean, their_sd = ref[q]
                tol, diff = float(pp.tolerance(their_sd, k)), abs(mean - their_mean)
                verdict = ("PASS" if diff <= tol else "FAIL") if q in CHECKED else "(shown)"
                ok &= verdict != "FAIL"
                lines.append(
                    f"| {alpha:.4f} | {start} | {q} | {mean:.4g} ± {sd:.2g} ({k}) | {their_mean:.4g}, "
                    f"{their_sd:.2g} ({pp.PAPER_RUNS}) | {diff:.2g} | {tol:.2g} | {verdict} |"
                )
    return lines, ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkout", type=Path, help="the authors' repository (working tree or bare git dir)")
    p.add_argument("--out", type=Path, required=True, help="folder keeping each α's runs")
    p.add_argument("--trials", type=int, default=4)
    p.add_argument("--alphas", type=float, nargs="+", default=DEFAULT_ALPHAS)
    p.add_argument("--d", type=int, default=pp.PAPER_D)
    p.add_argument("--steps", type=int, default=pp.PAPER_STEPS)
    p.add_argument("--n-test", dest="n_test", type=int, default=pp.PAPER_N_TEST)
    p.add_argument("--chunk", type=int, default=2000, help="test examples evaluated at once")
    p.add_argument("--seeds", type=int, nargs="+", default=[0], help="sweep seeds, K trials each (default 0)")
    args = p.parse_args(argv)
    alphas = sorted(args.alphas)
    if len(set(args.seeds)) != len(args.seeds) or min(args.seeds) < 0:
        p.error(f"--seeds must be distinct and non-negative, got {args.seeds}")
    try:
        by_seed = [[load_or_run(a, args, seed) for a in alphas] for seed in args.seeds]
    except ConfigError as e:  # e.g. the grid's time limit: one line, no traceback
        print(f"error: {e}")
        return 2
    ours = [
        {s: {q: np.concatenate([run[i][s][q] for run in by_seed]) for q in pp.QUANTITIES} for s in ps.STARTS}
        for i in range(len(alphas))
    ]
    lines, ok = table(alphas, ours, authors(args.checkout))
    k = args.trials * len(args.seeds)
    print(f"d = {args.d}, {args.steps} steps, n_test = {args.n_test}, k = {k} (seeds {args.seeds})")
    print("\n".join(lines))
    diff = np.stack([one["semantic"]["objective"] - one["positional"]["objective"] for one in ours])
    cross = pp.paired_crossing(alphas, diff)
    inside = CROSSING_RANGE[0] <= cross["crossing"] <= CROSSING_RANGE[1]
    print(
        f"paired crossing α = {cross['crossing']:.3f} "
        f"(bootstrap 16–84 %: {cross['lo']:.3f}–{cross['hi']:.3f}, "
        f"sd {cross['sd']:.3f}, no crossing in {100 * cross['none']:.0f} % of draws): "
        f"{'PASS' if inside else 'FAIL'} (range {CROSSING_RANGE[0]}–{CROSSING_RANGE[1]})"
    )
    for alpha, row in zip(alphas, diff, strict=True):
        print(f"  α = {alpha:.4f}: semantic − positional objective {row.mean():+.4f} ± {row.std():.4f}")
    return 0 if ok and inside else 1


if __name__ == "__main__":
    raise SystemExit(main())
