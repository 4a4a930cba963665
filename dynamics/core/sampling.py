"""Which training examples update t reads (``minibatch``): all of them, or SGD's B examples by the
sampling part (``dynamics.parts.SAMPLINGS`` points here: ``epoch_batch``, ``replace_batch``), or
with online sampling B fresh ones of the trial's world (``fresh_batch``).

SGD (``Program.batch_size`` > 0): update t's gradient is over ``minibatch(prog, data,
key, t)``, B examples chosen by the sampling part from the trial's batch key (from
``Batch.data_key``, the key its data were drawn from) and t alone: the same batch for every
run and head of a pack, in any pack, on any device, after any resume. The logged metrics
are the full sets'. Online sampling (``fresh_batch``) draws update t's B examples anew from the
trial's world (``Data.world``) with the data model's ``sample`` and fold_in(batch key, t); its
logged training metrics are those of update t's batch (``logged_train_set``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from dynamics import parts
from dynamics.core import rng
from dynamics.core.program import Program
from dynamics.parts import boundary

if TYPE_CHECKING:  # the batches read the data's fields; nothing above the model is imported
    from dynamics.core.data import Data


# fold_in(trial key, MINIBATCH_STREAM): the trial's stream of SGD batches, apart from its data
# draws (which split the trial key, ``core.data``).
MINIBATCH_STREAM = 0x5D6B


def minibatch_key(data_key: jax.Array) -> jax.Array:
    """The batch key of a trial whose data were drawn from ``data_key`` (raw (2,) uint32)."""
    return jax.random.fold_in(rng.wrap(data_key), MINIBATCH_STREAM)


def minibatch(prog: Program, data: Data, key: jax.Array | None, t) -> tuple[jax.Array, jax.Array]:
    """The training examples (X, y) of update t: all of them, or SGD's B examples chosen by the
    program's sampling (``dynamics.parts.SAMPLINGS``) from the trial's batch ``key`` and t alone,
    so every run of a pack (one trial) and every packing, device count or resume gets the same."""
    if not prog.batch_size:
        return data.X_train, data.y_train
    if parts.SAMPLINGS[prog.sampling].fresh:
        return fresh_batch(prog, data, key, t)
    return parts.SAMPLINGS[prog.sampling].load()(data, key, t, prog.batch_size)


def fresh_batch(prog: Program, data: Data, key: jax.Array, t) -> tuple[jax.Array, jax.Array]:
    """``online``: B new examples of the trial's world (``data.world``), sampled by the data model
    (``prog.sampler``) from fold_in(key, t): update t's batch, whatever the packing or resume."""
    # drawn as the training set is, without x64 (x64 draws other numbers: 64-bit integers, floats)
    world = jax.tree_util.tree_map(_as_float32, data.world)
    with jax.enable_x64(False):
        _, T, d = data.X_train.shape[-3:]  # an online batch checked as the training set is
        at = boundary.where(prog.sampler.name, prog.batch_size, "an online batch")
        k_t = jax.random.fold_in(key, t)
        X, y, _ = boundary.sample(prog.sampler.obj, world, k_t, prog.batch_size, T, d, at)
    return jnp.asarray(X, data.X_train.dtype), jnp.asarray(y, data.y_train.dtype)


def _as_float32(a):
    return a.astype(jnp.float32) if jnp.issubdtype(a.dtype, jnp.floating) else a


def logged_train_set(prog: Program, data: Data, key: jax.Array | None, t) -> Data:
    """The data the metrics at logged step t read: the training set, or with online sampling the
    batch of update t (the next one: examples no update has seen) in its place."""
    if not (prog.batch_size and parts.SAMPLINGS[prog.sampling].fresh):
        return data
    X, y = fresh_batch(prog, data, key, t)
    return data._replace(X_train=X, y_train=y, mask_train=None)


def epoch_batch(data: Data, key: jax.Array, t, size: int) -> tuple[jax.Array, jax.Array]:
    """``epoch``: update t is batch t mod (n/B) of epoch e = t // (n/B), consecutive B examples of
    a permutation of the n drawn from fold_in(key, e) (B divides n: every example once an epoch)."""
    n = data.y_train.shape[0]
    per_epoch = n // size
    order = jax.random.permutation(jax.random.fold_in(key, t // per_epoch), n)
    idx = jax.lax.dynamic_slice_in_dim(order, (t % per_epoch) * size, size)
    return data.X_train[idx], data.y_train[idx]


def replace_batch(data: Data, key: jax.Array, t, size: int) -> tuple[jax.Array, jax.Array]:
    """``replace``: B indices uniform on 0..n−1 with replacement, drawn from fold_in(key, t)."""
    n = data.y_train.shape[0]
    idx = jax.random.randint(jax.random.fold_in(key, t), (size,), 0, n, dtype=jnp.int32)
    return data.X_train[idx], data.y_train[idx]
