"""Demo ``symmetry``: why zero-init heads never differ.

The same DM1 data and GD steps from θ(0) = 0 and from a small random init (entries
N(0, σ₀²/d)). Every head is simulated (no fast path), so the zero-init diversity
max_{h,h'} ‖θ_h − θ_h'‖ is measured, not assumed; it is exactly 0 at every step because
identical heads get bit-identical gradients (docs/model.md).

All H values run in one compiled program: each run stores H_max heads, the first H of weight 1
and the others of weight 0 (``common.first_heads``, ``dynamics.core.model.logits``): those add exactly
nothing to Φ and get exactly zero gradient.

Holds the settings, the compiled run (``train_symmetry``), ``compute`` → ``SymmetryRun``,
``draw`` (diversity over training; final train and test loss against H), ``report`` and ``run``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import seaborn as sns
from matplotlib.figure import Figure

from dynamics.core import inits, rng
from dynamics.core import model as mdl
from dynamics.core.losses import Loss, mean_loss
from dynamics.demo import common as cm

NAME = "symmetry"
PURPOSE = "zero init vs small random init: head diversity over training (zero stays exactly 0), loss vs H"


@dataclass(frozen=True)
class Settings:
    heads: tuple[int, ...] = (1, 2, 4, 8, 16)
    init_scale: float = 0.1  # σ₀ of the random init: small, so both runs start near θ = 0
    steps: int = 500
    lr: float = 1.0  # GD η, the same for every H and both inits
    log_points: int = 50
    trials: int = 3  # data draws (and random inits); bands show ±1 std
    n_train: int = 100
    n_test: int = 300
    T: int = 10
    d: int = 32
    n_irrelevant: int = 4


FULL = Settings()
QUICK = Settings(heads=(1, 2, 3), steps=12, log_points=5, trials=1, **cm.QUICK_DATA)


@partial(jax.jit, static_argnames=("h_max", "segments"))
def train_symmetry(data, key: jax.Array, n_heads: jax.Array, scale: jax.Array, lr, h_max: int, segments):
    """One run: the first ``n_heads`` of ``h_max`` heads active, init scale ``scale`` (0 = θ(0) = 0).

    ``data`` is one trial; returns the diversity and train/test loss at every logged step (L,).
    """
    loss = Loss.LOGISTIC
    d = data.X_train.shape[-1]
    normal = inits.init_params(key, h_max, d, init="normal", scale=1.0)
    # The empty slots keep their draw: weight 0 gives them no say in Φ and exactly zero gradient,
    # and the diversity reads only the H heads of the model.
    params0 = {k: jnp.where(scale > 0, scale * v, 0.0) for k, v in normal.items()}
    weight = cm.first_heads(n_heads, h_max)  # (h_max,)

    def phi(p, X):
        return mdl.logits(p, X, weight=weight, n_heads=n_heads)  # (n,): c_H Σ_{h ≤ H} f_h

    def objective(p):
        return mean_loss(data.y_train * phi(p, data.X_train), loss)

    def observe(p):
        return {
            "diversity": mdl.head_diversity(p, weight > 0),
            "train_loss": objective(p),
            "test_loss": mean_loss(data.y_test * phi(p, data.X_test), loss),
        }

    return cm.train_logged(objective, params0, "gd", lr, segments, observe)


def _band(ax, x, values, color, label, marker, ls="-"):
    """Mean over trials with a ±1 std band; values (n_heads, trials)."""
    mean, std = values.mean(axis=1), values.std(axis=1)
    ax.plot(x, mean, marker=marker, ls=ls, color=color, label=label, lw=2, ms=6)
    ax.fill_between(x, mean - std, mean + std, color=color, alpha=0.2, lw=0)


INITS = ("zero", "random")  # the first axis of SymmetryRun's arrays


class SymmetryRun(NamedTuple):
    """What ``compute`` returns: float64 numpy arrays over (init, H, trial, logged step), where init
    is ``INITS`` (θ(0) = 0, then the small random init)."""

    heads: np.ndarray  # (H,) numbers of heads
    steps: np.ndarray  # (L,) the logged iterations t, from 0 to the last step
    diversity: np.ndarray  # (2, H, trials, L) max_{h,h'} ‖θ_h − θ_h'‖ over the model's heads
    train_loss: np.ndarray  # (2, H, trials, L)
    test_loss: np.ndarray  # (2, H, trials, L)


def compute(s: Settings, seed: int = 0) -> SymmetryRun:
    """Train every (init, H, trial) of ``s`` from ``seed`` in one vmapped, compiled program."""
    # keys as jax.random derives them, and the grid's rows taken, in numpy (dynamics.core.rng): the
    # same numbers without a program compiled for every key operation and gather
    k_data, k_init = rng.split(rng.seed(seed))
    fields = dict(n_train=s.n_train, n_test=s.n_test, T=s.T, d=s.d, n_irrelevant=s.n_irrelevant)
    data = cm.dm1_data(k_data, s.trials, **fields)
    keys = np.stack([rng.fold_in(k_init, i) for i in range(s.trials)])  # (trials, 2)
    steps, segments = cm.schedule(s.steps, s.log_points)
    # Grid (init, H, trial) flattened into one vmapped batch; one compile for everything.
    scales = np.array([0.0, s.init_scale])
    grid = np.stack(
        np.meshgrid(np.arange(2), np.arange(len(s.heads)), np.arange(s.trials), indexing="ij"), -1
    )
    gi, hi, ti = grid.reshape(-1, 3).T
    batch_data = jax.tree_util.tree_map(lambda a: np.asarray(a)[ti], data)
    fn = jax.vmap(partial(train_symmetry, h_max=max(s.heads), segments=segments), in_axes=(0, 0, 0, 0, None))
    logged = fn(
        batch_data,
        keys[ti],
        jnp.array(np.array(s.heads)[hi], jnp.float32),
        jnp.array(scales[gi], jnp.float32),
        jnp.float32(s.lr),
    )
    shape = (2, len(s.heads), s.trials, len(steps))
    logged = {k: np.asarray(v, dtype=np.float64).reshape(shape) for k, v in logged.items()}
    cm.check_finite(NAME, **logged)
    return SymmetryRun(heads=np.array(s.heads), steps=steps, **logged)


def _diversity_axes(ax, r: SymmetryRun) -> None:
    """Head diversity over training: each random-init H, and the max over every zero-init run."""
    colors, x = cm.head_palette(r.heads), cm.log_x(r.steps)
    for i, h in enumerate(r.heads):
        if h > 1:
            ax.plot(x, r.diversity[1, i].mean(axis=0), color=colors[i], lw=2, label=f"random init, H = {h}")
    zero_max = float(r.diversity[0].max())
    zero_label = f"θ(0) = 0, every H (max: {zero_max!r})"
    ax.plot(x, r.diversity[0].max(axis=(0, 1)), color="black", lw=3, label=zero_label)
    ax.set_xscale("log")
    ax.set_ylim(bottom=-0.05 * max(r.diversity.max(), 1e-12))
    ax.set_xlabel("iteration t (log scale; t = 0 drawn at 1)")
    ax.set_ylabel("head diversity  max ‖θ_h − θ_h′‖")
    ax.set_title("do the heads differ?")
    cm.legend_below(ax, fontsize=9, ncol=2)


def _final_loss_axes(ax, r: SymmetryRun, s: Settings, metric: str, label: str) -> None:
    """The final ``metric`` loss against H, zero vs random init, ±1 std over trials."""
    heads = list(r.heads)
    loss = getattr(r, metric)  # (2, H, trials, L)
    _band(ax, heads, loss[0, :, :, -1], "black", "θ(0) = 0", "o")
    random = f"random, σ₀ = {s.init_scale:g}"
    _band(ax, heads, loss[1, :, :, -1], sns.color_palette("colorblind")[1], random, "s", ls="--")
    if max(heads) / min(heads) >= 4:
        ax.set_xscale("log", base=2)
    ax.set_xticks(heads, [str(h) for h in heads])
    ax.set_xlabel("number of heads H")
    ax.set_ylabel(f"{label} loss at t = {s.steps}")
    ax.set_title(f"final {label} loss (±1 std over {s.trials} trials)")
    cm.legend_below(ax, ncol=2)


def draw(r: SymmetryRun, s: Settings) -> Figure:
    """The figure: head diversity over training, then the final train and test loss against H."""
    cm.set_style()
    fig, axes = cm.panel_row(3, figsize=(17, 5.6))
    _diversity_axes(axes[0], r)
    _final_loss_axes(axes[1], r, s, "train_loss", "train")
    _final_loss_axes(axes[2], r, s, "test_loss", "test")
    fig.suptitle(
        f"DM1 (n={s.n_train}), GD η = {s.lr:g}, c_H = 1/√H, same data and steps: "
        "from θ(0) = 0 every head gets the same gradient, so the H heads stay one head"
    )
    return fig


def report(r: SymmetryRun, s: Settings) -> tuple[dict[str, float], tuple[str, ...]]:
    """The numbers the figure shows (diversities, final test losses) and the printed lines."""
    heads, div = list(r.heads), r.diversity
    zero_max = float(div[0].max())
    final = {g: r.test_loss[i, :, :, -1].mean(axis=1) for i, g in enumerate(INITS)}  # (H,) each
    several = r.heads > 1
    numbers = {
        "zero_init_diversity_max": zero_max,
        "random_init_diversity_min": float(div[1, several].min()) if several.any() else float("nan"),
    }
    div_random = div[1].mean(axis=1)  # (H, L): mean over trials
    for i, h in enumerate(heads):
        numbers[f"diversity_random_start_H{h}"] = float(div_random[i, 0])
        numbers[f"diversity_random_final_H{h}"] = float(div_random[i, -1])
        numbers[f"test_loss_zero_H{h}"] = float(final["zero"][i])
        numbers[f"test_loss_random_H{h}"] = float(final["random"][i])
    lines = (
        f"zero-init head diversity: max over H, t, trials = {zero_max!r} (exact)",
        f"random-init head diversity t = 0 -> t = {s.steps}: "
        + ", ".join(
            f"H={h}: {div_random[i, 0]:.3f} -> {div_random[i, -1]:.3f}" for i, h in enumerate(heads) if h > 1
        ),
        "final test loss zero / random: "
        + ", ".join(f"H={h}: {final['zero'][i]:.3f} / {final['random'][i]:.3f}" for i, h in enumerate(heads)),
    )
    return numbers, lines


SLIDE_TITLE = "Heads that start at zero stay identical forever; a small random start makes them differ"


run = cm.demo_run(__name__, "symmetry.png", compute_progress=False)  # compute → draw → symmetry.png → report
