"""Plateaus and drops of a loss curve (dynamics.sweeps.plateaus): the documented rule on curves built
by hand — smooth decays have none, staircases have one drop per step, at its step, whatever the
loss's scale, the step spacing or a little noise — and the cells the summaries and files carry."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dynamics.config.validation import log_schedule
from dynamics.errors import ConfigError
from dynamics.sweeps import plateaus

SPACINGS = ("linear", "log")


def logged(T: int, spacing: str) -> np.ndarray:
    """The steps a run of T steps logs: every step (every 10th past 500 steps), or the default 200
    log-spaced points (100 for 500 steps)."""
    if spacing == "linear":
        return np.array(log_schedule(T, log_every=1 if T <= 500 else 10))
    return np.array(log_schedule(T, log_points=100 if T <= 500 else 200))


def staircase(t: np.ndarray, falls: list[int], levels: list[float], width: float = 0.0) -> np.ndarray:
    """levels[0] until the first of ``falls`` (steps), levels[j] after the j-th: sharp steps, or
    (``width`` > 0) logistic ones of that width in log(1 + step)."""
    u, y = np.log1p(t), np.full(t.shape, np.log(levels[0]))
    for at, a, b in zip(falls, levels, levels[1:], strict=False):
        jump = np.log(a / b)
        y -= jump * (t >= at) if width == 0 else jump / (1 + np.exp(-(u - np.log1p(at)) / width))
    return np.exp(y)


def noisy(curve: np.ndarray, sd: float, seed: int) -> np.ndarray:
    return curve * np.exp(sd * np.random.default_rng(seed).standard_normal(curve.shape))


def smooth(t: np.ndarray, kind: str) -> np.ndarray:
    T = t[-1]
    return {
        "exp slow": np.exp(-t / (T / 5)),
        "exp fast": np.exp(-t / (T / 50)),
        "power 1/2": (1 + t) ** -0.5,
        "power 1": (1 + t) ** -1.0,
        "power after 50": (1 + t / 50) ** -1.0,
        "slow start": np.exp(-0.3 * (t / T) ** 2),  # the Adam planted run's (test_plateaus_results)
    }[kind]


SMOOTH = ("exp slow", "exp fast", "power 1/2", "power 1", "power after 50", "slow start")


@pytest.mark.parametrize("spacing", SPACINGS)
@pytest.mark.parametrize("T", [500, 10_000])
@pytest.mark.parametrize("kind", SMOOTH)
def test_a_smooth_decay_has_no_drop(kind, T, spacing):
    t = logged(T, spacing)
    for scale in (1e-4, 1.0, 30.0):
        found = plateaus.find(t, scale * smooth(t, kind))
        assert found.drops == [], (kind, scale)
        assert len(found.plateaus) <= 1  # its log-log slope only grows or only shrinks


@pytest.mark.parametrize("spacing", SPACINGS)
@pytest.mark.parametrize("T", [500, 10_000])
def test_a_little_noise_makes_no_drop(T, spacing):
    t = logged(T, spacing)
    for seed in range(4):
        flat = plateaus.find(t, noisy(np.full(t.shape, 0.7), 0.01, seed))
        (plateau,) = flat.plateaus  # one, over (nearly) the whole run
        assert flat.drops == [] and np.log1p(plateau.stop) - np.log1p(plateau.start) >= 0.9 * np.log1p(T)
        assert plateau.level == pytest.approx(0.7, rel=0.01)
        for kind in SMOOTH:
            assert plateaus.find(t, noisy(smooth(t, kind), 0.01, seed)).drops == [], (kind, seed)
            # 3 %: still none (the pieces of a falling stretch that noise leaves flat are not joined
            # into a plateau unless the whole is flat)
            assert plateaus.find(t, noisy(smooth(t, kind), 0.03, seed)).drops == [], (kind, seed)


def stairs(k: int, T: int) -> tuple[list[int], list[float]]:
    """k falls evenly spread in log-steps from step 20 (150 past 500 steps) to 90 % of the run's
    log-steps, of unequal depths (0.4 to 1.2 in log-loss): their steps and the k + 1 levels."""
    first = np.log1p(20 if T <= 500 else 150)
    at = np.expm1(np.linspace(first, 0.9 * np.log1p(T), k)).round().astype(int)
    depths = np.resize([0.4, 1.2, 0.7, 0.9], k)
    return [int(s) for s in at], list(np.exp(-np.concatenate([[0.0], np.cumsum(depths)])))


@pytest.mark.parametrize("spacing", SPACINGS)
@pytest.mark.parametrize("T", [500, 10_000])
@pytest.mark.parametrize("smooth", [False, True])
@pytest.mark.parametrize("k", [1, 2, 3, 4])
def test_a_staircase_has_one_drop_per_step_at_its_step(k, smooth, T, spacing):
    """Sharp steps, or logistic ones 1 % of the run's log-steps wide."""
    t = logged(T, spacing)
    falls, levels = stairs(k, T)
    width = 0.01 * np.log1p(T) if smooth else 0.0
    for scale, sd in ((1.0, 0.0), (1e-3, 0.01), (50.0, 0.01)):
        found = plateaus.find(t, scale * noisy(staircase(t, falls, levels, width), sd, k))
        assert len(found.plateaus) == k + 1 and len(found.drops) == k, (scale, sd)
        for drop, at, before, after in zip(found.drops, falls, levels[:-1], levels[1:], strict=True):
            assert drop.start < at <= drop.stop
            # halfway down within 3 % of the run's log-steps (a sharp step: the logged point at it)
            assert abs(np.log1p(drop.step) - np.log1p(at)) <= 0.03 * np.log1p(T)
            assert drop.before == pytest.approx(scale * before, rel=0.1)
            assert drop.after == pytest.approx(scale * after, rel=0.1)
        for plateau, level in zip(found.plateaus, levels, strict=True):
            assert plateau.level == pytest.approx(scale * level, rel=0.03)


def test_a_staircase_evenly_spaced_in_steps_has_its_drops():
    """Steps every 2000 of 10 000 steps: the last plateaus are short on log axes but long in steps,
    and found where the logging resolves them (every 10th step, or 1000 log-spaced points; the
    default 200 log-spaced points hold 6 and 4 on the last two, too few after the smoothing)."""
    falls = [2000, 4000, 6000, 8000]
    for t in (logged(10_000, "linear"), np.array(log_schedule(10_000, log_points=1000))):
        found = plateaus.find(t, staircase(t, falls, [1, 0.6, 0.4, 0.3, 0.2]))
        assert len(found.drops) == 4
        assert all(d.start < at <= d.stop for d, at in zip(found.drops, falls, strict=True))


def test_the_rule_is_scale_free():
    t = logged(10_000, "log")
    curve = noisy(staircase(t, [100, 1000], [1.0, 0.5, 0.1], 0.05), 0.02, 3)
    base = plateaus.find(t, curve)
    assert len(base.drops) == 2
    for c in (1e-6, 7.0, 1e4):
        got = plateaus.find(t, c * curve)
        assert [(p.start, p.stop) for p in got.plateaus] == [(p.start, p.stop) for p in base.plateaus]
        assert [(d.start, d.step, d.stop) for d in got.drops] == [
            (d.start, d.step, d.stop) for d in base.drops
        ]
        np.testing.assert_allclose(
            [p.level for p in got.plateaus], [c * p.level for p in base.plateaus], rtol=1e-12
        )
        np.testing.assert_allclose(
            [d.after for d in got.drops], [c * d.after for d in base.drops], rtol=1e-12
        )


def test_a_drop_needs_a_plateau_on_both_sides_and_the_stated_depth():
    t = logged(10_000, "log")
    falls_first = staircase(t, [1], [1.0, 0.1])  # falls at once, then flat: nothing before
    assert plateaus.find(t, falls_first).drops == []
    never_flat = (1 + t) ** -1.0 * staircase(t, [300], [1.0, 0.3])  # a step inside a steady fall
    assert plateaus.find(t, never_flat).plateaus == []
    rises = staircase(t, [300], [0.3, 1.0])
    assert plateaus.find(t, rises).drops == [] and len(plateaus.find(t, rises).plateaus) == 2
    # just under and just over the least depth (0.2 in log-loss)
    assert plateaus.find(t, staircase(t, [300], [1.0, np.exp(-0.19)])).drops == []
    assert len(plateaus.find(t, staircase(t, [300], [1.0, np.exp(-0.21)])).drops) == 1
    assert len(plateaus.find(t, staircase(t, [300], [1.0, np.exp(-0.19)]), depth=0.1).drops) == 1


def test_too_short_a_rest_is_no_plateau():
    """A rest of 1 % of the log-steps between two falls (less than the 2 % a plateau needs) is
    passed through: one drop from the level before to the level after."""
    t = logged(10_000, "log")
    at = int(np.expm1(0.5 * np.log1p(10_000)))
    curve = staircase(t, [at, int(at * np.exp(0.01 * np.log1p(10_000)))], [1.0, 0.5, 0.2])
    (drop,) = plateaus.find(t, curve).drops
    assert drop.before == pytest.approx(1.0, rel=0.01) and drop.after == pytest.approx(0.2, rel=0.01)


def test_the_curve_is_read_up_to_a_divergence_or_a_zero_loss():
    t = logged(10_000, "log")
    curve = staircase(t, [100, 1000], [1.0, 0.5, 0.1])
    full = plateaus.find(t, curve)
    assert len(full.drops) == 2
    cut = np.where(t < 3000, curve, np.nan)  # NaN from step 3000 (a divergence), then finite again
    cut[-1] = 1e-9
    got = plateaus.find(t, cut)
    assert [d.stop for d in got.drops] == [d.stop for d in full.drops]
    assert got.plateaus[-1].stop == t[t < 3000][-1]
    zero = np.where(t < 3000, curve, 0.0)  # an exactly zero loss (squared hinge) ends it likewise
    assert plateaus.find(t, zero) == got
    assert plateaus.find(t, np.where(t < 3, curve, np.nan)) == ([], [])  # too few finite points
    assert plateaus.find(t, np.full(t.shape, np.nan)) == ([], [])


def test_bad_curves_and_settings_are_refused_in_one_line():
    t = np.arange(100)
    with pytest.raises(ConfigError, match=r"must be two \(L,\) arrays"):
        plateaus.find(t, np.ones(5))
    with pytest.raises(ConfigError, match="increasing logged steps"):
        plateaus.find(t[::-1], np.ones(100))
    for setting, says in (
        ({"flat": 1.5}, "flat=1.5 must be in"),
        ({"depth": 0}, "depth=0 must be > 0"),
        ({"max_slope": -1.0}, "max_slope=-1.0 must be > 0"),
        ({"min_span": np.nan}, "min_span=nan"),
        ({"min_points": 1}, "min_points=1 must be an integer >= 2"),
        ({"window": True}, "window=True"),
    ):
        with pytest.raises(ConfigError, match=says):
            plateaus.find(t, np.ones(100), **setting)


def test_the_summary_is_json_and_the_frame_cells_are_machine_readable():
    t = logged(10_000, "log")
    runs = [staircase(t, [100, 1000], [1.0, 0.5, 0.1]), staircase(t, [300], [1.0, 0.2]), smooth(t, "power 1")]
    per_trial = [plateaus.summary(t, c) for c in runs]
    assert json.loads(json.dumps(per_trial)) == per_trial
    assert [len(p["drops"]) for p in per_trial] == [2, 1, 0]
    assert set(per_trial[0]["drops"][0]) == {"start", "stop", "step", "before", "after"}
    assert plateaus.mean_drops(per_trial, [True, True, True]) == 1.0
    assert plateaus.mean_drops(per_trial, [True, True, False]) == 1.5  # the third diverged
    assert plateaus.mean_drops(per_trial, [False, False, True]) == 0.0
    assert plateaus.mean_drops(per_trial, [False, False, False]) is None
    cells = plateaus.columns({"drops": None, "plateaus": per_trial})
    assert np.isnan(cells["drops"]) and json.loads(cells["plateaus"]) == per_trial
