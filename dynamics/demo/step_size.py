"""Demo ``step-size``: H zero-init heads at GD step η are one head with key-query step η/H.

docs/model.md: with c_H = 1/√H and θ(0) = 0, all heads stay equal to (u, w), so
Φ = (H/√H)·f(u, w) = f(√H·u, w). GD on the H-head model moves u by η·∇_u and w by η·∇_w of
that model, which is one head (c = 1) whose readout Ũ = √H·u learns with step η and whose
key-query W = w learns with step η/H. The demo runs both for several H:

- the H-head model, every head simulated (``dynamics.core.model.logits``, c_H = 1/√H), GD step η;
- one head, c = 1, GD with step η on Ũ and η/H on W (``optax.multi_transform``),

and draws their train loss and key-query norm on top of each other.

Holds the settings, the two compiled runs (``train_many_heads``, ``train_one_head``),
``compute`` → ``StepSizeRun``, ``draw`` (both runs' loss and ‖W‖ curves; their relative
difference against float32's ε), ``report`` and ``run``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from dynamics.core import inits, rng
from dynamics.core import model as mdl
from dynamics.core.losses import Loss, mean_loss
from dynamics.demo import common as cm

NAME = "step-size"
PURPOSE = "H zero-init heads with GD step η equal one head whose key-query step is η/H (docs/model.md)"


@dataclass(frozen=True)
class Settings:
    heads: tuple[int, ...] = (1, 4, 16, 64)
    steps: int = 1000
    lr: float = 1.0  # GD η of the H-head model
    log_points: int = 40
    n_train: int = 100
    n_test: int = 10  # unused by the picture; kept small
    T: int = 10
    d: int = 32
    n_irrelevant: int = 4


FULL = Settings()
QUICK = Settings(heads=(1, 3), steps=15, log_points=6, **cm.QUICK_DATA)


def _observe(loss_fn, p, readout_scale):
    return {
        "train_loss": loss_fn(p),
        "U": readout_scale * p["U"][0],  # (d,) head 1's readout, in the one-head units Ũ = √H·U
        "W": p["W"][0],  # (d, d) head 1's key-query matrix
    }


@partial(jax.jit, static_argnames=("n_heads", "segments"))
def train_many_heads(data, lr, n_heads: int, segments: tuple[int, ...]):
    """The H-head model from θ(0) = 0, all H heads simulated, GD step ``lr``, c_H = 1/√H."""
    params0 = inits.init_params(jax.random.PRNGKey(0), n_heads, data.X_train.shape[-1], init="zero")

    def objective(p):
        return mean_loss(data.y_train * mdl.logits(p, data.X_train, norm="sqrt"), Loss.LOGISTIC)

    observe = partial(_observe, objective, readout_scale=jnp.sqrt(jnp.float32(n_heads)))
    return cm.train_logged(objective, params0, "gd", lr, segments, observe)


@partial(jax.jit, static_argnames=("segments",))
def train_one_head(data, lr, heads: jax.Array, segments: tuple[int, ...]):
    """One head (c = 1) from 0: Ũ with GD step ``lr``, W with step ``lr``/H; vmapped over ``heads``."""

    def one(n_heads):
        params0 = inits.init_params(jax.random.PRNGKey(0), 1, data.X_train.shape[-1], init="zero")
        steps = {"U": lr, "W": lr / n_heads}  # readout η, key-query η/H

        def objective(p):
            return mean_loss(data.y_train * mdl.logits(p, data.X_train, norm="sum"), Loss.LOGISTIC)

        return cm.train_logged(
            objective, params0, "gd", steps, segments, partial(_observe, objective, readout_scale=1.0)
        )

    return jax.vmap(one)(heads)


QUANTITIES = ("train_loss", "U", "W")  # compared between the two runs: the first axis of max_diff


class StepSizeRun(NamedTuple):
    """What ``compute`` returns: float64 numpy arrays; ``many`` is the H-head model (step η), ``one``
    the one head with readout step η and key-query step η/H."""

    heads: np.ndarray  # (H,) numbers of heads
    steps: np.ndarray  # (L,) the logged iterations t, from 0 to the last step
    loss_many: np.ndarray  # (H, L) train loss
    loss_one: np.ndarray  # (H, L)
    w_norm_many: np.ndarray  # (H, L) ‖W_1‖ (Frobenius) of head 1
    w_norm_one: np.ndarray  # (H, L) ‖W̃‖ of the one head
    max_diff: np.ndarray  # (3, H) per QUANTITIES: max over t and entries of |many − one| (U: √H·U vs Ũ)
    max_value: np.ndarray  # (3, H) per QUANTITIES: max over t and entries of |many|


def compute(s: Settings, seed: int = 0, *, progress: bool = False) -> StepSizeRun:
    """Train both runs for every H of ``s`` on one DM1 draw from ``seed``: the one-head runs in one
    vmapped program, the H-head models one program per H (a progress bar over them if ``progress``)."""
    fields = dict(n_train=s.n_train, n_test=s.n_test, T=s.T, d=s.d, n_irrelevant=s.n_irrelevant)
    # the key of jax.random.PRNGKey(seed) and the trial taken in numpy: no op-by-op programs
    data = jax.tree_util.tree_map(lambda a: np.asarray(a)[0], cm.dm1_data(rng.seed(seed), 1, **fields))
    steps, segments = cm.schedule(s.steps, s.log_points)
    lr = jnp.float32(s.lr)
    one = train_one_head(data, lr, jnp.array(s.heads, jnp.float32), segments)
    one = {k: np.asarray(v, dtype=np.float64) for k, v in one.items()}  # (H, L, ...)
    many = []
    for h in tqdm(s.heads, desc=NAME, unit="H", disable=not progress, leave=False):
        many.append(
            {k: np.asarray(v, dtype=np.float64) for k, v in train_many_heads(data, lr, h, segments).items()}
        )
    many = {k: np.stack([m[k] for m in many]) for k in many[0]}
    cm.check_finite(
        NAME,
        **{f"{k} (H heads)": v for k, v in many.items()},
        **{f"{k} (one head)": v for k, v in one.items()},
    )

    def per_head_max(a: np.ndarray) -> np.ndarray:  # (H, L, ...) -> (H,): max over every other axis
        return a.reshape(a.shape[0], -1).max(axis=1)

    return StepSizeRun(
        heads=np.array(s.heads),
        steps=steps,
        loss_many=many["train_loss"],
        loss_one=one["train_loss"],
        w_norm_many=np.linalg.norm(many["W"], axis=(-2, -1)),
        w_norm_one=np.linalg.norm(one["W"], axis=(-2, -1)),
        max_diff=np.stack([per_head_max(np.abs(many[k] - one[k])) for k in QUANTITIES]),
        max_value=np.stack([per_head_max(np.abs(many[k])) for k in QUANTITIES]),
    )


def _curves_axes(ax, r: StepSizeRun, many_y: np.ndarray, one_y: np.ndarray, ylabel: str, title: str):
    """A quantity (H, L) over training: the H-head models as lines, the one-head runs as circles."""
    colors, x, marks = cm.head_palette(r.heads), cm.log_x(r.steps), slice(None, None, 2)
    for i, h in enumerate(r.heads):
        ax.plot(x, many_y[i], color=colors[i], lw=2.2, label=f"H = {h} heads, step η")
    for i in range(len(r.heads)):
        label = "one head: Ũ step η, W step η/H" if i == 0 else None
        ax.plot(x[marks], one_y[i][marks], "o", mfc="none", mec="black", ms=6, mew=1.1, label=label)
    ax.set_xscale("log")
    ax.set_xlabel("iteration t (log scale; t = 0 drawn at 1)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    cm.legend_below(ax, fontsize=9, ncol=2)


def _difference_axes(ax, r: StepSizeRun) -> None:
    """Bars per H: the relative difference of the two runs, against float32's machine ε. A
    difference of exactly 0 (bit-identical runs) is drawn as a short hatched bar marked 0: on the
    log axis it would otherwise vanish."""
    x, width, eps = np.arange(len(r.heads)), 0.27, np.finfo(np.float32).eps
    bottom, zero_height = eps / 1000, eps / 100
    labels = ("train loss", "readout √H·U vs Ũ", "key-query W vs W̃")  # per QUANTITIES
    for j, label in enumerate(labels):
        rel = r.max_diff[j] / np.maximum(r.max_value[j], np.finfo(np.float64).tiny)
        zero = rel == 0
        bars = ax.bar(x + (j - 1) * width, np.where(zero, zero_height, rel), width, label=label)
        for bar in np.asarray(bars.patches, dtype=object)[zero]:
            bar.set_hatch("//")
            ax.annotate("0", (bar.get_x() + width / 2, zero_height), ha="center", va="bottom", fontsize=9)
    ax.axhline(eps, color="black", ls="--", lw=1, label="float32 machine ε")
    ax.set_yscale("log")
    ax.set_ylim(bottom, 1e-2)
    ax.set_xticks(x, [str(h) for h in r.heads])
    ax.set_xlabel("number of heads H")
    ax.set_ylabel("max over t of |difference| / max |value|")
    ax.set_title("the two runs differ only by rounding")
    cm.legend_below(ax, fontsize=9, ncol=2)


def draw(r: StepSizeRun, s: Settings) -> Figure:
    """The figure: train loss and key-query norm of both runs over training, then their difference."""
    cm.set_style()
    fig, axes = cm.panel_row(3, figsize=(17, 5.6))
    _curves_axes(axes[0], r, r.loss_many, r.loss_one, "train loss", "train loss")
    _curves_axes(
        axes[1],
        r,
        r.w_norm_many,
        r.w_norm_one,
        "key-query norm ‖W_h‖ of one head",
        "how fast the attention learns",
    )
    _difference_axes(axes[2], r)
    fig.suptitle(
        f"DM1 (n={s.n_train}), θ(0) = 0, c_H = 1/√H, GD η = {s.lr:g}: H heads ≡ one head whose key-query "
        "step is η/H — more heads at a fixed η learn attention more slowly"
    )
    return fig


def report(r: StepSizeRun, s: Settings) -> tuple[dict[str, float], tuple[str, ...]]:
    """The numbers the figure shows (the runs' differences, the final ‖W_h‖) and the printed lines."""
    diff = dict(zip(QUANTITIES, r.max_diff, strict=True))
    numbers = {}
    for i, h in enumerate(r.heads):
        for key in QUANTITIES:
            numbers[f"max_abs_diff_{key}_H{h}"] = float(diff[key][i])
        numbers[f"w_norm_final_H{h}"] = float(r.w_norm_many[i, -1])
    lines = (
        "max |H-head − one-head| over t: "
        + ", ".join(
            f"H={h}: loss {diff['train_loss'][i]:.1e}, U {diff['U'][i]:.1e}, W {diff['W'][i]:.1e}"
            for i, h in enumerate(r.heads)
        ),
        f"‖W_h‖ at t = {s.steps}: "
        + ", ".join(f"H={h}: {r.w_norm_many[i, -1]:.3f}" for i, h in enumerate(r.heads)),
    )
    return numbers, lines


SLIDE_TITLE = "H heads with step size η behave like one head whose attention learns with step η / H"


run = cm.demo_run(__name__, "step_size.png")  # compute → draw → step_size.png → report
