"""The number-of-heads figure of a sweep, drawn from saved result files only."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.colors import LogNorm, Normalize  # noqa: E402

from dynamics.io import load_results  # noqa: E402

OPT_LABEL = {"gd": "GD", "adam": "Adam"}
SCALING_LABEL = {"constant": "", "sqrt": "·√H", "linear": "·H"}
DATA_LABEL = {
    "dm1": "DM1",
    "planted": "planted teacher-student",
    "mixture": "tokenized mixture",
    "npz": "user data",
}


def describe(config: dict) -> str:
    """'DM1 (n=100), GD η=1·H' from a results.json config."""
    data, optim = config["data"], config["optim"]
    name = DATA_LABEL.get(data["model"], data["model"])
    n = f" (n={data['n_train']})" if data["model"] != "npz" else ""
    scaling = SCALING_LABEL[optim["lr_scaling"]]
    return f"{name}{n}, {OPT_LABEL[optim['optimizer']]} η={optim['lr']:g}{scaling}"


def head_colors(heads: np.ndarray):
    """A sequential palette ordered by H (log-spaced when H spans decades) and its norm."""
    cmap = sns.color_palette("flare", as_cmap=True)
    lo, hi = float(heads.min()), float(heads.max())
    norm = LogNorm(lo, hi) if lo > 0 and hi / lo >= 4 else Normalize(lo, max(hi, lo + 1))
    return cmap, norm


def _mean_curve(curves: np.ndarray) -> np.ndarray:
    """Mean over the trials that did not diverge (NaN where none remain), (n_heads, L)."""
    ok = np.isfinite(curves)
    count = ok.sum(axis=1)
    total = np.where(ok, curves, 0.0).sum(axis=1)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _spans_decades(values: np.ndarray) -> bool:
    v = values[np.isfinite(values) & (values > 0)]
    return v.size > 1 and v.max() / v.min() > 20


def plot_loss_curves(ax, meta: dict, curves: dict, metric: str, label: str) -> None:
    heads, steps = curves["heads"], curves["steps"]
    cmap, norm = head_colors(heads)
    mean = _mean_curve(curves[metric])
    x = np.maximum(steps, 1) if steps.max() > 50 else steps
    for i, h in enumerate(heads):
        ax.plot(x, mean[i], color=cmap(norm(h)), lw=1.6, label=f"H={h}")
    if steps.max() > 50:
        ax.set_xscale("log")
    if _spans_decades(mean):
        ax.set_yscale("log")
    ax.set_xlabel("iteration t")
    ax.set_ylabel(label)
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=norm)
    cbar = ax.figure.colorbar(sm, ax=ax, pad=0.01)
    cbar.set_ticks(heads, labels=[str(h) for h in heads])
    cbar.minorticks_off()
    cbar.set_label("heads H")


def plot_final_vs_heads(ax, meta: dict, curves: dict) -> None:
    heads = curves["heads"]
    palette = sns.color_palette("colorblind")
    all_vals = []
    for metric, label, color in (("train_loss", "train", palette[0]), ("test_loss", "test", palette[1])):
        final = curves[metric][:, :, -1]  # (n_heads, trials)
        ok = np.isfinite(final)
        mean = np.array([final[i, ok[i]].mean() if ok[i].any() else np.nan for i in range(len(heads))])
        std = np.array([final[i, ok[i]].std() if ok[i].any() else np.nan for i in range(len(heads))])
        ax.plot(heads, mean, "o-", color=color, label=f"{label} loss")
        ax.fill_between(heads, mean - std, mean + std, color=color, alpha=0.25, lw=0)
        all_vals.append(mean)
    diverged = np.array(meta.get("summary") and [row["n_diverged"] > 0 for row in meta["summary"]])
    if diverged.size and diverged.any():
        for h in heads[diverged]:
            ax.axvline(h, color="0.3", ls=":", lw=1)
        ax.plot([], [], ls=":", color="0.3", label="diverged trials")
    if heads.max() / heads.min() >= 4:
        ax.set_xscale("log", base=2)
    if _spans_decades(np.concatenate(all_vals)):
        ax.set_yscale("log")
    ax.set_xticks(heads, [str(h) for h in heads])
    ax.set_xlabel("number of heads H")
    ax.set_ylabel(f"loss at t = {int(curves['steps'][-1])}")
    ax.legend(frameon=False)


def plot_sweep(results_dir: str | Path, stem: str | Path) -> list[Path]:
    """Train loss vs t, test loss vs t (a line per H) and final loss vs H (±1 std); PNG and PDF."""
    meta, curves = load_results(results_dir)
    sns.set_theme(context="notebook", style="whitegrid")
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4), layout="constrained")
    plot_loss_curves(axes[0], meta, curves, "train_loss", "train loss")
    plot_loss_curves(axes[1], meta, curves, "test_loss", "test loss")
    plot_final_vs_heads(axes[2], meta, curves)
    trials = curves["train_loss"].shape[1]
    fig.suptitle(
        f"{describe(meta['config'])}, θ(0) = {'0' if meta['config']['model']['init'] == 'zero' else 'random'}"
        f" — mean of {trials} trials"
    )
    stem = Path(stem)
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=130)
    plt.close(fig)
    return paths
