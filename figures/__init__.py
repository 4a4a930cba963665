"""mhsim's figures: one function per figure, reading saved result files only.

``figures.sweep`` draws a sweep's figure and holds what every figure shares (the data
labels, the atomic ``save_figure``); ``figures.bottleneck`` draws the bottleneck experiments;
``python -m figures`` regenerates every registered figure (see ``figures.registry``).
"""

from figures.bottleneck import plot_bottleneck_heads, plot_expressivity
from figures.registry import FIGURES, Entry, ensure_results, sweep_entry
from figures.sweep import plot_final_vs_heads, plot_loss_curves, plot_sweep

__all__ = [
    "FIGURES",
    "Entry",
    "ensure_results",
    "plot_bottleneck_heads",
    "plot_expressivity",
    "plot_final_vs_heads",
    "plot_loss_curves",
    "plot_sweep",
    "sweep_entry",
]
