"""JAX's default PRNG (Threefry-2x32), bit for bit, without its slow CPU compile.

A sweep's keys and data are JAX's: ``jax.random.key(seed)``, ``split``, ``fold_in`` and the
draws of ``jax.random`` with the default ``threefry2x32`` implementation and
``jax_threefry_partitionable`` on (JAX's default since 0.5). Two things make them slow to
get on the CPU, and neither changes a number when done another way:

- JAX lowers the Threefry hash on the CPU as a rolled 5-iteration loop, which XLA:CPU
  compiles in seconds per ``jax.random`` call (a data draw has eight: ~10 s of compile);
  the same hash written out (20 rounds, as JAX lowers it on other platforms) compiles in a
  fraction of that. ``THREEFRY`` is a PRNG implementation (``jax.extend.random``) whose
  hash is written out; ``jax.random.wrap_key_data(raw, impl=THREEFRY)`` gives keys that
  draw exactly the numbers of ``jax.random.wrap_key_data(raw)``.
- Deriving a handful of keys (seed, split, fold_in) op by op compiles one small program per
  operation. ``seed``, ``split`` and ``fold_in`` here do the same integer arithmetic in numpy.

The Threefry-2x32 hash is Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"
(SC 2011), with JAX's key schedule and rotations. tests/test_rng.py checks every function
here against ``jax.random``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import random as jex_random

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA


def _hash(k1, k2, x1, x2, xp):
    """Threefry-2x32 of the counter pairs (x1, x2) under the key (k1, k2): 20 rounds, uint32
    arithmetic modulo 2³² (``xp`` is numpy or jax.numpy; the arrays are uint32)."""
    u32 = xp.uint32
    ks = (k1, k2, k1 ^ k2 ^ u32(_PARITY))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for i in range(5):
        for r in _ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = (x2 << u32(r)) | (x2 >> u32(32 - r))
            x2 = x1 ^ x2
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + u32(i + 1)
    return x1, x2


def _check_partitionable() -> None:
    if not jax.config.jax_threefry_partitionable:
        raise RuntimeError(
            "dynamics.core.rng reproduces jax.random with jax_threefry_partitionable=True (JAX's default); "
            "it is off in this process"
        )


# numpy: keys without compiles


def seed(value: int) -> np.ndarray:
    """``jax.random.key_data(jax.random.key(value))`` for a seed in [0, 2³²): (2,) uint32."""
    value = int(value)
    if not 0 <= value < 2**32:
        raise ValueError(f"seed={value} must be in [0, 2**32)")
    return np.array([0, value], np.uint32)


def split(key: np.ndarray, num: int = 2) -> np.ndarray:
    """``jax.random.split`` of one raw key: (num, 2) uint32."""
    _check_partitionable()
    key = np.asarray(key, np.uint32)
    hi, lo = np.zeros(num, np.uint32), np.arange(num, dtype=np.uint32)  # the counters 0..num−1
    with np.errstate(over="ignore"):
        b1, b2 = _hash(key[0], key[1], hi, lo, np)
    return np.stack([b1, b2], axis=1)


def fold_in(key: np.ndarray, data: int) -> np.ndarray:
    """``jax.random.fold_in`` of one raw key and an int in [0, 2³²): (2,) uint32."""
    key = np.asarray(key, np.uint32)
    with np.errstate(over="ignore"):
        b1, b2 = _hash(key[0], key[1], np.zeros(1, np.uint32), np.array([data], np.uint32), np)
    return np.array([b1[0], b2[0]], np.uint32)


# jax: a PRNG implementation whose programs compile fast


def _counters(shape: tuple[int, ...]):
    """The (high, low) uint32 halves of the row-major index of each element of ``shape``."""
    size = math.prod(shape)
    if size >= 2**32:
        raise NotImplementedError(f"more than 2**32 random values at once (shape {shape})")
    lo = lax.iota(np.uint32, size).reshape(shape)
    return jnp.zeros(shape, np.uint32), lo


def _split(key, shape):
    b1, b2 = _hash(key[0], key[1], *_counters(shape), jnp)
    return jnp.stack([b1, b2], axis=b1.ndim)


def _fold_in(key, data):
    data = jnp.asarray(data, np.uint32).reshape(1)
    b1, b2 = _hash(key[0], key[1], jnp.zeros(1, np.uint32), data, jnp)
    return jnp.concatenate([b1, b2])


def _random_bits(key, bit_width, shape):
    b1, b2 = _hash(key[0], key[1], *_counters(shape), jnp)
    if bit_width == 64:
        return (b1.astype(np.uint64) << np.uint64(32)) | b2.astype(np.uint64)
    bits = b1 ^ b2
    return bits if bit_width == 32 else bits.astype(np.dtype(f"uint{bit_width}"))


THREEFRY = jex_random.define_prng_impl(
    key_shape=(2,),
    seed=jex_random.threefry_prng_impl.seed,  # no hash: JAX's own
    split=_split,
    random_bits=_random_bits,
    fold_in=_fold_in,
    name="threefry2x32, written-out hash (dynamics.core.rng)",
    tag="fry_mhsim",
)


def wrap(raw: jax.Array) -> jax.Array:
    """Typed keys from raw (..., 2) uint32 key data: the draws of ``jax.random.wrap_key_data(raw)``."""
    _check_partitionable()
    return jax.random.wrap_key_data(raw, impl=THREEFRY)
