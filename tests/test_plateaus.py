"""Plateaus and drops of a loss curve: the documented rule on staircases built by hand."""

from __future__ import annotations

import numpy as np
import pytest

from dynamics.sweeps import plateaus


def test_a_staircase_has_its_plateaus_and_drops():
    t = np.arange(0, 1001, 10)
    loss = np.select([t < 300, t < 320, t < 600, t < 620], [1.0, 0.6, 0.5, 0.3], 0.2)
    got = plateaus.summary(t, loss)
    assert got["plateaus"] == [[0, 290, 1.0], [320, 590, 0.5], [620, 1000, 0.2]]  # 0.6 lasts 2 points only
    assert got["drops"] == [[290, 320, 1.0, 0.5], [590, 620, 0.5, 0.2]]


def test_slow_decay_and_noise_within_tolerance():
    t = np.arange(0, 2001, 20)
    rng = np.random.default_rng(0)
    flat = 0.7 * (1 + 0.002 * rng.standard_normal(t.size))  # 0.2 % noise: one plateau
    assert [p.start for p in plateaus.find(t, flat)] == [0]
    decay = np.exp(-t / 200.0)  # falls 10 % per logged interval: never flat
    assert plateaus.find(t, decay) == []
    assert plateaus.drops(plateaus.find(t, decay)) == []


def test_nan_ends_the_search_and_bad_shapes_are_refused():
    t = np.arange(0, 100, 1)
    loss = np.where(t < 60, 1.0, np.nan)
    assert [(p.start, p.stop) for p in plateaus.find(t, loss)] == [(0, 59)]
    with pytest.raises(ValueError, match=r"must be two \(L,\) arrays"):
        plateaus.find(t, loss[:5])
