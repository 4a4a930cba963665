"""The positional-semantic comparison at the paper's size, reduced: the chunked test error against
a per-example float64 reference and against the engine's own test loss, the tolerance, the paired
crossing's bootstrap, and the benchmark's reading of the authors' CSVs and its verdicts. (The
d = 1000 comparison itself takes hours on 2 CPU cores: benchmarks/positional_semantic_paper.py.)"""

from __future__ import annotations

from dataclasses import replace

import jax
import numpy as np
import pandas as pd
import pytest

from benchmarks import positional_semantic_paper as bench
from dynamics.config.grid_axes import grid_preset, resolve_grid
from dynamics.experiments import positional_semantic as ps
from dynamics.experiments import positional_semantic_paper as pp
from dynamics.sweeps.trials import every_trial


def test_the_tied_outputs_are_the_per_example_softmax_attention():
    rs = np.random.default_rng(0)
    X, Q = rs.normal(size=(3, 2, 5)), rs.normal(size=5)
    f = pp.tied_outputs(X, Q)
    for i in range(3):
        h = X[i] @ Q  # (T,)
        for s in range(2):
            w = np.exp(h[s] * h / 5)
            np.testing.assert_allclose(f[i, s], (w / w.sum()) @ X[i], rtol=1e-13)
    y = rs.normal(size=(3, 10))
    total, n = pp.mean_error(X, y, Q)
    assert n == 3 and total == pytest.approx(np.sum((y - f.reshape(3, 10)) ** 2) / 10, rel=1e-13)


@pytest.mark.slow  # compiles the data draw: 28 s on 2 shared cores
def test_the_chunked_test_error_is_the_mean_over_its_chunks_draws():
    cfg = resolve_grid(*grid_preset(ps.NAME)).points[0]
    cfg = replace(cfg, data=replace(cfg.data, d=6), sweep=replace(cfg.sweep, trials=2))
    world = pp.trial_worlds(cfg)[1]
    Q = np.random.default_rng(3).normal(size=6)
    key = pp.test_key(cfg.sweep.seed, 1)
    got = pp.test_error(world, Q, key, n_test=10, chunk=4)  # chunks of 4, 4, 2
    model = pp.data_model(cfg.data)
    total = 0.0
    for k, size in enumerate((4, 4, 2)):
        X, y, _ = model.sample(world, jax.random.fold_in(key, k), size)
        total += pp.mean_error(np.asarray(X), np.asarray(y), Q)[0]
    assert got == pytest.approx(total / 10, rel=1e-6)  # the chunks drawn jitted there
    assert pp.test_error(world, Q, key, n_test=10, chunk=3) != got  # other chunks: other draws
    assert pp.test_key(cfg.sweep.seed, 0).tolist() != key.tolist()  # a stream per trial


def test_the_tolerance_is_three_standard_errors_of_the_difference():
    assert pp.tolerance(0.1, 4) == pytest.approx(3 * np.sqrt(0.01 / 4 + 0.01 / 24))
    assert pp.tolerance(0.1, 24) == pytest.approx(3 * 0.1 * np.sqrt(2 / 24))
    assert pp.tolerance(0.1, 100) < pp.tolerance(0.1, 4)


def test_the_paired_crossing_and_its_bootstrap_spread():
    alphas = [1.0, 1.5, 2.0]
    exact = np.array([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])  # (A, trials), no spread
    out = pp.paired_crossing(alphas, exact)
    assert out["crossing"] == out["lo"] == out["hi"] == pytest.approx(1.25) and out["sd"] == 0.0
    rs = np.random.default_rng(0)
    noisy = exact + rs.normal(scale=0.8, size=exact.shape)
    spread = pp.paired_crossing(alphas, noisy)
    assert spread["crossing"] == pytest.approx(ps.crossing(alphas, noisy.mean(axis=1)))
    assert spread["hi"] > spread["lo"] and spread["sd"] > 0
    one_sign = pp.paired_crossing(alphas, np.abs(noisy) + 1)
    assert np.isnan(one_sign["crossing"]) and one_sign["none"] == 1.0


def _fake_checkout(tmp_path):
    """An ``empirics/`` folder with the authors' columns: one α, both starts, and a row of another ω."""
    rows = []
    for omega in (0.3, 0.5):
        for informed, base in ((True, 1.0), (False, 2.0)):
            row = {"d": 1000, "sigma": 0.5, "omega": omega, "attention_lmbda": 0.01, "alpha": 2.0}
            row |= {"informed": informed, "optim": "GD"}
            row |= {col: base + k + (omega == 0.5) * 100 for k, col in enumerate(bench.COLUMNS.values())}
            rows.append(row)
    (tmp_path / "empirics").mkdir()
    mean = pd.DataFrame(rows)
    std = mean.copy()
    for col in bench.COLUMNS.values():
        std[col] = 0.1
    mean.to_csv(tmp_path / "empirics" / "results_mean_standardA.csv", index=False)
    std.to_csv(tmp_path / "empirics" / "results_std_standardA.csv", index=False)
    return tmp_path


def test_the_benchmark_reads_the_authors_means_and_sds_and_gives_verdicts(tmp_path):
    theirs = bench.authors(_fake_checkout(tmp_path))
    assert set(theirs) == {(2.0, "semantic"), (2.0, "positional")}  # ω = 0.5 left out
    assert theirs[(2.0, "semantic")]["test_loss"] == [1.0, 0.1]
    assert theirs[(2.0, "positional")]["theta"] == [4.0, 0.1]  # the third column, base 2
    tol = float(pp.tolerance(0.1, 2))
    ours = {
        "semantic": {q: np.array([v, v]) for q, v in zip(pp.QUANTITIES, (1.0, 2.0, 3.0, 4.0), strict=True)},
        "positional": {q: np.array([v, v]) for q, v in zip(pp.QUANTITIES, (2.0, 3.0, 4.0, 5.0), strict=True)},
    }
    lines, ok = bench.table([2.0], [ours], theirs)
    assert ok and sum("PASS" in line for line in lines) == 6  # test error, m, θ of both starts
    ours["positional"]["m"] = np.array([3.0, 3.0]) + 1.01 * tol  # just outside
    lines, ok = bench.table([2.0], [ours], theirs)
    assert not ok and [line for line in lines if "FAIL" in line][0].startswith("| 2.0000 | positional | m |")
    ours["positional"]["m"] = np.array([3.0, 3.0]) + 0.99 * tol  # just inside
    assert bench.table([2.0], [ours], theirs)[1]


@pytest.mark.slow  # two compiled grid points
def test_the_chunked_error_on_the_engines_test_set_is_its_test_loss_and_simulate_reads_the_last_step():
    d = 6
    small = {"data": {"n_test": 16}, "optim": {"steps": 8}, "sweep": {"trials": 2, "log_points": 2}}
    r = ps.run(progress=False, axes={"n_train": (9,), "start": ps.STARTS}, d=d, baseline=False, **small)
    for s in range(2):
        for t, data in enumerate(every_trial(r.grid.points[s])):
            Q = np.asarray(r.curves["param_Q"][0, 0, s, t, -1, 0, :, 0], np.float64)  # the final Q (d,)
            total, n = pp.mean_error(data.X_test, data.y_test, Q)
            assert total / n == pytest.approx(r.curves["test_loss"][0, 0, s, t, -1], rel=1e-5)
    out = pp.simulate([1.5], trials=2, d=d, steps=8, n_test=40, chunk=16)
    assert out["n"].tolist() == [9] and out["semantic"]["m"].shape == (1, 2)
    # the same runs (training set, teacher and start do not depend on the engine's test set)
    np.testing.assert_allclose(
        out["positional"]["theta"][0], r.curves[ps.THETA_SEMANTIC][0, 0, 1, :, -1], rtol=1e-6
    )
    np.testing.assert_allclose(
        out["semantic"]["objective"][0], r.curves[ps.OBJECTIVE][0, 0, 0, :, -1], rtol=1e-6
    )
    assert np.all(np.isfinite(out["semantic"]["test_loss"])) and np.all(out["semantic"]["test_loss"] > 0)


@pytest.mark.slow  # four compiled grid points
def test_the_benchmark_runs_each_seed_once_keeps_it_and_compares_all_trials(tmp_path, monkeypatch, capsys):
    """``--seeds 0 1``: seed 0 in alpha-<n>.npz, seed 1 in alpha-<n>-seed1.npz, other trials; a
    rerun reads both files and simulates nothing; the table counts k = trials × seeds."""
    checkout, out = _fake_checkout(tmp_path), tmp_path / "runs"
    argv = [str(checkout), "--out", str(out), "--trials", "1", "--alphas", "1.5", "2", "--d", "6",
            "--steps", "4", "--n-test", "10", "--chunk", "5", "--seeds", "0", "1"]  # fmt: skip
    bench.main(argv)
    assert sorted(p.name for p in out.iterdir()) == [
        "alpha-12-seed1.npz", "alpha-12.npz", "alpha-9-seed1.npz", "alpha-9.npz"
    ]  # fmt: skip
    with np.load(out / "alpha-9.npz") as a, np.load(out / "alpha-9-seed1.npz") as b:
        assert not np.array_equal(a["semantic/theta"], b["semantic/theta"])  # other data, other teacher
    first = capsys.readouterr().out
    assert "k = 2 (seeds [0, 1])" in first and "± " in first  # two trials: a spread
    monkeypatch.setattr(pp, "simulate", lambda *a, **k: pytest.fail("a kept seed was simulated again"))
    bench.main(argv)
    assert capsys.readouterr().out.split("d = 6")[1] == first.split("d = 6")[1]
    with pytest.raises(SystemExit):
        bench.main([*argv[:-2], "1", "1"])  # a seed twice


def test_a_tied_head_is_estimated_through_its_factor_so_the_papers_size_is_not_refused():
    """The grid's time check and the long-run estimate count a tied Q_h Q_hᵀ scored through its
    factor (T·d·r per token), not d² per token: the paper's point at α = 2 with two trials (two
    starts, 5000 steps) is minutes of CPU, not the 33 h a d² count gave (over the 24 h limit)."""
    from dynamics import parts
    from dynamics.config.grid_axes import MAX_HOURS, estimate, grid_preset, resolve_grid
    from dynamics.config.schema import apply_overrides

    assert parts.tied_head_flops("all", "full", 1, 1000, 2, 1) is None  # a free W: the d² count
    assert parts.tied_head_flops("all", "factored", 1, 1000, 2, 1) is None
    assert parts.tied_head_flops("learned", "tied", 1, 1000, 2, 1) is None  # not scored by Q
    # rank 1, T = 2 tokens all querying: 4·(T·d·r + T²·r + T²·d)
    assert parts.tied_head_flops("all", "tied", 1, 1000, 2, 1) == 4.0 * (2000 + 4 + 4000)
    assert parts.tied_head_flops("first", "tied", 3, 10, 5, 1) == 4.0 * (5 * 10 * 3 + 5 * 3 + 5 * 10)

    def hours(d):
        cfg, _ = grid_preset(ps.NAME)
        sizes = {"data": {"d": d, "n_test": 8}, "model": {"temperature": 1 / d}}
        sizes |= {"optim": {"steps": 5000, "lr": 0.15}, "sweep": {"trials": 2, "log_points": 2}}
        cfg = apply_overrides(cfg, sizes, "test")
        return estimate(resolve_grid(cfg, {"n_train": (2000,), "start": ps.STARTS}))[1]

    assert hours(1000) < 1 < MAX_HOURS
    assert hours(2000) / hours(1000) < 2.1  # linear in d (a d² count: 4)


def test_every_time_estimate_reads_one_head_count():
    """``parts.head_flops`` is the one FLOP count: the long-run estimate is steps × (slots × n ×
    head_flops / rate + floor), the grid's 1.5 × head_flops per example and head-step; where every
    token queries a free W_h costs T·d² per example, not d² (an all-token grid was estimated T
    times too fast), and a tied key-query its factor's count."""
    from dynamics import parts

    d, T = 32, 10
    assert parts.head_flops("first", "full", None, d, T, 4) == 4.0 * (d * d + 2 * T * d + T)
    assert parts.head_flops("all", "full", None, d, T, 4) == 4.0 * (T * d * d + T * T * d + T * d + T * T)
    assert parts.head_flops("all", "tied", 1, d, T, 1) == parts.tied_head_flops("all", "tied", 1, d, T, 1)
    for query in parts.QUERIES.names:
        assert parts.head_flops(query, "full", None, d, T, 2) > 0
