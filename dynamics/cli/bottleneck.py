"""The command line of the two bottleneck presets of ``python -m dynamics.run`` (docs/bottleneck.md).

``python -m dynamics.run --preset bottleneck-expressivity|bottleneck-heads`` comes here
(``dynamics.cli.run.main`` looks the preset up in ``OWN_RUNNERS``): parse the preset's own
flags, run the experiment of ``dynamics.experiments.bottleneck``, print a table, write the result
files and the figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from dynamics.cli.common import (
    FOLDER_LINES,
    OneLineParser,
    add_cpu_devices,
    add_folder_flags,
    apply_cpu_devices,
    choose_folder,
    int_list_arg,
    mean_std,
    use_file_backend,
)
from dynamics.config.sections import declaration
from dynamics.errors import ConfigError
from dynamics.experiments import bottleneck as bn
from dynamics.infra import interrupts
from dynamics.sweeps.checkpoint import locked
from dynamics.sweeps.folders import discard_if_empty, experiment_claim
from dynamics.sweeps.headline import format_line


def requested(argv: list[str]) -> str | None:
    """The bottleneck preset named by ``--preset NAME`` / ``--preset=NAME`` in argv, else None."""
    for i, arg in enumerate(argv):
        value = argv[i + 1] if arg == "--preset" and i + 1 < len(argv) else None
        if arg.startswith("--preset="):
            value = arg.split("=", 1)[1]
        if value in bn.NAMES:
            return value
    return None


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="python -m dynamics.run --preset bottleneck-expressivity|bottleneck-heads",
        description=bn.__doc__.split("\n\n", 1)[1].split("\n\nBoth write")[0],  # the two experiments
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--preset", required=True, choices=bn.NAMES)
    add_folder_flags(p, "<preset>")
    p.add_argument("--quick", action="store_true", help="a tiny setting, for tests and smoke runs")
    p.add_argument("--seed", type=int, help="root PRNG seed (default 0)")
    p.add_argument("--steps", type=int, help="Adam steps (expressivity: per fit; heads: per sweep)")
    p.add_argument("--tokens", type=int_list_arg, help="expressivity: sequence lengths T (e.g. 5,10)")
    p.add_argument("--restarts", type=int, help="expressivity: random inits per target")
    p.add_argument("--targets", type=int, help="expressivity: random targets per T")
    p.add_argument("--heads", type=int_list_arg, help="heads: numbers of heads H (at most the width)")
    p.add_argument("--trials", type=int, help="heads: trials per sweep point")
    p.add_argument("--width", type=int, help="heads: the fixed width d")
    p.add_argument("--no-figure", action="store_true", help="skip the figure")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    add_cpu_devices(p)
    return p


def config_from_args(args: argparse.Namespace) -> bn.ExpressivityConfig | bn.HeadsConfig:
    """The preset's config with the flags applied, validated (a heads config: every sweep's too)."""
    if args.preset == bn.EXPRESSIVITY:
        cfg = bn.QUICK_EXPRESSIVITY if args.quick else bn.ExpressivityConfig()
        pairs = {"seed": args.seed, "steps": args.steps, "tokens": args.tokens}
        pairs |= {"restarts": args.restarts, "targets": args.targets}
        wrong = [f"--{k}" for k in ("heads", "trials", "width") if getattr(args, k) is not None]
    else:
        cfg = bn.QUICK_HEADS if args.quick else bn.HeadsConfig()
        pairs = {"seed": args.seed, "steps": args.steps, "heads": args.heads, "trials": args.trials}
        pairs["width"] = args.width
        wrong = [f"--{k}" for k in ("tokens", "restarts", "targets") if getattr(args, k) is not None]
    if wrong:
        raise ConfigError(f"{', '.join(wrong)} do(es) not apply to --preset {args.preset}")
    cfg = dataclasses.replace(cfg, **{k: v for k, v in pairs.items() if v is not None})
    for name, key in (("steps", "optim.steps"), ("seed", "sweep.seed")):
        top = declaration(key).hi  # the main command line's bound, declared with its knob
        if isinstance(getattr(cfg, name), int) and getattr(cfg, name) > top:
            raise ConfigError(f"--{name}={getattr(cfg, name)} must be <= {top}")
    cfg.validate()
    if isinstance(cfg, bn.HeadsConfig):
        bn.sweep_configs(cfg)  # every sweep's own checks, before anything runs
    return cfg


def report_expressivity(results: dict) -> str:
    """Per T: the first head size that fits every target, and the best errors per d_h."""
    lines = []
    for row in results["summary"]:
        lines.append(
            f"T={row['T']} d={row['d']}: fits every target (best TV < {results['config']['tol']:g}) "
            f"from d_h = {row['reached_at']} (T − 1 = {row['theory_threshold']})"
        )
        lines.append(
            f"  {'d_h':>4} {'params':>7} {'best TV mean':>13} {'best TV max':>12} {'best KL mean':>13}"
        )
        for i, a in enumerate(row["head_sizes"]):
            lines.append(
                f"  {a:>4} {row['param_count'][i]:>7} {row['best_tv_mean'][i]:>13.2e} "
                f"{row['best_tv_max'][i]:>12.2e} {row['best_kl_mean'][i]:>13.2e}"
            )
    return "\n".join(lines)


def report_heads(results: dict) -> str:
    """One row per (data model, layout, H): head size, parameters, final losses."""
    header = (
        f"{'data':>8} {'layout':>6} {'H':>3} {'d_h':>4} {'params':>6} {'train loss':>17} {'test loss':>17}"
    )
    lines = [header, "-" * len(header)]
    for r in results["summary"]:
        lines.append(
            f"{r['data_model']:>8} {r['layout']:>6} {r['heads']:>3} {r['head_size']:>4} "
            f"{r['param_count']:>6} {mean_std(r['train_loss']):>17} {mean_std(r['test_loss']):>17}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The two bottleneck presets of ``python -m dynamics.run``."""
    where: dict[str, Path] = {}  # the output folder, once chosen
    return interrupts.command(lambda: _main(argv, where), lambda: _interrupted(where))


def _interrupted(where: dict[str, Path]) -> str:
    """The results are written at the end: an interrupted run wrote none."""
    return (
        f"interrupted: nothing was written in {where['out']}"
        if "out" in where
        else "interrupted: nothing was written"
    )


def _main(argv: list[str] | None, where: dict[str, Path]) -> int:
    args = build_parser().parse_args(argv)
    made = False
    try:
        apply_cpu_devices(args)
        cfg = config_from_args(args)
        key = bn.expressivity_key(cfg) if args.preset == bn.EXPRESSIVITY else bn.heads_key(cfg)
        claim = experiment_claim(key, dataclasses.asdict(cfg), args.preset, args.overwrite)
        out, action = choose_folder(args, args.preset, claim)  # another config's results: refused
        where["out"], made = out, action == "made"
        report = report_expressivity if args.preset == bn.EXPRESSIVITY else report_heads
        print(FOLDER_LINES[action].format(out=out))
        if action == "done":  # results.json holds the whole table
            print(report(json.loads((out / "results.json").read_text())))
            return 0
        with locked(out):
            claim.enter(out)  # again under the lock: another run may have written meanwhile
            _run(args, cfg, out, report)
            claim.written(out)
    except (ConfigError, ValueError) as err:
        if made:
            discard_if_empty(out)  # the new folder of a run that wrote nothing
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


def _run(args: argparse.Namespace, cfg, out: Path, report) -> None:
    """Run the preset's experiment, print its table, write its files and figure into ``out``."""
    if args.preset == bn.EXPRESSIVITY:
        run, npz_name = bn.run_expressivity(cfg, progress=not args.quiet), "expressivity.npz"
    else:
        run, npz_name = bn.run_heads(cfg, progress=not args.quiet), "heads.npz"
    print(f"{args.preset}: {run['results']['wall_time_s']:.1f} s")
    print(report(run["results"]))
    headline = format_line(run["results"].get("headline"))
    if headline:
        print(headline)
    for path in bn.write(run, out, npz_name):
        print(f"wrote {path}")
    if not args.no_figure:
        use_file_backend()
        from figures import bottleneck as fig  # lazy: matplotlib: for a figure only

        plot = fig.plot_expressivity if args.preset == bn.EXPRESSIVITY else fig.plot_bottleneck_heads
        for path in plot(out, out / "figure"):
            print(f"wrote {path}")
