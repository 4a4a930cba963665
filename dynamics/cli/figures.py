"""python -m figures (``mhsim figures``): regenerate the papers' figures from cached or new results.

Examples:
  python -m figures                       # every figure into figures-out/
  python -m figures fig2 fig3-gd          # just these
  python -m figures --out paper/ --force  # re-run even when cached results match
  python -m figures --list                # the known figures
  python -m figures --gallery docs        # also write 1200 px PNGs for the README gallery
  python -m figures --results runs/g --axes lr,n_train   # redraw a run folder's grid figure
  python -m figures heads-vs-samples --axes n_train --at H=4  # a grid figure's knobs chosen
  python -m figures --results runs/s --heads                 # what each head of the largest H does
  python -m figures --results runs/s --heads --at H=4,trial=1 --steps 0,100,1000

For each NAME, the results live in OUT/NAME/ (results.json, curves.npz) and are reused
when their config_hash matches the figure's resolved config; otherwise the experiment
runs and writes them there. The figure is OUT/NAME.png and OUT/NAME.pdf.

--heads draws one run (one H, one trial) of a saved sweep that logged per-head metrics
(python -m dynamics.run --head-metrics on): heatmaps head × planted direction of |cos| at
--steps (default: the first logged step after 0, the middle one and the last) and per-head curves,
into DIR/heads-H<H>-trial<k>.png and .pdf.
"""

from __future__ import annotations

import argparse
import difflib
import io
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path

from dynamics.cli.common import (
    OneLineParser,
    add_cpu_devices,
    apply_cpu_devices,
    import_plotting_meanwhile,
    use_file_backend,
)
from dynamics.config.schema import ConfigError
from dynamics.infra import interrupts
from dynamics.infra.cache import add_flag as add_cache_flag
from dynamics.infra.cache import apply as apply_cache
from dynamics.infra.files import atomic_write_bytes
from dynamics.infra.timings import Timings
from dynamics.parts.values import comma_items

DEFAULT_OUT = Path("figures-out")
GALLERY_WIDTH = 1200  # px: small enough for a README, large enough to read


def build_parser(names) -> argparse.ArgumentParser:
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
    p.add_argument(
        "--results",
        type=Path,
        metavar="DIR",
        help="redraw the figure of a saved run folder (python -m dynamics.run --out DIR) into DIR/figure",
    )
    p.add_argument(
        "--axes",
        metavar="X[,Y]",
        help="a grid's plotted knobs, horizontal first (lr,n_train; lr,H; noise); one panel per H "
        "when H is not one of them",
    )
    p.add_argument(
        "--at",
        metavar="KNOB=V[,…]",
        help="a grid's values of knobs not plotted (n_train=100; H=4: that H alone; optimizer=adam: a "
        "categorical knob's name, that name's figure alone); default their first; "
        "with --heads: the run, H=4,trial=1 (default the largest H, trial 0)",
    )
    p.add_argument(
        "--heads",
        action="store_true",
        help="with --results: the per-head figure of one run of the sweep (--at H=…,trial=…, --steps) "
        "into DIR/heads-H<H>-trial<k>",
    )
    p.add_argument(
        "--steps",
        metavar="T[,T…]",
        help="with --heads: the logged steps of its heatmaps (default first after 0, middle, last)",
    )
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
    from PIL import Image  # lazy: Pillow: only for a README's copy

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
    with timings.phase("imports"):
        use_file_backend()
        from figures.registry import FIGURES  # lazy: every figure's module: not for --help

    args = build_parser(list(FIGURES)).parse_args(argv)
    try:
        for flag, path in (("--out", args.out), ("--gallery", args.gallery)):
            if path is not None and (not str(path).strip() or (path.exists() and not path.is_dir())):
                raise ConfigError(f"{flag} {str(path)!r} is not a folder")
        apply_cpu_devices(args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if (args.heads or args.steps is not None) and args.results is None:
        print(
            "error: --heads and --steps draw one run of a saved sweep: give its folder with --results DIR",
            file=sys.stderr,
        )
        return 2
    if args.results is not None:
        return _redraw(args)
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
    grid_options = _grid_options(args)
    if isinstance(grid_options, str):
        print(f"error: {grid_options}", file=sys.stderr)
        return 2
    apply_cache(args)
    timings.listen()
    import_plotting_meanwhile()  # while the first experiment runs
    _make_figures(list(dict.fromkeys(names)), args, timings, where, grid_options)
    timings.stop()
    if args.timings:
        print(timings.report())
    return 0


def _make_figures(
    names: list[str], args: argparse.Namespace, timings, where: dict[str, str], grid_options: dict
) -> None:
    """Each figure's results (reused or produced), then the figure, drawn in a thread while the
    next experiment runs (which waits in compiled code, without the GIL); one figure at a time,
    its paths printed once it is written."""
    from dynamics.sweeps.result_files import complete_results_hash  # lazy: JAX, the engine: on a run
    from figures.registry import FIGURES, ensure_results  # lazy: every figure's module: not for --help

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
                # lazy: matplotlib: for a figure only
                import figures.sweep  # noqa: F401  (matplotlib; a no-op after the first figure)
            plot = partial(entry.plot, **grid_options) if grid_options else entry.plot
            in_flight = drawing.submit(plot, results_dir, out / name)
        if in_flight is not None:
            _drawn(in_flight, args, timings)
    finally:
        drawing.shutdown(wait=True)


def _at(text: str | None) -> dict[str, float | str] | None:
    """'n_train=100,H=4' -> {"n_train": 100.0, "H": 4.0}; a name stays text ('optimizer=adam': a
    categorical knob's value; the grid figure checks it is one of the axis's). A ValueError names a
    bad item."""
    if text is None:
        return None
    at = {}
    if comma_items(text) is None:
        raise ValueError(f"--at {text!r} has an empty item; give KNOB=NUMBER,KNOB=NUMBER")
    for item in text.split(","):
        name, eq, value = item.partition("=")
        if not eq or not value.strip():
            raise ValueError(f"--at {text!r}: {item!r} must be KNOB=NUMBER or KNOB=NAME")
        try:
            at[name.strip()] = float(value)
        except ValueError:
            at[name.strip()] = value.strip()  # a name (the optimiser's, the data model's, …)
    return at


def _grid_options(args: argparse.Namespace) -> dict | str:
    """{axes, at} for the grid figures (empty without --axes and --at), or the error's line: they
    apply to grid figures only."""
    from figures.registry import FIGURES, GRID_FIGURES  # lazy: every figure's module: not for --help

    if args.axes is None and args.at is None:
        return {}
    others = [n for n in (args.names or list(FIGURES)) if n not in GRID_FIGURES]
    if others:
        return f"--axes and --at apply to grid figures ({', '.join(GRID_FIGURES)}), not {', '.join(others)}"
    try:
        return {"axes": args.axes, "at": _at(args.at)}
    except ValueError as err:
        return str(err)


def _redraw(args: argparse.Namespace) -> int:
    """--results DIR: the figure of the run folder DIR (a sweep or a grid) into DIR/figure; with
    --heads, the per-head figure of one of its runs (``_redraw_heads``)."""
    from dynamics.sweeps.result_files import read_folder  # lazy: JAX, the engine: on a run

    try:
        path, _, kind = read_folder(args.results)
        if args.heads or args.steps is not None:
            paths = _redraw_heads(path, kind, args)
        elif kind == "grid":
            from figures.phase import plot_grid  # lazy: matplotlib: for a figure only

            paths = plot_grid(path, path / "figure", axes=args.axes, at=_at(args.at))
        elif args.axes is not None or args.at is not None:
            raise ConfigError(f"--axes and --at apply to a grid; {path} holds a {kind} result")
        elif kind == "sweep":
            from figures.sweep import plot_sweep  # lazy: matplotlib: for a figure only

            paths = plot_sweep(path, path / "figure")
        else:
            raise ConfigError(f"{path} holds a {kind} result: python -m figures {kind} draws it")
    except (ConfigError, ValueError, TypeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for p in paths:
        print(f"wrote {p}")
    return 0


def _int_list(flag: str, text: str) -> list[int]:
    """'0,100,1000' -> [0, 100, 1000] (a ValueError names a bad item)."""
    items = comma_items(text)
    if items is None:
        raise ValueError(f"{flag} {text!r} has an empty item; give a comma-separated list of integers")
    for item in items:
        if not item.lstrip("-").isdigit():
            raise ValueError(f"{flag} {text!r}: {item!r} must be an integer")
    return [int(i) for i in items]


def _redraw_heads(path: Path, kind: str, args: argparse.Namespace) -> list[Path]:
    """--heads: the per-head figure of the run --at H=…,trial=… of the sweep in ``path``."""
    from figures.heads import choose_steps, draw_heads, head_run  # lazy: matplotlib: for a figure only
    from figures.sweep import save_figure  # lazy: matplotlib: for a figure only

    if not args.heads:
        raise ConfigError("--steps chooses the heatmaps of --heads: add --heads")
    if kind != "sweep":
        raise ConfigError(f"--heads draws one run of a sweep; {path} holds a {kind} result")
    if args.axes is not None:
        raise ConfigError("--axes chooses a grid's knobs; --heads takes --at H=…,trial=… and --steps")
    at = _at(args.at) or {}
    unknown = [k for k in at if k not in ("H", "trial")]
    if unknown:
        raise ConfigError(f"--at {args.at!r}: with --heads it takes H= and trial=, not {unknown[0]}")
    for name, value in at.items():
        if isinstance(value, str) or not float(value).is_integer():
            raise ConfigError(f"--at {args.at!r}: {name}={value} must be an integer")
    run = head_run(path, None if "H" not in at else int(at["H"]), int(at.get("trial", 0)))
    steps = None if args.steps is None else _int_list("--steps", args.steps)
    fig = draw_heads(run, choose_steps(run, steps))
    return save_figure(fig, path / f"heads-H{run.H}-trial{run.trial}")


def _drawn(figure: Future, args: argparse.Namespace, timings) -> None:
    """Wait for a figure being drawn (the wait is the ``plotting`` phase: the drawing itself ran
    beside the next experiment) and report its files."""
    with timings.phase("plotting"):
        paths = figure.result()
    for path in paths:
        print(f"  wrote {path}", flush=True)
        if args.gallery and path.suffix == ".png":
            print(f"  wrote {gallery_png(path, args.gallery / path.name)}", flush=True)
