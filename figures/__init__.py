"""mhsim's figures: one function per figure, reading saved result files only."""

from figures.bottleneck import plot_bottleneck_heads, plot_expressivity
from figures.sweep import plot_final_vs_heads, plot_loss_curves, plot_sweep

__all__ = [
    "plot_bottleneck_heads",
    "plot_expressivity",
    "plot_final_vs_heads",
    "plot_loss_curves",
    "plot_sweep",
]
