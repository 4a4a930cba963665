"""Build a sweep's data from its config: one draw per trial, shared by every H."""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import datamodels
from dynamics import rng
from dynamics.config import DataConfig


class Data(NamedTuple):
    X_train: jax.Array  # ([trials,] n, T, d)
    y_train: jax.Array  # ([trials,] n) in {−1, +1}
    X_test: jax.Array  # ([trials,] n_test, T, d)
    y_test: jax.Array  # ([trials,] n_test)
    mask_test: jax.Array | None  # ([trials,] n_test, T) relevant tokens, None if unknown


def _synthetic_trial(cfg: DataConfig, key: jax.Array) -> Data:
    k_teacher, k_train, k_test = jax.random.split(key, 3)
    if cfg.model == "planted":
        teacher = datamodels.planted_teacher(
            k_teacher, d=cfg.d, heads=cfg.teacher_heads, scale=cfg.teacher_scale
        )
        kw = dict(T=cfg.T, label_noise=cfg.label_noise)
        X, y, _ = datamodels.planted(k_train, cfg.n_train, teacher, **kw)
        X_test, y_test, _ = datamodels.planted(k_test, cfg.n_test, teacher, **kw)
        return Data(X, y, X_test, y_test, None)
    kw = dict(
        T=cfg.T,
        d=cfg.d,
        zeta=cfg.zeta,
        r=cfg.r,
        signal=cfg.signal,
        noise=cfg.noise,
        n_irrelevant=cfg.n_irrelevant,
        geometry=cfg.geometry,
        first_relevant=cfg.first_relevant,
    )
    X, y, _ = datamodels.tokenized_mixture(k_train, cfg.n_train, **kw)
    X_test, y_test, mask_test = datamodels.tokenized_mixture(k_test, cfg.n_test, **kw)
    return Data(X, y, X_test, y_test, mask_test)


def make_data(cfg: DataConfig, key: jax.Array | np.ndarray, trials: int) -> tuple[Data, bool]:
    """(data, shared): synthetic data has a leading trial axis; user data is shared by all trials.

    ``key`` is a raw Threefry key ((2,) uint32, e.g. ``jax.random.PRNGKey(seed)``) or a typed
    one. Trial i's data comes from ``fold_in(key, i)``, so adding trials keeps the first ones.
    """
    cfg = cfg.resolved()
    if cfg.model == "npz":
        u = datamodels.load_npz(cfg.path)
        return Data(
            jnp.asarray(u.X_train), jnp.asarray(u.y_train), jnp.asarray(u.X_test), jnp.asarray(u.y_test), None
        ), True
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    key = np.asarray(key, np.uint32)
    raw = np.stack([rng.fold_in(key, i) for i in range(trials)])  # (trials, 2), no compile
    return _synthetic_trials(cfg, raw), False


@partial(jax.jit, static_argnums=0)
def _synthetic_trials(cfg: DataConfig, raw: jax.Array) -> Data:
    # One compiled program (op-by-op dispatch of the generators costs seconds of compiles),
    # with dynamics.rng's Threefry: jax.random's numbers, without its rolled CPU hash loop,
    # which XLA:CPU takes seconds to compile per draw.
    return jax.vmap(lambda k: _synthetic_trial(cfg, k))(rng.wrap(raw))  # raw (trials, 2)


def token_width(data: Data) -> int:
    return int(data.X_train.shape[-1])
