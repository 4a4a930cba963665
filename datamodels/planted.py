"""Planted teacher-student model: labels from a random multi-head attention teacher.

The teacher is the model of docs/model.md with query "first" and c_H = 1/sqrt(H*):
Phi*(X) = (1/sqrt(H*)) sum_h U_h^T X^T softmax(X W_h x_1). With H* = 1 a zero-init
student can realise it exactly; H* > 1 gives a harder, non-realisable task.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from datamodels.mixture import _check_float, _check_int, _check_key, _check_size
from datamodels.protocol import UNKNOWN, World, floor


class Teacher(NamedTuple):
    """Teacher weights, drawn once per trial; train and test share them."""

    U: jax.Array  # (H*, d) readouts, N(0, I_d)
    W: jax.Array  # (H*, d, d) key-query, beta * iid N(0, 1)


def planted_teacher(key: jax.Array, *, d: int = 16, heads: int = 1, scale: float = 1.0) -> Teacher:
    """Draw a teacher: U_h ~ N(0, I_d), W_h = scale * G_h with G_h iid N(0, 1) entries.

    With tokens of norm about 1, the scores x_t^T W_h x_1 have standard deviation about
    `scale` (beta): small beta gives near-uniform attention, large beta near-argmax.
    """
    _check_key(key)
    d = _check_int("d", d, lo=1)
    heads = _check_int("heads", heads, lo=1)
    scale = _check_float("scale", scale, lo=0.0)
    key_u, key_w = jax.random.split(key)
    U = jax.random.normal(key_u, (heads, d), jnp.float32)  # (h, d)
    W = scale * jax.random.normal(key_w, (heads, d, d), jnp.float32)  # (h, d, d)
    return Teacher(U=U, W=W.astype(jnp.float32))


def _check_teacher(teacher: Teacher) -> tuple[int, int]:
    """(H*, d) of a well-formed teacher, else ValueError."""
    if not (isinstance(teacher, tuple) and len(teacher) == 2 and all(hasattr(a, "ndim") for a in teacher)):
        raise TypeError(f"teacher={teacher!r:.60} must be a Teacher(U, W), as planted_teacher draws it")
    U, W = teacher
    if U.ndim != 2 or W.ndim != 3 or W.shape != (U.shape[0], U.shape[1], U.shape[1]):
        raise ValueError(f"teacher must have U (H*, d) and W (H*, d, d); got U {U.shape}, W {W.shape}")
    return U.shape[0], U.shape[1]


def teacher_logits(teacher: Teacher, X: jax.Array) -> jax.Array:
    """Phi*(X) = (1/sqrt(H*)) sum_h U_h^T X^T softmax(X W_h x_1), x_1 = X[:, 0].

    X (n, T, d) -> (n,). The second width letter `e` indexes W_h's columns.
    """
    heads, d = _check_teacher(teacher)
    dtype = getattr(X, "dtype", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(f"X={X!r:.60} must be a floating array (n, T, d)")
    X = jnp.asarray(X)
    if X.ndim != 3 or X.shape[1] < 1 or X.shape[2] != d:
        raise ValueError(f"X must have shape (n, T, d={d}) with T >= 1; got {X.shape}")
    U, W = teacher
    x_q = X[:, 0]  # (n, d) query: the first token
    scores = jnp.einsum("ntd,hde,ne->nht", X, W, x_q)  # (n, h, t) x_t^T W_h x_1
    attention = jax.nn.softmax(scores, axis=-1)  # (n, h, t) over tokens
    values = jnp.einsum("ntd,hd->nht", X, U)  # (n, h, t) U_h^T x_t
    per_head = jnp.einsum("nht,nht->nh", attention, values)  # (n, h)
    return per_head.sum(axis=-1) / math.sqrt(heads)  # (n,)


def planted(
    key: jax.Array, n: int, teacher: Teacher, *, T: int = 10, label_noise: float = 0.0
) -> tuple[jax.Array, jax.Array, None]:
    """n examples labelled by `teacher`: (X (n, T, d) float32, y (n,) float32, None).

    Tokens x_t ~ N(0, I_d / d) (norm about 1, as in DM1), d from the teacher;
    y = sign(Phi*(X)) with sign(0) = +1, then each label flipped independently with
    probability `label_noise` in [0, 0.5]. No relevant-token mask exists, hence None.
    """
    _check_key(key)
    n = _check_int("n", n, lo=1)
    T = _check_int("T", T, lo=1)
    label_noise = _check_float("label_noise", label_noise, lo=0.0, hi=0.5)
    _, d = _check_teacher(teacher)
    _check_size(n, T, d)
    key_x, key_flip = jax.random.split(key)
    X = jax.random.normal(key_x, (n, T, d), jnp.float32) / math.sqrt(d)  # (n, T, d)
    clean = jnp.where(teacher_logits(teacher, X) >= 0, 1.0, -1.0)  # (n,)
    flip = jax.random.bernoulli(key_flip, label_noise, (n,))  # (n,)
    y = jnp.where(flip, -clean, clean).astype(jnp.float32)  # (n,)
    return X, y, None


class PlantedModel:
    """The planted teacher as a data model (``datamodels.protocol``): the world holds the teacher
    (``planted_teacher`` from the setup key) and its unit readouts; ``sample`` is ``planted``."""

    task = "classification"
    relevant_tokens = False

    def setup(self, key: jax.Array, params):
        teacher = planted_teacher(key, d=params.d, heads=params.teacher_heads, scale=params.teacher_scale)
        unit = teacher.U / jnp.linalg.norm(teacher.U, axis=-1, keepdims=True)  # (H*, d)
        return World({"U": teacher.U, "W": teacher.W}, {"readouts": unit}, floor(UNKNOWN), params)

    def sample(self, world, key: jax.Array, n: int):
        teacher = Teacher(U=world.latents["U"], W=world.latents["W"])
        return planted(key, n, teacher, T=world.params.T, label_noise=world.params.label_noise)


PLANTED = PlantedModel()
