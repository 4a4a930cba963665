"""python -m dynamics.run: train one-layer multi-head attention on token data, sweeping H.

Examples:
  python -m dynamics.run                                  # small DM1 sweep, < 1 min on a laptop
  python -m dynamics.run --preset fig2                    # the paper's Fig. 2 setting
  python -m dynamics.run --heads 1,4,16 --lr-scaling linear --steps 2000
  python -m dynamics.run --heads 1,4,16 --lr 0.1,1,10 --steps 200   # a grid: table per point, phase diagram
  python -m dynamics.run --optimizer adam --lr 0.06 --data-model planted
  python -m dynamics.run --data my.npz --heads 1,3 --optimizer gd --lr 0.5 --steps 50 --trials 1
  python -m dynamics.run --config my.toml --seed 3 --out runs/mine

This module holds the sweep's command line: its flags (``KNOBS``, one per config field),
parser, the experiment they ask for (``config_from_args``), the result table and ``main``.
The parser, argument types and device flags it shares with the other command lines are in
``dynamics.cli.common``; ``--preset bottleneck-*`` goes to ``dynamics.cli.bottleneck``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

import numpy as np

from datamodels.defaults import GEOMETRIES, ICL_BASES
from dynamics import parts
from dynamics.cli.common import (
    OneLineParser,
    add_cpu_devices,
    apply_cpu_devices,
    float_arg,
    floats_arg,
    head_size_arg,
    import_plotting_meanwhile,
    int_arg,
    mean_std,
    use_file_backend,
)
from dynamics.config.grid import (
    GRID_KNOBS,
    GRID_PRESETS,
    GridExperiment,
    grid_preset,
    list_arg,
    load_toml_grid,
    resolve_grid,
)
from dynamics.config.schema import (
    HEAD_METRICS,
    PRESETS,
    Config,
    ConfigError,
    Experiment,
    IdenticalTrialsWarning,
    apply_overrides,
    identical_trials,
    parse_heads,
    resolve,
)
from dynamics.infra import interrupts
from dynamics.infra.cache import add_flag as add_cache_flag
from dynamics.infra.resources import check_sweep
from dynamics.infra.timings import Timings
from dynamics.parts.metrics import COLUMN_TITLES, SUMMARY_METRICS

# flag, section, field, type, choices, help. A part's choices are its live registry (argparse lists
# and checks them through iteration and ``in``), its help the registry's: a registered part is a
# choice of the command line at once.
KNOBS = [
    ("--heads", "sweep", "heads", parse_heads, None, "numbers of heads H, comma-separated (e.g. 1,2,4,8)"),
    ("--trials", "sweep", "trials", int_arg, None, "independent trials (data draws and inits) per H"),
    ("--seed", "sweep", "seed", int_arg, None, "root PRNG seed; the same seed gives the same numbers"),
    ("--log-every", "sweep", "log_every", int_arg, None, "log metrics every K steps"),
    ("--log-points", "sweep", "log_points", int_arg, None, "log about N log-spaced steps instead"),
    ("--steps", "optim", "steps", int_arg, None, "number of updates (full-batch, or SGD's mini-batches)"),
    ("--optimizer", "optim", "optimizer", str, parts.OPTIMIZERS, parts.OPTIMIZERS.help()),
    ("--lr", "optim", "lr", float_arg, None, "base step size η₀"),
    (
        "--lr-scaling",
        "optim",
        "lr_scaling",
        str,
        parts.LR_SCALINGS,
        "the step size's H-scaling η(H) = η₀·H^p, for every optimiser (GD, SGD, normalized-gd and Adam "
        "alike): " + parts.LR_SCALINGS.help(),
    ),
    (
        "--batch-size",
        "optim",
        "batch_size",
        int_arg,
        None,
        "sgd only (and needed there): B training examples per update, chosen from the trial's own "
        "random stream and the update number, so the same whatever the packing, devices or --resume; "
        "the logged train loss is still the full training set's (online: the batch of the next update)",
    ),
    (
        "--sampling",
        "optim",
        "sampling",
        str,
        parts.SAMPLINGS,
        "sgd only: how each update's B examples are chosen: " + parts.SAMPLINGS.help(),
    ),
    *(
        knob
        for group, names in (("readout", "U (and b)"), ("attention", "W (or Q, K) and k"))
        for knob in (
            (
                f"--{group}-lr-factor",
                "optim",
                f"{group}_lr_factor",
                float_arg,
                None,
                f"the {group} parameters {names} step with η(H)·FACTOR (default 1; 0 never moves them)",
            ),
            (
                f"--{group}-steps",
                "optim",
                f"{group}_steps",
                str,
                None,
                f"START:STOP: the {group} parameters {names} move only in the 0-based updates START <= t "
                f"< STOP, else stay exactly (e.g. 0:2 moves them in the first two updates, 100: from "
                f"update 100 on; default all). Adam's moments see a zero gradient while frozen",
            ),
            (
                f"--{group}-weight-decay",
                "optim",
                f"{group}_weight_decay",
                float_arg,
                None,
                f"λ >= 0 on the {group} parameters {names}: the L2 term λ/2·‖θ‖² in the gradient (gd, sgd; "
                f"normalized-gd before normalising), decoupled as AdamW's θ ← θ − η·λ·θ for adam",
            ),
        )
    ),
    ("--ngd-eps", "optim", "ngd_eps", float_arg, None, "normalized-gd: g/(‖g‖+ε), not g/‖g‖"),
    ("--ngd-per-group", "optim", "ngd_per_group", bool, None, "normalized-gd: each group a unit step"),
    (
        "--constraint",
        "optim",
        "constraint",
        str,
        parts.CONSTRAINTS,
        "keep parameters on a manifold (needs --query learned and --init sphere): "
        + parts.CONSTRAINTS.help(),
    ),
    (
        "--loss",
        "optim",
        "loss",
        str,
        parts.LOSSES,
        "the loss of one example, of the margin yΦ (classification) or the residual Φ − y (regression); "
        "default: logistic, or mse for regression data: " + parts.LOSSES.help(),
    ),
    (
        "--task",
        "optim",
        "task",
        str,
        parts.training.TASKS,
        "classification (±1 labels) or regression (real targets); default: the data's (a data model's "
        "own; a file's targets other than ±1 or 0/1 are regression); one contradicting the data is refused",
    ),
    (
        "--query",
        "model",
        "query",
        str,
        parts.QUERIES,
        parts.QUERIES.help(),
    ),
    ("--norm", "model", "norm", str, parts.NORMS, "head normalisation: " + parts.NORMS.help()),
    ("--key-query", "model", "key_query", str, parts.KEY_QUERIES, parts.KEY_QUERIES.help()),
    (
        "--head-size",
        "model",
        "head_size",
        head_size_arg,
        None,
        "factored head size: 'split' (d // H) or an integer",
    ),
    ("--init", "model", "init", str, parts.INITS, parts.INITS.help()),
    (
        "--init-from",
        "model",
        "init_from",
        str,
        None,
        "θ(0) from FILE.npz: the parameters by name (U with W, Q and K, or k; b with --bias), each "
        "(H, …) for every trial or (trials, H, …); a run of H heads starts from the first H",
    ),
    (
        "--bias",
        "model",
        "bias",
        bool,
        None,
        "learn a scalar bias b added to Φ (one per run, not ÷ by H)",
    ),
    ("--attention", "model", "attention", str, parts.ACTIVATIONS, parts.ACTIVATIONS.help()),
    ("--temperature", "model", "temperature", float_arg, None, "β₀: every activation reads β·s (default 1)"),
    (
        "--temperature-decay",
        "model",
        "temperature_decay",
        float_arg,
        None,
        "c: β_t = β₀/(1 + c·t) at update t (default 0: constant); a logged step uses its last update's β",
    ),
    ("--init-scale", "model", "init_scale", float_arg, None, "σ₀ of the normal init, entries N(0, σ₀²/d)"),
    (
        "--diagnostics",
        "sweep",
        "diagnostics",
        str,
        None,
        "theory diagnostics along training, comma-separated or 'all': sharpness (Hessian λ_max, λ_min, "
        "η·λ_max), kernel (tangent-kernel distance from step 0), maxmargin (cosine of W to the attention "
        "SVM; data models that know their relevant tokens only); off by default. Measured at <= 24 of "
        "the logged steps, each run replayed: it costs several times the sweep's own time "
        "(docs/theory.md)",
    ),
    (
        "--head-metrics",
        "sweep",
        "head_metrics",
        str,
        HEAD_METRICS,
        "per-head metrics at every logged step (attention on the relevant tokens, norms, |cos| with "
        "the data's planted directions, head–head similarities; docs/results-format.md): on, off, or "
        "auto (default: on up to 16 heads)",
    ),
    (
        "--save-params",
        "sweep",
        "save_params",
        bool,
        None,
        "keep θ at every logged step in params.npz (its size is estimated and refused if too large)",
    ),
    (
        "--data-model",
        "data",
        "model",
        str,
        parts.DATA_MODELS,
        parts.DATA_MODELS.help() + "; or your own, package.module:name (setup and sample)",
    ),
    ("--n-train", "data", "n_train", int_arg, None, "training examples per trial"),
    ("--n-test", "data", "n_test", int_arg, None, "test examples per trial"),
    ("--tokens", "data", "T", int_arg, None, "tokens per example T"),
    ("--width", "data", "d", int_arg, None, "token width d"),
    ("--zeta", "data", "zeta", float_arg, None, "mixture sparsity ζ: r = max(1, round(ζT)) relevant tokens"),
    ("--relevant", "data", "r", int_arg, None, "mixture: number of relevant tokens r (overrides ζ)"),
    ("--signal", "data", "signal", float_arg, None, "mixture: norm S of the means"),
    ("--noise", "data", "noise", float_arg, None, "mixture: noise level σ"),
    ("--irrelevant-means", "data", "n_irrelevant", int_arg, None, "mixture: number M of irrelevant means"),
    ("--geometry", "data", "geometry", str, GEOMETRIES, "mixture: class means antipodal or orthogonal"),
    ("--teacher-heads", "data", "teacher_heads", int_arg, None, "planted: teacher heads H*"),
    ("--teacher-scale", "data", "teacher_scale", float_arg, None, "planted: teacher scale β"),
    ("--label-noise", "data", "label_noise", float_arg, None, "planted: label flip probability p"),
    (
        "--positive-rate",
        "data",
        "positive_rate",
        float_arg,
        None,
        "sparse-token: probability π of a positive",
    ),
    ("--gamma", "data", "gamma", float_arg, None, "single/multi-location: spread γ of a relevant token"),
    ("--epsilon", "data", "epsilon", float_arg, None, "single/multi-location: target noise ε (floor ε²)"),
    ("--strengths", "data", "strengths", floats_arg, None, "multi-location: strengths c_f, e.g. 1,0.7,0.5"),
    ("--basis", "data", "basis", str, ICL_BASES, "icl-linreg: Λ's eigenvectors, random or identity"),
    (
        "--whiten",
        "data",
        "whiten",
        bool,
        None,
        "icl-linreg: whiten each drawn set's task vectors and centre its inputs (the authors' data)",
    ),
]


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m dynamics.run",
        description=(
            "Simulate full-batch training of a one-layer multi-head attention classifier\n"
            "Φ(X) = c_H Σ_h U_hᵀ Xᵀ softmax(X W_h x_1) on synthetic token data, for each\n"
            "number of heads H, and write results.json, curves.npz and a figure.\n"
            "Values are layered: defaults < --preset < --config FILE.toml < flags."
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
    g.add_argument("--out", metavar="DIR", help="output folder (default runs/<name>)")
    g.add_argument(
        "--no-fast-path",
        action="store_true",
        help="zero init: simulate all H heads instead of one exact representative head",
    )
    g.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted sweep in --out: finished H values of the same config are kept",
    )
    g.add_argument(
        "--device",
        choices=("auto", "cpu", "gpu"),
        default="auto",
        help="where to run: JAX's default backend (auto), the CPU or the GPU; "
        "the runs are sharded over all devices of that kind",
    )
    add_cpu_devices(g)
    g.add_argument("--x64", action="store_true", help="simulate in float64 (default float32)")
    g.add_argument(
        "--distributed",
        action="store_true",
        help="one process per host: call jax.distributed.initialize() (cluster auto-detect or "
        "JAX_COORDINATOR_ADDRESS etc.) and shard over every host's devices; process 0 writes",
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
    _add_knobs(p)
    return p


def _add_knobs(p: argparse.ArgumentParser) -> None:
    """One flag per KNOBS entry, by section; the grid knobs (dynamics.config.grid) take several values."""
    groups = {s: p.add_argument_group(f"{s} knobs") for s in ("data", "model", "optim", "sweep")}
    for flag, section, name, typ, choices, help_ in KNOBS:
        if GRID_KNOBS.get(name, (None, None))[:2] == (section, name):  # several values: a grid
            typ, help_ = list_arg(name, flag), f"{help_}; several: a,b,c or a:b:k (k log-spaced)"
            if GRID_KNOBS[name][2] is str:  # categorical: names, checked per grid point by validation
                names = "{" + ",".join(choices.names) + "}" if isinstance(choices, parts.Registry) else ""
                help_ = f"{names} {help_.split('; several')[0]}; several: a,b,c (a grid over them)"
                choices = None
        elif isinstance(choices, parts.Registry):
            typ = _part_arg(choices, f"{section}.{name}")
        if typ is bool:  # a switch: present sets True
            groups[section].add_argument(
                flag, dest=f"{section}.{name}", action="store_const", const=True, help=help_
            )
            continue
        groups[section].add_argument(
            flag, dest=f"{section}.{name}", type=typ, choices=choices, default=None, help=help_
        )


def _part_arg(registry: parts.Registry, field: str):
    """A part's name; a user part's ("module:attribute") that does not import is refused with why."""

    def part(text: str) -> str:
        if parts.registry.is_user_name(text) and text not in registry.names:
            try:
                registry.get(text, field)
            except ConfigError as err:
                raise argparse.ArgumentTypeError(str(err)) from None
        return text

    return part


def config_from_args(args: argparse.Namespace) -> Experiment | GridExperiment:
    """The experiment the flags ask for, validated and planned (the one place the CLI does it):
    a grid (``dynamics.config.grid``) when a knob has several values, else a plain sweep."""
    for flag in ("preset", "config", "data", "out"):
        value = getattr(args, flag)
        if value is not None and not value.strip():
            raise ConfigError(f"--{flag} '' is empty: give a name or a path, or leave the flag out")
    cfg, axes = grid_preset(args.preset) if args.preset else (Config(), {})
    if args.config:
        cfg, more = load_toml_grid(args.config, base=cfg)
        axes.update(more)
    overrides: dict[str, dict] = {}
    for _flag, section, name, *_ in KNOBS:
        value = getattr(args, f"{section}.{name}")
        if isinstance(value, tuple) and name in GRID_KNOBS:
            axes[name] = value
        elif value is not None:
            axes.pop(name, None)
            overrides.setdefault(section, {})[name] = value
    if args.data:
        named = overrides.get("data", {}).get("model")
        if named is not None and not (named in parts.DATA_MODELS and parts.DATA_MODELS[named].from_file):
            raise ConfigError(
                f"--data FILE.npz cannot be combined with --data-model {overrides['data']['model']}"
            )
        fixed = [
            f"--{f}" for f in ("n-train", "n-test", "tokens", "width") if getattr(args, _dest(f)) is not None
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


def _dest(flag: str) -> str:
    """The argparse dest of a knob's flag ('n-train' -> 'data.n_train')."""
    return next(f"{section}.{name}" for f, section, name, *_ in KNOBS if f == f"--{flag}")


def format_table(result) -> str:
    """One row per H: the final metrics it logs (mean ± std over trials), diverged runs."""
    shown = [m for m in SUMMARY_METRICS if m in result.curves]
    header = f"{'H':>4}  " + "  ".join(f"{COLUMN_TITLES[m]:>17}" for m in shown) + "  drops  diverged"
    lines = [header, "-" * len(header)]
    for row in result.summary():
        cells = "  ".join(f"{mean_std(row[m]):>17}" for m in shown)
        drops = np.mean([len(p["drops"]) for p in row["plateaus"]])  # per trial, of the training loss
        lines.append(f"{row['heads']:>4}  {cells}  {drops:>5.3g}  {row['n_diverged']}/{row['trials']}")
    return "\n".join(lines)


def _report(exp, result, out: Path) -> None:
    """The one-line description, the result table (one row per H, per grid point for a grid)."""
    grid = isinstance(exp, GridExperiment)
    cfg = exp.base.config if grid else exp.config
    opt = cfg.optim
    lr = "grid" if grid and "lr" in dict(exp.axes) else opt.lr
    axes = f", grid {' × '.join(f'{n}[{len(v)}]' for n, v in exp.axes)}" if grid else ""
    print(
        f"{cfg.name}: {cfg.data.model} n={cfg.data.n_train}/{cfg.data.n_test}, {opt.optimizer} "
        f"η₀={lr} ({opt.lr_scaling}), {opt.steps} steps, {cfg.sweep.trials} trials{axes}, "
        f"{result.wall_time_s:.1f} s"
    )
    if grid:
        from dynamics.sweeps.grid import format_grid_table

        print(format_grid_table(result, mean_std))
        print(f"wrote {out / 'results.json'}, {out / 'curves.npz'} and {out / 'summary.csv'}")
    else:
        print(format_table(result))
        print(f"wrote {out / 'results.json'} and {out / 'curves.npz'}")


def _imports(args: argparse.Namespace, timings: Timings) -> None:
    """Import JAX and the engine, and set up the compilation cache, before any compile."""
    with timings.phase("imports"):
        import dynamics.sweeps.checkpoint  # noqa: F401  (jax, optax and the engine)
        from dynamics.infra.cache import apply

        apply(args)
    timings.listen()


def _run(exp: Experiment, args: argparse.Namespace, out: Path):
    """The checkpointed sweep on the devices and in the precision that --device, --x64 and
    --distributed ask for."""
    import contextlib

    import jax

    from dynamics.sweeps.checkpoint import run_checkpointed
    from dynamics.sweeps.devices import select_devices

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
        if args.x64:
            stack.enter_context(jax.enable_x64(True))
        local = [d for d in devices if d.process_index == jax.process_index()]
        stack.enter_context(jax.default_device(local[0]))
        if isinstance(exp, GridExperiment):
            from dynamics.sweeps.grid import run_grid_checkpointed as run_checkpointed
        return run_checkpointed(exp, out, resume=args.resume, progress=not args.quiet, devices=devices)


def _warn_identical(cfg: Config) -> None:
    """Print why the trials would be identical copies (file data, an init that draws nothing), once:
    the sweep's own Python warning is silenced."""
    why = identical_trials(cfg)
    if why is not None:
        import warnings

        print(f"warning: {why}", file=sys.stderr)
        warnings.filterwarnings("ignore", category=IdenticalTrialsWarning)


def _is_main_process() -> bool:
    import jax

    return jax.process_index() == 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any("bottleneck" in arg for arg in argv):  # cheap test first: the module imports JAX
        from dynamics.cli import (
            bottleneck as bottleneck_cli,  # the bottleneck presets have their own runner
        )

        if bottleneck_cli.requested(argv):
            return bottleneck_cli.main(argv)
    timings = Timings().start()
    where: dict[str, Path] = {}  # the output folder, once the sweep may have written into it
    try:
        return interrupts.command(lambda: _main(argv, timings, where), lambda: _interrupted(where))
    finally:
        timings.stop()


def _interrupted(where: dict) -> str:
    if "out" not in where:
        return "interrupted before the sweep started: nothing was written"
    out = Path(where["out"])
    if not any((out / "points").glob("*.npz")):  # what is on disk, not what might have been
        return f"interrupted before a point had finished: nothing to resume in {out}"
    if where.get("grid"):
        kept = f"the finished grid points are in {out / 'points'}"
    else:
        kept = f"the finished H values are in {out} (results.json is partial)"
    return f"interrupted: {kept}; rerun the same command with --resume to finish"


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
        check_sweep(base, x64=args.x64)  # and the memory it needs, before anything is allocated
        cfg = base.config
        _warn_identical(cfg)
        where["grid"] = isinstance(exp, GridExperiment)
        out = Path(args.out or Path("runs") / cfg.name)
        _imports(args, timings)
        apply_cpu_devices(args)
        if not args.no_figure:  # (not jax.process_index(): that would start JAX before --distributed)
            import_plotting_meanwhile()
        where["out"] = out
        result = _run(exp, args, out)
    except (ConfigError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not _is_main_process():
        return 0
    _report(exp, result, out)
    if not args.no_figure:
        with timings.phase("imports"):
            use_file_backend()
            from figures.phase import plot_grid  # matplotlib: only when a figure is drawn
            from figures.sweep import plot_sweep
        with timings.phase("plotting"):
            plot = plot_grid if isinstance(exp, GridExperiment) else plot_sweep
            paths = plot(out, out / "figure")
            if cfg.sweep.diagnostics and not isinstance(exp, GridExperiment):  # a grid's: per point
                from figures.theory import plot_diagnostics

                paths += plot_diagnostics(out, out / "diagnostics")
        for path in paths:
            print(f"wrote {path}")
    timings.stop()
    from dynamics.sweeps.results import add_to_results

    add_to_results(out, timings=timings.to_dict())
    if args.timings:
        print(timings.report())
    return 0


if __name__ == "__main__":
    interrupts.finish(main())
