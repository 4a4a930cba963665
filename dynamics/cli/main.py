"""The ``mhsim`` console script: ``mhsim run|figures|demo|runs [ARGS]``.

``mhsim run`` is ``python -m dynamics.run``, ``mhsim figures`` is ``python -m figures``,
``mhsim demo`` is ``python -m dynamics.demo`` and ``mhsim runs`` is ``python -m dynamics.cli.runs``
(the runs saved under a folder, one line per run × grid point × H).

Each subcommand hands the rest of the command line to that module's ``main`` unchanged, so the
flags, errors and exit codes are the same as the ``python -m`` forms'.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "run": ("dynamics.cli.run", "simulate a sweep over the number of heads (python -m dynamics.run)"),
    "figures": ("dynamics.cli.figures", "regenerate the registered figures (python -m figures)"),
    "demo": ("dynamics.demo.__main__", "a teaching demo (python -m dynamics.demo)"),
    "runs": ("dynamics.cli.runs", "list the runs saved under a folder (python -m dynamics.cli.runs)"),
}
USAGE = "usage: mhsim {run,figures,demo,runs} [ARGS ...]   (mhsim COMMAND --help for its flags)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        lines = [USAGE, ""] + [f"  {name:8s} {help_}" for name, (_, help_) in COMMANDS.items()]
        print("\n".join(lines), file=sys.stdout if argv else sys.stderr)
        return 0 if argv else 2
    if argv[0] not in COMMANDS:
        print(f"error: unknown command {argv[0]!r}; allowed: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
