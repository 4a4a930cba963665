"""Demo ``lazy-vs-rich``: the model against its first-order linearisation around θ₀ as H grows.

    Φ_lin(X; θ) = Φ(X; θ₀) + ⟨∇_θ Φ(X; θ₀), θ − θ₀⟩          (jax.linearize: one JVP, reused)

Random init (entries N(0, σ₀²/d)) and c_H = 1/√H, the neural-tangent scaling: each head is
one "neuron" of a width-H layer. Both models train by GD with the same step from the
same θ₀ on the same data. As H grows every head moves less (‖θ_t − θ₀‖/‖θ₀‖ ~ 1/√H), the
model stays close to its tangent model and their loss curves merge (lazy training); at
small H the parameters travel far and the attention itself changes (rich training).

Holds the tangent model (``linearized``, ``linearized_logits``), the settings, the compiled run
(``train_lazy_rich``) and its grouping of H into programs (``buckets``), ``compute`` →
``LazyRichRun``, ``draw`` (loss curves of both models; their gap and the parameter movement
against H), ``report`` and ``run``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from matplotlib.figure import Figure
from tqdm.auto import tqdm

from dynamics.core import inits
from dynamics.core import model as mdl
from dynamics.core.losses import Loss, mean_loss
from dynamics.demo import common as cm

NAME = "lazy-vs-rich"
PURPOSE = "the model vs its linearisation around θ₀ (random init, c_H = 1/√H) as H grows: lazy vs rich"


@dataclass(frozen=True)
class Settings:
    heads: tuple[int, ...] = (1, 4, 16, 64, 256)
    init_scale: float = 1.0  # σ₀: entries N(0, σ₀²/d), the standard (NTK) random init
    steps: int = 200  # enough for H = 1 to fit (rich) while H = 256 barely moves (lazy)
    lr: float = 1.0  # GD η, the same for every H and both models
    log_points: int = 40
    trials: int = 2
    n_train: int = 100
    n_test: int = 10  # unused by the picture (train loss only); kept small
    T: int = 10
    d: int = 32
    n_irrelevant: int = 4
    pad_to: int = 16  # H ≤ 16 share one compiled program with 16 stored heads (see ``buckets``)


FULL = Settings()
QUICK = Settings(heads=(1, 4), pad_to=4, steps=10, log_points=5, trials=1, **cm.QUICK_DATA)


def linearized(
    fn: Callable[[mdl.Params], jax.Array], params0: mdl.Params
) -> Callable[[mdl.Params], jax.Array]:
    """θ ↦ fn(θ₀) + J_fn(θ₀)(θ − θ₀): the first-order Taylor model of ``fn`` around ``params0``.

    ``jax.linearize`` evaluates fn(θ₀) once and returns its JVP at θ₀ as a linear function; the
    tangent model is then trained by differentiating through that JVP.
    """
    value0, jvp = jax.linearize(fn, params0)

    def fn_lin(params: mdl.Params) -> jax.Array:
        return value0 + jvp(jax.tree_util.tree_map(jnp.subtract, params, params0))

    return fn_lin


def linearized_logits(
    params0: mdl.Params, X: jax.Array, *, query: str = "first", norm: str = "sqrt"
) -> Callable[[mdl.Params], jax.Array]:
    """θ ↦ Φ(X; θ₀) + J_Φ(θ₀)(θ − θ₀), (n,): the tangent model of ``dynamics.core.model.logits``."""
    return linearized(lambda p: mdl.logits(p, X, query=query, norm=norm), params0)


def _tree_norm(tree) -> jax.Array:
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree_util.tree_leaves(tree)))


@partial(jax.jit, static_argnames=("h_max", "segments"))
def train_lazy_rich(
    data, keys: jax.Array, heads: jax.Array, lr, scale, h_max: int, segments: tuple[int, ...]
):
    """For each H in ``heads`` (B,) and each trial (``data`` and ``keys`` have a leading trial axis):
    train loss and relative movement ‖θ_t − θ₀‖/‖θ₀‖ of the model and of its linearisation at
    every logged step, arrays (B, trials, L).

    Every H ≤ ``h_max`` runs in this one program: ``h_max`` stored heads, the first H of weight 1
    (``common.first_heads``), the others of weight 0.
    """
    loss = Loss.LOGISTIC

    def one(n_heads, data, key):
        d = data.X_train.shape[-1]
        weight = cm.first_heads(n_heads, h_max)  # (h_max,)
        # The empty slots (weight 0) start at 0, so they add nothing to ‖θ₀‖ (Φ ignores them, and
        # they get zero gradient, so they stay 0): the per-head init scale σ₀·w_s draws them as 0.
        slots = jnp.arange(h_max)
        params0 = inits.init_heads(jnp.broadcast_to(key, (h_max, *key.shape)), slots, d, scale * weight)

        def phi(p):
            return mdl.logits(p, data.X_train, weight=weight, n_heads=n_heads)  # (n,)

        phis = {"model": phi, "lin": linearized(phi, params0)}
        size0 = _tree_norm(params0)

        def losses(pair):
            return {k: mean_loss(data.y_train * phis[k](pair[k]), loss) for k in phis}

        def objective(pair):
            # The two terms share no parameters, so GD on their sum is the two GD runs side by
            # side (one loop, one compile).
            return sum(losses(pair).values())

        def observe(pair):
            out = {f"{k}_loss": v for k, v in losses(pair).items()}
            for k in phis:
                moved = jax.tree_util.tree_map(jnp.subtract, pair[k], params0)
                out[f"{k}_movement"] = _tree_norm(moved) / size0
            return out

        pair0 = {"model": params0, "lin": params0}
        return cm.train_logged(objective, pair0, "gd", lr, segments, observe)

    per_trial = jax.vmap(one, in_axes=(None, 0, 0))
    return jax.vmap(per_trial, in_axes=(0, None, None))(heads, data, keys)


def buckets(heads: tuple[int, ...], smallest: int) -> dict[int, list[int]]:
    """Group H values into compiled programs: H ≤ ``smallest`` share one padded to ``smallest``
    stored heads (compiling costs more than their few extra heads); each larger H gets its own."""
    groups: dict[int, list[int]] = {}
    for h in heads:
        groups.setdefault(max(h, smallest), []).append(h)
    return groups


def _reference_slope(ax, heads, values, power: float, ls: str):
    """A ∝ H^(−power) line through the last point, to compare slopes on log-log axes."""
    h = np.asarray(heads, dtype=float)
    label = "∝ 1/√H" if power == 0.5 else f"∝ 1/H^{power:g}" if power != 1 else "∝ 1/H"
    ax.plot(h, values[-1] * (h[-1] / h) ** power, ls=ls, color="0.45", lw=1.3, label=label)


class LazyRichRun(NamedTuple):
    """What ``compute`` returns: float64 numpy arrays over (H, trial, logged step) for the model
    and its linearisation (``lin``)."""

    heads: np.ndarray  # (H,) numbers of heads
    steps: np.ndarray  # (L,) the logged iterations t, from 0 to the last step
    model_loss: np.ndarray  # (H, trials, L) train loss of the model
    lin_loss: np.ndarray  # (H, trials, L) train loss of its linearisation at θ₀
    model_movement: np.ndarray  # (H, trials, L) ‖θ_t − θ₀‖/‖θ₀‖ of the model
    lin_movement: np.ndarray  # (H, trials, L) the same for the linearisation

    @property
    def gap(self) -> np.ndarray:
        """(H, trials): max over t of |loss − loss_lin|."""
        return np.abs(self.model_loss - self.lin_loss).max(axis=-1)

    @property
    def moved(self) -> np.ndarray:
        """(H, trials): the model's ‖θ_t − θ₀‖/‖θ₀‖ at the last step."""
        return self.model_movement[..., -1]


def compute(s: Settings, seed: int = 0, *, progress: bool = False) -> LazyRichRun:
    """Train model and linearisation for every H and trial of ``s`` from ``seed``: one compiled
    program per bucket of H (``buckets``), a progress bar over them if ``progress``."""
    k_data, k_init = jax.random.split(jax.random.PRNGKey(seed))
    fields = dict(n_train=s.n_train, n_test=s.n_test, T=s.T, d=s.d, n_irrelevant=s.n_irrelevant)
    data = cm.dm1_data(k_data, s.trials, **fields)
    keys = jnp.stack([jax.random.fold_in(k_init, i) for i in range(s.trials)])
    steps, segments = cm.schedule(s.steps, s.log_points)
    parts: dict[int, dict[str, np.ndarray]] = {}
    groups = buckets(s.heads, s.pad_to)
    for h_max, group in tqdm(groups.items(), desc=NAME, unit="program", disable=not progress, leave=False):
        heads, lr, scale = jnp.array(group, jnp.float32), jnp.float32(s.lr), jnp.float32(s.init_scale)
        logged = train_lazy_rich(data, keys, heads, lr, scale, h_max, segments)
        for i, h in enumerate(group):
            parts[h] = {k: np.asarray(v[i], dtype=np.float64) for k, v in logged.items()}
    logged = {k: np.stack([parts[h][k] for h in s.heads]) for k in parts[s.heads[0]]}  # (H, trials, L)
    cm.check_finite(NAME, **logged)
    return LazyRichRun(heads=np.array(s.heads), steps=steps, **logged)


def _loss_curves_axes(ax, r: LazyRichRun) -> None:
    """Train loss over training, mean over trials: the model solid, its linearisation dashed."""
    colors, x = cm.head_palette(r.heads), cm.log_x(r.steps)
    for i, h in enumerate(r.heads):
        ax.plot(x, r.model_loss[i].mean(0), color=colors[i], lw=2, label=f"H = {h}")
        ax.plot(x, r.lin_loss[i].mean(0), color=colors[i], lw=2, ls="--")
    ax.plot([], [], color="0.3", lw=2, label="model")
    ax.plot([], [], color="0.3", lw=2, ls="--", label="linearised at θ₀")
    ax.set_xscale("log")
    ax.set_xlabel("iteration t (log scale; t = 0 drawn at 1)")
    ax.set_ylabel("train loss")
    ax.set_title("train loss: model (solid) vs linearisation (dashed)")
    cm.legend_below(ax, fontsize=9, ncol=4)


def _against_heads_axes(gap_ax, move_ax, r: LazyRichRun, s: Settings) -> None:
    """The loss gap and the parameter movement against H (log-log, ±1 std over trials)."""
    heads, gap, moved = list(r.heads), r.gap, r.moved
    style = dict(marker="o", color="black", lw=2, capsize=3)
    gap_ax.errorbar(heads, gap.mean(1), yerr=gap.std(1), label="measured", **style)
    _reference_slope(gap_ax, heads, gap.mean(1), 0.5, ":")
    _reference_slope(gap_ax, heads, gap.mean(1), 1.0, "-.")
    gap_ax.set_title("how far apart are the two loss curves?")
    gap_ax.set_ylabel("max over t of |loss − loss_lin|")
    move_ax.errorbar(heads, moved.mean(1), yerr=moved.std(1), label="model", **style)
    moved_lin = r.lin_movement[..., -1].mean(1)
    move_ax.plot(heads, moved_lin, marker="s", ls="--", color="0.5", lw=1.5, label="linearised model")
    _reference_slope(move_ax, heads, moved.mean(1), 0.5, ":")
    move_ax.set_title(f"how far do the parameters travel by t = {s.steps}?")
    move_ax.set_ylabel("‖θ_t − θ₀‖ / ‖θ₀‖")
    for ax in (gap_ax, move_ax):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(heads, [str(h) for h in heads])
        ax.minorticks_off()
        ax.set_xlabel("number of heads H")
        cm.legend_below(ax, ncol=3)


def draw(r: LazyRichRun, s: Settings) -> Figure:
    """The figure: loss curves of both models, then their loss gap and parameter movement vs H."""
    cm.set_style()
    fig, axes = cm.panel_row(3, figsize=(17, 5.6))
    _loss_curves_axes(axes[0], r)
    _against_heads_axes(axes[1], axes[2], r, s)
    fig.suptitle(
        f"DM1 (n={s.n_train}), random init σ₀ = {s.init_scale:g}, c_H = 1/√H, GD η = {s.lr:g}, mean of "
        f"{s.trials} trials: with more heads each head moves less and the model stays on its tangent model"
    )
    return fig


def report(r: LazyRichRun, s: Settings) -> tuple[dict[str, float], tuple[str, ...]]:
    """The numbers the figure shows (gap, movement, final losses per H) and the printed lines."""
    heads, gap, moved = list(r.heads), r.gap, r.moved
    numbers = {}
    for i, h in enumerate(heads):
        numbers[f"loss_gap_H{h}"] = float(gap[i].mean())
        numbers[f"movement_H{h}"] = float(moved[i].mean())
        numbers[f"final_loss_H{h}"] = float(r.model_loss[i, :, -1].mean())
        numbers[f"final_loss_lin_H{h}"] = float(r.lin_loss[i, :, -1].mean())
    lines = (
        "max_t |loss − loss_lin|: " + ", ".join(f"H={h}: {gap[i].mean():.2e}" for i, h in enumerate(heads)),
        "final train loss model / linearised: "
        + ", ".join(
            f"H={h}: {numbers[f'final_loss_H{h}']:.3f} / {numbers[f'final_loss_lin_H{h}']:.3f}" for h in heads
        ),
        f"‖θ_T − θ₀‖/‖θ₀‖ at T = {s.steps}: "
        + ", ".join(f"H={h}: {moved[i].mean():.3f}" for i, h in enumerate(heads)),
    )
    return numbers, lines


SLIDE_TITLE = "Many heads barely move from their start: the network behaves like its linear approximation"


run = cm.demo_run(__name__, "lazy_vs_rich.png")  # compute → draw → lazy_vs_rich.png → report
