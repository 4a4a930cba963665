"""python -m dynamics.run: train one-layer multi-head attention on token data, sweeping H.

Examples:
  python -m dynamics.run                                  # small DM1 sweep, < 1 min on a laptop
  python -m dynamics.run --preset fig2                    # the paper's Fig. 2 setting
  python -m dynamics.run --heads 1,4,16 --lr-scaling linear --steps 2000
  python -m dynamics.run --heads 1,4,16 --lr 0.1,1,10 --steps 200   # a grid: table per point, phase diagram
  python -m dynamics.run --optimizer gd,adam --lr 0.01:10:7          # names too: a diagram per optimiser
  python -m dynamics.run --optimizer adam --lr 0.06 --data-model planted
  python -m dynamics.run --data my.npz --heads 1,3 --optimizer gd --lr 0.5 --steps 50 --trials 1
  python -m dynamics.run --config my.toml --seed 3 --out runs/mine

This module holds the sweep's command line: its parser (the knob flags are generated from the
knobs' declarations by ``dynamics.cli.knobs``), the experiment the flags ask for
(``config_from_args``), the result table and ``main``.
The parser, argument types and device flags it shares with the other command lines are in
``dynamics.cli.common``; ``--preset bottleneck-*`` goes to ``dynamics.cli.bottleneck``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import re
import sys
import warnings
from pathlib import Path

from dynamics import parts
from dynamics.cli.common import (
    FOLDER_LINES,
    OneLineParser,
    add_cpu_devices,
    add_folder_flags,
    apply_cpu_devices,
    choose_folder,
    import_plotting_meanwhile,
    mean_std,
    use_file_backend,
)
from dynamics.cli.knobs import add_knobs, dest, knob_values
from dynamics.config.grid_axes import (
    GRID_PRESETS,
    GridExperiment,
    axis_of,
    grid_preset,
    load_toml_grid,
    resolve_grid,
)
from dynamics.config.presets import train_label
from dynamics.config.schema import (
    OWN_RUNNERS,
    PRESETS,
    Config,
    ConfigError,
    Experiment,
    IdenticalTrialsWarning,
    apply_overrides,
    identical_trials,
    resolve,
)
from dynamics.infra import interrupts
from dynamics.infra.cache import add_flag as add_cache_flag
from dynamics.infra.cache import apply as apply_cache
from dynamics.infra.startup import import_jax
from dynamics.infra.timings import Timings
from dynamics.parts.metrics import COLUMN_TITLES, SUMMARY_METRICS
from dynamics.sweeps import midrun
from dynamics.sweeps.emergence import columns as emergence_columns
from dynamics.sweeps.folders import Claim, discard_if_empty, sweep_claim
from dynamics.sweeps.headline import format_line
from dynamics.sweeps.memory import check_memory
from dynamics.sweeps.plateaus import RULE as plateau_rule
from dynamics.sweeps.sweep_result import HEAD_COUNT


def seconds_arg(flag: str):
    """A flag's value: a number of seconds > 0; the error names the flag and the text."""

    def parse(text: str) -> float:
        try:
            return midrun.check_seconds(flag, float(text))
        except (ValueError, ConfigError):
            raise argparse.ArgumentTypeError(f"{flag} {text!r} must be a number of seconds > 0") from None

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m dynamics.run",
        description=(
            "Simulate full-batch training of a one-layer multi-head attention classifier\n"
            "Φ(X) = c_H Σ_h U_hᵀ Xᵀ softmax(X W_h x_1) on synthetic token data, for each\n"
            "number of heads H, and write results.json, curves.npz and a figure.\n"
            "Values are layered: defaults < --preset < --config FILE.toml < flags.\n"
            f"The table's {plateau_rule}."
        ),
        epilog=__doc__.split("\n", 2)[2].split("\n\n")[0],  # the examples
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = p.add_argument_group("experiment")
    g.add_argument("--preset", help="start from a named preset (see --list-presets)")
    g.add_argument("--config", metavar="FILE.toml", help="TOML with [data] [model] [optim] [sweep] tables")
    g.add_argument("--list-presets", action="store_true", help="list the presets and exit")
    g.add_argument(
        "--data", metavar="FILE.npz", help="train on your own data: X_train (n,T,d), y_train, X_test, y_test"
    )
    add_folder_flags(g, "<name>")
    g.add_argument(
        "--no-fast-path",
        action="store_true",
        help="zero init: simulate all H heads instead of one exact representative head",
    )
    g.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted sweep in --out (what a run into a folder holding this config's "
        "unfinished results always does; kept for older commands)",
    )
    g.add_argument(
        "--device",
        choices=("auto", "cpu", "gpu"),
        default="auto",
        help="where to run: JAX's default backend (auto), the CPU or the GPU; "
        "the runs are sharded over all devices of that kind",
    )
    add_cpu_devices(g)
    g.add_argument(
        "--distributed",
        action="store_true",
        help="one process per host: call jax.distributed.initialize() (cluster auto-detect or "
        "JAX_COORDINATOR_ADDRESS etc.) and shard over every host's devices; process 0 writes",
    )
    g.add_argument(
        "--work-queue",
        action="store_true",
        help="a grid run by several processes into one --out: each claims the next unclaimed compiled "
        "call, the last to finish merges (docs/performance.md); start as many as you like",
    )
    g.add_argument(
        "--reclaim",
        action="store_true",
        help="with --work-queue: also take over calls claimed before this process started on any host "
        "(after a crash; a claim of a dead process on this host is taken over anyway)",
    )
    g.add_argument(
        "--checkpoint-every",
        type=seconds_arg("--checkpoint-every"),
        metavar="SECONDS",
        help="a long compiled run keeps its state in --out every SECONDS (default 10): an interrupted "
        "run loses at most that much, --resume goes on from there; the numbers do not change",
    )
    g.add_argument(
        "--call-seconds",
        type=seconds_arg("--call-seconds"),
        metavar="SECONDS",
        help="a run longer than twice this runs as compiled calls of about SECONDS (default 2), the "
        "progress bar and the checkpoints between them; the numbers do not change",
    )
    g.add_argument("--no-figure", action="store_true", help="skip the figure")
    g.add_argument("--quiet", action="store_true", help="no progress bar")
    add_cache_flag(g)
    g.add_argument(
        "--timings",
        action="store_true",
        help="print the seconds spent importing, drawing data, compiling, simulating, writing and "
        "plotting (always recorded in results.json)",
    )
    add_knobs(p)
    return p


def config_from_args(args: argparse.Namespace) -> Experiment | GridExperiment:
    """The experiment the flags ask for, validated and planned (the one place the CLI does it):
    a grid (``dynamics.config.grid_axes``) when a knob has several values, else a plain sweep."""
    for flag in ("preset", "config", "data", "out"):
        value = getattr(args, flag)
        if value is not None and not value.strip():
            raise ConfigError(f"--{flag} '' is empty: give a name or a path, or leave the flag out")
    cfg, axes = grid_preset(args.preset) if args.preset else (Config(), {})
    if args.config:
        cfg, more = load_toml_grid(args.config, base=cfg)
        axes.update(more)
    overrides, more = knob_values(args)
    for section, fields in overrides.items():  # a single value given replaces an axis of the preset or file
        for name in fields:
            axes.pop(axis_of(f"{section}.{name}") or name, None)
    axes.update(more)
    if args.data and "data_model" in axes:
        raise ConfigError(
            f"--data FILE.npz cannot be combined with a data-model axis {list(axes['data_model'])}"
        )
    if args.data:
        named = overrides.get("data", {}).get("model")
        if named is not None and not (named in parts.DATA_MODELS and parts.DATA_MODELS[named].from_file):
            raise ConfigError(
                f"--data FILE.npz cannot be combined with --data-model {overrides['data']['model']}"
            )
        fixed = [
            f"--{f}"
            for f in ("n-train", "n-test", "tokens", "width")
            if getattr(args, dest(f"--{f}")) is not None
        ]
        if fixed:
            raise ConfigError(
                f"{', '.join(fixed)} do(es) not apply to --data {args.data}: the file fixes n, T, d"
            )
        overrides.setdefault("data", {}).update(model="npz", path=args.data)
    if args.no_fast_path:
        overrides.setdefault("sweep", {})["fast_path"] = False
    cfg = apply_overrides(cfg, overrides, "command line")
    if args.data and not args.preset and not args.config:
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", Path(args.data).stem).lstrip("._-")[:64] or "data"
        cfg = apply_overrides(cfg, {"name": stem}, "command line")
    return resolve_grid(cfg, axes) if axes else resolve(cfg)


def format_table(result) -> str:
    """One row per H: the final metrics it logs (mean ± std over trials), diverged runs."""
    shown = [m for m in SUMMARY_METRICS if m in result.curves]
    rows = result.summary()
    timed = bool(rows) and "emergence" in rows[0]  # emergence steps (regression, relevant tokens known)
    header = f"{'H':>4}  " + "  ".join(f"{COLUMN_TITLES[m]:>17}" for m in shown) + "  drops  diverged"
    header += f"  {'emerges (attention)':>20}  {'emerges (loss)':>17}" if timed else ""
    lines = [header, "-" * len(header)]
    for row in rows:
        cells = "  ".join(f"{_cell(row, m):>17}" for m in shown)
        drops = "-" if row["drops"] is None else f"{row['drops']:.3g}"  # plateaus.RULE
        line = f"{row[HEAD_COUNT]:>4}  {cells}  {drops:>5}  {row['n_diverged']}/{row['trials']:<6}"
        if timed:
            cols = emergence_columns(row["emergence"])
            line += "".join(f"  {_step_cell(cols, k):>{w}}" for k, w in (("t_att", 20), ("t_loss", 17)))
        lines.append(line if timed else line.rstrip())
    return "\n".join(lines)


def _step_cell(cols: dict, kind: str) -> str:
    """Mean ± std of the emergence step over the trials that emerged, and how many did."""
    n = cols[f"{kind}_n"]
    return "never" if n == 0 else f"{cols[f'{kind}_mean']:.4g} ± {cols[f'{kind}_std']:.2g} ({n})"


def _cell(row: dict, metric: str) -> str:
    """A table cell: 'diverged' only where every trial diverged; 'n/a' where the metric has no
    value although runs finished (an excess risk without a known noise floor)."""
    if row[metric]["mean"] is None and row["n_diverged"] < row["trials"]:
        return "n/a"
    return mean_std(row[metric])


def _report(exp, result, out: Path, verb: str = "wrote") -> None:
    """The one-line description, the result table (one row per H, per grid point for a grid) and
    the files (``verb``: "wrote", or "reused" for a folder's finished results)."""
    grid = isinstance(exp, GridExperiment)
    cfg = exp.base.config if grid else exp.config
    opt, named = cfg.optim, dict(exp.axes) if grid else {}

    def value(axis: str, own, label: str = "") -> str:  # a grid axis: its values, "η₀ ∈ {0.1, 1}"
        if axis not in named:
            return f"{label}={own}" if label else str(own)
        return f"{label} ∈ {axis_values(named[axis])}" if label else axis_values(named[axis])

    axes = f", grid {' × '.join(f'{n}[{len(v)}]' for n, v in exp.axes)}" if grid else ""
    label = train_label(cfg.to_dict())  # online SGD trains on fresh batches, not on n examples
    sizes = (
        f"n={cfg.data.n_train}/{cfg.data.n_test}"
        if label.startswith("n = ")
        else f"{label}, {cfg.data.n_test} test"
    )
    print(
        f"{cfg.name}: {value('data_model', cfg.data.model)} {sizes}, "
        f"{value('optimizer', opt.optimizer)} {value('lr', opt.lr, 'η₀')} "
        f"({value('lr_scaling', opt.lr_scaling)}), "
        f"{opt.steps} steps, {cfg.sweep.trials} trials{axes}, "
        f"{result.wall_time_s:.1f} s"
    )
    if grid:
        from dynamics.sweeps.grid_runner import format_grid_table  # lazy: JAX, the engine: on a run

        print(format_grid_table(result, mean_std))
        _print_headline(result)
        print(f"{verb} {out / 'results.json'}, {out / 'curves.npz'} and {out / 'summary.csv'}")
    else:
        print(format_table(result))
        _print_headline(result)
        print(f"{verb} {out / 'results.json'} and {out / 'curves.npz'}")


def axis_values(values, shown: int = 6) -> str:
    """A grid axis's values as a set, numbers in their shortest form: "{0.1, 1}"; a long axis
    "{0.01, 0.0177828, …, 100} (17 values)"."""
    text = [f"{v:g}" if isinstance(v, float) else str(v) for v in values]
    if len(text) > shown:
        return "{" + ", ".join([*text[:2], "…", text[-1]]) + f"}} ({len(text)} values)"
    return "{" + ", ".join(text) + "}"


def _print_headline(result) -> None:
    """The line after the table: the run's headline numbers (``result.headline()``)."""
    headline = result.headline()
    line = format_line(headline)
    if line:
        print(line)
    note = (headline or {}).get("note")
    if isinstance(note, dict) and note.get("about"):  # a preset's own numbers the run cannot give
        print(f"note: {note['about']}")


def _imports(args: argparse.Namespace, timings: Timings) -> None:
    """Import JAX and the engine, and set up the compilation cache, before any compile."""
    with timings.phase("imports"):
        import_jax()  # first, alone: its look for a ROCm plugin narrowed (dynamics.infra.startup)
        # lazy: the sweep layer: on a run
        import dynamics.sweeps.checkpoint  # noqa: F401  (jax, optax and the engine)

        apply_cache(args)
    timings.listen()


def _run(exp: Experiment, args: argparse.Namespace, out: Path, claim: Claim, finish=None):
    """The checkpointed sweep on the devices that --device and --distributed ask for (in the
    config's precision, ``sweep.x64``: the sweep enters it), into ``out`` as ``claim`` allows (the
    finished part of this config's results there reused); ``finish(result)`` runs before its
    results are written (once)."""
    import jax  # lazy: JAX: on a run (--help stays fast)

    from dynamics.sweeps.checkpoint import run_checkpointed  # lazy: the sweep layer: on a run
    from dynamics.sweeps.devices import select_devices  # lazy: JAX, the engine: on a run

    if args.distributed and not jax.distributed.is_initialized():
        # Cluster auto-detection (SLURM, Open MPI, …) or JAX_COORDINATOR_ADDRESS plus these two.
        env = {"num_processes": "JAX_NUM_PROCESSES", "process_id": "JAX_PROCESS_ID"}
        try:
            jax.distributed.initialize(**{k: int(os.environ[v]) for k, v in env.items() if v in os.environ})
        except ValueError as err:
            raise ConfigError(
                f"--distributed could not start ({err}): run under a cluster JAX detects (SLURM, Open MPI) "
                f"or set JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and JAX_PROCESS_ID"
            ) from None
    devices = select_devices(args.device)
    with contextlib.ExitStack() as stack:
        local = [d for d in devices if d.process_index == jax.process_index()]
        stack.enter_context(jax.default_device(local[0]))
        if args.work_queue:
            from dynamics.sweeps.workqueue import run_grid_shared  # lazy: JAX, the engine: on a run

            shared = dict(reclaim=args.reclaim, progress=not args.quiet, devices=devices, finish=finish)
            return run_grid_shared(exp, out, **shared)
        if isinstance(exp, GridExperiment):
            # lazy: JAX and the engine: only once a command runs
            from dynamics.sweeps.grid_runner import run_grid_checkpointed as run_checkpointed
        long_runs = {"checkpoint_every": args.checkpoint_every, "call_seconds": args.call_seconds}
        return run_checkpointed(
            exp,
            out,
            resume=True,
            progress=not args.quiet,
            devices=devices,
            finish=finish,
            claim=claim,
            **long_runs,
        )


def _warn_identical(cfg: Config) -> None:
    """Print why the trials would be identical copies (file data, an init that draws nothing), once:
    the sweep's own Python warning is silenced."""
    why = identical_trials(cfg)
    if why is not None:
        print(f"warning: {why}", file=sys.stderr)
        warnings.filterwarnings("ignore", category=IdenticalTrialsWarning)


def _is_main_process() -> bool:
    import jax  # lazy: JAX: on a run (--help stays fast)

    return jax.process_index() == 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    runner = OWN_RUNNERS.get(requested_preset(argv))
    if runner is not None:  # a preset that runs its own experiment (its module imports JAX)
        return importlib.import_module(runner).main(argv)
    timings = Timings().start()
    where: dict[str, Path] = {}  # the output folder, once the sweep may have written into it
    try:
        return interrupts.command(lambda: _main(argv, timings, where), lambda: _interrupted(where))
    finally:
        timings.stop()


def requested_preset(argv: list[str]) -> str | None:
    """The preset ``--preset NAME`` (or ``--preset=NAME``) names in ``argv``, else None."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    p.add_argument("--preset")
    try:
        return p.parse_known_args(argv)[0].preset
    except argparse.ArgumentError:  # '--preset' without a name: the full parser says so
        return None


def _interrupted(where: dict) -> str:
    if "out" not in where:
        return "interrupted before the sweep started: nothing was written"
    out = Path(where["out"])
    if (out / "queue").is_dir():  # --work-queue: the calls written so far stay, this one's claim is stale
        queue = out / "queue"
        if not any(queue.glob("g*-c*.npz")):
            return f"interrupted before a call had finished ({queue} holds none yet): rerun the same command"
        return f"interrupted: the finished calls are in {queue}; rerun the same command to finish"
    running = midrun.kept(out)  # a long run's state kept mid-run
    points = [p for p in (out / "points").glob("*.npz") if not p.name.startswith(midrun.PREFIX)]
    if not points and running is None:  # what is on disk, not what might have been
        return f"interrupted before a point had finished: nothing to resume in {out}"
    if where.get("grid"):
        kept = f"the finished grid points are in {out / 'points'}"
    elif where.get("replacing"):  # results.json may still be the replaced run's
        kept = f"the finished H values are in {out / 'points'}"
    else:
        kept = f"the finished H values are in {out} (results.json is partial)"
    if running is not None:
        kept = f"kept {running}" + (f" ({kept})" if points else f" in {out}")
    again = f"with --out {out} " if where.get("made") else ""  # a run without --out: its new folder
    return f"interrupted: {kept}; rerun the same command {again}to finish"


def _main(argv: list[str], timings: Timings, where: dict[str, Path]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_presets:
        for name, (purpose, *_) in {**PRESETS, **GRID_PRESETS}.items():
            print(f"{name:24s} {purpose}")
        return 0
    try:
        exp = config_from_args(args)  # validation first: errors come before any heavy import
        base = exp.base if isinstance(exp, GridExperiment) else exp
        # and the memory it needs (a grid: its largest point), before anything is allocated
        check_memory(
            exp.points if isinstance(exp, GridExperiment) else [base.config],
            len(base.steps),
            base.config.sweep.x64,
        )
        cfg = base.config
        _warn_identical(cfg)
        where["grid"] = isinstance(exp, GridExperiment)
        _check_work_queue(args, where["grid"])
        claim = sweep_claim(exp, args.overwrite)
        out, action = choose_folder(args, cfg.name, claim)  # before any heavy import: refused at once
        where.update(out=out, made=action == "made", replacing=action == "replace")
        if action != "done":
            print(FOLDER_LINES[action].format(out=out))
        _imports(args, timings)
        if action == "done":
            done = _finished(out)
            print(FOLDER_LINES["done" if done is not None else "damaged"].format(out=out))
            if done is not None:
                _report(exp, done, out, "reused")
                return 0
        apply_cpu_devices(args)
        if not args.no_figure:  # (not jax.process_index(): that would start JAX before --distributed)
            import_plotting_meanwhile()
        paths: list[Path] = []
        result = _run(exp, args, out, claim, lambda result: _finish(exp, result, out, args, timings, paths))
    except (ConfigError, ValueError) as err:
        if where.get("made"):
            discard_if_empty(out)  # the new folder of a run that wrote nothing
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not _is_main_process():
        return 0
    if result is None:  # --work-queue: another process merges
        print(f"this process's calls are written in {out / 'queue'}; the last process to finish merges")
        return 0
    _report(exp, result, out)
    for path in paths:
        print(f"wrote {path}")
    if args.timings:
        print(timings.report())
    return 0


def _check_work_queue(args: argparse.Namespace, grid: bool) -> None:
    """--work-queue: a grid's, into a given --out, one process per share of the work (not with
    --distributed, whose processes run one sweep together); --reclaim only with it."""
    if args.reclaim and not args.work_queue:
        raise ConfigError("--reclaim applies to --work-queue, the claims of a grid run by several processes")
    if not args.work_queue:
        return
    if not grid:
        raise ConfigError("--work-queue spreads a grid's points over processes: give a knob several values")
    if args.distributed:
        raise ConfigError("--work-queue and --distributed exclude each other: each queue process runs alone")
    for flag in ("checkpoint_every", "call_seconds"):  # the queue's claims are whole compiled calls
        if getattr(args, flag) is not None:
            name = flag.replace("_", "-")
            raise ConfigError(f"--{name} does not apply with --work-queue: its processes claim whole calls")


def _finished(out: Path):
    """The finished results in ``out`` (a SweepResult or a GridResult), or None when they cannot be
    read (damaged: the run then recomputes what it must, as --resume always has)."""
    from dynamics.api import load_results  # lazy: JAX, the engine: on a run

    try:
        return load_results(out)
    except ConfigError:
        return None


def _finish(exp, result, out: Path, args: argparse.Namespace, timings: Timings, paths: list[Path]) -> None:
    """Before the results are written, once: the figures drawn from the result in memory, and the
    timings (up to here) put into it for results.json."""
    grid = isinstance(exp, GridExperiment)
    result.headline()  # computed once, kept in the result: the figures, the table and results.json read it
    if not args.no_figure:
        with timings.phase("imports"):
            use_file_backend()
            from figures.own import own_figure, unavailable  # lazy: matplotlib: for a figure only
            from figures.phase import plot_grid  # lazy: matplotlib: for a figure only
            from figures.sweep import plot_sweep  # lazy: matplotlib: for a figure only
        with timings.phase("plotting"):
            own = None if grid else own_figure(result)  # the preset's own question, where it has one
            if own is None and not grid and unavailable(result):
                print(f"note: {unavailable(result)}")
            if own is None:
                paths += (plot_grid if grid else plot_sweep)(result, out / "figure")
            else:
                plot, stem = own
                paths += plot(result, out / stem)
            if result.config.sweep.diagnostics and not grid:  # a grid's: per point
                from figures.theory import plot_diagnostics  # lazy: matplotlib: for a figure only

                paths += plot_diagnostics(result, out / "diagnostics")
    timings.stop()
    result.extra["timings"] = timings.to_dict()


if __name__ == "__main__":
    interrupts.finish(main())
