"""The one training step: θ ← θ − η·direction(g), used by the engine, the theory replay, the
teaching demos and the bottleneck fits alike.

The direction is an optimiser part's optax transformation without its step size
(``dynamics.parts.OPTIMIZERS``: GD's identity, Adam's ``scale_by_adam``); the step size is
applied here, as one scalar, one value per head slot (the engine's packs), or one value per
parameter (a step per group). The arithmetic is optax's ``sgd(η)``/``adam(η)`` followed by
``apply_updates``: update = (−η)·direction, θ ← θ + update.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import optax

from dynamics import parts

Params = dict[str, jax.Array]


def direction(name: str) -> optax.GradientTransformation:
    """The optimiser ``name`` without its step size."""
    return parts.OPTIMIZERS.get(name, "optimizer").load()()


def make_optimizer(name: str, lr: Any) -> optax.GradientTransformation:
    """optax's sgd(η) or adam(η), built as optax builds them: ``direction`` then × (−η)."""
    return optax.chain(direction(name), optax.scale_by_learning_rate(lr))


def per_head(v: jax.Array, like: jax.Array) -> jax.Array:
    """A scalar as is, or a per-head (S,) vector reshaped to (S, 1, …) to broadcast against
    ``like``, an array with the head axis first."""
    v = jax.numpy.asarray(v)
    return v if v.ndim == 0 else v.reshape(v.shape + (1,) * (like.ndim - 1))


def per_head_gradient(grads: Params, weight: jax.Array) -> Params:
    """The fast path's gradient: a stored head standing for w identical heads receives ∇L̃ = w·g;
    each of the heads it stands for gets g = ∇L̃ / w (the exact per-head gradient). The bias b is
    one per run, not per head: its gradient is the run's own, left as it is."""
    return {k: g if k == "b" else g / per_head(weight, g) for k, g in grads.items()}


def descend(params: Any, d: Any, lr: Any) -> Any:
    """θ ← θ + (−η)·d for a dict of parameters (or any pytree of them). ``lr``: a scalar, a
    per-head (S,) vector, or {top-level name: step} (a step per group of parameters)."""
    if not isinstance(params, Mapping):
        return jax.tree_util.tree_map(lambda p, g: p + per_head(-lr, g) * g, params, d)
    steps = lr if isinstance(lr, Mapping) else dict.fromkeys(params, lr)
    return {
        k: descend(params[k], d[k], steps[k])
        if isinstance(params[k], Mapping)
        else params[k] + per_head(-steps[k], d[k]) * d[k]
        for k in params
    }


def update(
    params: Params, grads: Params, state: optax.OptState, opt: optax.GradientTransformation, lr: Any
) -> tuple[Params, optax.OptState]:
    """One step: the direction of ``grads`` under ``opt`` (its state advanced), then ``descend``."""
    d, state = opt.update(grads, state, params)
    return descend(params, d, lr), state
