"""Demo ``attention``: watch the query token's attention move onto the relevant token.

DM1 (docs/model.md), θ(0) = 0, full-batch GD with a constant step η, c_H = 1/√H. From zero init
every head stays identical (docs/model.md), so one attention map per H tells the whole story;
the run stores one representative head of weight H (the engine's exact fast
path) and all H values train in one compiled program (``vmap`` over H).

Holds the settings, the compiled run (``train_attention``), ``compute`` → ``AttentionRun``,
``draw`` (the PNG: heatmaps per H and snapshot step over the mass curves), ``draw_animation``
(the GIF: one frame per logged step), ``report`` and ``run``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib import pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from dynamics.core import inits
from dynamics.core import model as mdl
from dynamics.core.losses import Loss, mean_loss
from dynamics.demo import common as cm

NAME = "attention"
PURPOSE = "DM1: the attention of a few test examples over training, and the mass on relevant tokens per H"
CMAP = "mako_r"
FPS = 6  # GIF frames per second: 37 logged steps play in about 6 s
MARK = "#e8601c"  # the relevant-token boxes: orange reads on every shade of the colormap


@dataclass(frozen=True)
class Settings:
    heads: tuple[int, ...] = (1, 4, 16)  # numbers of heads H (one map each: zero-init heads are identical)
    steps: int = 3000  # GD updates; attention learning is slow, it needs a few thousand
    lr: float = 1.0  # η, the same for every H (so the key-query step is η/H, see demo step-size)
    log_points: int = 40  # log-spaced logged steps = GIF frames
    n_train: int = 100
    n_test: int = 300
    T: int = 10  # DM1 defaults; a smaller T, d make the --quick run
    d: int = 32
    n_irrelevant: int = 4
    examples: int = 6  # test examples shown (half of each label)
    snapshots: int = 6  # columns of the static figure


FULL = Settings()
QUICK = Settings(heads=(1, 3), steps=20, log_points=6, examples=4, **cm.QUICK_DATA)


@partial(jax.jit, static_argnames=("segments",))
def train_attention(data, X_show: jax.Array, heads: jax.Array, lr: jax.Array, segments: tuple[int, ...]):
    """For each H in ``heads`` (H,): attention of ``X_show`` (k, T, d), the mean attention mass on the
    relevant test tokens and the train/test loss at every logged step; arrays (H, L, ...).

    ``data`` is one trial of ``dynamics.core.data.Data``.
    """
    loss = Loss.LOGISTIC
    d = data.X_train.shape[-1]

    def run(m):
        params0 = inits.init_params(jax.random.PRNGKey(0), 1, d, init="zero")  # the key is unused at zero
        weight = jnp.reshape(m, (1,))  # (1,): the one stored head stands for m identical heads

        def loss_on(p, X, y):
            return mean_loss(y * mdl.logits(p, X, weight=weight), loss)  # Φ = (1/√m)·m·f

        def objective(p):
            # Each of the m identical heads gets 1/m of the reduced model's gradient (docs/model.md),
            # so descending (loss / m) is the exact H-head GD.
            return loss_on(p, data.X_train, data.y_train) / m

        def observe(p):
            A = mdl.attention(p, data.X_test)[:, 0]  # (n_test, T): the stored head = every head
            mass = jnp.sum(A * data.mask_test, axis=-1)  # (n_test,) attention on relevant tokens
            return {
                "attn": mdl.attention(p, X_show)[:, 0],  # (k, T)
                "mass": jnp.mean(mass),
                "train_loss": loss_on(p, data.X_train, data.y_train),
                "test_loss": loss_on(p, data.X_test, data.y_test),
            }

        return cm.train_logged(objective, params0, "gd", lr, segments, observe)

    return jax.vmap(run)(heads)


def _pick_examples(y: np.ndarray, k: int) -> np.ndarray:
    """The first ⌈k/2⌉ test examples of label +1 and the first ⌊k/2⌋ of label −1."""
    pos, neg = np.flatnonzero(y > 0), np.flatnonzero(y < 0)
    idx = np.concatenate([pos[: (k + 1) // 2], neg[: k // 2]])
    return idx if idx.size else np.arange(min(k, y.size))


def _heatmap(
    ax, A: np.ndarray, mask: np.ndarray, labels: np.ndarray, vmax: float, *, left: bool, bottom: bool
):
    """Attention (k, T) as an image, rows = examples; relevant tokens outlined."""
    im = ax.imshow(A, cmap=CMAP, vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest")
    for i, t in zip(*np.nonzero(mask), strict=True):
        ax.add_patch(Rectangle((t - 0.5, i - 0.5), 1, 1, fill=False, ec=MARK, lw=2.0))
    ax.grid(False)
    k, T = A.shape
    # the first and last position only: ten labels in a narrow strip ran into each other
    ax.set_xticks(range(T), [str(t + 1) if t in (0, T - 1) else "" for t in range(T)], fontsize=8)
    ax.set_yticks(range(k), [f"y={'+' if v > 0 else '−'}1" for v in labels] if left else [], fontsize=8)
    ax.tick_params(length=0)
    if bottom:
        ax.set_xlabel("token position", fontsize=9)
    return im


def _mass_axes(ax, steps, mass, heads, colors, uniform: float) -> list:
    lines = []
    for i, h in enumerate(heads):
        (line,) = ax.plot(cm.log_x(steps), mass[i], color=colors[i], lw=2, label=f"H = {h}")
        lines.append(line)
    ax.axhline(uniform, color="0.4", ls="--", lw=1, label="uniform attention (r/T)")
    ax.set_xscale("log")
    ax.set_xlabel("iteration t (log scale; t = 0 drawn at 1)")
    ax.set_ylabel("attention on relevant\ntokens (test mean)")
    # beside the panel, outside the axes: the curves of a short run sit where a legend inside would
    ax.legend(frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return lines


class AttentionRun(NamedTuple):
    """What ``compute`` returns: float64 numpy arrays; H values of H, L logged steps, k shown examples."""

    heads: np.ndarray  # (H,) numbers of heads, one trained model each
    steps: np.ndarray  # (L,) the logged iterations t, from 0 to the last step
    attn: np.ndarray  # (H, L, k, T) attention of x₁ over the tokens of the k shown test examples
    mass: np.ndarray  # (H, L) attention on relevant tokens, mean over the test set
    train_loss: np.ndarray  # (H, L)
    test_loss: np.ndarray  # (H, L)
    mask: np.ndarray  # (k, T) the shown examples' relevant tokens (bool)
    labels: np.ndarray  # (k,) their labels, ±1
    uniform: float  # the mass of uniform attention: mean fraction r/T of relevant tokens


def compute(s: Settings, seed: int = 0) -> AttentionRun:
    """Train the H-head models of ``s`` on one DM1 draw from ``seed`` and log their attention."""
    fields = dict(n_train=s.n_train, n_test=s.n_test, T=s.T, d=s.d, n_irrelevant=s.n_irrelevant)
    data = jax.tree_util.tree_map(lambda a: a[0], cm.dm1_data(jax.random.PRNGKey(seed), 1, **fields))
    show = _pick_examples(np.asarray(data.y_test), s.examples)
    steps, segments = cm.schedule(s.steps, s.log_points)
    logged = train_attention(
        data, data.X_test[show], jnp.array(s.heads, jnp.float32), jnp.float32(s.lr), segments
    )
    logged = {k: np.asarray(v, dtype=np.float64) for k, v in logged.items()}
    cm.check_finite(NAME, **logged)
    mask_test = np.asarray(data.mask_test)
    return AttentionRun(
        heads=np.array(s.heads),
        steps=steps,
        **logged,
        mask=mask_test[show],
        labels=np.asarray(data.y_test)[show],
        uniform=float(np.mean(mask_test.sum(axis=-1))) / s.T,
    )


def _title(s: Settings) -> str:
    return (
        f"DM1 (n={s.n_train}, T={s.T}), θ(0) = 0, GD η = {s.lr:g}, c_H = 1/√H: "
        "attention of the query token x₁ (zero init: all H heads share one map)"
    )


def _vmax(r: AttentionRun) -> float:
    """The colour scale's top: the largest attention weight, rounded up to a tenth."""
    return float(np.ceil(r.attn.max() * 10) / 10)


def draw(r: AttentionRun, s: Settings) -> Figure:
    """The static figure: a heatmap strip per (H, snapshot step), the mass curves underneath."""
    cm.set_style()
    heads, colors, steps = list(r.heads), cm.head_palette(r.heads), r.steps
    cols = np.unique(np.round(np.linspace(0, len(steps) - 1, s.snapshots)).astype(int))
    fig = plt.figure(figsize=(2.2 * len(cols) + 1.2, 1.6 * len(heads) + 3.4), layout="constrained")
    gs = fig.add_gridspec(len(heads) + 1, len(cols), height_ratios=[1.0] * len(heads) + [1.7])
    for i, h in enumerate(heads):
        for c, li in enumerate(cols):
            ax = fig.add_subplot(gs[i, c])
            im = _heatmap(
                ax,
                r.attn[i, li],
                r.mask,
                r.labels,
                _vmax(r),
                left=c == 0,
                bottom=i == len(heads) - 1 and c == 0,
            )
            if i == 0:
                ax.set_title(f"t = {steps[li]}", fontsize=10)
            if c == 0:
                ax.set_ylabel(f"H = {h}", fontsize=11, color=colors[i], fontweight="bold")
    ax_mass = fig.add_subplot(gs[-1, :])
    _mass_axes(ax_mass, steps, r.mass, heads, colors, r.uniform)
    for li in cols:
        ax_mass.axvline(cm.log_x(steps)[li], color="0.75", lw=0.8, zorder=0)
    cbar = fig.colorbar(im, ax=fig.axes[:-1], shrink=0.8, pad=0.01)
    cbar.set_label("attention weight")
    fig.suptitle(_title(s) + "\nrows: test examples; orange boxes: relevant tokens", fontsize=11)
    return fig


def draw_animation(r: AttentionRun, s: Settings) -> cm.Animation:
    """The GIF: one frame per logged step (the last held a while), a heatmap per H beside the mass."""
    cm.set_style()
    heads, colors, x = list(r.heads), cm.head_palette(r.heads), cm.log_x(r.steps)
    fig = plt.figure(figsize=(2.4 * len(heads) + 5.0, 3.6), layout="constrained")
    gs = fig.add_gridspec(1, len(heads) + 2, width_ratios=[1.0] * len(heads) + [0.08, 2.4])
    images = []
    for i, h in enumerate(heads):
        ax = fig.add_subplot(gs[0, i])
        images.append(_heatmap(ax, r.attn[i, 0], r.mask, r.labels, _vmax(r), left=i == 0, bottom=True))
        ax.set_title(f"H = {h}", color=colors[i], fontweight="bold")
    fig.colorbar(images[0], cax=fig.add_subplot(gs[0, len(heads)])).set_label("attention weight")
    ax_mass = fig.add_subplot(gs[0, -1])
    _mass_axes(ax_mass, r.steps, r.mass, heads, colors, r.uniform)
    cursor = ax_mass.axvline(x[0], color="0.2", lw=1.2)
    dots = ax_mass.scatter(np.full(len(heads), x[0]), r.mass[:, 0], c=colors, s=40, zorder=3)
    header = fig.suptitle("", fontsize=10)

    def draw_frame(li: int) -> None:
        for i, image in enumerate(images):
            image.set_data(r.attn[i, li])
        cursor.set_xdata([x[li]] * 2)
        dots.set_offsets(np.column_stack([np.full(len(heads), x[li]), r.mass[:, li]]))
        header.set_text(f"DM1, θ(0) = 0, GD η = {s.lr:g}: attention of x₁, iteration t = {r.steps[li]}")

    hold = [len(r.steps) - 1] * 8  # linger on the trained state before the loop restarts
    return cm.Animation(fig, draw_frame, (*range(len(r.steps)), *hold))


def report(r: AttentionRun, s: Settings) -> tuple[dict[str, float], tuple[str, ...]]:
    """The numbers the pictures show (final mass per H, the uniform mass) and the printed line."""
    numbers = {f"mass_final_H{h}": float(r.mass[i, -1]) for i, h in enumerate(r.heads)}
    numbers["mass_uniform"] = r.uniform
    lines = (
        f"attention on relevant tokens: {r.uniform:.3f} (uniform) at t = 0 -> "
        + ", ".join(f"H={h}: {r.mass[i, -1]:.3f}" for i, h in enumerate(r.heads))
        + f" at t = {s.steps}",
    )
    return numbers, lines


SLIDE_TITLE = "Attention learns to look at the one useful token — more heads learn it more slowly"


def _gif(r: AttentionRun, s: Settings, out: Path, progress: bool) -> tuple[Path, ...]:
    """``attention.gif``: the animation (``draw_animation``) beside the picture."""
    return (cm.save_gif(draw_animation(r, s), out / "attention.gif", fps=FPS, progress=progress),)


# compute → draw → attention.png and attention.gif → report
run = cm.demo_run(__name__, "attention.png", compute_progress=False, more_files=_gif)
