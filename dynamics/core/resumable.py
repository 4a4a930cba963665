"""The engine's loop run a few logged steps per compiled call: progress and checkpoints inside a
long run.

``train_batch`` runs a batch's whole ``lax.scan`` over the logged steps in one call: nothing can be
shown or kept until it ends. Here the same loop runs as successive calls of one compiled program,
``advance(state, start, end)``: iterations ``start`` to ``end`` of the scan (the logged steps'
loop, ``engine.pack_loop``), its state handed from one call to the next. The state of every pack
is the scan's carry (θ, the optimiser's state, the step t, the divergence and zero-step
bookkeeping, the per-head view's buffers) and the rows logged so far (L, …), written at their
iteration's row as the scan writes them; ``start_batch`` makes the first. The loop body is the
scan's own, the iterations' order and inputs the same (SGD's batches and the online samples are
drawn from t), and what ``train_batch`` holds once for all packs (the step t, Adam's count of
updates) is held once here too, so the numbers equal ``train_batch``'s bit for bit, for every
optimiser (``tests/test_resumable.py``), whichever iterations each call covers. A state brought to
the host (``fetch``) and back is a checkpoint: the run continues from it as if never stopped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from dynamics.core.engine import BATCH_AXIS, CPU_COMPILER_OPTIONS, loop_steps, pack_loop, pack_outputs
from dynamics.core.program import Batch, Program
from dynamics.infra import executables

if TYPE_CHECKING:  # the engine reads the data's fields; it imports nothing above the model
    from dynamics.core.data import Data


def _trial(data: Data, b: Batch, shared_data: bool) -> Data:
    """One pack's data: the shared data, or its trial's slice."""
    return data if shared_data else jax.tree_util.tree_map(lambda a: a[b.trial], data)


def _start(prog: Program, data: Data, batch: Batch, shared_data: bool, mesh: Mesh, chunk: int):
    def local(data: Data, batch: Batch):  # as ``engine._train_batch``: chunks of ``chunk`` packs
        def one(b: Batch):
            body, carry, xs = pack_loop(prog, _trial(data, b, shared_data), b)
            x0 = jax.tree_util.tree_map(lambda a: jnp.asarray(a[0]), xs)
            rows = jax.eval_shape(lambda c: body(c, x0)[1], carry)  # one logged row's metrics
            # strongly typed (the step t is a weak int): every call then gets the same argument types
            carry = jax.tree_util.tree_map(lambda a: jax.lax.convert_element_type(a, a.dtype), carry)
            return carry, {k: jnp.zeros((len(prog.segments), *v.shape), v.dtype) for k, v in rows.items()}

        return jax.lax.map(one, batch, batch_size=chunk)

    return _sharded(local, mesh, sharded=1)(data, batch)


def _advance(prog: Program, data: Data, batch: Batch, state, start, end, shared_data: bool, mesh, chunk: int):
    held_once = _held_once(prog, data, batch, state[0], shared_data)

    def local(data: Data, batch: Batch, state, start, end):
        rows, (leaves, tree) = state[1], jax.tree_util.tree_flatten(state[0])
        once = {i: leaves[i][0] for i in held_once}  # the first pack's: every pack's is the same
        mapped = [a for i, a in enumerate(leaves) if i not in once]

        def one(b_state):
            b, (mapped, rows) = b_state
            rest = iter(mapped)
            carry = jax.tree_util.tree_unflatten(
                tree, [once[i] if i in once else next(rest) for i in range(len(leaves))]
            )
            body, _, xs = pack_loop(prog, _trial(data, b, shared_data), b)  # its first carry: unused
            xs = jax.tree_util.tree_map(jnp.asarray, xs)

            def iteration(j, c_rows):  # as lax.scan's: row j of xs in, row j of the outputs written
                c, rows = c_rows
                c, out = body(c, jax.tree_util.tree_map(lambda a: a[j], xs))
                return c, {k: jax.lax.dynamic_update_index_in_dim(rows[k], out[k], j, 0) for k in rows}

            return jax.lax.fori_loop(start, end, iteration, (carry, rows))

        return jax.lax.map(one, (batch, (mapped, rows)), batch_size=chunk)

    return _sharded(local, mesh, sharded=2, bounds=True)(data, batch, state, start, end)


def _held_once(prog: Program, data: Data, batch: Batch, carry, shared_data: bool) -> tuple[int, ...]:
    """The leaves of the loop's carry (B, …) that ``train_batch`` holds once for all its packs, not
    per pack: those its ``vmap`` over the packs leaves unbatched (made from constants and kept by
    the loop from anything per pack: the step t, Adam's count of updates), found by tracing the
    one-call loop with such a leaf's output axis None (refused when batched). ``advance`` holds them
    once too, so it runs the loop as ``train_batch`` compiles it: batched, Adam's bias correction
    1 − β^t was computed on a vector of one (``power`` on f32[1], not f32[]), its last bit other
    than the one-call program's. Only a per-pack scalar can be one (a parameter is per head)."""
    leaves = jax.tree_util.tree_leaves(carry)
    scalars = tuple(i for i, a in enumerate(leaves) if a.ndim == 1)
    shapes = jax.tree_util.tree_map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), (data, batch))

    def once(indices) -> bool:
        def final(data: Data, b: Batch):
            body, first, xs = pack_loop(prog, _trial(data, b, shared_data), b)
            last = jax.lax.scan(body, first, jax.tree_util.tree_map(jnp.asarray, xs))[0]
            return [jax.tree_util.tree_leaves(last)[i] for i in indices]

        try:
            jax.eval_shape(jax.vmap(final, in_axes=(None, 0), out_axes=None), *shapes)
        except ValueError:  # "got axis spec None but output was batched"
            return False
        return True

    return scalars if once(scalars) else tuple(i for i in scalars if once((i,)))


def _sharded(local, mesh: Mesh, sharded: int, bounds: bool = False):
    """``local`` over the mesh: the data replicated, then ``sharded`` arguments (the batch, the
    state) split on their batch axis, then (``bounds``) the iterations' bounds, replicated."""
    spec, rep = PartitionSpec(BATCH_AXIS), PartitionSpec()
    in_specs = (rep, *[spec] * sharded, *[rep] * (2 if bounds else 0))
    return jax.shard_map(local, mesh=mesh, in_specs=in_specs, out_specs=spec, check_vma=False)


_STATIC = ("prog", "shared_data", "mesh", "chunk")
_JIT = {
    (name, kind): jax.jit(fn, static_argnames=_STATIC, **opts)
    for name, fn in (("start", _start), ("advance", _advance))
    for kind, opts in (("cpu", {"compiler_options": CPU_COMPILER_OPTIONS}), ("other", {}))
}


def _call(name: str, mesh: Mesh, static: dict, arrays: dict):
    kind = "cpu" if mesh.devices.flat[0].platform == "cpu" else "other"
    return executables.call(_JIT[name, kind], f"engine.{name}.{kind}", {**static, "mesh": mesh}, arrays)


def start_batch(
    prog: Program, data: Data, batch: Batch, *, mesh: Mesh, chunk: int, shared_data: bool = False
):
    """The loop's first state for every pack of ``batch`` (arguments as ``engine.train_batch``'s):
    (the scan's first carry, zero rows (L, …)), each with the batch axis first."""
    static = dict(prog=prog, shared_data=shared_data, chunk=chunk)
    return _call("start", mesh, static, {"data": data, "batch": batch})


def advance(
    prog: Program, data: Data, batch: Batch, state, start: int, end: int, *, mesh: Mesh, chunk: int,
    shared_data: bool = False,
):  # fmt: skip
    """``state`` after the loop's iterations ``start`` to ``end`` − 1 (one compiled program for
    every range: the bounds are traced)."""
    static = dict(prog=prog, shared_data=shared_data, chunk=chunk)
    bounds = {"start": np.int32(start), "end": np.int32(end)}
    return _call("advance", mesh, static, {"data": data, "batch": batch, "state": state, **bounds})


def outputs(prog: Program, state) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The finished loop's outputs from its state on the host, as ``engine.train_batch``'s: (metrics,
    each (B, R, L) (per slot (B, S, L, …)), diverged_at (B, R))."""
    carry, rows = state
    return pack_outputs(prog, carry, rows, np, lead=1)


def cumulative_steps(prog: Program) -> np.ndarray:
    """(L + 1,): the updates made after the loop's first i iterations, i = 0..L."""
    return np.concatenate([[0], np.cumsum(loop_steps(prog))])
