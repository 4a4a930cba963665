"""The data-model protocol: a *world* drawn once per trial, examples sampled from it.

A data model is any object with two functions::

    setup(key, params) -> world
    sample(world, key, n) -> (X (n, T, d), y (n,), mask (n, T) or (n, F, T) bool, or None)

``setup`` draws what a trial keeps fixed — its latents (a signal ξ, a teacher, k* and v*, a
covariance's basis), its planted directions and its noise floor — from the trial's key and the
model's parameters (``params``: an object whose attributes are T, d, n_train, n_test and the
model's own parameters; the simulator passes its resolved ``DataConfig``). ``sample`` draws ``n``
examples of that world: tokens ``X``, targets ``y`` (±1 labels for classification, real numbers
for regression) and the relevant-token ``mask`` (None when the model has none; (n, F, T) when the
relevant tokens are of F kinds, mask[i, f, t] true where token t of example i carries feature f:
the simulator takes their union as the relevant tokens and logs each head's attention per
feature, ``head_attn_feature``). A trial's training
set, its test set and any further batch all sample the same world, so ``sample`` must be traceable
by ``jax.jit`` and ``jax.vmap`` with ``n`` a Python int (static).

What ``sample`` returns must be what the simulator can simulate, and is checked at the boundary
(``dynamics.parts.boundary``: before any compile, and on the drawn arrays): X real floating of
shape (n, T, d) with exactly n examples and the config's T and d (a model declaring neither has
them inferred from one traced sample), y of shape (n,) with labels exactly ±1 for classification
and finite targets for regression, the mask bool or None, X and y finite; anything else is
refused in one line.

Optional attributes of a data model: ``sample_test(world, key, n)``, a test distribution of its
own (the test set is drawn by it, with the same key and checks as by ``sample``; the training set
and online batches by ``sample``), ``task`` ("classification" or "regression"; default
classification), ``noise_floor`` (a number, or a function of the world; the Bayes risk of the
square loss, NaN when unknown), ``sizes`` (its default T and d) or ``T`` and ``d``, and
``relevant_tokens`` (True when ``sample`` returns a mask), and ``initial_params(world, shapes) ->
{name: array}``: θ(0) from the world. ``shapes`` names one head's parameters of the run's model
(``{"U": (d,), "W": (d, d)}``; U, Q, K for factored heads; U, k for a learned query; U, a (T,),
one logit per position or tied group, for the position query; U (d, o) for vector targets); the model
returns any of them, each of exactly that shape, real floating and finite (checked at the boundary),
and every head of every run of the trial starts from it; the rest come from the configured init
(or file, which these values override). A model whose ``sample`` returns vector targets y (n, o)
may declare ``outputs`` (o, or a function of ``params`` giving it): the memory estimate, made before
anything is drawn, then counts the matrix readout and the targets (undeclared, it counts o = 1);
a declared o that differs from the drawn one is refused.

The built-in models return a ``World``: its ``latents`` and ``planted`` directions (a dict of
name -> unit vectors (P, d) or (d,)), its ``noise_floor`` (a float32 scalar, NaN where unknown)
and, as static data of the pytree, the ``params`` it was set up with, which ``sample`` reads its
shapes from. A world of your own may be any pytree of arrays; a dict world may name its planted
directions under ``"planted"`` (name -> (d,) or (P, d)). The per-head metrics report each head's
|cos| with every planted direction (``planted_of``, ``direction_matrix``, ``direction_names``).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp

TASKS = ("classification", "regression")


@runtime_checkable
class DataModel(Protocol):
    """What the simulator calls of a data model (see the module docstring)."""

    def setup(self, key: jax.Array, params: Any) -> Any: ...

    def sample(self, world: Any, key: jax.Array, n: int) -> tuple[jax.Array, jax.Array, jax.Array | None]: ...


@dataclasses.dataclass(frozen=True)
class World:
    """A built-in model's world: arrays (``latents``, ``planted``, ``noise_floor``) and, static, the
    ``params`` it was drawn with (hashable: the pytree's structure carries it)."""

    latents: dict[str, jax.Array]
    planted: dict[str, jax.Array]
    noise_floor: jax.Array  # () float32, NaN when unknown
    params: Any = None


jax.tree_util.register_dataclass(
    World, data_fields=["latents", "planted", "noise_floor"], meta_fields=["params"]
)


def floor(value: float) -> jax.Array:
    """A noise floor as the float32 scalar a World holds (NaN: unknown)."""
    return jnp.asarray(value, jnp.float32)


UNKNOWN = math.nan


def task_of(model: Any) -> str:
    """A data model's task: its ``task`` attribute, or classification."""
    task = getattr(model, "task", "classification")
    if task not in TASKS:
        raise ValueError(f"task={task!r} of data model {model!r:.60} is not one of {', '.join(TASKS)}")
    return task


def noise_floor(model: Any, world: Any) -> jax.Array:
    """The world's noise floor as a float32 scalar: a World's own, else the model's ``noise_floor``
    (a number, or a function of the world), else NaN."""
    if isinstance(world, World):
        return world.noise_floor
    if isinstance(world, dict) and "noise_floor" in world:
        return jnp.asarray(world["noise_floor"], jnp.float32)
    value = getattr(model, "noise_floor", UNKNOWN)
    if callable(value):
        value = value(world)
    return jnp.asarray(UNKNOWN if value is None else value, jnp.float32)


def planted_of(world: Any) -> dict[str, jax.Array]:
    """A world's planted directions, name -> (d,) or (P, d) (a leading trial axis allowed): a
    World's ``planted``, a dict world's ``"planted"`` entry, else none."""
    planted = world.planted if isinstance(world, World) else None
    if isinstance(world, dict):
        planted = world.get("planted")
    return dict(planted) if isinstance(planted, dict) else {}


def direction_matrix(planted: dict[str, jax.Array]) -> jax.Array | None:
    """One trial's planted directions as rows, (P, d) float32, by name in sorted order (a pytree's
    order for a dict; a (P_i, d) entry gives P_i rows), or None when there are none."""
    rows = [
        jnp.reshape(jnp.asarray(planted[k], jnp.float32), (-1, jnp.shape(planted[k])[-1]))
        for k in sorted(planted)
    ]
    return jnp.concatenate(rows) if rows else None


def direction_names(planted: dict[str, Any], batched: bool = False) -> list[str]:
    """The names of ``direction_matrix``'s rows: ``name`` for a (d,) entry, ``name_i`` for row i
    of a (P_i, d) one (``batched``: every entry has a leading trial axis)."""
    names = []
    for name in sorted(planted):
        shape = jnp.shape(planted[name])[1:] if batched else jnp.shape(planted[name])
        names += [name] if len(shape) == 1 else [f"{name}_{i}" for i in range(shape[0])]
    return names


def orthonormal(key: jax.Array, d: int, k: int) -> jax.Array:
    """k orthonormal vectors of R^d, (k, d) float32, uniformly rotated (QR of a Gaussian, signs
    fixed so the draw is a function of the key alone)."""
    if k > d:
        raise ValueError(f"{k} orthonormal vectors need d >= {k}, got d={d}")
    q, r = jnp.linalg.qr(jax.random.normal(key, (d, k), jnp.float32))
    return (q * jnp.sign(jnp.diagonal(r))[None, :]).T  # (k, d)
