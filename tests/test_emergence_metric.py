"""Emergence times (``dynamics.sweeps.emergence``): first crossings at the logged steps, and power-law
fits with confidence intervals, checked on curves and times whose answers are known exactly."""

import numpy as np
import pytest

from dynamics.sweeps import emergence


def test_first_crossings_are_the_first_logged_steps_past_the_levels():
    steps = np.array([0, 10, 20, 30, 40])
    attn = np.array([[0.1, 0.3, 0.5, 0.9, 0.2], [0.1, 0.2, 0.3, 0.4, np.nan]])  # reaches ½ at 20; never
    loss = np.array([[1.0, 0.8, 0.51, 0.5, 0.1], [2.0, 2.0, 1.5, 1.0, 0.9]])  # ½ of 1 at 30; ½ of 2 at 30
    got = emergence.times(steps, {"attn_relevant": attn, "test_loss": loss})
    np.testing.assert_array_equal(got["attention"], [20.0, np.nan])
    np.testing.assert_array_equal(got["loss"], [30.0, 30.0])
    assert emergence.summary(steps, {"attn_relevant": attn, "test_loss": loss}) == {
        "attention": [20, None],
        "loss": [30, 30],
    }
    cols = emergence.columns({"attention": [20, None], "loss": [30, 50]})
    assert (cols["t_att_mean"], cols["t_att_n"], cols["t_loss_mean"], cols["t_loss_std"]) == (
        20.0,
        1,
        40.0,
        10.0,
    )
    with pytest.raises(ValueError, match="fraction=1.5 must be in"):
        emergence.times(steps, {"attn_relevant": attn, "test_loss": loss}, fraction=1.5)


def test_power_law_fit_recovers_an_exact_law_and_its_interval_covers_a_noisy_one():
    x = np.array([8.0, 16, 32, 64, 128])
    exact = emergence.fit_power_law(x[:, None], 3.0 * x[:, None] ** 0.75 * np.ones((1, 4)))
    assert np.isclose(exact.exponent, 0.75, atol=1e-12) and np.isclose(exact.prefactor, 3.0, rtol=1e-12)
    assert np.isclose(exact.r2, 1.0) and exact.n == 20 and exact.ci[1] - exact.ci[0] < 1e-9
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(100):  # the 95 % interval covers the true exponent about 95 % of the time
        t = 2.0 * x[:, None] ** 1.0 * np.exp(0.1 * rng.normal(size=(5, 6)))
        lo, hi = emergence.fit_power_law(x[:, None], t).ci
        covered += lo <= 1.0 <= hi
    assert 88 <= covered <= 100
    with pytest.raises(ValueError, match="needs >= 3 finite points at >= 2 distinct x"):
        emergence.fit_power_law([4.0, 4.0, 4.0], [1.0, 2.0, np.nan])


def test_grid_fit_reads_the_axis_and_pools_the_trials():
    """A grid-shaped result whose attention crosses ½ at step 4·x^1.5 (x the axis value) exactly."""
    import types

    x = np.array([1.0, 4.0, 16.0])
    steps = np.arange(0, 400)
    cross = 4 * x**1.5  # 4, 32, 256
    attn = (steps[None, None, :] >= cross[None, :, None]).astype(float) * np.ones((1, 1, 1))  # (H, x, L)
    attn = np.repeat(attn[:, :, None, :], 3, axis=2)  # (H, x, trials, L)
    loss = 1.0 - 0.9 * attn
    grid = types.SimpleNamespace(axes=(("T", tuple(x)),))
    result = types.SimpleNamespace(grid=grid, steps=steps, curves={"attn_relevant": attn, "test_loss": loss})
    fit = emergence.grid_fit(result, "T")
    assert np.isclose(fit.exponent, 1.5) and np.isclose(fit.prefactor, 4.0) and fit.n == 9
    assert np.isclose(emergence.grid_fit(result, "T", "loss").exponent, 1.5)
    with pytest.raises(ValueError, match="axis='d' is not an axis of the grid; its axes: T"):
        emergence.grid_fit(result, "d")


def test_a_run_reports_its_emergence_in_the_summary_and_frames():
    from dynamics.api import run_sweep
    from tests.test_emergence_data import emergence_config

    result = run_sweep(emergence_config(steps=40), progress=False)
    row = result.summary()[0]
    frame = result.emergence_frame()
    assert list(frame.columns) == ["H", "lr", "init_scale", "trial", "t_att", "t_loss"] and len(frame) == 1
    want = emergence.times(result.steps, {k: result.curves[k][0] for k in ("attn_relevant", "test_loss")})
    np.testing.assert_array_equal(frame["t_att"], want["attention"])
    assert row["emergence"]["loss"] == [None if np.isnan(t) else int(t) for t in want["loss"]]
    assert {"t_att_mean", "t_loss_n"} <= set(result.summary_frame().columns)
