"""θ(0) of a pack's head slots (``init_slots``): each slot drawn as ``inits.init_params`` draws that
head of its run, so a run starts the same in any pack; or given (a file, ``Batch.start``); then the
parameters the trial's world sets (``world_start``).
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

from dynamics import parts
from dynamics.core import inits
from dynamics.core import model as mdl
from dynamics.core.program import Batch, Program


def _head_size(prog: Program) -> int | None:
    """d_h of factored or tied heads (every run of a split program has H = S), None for a free W."""
    return parts.KEY_QUERIES[prog.key_query].head_size(prog.head_size, prog.d, prog.slots)


def init_slots(prog: Program, b: Batch, outputs: int = 1, tokens: int | None = None) -> mdl.Params:
    """θ(0) of every slot: head ``slot_head`` of its run drawn from the run's key exactly as
    ``inits.init_params`` draws it, so a run starts the same in any pack; empty slots are 0.
    ``outputs`` o > 1: a matrix readout U (S, d, o) (vector targets); ``tokens`` T sizes the position
    logits a (S, T) of positional attention."""
    if prog.init_from:  # given per slot (and per run for b) by the sweep, empty slots 0
        return dict(b.start)
    if prog.output == "sequence":  # no readout: the attention's arrays drawn as for o = 1, U dropped;
        # a learned value V_h drawn as a factored readout's V_h, its output row O_h dropped
        values = parts.READOUTS[prog.readout].values
        pooled = dataclasses.replace(prog, output="pooled", readout="factored" if values else prog.readout)
        params = init_slots(pooled, b, 1, tokens)
        return {k: v for k, v in params.items() if k not in ("U", "O")}
    head_size = _head_size(prog)
    init = parts.INITS[prog.init]
    learned = parts.QUERIES[prog.query].learned
    tied = parts.KEY_QUERIES[prog.key_query].tied  # W_h = Q_h Q_hᵀ: no K
    positions = None
    if parts.QUERIES[prog.query].positional:  # the position logits: one per position, or per tied group
        positions = max(prog.tied_positions) + 1 if prog.tied_positions else tokens
    factored = parts.READOUTS[prog.readout].factored
    shapes = inits.head_shapes(prog.d, head_size, learned, outputs, positions, tied, factored)
    if not init.random:
        params = {k: jnp.zeros((prog.slots, *v)) for k, v in shapes.items()}
    else:
        run = jnp.minimum(b.slot_run, prog.runs - 1)
        extra = {"n_heads": b.n_heads[run]} if init.per_layer else {}
        extra |= {"outputs": outputs} if outputs > 1 else {}
        extra |= {"positions": positions} if positions is not None else {}
        extra |= {"tied": True} if tied else {}
        extra |= {"factored_readout": True} if factored else {}
        draw = (b.slot_head, prog.d, b.init_scale[run], head_size, learned)
        params = inits.drawn(init, shapes, b.key[run], *draw, **extra)
        filled = b.slot_run < prog.runs
        params = {k: jnp.where(inits.per_head(filled, v), v, 0.0) for k, v in params.items()}
    if prog.bias:  # one per run, 0 at the start
        params["b"] = jnp.zeros((prog.runs,), mdl.readout_vector(params).dtype)
    return params


def world_start(prog: Program, params: mdl.Params, b: Batch, given: dict | None) -> mdl.Params:
    """θ(0) with the parameters the trial's world sets (``Data.world_init``: name -> one head's
    array) in every filled slot of every run, empty slots 0; the rest as the init (or file) gave."""
    if not given:
        return params
    filled = b.slot_run < prog.runs  # (S,)
    out = dict(params)
    for k, v in given.items():
        value = jnp.broadcast_to(jnp.asarray(v, params[k].dtype), params[k].shape)
        out[k] = jnp.where(inits.per_head(filled, value), value, 0.0)
    return out
