"""The per-head view on its own schedule: its steps (a subset of the logged ones, about
``HEAD_POINTS``), the key direction's power iteration against numpy's SVD at its stated accuracy,
and a sweep whose per-head curves (float32, at ``head_steps``) leave the aggregate curves bit for
bit as they are without them, saved and loaded with their own step axis."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_same_numbers

from dynamics.config.schema import Config, DataConfig, ModelConfig, OptimConfig, SweepConfig, resolve
from dynamics.core import heads
from dynamics.parts.metrics import HEAD_POINTS, head_indices, head_schedule
from dynamics.sweeps import sweep


@pytest.mark.parametrize("n_logged", [1, 2, 3, 200, 201, 1001, 5000])
def test_the_head_view_is_some_of_the_logged_steps(n_logged):
    cfg = Config(sweep=SweepConfig(head_every=None))
    got = head_indices(cfg, n_logged)
    stride = -(-n_logged // HEAD_POINTS)
    assert got == sorted({*range(0, n_logged, stride), n_logged - 1})  # every stride-th, the last
    assert got[0] == 0 and got[-1] == n_logged - 1 and len(got) <= HEAD_POINTS + 1
    if n_logged <= HEAD_POINTS:
        assert got == list(range(n_logged))  # a run that logs few steps keeps them all
    every = Config(sweep=SweepConfig(head_every=1))
    assert head_indices(every, n_logged) == list(range(n_logged))
    steps = [3 * i for i in range(n_logged)]
    assert head_schedule(steps, cfg) == [steps[i] for i in got]


def _matrices(rhos, d=8, seed=0) -> tuple[np.ndarray, np.ndarray]:
    """(S, d, d) float64 matrices with σ₂/σ₁ = ρ (the rest smaller) and their top left singular vectors."""
    rng = np.random.default_rng(seed)
    Ws, tops = [], []
    for rho in rhos:
        A, _ = np.linalg.qr(rng.normal(size=(d, d)))
        B, _ = np.linalg.qr(rng.normal(size=(d, d)))
        sigma = np.array([1.0, rho, *(rho * 0.9 ** np.arange(1, d - 1))])
        Ws.append(A @ np.diag(sigma) @ B.T)
        tops.append(A[:, 0])
    return np.stack(Ws), np.stack(tops)


def _sine(v: np.ndarray, exact: np.ndarray) -> np.ndarray:
    v = v / np.linalg.norm(v, axis=1, keepdims=True)
    return np.sqrt(np.maximum(0.0, 1.0 - np.sum(v * exact, axis=1) ** 2))


def test_the_key_direction_is_the_top_singular_vector_within_its_stated_accuracy():
    """float32 power iteration against numpy's float64 SVD: within 1e-5 of the top left singular
    vector for σ₂/σ₁ ≤ 0.95 (the bound δ·ρ¹⁶/(1 − ρ¹⁶) with δ = 1e-5, ≈ 8e-6 at 0.95), from the cold
    start, warm from a nearby direction (the last logged one), and warm from a useless start
    (orthogonal to the top vector: M·start is not small, the iteration still gets there); a zero W
    gives a zero direction."""
    rhos = [0.3, 0.8, 0.95]
    W, exact = _matrices(rhos)
    W = np.concatenate([W, np.zeros((1, 8, 8))])  # a zero head: θ(0) = 0
    params = {"U": jnp.zeros((4, 8), jnp.float32), "W": jnp.asarray(W, jnp.float32)}
    rng = np.random.default_rng(1)
    near = exact + 0.05 * rng.normal(size=exact.shape)
    far = rng.normal(size=exact.shape)
    far -= np.sum(far * exact, axis=1, keepdims=True) * exact  # orthogonal to the top vector
    bound = max(1e-5 * 0.95**16 / (1 - 0.95**16), 2e-6)  # not below float32's rounding of a unit vector
    for start in (None, near, far):
        if start is not None:
            start = jnp.asarray(np.concatenate([start, np.ones((1, 8))]), jnp.float32)
        v = np.asarray(jax.jit(heads.key_directions)(params, start), np.float64)
        assert v.dtype == np.float64 and np.all(v[3] == 0.0)  # the zero head: no direction
        np.testing.assert_allclose(np.linalg.norm(v[:3], axis=1), 1.0, rtol=1e-6)
        assert np.all(_sine(v[:3], exact) <= 2 * bound), _sine(v[:3], exact)


def tiny(**sweep_knobs) -> Config:
    return Config(
        data=DataConfig(n_train=12, n_test=10, T=4, d=5, n_irrelevant=1),
        model=ModelConfig(init="normal", init_scale=1.0),
        optim=OptimConfig(steps=12, lr=0.3),
        sweep=SweepConfig(heads=(1, 2), trials=1, log_every=1, **sweep_knobs),
    )


@pytest.mark.stress  # two sweeps' compiles
def test_the_head_view_has_its_own_steps_and_leaves_the_curves_bit_identical(tmp_path):
    from dynamics import load_results
    from dynamics.sweeps.result_files import write_results

    off = sweep.run_sweep(tiny(head_metrics="off"), progress=False)
    on = sweep.run_sweep(tiny(head_metrics="on", head_every=5, save_params=True), progress=False)
    np.testing.assert_array_equal(on.head_steps, [0, 5, 10, 12])  # every 5th logged step, the last
    np.testing.assert_array_equal(on.curves["head_steps"], on.head_steps)
    assert "head_u_sim" not in on.curves  # the head–head matrices only with head_sims
    for name, value in off.curves.items():  # the aggregate curves: bit for bit (on the CPU)
        assert_same_numbers(on.curves[name], value, err_msg=name)
    for name in ("head_u_norm", "head_key_norm", "head_uk_cos", "head_u_cos", "head_attn_relevant"):
        assert on.curves[name].dtype == np.float32 and on.curves[name].shape[:3] == (2, 1, 4), name
    # the snapshots at the same steps: ‖U_h‖ from them, NaN past a run's H
    U = on.params["U"]  # (2, 1, 4, H_max, d)
    assert U.shape == (2, 1, 4, 2, 5)
    np.testing.assert_allclose(on.curves["head_u_norm"], np.linalg.norm(U, axis=-1), rtol=1e-6)
    assert np.all(np.isnan(on.curves["head_u_norm"][0, :, :, 1]))
    frame = on.head_frame()
    assert sorted(set(frame["step"])) == [0, 5, 10, 12] and len(frame) == (1 + 2) * 4
    write_results(on, tmp_path)
    with np.load(tmp_path / "curves.npz") as z:
        np.testing.assert_array_equal(z["head_steps"], [0, 5, 10, 12])
        assert z["head_u_norm"].dtype == np.float32
    back = load_results(tmp_path)
    np.testing.assert_array_equal(back.head_steps, on.head_steps)
    for name, value in on.curves.items():
        np.testing.assert_array_equal(back.curves[name], value, err_msg=name)
    assert resolve(tiny(head_metrics="on")).config.sweep.head_every is None


def _gd(**optim) -> Config:
    base = dict(steps=8, lr=0.3)
    return Config(
        data=DataConfig(n_train=12, n_test=10, T=4, d=5, n_irrelevant=1),
        model=ModelConfig(init="normal", init_scale=1.0),
        optim=OptimConfig(**{**base, **optim}),
        sweep=SweepConfig(heads=(2,), trials=1, log_every=1, head_metrics="off"),
    )


@pytest.mark.stress  # three sweeps' compiles
@pytest.mark.parametrize("optim", [{}, {"optimizer": "adam", "lr": 0.05}])
def test_the_training_metrics_from_the_updates_forward(optim):
    """Full-batch GD and Adam at a constant temperature log the training metrics from the update's
    own forward pass: every curve equal bit for bit whatever the logging schedule (at the steps both
    log), and within 1e-6 (relative) of the same run logging them from a separate forward (a
    temperature schedule β_t = 1/(1 + 1e-12·t), which is 1 in float32)."""
    import dataclasses

    from dynamics.core import engine

    cfg = _gd(**optim)
    assert engine.fused_logging(sweep.program_for(cfg, 2, 5, [0, 8]))
    every = sweep.run_sweep(cfg, progress=False)
    sparse = sweep.run_sweep(
        dataclasses.replace(cfg, sweep=dataclasses.replace(cfg.sweep, log_every=3)), progress=False
    )
    np.testing.assert_array_equal(sparse.steps, [0, 3, 6, 8])
    for name, value in sparse.curves.items():
        np.testing.assert_array_equal(every.curves[name][..., [0, 3, 6, 8]], value, err_msg=name)
    apart = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, temperature_decay=1e-12))
    assert not engine.fused_logging(sweep.program_for(apart, 2, 5, [0, 8]))
    apart = sweep.run_sweep(apart, progress=False)
    for name, value in apart.curves.items():
        np.testing.assert_allclose(every.curves[name], value, rtol=1e-6, atol=0, err_msg=name)


def test_sgd_and_a_temperature_schedule_log_their_own_forward():
    from dynamics.core import engine

    assert not engine.fused_logging(sweep.program_for(_gd(optimizer="sgd", batch_size=4), 2, 5, [0, 8]))
    decay = Config(model=ModelConfig(temperature_decay=0.1), optim=OptimConfig(steps=8))
    assert not engine.fused_logging(sweep.program_for(decay, 2, 5, [0, 8]))


def test_a_checkpoint_point_holds_the_views_curves_at_their_own_steps(tmp_path):
    """A saved point's per-head curves have L_h steps, its metrics L: read back with (trials, L, L_h),
    and refused (recomputed, with a warning naming the file) when L_h is not the config's."""
    from dynamics.parts.metrics import METRICS
    from dynamics.sweeps import checkpoint

    trials, L, L_h = 2, 9, 4
    curves = {k: np.full((2, trials, L), 0.5) for k in METRICS}
    curves["head_u_norm"] = np.ones((2, trials, L_h, 3), np.float32)
    checkpoint.save_point(tmp_path, "hash", [1, 3], curves, np.full((2, trials), -1))
    done = checkpoint.load_points(tmp_path, "hash", (trials, L, L_h))
    assert sorted(done) == [1, 3]
    assert done[3][0]["head_u_norm"].shape == (trials, L_h, 3) and done[3][0]["train_loss"].shape == (
        trials,
        L,
    )
    with pytest.warns(UserWarning, match=r"H1-3.npz is damaged"):
        assert checkpoint.load_points(tmp_path, "hash", (trials, L, L)) == {}


@pytest.mark.parametrize(
    "knobs,message",
    [
        (
            dict(head_metrics="off", head_every=3),
            r"sweep.head_every=3 was given but has no effect: no per-head view",
        ),
        (dict(head_metrics="off", head_sims=True), r"sweep.head_sims=True was given but has no effect"),
        (dict(head_every=0), r"sweep.head_every=0 must be an integer >= 1"),
    ],
)
def test_the_views_knobs_are_refused_where_they_do_nothing(knobs, message):
    from dynamics.api import with_overrides
    from dynamics.config.schema import ConfigError

    with pytest.raises(ConfigError, match=message):
        with_overrides(None, **knobs)
