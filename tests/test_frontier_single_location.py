"""The single-location preset (Marion, Berthier, Biau, Boyer, ICLR 2025): its settings, a tiny run,
its quantities checked against numpy on the saved parameters, the closed-form floor against a
Monte Carlo draw, and a second run loading its data program from the disk cache (LAPACK's QR)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import child_env
from scipy.special import erf

from dynamics.config.grid_axes import grid_preset, resolve_grid
from dynamics.config.schema import preset, resolve
from dynamics.experiments import single_location as sl

ROOT = Path(__file__).resolve().parents[1]
TINY = {"width": 8, "tokens": 4, "n_test": 64, "steps": 60, "trials": 2, "log_every": 20}


def test_preset_is_the_authors_sgd_setting():
    cfg = resolve(preset("single-location")).config
    assert (cfg.data.model, cfg.data.d, cfg.data.T, cfg.data.n_test) == ("single-location", 80, 10, 1000)
    assert cfg.data.gamma == pytest.approx(math.sqrt(0.5)) and cfg.data.epsilon == 0.1
    m, o = cfg.model, cfg.optim
    assert (m.query, m.attention, m.norm, m.init) == ("learned", "erf", "sum", "sphere")
    assert (m.temperature, m.temperature_decay) == (2.0, 1e-4)
    assert (o.optimizer, o.loss, o.lr, o.batch_size, o.sampling) == ("sgd", "mse", 1e-3, 5, "online")
    assert (o.constraint, o.steps, cfg.sweep.trials, cfg.sweep.heads) == ("sphere", 200_000, 30, (1,))


def test_grid_preset_is_the_preset_over_d_and_beta0():
    grid = resolve_grid(*grid_preset("single-location-grid"))
    assert grid.shape == (4, 3)
    assert [cfg.data.d for cfg in grid.points[::3]] == [40, 80, 160, 320]
    assert [cfg.model.temperature for cfg in grid.points[:3]] == [1.0, 2.0, 4.0]
    cfg = grid.base.config
    assert (cfg.model.attention, cfg.optim.sampling, cfg.sweep.trials) == ("erf", "online", 2)


@pytest.fixture(scope="module")
def tiny():
    from dynamics import run_sweep

    return run_sweep("single-location", save_params=True, head_metrics="on", progress=False, **TINY)


@pytest.mark.slow
def test_tiny_run_stays_on_the_sphere_and_logs_the_four_quantities(tiny):
    a = sl.alignments(tiny)
    assert set(a) == set(sl.QUANTITIES)
    for values in a.values():
        assert values.shape == (2, 4) and np.all(np.isfinite(values))
    np.testing.assert_allclose(tiny.curves["u_norm"], 1.0, atol=1e-5)
    np.testing.assert_allclose(tiny.curves["w_norm"], 1.0, atol=1e-5)  # ‖k‖
    assert np.all(a["kappa"] <= 1 + 1e-6) and np.all(a["distance"] <= math.sqrt(3) + 1e-6)


@pytest.mark.slow
def test_quantities_equal_numpy_on_the_saved_parameters(tiny):
    k = tiny.params["k"][0, :, :, 0]  # (trials, L, d)
    v = tiny.params["U"][0, :, :, 0]
    ks, vs = tiny.planted["k_star"][:, None], tiny.planted["v_star"][:, None]  # (trials, 1, d)
    dot = lambda a, b: np.sum(a * b, axis=-1)  # noqa: E731
    a = sl.alignments(tiny)
    np.testing.assert_allclose(a["kappa"], np.abs(dot(k, ks)), atol=1e-5)
    np.testing.assert_allclose(a["nu"], np.abs(dot(v, vs)), atol=1e-5)
    want = np.sqrt(dot(v, ks) ** 2 + dot(k, vs) ** 2 + dot(k, v) ** 2)
    np.testing.assert_allclose(a["distance"], want, atol=1e-5)


def test_floor_equals_a_monte_carlo_draw_of_the_model_at_k_star_v_star():
    rng = np.random.default_rng(0)
    d, T, gamma, beta, n = 12, 5, 0.7, 0.3, 100_000
    k_star, v_star = np.eye(d)[0], np.eye(d)[1]
    X = rng.standard_normal((n, T, d))
    X[:, 0] = math.sqrt(d / 2) * k_star + gamma * rng.standard_normal((n, d))
    phi = np.sum(erf(beta * X @ k_star) * (X @ v_star), axis=1)
    sq = (phi - X[:, 0] @ v_star) ** 2  # the excess: ε's share of the MSE taken out
    assert float(sl.floor(beta, d, T, gamma)) == pytest.approx(sq.mean(), abs=4 * sq.std() / math.sqrt(n))


def test_beta_at_is_the_last_updates_temperature():
    np.testing.assert_allclose(sl.beta_at([0, 1, 2, 200_000], 2.0, 1e-4), [2.0, 2.0, 2 / 1.0001, 2 / 20.9999])


@pytest.mark.slow
def test_figure_draws_from_the_result(tiny):
    import matplotlib.pyplot as plt

    from figures.single_location import single_location_figure

    fig = single_location_figure(tiny)
    assert len(fig.axes) == 3
    plt.close(fig)


_RUN = """
import json, sys
from dynamics.infra import cache
cache.enable(sys.argv[1])
from dynamics import run_sweep
r = run_sweep("single-location", progress=False, **json.loads(sys.argv[2]))
print(json.dumps(r.curves["excess_risk"].tolist()))
"""


@pytest.mark.slow
def test_a_second_run_loads_its_data_program_from_the_cache(tmp_path):
    # The data draw's QR is a LAPACK call: loaded from the disk cache before jaxlib bound LAPACK,
    # it crashed the process (segfault) on every second run of single-location data.
    env = child_env()
    args = [sys.executable, "-c", _RUN, str(tmp_path), json.dumps({**TINY, "steps": 4, "log_every": 2})]
    runs = [subprocess.run(args, env=env, capture_output=True, text=True, timeout=120) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[-1].stderr[-500:]
    assert any((tmp_path / "executables").glob("data.*.xla"))
    assert runs[0].stdout == runs[1].stdout


@pytest.mark.slow
def test_a_grid_over_the_temperature_runs_each_points_own_temperature():
    # The temperature is static in the compiled program: grid points over it once all ran the
    # first point's program (same numbers at every β₀).
    from dynamics import run_sweep
    from dynamics.api import with_overrides
    from dynamics.sweeps.grid_runner import run_grid_experiment

    small = {"heads": [1], "trials": 1, "steps": 5, "n_train": 8, "n_test": 8}
    base = with_overrides("default", **small)  # the config run_sweep runs (not run: its own temperature)
    grid = run_grid_experiment(resolve_grid(base, {"temperature": "0.5,2"}), progress=False)
    alone = run_sweep("default", temperature=2.0, progress=False, **small)
    np.testing.assert_allclose(grid.point(1).curves["train_loss"], alone.curves["train_loss"], rtol=1e-6)
    assert not np.allclose(grid.point(0).curves["train_loss"], alone.curves["train_loss"])
