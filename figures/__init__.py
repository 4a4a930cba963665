"""mhsim's figures: one function per figure, reading saved result files only.

``figures.sweep`` draws a sweep's figure and holds what every figure shares (the data
labels, the atomic ``save_figure``); ``figures.heads`` draws what each head of one run of a sweep
specialises in; ``figures.bottleneck`` draws the bottleneck experiments;
``python -m figures`` regenerates every registered figure (see ``figures.registry``). The
names below are imported on first use (PEP 562): matplotlib loads when a figure is drawn.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

if sys.argv[:1] == ["-m"]:  # Python is starting `python -m figures…`: Ctrl-C exits 130 from here on
    from dynamics.infra import interrupts

    interrupts.early()

_EXPORTS = {
    "figures.bottleneck": (
        "bottleneck_heads_figure",
        "expressivity_figure",
        "plot_bottleneck_heads",
        "plot_expressivity",
    ),
    "figures.heads": ("heads_figure", "plot_heads"),
    "figures.registry": ("FIGURES", "Entry", "ensure_results", "sweep_entry"),
    "figures.sweep": ("plot_final_vs_heads", "plot_loss_curves", "plot_sweep", "save_figure", "sweep_figure"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    if name in _MODULE_OF:
        value = getattr(importlib.import_module(_MODULE_OF[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'figures' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # for type checkers and editors: the same names, imported eagerly
    from figures.bottleneck import (  # noqa: F401
        bottleneck_heads_figure,
        expressivity_figure,
        plot_bottleneck_heads,
        plot_expressivity,
    )
    from figures.heads import heads_figure, plot_heads  # noqa: F401
    from figures.registry import FIGURES, Entry, ensure_results, sweep_entry  # noqa: F401
    from figures.sweep import (  # noqa: F401
        plot_final_vs_heads,
        plot_loss_curves,
        plot_sweep,
        save_figure,
        sweep_figure,
    )
