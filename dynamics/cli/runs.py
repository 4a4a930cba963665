"""``mhsim runs [ROOT]`` (or ``python -m dynamics.cli.runs [ROOT]``): the runs saved under ROOT.

One line per run folder × grid point × H (``dynamics.load_runs``): the folder, its kind, H, the
knobs whose values differ between the lines, and the final losses and errors (means over the
trials that did not diverge) with the diverged count. A folder that holds no results, or
damaged ones, is named on a ``warning:`` line and skipped.
"""

from __future__ import annotations

import argparse
import sys
import warnings

from dynamics.cli.common import OneLineParser
from dynamics.errors import ConfigError
from dynamics.infra import interrupts

# the final numbers shown, as load_runs names them, and their titles
SHOWN = {
    "train_loss_mean": "train loss",
    "test_loss_mean": "test loss",
    "train_error_mean": "train err",
    "test_error_mean": "test err",
}
# the columns that say which run and row a line is, never listed among the differing knobs
OWN = ("run", "kind", "complete", "H", "trials", "n_diverged")


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="mhsim runs",
        description="List the sweeps and grids saved under a folder: one line per run × grid "
        "point × H, with the knobs that differ between them and the final numbers.",
    )
    p.add_argument("root", nargs="?", default="runs", help="the folder to search (default runs)")
    return p


def format_runs(frame) -> str:
    """The compact table of ``load_runs``' frame: run, kind, H, the differing knobs, the final
    numbers, diverged/trials; ``complete`` only when a run is not."""
    if frame.empty:
        return "no runs"
    metrics = [m for m in SHOWN if m in frame]
    knobs = [
        c
        for c in frame.columns
        if c not in OWN and c not in metrics and not c.endswith(("_mean", "_std", "_n"))
        and frame[c].astype(str).nunique() > 1
    ]  # fmt: skip
    table = frame[["run", "kind", "H", *knobs]].copy()
    if not frame["complete"].all():
        table.insert(2, "complete", frame["complete"])
    for m in metrics:
        table[SHOWN[m]] = frame[m].map(lambda v: "-" if v != v else f"{v:.4g}")  # NaN: every trial diverged
    table["diverged"] = [f"{n}/{t}" for n, t in zip(frame["n_diverged"], frame["trials"], strict=True)]
    return table.to_string(index=False)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    return interrupts.command(lambda: _main(argv), lambda: "interrupted: nothing was written")


def _main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from dynamics.api import load_runs  # lazy: JAX: only once the command line is read

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            frame = load_runs(args.root)
        except ConfigError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    for w in caught:
        print(f"warning: {w.message}", file=sys.stderr)
    print(format_runs(frame))
    return 0


if __name__ == "__main__":
    interrupts.finish(main())
