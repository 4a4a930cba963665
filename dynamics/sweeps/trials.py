"""One trial's data exactly as its sweep draws them (``trial_data``): the arrays a run trains and is
tested on, and its world, for an analysis of the run's own data or an ``.npz`` that runs them again.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

from dynamics.config.schema import Config, Experiment, preset, resolve
from dynamics.core import rng
from dynamics.core.data import make_data
from dynamics.errors import ConfigError


class TrialData(NamedTuple):
    """One trial's data as its run trains and tests on them (``trial_data``), numpy."""

    X_train: np.ndarray  # (n, T, d) float32
    y_train: np.ndarray  # (n,): ±1 labels or regression targets
    X_test: np.ndarray  # (n_test, T, d)
    y_test: np.ndarray  # (n_test,)
    mask_train: np.ndarray | None  # (n, T) bool relevant tokens, None if unknown
    mask_test: np.ndarray | None  # (n_test, T) bool
    world: Any = None  # the trial's world (its latents, planted directions), None for a file

    def save(self, path) -> None:
        """An .npz that ``--data`` (``DataConfig(model="npz", path=...)``) runs exactly as these
        arrays (the masks included where known)."""
        arrays = {k: v for k, v in self._asdict().items() if v is not None and k != "world"}
        np.savez(path, **arrays)


def trial_data(config, trial: int = 0) -> TrialData:
    """Exactly the arrays trial ``trial`` of a sweep of ``config`` (a Config, an Experiment, a
    preset's name, or None for the defaults) trains and is tested on, and its world: drawn from the
    sweep's own key (its seed) as the sweep draws them, so an analysis of them is an analysis of
    the run's data (a run fed them, as an .npz or a data model returning them, gives the same
    curves bit for bit). Data from a file: the file's arrays, the same for every trial. With online
    sampling the training set is drawn but not trained on (each update samples a fresh batch)."""
    cfg = _resolved(config)
    trials = cfg.sweep.trials
    if isinstance(trial, bool) or not isinstance(trial, int | np.integer) or not 0 <= trial < trials:
        raise ConfigError(f"trial={trial!r} must be an integer in [0, {trials}) (sweep.trials={trials})")
    return every_trial(cfg)[trial]


def every_trial(config, data=None, shared: bool = False) -> list[TrialData]:
    """``trial_data`` of every trial of ``config``'s sweep, from one draw: the sweep's own (``data``
    and ``shared`` of ``dynamics.sweeps.execute.prepare_data``, which an analysis after the sweep
    reads instead of drawing again) or, when ``data`` is None, drawn here once."""
    cfg = _resolved(config)
    if data is None:
        with jax.enable_x64(False):  # drawn as the sweep draws them (dynamics.sweeps.execute.prepare_data)
            data, shared = make_data(
                cfg.data, sweep_data_key(cfg.sweep.seed), cfg.sweep.trials, task=cfg.optim.task
            )
    return [_one(data, shared, t) for t in range(cfg.sweep.trials)]


def _one(data, shared: bool, trial: int) -> TrialData:
    pick = (lambda a: a) if shared else (lambda a: a[trial])
    arrays = [None if a is None else np.asarray(pick(a)) for a in data[:6]]
    X, y, X_test, y_test, mask_test, mask_train = arrays
    world = None if shared else jax.tree_util.tree_map(lambda a: np.asarray(a[trial]), data.world)
    return TrialData(X, y, X_test, y_test, mask_train, mask_test, world)


def _resolved(config):
    config = Config() if config is None else preset(config) if isinstance(config, str) else config
    if not isinstance(config, Config | Experiment):
        raise TypeError(f"config={config!r:.80} must be a Config, a preset's name or None (the defaults)")
    return resolve(config).config


def sweep_data_key(seed: int) -> np.ndarray:
    """The raw key a sweep of seed ``seed`` draws its data from (trial i: fold_in(key, i))."""
    return rng.split(rng.seed(seed))[0]
