"""The in-context softmax-heads figure (preset ``icl-heads``), drawn from saved results only.

Left: the test mse against the step, a line per H, with the reference predictors
(``dynamics.experiments.icl_heads.reference_predictors``) as horizontal lines. Middle: the final
test mse of each H's trained heads at other context lengths L. Right: each head's KQ diagonal
share against its OV y-share (``head_structure``). The numbers are the result's headline's (the
references, the lengths) and its saved parameters (the structure).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from dynamics.api import load_results
from dynamics.core import model as mdl
from dynamics.experiments import icl_heads
from figures.sweep import save_figure, sweep_data
from figures.theme import set_theme

REF_STYLE = {
    "ridge": ("0.2", ":"),
    "gd_step": ("#8c564b", "--"),
    "paired_heads": ("#2ca02c", "-."),
    "single_kernel": ("#9467bd", "--"),
}


def plot_icl_heads(results_dir: str | Path, stem: str | Path) -> list[Path]:
    """``icl_heads_figure(results_dir)`` saved as ``stem``.png and .pdf."""
    return save_figure(icl_heads_figure(results_dir), stem)


def _headline(source) -> dict:
    if isinstance(source, str | Path):
        return load_results(source).headline()
    return source.headline()


def icl_heads_figure(source) -> Figure:
    """The three panels above; ``source`` an ``icl-heads`` results folder or its SweepResult."""
    meta, curves = sweep_data(source)
    head = _headline(source)
    set_theme()
    fig, axes = plt.subplots(1, 3, figsize=(15.5, 4.3), layout="constrained")
    heads = np.asarray(curves["heads"]).tolist()
    colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.85, len(heads)))
    steps = np.asarray(curves["steps"])
    keep = steps > 0
    for i, h in enumerate(heads):
        loss = np.asarray(curves["test_loss"])[i]  # (trials, L)
        axes[0].plot(steps[keep], np.nanmean(loss, axis=0)[keep], color=colors[i], lw=1.6, label=f"H = {h}")
    for name, (color, ls) in REF_STYLE.items():
        ref = head.get(f"ref_{name}")
        if ref and ref.get("value") is not None:
            label = f"{ref['label']} {ref['value']:.3f}"
            axes[0].axhline(ref["value"], color=color, ls=ls, lw=1.1, label=label)
    axes[0].set_xscale("log")
    axes[0].set_yscale("log")
    axes[0].set_xlabel("Adam step")
    axes[0].set_ylabel("test mse (noise σ² included)")
    axes[0].legend(frameon=False, fontsize="x-small", ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    lengths = [L for L in icl_heads.LENGTHS if f"mse_L{L}_H{heads[0]}" in head]
    for i, h in enumerate(heads):
        values = [head[f"mse_L{L}_H{h}"]["value"] for L in lengths]
        axes[1].plot(lengths, values, "o-", color=colors[i], label=f"H = {h}")
    data = meta["config"]["data"]
    axes[1].axvline(data["T"] - 1, color="0.6", lw=0.8)
    axes[1].set_xlabel("context length L (trained at the grey line)")
    axes[1].set_ylabel("test mse of the trained heads")
    axes[1].legend(frameon=False, fontsize="small")
    _structure(axes[2], source, heads, colors, data["d"] - 1)
    optim = meta["config"]["optim"]
    fig.suptitle(
        f"in-context linear regression, d = {data['d'] - 1}, L = {data['T'] - 1}, softmax heads (query "
        f"outside the keys, factored V, O); {optim['optimizer']} η = {optim['lr']:g}, "
        f"batch {optim['batch_size']}, {int(steps[-1])} steps",
        fontsize="medium",
    )
    return fig


def _structure(ax, source, heads, colors, D: int) -> None:
    """Each head of trial 0 as a point (KQ diagonal share, OV y-share), its size its ‖U_h‖."""
    result = load_results(source) if isinstance(source, str | Path) else source
    if not getattr(result, "params", None):
        ax.text(0.5, 0.5, "no saved parameters", ha="center", transform=ax.transAxes)
        return
    for i, h in enumerate(heads):
        params = icl_heads.final_params(result, i, 0)
        diag, yshare = icl_heads.head_structure(params, D)
        norm = np.linalg.norm(mdl.readout_vector(params), axis=1)  # ‖U_h‖: how much the head adds
        size = 10 + 70 * norm / max(float(norm.max()), 1e-30)
        ax.scatter(diag, yshare, color=colors[i], s=size, alpha=0.8, label=f"H = {h}")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("KQ diagonal share Σ W_ii² / ‖W_xx‖²")
    ax.set_ylabel("OV y-share U_y² / ‖U‖²")
    ax.set_title("each head of trial 0, its size ‖U_h‖", fontsize="medium")
    ax.legend(frameon=False, fontsize="small", loc="lower left")
