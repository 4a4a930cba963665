"""Same numbers to the bit: run a fixed set of experiments on one checkout, compare two such folders.

A refactor that promises "no number changes" is checked with it:

    python -m benchmarks.bitwise run --repo /path/to/old --out /tmp/old
    python -m benchmarks.bitwise run --repo . --out /tmp/new
    python -m benchmarks.bitwise compare /tmp/old /tmp/new

``run`` executes, in subprocesses with ``PYTHONPATH`` set to ``--repo``: the five paper presets
and the two bottleneck presets (``python -m figures``), every teaching demo's arrays at its
quick setting, the theory replay (``--diagnostics all``, small) and three user-``.npz`` sweeps
(GD, Adam, random init). ``compare`` checks every array of every ``.npz`` bit for bit (NaN equal
to NaN) and every number in every ``results.json``-like file except timings and paths.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks import child_env

PRESETS = ("fig2", "fig3-gd", "fig3-adam", "planted-gd", "planted-adam")
BOTTLENECK = ("bottleneck-expressivity", "bottleneck-heads")

_DEMOS = """
import sys, numpy as np
from dynamics.demo import DEMOS
from dynamics.demo.common import settings_for
out = sys.argv[1]
for name, module in DEMOS.items():
    r = module.compute(settings_for(module, quick=True), seed=3)
    np.savez(f"{out}/demo-{name}.npz", **{k: np.asarray(v) for k, v in r._asdict().items()})
"""

_NPZ = """
import sys, numpy as np, jax
import datamodels
k1, k2 = jax.random.split(jax.random.PRNGKey(7))
X, y, _ = datamodels.dm1(k1, 40, T=6, d=12)
Xt, yt, _ = datamodels.dm1(k2, 60, T=6, d=12)
arrays = dict(X_train=X, y_train=y, X_test=Xt, y_test=yt)
np.savez(sys.argv[1], **{k: np.asarray(v) for k, v in arrays.items()})
"""

NPZ_RUNS = {
    "npz-gd": ["--optimizer", "gd", "--lr", "2"],
    "npz-adam": ["--optimizer", "adam", "--lr", "0.05"],
    "npz-normal": ["--init", "normal", "--init-scale", "0.5", "--lr", "1"],
}
_IGNORED_KEYS = {"wall_time_s", "timings", "command", "created", "out", "path", "seconds", "versions", "run"}


def _run(repo: Path, args: list[str], log) -> None:
    env = child_env(repo, MPLBACKEND="Agg")
    print("$", " ".join(args), flush=True)
    subprocess.run([sys.executable, *args], cwd=repo, env=env, check=True, stdout=log, stderr=log)


def run(repo: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "log.txt", "w") as log:
        common = ["--quiet", "--no-cache"]
        _run(repo, ["-m", "figures", *PRESETS, *BOTTLENECK, "--out", str(out / "figures"), *common], log)
        _run(repo, ["-c", _DEMOS, str(out)], log)
        data = Path(tempfile.gettempdir()) / "mhsim-bitwise-data.npz"  # one path: it is in the npz runs' hash
        _run(repo, ["-c", _NPZ, str(data)], log)
        small = ["--heads", "1,3", "--steps", "60", "--trials", "2", "--no-figure", *common]
        for name, flags in NPZ_RUNS.items():
            _run(
                repo,
                ["-m", "dynamics.run", "--data", str(data), *flags, *small, "--out", str(out / name)],
                log,
            )
        theory = [
            "--diagnostics",
            "all",
            "--heads",
            "1,2",
            "--steps",
            "40",
            "--trials",
            "2",
            "--n-train",
            "20",
        ]
        _run(repo, ["-m", "dynamics.run", *theory, "--no-figure", *common, "--out", str(out / "theory")], log)


def _numbers(doc, path=""):
    """(path, value) of every number and string in a JSON document, timings and paths left out."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k not in _IGNORED_KEYS:
                yield from _numbers(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _numbers(v, f"{path}[{i}]")
    else:
        yield path, doc


def compare(a: Path, b: Path) -> int:
    bad = 0
    checked = 0
    for fa in sorted(a.rglob("*")):
        rel = fa.relative_to(a)
        fb = b / rel
        if fa.suffix not in (".npz", ".json"):
            continue
        if not fb.exists():
            print(f"missing in {b}: {rel}")
            bad += 1
            continue
        if fa.suffix == ".npz":
            with np.load(fa) as za, np.load(fb) as zb:
                for k in za.files:
                    checked += 1
                    if k not in zb.files or not np.array_equal(
                        za[k], zb[k], equal_nan=za[k].dtype.kind == "f"
                    ):
                        print(f"differs: {rel}:{k}")
                        bad += 1
        else:
            ja, jb = json.loads(fa.read_text()), json.loads(fb.read_text())
            na, nb = dict(_numbers(ja)), dict(_numbers(jb))
            for k in na.keys() & nb.keys():
                checked += 1
                if na[k] != nb[k] and not (na[k] != na[k] and nb[k] != nb[k]):
                    print(f"differs: {rel}{k}: {na[k]!r} vs {nb[k]!r}")
                    bad += 1
    print(f"{checked} arrays and values compared, {bad} differ")
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--repo", type=Path, default=Path("."))
    r.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args()
    if args.cmd == "run":
        run(args.repo.resolve(), args.out.resolve())
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
