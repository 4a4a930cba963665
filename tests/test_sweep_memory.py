"""One memory check for every way a sweep runs: ``run_sweep`` and ``run_grid`` from Python refuse
what the command line refuses, before anything is drawn, and a grid is sized by its largest point."""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest

from datamodels.npz import read_header
from dynamics import parts
from dynamics.config.grid_axes import resolve_grid
from dynamics.config.schema import Config, ConfigError, DataConfig, apply_overrides, resolve
from dynamics.core import engine, heads, model, start
from dynamics.core.data import data_model, draw_trial, token_width
from dynamics.parts import metrics
from dynamics.sweeps import memory
from dynamics.sweeps.devices import BatchPlacer
from dynamics.sweeps.execute import check_vector_targets, prepare_data
from dynamics.sweeps.grid_runner import run_grid_experiment
from dynamics.sweeps.plan import make_batch, plan_points, trial_keys
from dynamics.sweeps.sweep import run_grid, run_sweep
from tests import helpers
from tests.test_vector_targets import vector_config, vector_file

SMALL = {
    "data": {"n_train": 24, "n_test": 30, "T": 6, "d": 8},
    "optim": {"steps": 4},
    "sweep": {"heads": (1, 2), "trials": 2, "log_every": 2},
}


def small() -> Config:
    return apply_overrides(Config(name="m"), SMALL, "test")


def needed(cfg: Config) -> int:
    exp = resolve(cfg)
    return sum(memory.sweep_bytes(exp.config, len(exp.steps)).values())


def test_run_sweep_and_run_grid_refuse_a_sweep_over_the_limit(monkeypatch):
    cfg = small()
    monkeypatch.setenv(memory.ENV, str(needed(cfg) - 1))  # one byte short
    with pytest.raises(ConfigError, match="this sweep needs about .* more than the limit"):
        run_sweep(cfg, progress=False)
    with pytest.raises(ConfigError, match="more than the limit"):
        run_grid(cfg, lrs=[0.1, 1.0], progress=False)
    monkeypatch.setenv(memory.ENV, str(needed(cfg)))  # exactly enough: it runs
    result = run_sweep(cfg, progress=False)
    assert np.isfinite(result.curves["train_loss"]).all()


def test_a_grid_is_sized_by_its_largest_point(monkeypatch):
    base = small()
    grid = resolve_grid(base, {"n_train": [24, 400]})
    first, largest = (needed(c) for c in grid.points)
    assert largest > first
    monkeypatch.setenv(memory.ENV, str(largest - 1))  # the first point fits, the largest does not
    with pytest.raises(ConfigError, match="the largest of these 2 grid points needs about"):
        run_grid_experiment(grid, progress=False)


def test_the_estimate_counts_the_declared_metrics():
    """The curves' part is the run's metrics (their registry), the per-head part each per-head
    metric's declared numbers per step: computed here by hand for H_max = 2, P = F = d = 8."""
    exp = resolve(apply_overrides(small(), {"sweep": {"head_metrics": "on"}}, "test"))
    parts = memory.sweep_bytes(exp.config, len(exp.steps))
    runs_steps = 2 * 2 * len(exp.steps) * 8  # heads × trials × L × float64
    assert parts["curves"] == runs_steps * 9  # a classification run's nine metrics
    # per head: attn_relevant, u_norm, key_norm, uk_cos (4·H); u_cos, key_cos (2·H·P);
    # attn_feature (H·F); the engine's float32 and the host's float32 (4 + 4 bytes); L_h = L here
    H, P = 2, 8
    runs_views = 2 * 2 * len(exp.steps)
    assert parts["per-head metrics"] == runs_views * 8 * (4 * H + 2 * H * P + H * P)
    # the head–head matrices (u_sim, key_sim, attn_sim: 3·H²) only with sweep.head_sims
    sims = resolve(apply_overrides(exp.config, {"sweep": {"head_sims": True}}, "test")).config
    got = memory.sweep_bytes(sims, len(exp.steps))["per-head metrics"]
    assert got == runs_views * 8 * (4 * H + 2 * H * P + H * P + 3 * H * H)


def test_the_per_head_view_is_counted_at_its_own_steps():
    """1000 steps logged every step: the per-head view (metrics, snapshots) at every 6th logged step
    and the last (168 of 1001, ``HEAD_POINTS`` = 200), or at every one with head_every = 1."""
    over = {"optim": {"steps": 1000}, "sweep": {"log_every": 1, "head_metrics": "on", "save_params": True}}
    cfg = resolve(apply_overrides(small(), over, "test")).config
    every = resolve(apply_overrides(cfg, {"sweep": {"head_every": 1}}, "test")).config
    default, full = memory.sweep_bytes(cfg, 1001), memory.sweep_bytes(every, 1001)
    assert len(range(0, 1001, 6)) + 1 == 168
    for part in ("per-head metrics", "parameter snapshots"):
        assert default[part] * 1001 == full[part] * 168
    assert default["curves"] == full["curves"]


# Vector targets (y ∈ R^o, U_h ∈ R^{d×o}) and positional attention (a_h ∈ R^T): the estimate's
# terms against the arrays a run really holds.


def emergence(copy_logits: str) -> Config:
    """The emergence data (o = d = 4 outputs) with position logits, B = 2 copies: the per-head view
    (metrics and snapshots) at every logged step."""
    cfg = helpers.small(loss="mse", query="position", norm="sum", save_params=True, head_metrics="on")
    data = DataConfig(model="emergence", T=6, d=4, n_train=24, n_test=30, copies=2, copy_logits=copy_logits)
    return dataclasses.replace(cfg, data=data)


def vector_npz(tmp_path) -> Config:
    """A data file of vector targets (o = 3), query x_1, snapshots on."""
    return vector_config(vector_file(tmp_path), save_params=True, head_metrics="on")


def engine_arrays(cfg: Config):
    """What the engine holds for ``cfg`` (shapes only, nothing compiled): the drawn data, one pack's
    parameters (S slots), the per-head view it stores at a logged step and the forward's attention
    and head outputs on the training and test sets."""
    exp = resolve(cfg)
    c = exp.config
    keys = trial_keys(c)
    if parts.DATA_MODELS[c.data.model].from_file:
        data, shared, _ = prepare_data(c)
    else:  # every trial's draw (trials, …), traced, not compiled
        draw = jax.vmap(lambda k: draw_trial(data_model(c.data), c.data, k))
        data, shared = jax.eval_shape(draw, keys), False
    placer = BatchPlacer(jax.devices()[:1])
    point = plan_points(c, range(len(c.sweep.heads)), token_width(data), list(exp.steps), placer)[0]
    batch, _, _ = make_batch(point, [c], keys, np.float32, keys)
    element = jax.tree.map(lambda a: a[0], batch)
    trial = data._replace(world=None)
    trial = trial if shared else jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape[1:], a.dtype), trial)
    prog = point.prog

    def held(d, b):
        p = start.init_slots(prog, b, engine.outputs_of(d), d.X_train.shape[-2])
        q = engine.by_position(prog, p)  # as the model and the per-head view read it
        A = [model.attention(q, X, prog.query) for X in (d.X_train, d.X_test)]
        view, _ = engine.head_view(prog, q, d, heads.key_directions(q), A[1])
        return p, view, A, [model.readout(q, X, a) for X, a in zip((d.X_train, d.X_test), A, strict=True)]

    return exp, data, jax.eval_shape(held, trial, element)


def numbers(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


@pytest.mark.parametrize("make", ["tied", "vector-npz"])
def test_vector_and_position_shapes_are_counted(make, tmp_path):
    """Each term against the engine's arrays (float32): the data (X and y of every trial, or the file's
    arrays and their float32 copy) exactly; a slot's parameters and its snapshot (U_h (d, o), a_h (T,)
    as the model reads it, or W_h (d, d)) exactly (tied copies: fewer logits held, T counted); the
    per-head metrics and one step's forward (attention, head outputs (n, S, o), residuals (n, R, o))
    within the estimate."""
    cfg = vector_npz(tmp_path) if make == "vector-npz" else emergence(make)
    exp, data, (params, view, A, f) = engine_arrays(cfg)
    c, o = exp.config, engine.outputs_of(data)
    assert o == (3 if make == "vector-npz" else 4)
    parts = memory.config_bytes(c, len(exp.steps), x64=False)
    held = sum(
        numbers(a.shape) * a.dtype.itemsize for a in (data.X_train, data.X_test, data.y_train, data.y_test)
    )
    file_bytes = read_header(c.data.path).nbytes if make == "vector-npz" else 0
    assert parts["data"] == held + file_bytes
    P = memory.slot_numbers(c, o)
    snapshot = sum(numbers(v.shape[1:]) for k, v in view.items() if metrics.is_snapshot(k))
    assert snapshot == P  # one head's snapshot, per slot
    slot = sum(numbers(v.shape[1:]) for v in params.values())
    assert slot == P - (c.data.copies - 1 if make == "tied" else 0)  # the B copies share one logit
    heads_, trials = c.sweep.heads, c.sweep.trials
    S, H_max, viewed = 2 * max(heads_), max(heads_), len(heads_) * trials * len(exp.steps)
    assert parts["parameters and optimiser"] == trials * 4 * S * P * 4
    assert parts["parameter snapshots"] == 2 * viewed * H_max * P * 4  # the engine's and the host's
    per_head = sum(numbers(v.shape[1:]) for k, v in view.items() if metrics.is_per_head(k))
    assert 0 < viewed * H_max * per_head * 8 <= parts["per-head metrics"]
    n_m = c.data.n_train + c.data.n_test
    forward = sum(a.size // a.shape[1] * S for a in A) + sum(x.size // x.shape[1] * S for x in f)
    assert f[0].shape[-1] == o and f[0].shape[-2] == params["U"].shape[0]
    forward += n_m * len(heads_) * o  # Φ − y of the runs (n, R, o)
    assert 3 * trials * forward * 4 <= parts["intermediates"]


def test_vector_targets_and_position_logits_count_more_than_the_scalar_model():
    """With o = 1 and a token query the estimate is what it was; the same shapes with o = d = 4
    outputs and position logits count U_h as d·o and a_h as T, the targets as n·o."""
    cfg = emergence("free")
    scalar = resolve(helpers.replace(cfg, query="first")).config
    vector = resolve(cfg).config
    est = {k: memory.sweep_bytes(c, 4, outputs=o) for k, c, o in (("s", scalar, 1), ("v", vector, None))}
    n_m, T, d, S, trials = 54, 6, 4, 6, 2
    assert est["v"]["data"] - est["s"]["data"] == trials * n_m * d * 4  # y (n + m, o = d) float32
    assert memory.slot_numbers(scalar, 1) == d + d * d and memory.slot_numbers(vector, d) == d * d + T
    assert est["v"]["intermediates"] - est["s"]["intermediates"] == trials * 3 * n_m * S * d * 4


# The estimates of ordinary (o = 1, token-query) configs before vector targets and position logits
# were counted (``helpers.small`` with these knobs, float32 and float64): they must not move.
BEFORE = {
    "default": ({}, (17280, 13824, 101088, 3456, 1152, 10752, 0)),
    "factored": (
        dict(key_query="factored", init="normal", head_size=2, save_params=True, head_metrics="on"),
        (17280, 7680, 101088, 1920, 1152, 10752, 15360),
    ),
    "learned": (
        dict(query="learned", save_params=True, head_metrics="on", head_sims=True),
        (17280, 3072, 101088, 768, 1152, 14208, 6144),
    ),
    "all": (
        dict(query="all", save_params=True, head_metrics="on"),
        (17280, 13824, 505440, 3456, 1152, 10752, 27648),
    ),
}


@pytest.mark.parametrize("name", list(BEFORE))
def test_ordinary_configs_keep_their_estimates(name):
    knobs, want = BEFORE[name]
    exp = resolve(helpers.small(**knobs))
    parts = memory.sweep_bytes(exp.config, len(exp.steps))
    assert tuple(parts.values()) == want
    wide = memory.sweep_bytes(exp.config, len(exp.steps), x64=True)
    assert wide["curves"] == parts["curves"]  # float64 whatever the engine's type
    assert all(wide[k] == 2 * parts[k] for k in parts if k not in ("curves", "per-head metrics"))


class ThreeOutputs:
    """a user regression model: y = X[:, 0, :3] ∈ R^3, T = 4, d = 5; ``outputs`` as given"""

    T, d, task = 4, 5, "regression"

    def __init__(self, outputs):
        self.outputs = outputs

    def setup(self, key, params):
        return {}

    def sample(self, world, key, n):
        X = jax.random.normal(key, (n, 4, 5))
        return X, X[:, 0, :3], None


@pytest.mark.parametrize("declared", [3, lambda params: 3, None, 2])
def test_a_user_model_declares_its_outputs(declared):
    """A declared o (a number or a function of the data config) is what the estimate counts and must
    be what ``sample`` returns; undeclared, the estimate counts a scalar target."""
    name = parts.DATA_MODELS.adopt(ThreeOutputs(declared))
    cfg = dataclasses.replace(helpers.small(loss="mse"), data=DataConfig(model=name, n_train=8, n_test=8))
    exp = resolve(cfg)
    o = memory.outputs_of(exp.config)
    assert o == (1 if declared is None else 2 if declared == 2 else 3)
    assert memory.slot_numbers(exp.config, o) == 5 * o + 25
    draw = jax.vmap(lambda k: draw_trial(data_model(exp.config.data), exp.config.data, k))
    data = jax.eval_shape(draw, trial_keys(exp.config))  # y (trials, n, 3)
    if declared == 2:
        with pytest.raises(ConfigError, match="declares outputs=2 but its targets y have o=3"):
            check_vector_targets(exp.config, data)
    else:
        check_vector_targets(exp.config, data)
