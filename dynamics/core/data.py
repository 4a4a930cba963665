"""Build a sweep's data from its config: one draw per trial, shared by every H."""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import datamodels
from dynamics import parts
from dynamics.core import rng
from dynamics.errors import ConfigError
from dynamics.infra import executables
from dynamics.parts import boundary

# The config layer's ``DataConfig`` (``config.schema``), the data section of a resolved config (its
# ``model``, sizes and ``resolved()``): named by this alias, as the core imports nothing of that layer
DataConfig = Any


class Data(NamedTuple):
    X_train: jax.Array  # ([trials,] n, T, d)
    y_train: jax.Array  # ([trials,] n): ±1 labels (classification) or real targets (regression)
    X_test: jax.Array  # ([trials,] n_test, T, d)
    y_test: jax.Array  # ([trials,] n_test)
    mask_test: jax.Array | None  # ([trials,] n_test, T) relevant tokens, None if unknown
    mask_train: jax.Array | None = None  # ([trials,] n, T) relevant tokens, None if unknown
    world: Any = None  # each trial's world (datamodels.protocol), leading trial axis; None for a file
    noise_floor: jax.Array | None = None  # ([trials,]) float32 Bayes risk of the square loss, NaN if unknown
    directions: jax.Array | None = None  # ([trials,] P, d) the world's planted directions, None if none
    # ([trials,] n_test, F, T) the test set's relevant tokens per feature (a per-feature mask), or None
    features_test: jax.Array | None = None
    # ([trials,] …) θ(0) that each trial's world sets (its model's ``initial_params``): name -> one
    # head's array, every head of a run starting from it; None when the world sets none
    world_init: dict | None = None


def data_model(cfg: DataConfig):
    """The data model object of ``cfg.model`` (``setup`` and ``sample``: ``datamodels.protocol``)."""
    return parts.DATA_MODELS.get(cfg.model).load()


TRAINING_SET = "the training set"
TEST_SET = "the test set"


def draw_trial(model, cfg: DataConfig, key: jax.Array, train: str = TRAINING_SET) -> Data:
    """One trial of ``model``: its world from the first of three subkeys of ``key``, then the
    training and test sets sampled from that world with the second and third (each checked at the
    boundary: ``dynamics.parts.boundary``; ``train`` names the training draw in a refusal). The
    test set is drawn by the model's ``sample_test`` where it declares one (its own test
    distribution), else by ``sample``."""
    k_setup, k_train, k_test = jax.random.split(key, 3)
    world = model.setup(k_setup, cfg)
    X, y, mask = checked_sample(model, cfg, world, k_train, cfg.n_train, train)
    X_test, y_test, mask_test = checked_sample(model, cfg, world, k_test, cfg.n_test, TEST_SET, test=True)
    boundary.check_test_targets(cfg.model, y, y_test)  # a test loss of other targets means nothing
    floor = boundary.check_floor_shape(cfg.model, datamodels.noise_floor(model, world))
    directions = datamodels.direction_matrix(datamodels.planted_of(world))
    (mask, _), (mask_test, features) = relevant(mask), relevant(mask_test)
    return Data(X, y, X_test, y_test, mask_test, mask, world, floor, directions, features)


def checked_sample(model, cfg: DataConfig, world, key: jax.Array, n: int, what: str, test: bool = False):
    """``model.sample(world, key, n)`` (``test``: the model's ``sample_test`` where it has one), its
    shapes and dtypes checked against n and the config's T and d (``dynamics.parts.boundary.sample``;
    static, so free inside a trace)."""
    at = boundary.where(cfg.model, n, what)
    return boundary.sample(model, world, key, n, cfg.T, cfg.d, at, test=test)


def relevant(mask: jax.Array | None) -> tuple[jax.Array | None, jax.Array | None]:
    """(the relevant tokens (n, T), the per-feature mask (n, F, T) or None) of a sample's mask: a
    per-feature mask's union over its features, or the (n, T) mask as it is."""
    if mask is None or jnp.ndim(mask) != 3:
        return mask, None
    return jnp.any(mask, axis=1), mask


class ModelRef:
    """A data model object as a static argument of a compiled draw: equal only to itself, so a
    redefined object (a notebook cell run again) is traced anew under the same name; its repr
    is the name (the disk cache's key covers its source through the part's fingerprint)."""

    def __init__(self, obj, name: str):
        self.obj, self.name = obj, name

    def __eq__(self, other) -> bool:
        return isinstance(other, ModelRef) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return f"ModelRef({self.name!r})"


def _static(cfg: DataConfig) -> dict:
    return {"cfg": cfg, "model": ModelRef(data_model(cfg), cfg.model)}


def make_data(
    cfg: DataConfig,
    key: jax.Array | np.ndarray,
    trials: int,
    task: str | None = None,
    train: str = TRAINING_SET,
) -> tuple[Data, bool]:
    """(data, shared): synthetic data has a leading trial axis; user data is shared by all trials
    (``task``: how a file's targets are read, None to infer it from them; ``datamodels.load_npz``;
    ``train``: what the training draw is called in a refusal, e.g. an online batch).

    ``key`` is a raw Threefry key ((2,) uint32, e.g. ``jax.random.PRNGKey(seed)``) or a typed
    one. Trial i's data comes from ``fold_in(key, i)``, so adding trials keeps the first ones.
    """
    cfg = cfg.resolved()
    if parts.DATA_MODELS[cfg.model].from_file:
        u = datamodels.load_npz(cfg.path, task)
        masks = [None if m is None else jnp.asarray(m) for m in (u.mask_test, u.mask_train)]
        arrays = [jnp.asarray(a) for a in (u.X_train, u.y_train, u.X_test, u.y_test)]
        return Data(*arrays, *masks, None, jnp.asarray(np.nan, jnp.float32)), True
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    key = np.asarray(key, np.uint32)
    raw = np.stack([rng.fold_in(key, i) for i in range(trials)])  # (trials, 2), no compile
    model = data_model(cfg)
    static = _static(cfg) | ({} if train == TRAINING_SET else {"train": train})  # the same key as ever
    if not executables.is_kept("data.synthetic_trials", static, {"raw": raw}):
        with jax.enable_x64(False):  # shapes and dtypes of one trial, before any compile
            jax.eval_shape(lambda k: draw_trial(model, cfg, k, train), rng.wrap(raw[0]))
    data = executables.call(_synthetic_trials, "data.synthetic_trials", static, {"raw": raw})
    check_data(cfg, data, parts.DATA_MODELS[cfg.model].task)
    return data, False


def sets_initial_params(model) -> bool:
    """The data model sets θ(0) from its world (it has ``initial_params``: ``datamodels.protocol``)."""
    return callable(getattr(model, "initial_params", None))


def world_initial_params(cfg: DataConfig, data: Data, shapes: dict[str, tuple[int, ...]]) -> dict | None:
    """Every trial's θ(0) from its world, name -> (trials, *one head's shape) float32, as the data
    model's ``initial_params(world, shapes)`` gives it (checked at the boundary: names, shapes,
    dtype, finite), or None for a model without it or data from a file."""
    model = data_model(cfg) if not parts.DATA_MODELS[cfg.model].from_file else None
    if model is None or data.world is None or not sets_initial_params(model):
        return None

    def one(world):
        out = boundary.check_initial_params(cfg.model, model.initial_params(world, shapes), shapes)
        return {k: jnp.asarray(v, jnp.float32) for k, v in out.items()}

    # from the worlds as drawn (float32), used in the working precision
    with jax.enable_x64(False), executables.exact_matmuls():
        given = jax.jit(jax.vmap(one))(data.world)
    given = {k: np.asarray(v) for k, v in given.items()}
    boundary.check_initial_values(cfg.model, given)
    return given or None


def check_data(cfg: DataConfig, data: Data, task: str) -> None:
    """The drawn arrays' values at the boundary (``dynamics.parts.boundary.check_values``): X and y
    finite, classification labels ±1; and a model that says it knows its relevant tokens returns them."""
    arrays = {k: getattr(data, k) for k in ("X_train", "y_train", "X_test", "y_test")}
    boundary.check_values(cfg.model, task, arrays)
    boundary.check_floor_values(cfg.model, data.noise_floor)
    if parts.DATA_MODELS[cfg.model].relevant_tokens and data.mask_test is None:
        raise ConfigError(
            f"data.model={cfg.model!r} says relevant_tokens=True but its sample returned mask None; "
            "return the (n, T) bool mask, or drop relevant_tokens"
        )


@partial(jax.jit, static_argnames=("cfg", "model", "train"))
def _synthetic_trials(cfg: DataConfig, model: ModelRef, raw: jax.Array, train: str = TRAINING_SET) -> Data:
    # One compiled program (op-by-op dispatch of the generators costs seconds of compiles),
    # with dynamics.core.rng's Threefry: jax.random's numbers, without its rolled CPU hash loop,
    # which XLA:CPU takes seconds to compile per draw.
    return jax.vmap(lambda k: draw_trial(model.obj, cfg, k, train))(rng.wrap(raw))  # raw (trials, 2)


def direction_names(data: Data) -> list[str]:
    """The names of the rows of ``data.directions`` (``datamodels.direction_names``), from the
    trials' worlds; none for data from a file."""
    return datamodels.direction_names(datamodels.planted_of(data.world), batched=True)


def planted_names(cfg: DataConfig) -> list[str]:
    """The planted directions' names of ``cfg``'s data model, in the order of the per-head |cos|
    curves' last axis (``datamodels.direction_names``), from the shapes of one traced world (no
    draw); none for data from a file."""
    cfg = cfg.resolved()
    if parts.DATA_MODELS[cfg.model].from_file:
        return []
    model = data_model(cfg)
    with jax.enable_x64(False):
        planted = jax.eval_shape(lambda k: datamodels.planted_of(model.setup(k, cfg)), rng.wrap(rng.seed(0)))
    shapes = {k: np.empty(v.shape, np.float32) for k, v in planted.items()}
    return datamodels.direction_names(shapes)


def token_width(data: Data) -> int:
    return int(data.X_train.shape[-1])


def tied_positions(cfg) -> tuple[int, ...]:
    """The logit each position reads under positional attention, as the data model ties them
    (its ``tied_positions(params)``), or () (every position its own). Tied logits need
    ``model.query='position'``: a one-line ConfigError otherwise."""
    if parts.DATA_MODELS[cfg.data.model].from_file:
        return ()
    tie = getattr(data_model(cfg.data), "tied_positions", None)
    groups = tie(cfg.data.resolved()) if callable(tie) else None
    if not groups:
        return ()
    if not parts.QUERIES[cfg.model.query].positional:
        raise ConfigError(
            f"data.model={cfg.data.model!r} ties the logits of its copies, which needs positional attention: "
            f"model.query='position' (got {cfg.model.query!r}); or untie them (data.copy_logits='free')"
        )
    return tuple(int(g) for g in groups)
