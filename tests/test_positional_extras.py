"""Positional-semantic beyond the two fixed starts: the random start (Q(0) the model's normal init,
any rank r, reproducible per seed, refused where it cannot act), its place in the config hash, the
phase diagram's and the random start's readers, and tiny runs of both new presets' configs."""

from __future__ import annotations

from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest

from dynamics.api import run_sweep
from dynamics.config.grid_axes import grid_preset, resolve_grid
from dynamics.config.schema import ConfigError, apply_overrides, resolve
from dynamics.core import rng
from dynamics.core.inits import init_params
from dynamics.experiments import positional_extras as px
from dynamics.experiments import positional_semantic as ps
from dynamics.sweeps.grid_runner import write_grid
from figures.positional_beyond import phase_figure, plot_phase, random_figure
from figures.registry import FIGURES

_TINY = {"d": 6, "n_train": 6, "n_test": 8, "temperature": 1 / 6, "steps": 3, "trials": 2, "log_every": 3}


def _random(**over):
    """The random-start preset's config at tiny size, then ``over`` (API keywords)."""
    cfg, _ = grid_preset(px.RANDOM)
    return cfg, {**_TINY, "log_points": None, **over}


@pytest.mark.parametrize(
    ("over", "says"),
    [
        ({"init": "zero"}, "model.init='zero' draws nothing"),
        ({"init_from": "theta.npz"}, "model.init_from='theta.npz' sets θ(0) from a file"),
        ({"start": "semantic"}, "data.start='semantic' sets Q(0) of rank 1"),
        ({"start": "positional", "head_size": 3}, "data.start='positional' sets Q(0) of rank 1"),
    ],
)
def test_the_starts_are_refused_with_what_they_cannot_go_with(over, says):
    cfg, tiny = _random()
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")) as err:
        run_sweep(cfg, **tiny, **over)
    assert "\n" not in str(err.value)


def test_the_random_start_enters_the_hash_and_the_fixed_starts_keep_theirs():
    cfg, _ = grid_preset(ps.NAME)
    semantic = resolve(apply_overrides(cfg, {"data": {"start": "semantic"}}, "t")).config
    random = apply_overrides(cfg, {"data": {"start": "random"}, "model": {"init": "normal"}}, "t")
    assert resolve(random).config.hash() != semantic.hash()


def _phase_result(obj, knob="omega"):
    """A grid result over n_train × ``knob`` × start with curves (1, A, K, 2, trials, 1)."""
    axes = (("n_train", (5, 10)), (knob, (0.0, 0.5)), ("start", ("positional", "semantic")))
    cfg = SimpleNamespace(data=SimpleNamespace(d=10))
    curves = {
        n: obj[None, ..., None] for n in (ps.OBJECTIVE, "test_loss", ps.M_POSITIONAL, ps.THETA_SEMANTIC)
    }
    return SimpleNamespace(curves=curves, grid=SimpleNamespace(axes=axes, points=[cfg]))


def test_the_phase_reader_pairs_the_starts_per_cell_and_finds_each_crossing():
    # objective[α, ω, start (positional, semantic), trial]
    obj = np.zeros((2, 2, 2, 2))
    obj[:, :, 0] = 1.0  # positional: 1 everywhere
    obj[:, 0, 1] = [[3.0, 1.0], [0.0, 0.0]]  # ω = 0: semantic higher (+1) at α = 0.5, lower (−1) at 1
    obj[:, 1, 1] = [[2.0, 2.0], [4.0, 2.0]]  # ω = 0.5: semantic higher at both α
    p = px.phase(_phase_result(obj))
    np.testing.assert_allclose(p["alpha"], [0.5, 1.0])
    np.testing.assert_allclose(p["difference"], [[1.0, 1.0], [-1.0, 2.0]])
    np.testing.assert_allclose(p["difference_std"], [[1.0, 0.0], [0.0, 1.0]])
    assert p["better"].tolist() == [["positional", "positional"], ["semantic", "positional"]]
    assert p["crossing"][0] == pytest.approx(0.75) and np.isnan(p["crossing"][1])
    assert p["knob"] == "omega"
    np.testing.assert_allclose(p["semantic"]["test_loss"], [[2.0, 2.0], [0.0, 3.0]])
    with pytest.raises(ValueError, match="phase needs a grid over n_train × one knob"):
        bad = _phase_result(obj)
        bad.grid.axes = bad.grid.axes[::2]
        px.phase(bad)


def _tiny_run(name, axes, **over):
    small = {"data": {"d": 6, "n_test": 8}, "model": {"temperature": 1 / 6}, "optim": {"steps": 3}}
    small["sweep"] = {"trials": 2, "log_points": None, "log_every": 3, "seed": 3}
    for section, values in over.items():
        small[section] = {**small.get(section, {}), **values}
    return px.run(name, progress=False, axes=axes, **small)


def test_a_tiny_run_of_the_random_preset_starts_from_the_normal_init_and_reads_its_overlaps():
    r = _tiny_run(px.RANDOM, {"n_train": (6,)}, model={"init_scale": 2.0})
    Q = r.curves["param_Q"][0, 0]  # (trials, L_h, heads, d, r)
    assert Q.shape[-2:] == (6, 2)  # rank r = head_size = 2
    # reproducible per seed: Q(0) is a function of the seed and the trial alone (the sweep's init keys)
    k_init = rng.split(rng.seed(3))[1]
    teacher = ps.teachers(r.grid.points[0])
    for t in range(2):  # Q(0): the normal init's draw of that trial's key, entries N(0, σ₀²/d)
        key = jnp.asarray(rng.fold_in(k_init, t))
        want = init_params(key, 1, 6, init="normal", scale=2.0, key_query="tied", head_size=2, query="all")
        np.testing.assert_allclose(Q[t, 0, 0], want["Q"][0], rtol=1e-6)
        assert not np.allclose(Q[t, 0, 0, :, 0], teacher[t]) and not np.allclose(Q[t, 0, 0, :, 0], 6**-0.5)
    out = px.random_start(r)
    last = Q[:, -1, 0]  # (trials, d, r): the last snapshot
    want_m = np.linalg.norm(last.sum(axis=1), axis=-1) / 6  # ‖Qᵀ1‖/d, an r-vector's norm
    want_theta = np.linalg.norm(np.einsum("tdr,td->tr", last, teacher), axis=-1) / 6
    np.testing.assert_allclose(out["m"], [want_m.mean()], rtol=1e-5)
    np.testing.assert_allclose(out["theta"], [want_theta.mean()], rtol=1e-5)
    assert out["rank"] == 2 and np.all(np.isfinite(out["objective"])) and out["alpha"].tolist() == [1.0]


@pytest.mark.slow  # three compiled grid points (about 20 s on the shared 2-core machine)
def test_tiny_runs_of_the_phase_preset_pair_the_starts_and_both_figures_draw(tmp_path):
    axes = {"n_train": (6,), "omega": (0.6,), "start": ("semantic", "positional")}
    r = _tiny_run(px.PHASE, axes)
    p = px.phase(r)
    assert p["difference"].shape == (1, 1) and np.all(np.isfinite(p["difference"]))
    obj = r.curves[ps.OBJECTIVE][0, 0, 0, :, :, -1]  # (start, trials)
    assert p["difference"][0, 0] == pytest.approx((obj[0] - obj[1]).mean(), rel=1e-12)
    assert r.grid.points[0].data.omega == 0.6
    write_grid(r, tmp_path / "phase")  # the figure reads the folder as python -m figures does
    assert [path.suffix for path in plot_phase(tmp_path / "phase", tmp_path / "phase-fig")] == [
        ".png",
        ".pdf",
    ]
    letters = [t.get_text() for t in phase_figure(r).axes[0].texts]
    assert letters == [p["better"][0, 0][0].upper()]  # S or P: the lower objective's start
    random = _tiny_run(px.RANDOM, {"n_train": (6,)})
    (ax_ov, _) = random_figure(random).axes[:2]
    assert len(ax_ov.get_legend().get_texts()) == 2  # θ and m


def test_the_new_figures_are_registered_with_their_grids():
    for name in (px.PHASE, px.RANDOM):
        assert FIGURES[name].key() == resolve_grid(*grid_preset(name)).hash()


def test_the_singular_directions_of_a_split_q_point_at_q_star_and_at_one():
    rs = np.random.default_rng(2)
    teacher = rs.normal(size=(1, 8))
    one = np.ones(8) / np.sqrt(8)
    q = teacher[0] - (teacher[0] @ one) * one  # q* made orthogonal to 1: two clean directions
    Q = np.stack([3 * q / np.linalg.norm(q), one], axis=-1)[None]  # (trials, d, r = 2)
    c, s = np.cos(0.4), np.sin(0.4)
    semantic, positional = px.singular_cosines(Q @ np.array([[c, -s], [s, c]]), q[None])
    np.testing.assert_allclose(semantic, [[1.0, 0.0]], atol=1e-12)  # the larger direction: q*
    np.testing.assert_allclose(positional, [[0.0, 1.0]], atol=1e-12)  # the smaller: 1_d


def test_the_m_and_theta_of_a_rotated_rank_2_q_are_its_own():
    rs = np.random.default_rng(1)
    Q, teacher = rs.normal(size=(1, 1, 7, 2)), rs.normal(size=(1, 7))
    c, s = np.cos(0.7), np.sin(0.7)
    rotated = Q @ np.array([[c, -s], [s, c]])  # the same QQᵀ: the same model
    for a, b in zip(ps.overlaps(Q, teacher), ps.overlaps(rotated, teacher), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    m, theta = ps.overlaps(Q, teacher)
    W = Q[0, 0] @ Q[0, 0].T
    assert m[0, 0] == pytest.approx(np.sqrt(np.ones(7) @ W @ np.ones(7)) / 7, rel=1e-12)
    assert theta[0, 0] == pytest.approx(np.sqrt(teacher[0] @ W @ teacher[0]) / 7, rel=1e-12)
