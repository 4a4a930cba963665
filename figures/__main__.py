"""python -m figures: regenerate the papers' figures from cached or freshly produced results.

Examples:
  python -m figures                       # every figure into figures-out/
  python -m figures fig2 fig3-gd          # just these
  python -m figures --out paper/ --force  # re-run even when cached results match
  python -m figures --list                # the known figures
  python -m figures --gallery docs        # also write 1200 px PNGs for the README gallery

For each NAME, the results live in OUT/NAME/ (results.json, curves.npz) and are reused
when their config_hash matches the figure's resolved config; otherwise the experiment
runs and writes them there. The figure is OUT/NAME.png and OUT/NAME.pdf.
"""

from __future__ import annotations

import argparse
import difflib
import io
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from dynamics.cli.common import (
    OneLineParser,
    add_cpu_devices,
    apply_cpu_devices,
    import_plotting_meanwhile,
    use_file_backend,
)
from dynamics.infra import interrupts

DEFAULT_OUT = Path("figures-out")
GALLERY_WIDTH = 1200  # px: small enough for a README, large enough to read


def build_parser(names) -> argparse.ArgumentParser:
    from dynamics.infra.cache import add_flag as add_cache_flag

    p = OneLineParser(
        prog="python -m figures",
        description=(
            "Regenerate figures into one folder, running only the experiments whose results are missing."
        ),
        epilog=__doc__.split("\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "names", nargs="*", metavar="NAME", help=f"figures to make (default: all of {', '.join(names)})"
    )
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--force", action="store_true", help="re-run the experiments even if cached results match")
    p.add_argument("--list", action="store_true", help="list the known figures and exit")
    p.add_argument("--gallery", type=Path, metavar="DIR", help=f"also write {GALLERY_WIDTH} px PNGs into DIR")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    add_cpu_devices(p)
    add_cache_flag(p)
    p.add_argument(
        "--timings",
        action="store_true",
        help="print the seconds spent importing, drawing data, compiling, simulating, writing and plotting",
    )
    return p


def gallery_png(src: Path, dst: Path, width: int = GALLERY_WIDTH) -> Path:
    """A downscaled, palette-quantised copy of the PNG ``src`` (for a README), written atomically."""
    from PIL import Image

    from dynamics.infra.files import atomic_write_bytes

    with Image.open(src) as im:
        im = im.convert("RGB")
        height = round(im.height * width / im.width)
        small = im.resize((width, height), Image.Resampling.LANCZOS)
    small = small.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    buf = io.BytesIO()
    small.save(buf, format="PNG", optimize=True)
    atomic_write_bytes(dst, buf.getvalue())
    return dst


def main(argv: list[str] | None = None) -> int:
    from dynamics.infra.timings import Timings

    timings = Timings().start()
    where: dict[str, str] = {}  # the figure being made
    try:
        return interrupts.command(lambda: _main(argv, timings, where), lambda: _interrupted(where))
    finally:
        timings.stop()


def _interrupted(where: dict[str, str]) -> str:
    if "name" not in where:
        return "interrupted: nothing was written"
    return f"{where['name']}: interrupted; results of earlier figures are kept"


def _main(argv: list[str] | None, timings, where: dict[str, str]) -> int:
    from dynamics.config.schema import ConfigError
    from dynamics.infra.cache import apply as apply_cache

    with timings.phase("imports"):
        use_file_backend()
        from figures.registry import FIGURES

    args = build_parser(list(FIGURES)).parse_args(argv)
    try:
        for flag, path in (("--out", args.out), ("--gallery", args.gallery)):
            if path is not None and (not str(path).strip() or (path.exists() and not path.is_dir())):
                raise ConfigError(f"{flag} {str(path)!r} is not a folder")
        apply_cpu_devices(args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.list:
        for name, entry in FIGURES.items():
            print(f"{name:24s} {entry.description}")
        return 0
    names = args.names or list(FIGURES)
    for name in names:
        if name not in FIGURES:
            close = difflib.get_close_matches(name, list(FIGURES), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            print(f"error: unknown figure {name!r}{hint}; known: {', '.join(FIGURES)}", file=sys.stderr)
            return 2
    apply_cache(args)
    timings.listen()
    import_plotting_meanwhile()  # while the first experiment runs
    _make_figures(list(dict.fromkeys(names)), args, timings, where)
    timings.stop()
    if args.timings:
        print(timings.report())
    return 0


def _make_figures(names: list[str], args: argparse.Namespace, timings, where: dict[str, str]) -> None:
    """Each figure's results (reused or produced), then the figure, drawn in a thread while the
    next experiment runs (which waits in compiled code, without the GIL); one figure at a time,
    its paths printed once it is written."""
    from dynamics.sweeps.results import complete_results_hash
    from figures.registry import FIGURES, ensure_results

    out: Path = args.out
    drawing = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mhsim-figure")
    in_flight = None
    try:
        for name in names:
            entry = FIGURES[name]
            results_dir = out / name
            key = entry.key()
            if complete_results_hash(results_dir) != key or args.force:
                print(f"{name}: running the experiment into {results_dir} (config hash {key})", flush=True)
            start = time.perf_counter()
            where["name"] = name
            status = ensure_results(entry, results_dir, force=args.force, progress=not args.quiet)
            took = time.perf_counter() - start
            if status == "reused":
                print(f"{name}: reusing {results_dir} (config hash {key} matches)", flush=True)
            else:
                print(f"{name}: done in {took:.0f} s", flush=True)
            if in_flight is not None:
                _drawn(in_flight, args, timings)
            with timings.phase("imports"):
                import figures.sweep  # noqa: F401  (matplotlib; a no-op after the first figure)
            in_flight = drawing.submit(entry.plot, results_dir, out / name)
        if in_flight is not None:
            _drawn(in_flight, args, timings)
    finally:
        drawing.shutdown(wait=True)


def _drawn(figure: Future, args: argparse.Namespace, timings) -> None:
    """Wait for a figure being drawn (the wait is the ``plotting`` phase: the drawing itself ran
    beside the next experiment) and report its files."""
    with timings.phase("plotting"):
        paths = figure.result()
    for path in paths:
        print(f"  wrote {path}", flush=True)
        if args.gallery and path.suffix == ".png":
            print(f"  wrote {gallery_png(path, args.gallery / path.name)}", flush=True)


if __name__ == "__main__":
    interrupts.finish(main())
