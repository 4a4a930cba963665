"""Teaching demos: ``python -m dynamics.demo NAME`` writes pictures a class can read.

This package holds the registry of demos (``DEMOS``, ``get``, ``run_demo``); each demo is one
module (``attention``, ``symmetry``, ``lazy_rich``, ``step_size``) made of the same parts:

- ``NAME``, ``PURPOSE``; ``Settings`` with ``FULL`` (the class's pictures) and ``QUICK`` (a tiny
  setting for tests and smoke checks, ``--quick``);
- ``compute(settings, seed) ->`` a ``NamedTuple`` of numpy arrays (shapes in its field comments),
  the only part that trains; Φ comes from ``dynamics.core.model.logits`` and head diversity from
  ``dynamics.core.model.head_diversity``, as in the engine;
- ``draw(result, settings) -> Figure`` (and ``attention.draw_animation`` for the GIF), from the
  arrays alone; ``report(result, settings) -> (numbers, lines)``;
- ``run(out, *, quick, seed, progress) -> DemoResult``: compute → draw → save, and the report
  (``common.demo_run`` builds it).

``common`` holds what they share.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from dynamics.demo import attention, lazy_rich, step_size, symmetry
from dynamics.demo.common import DemoResult, settings_for

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


def run_demo(
    name: str,
    out: str | Path,
    *,
    quick: bool = False,
    seed: int = 0,
    progress: bool = True,
    slides: bool = False,
    **overrides,
):
    """Run demo ``name`` and write its pictures into ``out``; ``overrides``: ``heads``, ``lr``, ``steps``
    (the command line's ``--heads``, ``--lr``, ``--steps``), ``slides``: a 16:9 picture."""
    module = get(name)
    settings = settings_for(module, quick=quick, **overrides)
    return module.run(Path(out), seed=seed, progress=progress, settings=settings, slides=slides)


__all__ = ["DEMOS", "DemoResult", "UnknownDemo", "get", "run_demo"]
