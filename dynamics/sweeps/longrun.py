"""A point run as one compiled call, or a long one as successive calls (``dynamics.core.resumable``):
the progress bar moved by the steps each call made, the loop's state kept mid-run
(``dynamics.sweeps.midrun``, which says when and where).
"""

from __future__ import annotations

import time

import jax
import numpy as np

from dynamics import parts
from dynamics.core import resumable
from dynamics.core.engine import train_batch

# The estimate that decides whether a point is long: FLOP/s of one device and seconds per update
# and pack group (the loop's floor), CPU and others; rough on purpose (a 5× error only changes how
# many calls a long run takes: their length is measured).
_RATE = {"cpu": 3e10, "other": 3e12}
_FLOOR = {"cpu": 5e-6, "other": 3e-5}


def estimated_seconds(prog, n_train: int, tokens: int, packs: int, platform: str) -> float:
    """A rough time for ``packs`` packs (on one device) of ``prog``: steps × (FLOPs / rate + floor),
    the FLOPs of a step's forward and backward (``parts.head_flops`` per slot and example)."""
    per_example = parts.head_flops(prog.query, prog.key_query, prog.head_size, prog.d, tokens, prog.slots)
    kind = "cpu" if platform == "cpu" else "other"
    flops = packs * prog.slots * n_train * per_example
    return sum(prog.segments) * (flops / _RATE[kind] + _FLOOR[kind])


def run_point(point, placed, batch, placer, *, shared, call_s, bar, watched, store, heads, n_train, tokens):
    """One point's engine outputs (metrics (B, R, L), diverged_at (B, R)) on the host: one call, or
    (a long point ``watched`` by a progress bar, or with a ``store`` to keep) successive calls of
    about ``call_s`` seconds, the bar moved by the steps each made, the state kept in ``store``
    every ``store.every_s`` seconds, and for a grid (``store.grid``) at the end too (a state saved
    at its end is the finished point)."""
    prog, kw = point.prog, dict(mesh=placer.mesh, chunk=point.chunk, shared_data=shared)
    steps = sum(prog.segments)
    packs = point.batch_size // placer.n_devices
    long = estimated_seconds(prog, n_train, tokens, packs, placer.platform) > 2 * call_s
    # several processes (--distributed) would each time their own calls: they stay one call
    long = long and jax.process_count() == 1
    if not long or not (watched or store is not None):
        out = placer.fetch(train_batch(prog, placed, batch, **kw))
        bar.update(steps)
        return out
    cum = resumable.cumulative_steps(prog)
    L = len(cum) - 1
    state = resumable.start_batch(prog, placed, batch, **kw)
    state = jax.device_put(state, placer.sharded)  # every call's state sharded alike: one program
    done, (leaves, tree) = 0, jax.tree_util.tree_flatten(state)
    saved = None if store is None else store.load(heads, leaves)
    if saved is not None:
        done, state = saved[0], placer.batch(jax.tree_util.tree_unflatten(tree, saved[1]))
        bar.update(int(cum[done]))
    target, last_save, calls = max(1, steps // 64), time.monotonic(), 0
    while done < L:
        end = min(int(np.searchsorted(cum, cum[done] + target)), L)
        end = max(end, done + 1)
        t0 = time.monotonic()
        state = jax.device_put(resumable.advance(prog, placed, batch, state, done, end, **kw), placer.sharded)
        jax.block_until_ready(state)
        took, calls = time.monotonic() - t0, calls + 1
        bar.update(int(cum[end] - cum[done]))
        if calls >= 2 and cum[end] > cum[done]:  # the first call compiled: its time says nothing
            target = max(1, int(call_s * (cum[end] - cum[done]) / max(took, 1e-6)))
        done = end
        due = time.monotonic() - last_save >= store.every_s if store is not None else False
        if store is not None and (done < L and due or done == L and store.grid):
            store.save(heads, jax.tree_util.tree_leaves(placer.fetch(state)), done, int(cum[done]), steps)
            last_save = time.monotonic()
    return resumable.outputs(prog, placer.fetch(state))
