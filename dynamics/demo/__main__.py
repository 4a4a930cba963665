"""python -m dynamics.demo NAME: run a teaching demo and write its pictures.

Examples:
  python -m dynamics.demo --list
  python -m dynamics.demo attention                  # writes runs/demos/attention/attention.png and .gif
  python -m dynamics.demo symmetry --out slides/
  python -m dynamics.demo lazy-vs-rich --quick       # a tiny setting, seconds
  python -m dynamics.demo attention --slides --heads 1,4 --lr 2   # a 16:9 slide, your H and η
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from dynamics.cli.common import OneLineParser, float_arg, int_arg, int_list_arg, use_file_backend
from dynamics.demo import DEMOS, UnknownDemo, get
from dynamics.demo.common import settings_for
from dynamics.infra import interrupts


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m dynamics.demo",
        description="Teaching demos of multi-head attention training; each writes PNG pictures (and a GIF).",
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", nargs="?", help=f"the demo: {', '.join(DEMOS)}")
    p.add_argument("--list", action="store_true", help="list the demos and exit")
    p.add_argument("--out", metavar="DIR", help="output folder (default runs/demos/NAME)")
    p.add_argument("--quick", action="store_true", help="tiny setting (seconds): for tests and smoke checks")
    p.add_argument("--seed", type=int, default=0, help="PRNG seed of data and init (default 0)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--heads", type=int_list_arg, help="numbers of heads H, comma-separated (e.g. 1,4)")
    p.add_argument("--lr", type=float_arg, help="GD step size η")
    p.add_argument("--steps", type=int_arg, help="number of GD steps")
    p.add_argument(
        "--slides",
        action="store_true",
        help="a 16:9 picture with large fonts and a plain-words title, for a projector",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    return interrupts.command(
        lambda: _main(argv), lambda: "interrupted: pictures written so far are complete, the rest are missing"
    )


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        for name, module in DEMOS.items():
            print(f"{name:13s} {module.PURPOSE}")
        return 0
    if args.name is None:
        print("error: give a demo name (see --list)", file=sys.stderr)
        return 2
    if not 0 <= args.seed <= 2**32 - 1:
        print(f"error: --seed={args.seed} must be an integer in 0..{2**32 - 1}", file=sys.stderr)
        return 2
    try:
        module = get(args.name)
    except UnknownDemo as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    try:
        settings = settings_for(module, quick=args.quick, heads=args.heads, lr=args.lr, steps=args.steps)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path("runs") / "demos" / args.name
    try:
        out.mkdir(parents=True, exist_ok=True)  # fail before the computing, not after it
    except OSError as err:
        print(f"error: cannot create the output folder {str(out)!r}: {err.strerror or err}", file=sys.stderr)
        return 2
    start = time.perf_counter()
    try:
        use_file_backend()
        result = module.run(
            out, seed=args.seed, progress=not args.quiet, settings=settings, slides=args.slides
        )
    except FloatingPointError as err:  # a diverged run (the demos' settings are chosen not to)
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"error: cannot write into {str(out)!r}: {err.strerror or err}", file=sys.stderr)
        return 1
    print(f"{args.name}: {time.perf_counter() - start:.1f} s")
    for line in result.lines:
        print(f"  {line}")
    for path in result.files:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    interrupts.finish(main())
