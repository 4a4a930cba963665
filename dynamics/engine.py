"""The training engine: one compiled program per sweep point.

Trials are batched with ``jax.vmap`` and steps run in ``lax.scan`` (over logging
segments) around a ``lax.fori_loop`` (the steps inside a segment), so a whole
sweep point is one XLA program with no host round-trip per step. Metrics are
evaluated only at the logged steps; non-finite losses are detected per trial
inside the program.

Zero-init fast path (SPEC §2): with θ(0) = 0 every head stays identical under GD
and Adam, so the engine stores one representative head with multiplicity m = H:
Φ = c_H · m · f(u, w), and the exact per-head gradient is (1/m) ∇ of that reduced
model. The number of heads is then a traced scalar, so every H shares one compile.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dynamics import model as mdl
from dynamics.config import LR_SCALINGS, Config
from dynamics.losses import Loss, error_rate, mean_loss

METRICS = (
    "train_loss",
    "test_loss",
    "train_error",
    "test_error",
    "margin",
    "u_norm",
    "w_norm",
    "diversity",
    "attn_relevant",
)


class Data(NamedTuple):
    X_train: jax.Array  # ([trials,] n, T, d)
    y_train: jax.Array  # ([trials,] n) in {−1, +1}
    X_test: jax.Array  # ([trials,] n_test, T, d)
    y_test: jax.Array  # ([trials,] n_test)
    mask_test: jax.Array | None  # ([trials,] n_test, T) relevant tokens, None if unknown


@dataclass(frozen=True)
class Program:
    """Everything that fixes the compiled program's shapes and code (hashable, static)."""

    stored_heads: int  # heads held in memory: H, or 1 on the fast path
    d: int
    query: str
    norm: str
    key_query: str
    head_size: str | int
    init: str
    optimizer: str
    loss: str
    segments: tuple[int, ...]  # steps between consecutive logged steps


def make_optimizer(name: str, lr: jax.Array) -> optax.GradientTransformation:
    if name == "gd":
        return optax.sgd(lr)
    if name == "adam":
        return optax.adam(lr)
    raise ValueError(f"optimizer={name!r} is not one of 'gd', 'adam'")


def step_size(cfg: Config, n_heads: int) -> float:
    """η(H) = η₀ · H^p (SPEC §4)."""
    return cfg.optim.lr * n_heads ** LR_SCALINGS[cfg.optim.lr_scaling]


def uses_fast_path(cfg: Config) -> bool:
    return cfg.sweep.fast_path and cfg.model.init == "zero" and cfg.model.key_query == "full"


def _tree_finite(tree) -> jax.Array:
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree_util.tree_leaves(tree)]))


def _head_diversity(params: mdl.Params) -> jax.Array:
    """max over head pairs of ‖θ_h − θ_h'‖ (exactly 0 for identical heads)."""
    flat = jnp.concatenate([p.reshape(p.shape[0], -1) for p in params.values()], axis=1)  # (h, P)
    diff = flat[:, None, :] - flat[None, :, :]  # (h, h, P)
    return jnp.sqrt(jnp.max(jnp.sum(diff * diff, axis=-1)))


def evaluate(prog: Program, params: mdl.Params, m: jax.Array, data: Data) -> dict[str, jax.Array]:
    """All logged metrics of one trial at one step (scalars)."""
    loss = mdl.parse_enum(Loss, prog.loss, "loss")
    phi = partial(mdl.logits, query=prog.query, norm=prog.norm, multiplicity=m)
    z_train = data.y_train * phi(params, data.X_train)  # (n,)
    z_test = data.y_test * phi(params, data.X_test)  # (n_test,)
    W = mdl.key_query_matrix(params)  # (h, d, d)
    out = {
        "train_loss": mean_loss(z_train, loss),
        "test_loss": mean_loss(z_test, loss),
        "train_error": error_rate(z_train),
        "test_error": error_rate(z_test),
        "margin": jnp.min(z_train),
        # m identical stored copies: ‖·‖ over all H heads is √m times the stored one.
        "u_norm": jnp.sqrt(m) * jnp.linalg.norm(params["U"]),
        "w_norm": jnp.sqrt(m) * jnp.linalg.norm(W),
        "diversity": _head_diversity(params),
    }
    if data.mask_test is None:
        out["attn_relevant"] = jnp.array(jnp.nan)
    else:
        A = mdl.attention(params, data.X_test, prog.query)  # (n, h, t) or (n, h, s, t)
        mask = data.mask_test.astype(A.dtype)
        mass = jnp.einsum("nh...t,nt->nh...", A, mask)  # attention on relevant tokens
        out["attn_relevant"] = jnp.mean(mass)
    return out


def train_trial(
    prog: Program, key: jax.Array, data: Data, n_heads: jax.Array, lr: jax.Array, init_scale: jax.Array
) -> tuple[dict[str, jax.Array], jax.Array]:
    """One trial: returns (metrics, each (L,), and the step at which it diverged or steps + 1)."""
    m = n_heads / prog.stored_heads  # multiplicity: 1, or H on the fast path
    params = mdl.init_params(
        key,
        prog.stored_heads,
        prog.d,
        init=prog.init,
        scale=init_scale,
        key_query=prog.key_query,
        head_size=prog.head_size,
    )
    loss = mdl.parse_enum(Loss, prog.loss, "loss")
    opt = make_optimizer(prog.optimizer, lr)
    total = sum(prog.segments)

    def objective(p):
        z = data.y_train * mdl.logits(p, data.X_train, query=prog.query, norm=prog.norm, multiplicity=m)
        return mean_loss(z, loss)

    def one_step(t, carry):
        p, state, div_at = carry
        value, grads = jax.value_and_grad(objective)(p)
        grads = jax.tree_util.tree_map(lambda g: g / m, grads)  # exact per-head gradient
        updates, new_state = opt.update(grads, state, p)
        new_p = optax.apply_updates(p, updates)
        alive = div_at > total
        loss_ok = jnp.isfinite(value)
        params_ok = _tree_finite(new_p)
        div_at = jnp.where(alive & ~loss_ok, t, jnp.where(alive & ~params_ok, t + 1, div_at))
        keep = alive & loss_ok & params_ok
        new_p, new_state = jax.tree_util.tree_map(
            lambda a, b: jnp.where(keep, a, b), (new_p, new_state), (p, state)
        )
        return new_p, new_state, div_at

    def segment(carry, n_steps):
        p, state, div_at, t = carry
        p, state, div_at = jax.lax.fori_loop(t, t + n_steps, one_step, (p, state, div_at))
        return (p, state, div_at, t + n_steps), evaluate(prog, p, m, data)

    first = evaluate(prog, params, m, data)
    carry = (params, opt.init(params), jnp.array(total + 1), jnp.array(0))
    (_, _, div_at, _), logged = jax.lax.scan(segment, carry, jnp.array(prog.segments))
    metrics = {k: jnp.concatenate([first[k][None], logged[k]]) for k in first}
    return metrics, div_at


@partial(jax.jit, static_argnames=("prog", "shared_data"))
def train_trials(
    prog: Program,
    keys: jax.Array,
    data: Data,
    n_heads: jax.Array,
    lr: jax.Array,
    init_scale: jax.Array,
    shared_data: bool = False,
):
    """All trials of one sweep point in one program: vmap of ``train_trial`` over keys (and data)."""
    data_axis = None if shared_data else 0
    fn = jax.vmap(partial(train_trial, prog), in_axes=(0, data_axis, None, None, None))
    return fn(keys, data, n_heads, lr, init_scale)


def program_for(cfg: Config, n_heads: int, d: int, schedule: list[int]) -> Program:
    fast = uses_fast_path(cfg)
    return Program(
        stored_heads=1 if fast else n_heads,
        d=d,
        query=cfg.model.query,
        norm=cfg.model.norm,
        key_query=cfg.model.key_query,
        head_size=cfg.model.head_size,
        init=cfg.model.init,
        optimizer=cfg.optim.optimizer,
        loss=cfg.optim.loss,
        segments=tuple(int(s) for s in np.diff(schedule)),
    )


def mask_diverged(curves: dict[str, np.ndarray], steps: np.ndarray, div_at: np.ndarray) -> None:
    """Set every logged point at or after a trial's divergence to NaN, in place."""
    dead = steps[None, :] >= div_at[:, None]  # (trials, L)
    for v in curves.values():
        v[dead] = np.nan
