"""mhsim's replica solver (``dynamics.theory.positional_semantic``) beside the authors' theory CSVs.

Cui, Behrens, Krzakala, Zdeborová (NeurIPS 2024, arXiv 2402.03902); their repository
github.com/SPOC-group/positional-and-semantic-attention keeps the solved saddle point per α in
``theory/repl_softmax_Mixed_sig0.5_lamb0.01_omega<ω>.csv`` (the semantic minimum) and
``..._para.csv`` (the positional one), in the theory's units: θ = σ²·Q*ᵀQ/d, mse = 2·test error,
Phi = −objective/d. Their data are not part of mhsim: point this script at a checkout of theirs
(an argument, or the environment variable ``MHSIM_PSA_CHECKOUT``). At every α of theirs it solves
both branches (each from the largest α down, every α started from its neighbour's fixed point) and
prints m, θ, mse and Phi beside theirs, each within 1 % or 2·10⁻⁴ absolute or not, then the
crossing α_c of the two objectives (ours by bisection between the grid points where our gap
changes sign with ``--bisect``, else interpolated; theirs by linear interpolation of their Phi);
``--write`` stores our curves (the package's ``positional_semantic_curve.csv`` is written so):

    PYTHONPATH=. python benchmarks/replica_theory.py /path/to/checkout --omega 0.3 --nodes 12 \
        --inner 6 --bisect [--envelope origin] [--saddle stroud-secrest] [--from-start] \
        [--csv out.csv] [--write curve.csv]

``--saddle stroud-secrest`` solves the fixed point on the authors' own degree-7 rule.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path

import numpy as np

from dynamics.errors import ConfigError
from dynamics.theory import positional_semantic as ps

ENV = "MHSIM_PSA_CHECKOUT"
COLUMNS = ("m", "theta", "mse", "Phi")  # compared, in the theory's units
RTOL, ATOL = 0.01, 2e-4
FILES = {"semantic": "", "positional": "_para"}  # the CSV suffix of each branch


def checkout(path: str | None = None) -> Path | None:
    """The authors' checkout (the argument, else $MHSIM_PSA_CHECKOUT), None when absent."""
    path = path or os.environ.get(ENV)
    return Path(path) if path and (Path(path) / "theory").is_dir() else None


def their_omegas(root: Path) -> list[float]:
    """The ω with both branches' theory CSVs in their checkout (standard A)."""
    found = []
    for path in (root / "theory").glob("repl_softmax_Mixed_sig0.5_lamb0.01_omega*.csv"):
        value = path.stem.rsplit("omega", 1)[1]
        if value.replace(".", "", 1).isdigit() and path.with_name(f"{path.stem}_para.csv").exists():
            found.append(float(value))
    return sorted(found)


def theirs(root: Path, omega: float, branch: str) -> list[dict]:
    """Their rows of a branch at ω, α increasing, each {alpha, q, m, V, theta, mse, Phi}; a ω
    without their CSVs is a ConfigError naming the ω they have."""
    name = f"repl_softmax_Mixed_sig0.5_lamb0.01_omega{omega:g}{FILES[branch]}.csv"
    have = [f"{w:g}" for w in their_omegas(root)]
    if f"{omega:g}" not in have:
        have = ", ".join(have)
        raise ConfigError(f"omega={omega:g}: no theory CSV of theirs; allowed: {have}")
    with open(root / "theory" / name, newline="") as f:
        rows = [{k: float(v) for k, v in row.items() if k} for row in csv.DictReader(f)]
    return sorted(rows, key=lambda row: row["alpha"])


def agrees(ours: float, ref: float) -> bool:
    """Within 1 % or 2·10⁻⁴ absolute."""
    return abs(ours - ref) <= max(RTOL * abs(ref), ATOL)


def compare(
    root: Path, omega: float = 0.3, alphas=None, branches=None, show=None, from_start=False, **solver
):
    """Per α of theirs (or the given subset) and branch: our and their m, θ, mse, Phi; each branch
    solved from the largest α down, each α started from the previous one's fixed point
    (``ps.curve``), or with ``from_start`` from the branch's start (as the authors' notebook starts
    every α); ``show`` is called with each row as it is solved. Returns (rows, points)."""
    out, points = [], []
    for branch in branches or ("semantic", "positional"):
        rows = theirs(root, omega, branch)[::-1]
        if alphas is not None:
            rows = [row for row in rows if any(abs(row["alpha"] - a) < 1e-9 for a in alphas)]
        previous = None
        for row in rows:
            init = None if previous is None or from_start else ps.overlaps_of(previous)
            try:
                point = ps.solve(ps.problem(row["alpha"], omega), branch, init=init, **solver)
            except ConfigError as err:  # no fixed point reached: said, and the next α goes on
                print(f"{branch:10s} alpha {row['alpha']:.4f}  {err}", flush=True)
                continue
            points.append(point)
            previous = point
            line = {"branch": branch, "alpha": row["alpha"], "iterations": point.iterations}
            for col in COLUMNS:
                mine = abs(point.raw[col]) if col in ("m", "theta") else point.raw[col]
                line[col], line[col + "_theirs"] = mine, abs(row[col]) if col in ("m", "theta") else row[col]
                line[col + "_ok"] = agrees(line[col], line[col + "_theirs"])
            out.append(line)
            if show is not None:
                show(line)
    return out, points


def _last_change(sem: list[dict], pos: list[dict]) -> tuple[tuple[float, float], float] | None:
    """Where Phi_semantic − Phi_positional of rows at the same α (increasing) last changes sign:
    ((α below, α above), the zero linearly interpolated between them), None if it never does."""
    a = np.array([r["alpha"] for r in sem])
    gap = np.array([s["Phi"] - p["Phi"] for s, p in zip(sem, pos, strict=True)])
    changes = np.nonzero(np.diff(np.sign(gap)))[0]
    if not changes.size:
        return None
    i = int(changes[-1])
    return (a[i], a[i + 1]), float(a[i] - gap[i] * (a[i + 1] - a[i]) / (gap[i + 1] - gap[i]))


def their_crossing(root: Path, omega: float) -> float | None:
    """Their α_c: linear interpolation of Phi_semantic − Phi_positional on their grid, at its last
    change of sign (at α = 0.01 both branches are near Q = 0 and theirs differ by 4·10⁻⁹ in Phi,
    the semantic one higher: a change of sign there is no crossing of the two minima); None
    without a change of sign."""
    found = _last_change(theirs(root, omega, "semantic"), theirs(root, omega, "positional"))
    return None if found is None else found[1]


def our_crossing(sem: list[dict], pos: list[dict], args, solver: dict) -> float | None:
    """Our α_c: where Phi_semantic − Phi_positional last changes sign between two solved α, linearly
    interpolated, or with ``--bisect`` solved there by bisection (``ps.crossing``); None without
    a change of sign."""
    found = _last_change(*(sorted(rows, key=lambda r: r["alpha"]) for rows in (sem, pos)))
    if found is None or not args.bisect:
        return None if found is None else found[1]
    lo, hi = found[0]
    return ps.crossing(args.omega, lo, hi, xtol=1e-4, **solver)


def chosen_alphas(root: Path, omega: float, text: str) -> list[float]:
    """``--alphas``: comma-separated numbers, each one of their α at ω (to 10⁻⁶), as their CSV
    spells it; anything else is a ConfigError naming it and theirs."""
    have = [row["alpha"] for row in theirs(root, omega, "semantic")]
    out = []
    for item in text.split(","):
        try:
            value = float(item)
        except ValueError:
            value = float("nan")
        match = [a for a in have if abs(a - value) < 1e-6]
        if not match:
            allowed = ", ".join(f"{a:.6g}" for a in have)
            where = f"is not one of their alphas at omega={omega:g}"
            raise ConfigError(f"--alphas {item!r} {where}; allowed: {allowed}")
        out.append(match[0])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", nargs="?", help=f"the authors' repository (default ${ENV})")
    parser.add_argument("--omega", type=float, default=0.3)
    parser.add_argument("--nodes", type=int, default=16, help="Gauss-Hermite nodes per axis of xi")
    parser.add_argument("--inner", type=int, default=8, help="Gauss-Hermite nodes per axis of w")
    parser.add_argument("--csv", default=None, help="write the comparison here")
    parser.add_argument("--alphas", default=None, help="a comma-separated subset of their alphas")
    parser.add_argument("--branch", choices=("semantic", "positional"), default=None)
    parser.add_argument("--bisect", action="store_true", help="alpha_c by bisection, not interpolated")
    parser.add_argument("--envelope", choices=ps.ENVELOPES, default="lowest", help="the envelope's minimum")
    parser.add_argument(
        "--saddle",
        choices=ps.SADDLE_RULES,
        default="product",
        help="the rule of the fixed point: the Gauss-Hermite product rule (default) or the authors' "
        "degree-7 Stroud-Secrest rule (the test error and Phi stay on the product rule)",
    )
    parser.add_argument(
        "--from-start",
        action="store_true",
        help="start every alpha from the branch's start (as the authors do), not from its neighbour",
    )
    parser.add_argument("--write", default=None, help="write our solved curves here (ps.write_curve)")
    args = parser.parse_args()
    root = checkout(args.checkout)
    if root is None:
        raise SystemExit(f"no checkout with theory/: pass its path or set ${ENV}")
    try:  # the rule and ω before any solving: one line each
        ps.rule(args.nodes, args.inner)
        theirs(root, args.omega, "semantic")
    except ConfigError as err:
        parser.error(str(err))
    t0 = time.perf_counter()

    def show(r):
        cells = "  ".join(
            f"{c} {r[c]:.6g}/{r[c + '_theirs']:.6g}{'' if r[c + '_ok'] else ' *'}" for c in COLUMNS
        )
        print(f"{r['branch']:10s} alpha {r['alpha']:.4f}  {cells}", flush=True)

    try:
        alphas = None if args.alphas is None else chosen_alphas(root, args.omega, args.alphas)
    except ConfigError as err:
        parser.error(str(err))
    branches = None if args.branch is None else (args.branch,)
    solver = {"nodes": args.nodes, "inner": args.inner, "envelope": args.envelope, "saddle": args.saddle}
    rows, points = compare(root, args.omega, alphas, branches, show, args.from_start, **solver)
    bad = sum(not r[c + "_ok"] for r in rows for c in COLUMNS)
    print(f"{bad} of {len(rows) * len(COLUMNS)} numbers outside 1 % / 2e-4 (marked *)")
    sem = [r for r in rows if r["branch"] == "semantic"]
    pos = [r for r in rows if r["branch"] == "positional"]
    if alphas is None and sem and [r["alpha"] for r in sem] == [r["alpha"] for r in pos]:
        ours, others = our_crossing(sem, pos, args, solver), their_crossing(root, args.omega)
        text = ["no change of sign on the grid" if a is None else f"{a:.4f}" for a in (ours, others)]
        print(f"alpha_c: mhsim {text[0]}, theirs {text[1]}")
    print(f"{time.perf_counter() - t0:.0f} s")
    if args.write:
        A = ",".join(f"{a:g}" for a in np.ravel(ps.STANDARD_A))
        settings = f"omega={args.omega:g} sigma=0.5 lam=0.01 A={A} nodes={args.nodes} inner={args.inner}"
        saddle = "" if args.saddle == "product" else f" saddle={args.saddle}"
        ps.write_curve(args.write, points, f"{settings} envelope={args.envelope}{saddle} tol=1e-07")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


if __name__ == "__main__":
    main()
