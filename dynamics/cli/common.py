"""The command lines' shared room: the parser, argument types, device flags and table helpers.

Used by the three command lines and ``figures``' own: ``python -m dynamics.run``
(``dynamics.run``), its bottleneck presets (``dynamics.cli.bottleneck``), ``python -m
dynamics.demo`` and ``python -m figures``. It imports nothing of theirs, so none of them
imports one that imports it back.

Every command line reports a bad value as one line on stderr, ``error: … (see --help)``
for argparse's own checks, and exits with code 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
from pathlib import Path

from dynamics.config.schema import ConfigError
from dynamics.parts.values import comma_items, float_arg, floats_arg, head_size_arg, int_arg  # noqa: F401
from dynamics.sweeps.folders import Claim, new_run_folder


class OneLineParser(argparse.ArgumentParser):
    """argparse with a one-line error (and exit code 2) instead of the usage dump, and a flag that
    takes a value refused when it is given twice with different values (argparse would keep the
    last one without a word: ``--lr 0.1 … --lr 1`` is more often a slip than a choice)."""

    def error(self, message: str):
        self.exit(2, f"error: {message} (see --help)\n")

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        repeated = repeated_flag(self, args)
        if repeated is not None:
            self.error(repeated)
        return super().parse_known_args(args, namespace)


def _action_of(parser: argparse.ArgumentParser, name: str) -> argparse.Action | None:
    """The action an option string selects: exact, or the one long option it abbreviates."""
    action = parser._option_string_actions.get(name)
    if action is None and parser.allow_abbrev and name.startswith("--"):
        found = {a for s, a in parser._option_string_actions.items() if s.startswith(name)}
        action = found.pop() if len(found) == 1 else None
    return action


def with_flags(argv: list[str], *pairs: str) -> list[str]:
    """``argv`` with each flag of ``pairs`` (flag, value, flag, value, …) set to its value: the
    flag's earlier occurrences (``--flag v`` or ``--flag=v``) dropped, the pair appended: how a
    script overrides a flag of a base command line, which the parsers would refuse given twice
    with two values (``repeated_flag``)."""
    if len(pairs) % 2 or not all(isinstance(a, str) for a in pairs):
        raise ValueError(f"with_flags takes pairs of strings (flag, value, …), got {pairs!r}")
    bad = [f for f in pairs[::2] if not f.startswith("--") or "=" in f]
    if bad:
        raise ValueError(f"with_flags: {bad[0]!r} is not a long flag such as '--lr'")
    flags = dict(zip(pairs[::2], pairs[1::2], strict=True))
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in flags:
            skip = True
        elif a.partition("=")[0] not in flags:
            out.append(a)
    for flag, value in flags.items():
        out += [flag, value]
    return out


def repeated_flag(parser: argparse.ArgumentParser, args: list[str]) -> str | None:
    """The message for the first flag of ``args`` that takes a value and is given twice with two
    different values (the same value twice, and flags without a value, are harmless), else None.
    Flags that collect (``append``, ``extend``) may repeat; the scan stops at ``--``."""
    seen: dict[str, tuple[str, object]] = {}
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            break
        if not token.startswith("--"):
            continue
        name, eq, value = token.partition("=")
        action = _action_of(parser, name)
        collects = isinstance(action, argparse._AppendAction | argparse._ExtendAction)
        if action is None or action.nargs == 0 or collects:
            continue
        if eq:
            given: object = value
        elif action.nargs in (None, "?"):
            given = args[i] if i < len(args) and not args[i].startswith("--") else None
            i += given is not None
        else:  # several values: those up to the next flag
            j = i
            while j < len(args) and not args[j].startswith("--"):
                j += 1
            given, i = tuple(args[i:j]), j
        first = seen.setdefault(action.dest, (name, given))
        if first[1] != given:
            return f"{first[0]} is given twice ({first[1]!r}, then {name} {given!r}): give it once"
    return None


def int_list_arg(text: str) -> tuple[int, ...]:
    """'1,2,4' -> (1, 2, 4); an empty part ('1,,2') is refused."""
    try:
        parts = comma_items(text)
        if parts is None:
            raise ValueError
        return tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers") from None


MAX_CPU_DEVICES = 256  # XLA allocates ~0.2 MB per CPU device: 10⁵ of them took 19 GB


def add_cpu_devices(p: argparse.ArgumentParser) -> None:
    """The ``--cpu-devices N`` flag (applied by ``apply_cpu_devices``)."""
    p.add_argument(
        "--cpu-devices",
        type=int_arg,
        metavar="N",
        default=None,
        help="split the CPU into N JAX devices and shard the runs over them (default: one per "
        "core, at least 2, so all cores work and every machine gives the same numbers; 1 = "
        "XLA's single CPU device). Ignored with --distributed and when XLA_FLAGS sets a count",
    )


def apply_cpu_devices(args: argparse.Namespace) -> None:
    """Split the CPU as --cpu-devices asks, before JAX starts (no-op once it has)."""
    if getattr(args, "distributed", False):
        return  # each host's process keeps the devices its launcher gives it
    if args.cpu_devices is not None and args.cpu_devices < 1:
        raise ConfigError(f"--cpu-devices={args.cpu_devices} must be a positive integer")
    if args.cpu_devices is not None and args.cpu_devices > MAX_CPU_DEVICES:
        raise ConfigError(
            f"--cpu-devices={args.cpu_devices} must be <= {MAX_CPU_DEVICES} "
            f"(each device costs memory; this machine has {os.cpu_count()} cores)"
        )
    from dynamics.sweeps.devices import split_cpu  # lazy: imports JAX: only once a command runs

    split_cpu(args.cpu_devices)


def add_folder_flags(p: argparse.ArgumentParser, name: str) -> None:
    """``--out DIR`` (default a new ``runs/<name>-<YYYYMMDD-HHMMSS>``) and ``--overwrite``, as
    ``choose_folder`` reads them."""
    p.add_argument(
        "--out",
        metavar="DIR",
        help=f"output folder (default: a new runs/{name}-<YYYYMMDD-HHMMSS>); a folder that holds this "
        "config's results is reused, one that holds another config's is refused (see --overwrite)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace another config's results in --out: its files stay until this run's are written",
    )


# The line a run prints first: where it writes, and what it does with what the folder held.
FOLDER_LINES = {
    "made": "writing into the new folder {out}",
    "new": "writing into {out}",
    "resume": "{out} holds this config's unfinished results: reusing its finished part",
    "done": "{out} already holds this config's finished results; nothing to run",
    "replace": "{out} holds another config's results: replaced once this run's are written (--overwrite)",
    "damaged": "{out} holds this config's finished results, but they cannot be read: recomputing them",
}


def choose_folder(args: argparse.Namespace, name: str, claim: Claim) -> tuple[Path, str]:
    """The run's folder (``args.out``) and what the run does with it (``FOLDER_LINES``): without
    --out a new ``runs/<name>-<YYYYMMDD-HHMMSS>``; else ``claim.decide`` (another config's results
    refused without --overwrite, a folder of other files refused)."""
    if args.out is None:
        for flag in ("resume", "overwrite", "distributed", "work_queue"):  # (each process would make its own)
            if getattr(args, flag, False):
                raise ConfigError(
                    f"--{flag.replace('_', '-')} needs --out DIR, the folder it applies to: without --out "
                    f"every run writes a new folder runs/{name}-<date>-<time>"
                )
        return new_run_folder(name), "made"
    out = Path(args.out)
    return out, claim.decide(out)


def mean_std(entry: dict) -> str:
    """A summary entry {'mean', 'std'} as 'm ± s' for a table; 'diverged' where every trial did."""
    return "diverged" if entry["mean"] is None else f"{entry['mean']:.4f} ± {entry['std']:.4f}"


PLOTTING_MODULES = ("figures.sweep", "figures.phase", "figures.theory", "matplotlib.backends.backend_pdf")


def import_plotting_meanwhile() -> threading.Thread:
    """Import matplotlib and the figure modules (about half a second) in a background thread
    while the experiment runs: the experiment waits in compiled code, which releases the GIL,
    so the imports take no wall time. A later ``import`` of one of them in the main thread
    waits for it (Python's module locks). Call after JAX is imported: two threads importing at
    once take as long as one."""

    def load():
        use_file_backend()
        for name in PLOTTING_MODULES:
            importlib.import_module(name)

    thread = threading.Thread(target=load, name="mhsim-import-plotting", daemon=True)
    thread.start()
    return thread


def use_file_backend() -> None:
    """The command lines draw into files: matplotlib's non-interactive Agg backend. (No module
    sets a backend at import, so figures show inline in a notebook.)"""
    import matplotlib  # lazy: matplotlib: for a figure only

    matplotlib.use("Agg")
