"""The arithmetic floor of ``benchmarks.logging_cost``: its count of logged steps is mhsim's schedule,
and its FLOP totals add up from the three formulas (no torch needed)."""

from __future__ import annotations

import pytest

from benchmarks import logging_cost
from benchmarks.logging_cost import floor_ratio, forward_flops, logged_steps, run_flops, step_flops


@pytest.mark.parametrize("steps, every", [(1000, 1), (1000, 100), (250, 100), (7, 3), (5, 10)])
def test_logged_steps_is_mhsims_schedule(steps, every):
    from dynamics.cli.run import build_parser, config_from_args

    argv = ["--steps", str(steps), "--log-every", str(every)]
    assert logged_steps(steps, every) == len(config_from_args(build_parser().parse_args(argv)).steps)


def test_floor_is_the_ratio_of_run_totals():
    n, m, T, d, S = 100, 300, 10, 32, 1000
    step, test, train = step_flops(n, T, d, 1), forward_flops(m, T, d, 1), forward_flops(n, T, d, 1)
    dense, sparse = S + 1, logged_steps(S, 100)
    today = (S * step + dense * (test + train)) / (S * step + sparse * (test + train))
    fused = (S * step + dense * test + train) / (S * step + sparse * test + train)  # the last step's own
    assert floor_ratio(n, m, T, d, S, fused=False) == pytest.approx(today, rel=1e-12)
    assert floor_ratio(n, m, T, d, S, fused=True) == pytest.approx(fused, rel=1e-12)
    assert run_flops(n, m, T, d, 4, S, dense, False) == 4 * run_flops(n, m, T, d, 1, S, dense, False)
    assert 1 < floor_ratio(n, m, T, d, S, fused=True) < floor_ratio(n, m, T, d, S, fused=False)


@pytest.mark.parametrize("name", logging_cost.PRESETS)
def test_a_preset_as_flags_is_the_preset(name):
    """``preset_args`` spells a paper preset with the knobs' declared flags (it imported a flag
    table the command line no longer has, so every preset sweep of the benchmark failed): parsed,
    its data, model, optimiser and H are the preset's, with the steps set by ``sweep_args``."""
    from dynamics.cli.run import build_parser, config_from_args

    def config(args):
        return config_from_args(build_parser().parse_args(args)).config

    ours, ref = (
        config(logging_cost.sweep_args(name, 7, 2)),
        config(["--preset", name, "--steps", "7", "--trials", "2"]),
    )
    assert (ours.data, ours.model, ours.optim) == (ref.data, ref.model, ref.optim)
    assert (ours.sweep.heads, ours.sweep.trials, ours.optim.steps) == (ref.sweep.heads, 2, 7)


def test_every_timed_call_runs_into_an_empty_folder(tmp_path, monkeypatch):
    """``mhsim`` empties its folder before each call: ``alternate`` calls a setting again after its
    warm-up, and ``dynamics.run`` reuses a finished folder instead of running (no simulation phase,
    a wall time of nothing); the stand-in run sees no earlier results and its own are read back."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "results.json").write_text("{}")  # a finished earlier call
    seen = []

    def fake(cmd, cache=None):
        seen.append(sorted(p.name for p in out.iterdir()) if out.exists() else None)
        out.mkdir(exist_ok=True)
        (out / "curves.npz").write_bytes(b"12345")
        return {"phases": {"simulation": 1.0}}

    monkeypatch.setattr(logging_cost, "run_process", fake)
    r = logging_cost.mhsim(["--steps", "3"], out, tmp_path / "cache")
    assert seen == [None] and r["npz"] == 5
