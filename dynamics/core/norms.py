"""Norms without a square's over- or underflow: ``held_norm`` is √Σx² as written where the largest
|x| lies in the range where that is exact (``plain_holds``), and M·√Σ(x/M)² elsewhere, so every norm
in the plain range keeps its numbers to the bit. Used by the update (normalised GD), the logged
norms, the per-head view and the head diversity."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp


def plain_holds(top: jax.Array) -> jax.Array:
    """Is √Σx² as exact as its sum's rounding for the values x whose largest |x| is ``top``: ``top``
    in ``_plain_range`` (False for NaN)."""
    low, high = _plain_range(top.dtype)
    return (top >= low) & (top <= high)


def held_norm(total_of, top: jax.Array) -> jax.Array:
    """‖x‖ without a square's over- or underflow: √``total_of(None)`` (Σx², as written) where
    ``plain_holds(top)``, ``top`` the largest |x|, and M·√``total_of(M)`` (Σ(x/M)², M = ``top``, or 1
    where ``top`` is 0) elsewhere, selected per value, so every norm in the plain range keeps its
    numbers to the bit and a finite x has a finite norm up to the largest float / √(size)."""
    scale = jnp.where(top > 0, top, 1.0)
    return jnp.where(plain_holds(top), jnp.sqrt(total_of(None)), scale * jnp.sqrt(total_of(scale)))


def _plain_range(dtype) -> tuple[float, float]:
    """The largest |g| for which √Σg² is as exact as its sum's rounding: from √(tiny/ε) (a square
    below the smallest normal number, tiny, loses at most tiny ≤ ε·M², as rounding each term of the
    sum does) to √(max·ε) (Σg² of up to 1/ε terms does not overflow). float32: 3e-16 to 6e15."""
    info = jnp.finfo(dtype)
    return math.sqrt(float(info.tiny) / float(info.eps)), math.sqrt(float(info.max) * float(info.eps))
