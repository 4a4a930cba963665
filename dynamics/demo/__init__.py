"""Teaching demos: ``python -m dynamics.demo NAME`` writes pictures a class can read.

Each demo is a module with ``NAME``, ``PURPOSE`` and ``run(out, *, quick, seed, progress) ->
DemoResult``; ``--quick`` is a tiny setting for tests and smoke checks.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from dynamics.demo import attention, lazy_rich, step_size, symmetry
from dynamics.demo.common import DemoResult

_MODULES = (attention, symmetry, lazy_rich, step_size)
DEMOS = {m.NAME: m for m in _MODULES}


class UnknownDemo(ValueError):
    """A demo name that is not in ``DEMOS``; the message suggests the closest one."""


def get(name: str):
    if name not in DEMOS:
        close = difflib.get_close_matches(name, list(DEMOS), n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownDemo(f"unknown demo {name!r}{hint}; known: {', '.join(DEMOS)} (see --list)")
    return DEMOS[name]


def run_demo(name: str, out: str | Path, *, quick: bool = False, seed: int = 0, progress: bool = True):
    """Run demo ``name`` and write its pictures into ``out``."""
    return get(name).run(Path(out), quick=quick, seed=seed, progress=progress)


__all__ = ["DEMOS", "DemoResult", "UnknownDemo", "get", "run_demo"]
