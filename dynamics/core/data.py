"""Build a sweep's data from its config: one draw per trial, shared by every H."""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import datamodels
from dynamics import parts
from dynamics.config.schema import DataConfig
from dynamics.core import rng
from dynamics.infra import executables


class Data(NamedTuple):
    X_train: jax.Array  # ([trials,] n, T, d)
    y_train: jax.Array  # ([trials,] n) in {−1, +1}
    X_test: jax.Array  # ([trials,] n_test, T, d)
    y_test: jax.Array  # ([trials,] n_test)
    mask_test: jax.Array | None  # ([trials,] n_test, T) relevant tokens, None if unknown


def _synthetic_trial(cfg: DataConfig, key: jax.Array) -> Data:
    """One trial's data: the data model's draw (``dynamics.parts.DATA_MODELS``)."""
    return parts.DATA_MODELS[cfg.model].load()(cfg, key)


def draw_planted(cfg: DataConfig, key: jax.Array) -> Data:
    """The planted teacher's data: the teacher, then train and test sets from three subkeys."""
    k_teacher, k_train, k_test = jax.random.split(key, 3)
    teacher = datamodels.planted_teacher(k_teacher, d=cfg.d, heads=cfg.teacher_heads, scale=cfg.teacher_scale)
    kw = dict(T=cfg.T, label_noise=cfg.label_noise)
    X, y, _ = datamodels.planted(k_train, cfg.n_train, teacher, **kw)
    X_test, y_test, _ = datamodels.planted(k_test, cfg.n_test, teacher, **kw)
    return Data(X, y, X_test, y_test, None)


def draw_mixture(cfg: DataConfig, key: jax.Array) -> Data:
    """DM1 and the tokenized mixture: train and test sets (the first subkey is unused, as the
    planted model's teacher key, so both models split a trial's key alike)."""
    _, k_train, k_test = jax.random.split(key, 3)
    kw = _mixture_kw(cfg)
    X, y, _ = datamodels.tokenized_mixture(k_train, cfg.n_train, **kw)
    X_test, y_test, mask_test = datamodels.tokenized_mixture(k_test, cfg.n_test, **kw)
    return Data(X, y, X_test, y_test, mask_test)


def _mixture_kw(cfg: DataConfig) -> dict:
    names = ("T", "d", "zeta", "r", "signal", "noise", "n_irrelevant", "geometry", "first_relevant")
    return {name: getattr(cfg, name) for name in names}


def train_relevant_tokens(
    cfg: DataConfig, key: np.ndarray, trials: int
) -> tuple[jax.Array, jax.Array] | None:
    """(X_train (trials, n, T, d), relevant mask (trials, n, T)) of DM1 and the mixture, drawn
    exactly as ``make_data`` draws the training set (same keys and draws; the caller can compare
    X), or None for data without known relevant tokens. For the max-margin diagnostic."""
    cfg = cfg.resolved()
    if not parts.DATA_MODELS[cfg.model].relevant_tokens:
        return None
    raw = np.stack([rng.fold_in(np.asarray(key, np.uint32), i) for i in range(trials)])
    return executables.call(_train_draws, "data.train_draws", {"cfg": cfg}, {"raw": raw})


@partial(jax.jit, static_argnames="cfg")
def _train_draws(cfg: DataConfig, raw: jax.Array):
    def one(key):
        _, k_train, _ = jax.random.split(key, 3)
        X, _, mask = datamodels.tokenized_mixture(k_train, cfg.n_train, **_mixture_kw(cfg))
        return X, mask

    return jax.vmap(one)(rng.wrap(raw))


def make_data(
    cfg: DataConfig, key: jax.Array | np.ndarray, trials: int, task: str | None = None
) -> tuple[Data, bool]:
    """(data, shared): synthetic data has a leading trial axis; user data is shared by all trials
    (``task``: how a file's targets are read, None to infer it from them; ``datamodels.load_npz``).

    ``key`` is a raw Threefry key ((2,) uint32, e.g. ``jax.random.PRNGKey(seed)``) or a typed
    one. Trial i's data comes from ``fold_in(key, i)``, so adding trials keeps the first ones.
    """
    cfg = cfg.resolved()
    if parts.DATA_MODELS[cfg.model].from_file:
        u = datamodels.load_npz(cfg.path, task)
        return Data(
            jnp.asarray(u.X_train), jnp.asarray(u.y_train), jnp.asarray(u.X_test), jnp.asarray(u.y_test), None
        ), True
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    key = np.asarray(key, np.uint32)
    raw = np.stack([rng.fold_in(key, i) for i in range(trials)])  # (trials, 2), no compile
    return executables.call(_synthetic_trials, "data.synthetic_trials", {"cfg": cfg}, {"raw": raw}), False


@partial(jax.jit, static_argnames="cfg")
def _synthetic_trials(cfg: DataConfig, raw: jax.Array) -> Data:
    # One compiled program (op-by-op dispatch of the generators costs seconds of compiles),
    # with dynamics.core.rng's Threefry: jax.random's numbers, without its rolled CPU hash loop,
    # which XLA:CPU takes seconds to compile per draw.
    return jax.vmap(lambda k: _synthetic_trial(cfg, k))(rng.wrap(raw))  # raw (trials, 2)


def token_width(data: Data) -> int:
    return int(data.X_train.shape[-1])
