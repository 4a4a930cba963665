"""mhsim's figures: one function per figure, reading saved result files only."""

from figures.sweep import plot_final_vs_heads, plot_loss_curves, plot_sweep

__all__ = ["plot_final_vs_heads", "plot_loss_curves", "plot_sweep"]
